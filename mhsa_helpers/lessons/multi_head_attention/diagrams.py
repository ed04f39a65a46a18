"""Notebook 04's schematic diagram: splitting ``(seq, d_model)`` into heads and merging them back —
the columns of each head (one colour per head) travel together, and ``W_O`` mixes them."""

from __future__ import annotations

from matplotlib.figure import Figure

from ...checks import expect_divisible, expect_int
from ...teaching.diagrams import Canvas, head_colors

__all__ = ["split_merge_diagram"]


def split_merge_diagram(seq: int = 4, d_model: int = 8, num_heads: int = 2) -> Figure:
    """``Q`` (seq, d_model) with the columns of each head coloured; ``view`` to (seq, heads, d_head)
    and ``transpose`` to (heads, seq, d_head) give one (seq, d_head) block per head; attention runs
    in each block; the outputs are put side by side again (seq, d_model), and ``· W_Oᵀ`` mixes them
    into the output (seq, d_model)."""
    seq = expect_int("seq", seq, 1, 8)
    d_model = expect_int("d_model", d_model, 1, 16)
    num_heads = expect_int("num_heads", num_heads, 1, 4)
    d_head = expect_divisible("d_model", d_model, "num_heads", num_heads)
    colors = head_colors(num_heads)
    by_head = [[colors[j // d_head] for j in range(d_model)] for _ in range(seq)]
    gap = seq + 2.2
    height = max(num_heads * gap, seq + 3) + 2.0
    width = 3 * d_model + 2 * d_head + 18.0
    canvas = Canvas(width=width, height=height, title=f"{num_heads} heads: split, attend, merge, mix", scale=0.38)
    middle = height / 2 - seq / 2
    q = canvas.tensor("Q", rows=seq, cols=d_model, at=(1.0, middle), cell_colors=by_head, shape="(seq, d_model)")
    x = q.x + d_model + 4.0
    heads = []
    for h in range(num_heads):
        y = height - 2.0 - (h + 1) * gap + 1.0
        heads.append(
            canvas.tensor(
                f"head {h + 1}",
                rows=seq,
                cols=d_head,
                at=(x, y),
                cell_colors=[[colors[h]] * d_head for _ in range(seq)],
                shape="(seq, d_head)",
            )
        )
        canvas.arrow(q.right, heads[-1].left)
    canvas.text(
        "split: view to (seq, heads, d_head),\nthen transpose to (heads, seq, d_head)",
        at=(q.center[0], q.y - 1.6),
        size=8,
    )
    x2 = x + d_head + 4.5
    outs = []
    for h, head in enumerate(heads):
        outs.append(
            canvas.tensor(
                "",
                rows=seq,
                cols=d_head,
                at=(x2, head.y),
                cell_colors=[[colors[h]] * d_head for _ in range(seq)],
                shape="attention output",
            )
        )
        canvas.arrow(head.right, outs[-1].left, "attention")
    x3 = x2 + d_head + 3.5
    merged = canvas.tensor(
        "merged", rows=seq, cols=d_model, at=(x3, middle), cell_colors=by_head, shape="transpose, then reshape"
    )
    for out in outs:
        canvas.arrow(out.right, merged.left)
    # W_O mixes the heads: every output feature draws on every head's columns.
    output = canvas.tensor(
        "output",
        rows=seq,
        cols=d_model,
        at=(merged.x + d_model + 3.5, middle),
        color="output",
        shape="(seq, d_model): each feature\nmixes every head",
    )
    canvas.arrow(merged.right, output.left, "· W_Oᵀ")
    return canvas.figure
