"""Notebook 06's explorer: the whole multi-head self-attention block, with heads, causal
masking and RoPE switched from the controls. Same sentence and seeded module as notebook 04's
:func:`~mhsa_helpers.lessons.multi_head_attention.heads_explorer`, both from
:mod:`mhsa_helpers.teaching.heads_explorer`."""

from __future__ import annotations

import ipywidgets as widgets
import numpy as np
import torch

from ...checks import expect_bool, expect_int, expect_number
from ...teaching.explorer import SLIDER, Explorer, divisors, log_slider, set_options, to_numpy
from ...teaching.figures import SCORES_CMAP, HeadGrid, Heatmap
from ...teaching.heads_explorer import (
    HEADS_SENTENCE,
    expect_d_model,
    expect_num_heads,
    heads_columns,
    heads_figsize,
    heads_inputs,
    heads_rows,
    seeded_module,
)

__all__ = ["mhsa_explorer"]


def base_label(rope: bool) -> str:
    """The RoPE base slider's label: a disabled slider says why it is off."""
    return "RoPE base" if rope else "RoPE base (off: tick RoPE)"


class _MHSAExplorer(Explorer):
    options_controls = ("rope",)  # RoPE needs an even d_head, so it narrows the head counts
    figsize = (8.5, 3.9)
    one_row_height = 3.1

    def __init__(self, d_model: int, num_heads: int, seq_len: int, rope: bool, base: float, causal: bool) -> None:
        self.d_model = d_model
        self.tokens, self.inputs = heads_inputs(d_model)
        rope_possible = bool(self._head_options(True))
        controls = {
            "num_heads": widgets.SelectionSlider(
                options=self._head_options(rope), value=num_heads, description="heads", **SLIDER
            ),
            "seq_len": widgets.IntSlider(value=seq_len, min=1, max=len(self.tokens), description="seq_len", **SLIDER),
            "causal": widgets.Checkbox(value=causal, description="causal", indent=False),
            "rope": widgets.Checkbox(value=rope, description="RoPE", indent=False, disabled=not rope_possible),
            "base": log_slider("RoPE base", base, 1.0, 6.0, 0.1, ",.0f"),
        }
        controls["base"].disabled = not rope
        controls["base"].description = base_label(rope)
        super().__init__(controls, title=f"Multi-head self-attention, d_model = {d_model}")

    def _head_options(self, rope: bool) -> list[int]:
        return [h for h in divisors(self.d_model) if not rope or (self.d_model // h) % 2 == 0]

    def _sync(self, changed):
        if changed == "rope":
            rope = self.controls["rope"].value
            options = self._head_options(rope)
            current = self.controls["num_heads"].value
            # Keep the head count if RoPE allows it, else the nearest count that gives an even d_head.
            value = current if current in options else min(options, key=lambda h: (abs(h - current), h))
            set_options(self.controls["num_heads"], options, value)
            self.controls["base"].disabled = not rope
            self.controls["base"].description = base_label(rope)

    def _check(self, values):
        expect_bool("causal", values["causal"])
        expect_num_heads("num_heads", values["num_heads"], self.d_model, rope=expect_bool("rope", values["rope"]))
        expect_int("seq_len", values["seq_len"], 1, len(self.tokens), f" (words of {HEADS_SENTENCE!r})")
        expect_number("base", values["base"], 10.0, 1e6)

    def _compute(self, values):
        heads, n, rope, causal = values["num_heads"], values["seq_len"], bool(values["rope"]), bool(values["causal"])
        base = float(values["base"])
        module = seeded_module(
            self.d_model, heads, causal=causal, rope_base=base if rope else None, rope_len=len(self.tokens)
        )
        with torch.no_grad():
            output, weights = module(self.inputs[:n], need_weights=True)
        return {
            "tokens": list(self.tokens[:n]),
            "num_heads": heads,
            "seq_len": n,
            "d_head": self.d_model // heads,
            "rope": rope,
            "base": base,
            "causal": causal,
            "weights": to_numpy(weights),
            "output": to_numpy(output),
        }

    def _layout(self, data):
        return data["num_heads"], data["seq_len"]

    def _figsize(self, data):
        width, height = heads_figsize(self.figsize, data["num_heads"])
        if heads_rows(data["num_heads"]) == 1 and heads_columns(data["num_heads"]) >= 3:
            # One row of three or more square panels is short: a lower figure, not a blank band under it.
            height = self.one_row_height
        return width, height

    def _build(self, fig, data):
        grid = HeadGrid(
            fig,
            data["weights"],
            tokens=data["tokens"],
            ncols=heads_columns(data["num_heads"]),
            title="attention weights per head",
            rect=(0.0, 0.0, 0.7, 1.0),
            annotate="none",
            colorbar="attention weight",
        )
        ax = fig.add_axes((0.8, 0.22, 0.12, 0.62))
        output = Heatmap(
            ax,
            data["output"],
            row_labels=data["tokens"],
            col_labels=None,
            cmap=SCORES_CMAP,
            vmin=None,
            vmax=None,
            annotate=False,
            fontsize=7,
            show_cols=False,
            colorbar="value (white = 0)",
        )
        # A (seq, d_model) block is wide: let it fill its slot, with the colour bar beside it.
        ax.set_aspect("auto")
        ax.set_position((0.8, 0.22, 0.12, 0.62))
        output.colorbar.ax.set_position((0.935, 0.22, 0.012, 0.62))  # type: ignore[union-attr]  # drawn with one
        ax.set_title("output (seq, d_model)", fontsize=8)
        return grid, output

    def _update(self, artists, data):
        grid, output = artists
        grid.set_values(data["weights"])
        bound = float(np.abs(data["output"]).max()) or 1.0
        output.set_range(-bound, bound)
        output.set_values(data["output"])
        rope = f"RoPE base {data['base']:,.0f}" if data["rope"] else "no RoPE"
        grid.title.set_text(f"attention weights per head ({rope}, {'causal' if data['causal'] else 'not causal'})")

    def _dynamic(self, artists):
        grid, output = artists
        return [*grid.dynamic(), *output.dynamic(), grid.title]

    def _caption_text(self, data):
        rope = f"RoPE base {data['base']:,.0f}" if data["rope"] else "no RoPE"
        return (
            f"{data['num_heads']} heads, seq {data['seq_len']} · d_head {data['d_head']} · {rope} · "
            f"{'causal' if data['causal'] else 'not causal'} · {data['panels'] - 1} heatmaps + output"
        )


def mhsa_explorer(
    d_model: int = 16,
    *,
    num_heads: int = 4,
    seq_len: int = 6,
    rope: bool = True,
    base: float = 10000.0,
    causal: bool = True,
) -> Explorer:
    """The whole block: :class:`MultiHeadSelfAttention` ``(d_model, num_heads, causal=, rope=, rope_base=)``
    (built right after ``torch.manual_seed(MODEL_SEED)``, eval mode) on the first ``seq_len`` words of
    "The man saw the astronomer with the telescope" (the inputs of :func:`heads_explorer`).

    With RoPE on, ``num_heads`` offers only counts that leave an even ``d_head``.
    data: ``tokens``, ``weights`` (num_heads, seq_len, seq_len), ``output`` (seq_len, d_model).
    """
    d_model = expect_d_model(d_model)
    rope = expect_bool("rope", rope)
    causal = expect_bool("causal", causal)
    num_heads = expect_num_heads("num_heads", num_heads, d_model, rope=rope)
    expect_int("seq_len", seq_len, 1, len(HEADS_SENTENCE.split()), f" (words of {HEADS_SENTENCE!r})")
    expect_number("base", base, 10.0, 1e6)
    return _MHSAExplorer(d_model, num_heads, int(seq_len), rope, float(base), causal)
