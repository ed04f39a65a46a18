"""Notebook 04's explorer: the attention weights of every head as ``d_model`` is split into
more or fewer heads, one head framed.

Its sentence, inputs and seeded module come from :mod:`mhsa_helpers.teaching.heads_explorer`, shared with
notebook 06's explorer (:mod:`mhsa_helpers.lessons.causal_mhsa_with_rope.explorer`), so that both draw the
same sentence through the same projections.
"""

from __future__ import annotations

import ipywidgets as widgets
import torch

from ...checks import expect_int
from ...teaching.explorer import SLIDER, Explorer, divisors, set_options, to_numpy
from ...teaching.figures import HeadGrid
from ...teaching.heads_explorer import (
    HEADS_SENTENCE,
    expect_d_model,
    expect_num_heads,
    heads_columns,
    heads_figsize,
    heads_inputs,
    seeded_module,
)

__all__ = ["heads_explorer"]


class _HeadsExplorer(Explorer):
    figsize = (7.5, 3.9)

    def __init__(self, d_model: int, num_heads: int, seq_len: int, head: int) -> None:
        self.d_model = d_model
        self.tokens, self.inputs = heads_inputs(d_model)
        controls = {
            "num_heads": widgets.SelectionSlider(
                options=divisors(d_model), value=num_heads, description="heads", **SLIDER
            ),
            "seq_len": widgets.IntSlider(value=seq_len, min=1, max=len(self.tokens), description="seq_len", **SLIDER),
            # A selection slider, not a dropdown: arrow keys move it, not JupyterLab's cell selection.
            "head": widgets.SelectionSlider(
                options=[(f"head {i}", i) for i in range(1, num_heads + 1)], value=head, description="framed", **SLIDER
            ),
        }
        super().__init__(controls, title=f"Splitting d_model = {d_model} into heads")

    def _sync(self, changed):
        if changed == "num_heads":
            heads = self.controls["num_heads"].value
            head = min(self.controls["head"].value, heads)
            set_options(self.controls["head"], [(f"head {i}", i) for i in range(1, heads + 1)], head)

    def _check(self, values):
        expect_num_heads("num_heads", values["num_heads"], self.d_model)
        expect_int("seq_len", values["seq_len"], 1, len(self.tokens), f" (words of {HEADS_SENTENCE!r})")
        expect_int("head", values["head"], 1, values["num_heads"], " (one of the heads)")

    def _compute(self, values):
        heads, n = values["num_heads"], values["seq_len"]
        module = seeded_module(self.d_model, heads)
        with torch.no_grad():
            output, weights = module(self.inputs[:n], need_weights=True)
        return {
            "tokens": list(self.tokens[:n]),
            "num_heads": heads,
            "seq_len": n,
            "d_head": self.d_model // heads,
            "head": values["head"],
            "weights": to_numpy(weights),
            "output": to_numpy(output),
            "head_weights": to_numpy(weights[values["head"] - 1]),
        }

    def _layout(self, data):
        return data["num_heads"], data["seq_len"]

    def _figsize(self, data):
        return heads_figsize(self.figsize, data["num_heads"])

    def _build(self, fig, data):
        return HeadGrid(
            fig,
            data["weights"],
            tokens=data["tokens"],
            ncols=heads_columns(data["num_heads"]),
            title="attention weights of each head (rows: queries, columns: keys)",
            annotate="highlight",
            colorbar="attention weight",
        )

    def _update(self, grid, data):
        grid.set_values(data["weights"], highlight=data["head"] - 1)

    def _dynamic(self, grid):
        return grid.dynamic()

    def _caption_text(self, data):
        return (
            f"{data['num_heads']} heads, seq {data['seq_len']} · d_head {data['d_head']} · "
            f"{data['panels']} heatmaps · head {data['head']} framed"
        )


def heads_explorer(d_model: int = 12, *, num_heads: int = 2, seq_len: int = 6, head: int = 1) -> Explorer:
    """The attention weights of every head of :class:`MultiHeadSelfAttention` ``(d_model, num_heads)``
    (built right after ``torch.manual_seed(MODEL_SEED)``, eval mode) on the first ``seq_len`` words of
    "The man saw the astronomer with the telescope" (inputs
    ``INPUT_SCALE * sentence_embeddings(HEADS_SENTENCE, d_model, seed=MODEL_SEED)[1]``).

    ``num_heads`` offers only the divisors of ``d_model``; ``head`` (1-based) frames one head.
    data: ``tokens``, ``weights`` (num_heads, seq_len, seq_len), ``head_weights`` (seq_len, seq_len),
    ``output`` (seq_len, d_model).
    """
    d_model = expect_d_model(d_model)
    num_heads = expect_num_heads("num_heads", num_heads, d_model)
    expect_int("seq_len", seq_len, 1, len(HEADS_SENTENCE.split()), f" (words of {HEADS_SENTENCE!r})")
    expect_int("head", head, 1, num_heads, " (one of the heads)")
    return _HeadsExplorer(d_model, num_heads, int(seq_len), int(head))
