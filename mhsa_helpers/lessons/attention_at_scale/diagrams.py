"""Notebook 08's schematic diagrams: the score matrix cut into tiles (which blocks tiled attention
computes, masks or skips), and which query heads share which key/value head."""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from ...checks import expect_divisible, expect_int
from ...teaching.diagrams import ROLE_COLORS, Canvas, head_colors
from ...tiled_attention import tile_kinds

__all__ = ["head_groups_diagram", "tiles_diagram"]

_KIND_COLORS = {"computed": "weights", "masked": "scores", "skipped": "blocked"}


def tiles_diagram(seq: int = 8, tile_size: int = 3, *, causal: bool = True) -> Figure:
    """The ``(seq, seq)`` score matrix of causal (or not) attention cut into ``tile_size`` blocks:
    blue blocks are computed whole, orange ones are computed with a mask inside, grey ones
    are never computed (every key is in the future of every query). Each query tile keeps a
    running maximum and normaliser (right) while its key tiles are read from left to right."""
    seq = expect_int("seq", seq, 1, 24)
    tile_size = expect_int("tile_size", tile_size, 1, seq)
    kinds = tile_kinds(seq, seq, tile_size=tile_size, causal=causal)
    colors = [[_KIND_COLORS[kinds[i // tile_size][j // tile_size]] for j in range(seq)] for i in range(seq)]
    canvas = Canvas(width=seq + 9, height=seq + 5.5, title=f"scores cut into tiles of {tile_size}", scale=0.42)
    grid = canvas.tensor(
        "", rows=seq, cols=seq, at=(2.5, 2.6), cell_colors=colors, shape="(seq_q, seq_k): query rows, key columns"
    )
    # Thick lines on the tile borders.
    for edge in [*range(0, seq, tile_size), seq]:
        canvas.ax.plot([grid.x + edge] * 2, [grid.y, grid.y + seq], color="black", lw=2)
        canvas.ax.plot([grid.x, grid.x + seq], [grid.y + seq - edge] * 2, color="black", lw=2)
    canvas.text("query tiles ↓", at=(1.1, grid.y + seq / 2), rotation=90, size=9)
    canvas.text("key tiles, read left to right →", at=(grid.x + seq / 2, grid.y + seq + 0.5), size=9)
    y = grid.y + seq - min(tile_size, seq) / 2
    canvas.arrow((grid.x + seq + 0.2, y), (grid.x + seq + 1.4, y))
    canvas.text(
        "each query tile carries\nits running max,\nnormaliser and output",
        at=(grid.x + seq + 1.6, y),
        ha="left",
        size=7,
    )
    legend = {"computed": "computed", "masked": "computed, masked inside", "skipped": "never computed"}
    for index, (kind, label) in enumerate(legend.items()):
        x = grid.x + index * 5.2
        swatch = Rectangle((x, 0.0), 0.8, 0.8, facecolor=ROLE_COLORS[_KIND_COLORS[kind]], edgecolor="#555555")
        canvas.ax.add_patch(swatch)
        canvas.text(label, at=(x + 1.0, 0.4), ha="left", size=7)
    return canvas.figure


def head_groups_diagram(num_heads: int = 8, num_kv_heads: int = 2) -> Figure:
    """``num_heads`` query heads (top) and the ``num_kv_heads`` key/value heads they read (bottom):
    query head ``h`` reads key/value head ``h // (num_heads // num_kv_heads)``, one colour per group.
    ``num_kv_heads == num_heads`` is multi-head attention, 1 is multi-query attention."""
    num_heads = expect_int("num_heads", num_heads, 1, 32)
    num_kv_heads = expect_int("num_kv_heads", num_kv_heads, 1, num_heads)
    groups = expect_divisible("num_heads", num_heads, "num_kv_heads", num_kv_heads)
    colors = head_colors(num_kv_heads)
    kind = "multi-head" if groups == 1 else "multi-query" if num_kv_heads == 1 else "grouped-query"
    width = max(num_heads, 8) * 1.4 + 4
    canvas = Canvas(
        width=width,
        height=7.2,
        title=f"{kind} attention: {num_heads} query head{'s' if num_heads > 1 else ''}, {num_kv_heads} "
        f"key/value head{'s' if num_kv_heads > 1 else ''}",
        scale=0.42,
    )
    step_q = (width - 4) / num_heads
    step_kv = (width - 4) / num_kv_heads
    queries = [
        canvas.tensor(
            "", rows=1, cols=1, at=(3 + h * step_q, 4.6), cell_colors=[[colors[h // groups]]], values=[[f"q{h}"]]
        )
        for h in range(num_heads)
    ]
    kvs = [
        canvas.tensor(
            "", rows=1, cols=1, at=(3 + (g + 0.5) * step_kv - 0.5, 0.8), cell_colors=[[colors[g]]], values=[[f"kv{g}"]]
        )
        for g in range(num_kv_heads)
    ]
    for h, query in enumerate(queries):
        canvas.arrow(query.bottom, kvs[h // groups].top)
    canvas.text("query heads", at=(1.2, 5.1), size=9)
    canvas.text("cached K, V", at=(1.2, 1.3), size=9)
    return canvas.figure
