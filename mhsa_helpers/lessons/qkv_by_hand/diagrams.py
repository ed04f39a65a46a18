"""Notebook 01's schematic diagram: one head of attention on "Money Bank Grows" — three words
become queries, keys and values, queries meet keys in a score table, each row becomes weights,
and the weights mix the values."""

from __future__ import annotations

from matplotlib.figure import Figure

from ...teaching.diagrams import Canvas

__all__ = ["one_head_diagram"]


def one_head_diagram(tokens: tuple[str, ...] = ("Money", "Bank", "Grows"), d_k: int = 3) -> Figure:
    """The data flow of one head for ``len(tokens)`` words with ``d_k`` features each:
    ``E`` (seq, d_in) times ``W_Q, W_K, W_V`` gives ``Q, K, V`` (seq, d_k); ``Q Kᵀ / √d_k`` is the
    (seq, seq) score table, rows = queries, columns = keys; a softmax per row gives the weights;
    the weights times ``V`` give one context vector per word, ``C`` (seq, d_k)."""
    words = list(tokens)
    if not words or not all(isinstance(t, str) for t in words):
        raise ValueError(f"tokens must be a non-empty tuple of strings, got {tokens!r}")
    n = len(words)
    step = n + 2.4  # a tensor, its name above and its shape below
    canvas = Canvas(width=3 * d_k + 2 * n + 23.8, height=3 * step + 1.2, title="one head of attention", scale=0.38)
    k_y = step + 0.4
    e = canvas.tensor("E", rows=n, cols=d_k, at=(3.0, k_y), shape="(seq, d_in)", row_labels=words)
    x = e.x + d_k + 3.0
    q = canvas.tensor("Q", rows=n, cols=d_k, at=(x, k_y + step), color="query", shape="(seq, d_k)")
    k = canvas.tensor("K", rows=n, cols=d_k, at=(x, k_y), color="key", shape="(seq, d_k)")
    v = canvas.tensor("V", rows=n, cols=d_k, at=(x, k_y - step), color="value", shape="(seq, d_k)")
    for target, label in ((q, "· W_Q"), (k, "· W_K"), (v, "· W_V")):
        canvas.arrow(e.right, target.left, label, label_offset=(-0.3, 0.05))
    # The scores' rows are labelled with the words: the arrow into them runs between two labels.
    between_labels = k_y + (n + 1) // 2
    product = canvas.op("Q Kᵀ / √d_k", at=(q.x + d_k + 2.6, between_labels), width=3.4)
    canvas.arrow(q.right, product.top)
    canvas.arrow(k.right, product.left)
    x = product.x + product.width + 3.2
    scores = canvas.tensor(
        "scores",
        rows=n,
        cols=n,
        at=(x, k_y),
        color="scores",
        shape="rows: queries\ncolumns: keys",
        row_labels=words,
        col_labels=words,
    )
    canvas.arrow(product.right, (scores.x, between_labels))
    x = scores.x + n + 2.8
    weights = canvas.tensor("weights", rows=n, cols=n, at=(x, k_y), color="weights", shape="each row\nsums to 1")
    canvas.arrow(scores.right, weights.left, "softmax\nper row")
    # The weights average the values: V comes in from below.
    mix = canvas.op("weights · V", at=(weights.x + n + 2.9, weights.center[1]), width=3.0)
    canvas.arrow(weights.right, mix.left)
    canvas.arrow(v.right, mix.bottom, bend=0.2)
    c = canvas.tensor("C", rows=n, cols=d_k, at=(mix.x + mix.width + 1.8, k_y), color="output", shape="(seq, d_k)")
    canvas.arrow(mix.right, c.left)
    return canvas.figure
