"""Notebook 02's schematic diagram: scaled dot-product attention as two matrix products,
with the shape of every factor — ``Q Kᵀ`` then, after scaling and a softmax per row, ``A V``."""

from __future__ import annotations

from matplotlib.figure import Figure

from ...checks import expect_int
from ...teaching.diagrams import Canvas

__all__ = ["matrix_products_diagram"]


def matrix_products_diagram(seq: int = 6, d_k: int = 4, d_v: int = 3) -> Figure:
    """Top row: ``Q`` (seq, d_k) times ``Kᵀ`` (d_k, seq) is the score table ``S`` (seq, seq) — the
    inner sizes ``d_k`` meet and disappear. Bottom row: ``A = softmax(S / √d_k)`` per row, times
    ``V`` (seq, d_v), is the output (seq, d_v). One query (row 0) is highlighted all the way through."""
    seq = expect_int("seq", seq, 1, 12)
    d_k = expect_int("d_k", d_k, 1, 12)
    d_v = expect_int("d_v", d_v, 1, 12)

    def row0(rows: int, cols: int, role: str, highlight: str = "new") -> list[list[str]]:
        return [[highlight if i == 0 else role for _ in range(cols)] for i in range(rows)]

    width = 2 * seq + max(d_k, d_v) + 15
    height = 2 * seq + 7.5
    canvas = Canvas(width=width, height=height, title="attention is two matrix products", scale=0.36)
    top = seq + 4.2
    q = canvas.tensor(
        "Q", rows=seq, cols=d_k, at=(1.0, top), cell_colors=row0(seq, d_k, "query"), shape=f"({seq}, {d_k})"
    )
    canvas.text("·", at=(q.x + d_k + 1.0, q.center[1]), size=18)
    kt = canvas.tensor(
        "Kᵀ", rows=d_k, cols=seq, at=(q.x + d_k + 2.0, top + (seq - d_k) / 2), color="key", shape=f"({d_k}, {seq})"
    )
    canvas.text("=", at=(kt.x + seq + 1.0, q.center[1]), size=16)
    s = canvas.tensor(
        "S",
        rows=seq,
        cols=seq,
        at=(kt.x + seq + 2.0, top),
        cell_colors=row0(seq, seq, "scores"),
        shape=f"({seq}, {seq}): query × key",
    )
    canvas.text(f"Q's columns meet Kᵀ's rows: {d_k} = {d_k}", at=(kt.center[0], kt.y - 1.4), size=8)

    bottom = 1.2
    a = canvas.tensor(
        "A", rows=seq, cols=seq, at=(1.0, bottom), cell_colors=row0(seq, seq, "weights"), shape=f"({seq}, {seq})"
    )
    canvas.text("·", at=(a.x + seq + 1.0, a.center[1]), size=18)
    v = canvas.tensor("V", rows=seq, cols=d_v, at=(a.x + seq + 2.0, bottom), color="value", shape=f"({seq}, {d_v})")
    canvas.text("=", at=(v.x + d_v + 1.0, a.center[1]), size=16)
    out = canvas.tensor(
        "output",
        rows=seq,
        cols=d_v,
        at=(v.x + d_v + 2.0, bottom),
        cell_colors=row0(seq, d_v, "output"),
        shape=f"({seq}, {d_v})",
    )
    start, end = (s.center[0], s.y - 1.0), (a.center[0] + 1.0, a.y + a.height + 0.4)
    canvas.arrow(start, end)
    canvas.text(
        "÷ √d_k, then a softmax\nof each row: A", at=(start[0] + 0.6, start[1] - 0.3), ha="left", va="top", size=8
    )
    canvas.text(
        "orange: query 0, its scores,\nits weights and its output row",
        at=(out.x + d_v + 0.4, out.center[1]),
        ha="left",
        size=8,
    )
    return canvas.figure
