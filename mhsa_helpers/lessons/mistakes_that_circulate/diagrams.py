"""Notebook 10's schematic diagram: the attention recipe as a data flow, with a numbered marker
at every step where a mistake that gets copied or a bug in code goes wrong."""

from __future__ import annotations

import itertools

from matplotlib.figure import Figure

from ...teaching.diagrams import Canvas

__all__ = ["MISTAKE_SITES", "mistake_map_diagram"]

#: (marker, step of the recipe, what goes wrong there), in the order of the diagram.
MISTAKE_SITES: tuple[tuple[str, str, str], ...] = (
    ("1", "projections", "Q = X·W versus x·Wᵀ; 'three linear layers' (there are four)"),
    ("2", "split into heads", "heads read a slice of the input (they read all of it); shape comments"),
    ("3", "scores", "dividing by d_k, or by nothing; k.T on a batch; 'cosine similarity'"),
    ("4", "mask", "mask after the softmax; zeroing without renormalising; polarity; -10000; top-left"),
    ("5", "softmax", "over the wrong axis"),
    ("6", "merge heads", "reshape without transposing back; repeat instead of repeat_interleave (GQA)"),
    ("7", "output projection", "W_O missing, or in the wrong layout"),
    ("8", "positions", "RoPE pairs mismatched; keys cached before rotation"),
)


def _marker(canvas: Canvas, label: str, at: tuple[float, float]) -> None:
    canvas.text(
        label,
        at=at,
        size=9,
        color="white",
        fontweight="bold",
        bbox={"boxstyle": "circle,pad=0.25", "facecolor": "#d62728", "edgecolor": "none"},
    )


def mistake_map_diagram() -> Figure:
    """The recipe X -> Q, K, V -> split heads -> scores -> mask -> softmax -> weights · V -> merge
    -> W_O, with the shapes of one batch, and a red numbered marker (see :data:`MISTAKE_SITES`)
    at each step where a mistake of notebook 10 happens."""
    canvas = Canvas(width=29, height=6.2, title="where the mistakes happen in the recipe", scale=0.5)
    y = 1.6
    x = canvas.tensor("X", rows=3, cols=2, at=(0, y - 1.0), shape="(b, n, d_model)")
    proj = canvas.op("· W_Q, W_K, W_V", at=(4.6, y + 0.5), width=3.6)
    split = canvas.op("split heads", at=(9.0, y + 0.5), width=2.8)
    scores = canvas.op("Q Kᵀ / √d_k", at=(13.0, y + 0.5), width=2.8)
    mask = canvas.op("mask", at=(16.4, y + 0.5), width=1.8)
    soft = canvas.op("softmax", at=(19.3, y + 0.5), width=2.2)
    mix = canvas.op("· V", at=(21.8, y + 0.5), width=1.4)
    merge = canvas.op("merge", at=(24.1, y + 0.5), width=1.8)
    out = canvas.op("· W_O", at=(26.6, y + 0.5), width=1.8)
    chain = [x, proj, split, scores, mask, soft, mix, merge, out]
    for left, right in itertools.pairwise(chain):
        canvas.arrow(left.right, right.left)
    canvas.text("(b, h, n, d_head)", at=(11.0, y - 0.6), size=7)
    canvas.text("(b, h, n, n)", at=(17.8, y - 0.6), size=7)
    canvas.text("(b, n, d_model)", at=(26.6, y - 0.6), size=7)
    rope = canvas.op("RoPE on q, k", at=(11.0, y + 3.2), width=3.0)
    canvas.arrow((10.3, y + 1.0), rope.bottom)
    canvas.arrow(rope.right, (12.6, y + 1.0))
    sites = {"1": proj, "2": split, "3": scores, "4": mask, "5": soft, "6": merge, "7": out, "8": rope}
    for label, box in sites.items():
        _marker(canvas, label, (box.x + box.width - 0.1, box.y + box.height + 0.25))
    return canvas.figure
