"""Notebook 04's schematic diagram draws what it says: one block per head."""

import matplotlib

matplotlib.use("Agg")

import pytest
from matplotlib.colors import to_hex
from matplotlib.patches import Rectangle

from mhsa_helpers.lessons.multi_head_attention import split_merge_diagram
from mhsa_helpers.teaching.diagrams import ROLE_COLORS, head_colors


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


@pytest.mark.parametrize(("d_model", "heads"), [(8, 2), (12, 3), (8, 4)])
def test_split_merge_draws_one_block_per_head_in_its_colour(d_model, heads):
    seq = 3
    fig = split_merge_diagram(seq=seq, d_model=d_model, num_heads=heads)
    d_head = d_model // heads
    for color in head_colors(heads):
        # Its columns in Q and in the merged output, its block before and after attention.
        assert cells(fig, color) == 4 * seq * d_head
    assert [f"head {h + 1}" in texts(fig) for h in range(heads)] == [True] * heads


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: split_merge_diagram(d_model=8, num_heads=3), "num_heads"),
    ],
)
def test_diagrams_refuse_what_they_cannot_draw(make, message):
    with pytest.raises(ValueError, match=message):
        make()
