"""Notebook 06's schematic diagram: decoding with a key/value cache — the cache holds the keys and
values of the past tokens (already rotated), the new tokens' keys and values are appended, and the
new queries attend to past and new keys through a causal mask aligned to the last key."""

from __future__ import annotations

from matplotlib.figure import Figure

from ...checks import check_int
from ...teaching.diagrams import Canvas

__all__ = ["kv_cache_diagram"]


def kv_cache_diagram(past: int = 5, new: int = 2) -> Figure:
    """``past`` cached positions (grey) and ``new`` tokens (orange): the keys after appending,
    ``(past + new)`` columns at RoPE positions ``0 .. past + new - 1``; the ``(new, past + new)``
    score rectangle of the new queries, with the keys after each query blocked
    (``tril(diagonal=past)``)."""
    past = check_int("past", past, 0, 12)
    new = check_int("new", new, 1, 6)
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
