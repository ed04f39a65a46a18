"""Notebook 05's figures draw exactly the values they are given: the rotation arrows turn by m·θ, the
frequency plot shows each pair's θ, the score-versus-distance curve is the rotated dot product.

Each test reads back what landed on the Axes and compares it with values computed here from the inputs,
with formulas written out independently of the package.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from mhsa_helpers.lessons.rotary_position_embeddings import figures as rope_figures


def rotate(pair, angle):
    c, s = np.cos(angle), np.sin(angle)
    return np.array([c * pair[0] - s * pair[1], s * pair[0] + c * pair[1]])


def test_rope_rotation_arrows_turn_by_m_theta():
    ax = rope_figures.rope_rotation_arrows(
        np.array([0.6, 0.8]), base=10000.0, d_head=8, pair_index=1, positions=[0, 1, 5]
    )
    theta = 10000.0 ** (-2 * 1 / 8)
    expected = np.stack([rotate([0.6, 0.8], m * theta) for m in (0, 1, 5)])
    quiver = ax.collections[0]
    np.testing.assert_allclose(np.column_stack([quiver.U, quiver.V]), expected, atol=1e-6)
    assert [t.get_text() for t in ax.texts] == ["m=0", "m=1", "m=5"]
    assert f"{theta:.3g}" in ax.get_title()


def test_rope_rotation_arrows_rejects_bad_input():
    with pytest.raises(ValueError, match="vector"):
        rope_figures.rope_rotation_arrows([1.0, 0.0, 0.0], base=100.0, d_head=8, pair_index=0, positions=[0])
    with pytest.raises(ValueError, match="pair_index"):
        rope_figures.rope_rotation_arrows([1.0, 0.0], base=100.0, d_head=8, pair_index=4, positions=[0])
    with pytest.raises(ValueError, match="d_head"):
        rope_figures.rope_rotation_arrows([1.0, 0.0], base=100.0, d_head=7, pair_index=0, positions=[0])
    with pytest.raises(ValueError, match="positions"):
        rope_figures.rope_rotation_arrows([1.0, 0.0], base=100.0, d_head=8, pair_index=0, positions=[])
    with pytest.raises(ValueError, match=r"positions\[1\]"):
        rope_figures.rope_rotation_arrows([1.0, 0.0], base=100.0, d_head=8, pair_index=0, positions=[0, -1])


def test_rope_frequencies_plot():
    ax = rope_figures.rope_frequencies_plot(16, 500.0)
    x, y = ax.lines[0].get_data()
    np.testing.assert_array_equal(x, np.arange(8))
    np.testing.assert_allclose(y, [500.0 ** (-2 * i / 16) for i in range(8)], rtol=1e-6)
    assert ax.get_yscale() == "log"


@pytest.mark.parametrize(
    "highlight, error, message",
    [
        (8, ValueError, r"highlight must be in \[0, 7\], got 8"),
        (-1, ValueError, r"highlight must be in \[0, 7\]"),
        (2.0, TypeError, r"highlight must be an int, got float"),
        (True, TypeError, r"highlight must be an int, got bool"),
    ],
)
def test_rope_frequencies_plot_refuses_a_bad_highlight_without_opening_a_figure(highlight, error, message):
    plt.close("all")
    with pytest.raises(error, match=message):
        rope_figures.rope_frequencies_plot(16, 500.0, highlight=highlight)
    assert plt.get_fignums() == []
    ax = rope_figures.rope_frequencies_plot(16, 500.0, highlight=7)
    assert plt.get_fignums() == [ax.figure.number]
    np.testing.assert_allclose(ax.lines[1].get_data(), [[7], [500.0 ** (-14 / 16)]], rtol=1e-6)


@pytest.mark.parametrize("convention", ["interleaved", "half_split"])
def test_rope_score_vs_distance_is_the_rotated_dot_product(convention):
    rng = np.random.default_rng(1)
    q, k = rng.normal(size=8), rng.normal(size=8)
    base, max_distance = 100.0, 20
    thetas = base ** (-np.arange(0, 8, 2) / 8)
    pairs = [(2 * i, 2 * i + 1) for i in range(4)] if convention == "interleaved" else [(i, i + 4) for i in range(4)]
    expected = []
    for d in range(max_distance + 1):
        # Query at position d, key at 0: only the relative angle d * theta_i matters.
        expected.append(sum(rotate(q[list(p)], d * t) @ k[list(p)] for p, t in zip(pairs, thetas, strict=True)))
    ax = rope_figures.rope_score_vs_distance(
        torch.tensor(q), k, base=base, max_distance=max_distance, convention=convention
    )
    x, y = ax.lines[0].get_data()
    np.testing.assert_array_equal(x, np.arange(max_distance + 1))
    np.testing.assert_allclose(y, expected, atol=1e-5)
    shifted = rope_figures.rope_score_vs_distance(
        q, k, base=base, max_distance=max_distance, convention=convention, offset=37
    )
    np.testing.assert_allclose(shifted.lines[0].get_ydata(), expected, atol=1e-4)


def test_rope_score_vs_distance_rejects_bad_input():
    with pytest.raises(ValueError, match="d_head"):
        rope_figures.rope_score_vs_distance(np.ones(5), np.ones(5), base=100.0, max_distance=3)
    with pytest.raises(ValueError, match="k must have the shape of q"):
        rope_figures.rope_score_vs_distance(np.ones(4), np.ones(6), base=100.0, max_distance=3)
    with pytest.raises(ValueError, match="convention"):
        rope_figures.rope_score_vs_distance(np.ones(4), np.ones(4), base=100.0, max_distance=3, convention="halves")
