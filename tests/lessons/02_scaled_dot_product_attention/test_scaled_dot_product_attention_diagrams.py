"""Notebook 02's schematic diagram draws what it says: the shapes of each product."""

import matplotlib

matplotlib.use("Agg")

import pytest
from matplotlib.colors import to_hex
from matplotlib.patches import Rectangle

from mhsa_helpers.lessons.scaled_dot_product_attention import matrix_products_diagram
from mhsa_helpers.teaching.diagrams import ROLE_COLORS


def texts(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def cells(fig, color: str) -> int:
    """How many unit cells are filled with ``color``."""
    want = to_hex(ROLE_COLORS.get(color, color))
    return sum(
        1
        for ax in fig.axes
        for p in ax.patches
        if isinstance(p, Rectangle) and p.get_fill() and to_hex(p.get_facecolor()) == want and p.get_width() == 1.0
    )


@pytest.mark.parametrize(("seq", "d_k", "d_v"), [(6, 4, 3), (3, 5, 2)])
def test_matrix_products_show_each_shape_and_highlight_one_query(seq, d_k, d_v):
    fig = matrix_products_diagram(seq, d_k, d_v)
    drawn = " ".join(texts(fig))
    for shape in (f"({seq}, {d_k})", f"({d_k}, {seq})", f"({seq}, {seq})", f"({seq}, {d_v})"):
        assert shape in drawn
    # Row 0 of Q, S, A and the output: d_k + seq + seq + d_v highlighted cells.
    assert cells(fig, "new") == d_k + 2 * seq + d_v


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: matrix_products_diagram(seq=0), "seq"),
    ],
)
def test_diagrams_refuse_what_they_cannot_draw(make, message):
    with pytest.raises(ValueError, match=message):
        make()
