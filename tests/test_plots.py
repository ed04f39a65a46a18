"""The plotting functions draw exactly the values they are given.

Each test reads back what landed on the Axes (image arrays, annotation strings,
tick labels, line data, arrow components) and compares it with values computed
here from the inputs, with formulas written out independently of the package.
"""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from mhsa_helpers.teaching import figures


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def image_of(ax):
    assert len(ax.images) == 1
    return np.asarray(ax.images[0].get_array())


# ---------------------------------------------------------------- attention_heatmap


@pytest.mark.parametrize("as_tensor", [True, False])
def test_attention_heatmap_draws_and_annotates_the_weights(as_tensor):
    weights = np.array([[0.7, 0.2, 0.1], [0.25, 0.5, 0.25]])
    given = torch.tensor(weights, dtype=torch.float32) if as_tensor else weights
    ax = figures.attention_heatmap(given, query_tokens=["a", "b"], key_tokens=["x", "y", "z"], title="t")
    assert isinstance(ax, Axes)
    np.testing.assert_allclose(image_of(ax), weights, rtol=1e-6)
    assert [t.get_text() for t in ax.texts] == ["0.70", "0.20", "0.10", "0.25", "0.50", "0.25"]
    # Each annotation sits in its own cell (x = key index, y = query index).
    assert [t.get_position() for t in ax.texts] == [(j, i) for i in range(2) for j in range(3)]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["x", "y", "z"]
    assert ax.images[0].get_clim() == (0.0, 1.0)
    assert ax.get_title() == "t"


def test_attention_heatmap_annotation_default_and_range():
    ax = figures.attention_heatmap(np.full((9, 9), 1 / 9))
    assert len(ax.texts) == 0  # more than 8 tokens: colours only
    counts = np.array([[1.0, 2.0], [4.0, 5.0]])
    ax = figures.attention_heatmap(counts, vmin=None, vmax=None, annotate=True, fmt="{:.1f}")
    assert ax.images[0].get_clim() == (1.0, 5.0)
    assert [t.get_text() for t in ax.texts] == ["1.0", "2.0", "4.0", "5.0"]
    # Dark cells get white text, light cells black.
    assert [t.get_color() for t in ax.texts] == ["black", "black", "white", "white"]


def test_attention_heatmap_is_read_with_a_colour_bar_and_named_axes():
    ax = figures.attention_heatmap(np.eye(3))
    assert ax.get_ylabel() == "query" and ax.get_xlabel() == "key"
    bars = [other for other in ax.figure.axes if other is not ax]
    assert len(bars) == 1 and bars[0].get_ylabel() == "attention weight"
    bare = figures.attention_heatmap(np.eye(3), colorbar=None, row_name=None, col_name=None)
    assert len(bare.figure.axes) == 1 and bare.get_xlabel() == ""


# ---------------------------------------------------------------- scores_heatmap


def test_scores_heatmap_puts_white_exactly_on_zero():
    scores = np.array([[-3.0, 1.0], [2.0, 0.0]])
    ax = figures.scores_heatmap(scores, annotate=True, fmt="{:.1f}")
    low, high = ax.images[0].get_clim()
    assert (low, high) == (-3.0, 3.0)  # symmetric about 0, so 0 sits mid-map
    cmap = ax.images[0].get_cmap()
    r, g, b, _ = cmap(ax.images[0].norm(0.0))
    assert min(r, g, b) > 0.95  # the middle of the diverging map is (nearly) white
    # Both ends of a diverging map are dark: -3 gets white text as 2 does not (2/3 of the way).
    assert [t.get_color() for t in ax.texts] == ["white", "black", "white", "black"]
    assert ax.get_ylabel() == "query" and ax.get_xlabel() == "key"


