"""Notebook 04's explorer: the attention weights of every head as ``d_model`` is split into
more or fewer heads, one head framed."""

from __future__ import annotations

import ipywidgets as widgets
import torch

from ..checks import check_int
from ..plots.attention import _HeadGrid
from .base import (
    HEADS_SENTENCE,
    _SLIDER,
    Explorer,
    _check_d_model,
    _check_heads,
    _divisors,
    _heads_columns,
    _heads_inputs,
    _numpy,
    _seeded_module,
    _set_options,
)

__all__ = ["heads_explorer"]


class _HeadsExplorer(Explorer):
    figsize = (7.5, 3.9)

    def __init__(self, d_model: int, num_heads: int, seq_len: int, head: int) -> None:
        self.d_model = d_model
        self.tokens, self.inputs = _heads_inputs(d_model)
        controls = {
            "num_heads": widgets.SelectionSlider(options=_divisors(d_model), value=num_heads, description="heads",
                                                 **_SLIDER),
            "seq_len": widgets.IntSlider(value=seq_len, min=1, max=len(self.tokens), description="seq_len", **_SLIDER),
            "head": widgets.Dropdown(options=[(f"head {i}", i) for i in range(1, num_heads + 1)], value=head,
                                     description="framed", style={"description_width": "initial"}),
        }
        super().__init__(controls, title=f"Splitting d_model = {d_model} into heads")

    def _sync(self, changed):
        if changed == "num_heads":
            heads = self.controls["num_heads"].value
            head = min(self.controls["head"].value, heads)
            _set_options(self.controls["head"], [(f"head {i}", i) for i in range(1, heads + 1)], head)

    def _check(self, values):
        _check_heads("num_heads", values["num_heads"], self.d_model)
        check_int("seq_len", values["seq_len"], 1, len(self.tokens), f" (words of {HEADS_SENTENCE!r})")
        check_int("head", values["head"], 1, values["num_heads"], " (one of the heads)")

    def _compute(self, values):
        heads, n = values["num_heads"], values["seq_len"]
        module = _seeded_module(self.d_model, heads)
        with torch.no_grad():
            output, weights = module(self.inputs[:n], need_weights=True)
        return {
            "tokens": list(self.tokens[:n]), "num_heads": heads, "seq_len": n, "d_head": self.d_model // heads,
            "head": values["head"], "weights": _numpy(weights), "output": _numpy(output),
            "head_weights": _numpy(weights[values["head"] - 1]),
        }

    def _layout(self, data):
        return data["num_heads"], data["seq_len"]

    def _build(self, fig, data):
        return _HeadGrid(fig, data["weights"], tokens=data["tokens"], ncols=_heads_columns(data["num_heads"]),
                         title="attention weights of each head (rows: queries, columns: keys)", annotate="highlight")

    def _update(self, grid, data):
        grid.set_values(data["weights"], highlight=data["head"] - 1)

    def _dynamic(self, grid):
        return grid.dynamic()

    def _caption_text(self, data):
        return (f"{data['num_heads']} heads, seq {data['seq_len']} · d_head {data['d_head']} · "
                f"{data['panels']} heatmaps · head {data['head']} framed")


def heads_explorer(d_model: int = 12, *, num_heads: int = 2, seq_len: int = 6, head: int = 1) -> Explorer:
    """The attention weights of every head of :class:`MultiHeadSelfAttention` ``(d_model, num_heads)``
    (built right after ``torch.manual_seed(MODEL_SEED)``, eval mode) on the first ``seq_len`` words of
    "The man saw the astronomer with the telescope" (inputs
    ``INPUT_SCALE * sentence_embeddings(HEADS_SENTENCE, d_model, seed=MODEL_SEED)[1]``).

    ``num_heads`` offers only the divisors of ``d_model``; ``head`` (1-based) frames one head.
    data: ``tokens``, ``weights`` (num_heads, seq_len, seq_len), ``head_weights`` (seq_len, seq_len),
    ``output`` (seq_len, d_model).
    """
    d_model = _check_d_model(d_model)
    num_heads = _check_heads("num_heads", num_heads, d_model)
    check_int("seq_len", seq_len, 1, len(HEADS_SENTENCE.split()), f" (words of {HEADS_SENTENCE!r})")
    check_int("head", head, 1, num_heads, " (one of the heads)")
    return _HeadsExplorer(d_model, num_heads, int(seq_len), int(head))
