"""Notebook 03's schematic diagram draws what it says: the blocked cells of a causal mask."""

import matplotlib

matplotlib.use("Agg")

import pytest
from matplotlib.colors import to_hex
from matplotlib.patches import Rectangle

from mhsa_helpers.lessons.causal_masking import causal_mask_diagram
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


@pytest.mark.parametrize("n", [1, 3, 6])
def test_causal_mask_blocks_exactly_the_later_keys(n):
    tokens = tuple(f"w{i}" for i in range(n))
    fig = causal_mask_diagram(tokens)
    blocked = n * (n - 1) // 2
    assert texts(fig).count("−∞") == blocked and texts(fig).count("0") == blocked
    assert cells(fig, "blocked") == 2 * blocked
    assert cells(fig, "scores") == n * n - blocked and cells(fig, "weights") == n * n - blocked


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: causal_mask_diagram(()), "tokens"),
    ],
)
def test_diagrams_refuse_what_they_cannot_draw(make, message):
    with pytest.raises(ValueError, match=message):
        make()
