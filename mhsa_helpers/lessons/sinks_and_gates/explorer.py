"""Notebook 12's explorer: one real row of attention scores — layer 1, head 2 of notebook 07's trained model (the
shipped weights at step 320) — and a sink logit ``s`` to slide. The keys keep ``softmax(scores) · σ(LSE − s)``: every
bar shrinks by the same factor, their ratios never change, and the sink takes the rest.

The query and key vectors of the row are read off the model once, when the explorer is made; each move computes the
kept weights with the package's :func:`~mhsa_helpers.attention.scaled_dot_product_attention` (``sink=``).
"""

from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

import ipywidgets as widgets
import numpy as np
import torch

from ...attention import attention_scores, scaled_dot_product_attention
from ...checks import expect_choice, expect_number
from ...heads import split_heads
from ...mha import MultiHeadSelfAttention
from ...rope import apply_rotary
from ...teaching.explorer import SLIDER, Explorer, to_numpy
from ...teaching.induction.checkpoints import load_checkpoints
from ...teaching.induction.task import BOS
from ...teaching.induction.training import evaluation_batch
from .diagrams import SINK_COLOR

__all__ = [
    "EXPLORER_HEAD",
    "EXPLORER_POSITIONS",
    "EXPLORER_QUERIES",
    "SINK_RANGE",
    "SinkRow",
    "explorer_rows",
    "sink_explorer",
]

#: The head the explorer reads: layer 1, head 2 of the shipped model, one of its induction heads.
EXPLORER_HEAD = (1, 2)
#: The sink logit's slider: lowest, highest, step.
SINK_RANGE = (-2.0, 14.0, 0.5)
#: The query position each choice shows in the example sequence (BOS, then a chunk of 15 tokens at positions 1-15,
#: repeated at 16-30): ``"idle"`` before the second copy (nothing to copy: the head puts 0.999 on BOS), ``"working"``
#: in it (its token occurs once in the chunk, at position 4: the head puts 0.87 on position 5, the token to copy,
#: and 0.11 on BOS).
EXPLORER_POSITIONS = {"idle": 10, "working": 19}
EXPLORER_QUERIES = tuple(EXPLORER_POSITIONS)
_KEPT_COLOR = "#6baed6"
_BOS_COLOR = "#2171b5"


class SinkRow(NamedTuple):
    """One query of the example sequence for the explorer's head: its position ``t``, the tokens it sees
    ``tokens (t + 1,)``, its query ``q (1, d_head)`` and the keys and values it sees, ``k, v (t + 1, d_head)``
    (queries and keys rotated by RoPE, as the layer uses them)."""

    position: int
    tokens: tuple[int, ...]
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor


@functools.cache
@torch.no_grad()
def explorer_rows() -> dict[str, SinkRow]:
    """The explorer's two rows (``"idle"``, ``"working"``) of layer 1, head 2 of notebook 07's shipped model at its last
    step, on the sequence notebook 07's explorer draws (the evaluation batch's row with the longest chunk). Computed
    once and kept."""
    shipped = load_checkpoints()
    model = shipped.model_at(shipped.steps[-1])
    batch = evaluation_batch(shipped.config)
    row = int(torch.argmax(batch.repeat_len))  # the first sequence with the longest chunk, as notebook 07's explorer
    tokens = batch.tokens[row : row + 1]  # (1, seq)
    layer_index, head = EXPLORER_HEAD
    layer = model.layers[layer_index]
    if not isinstance(layer, MultiHeadSelfAttention) or layer.rope is None:
        raise TypeError(f"the shipped model's layers must be the package's attention with RoPE, got {layer!r:.60}")
    seen: dict[str, torch.Tensor] = {}
    hook = layer.register_forward_pre_hook(lambda module, args: seen.__setitem__("x", args[0]))
    try:
        model(tokens)
    finally:
        hook.remove()
    x = seen["x"]  # (1, seq, d_model): the residual stream entering layer 1
    # The layer's own projections and rotation, as its forward applies them.  (1, heads, seq, d_head) each
    q, k, v = layer.qkv_proj(x).split((layer.d_model, layer.kv_dim, layer.kv_dim), dim=-1)
    q, k, v = (split_heads(t, layer.num_heads) for t in (q, k, v))
    cos, sin = layer.rope.angles_at(0, x.shape[-2])
    q, k = apply_rotary(q, cos, sin, layer.rope.convention), apply_rotary(k, cos, sin, layer.rope.convention)
    return {
        name: SinkRow(
            t,
            tuple(int(i) for i in tokens[0, : t + 1]),
            q[0, head, t : t + 1],
            k[0, head, : t + 1],
            v[0, head, : t + 1],
        )
        for name, t in EXPLORER_POSITIONS.items()
    }


def _key_labels(tokens: tuple[int, ...]) -> list[str]:
    return ["BOS" if i == 0 and token == BOS else str(i) for i, token in enumerate(tokens)]