def test_scores_heatmap_shares_a_limit_and_greys_masked_scores():
    first, second = np.array([[1.0, -2.0]]), np.array([[40.0, -10.0]])
    limit = figures.symmetric_limit(first, second)
    assert limit == 40.0
    a = figures.scores_heatmap(first, limit=limit)
    b = figures.scores_heatmap(second, limit=limit)
    assert a.images[0].get_clim() == b.images[0].get_clim() == (-40.0, 40.0)
    masked = figures.scores_heatmap(np.array([[0.5, -np.inf]]), annotate=True)
    assert masked.images[0].get_array().mask.tolist() == [[False, True]]
    assert [t.get_text() for t in masked.texts] == ["0.50", "−∞"]
    with pytest.raises(ValueError, match="limit"):
        figures.scores_heatmap(first, limit=0.0)


luminance = figures.relative_luminance


def test_relative_luminance_is_wcags():
    # WCAG 2's definition: black 0, white 1, each primary its coefficient, and sRGB's mid grey
    # (0.5 encoded) 0.214 after linearising; the threshold 0.179 is where black and white text contrast equally.
    assert luminance((0.0, 0.0, 0.0, 1.0)) == 0.0 and luminance((1.0, 1.0, 1.0, 1.0)) == pytest.approx(1.0)
    assert [luminance(c) for c in ((1, 0, 0), (0, 1, 0), (0, 0, 1))] == [0.2126, 0.7152, 0.0722]
    assert luminance((0.5, 0.5, 0.5)) == pytest.approx(0.2140, abs=1e-4)
    assert pytest.approx((0.179 + 0.05) / 0.05, rel=0.01) == (1.0 + 0.05) / (0.179 + 0.05)


def test_scores_heatmap_draws_one_signed_scores_on_a_sequential_scale_from_the_extreme_to_zero():
    # ALiBi-like biases, all <= 0: the colour range is [min, 0], with no unused positive half.
    first, second = np.array([[0.0, -0.5], [-1.0, -2.5]]), np.array([[0.0, -0.25], [-0.5, -np.inf]])
    limit = figures.symmetric_limit(first, second)
    a = figures.scores_heatmap(first, limit=limit, sequential=True, annotate=True)
    b = figures.scores_heatmap(second, limit=limit, sequential=True, annotate=True)
    assert a.images[0].get_clim() == b.images[0].get_clim() == (-2.5, 0.0)
    np.testing.assert_array_equal(image_of(a), first)
    # Sequential: the further from 0, the darker, all the way (a diverging map would turn pale again).
    image = a.images[0]
    lightness = [luminance(image.cmap(image.norm(v))) for v in np.linspace(-2.5, 0.0, 26)]
    assert (np.diff(lightness) > 0).all()
    assert lightness[-1] > 0.8 and lightness[0] < 0.05  # pale at 0, dark at the far end
    # The written values stay readable: white on the dark cell, black on the pale ones.
    assert [t.get_text() for t in a.texts] == ["0.00", "-0.50", "-1.00", "-2.50"]
    assert [t.get_color() for t in a.texts] == ["black", "black", "black", "white"]
    # Masked scores are still grey, and written as -inf in black.
    assert b.images[0].get_array().mask.tolist() == [[False, False], [False, True]]
    assert b.texts[-1].get_text() == "−∞" and b.texts[-1].get_color() == "black"
    # Scores all >= 0 get [0, limit], still pale at 0.
    positive = figures.scores_heatmap(np.array([[0.0, 3.0]]), sequential=True).images[0]
    assert positive.get_clim() == (0.0, 3.0)
    assert luminance(positive.cmap(positive.norm(0.0))) > 0.8 > luminance(positive.cmap(positive.norm(3.0)))
    assert figures.ONE_SIGNED_CMAP != figures.SCORES_CMAP


