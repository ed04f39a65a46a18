"""Notebook 05's schematic diagram: RoPE cuts a query (or key) into pairs of features and turns
each pair, like a clock hand, by an angle proportional to the position — fast for the first
pair, slower for each later one."""

from __future__ import annotations

import math

from matplotlib.figure import Figure
from matplotlib.patches import Circle, FancyArrowPatch

from ...checks import expect_int, expect_number
from ...rope import rope_frequencies
from ...teaching.diagrams import ROLE_COLORS, Canvas

__all__ = ["rotating_pairs_diagram"]


def rotating_pairs_diagram(d_head: int = 8, base: float = 10000.0, positions: int = 4) -> Figure:
    """One row per position ``m`` (0 to ``positions - 1``), one dial per pair of features
    ``(2i, 2i + 1)``: the hand points at angle ``m·θ_i`` with ``θ_i = base^(-2i/d_head)``, the
    rotation RoPE applies to that pair of a vector that points along the first feature."""
    d_head = expect_int("d_head", d_head, 2, 16)
    if d_head % 2:
        raise ValueError(f"d_head must be even (RoPE turns pairs of features), got d_head={d_head}")
    base = expect_number("base", base, 0.0, open_low=True)
    positions = expect_int("positions", positions, 1, 8)
    thetas = rope_frequencies(d_head, base=base).tolist()
    pairs = d_head // 2
    cell = 2.6
    canvas = Canvas(
        width=pairs * cell + 4.5, height=positions * cell + 3.2, title="RoPE turns each pair of features", scale=0.5
    )
    for i, theta in enumerate(thetas):
        x = 4.0 + i * cell
        canvas.text(f"pair {i}\nfeatures {2 * i},{2 * i + 1}\nθ = {theta:.3g}", at=(x, positions * cell + 1.3), size=8)
        for m in range(positions):
            y = (positions - 1 - m) * cell + 1.0
            canvas.ax.add_patch(Circle((x, y), 1.0, facecolor=ROLE_COLORS["query"], edgecolor="#555555", lw=0.8))
            angle = m * theta
            tip = (x + 0.9 * math.cos(angle), y + 0.9 * math.sin(angle))
            canvas.ax.add_patch(
                FancyArrowPatch((x, y), tip, arrowstyle="-|>", mutation_scale=10, lw=1.4, color="#222222")
            )
            canvas.text(f"{math.degrees(angle) % 360:.0f}°", at=(x, y - 1.15), size=7)
    for m in range(positions):
        canvas.text(f"position {m}", at=(1.2, (positions - 1 - m) * cell + 1.0), size=8)
    return canvas.figure
