"""Notebook 06's schematic diagram: decoding with a key/value cache — the cache holds the keys and
values of the past tokens (already rotated), the new tokens' keys and values are appended, and the
new queries attend to past and new keys through a causal mask aligned to the last key."""

from __future__ import annotations

from matplotlib.figure import Figure

from ...checks import expect_int
from ...teaching.diagrams import Canvas

__all__ = ["kv_cache_diagram", "transformer_block_diagram"]


def kv_cache_diagram(past: int = 5, new: int = 2) -> Figure:
    """``past`` cached positions (grey) and ``new`` tokens (orange): the keys after appending,
    ``(past + new)`` columns at RoPE positions ``0 .. past + new - 1``; the ``(new, past + new)``
    score rectangle of the new queries, with the keys after each query blocked
    (``tril(diagonal=past)``)."""
    past = expect_int("past", past, 0, 12)
    new = expect_int("new", new, 1, 6)
    total = past + new
    canvas = Canvas(
        width=total + 13, height=new + 8.0, title=f"decoding {new} new token(s) after {past} cached", scale=0.5
    )
    keys = canvas.tensor(
        "cache: K (and V)",
        rows=1,
        cols=total,
        at=(5.0, new + 4.6),
        cell_colors=[["past"] * past + ["new"] * new],
        values=[[str(j) for j in range(total)]],
        shape=f"positions 0..{total - 1}: {past} cached, {new} appended",
    )
    visible = [[j <= past + i for j in range(total)] for i in range(new)]
    scores = canvas.tensor(
        "scores of the new queries",
        rows=new,
        cols=total,
        at=(5.0, 1.0),
        cell_colors=[["scores" if ok else "blocked" for ok in row] for row in visible],
        values=[["" if ok else "−∞" for ok in row] for row in visible],
        row_labels=[f"query at {past + i}" for i in range(new)],
        shape=f"({new}, {past + new}): the mask is tril(diagonal={past})",
    )
    start = (keys.center[0], keys.y - 0.9)
    canvas.arrow(start, (start[0], scores.y + scores.height + 0.6))
    canvas.text(
        "each new query sees the cache and\nthe new tokens up to itself",
        at=(start[0] + 0.4, start[1] - 0.5),
        ha="left",
        size=8,
    )
    canvas.text(
        "rotated once, when appended;\nnever rotated again",
        at=(keys.x + total + 0.3, keys.center[1]),
        ha="left",
        size=8,
    )
    return canvas.figure


def transformer_block_diagram() -> Figure:
    """A pre-norm Transformer block, bottom to top: the residual stream ``x (batch, seq, d_model)``
    goes through LayerNorm → causal MHSA with RoPE and is added back (+), then through
    LayerNorm → MLP (d_model → 4·d_model → d_model) and is added back again. Only attention mixes
    positions; the MLP works on each token alone."""
    canvas = Canvas(width=14, height=15.5, title="the Transformer block around attention", scale=0.42)
    spine = 5.5
    stream_in = canvas.tensor("", rows=1, cols=4, at=(spine - 2, 0.2), color="input", shape=None)
    canvas.text("x  (batch, seq, d_model)", at=(spine + 2.4, 0.7), ha="left", size=9)
    norm_1 = canvas.op("LayerNorm", at=(spine, 3.0), width=3.6)
    attention = canvas.op("causal MHSA + RoPE", at=(spine, 5.0), width=5.2)
    add_1 = canvas.op("+", at=(spine, 7.0), width=1.0, height=1.0)
    norm_2 = canvas.op("LayerNorm", at=(spine, 9.0), width=3.6)
    mlp = canvas.op("MLP: d → 4d → d", at=(spine, 11.0), width=5.2)
    add_2 = canvas.op("+", at=(spine, 13.0), width=1.0, height=1.0)
    canvas.arrow(stream_in.top, norm_1.bottom)
    canvas.arrow(norm_1.top, attention.bottom)
    canvas.arrow(attention.top, add_1.bottom)
    canvas.arrow(add_1.top, norm_2.bottom)
    canvas.arrow(norm_2.top, mlp.bottom)
    canvas.arrow(mlp.top, add_2.bottom)
    canvas.arrow(add_2.top, (spine, 14.8))
    # The residual path goes around each sub-layer, to its "+", drawn on the left so it crosses nothing.
    side = spine - 3.8
    for start_y, branch, add in ((0.7, stream_in.x, add_1), (7.9, spine, add_2)):
        canvas.ax.plot([branch, side, side], [start_y, start_y, add.center[1]], color="#333333", lw=1.2)
        canvas.arrow((side, add.center[1]), add.left)
        canvas.text("residual", at=(side - 0.5, (start_y + add.center[1]) / 2), size=8, rotation=90)
    canvas.text("tokens exchange\ninformation", at=(spine + 3.0, 5.0), ha="left", size=8)
    canvas.text("each token\non its own", at=(spine + 3.0, 11.0), ha="left", size=8)
    canvas.text("same shape out", at=(spine + 0.5, 14.6), ha="left", size=8)
    return canvas.figure