def test_scores_heatmap_keeps_both_signs_on_the_diverging_map():
    with pytest.raises(ValueError, match="one sign"):
        figures.scores_heatmap(np.array([[1.0, -2.0]]), sequential=True)
    with pytest.raises(TypeError, match="sequential"):
        figures.scores_heatmap(np.array([[1.0, 2.0]]), sequential="yes")
    # The default is unchanged: a diverging map symmetric about 0, even for one-signed scores.
    ax = figures.scores_heatmap(np.array([[0.0, -2.0]]))
    assert ax.images[0].get_clim() == (-2.0, 2.0) and ax.images[0].get_cmap().name.startswith(figures.SCORES_CMAP)


def test_attention_heatmap_into_given_axes():
    _fig, (left, right) = plt.subplots(1, 2)
    assert figures.attention_heatmap(np.eye(2), ax=right) is right
    assert len(left.images) == 0 and len(right.images) == 1


def test_attention_heatmap_rejects_bad_input():
    with pytest.raises(ValueError, match="weights"):
        figures.attention_heatmap(np.ones((2, 2, 2)))
    with pytest.raises(ValueError, match="query_tokens"):
        figures.attention_heatmap(np.ones((2, 3)), query_tokens=["a"])
    with pytest.raises(ValueError, match="key_tokens"):
        figures.attention_heatmap(np.ones((2, 3)), key_tokens=["a", "b"])
    with pytest.raises(TypeError, match="query_tokens"):
        figures.attention_heatmap(np.ones((2, 2)), query_tokens="ab")


# ---------------------------------------------------------------- head_grid


def test_head_grid_one_heatmap_per_head():
    rng = np.random.default_rng(0)
    weights = rng.dirichlet(np.ones(4), size=(6, 4))
    fig = figures.head_grid(torch.tensor(weights), tokens=list("abcd"), ncols=4, title="six heads", highlight=2)
    assert isinstance(fig, Figure)
    panels = [ax for ax in fig.axes if ax.images]
    assert len(panels) == 6
    for h, ax in enumerate(panels):
        np.testing.assert_allclose(image_of(ax), weights[h])
        assert ax.get_title() == f"head {h + 1}"
    # 4 per row: the second row starts under the first.
    assert panels[4].get_position().x0 == pytest.approx(panels[0].get_position().x0)
    assert panels[4].get_position().y0 < panels[0].get_position().y0
    assert panels[2].spines["left"].get_edgecolor()[:3] != panels[1].spines["left"].get_edgecolor()[:3]
    assert any(t.get_text() == "six heads" for t in fig.texts)
    # One colour bar for all heads (they share 0..1), and the axes are named once.
    bars = [ax for ax in fig.axes if not ax.images]
    assert len(bars) == 1 and bars[0].get_ylabel() == "attention weight"
    assert [ax.get_ylabel() for ax in panels] == ["query", "", "", "", "query", "", "", ""][:6]
    assert [ax.get_xlabel() for ax in panels] == ["", "", "key", "key", "key", "key"]
    assert all(ax.images[0].get_clim() == (0.0, 1.0) for ax in panels)


def test_head_grid_small_grids_are_annotated():
    weights = np.array([[[0.6, 0.4], [0.1, 0.9]], [[1.0, 0.0], [0.5, 0.5]]])
    fig = figures.head_grid(weights)
    panels = [ax for ax in fig.axes if ax.images]
    assert [t.get_text() for t in panels[1].texts] == ["1.00", "0.00", "0.50", "0.50"]


def test_head_grid_rejects_bad_input():
    with pytest.raises(ValueError, match="weights"):
        figures.head_grid(np.ones((3, 3)))
    with pytest.raises(ValueError, match="tokens"):
        figures.head_grid(np.ones((2, 3, 3)), tokens=["a", "b"])
    with pytest.raises(ValueError, match="square"):
        figures.head_grid(np.ones((2, 2, 3)), tokens=["a", "b"])


# ---------------------------------------------------------------- mask_heatmap


