"""Notebook 05's schematic diagram draws what it says: the angle of each RoPE pair."""

import math

import matplotlib

matplotlib.use("Agg")

import pytest
from matplotlib.patches import Circle, FancyArrowPatch

from mhsa_helpers import rope_frequencies
from mhsa_helpers.lessons.rotary_position_embeddings import rotating_pairs_diagram


@pytest.mark.parametrize(("d_head", "base"), [(8, 10000.0), (6, 100.0)])
def test_rope_dials_point_at_position_times_frequency(d_head, base):
    positions = 4
    fig = rotating_pairs_diagram(d_head, base, positions)
    ax = fig.axes[0]
    dials = [p for p in ax.patches if isinstance(p, Circle)]
    hands = [p for p in ax.patches if isinstance(p, FancyArrowPatch)]
    assert len(dials) == len(hands) == positions * d_head // 2
    thetas = rope_frequencies(d_head, base=base).tolist()
    for index, hand in enumerate(hands):
        pair, m = divmod(index, positions)
        (x0, y0), (x1, y1) = hand._posA_posB  # the hand's two ends, as given
        assert math.isclose(
            math.atan2(y1 - y0, x1 - x0) % (2 * math.pi), (m * thetas[pair]) % (2 * math.pi), abs_tol=1e-9
        )


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: rotating_pairs_diagram(d_head=7), "d_head"),
        (lambda: rotating_pairs_diagram(base=-1.0), "base"),
    ],
)
def test_diagrams_refuse_what_they_cannot_draw(make, message):
    with pytest.raises(ValueError, match=message):
        make()
