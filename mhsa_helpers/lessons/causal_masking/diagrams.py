"""Notebook 03's schematic diagram: a causal mask on the score table — every key after the query
is set to −∞ before the softmax, so its weight is exactly 0 and each row shares 1 among the
words up to and including its own."""

from __future__ import annotations

from matplotlib.figure import Figure

from ...teaching.diagrams import Canvas

__all__ = ["causal_mask_diagram"]

_TOKENS = ("Your", "journey", "starts", "with", "one", "step")


def causal_mask_diagram(tokens: tuple[str, ...] = _TOKENS) -> Figure:
    """The ``(seq, seq)`` scores of ``tokens`` (rows = queries, columns = keys) with the blocked
    cells (key after query) set to −∞, and the weights after the softmax: 0 where blocked."""
    words = list(tokens)
    if not 1 <= len(words) <= 10 or not all(isinstance(t, str) for t in words):
        raise ValueError(f"tokens must be 1 to 10 strings, got {tokens!r}")
    n = len(words)
    blocked = [[j > i for j in range(n)] for i in range(n)]
    canvas = Canvas(width=2 * n + 12, height=n + 5.0, title="a causal mask: no query sees a later key", scale=0.42)
    scores = canvas.tensor(
        "scores + mask",
        rows=n,
        cols=n,
        at=(3.6, 1.6),
        cell_colors=[["blocked" if b else "scores" for b in row] for row in blocked],
        values=[["−∞" if b else "" for b in row] for row in blocked],
        row_labels=words,
        col_labels=words,
        shape="rows: queries, columns: keys",
    )
    weights = canvas.tensor(
        "weights",
        rows=n,
        cols=n,
        at=(scores.x + n + 4.5, 1.6),
        cell_colors=[["blocked" if b else "weights" for b in row] for row in blocked],
        values=[["0" if b else "" for b in row] for row in blocked],
        col_labels=words,
        shape="each row still sums to 1",
    )
    canvas.arrow(scores.right, weights.left, "softmax\nper row")
    return canvas.figure