def test_mask_heatmap_shows_true_as_allowed():
    mask = torch.ones(4, 4, dtype=torch.bool).tril()
    ax = figures.mask_heatmap(mask, query_tokens=list("abcd"), key_tokens=list("abcd"))
    np.testing.assert_array_equal(image_of(ax), np.tril(np.ones((4, 4))))
    image = ax.images[0]
    allowed = image.cmap(image.norm(1))
    blocked = image.cmap(image.norm(0))
    assert matplotlib.colors.to_hex(allowed) == figures.MASK_COLORS[1]
    assert matplotlib.colors.to_hex(blocked) == figures.MASK_COLORS[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["may attend (True)", "blocked (False)"]


def test_mask_heatmap_requires_a_boolean_mask():
    with pytest.raises(TypeError, match="mask"):
        figures.mask_heatmap(torch.ones(2, 2))
    with pytest.raises(TypeError, match="mask"):
        figures.mask_heatmap(np.ones((2, 2)))


# ---------------------------------------------------------------- benchmark_plot


def test_benchmark_plot_one_sorted_line_per_group():
    rows = [
        {"implementation": "fused", "n": 512, "median_ms": 2.0},
        {"implementation": "explicit", "n": 128, "median_ms": 1.5},
        {"implementation": "fused", "n": 128, "median_ms": 0.5},
        {"implementation": "explicit", "n": 512, "median_ms": 9.0},
    ]
    ax = figures.benchmark_plot(rows)
    assert [line.get_label() for line in ax.lines] == ["fused", "explicit"]
    np.testing.assert_array_equal(ax.lines[0].get_xdata(), [128, 512])
    np.testing.assert_array_equal(ax.lines[0].get_ydata(), [0.5, 2.0])
    np.testing.assert_array_equal(ax.lines[1].get_ydata(), [1.5, 9.0])
    assert ax.get_yscale() == "log" and ax.get_xscale() == "linear"  # 128 -> 512 spans 4x only
    ax = figures.benchmark_plot([*rows, {"implementation": "fused", "n": 4096, "median_ms": 30.0}], logy=False)
    assert ax.get_yscale() == "linear" and ax.get_xscale() == "log"


def test_benchmark_plot_rejects_bad_rows():
    with pytest.raises(ValueError, match="rows"):
        figures.benchmark_plot([])
    with pytest.raises(ValueError, match="median_ms"):
        figures.benchmark_plot([{"implementation": "a", "n": 1}])
    with pytest.raises(TypeError, match=r"rows\[0\]"):
        figures.benchmark_plot([("a", 1, 2.0)])


def test_plots_make_fixed_size_figures_and_nothing_random():
    a = figures.attention_heatmap(np.eye(3)).figure
    b = figures.attention_heatmap(np.eye(3)).figure
    assert tuple(a.get_size_inches()) == tuple(b.get_size_inches())
    a.canvas.draw()
    b.canvas.draw()
    np.testing.assert_array_equal(np.asarray(a.canvas.buffer_rgba()), np.asarray(b.canvas.buffer_rgba()))
    assert math.isclose(a.get_size_inches()[0], 1.6 + 0.55 * 3)


def test_trailing_mean_averages_the_last_window_values_fewer_at_the_start():
    values = np.arange(1.0, 8.0)
    expected = [np.mean(values[max(0, i - 2) : i + 1]) for i in range(7)]  # the recipe, spelled out
    np.testing.assert_allclose(figures.trailing_mean(values, 3), expected)
    assert figures.trailing_mean([1.0, 3.0, 5.0, 7.0], window=2).tolist() == [1.0, 2.0, 4.0, 6.0]
    np.testing.assert_allclose(
        figures.trailing_mean(np.arange(12.0)), [np.mean(np.arange(12.0)[max(0, i - 9) : i + 1]) for i in range(12)]
    )  # 10 by default
    with pytest.raises(ValueError, match="values must be a 1-D sequence of losses"):
        figures.trailing_mean([[1.0]])
    with pytest.raises(ValueError, match=r"^window must be an int >= 1, got window=0$"):
        figures.trailing_mean(values, 0)


def test_induction_loss_curves_draw_each_run_raw_and_smoothed_against_chance_and_the_phase_change():
    histories = {"A": [3.4, 2.0, 0.5, 0.3, 0.2], "B": [3.4, 3.3, 3.0, 2.0]}
    ax = figures.induction_loss_curves(histories, vocab_size=32, colors=("red", "blue"), styles=("-", "--"), window=2)
    lines = ax.get_lines()
    for name, color, style in (("A", "red", "-"), ("B", "blue", "--")):
        losses = histories[name]
        raw, smooth = [line for line in lines if line.get_color() == color]
        assert raw.get_ydata().tolist() == losses and raw.get_linewidth() < smooth.get_linewidth()
        expected = [np.mean(losses[max(0, i - 1) : i + 1]) for i in range(len(losses))]  # the 2-step recipe
        np.testing.assert_allclose(smooth.get_ydata(), expected)
        assert (smooth.get_label(), smooth.get_linestyle()) == (name, style)
    levels = {line.get_label(): line.get_ydata()[0] for line in lines if len(line.get_xdata()) == 2}
    assert levels == {"chance: ln 31 = 3.43": pytest.approx(math.log(31)), "1.0: the circuit has formed": 1.0}
    assert ax.get_xlim() == (0, 5) and ax.get_ylim() == (0, 4.0)
    assert ax.get_xlabel() == "training step" and ax.get_ylabel() == "loss on the repeated tokens (nats)"
    assert ax.get_legend() is not None
    # a larger vocabulary lifts the chance line and the top; another level gets its own line
    ax = figures.induction_loss_curves(histories, vocab_size=200, colors="rb", styles="--", level=2.5)
    levels = {line.get_label(): line.get_ydata()[0] for line in ax.get_lines() if len(line.get_xdata()) == 2}
    assert levels["2.5 nats"] == 2.5 and ax.get_ylim()[1] == pytest.approx(math.log(199) + 0.5)
    np.testing.assert_allclose(  # 10 steps by default: the whole history
        ax.get_lines()[1].get_ydata(), np.cumsum(histories["A"]) / np.arange(1, 6)
    )


@pytest.mark.parametrize(
    ("histories", "options", "message"),
    [
        ({}, {}, "histories must map at least one run's name to its losses"),
        ([[1.0]], {}, "histories must map at least one run's name to its losses"),
        ({"A": [1.0]}, {"vocab_size": 2}, "vocab_size must be an int >= 3 (BOS and two ordinary tokens), got 2"),
        ({"A": [1.0]}, {"vocab_size": True}, "vocab_size must be an int >= 3 (BOS and two ordinary tokens), got True"),
        ({"A": [1.0], "B": [1.0]}, {"colors": "r"}, "colors and styles must give one per run (2), got 1 and 2"),
        ({"A": [1.0], "B": [1.0]}, {"styles": "-"}, "colors and styles must give one per run (2), got 2 and 1"),
        ({"A": [1.0]}, {"level": 0.0}, "level must be a loss > 0 (nats), got level=0.0"),
        ({"A": [1.0]}, {"level": True}, "level must be a loss > 0 (nats), got level=True"),
        ({"A": [[1.0]]}, {}, "histories must hold 1-D sequences of losses, got shape (1, 1) for 'A'"),
        ({"A": []}, {}, "histories must hold 1-D sequences of losses, got shape (0,) for 'A'"),
    ],
)
def test_induction_loss_curves_refuse_what_they_cannot_draw(histories, options, message):
    arguments = {"vocab_size": 32, "colors": "rb", "styles": "--", **options}
    with pytest.raises(ValueError) as refused:
        figures.induction_loss_curves(histories, **arguments)
    assert str(refused.value) == message
    plt.close("all")