class _SinkExplorer(Explorer):
    figsize = (8.6, 3.7)

    def __init__(self, sink: float, query: str) -> None:
        self.rows = explorer_rows()
        low, high, step = SINK_RANGE
        controls = {
            "sink": widgets.FloatSlider(
                value=sink, min=low, max=high, step=step, description="sink logit s", readout_format=".1f", **SLIDER
            ),
            "query": widgets.ToggleButtons(
                options=[("idle: before the copy", "idle"), ("working: in the copy", "working")],
                value=query,
                description="query",
                style={"button_width": "150px"},
            ),
        }
        super().__init__(controls, title="One head's sink: what the keys keep, what the sink takes")

    def _check(self, values: dict[str, Any]) -> None:
        low, high, _ = SINK_RANGE
        expect_number("sink", values["sink"], low, high)
        expect_choice("query", values["query"], EXPLORER_QUERIES)

    def _compute(self, values: dict[str, Any]) -> dict[str, Any]:
        row = self.rows[values["query"]]
        s = float(values["sink"])
        _, plain = scaled_dot_product_attention(row.q, row.k, row.v, need_weights=True)
        sink = torch.tensor(s, dtype=row.q.dtype)
        _, kept = scaled_dot_product_attention(row.q, row.k, row.v, need_weights=True, sink=sink)
        lse = float(torch.logsumexp(attention_scores(row.q, row.k)[0], dim=0))
        kept_np, plain_np = to_numpy(kept[0]), to_numpy(plain[0])
        return {
            "query": values["query"],
            "position": row.position,
            "labels": _key_labels(row.tokens),
            "sink": s,
            "plain": plain_np,
            "kept": kept_np,
            "kept_total": float(kept_np.sum()),
            "sink_share": float(1.0 - kept_np.sum()),
            "lse": lse,
            "sigmoid": 1.0 / (1.0 + math.exp(s - lse)),
        }

    def _layout(self, data: dict[str, Any]) -> str:
        return data["query"]

    def _build(self, fig, data):
        ax = fig.add_axes((0.08, 0.19, 0.9, 0.6))
        n = len(data["kept"])
        xs = np.arange(n)
        colors = [_BOS_COLOR if label == "BOS" else _KEPT_COLOR for label in data["labels"]]
        kept_bars = ax.bar(xs, data["kept"], width=0.75, color=colors, label="kept weight (with the sink)")
        # The plain softmax (no sink) as outlines: each filled bar is the same fraction of its outline.
        ax.bar(
            xs, data["plain"], width=0.75, fill=False, edgecolor="black", linewidth=0.8, linestyle="--",
            label="softmax without a sink",
        )  # fmt: skip
        sink_x = n + 0.8
        (sink_bar,) = ax.bar([sink_x], [data["sink_share"]], width=0.75, color=SINK_COLOR, label="the sink's share")
        ax.axvline(n - 0.1, color="0.6", linewidth=0.8)
        ax.set_xticks([*xs, sink_x], [*data["labels"], "sink"], fontsize=7)
        ax.set_xlim(-0.7, sink_x + 0.7)
        # Fixed: a move changes the bars, never the axis.
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("attention weight", fontsize=8)
        ax.set_xlabel("key position (the keys this query sees)", fontsize=8)
        ax.tick_params(axis="y", labelsize=7)
        ax.grid(True, axis="y", alpha=0.3)
        what = "before the second copy: nothing to copy" if data["query"] == "idle" else "in the second copy: it copies"
        layer, head = EXPLORER_HEAD
        ax.set_title(
            f"notebook 07's model, layer {layer}, head {head}, query at position {data['position']} ({what})",
            fontsize=9,
            pad=20,
        )
        # Above the axes, where no bar can reach.
        ax.legend(fontsize=7, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3, frameon=False)
        sink_text = ax.text(sink_x, 0.0, "", ha="center", va="bottom", fontsize=8)
        return kept_bars, sink_bar, sink_text

    def _update(self, artists, data):
        kept_bars, sink_bar, sink_text = artists
        for bar, value in zip(kept_bars, data["kept"], strict=True):
            bar.set_height(value)
        sink_bar.set_height(data["sink_share"])
        sink_text.set_y(data["sink_share"] + 0.01)
        sink_text.set_text(f"{data['sink_share']:.2f}")

    def _dynamic(self, artists):
        kept_bars, sink_bar, sink_text = artists
        return [*kept_bars, sink_bar, sink_text]

    def _caption_text(self, data: dict[str, Any]) -> str:
        s = f"{data['sink']:.1f}" if data["sink"] >= 0 else f"({data['sink']:.1f})".replace("-", "−")
        return (
            f"s = {data['sink']:.1f}: the keys keep {data['kept_total']:.3f} of the row = σ(LSE − s) = "
            f"σ({data['lse']:.2f} − {s}) = {data['sigmoid']:.3f}; the sink takes {data['sink_share']:.3f}. "
            f"Every kept weight is {data['kept_total']:.3f} × its softmax without a sink (dashed)."
        )


def sink_explorer(*, sink: float = 9.0, query: str = "idle") -> Explorer:
    """Slide one sink logit under a real row of attention scores (layer 1, head 2 of notebook 07's trained model) and
    watch the keys keep ``softmax(scores) · σ(LSE − s)``. ``query`` is ``"idle"`` (before the second copy) or
    ``"working"`` (inside it). data: ``kept`` and ``plain`` (``(t + 1,)``, with and without the sink), ``kept_total``,
    ``sink_share``, ``lse`` (the row's log-sum-exp), ``sigmoid`` (``σ(lse − s)``), ``position``, ``labels``."""
    low, high, _ = SINK_RANGE
    expect_number("sink", sink, low, high)
    expect_choice("query", query, EXPLORER_QUERIES)
    return _SinkExplorer(float(sink), query)
