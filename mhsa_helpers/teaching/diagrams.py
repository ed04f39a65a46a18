"""Schematic diagrams: boxes for tensors (a grid of cells, its name and its shape), boxes for
operations, and arrows for the data flow between them — drawn with matplotlib, so a notebook
needs no image file.

A diagram is drawn on a :class:`Canvas`, whose coordinates are "cells" (one cell of a tensor
is one unit wide and tall) with y growing upwards. Each lesson composes these pieces into its
own diagrams (e.g. :mod:`mhsa_helpers.lessons.qkv_by_hand.diagrams`)::

    canvas = Canvas(width=14, height=6, title="one head of attention")
    x = canvas.tensor("X", rows=3, cols=4, at=(0, 1), shape="(seq, d_model)")
    q = canvas.tensor("Q", rows=3, cols=2, at=(7, 1), shape="(seq, d_k)", color="query")
    canvas.arrow(x.right, q.left, "· W_Q")
    canvas.figure            # shown below the cell in Jupyter

Colours are named by role (``"input"``, ``"query"``, ``"key"``, ``"value"``, ``"scores"``,
``"weights"``, ``"output"``, ``"past"``, ``"new"``, ``"blocked"``) so that Q is the same colour in
every diagram of the series; any matplotlib colour works too. Cells can be coloured one by one
(``cell_colors``) to show e.g. which columns belong to which head.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle

from ..checks import expect_int

__all__ = ["ROLE_COLORS", "Box", "Canvas", "head_colors"]

#: The colour of each role, shared by every diagram of the series.
ROLE_COLORS = {
    "input": "#e0e0e0",
    "query": "#fdd49e",
    "key": "#c6dbef",
    "value": "#c7e9c0",
    "scores": "#fcbba1",
    "weights": "#9ecae1",
    "output": "#dadaeb",
    "past": "#d9d9d9",
    "new": "#fd8d3c",
    "blocked": "#f0f0f0",
    "op": "#ffffff",
}

#: One colour per head (cycled beyond eight heads).
_HEAD_PALETTE = ("#fdae6b", "#9ecae1", "#a1d99b", "#bcbddc", "#fc9272", "#c7c7c7", "#fdd0a2", "#9e9ac8")


def head_colors(heads: int) -> list[str]:
    """``heads`` distinct fill colours, one per head, the same in every diagram."""
    heads = expect_int("heads", heads, 1)
    return [_HEAD_PALETTE[h % len(_HEAD_PALETTE)] for h in range(heads)]


def _color(color: str) -> str:
    return ROLE_COLORS.get(color, color)


@dataclass(frozen=True)
class Box:
    """Where a drawn tensor or operation sits: its lower-left corner, width and height in cells.
    ``left``/``right``/``top``/``bottom`` are the middles of its sides, for arrows."""

    x: float
    y: float
    width: float
    height: float

    @property
    def left(self) -> tuple[float, float]:
        return (self.x, self.y + self.height / 2)

    @property
    def right(self) -> tuple[float, float]:
        return (self.x + self.width, self.y + self.height / 2)

    @property
    def top(self) -> tuple[float, float]:
        return (self.x + self.width / 2, self.y + self.height)

    @property
    def bottom(self) -> tuple[float, float]:
        return (self.x + self.width / 2, self.y)

    @property
    def center(self) -> tuple[float, float]:
        return (self.x + self.width / 2, self.y + self.height / 2)


class Canvas:
    """A blank figure ``width`` x ``height`` cells large (``scale`` inches a cell) to draw a diagram on.

    ``canvas.figure`` is the matplotlib Figure and ``canvas.ax`` its one Axes (no ticks, no frame).
    """

    def __init__(self, width: float, height: float, *, title: str | None = None, scale: float = 0.42) -> None:
        for name, value in (("width", width), ("height", height), ("scale", scale)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"{name} must be a positive number, got {value!r}")
        import matplotlib.pyplot as plt

        # pyplot (not a bare Figure) so that Jupyter's inline backend shows it.
        self.figure: Figure
        self.ax: Axes
        self.figure, self.ax = plt.subplots(figsize=(width * scale, height * scale))
        self.ax.set_xlim(-0.5, width - 0.5)
        self.ax.set_ylim(-0.5, height - 0.5)
        self.ax.set_aspect("equal")
        self.ax.axis("off")
        self.fontsize = 10.0
        if title:
            self.ax.set_title(title, fontsize=self.fontsize + 1)
        self.figure.subplots_adjust(left=0.01, right=0.99, bottom=0.01, top=0.92 if title else 0.99)

    def tensor(
        self,
        name: str,
        *,
        rows: int,
        cols: int,
        at: tuple[float, float],
        shape: str | None = None,
        color: str = "input",
        cell_colors: Sequence[Sequence[str]] | None = None,
        values: Sequence[Sequence[str]] | None = None,
        row_labels: Sequence[str] | None = None,
        col_labels: Sequence[str] | None = None,
        cell: float = 1.0,
        name_side: str = "top",
    ) -> Box:
        """A ``rows`` x ``cols`` grid of cells with its lower-left corner ``at``, ``name`` above it
        (or ``name_side="left"``) and ``shape`` (e.g. ``"(seq, d_k)"``) below it.

        ``cell_colors[i][j]`` overrides the fill of one cell (e.g. one colour per head);
        ``values[i][j]`` writes text in it; ``row_labels``/``col_labels`` name rows (left) and
        columns (top), e.g. the tokens. Returns the grid's :class:`Box`.
        """
        rows, cols = expect_int("rows", rows, 1), expect_int("cols", cols, 1)
        if cell_colors is not None and (len(cell_colors) != rows or any(len(r) != cols for r in cell_colors)):
            raise ValueError(f"cell_colors must be {rows} rows of {cols} colours, one per cell")
        if values is not None and (len(values) != rows or any(len(r) != cols for r in values)):
            raise ValueError(f"values must be {rows} rows of {cols} strings, one per cell")
        x0, y0 = at
        fill = _color(color)
        for i in range(rows):
            for j in range(cols):
                face = _color(cell_colors[i][j]) if cell_colors is not None else fill
                # Row 0 on top, as when a matrix is printed.
                y = y0 + (rows - 1 - i) * cell
                self.ax.add_patch(
                    Rectangle((x0 + j * cell, y), cell, cell, facecolor=face, edgecolor="#555555", lw=0.8)
                )
                if values is not None:
                    self.ax.text(
                        x0 + (j + 0.5) * cell, y + cell / 2, values[i][j], ha="center", va="center", fontsize=8
                    )
        box = Box(x0, y0, cols * cell, rows * cell)
        self.ax.add_patch(Rectangle((box.x, box.y), box.width, box.height, fill=False, edgecolor="black", lw=1.4))
        if row_labels is not None:
            for i, label in enumerate(row_labels[:rows]):
                y = y0 + (rows - 1 - i + 0.5) * cell
                self.ax.text(x0 - 0.15, y, label, ha="right", va="center", fontsize=8)
        if col_labels is not None:
            for j, label in enumerate(col_labels[:cols]):
                self.ax.text(
                    x0 + (j + 0.5) * cell,
                    box.y + box.height + 0.1,
                    label,
                    ha="center",
                    va="bottom",
                    fontsize=8,
                    rotation=90 if max(len(str(c)) for c in col_labels) > 2 else 0,
                )
        if name_side == "left":
            self.ax.text(
                box.x - 0.3, box.center[1], name, ha="right", va="center", fontsize=self.fontsize + 1, fontweight="bold"
            )
        else:
            above = box.y + box.height + (1.3 if col_labels is not None else 0.15)
            self.ax.text(
                box.center[0], above, name, ha="center", va="bottom", fontsize=self.fontsize + 1, fontweight="bold"
            )
        if shape:
            self.ax.text(
                box.center[0],
                box.y - 0.15,
                shape,
                ha="center",
                va="top",
                fontsize=self.fontsize - 1,
                family="monospace",
            )
        return box

    def op(self, text: str, *, at: tuple[float, float], width: float = 2.0, height: float = 1.0) -> Box:
        """An operation (``"softmax"``, ``"+"``, ``"LayerNorm"``): a rounded box centred ``at``."""
        cx, cy = at
        box = Box(cx - width / 2, cy - height / 2, width, height)
        self.ax.add_patch(
            FancyBboxPatch(
                (box.x, box.y),
                box.width,
                box.height,
                boxstyle="round,pad=0.05,rounding_size=0.25",
                facecolor=ROLE_COLORS["op"],
                edgecolor="black",
                lw=1.2,
            )
        )
        self.ax.text(cx, cy, text, ha="center", va="center", fontsize=self.fontsize)
        return box

    def arrow(
        self,
        start: tuple[float, float],
        end: tuple[float, float],
        label: str | None = None,
        *,
        bend: float = 0.0,
        label_offset: tuple[float, float] = (0.0, 0.25),
    ) -> None:
        """An arrow from ``start`` to ``end`` (e.g. ``box.right`` to ``other.left``), with ``label``
        written at its middle; ``bend`` curves it (a residual connection, say)."""
        self.ax.add_patch(
            FancyArrowPatch(
                start,
                end,
                arrowstyle="-|>",
                mutation_scale=12,
                lw=1.2,
                color="#333333",
                connectionstyle=f"arc3,rad={bend}",
                shrinkA=2,
                shrinkB=2,
            )
        )
        if label:
            mx, my = (start[0] + end[0]) / 2 + label_offset[0], (start[1] + end[1]) / 2 + label_offset[1]
            self.ax.text(mx, my, label, ha="center", va="bottom", fontsize=self.fontsize - 1)

    def text(self, text: str, *, at: tuple[float, float], size: float | None = None, **kwargs) -> None:
        """A free note at ``at`` (centred), in the diagram's font."""
        kwargs.setdefault("ha", "center")
        kwargs.setdefault("va", "center")
        self.ax.text(at[0], at[1], text, fontsize=size or self.fontsize - 1, **kwargs)

    def bracket(self, box: Box, text: str, *, side: str = "bottom") -> None:
        """A brace-like line under (or over) ``box`` with ``text``, to name a group of columns."""
        y = box.y - 0.9 if side == "bottom" else box.y + box.height + 0.4
        self.ax.plot([box.x + 0.1, box.x + box.width - 0.1], [y, y], color="#333333", lw=1.0)
        tick = 0.15 if side == "bottom" else -0.15
        for x in (box.x + 0.1, box.x + box.width - 0.1):
            self.ax.plot([x, x], [y, y + tick], color="#333333", lw=1.0)
        self.ax.text(
            box.center[0],
            y - 0.1 if side == "bottom" else y + 0.1,
            text,
            ha="center",
            va="top" if side == "bottom" else "bottom",
            fontsize=self.fontsize - 1,
        )
