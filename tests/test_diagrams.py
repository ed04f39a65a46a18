"""The schematic-diagram pieces draw what they are asked to, where they are asked to."""

import matplotlib

matplotlib.use("Agg")

import pytest
from matplotlib.colors import to_hex
from matplotlib.patches import FancyArrowPatch, Rectangle

from mhsa_helpers.teaching.diagrams import ROLE_COLORS, Box, Canvas, head_colors


def cells(canvas: Canvas) -> list[Rectangle]:
    # The grid cells are filled; each tensor's frame is an unfilled rectangle drawn over them.
    return [p for p in canvas.ax.patches if isinstance(p, Rectangle) and p.get_fill()]


def test_a_tensor_is_a_grid_of_cells_with_its_name_and_shape():
    canvas = Canvas(width=10, height=6)
    box = canvas.tensor("Q", rows=3, cols=2, at=(1, 1), shape="(seq, d_k)", color="query")
    assert box == Box(1, 1, 2, 3)
    assert box.left == (1, 2.5) and box.right == (3, 2.5) and box.top == (2, 4) and box.bottom == (2, 1)
    drawn = cells(canvas)
    assert len(drawn) == 6
    assert {to_hex(p.get_facecolor()) for p in drawn} == {ROLE_COLORS["query"]}
    texts = [t.get_text() for t in canvas.ax.texts]
    assert "Q" in texts and "(seq, d_k)" in texts


def test_row_zero_is_drawn_on_top_and_cells_take_their_own_colours():
    canvas = Canvas(width=6, height=4)
    canvas.tensor(
        "X",
        rows=2,
        cols=2,
        at=(0, 0),
        cell_colors=[["#ff0000", "#00ff00"], ["#0000ff", "#000000"]],
        values=[["a", "b"], ["c", "d"]],
    )
    by_text = {t.get_text(): t.get_position() for t in canvas.ax.texts}
    assert by_text["a"][1] > by_text["c"][1]  # row 0 above row 1, as a printed matrix
    assert by_text["a"][0] < by_text["b"][0]
    red = [p for p in cells(canvas) if to_hex(p.get_facecolor()) == "#ff0000"]
    assert len(red) == 1 and red[0].get_xy() == (0, 1)


def test_head_colours_are_distinct_and_stable():
    four = head_colors(4)
    assert len(set(four)) == 4 and head_colors(2) == four[:2]
    with pytest.raises(ValueError, match="heads"):
        head_colors(0)


def test_ops_and_arrows():
    canvas = Canvas(width=8, height=3, title="flow")
    op = canvas.op("softmax", at=(4, 1))
    assert op.center == (4, 1)
    canvas.arrow((0, 1), op.left, "scores")
    assert sum(isinstance(p, FancyArrowPatch) for p in canvas.ax.patches) == 1
    assert {"softmax", "scores"} <= {t.get_text() for t in canvas.ax.texts}
    assert canvas.ax.get_title() == "flow"


def test_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="width"):
        Canvas(width=0, height=3)
    canvas = Canvas(width=5, height=5)
    with pytest.raises(ValueError, match="rows"):
        canvas.tensor("Q", rows=0, cols=2, at=(0, 0))
    with pytest.raises(ValueError, match="cell_colors"):
        canvas.tensor("Q", rows=2, cols=2, at=(0, 0), cell_colors=[["red", "red"]])
    with pytest.raises(ValueError, match="values"):
        canvas.tensor("Q", rows=1, cols=2, at=(0, 0), values=[["1"]])
