"""Notebook 09's lesson pieces: the experiments on notebook 07's model, how far stacked windows
reach, the explorers and the diagram (the checkers: ``test_long_context_checkers.py``)."""

from __future__ import annotations

import itertools
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import pytest
import torch
from notebook_cells import cells, source

from mhsa_helpers.lessons.long_context import (
    TRAINED_LENGTH,
    long_batch,
    position_losses,
    split_losses_with_mask,
    stretch_explorer,
    stretched_model,
    window_explorer,
    window_reach,
)
from mhsa_helpers.lessons.long_context.diagrams import streaming_cache_diagram
from mhsa_helpers.lessons.long_context.explorer import ORIGINAL_LENGTHS
from mhsa_helpers.long_context import RopeScaling, alibi_bias, alibi_slopes, rope_wavelengths, sliding_window_mask
from mhsa_helpers.rope import scaled_rope_frequencies
from mhsa_helpers.teaching.figures import relative_luminance as luminance

NOTEBOOK = Path(__file__).resolve().parents[3] / "notebooks" / "09_long_context.ipynb"

# ---------------------------------------------------------------- experiments


def test_the_stretched_model_is_notebook_07s_model_within_the_trained_length():
    batch = long_batch(TRAINED_LENGTH)
    short, long = stretched_model(TRAINED_LENGTH), stretched_model(128)
    with torch.no_grad():
        torch.testing.assert_close(short(batch.tokens)[0], long(batch.tokens)[0])
    assert split_losses_with_mask(short, batch)["repeated"] < 1.0


def test_a_window_as_long_as_the_sequence_changes_nothing():
    model, batch = stretched_model(64), long_batch(64, batch_size=32)
    assert split_losses_with_mask(model, batch) == pytest.approx(
        split_losses_with_mask(model, batch, sliding_window_mask(64, window=64))
    )


def test_position_losses_average_the_repeated_tokens_of_each_bin():
    model, batch = stretched_model(64), long_batch(64, batch_size=64)
    centres, losses, mean = position_losses(model, batch, bin_size=64)
    assert centres.shape == losses.shape == (1,)
    assert float(losses[0]) == pytest.approx(split_losses_with_mask(model, batch)["repeated"], rel=1e-5)
    assert mean == pytest.approx(float(losses[0]), rel=1e-6)
    binned = position_losses(model, batch, bin_size=8)
    assert binned.mean == pytest.approx(mean, rel=1e-6) and binned.losses.shape == (8,)
    with pytest.raises(ValueError, match="bin_size"):
        position_losses(model, batch, bin_size=0)


def test_stretching_with_a_factor_of_one_is_rope_as_trained():
    batch = long_batch(64, batch_size=16)
    plain, unit = stretched_model(64), stretched_model(64, RopeScaling("linear", 1.0, 32))
    with torch.no_grad():
        torch.testing.assert_close(plain(batch.tokens)[0], unit(batch.tokens)[0])


# ---------------------------------------------------------------- reach


@pytest.mark.parametrize(("window", "layers"), [(1, 3), (2, 1), (4, 2), (3, 5)])
def test_stacked_windows_reach_layers_times_window_minus_one(window, layers):
    mask, reach = window_reach(30, window, layers)
    assert torch.equal(mask, sliding_window_mask(30, window=window))
    for i in range(30):
        for j in range(30):
            assert bool(reach[i, j]) == (0 <= i - j <= layers * (window - 1))


# ---------------------------------------------------------------- explorers and diagram


def test_stretch_explorer_draws_what_the_formulas_give():
    explorer = stretch_explorer(method="ntk", factor=4, original_len=32, d_head=16)
    try:
        data = explorer.data
        assert data["stretch"][0] == pytest.approx(1.0) and data["stretch"][-1] == pytest.approx(4.0)
        assert data["unseen_before"] == 6
        data = explorer.update(method="linear").data
        assert data["stretch"] == pytest.approx([4.0] * 8)
        assert explorer.update(method="none").data["kept"] == 8
        with pytest.raises(ValueError, match="method"):
            explorer.update(method="dynamic")
    finally:
        explorer.close()
    with pytest.raises(ValueError, match="factor"):
        stretch_explorer(factor=3)


def test_the_trained_length_control_moves_what_depends_on_it():
    """Moving "trained length L" changes the pairs that never turned in L tokens, YaRN's ramp (which pairs it keeps)
    and the dashed line; the wavelengths as trained do not depend on it."""
    explorer = stretch_explorer(method="yarn", factor=4, original_len=32, d_head=16)
    try:
        short = explorer.data
        long = explorer.update(original_len=max(ORIGINAL_LENGTHS)).data
        assert short["before"] == pytest.approx(long["before"])
        for data in (short, long):
            assert data["unseen_before"] == int((data["before"] > data["original_len"]).sum())
            scaling = RopeScaling("yarn", 4.0, data["original_len"])
            assert data["after"] == pytest.approx(rope_wavelengths(scaled_rope_frequencies(16, 10000.0, scaling)[0]))
        assert short["unseen_before"] != long["unseen_before"] and short["after"] != pytest.approx(long["after"])
        left = explorer.figure.axes[0]
        assert max(ORIGINAL_LENGTHS) in {line.get_ydata()[0] for line in left.get_lines()}
        assert f"trained length L = {max(ORIGINAL_LENGTHS)}" in left.get_title()
    finally:
        explorer.close()


def test_window_explorer_counts_how_far_back_the_last_token_is_reached():
    explorer = window_explorer(window=3, layers=2, seq_len=20)
    try:
        assert explorer.data["furthest_back"] == 4
        assert explorer.update(window=5, layers=3).data["furthest_back"] == 12
        assert explorer.update(window=16, layers=6).data["furthest_back"] == 19  # capped by the sequence
    finally:
        explorer.close()
    with pytest.raises(ValueError, match="window"):
        window_explorer(window=0)


def test_streaming_cache_diagram_keeps_sinks_and_window():
    fig = streaming_cache_diagram(seq_len=10, window=3, sinks=2)
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert "sinks + window = 2 + 3 keys and values" in texts
    # Each position once in the stream, and the kept ones (0, 1, 7, 8, 9) once more in the cache.
    assert sum(t.isdigit() for t in texts) == 10 + 5
    with pytest.raises(ValueError, match="sinks"):
        streaming_cache_diagram(seq_len=10, window=3, sinks=8)


# ---------------------------------------------------------------- the notebook's ALiBi figure


def test_the_notebooks_alibi_figure_is_one_sequential_scale_from_the_largest_penalty_to_zero(monkeypatch):
    """ALiBi's biases are all <= 0: the notebook draws its two heads on a sequential map over [min, 0], shared,
    with one colour bar, so that no half of the bar goes unused and head 4 (slopes 8 times smaller) still shows
    its pattern."""
    import matplotlib.pyplot as plt

    from mhsa_helpers.teaching import claims, figures

    monkeypatch.setattr(plt, "show", lambda *args, **kwargs: None)
    cell = next(c for c in cells(NOTEBOOK) if c.get("id") == "alibi")
    # The names the cell takes from the notebook's imports (not run here: they set global print options and seed).
    namespace = {"torch": torch, "plt": plt, "alibi_bias": alibi_bias, "alibi_slopes": alibi_slopes}
    namespace |= {"claim": claims.claim, "scores_heatmap": figures.scores_heatmap}
    namespace |= {"symmetric_limit": figures.symmetric_limit}
    try:
        exec(compile(source(cell), NOTEBOOK.stem, "exec"), namespace)
        figure, bias = plt.gcf(), namespace["bias"]
        panels = [ax for ax in figure.axes if ax.images]
        bars = [ax for ax in figure.axes if not ax.images]
        assert len(panels) == 2 and len(bars) == 1 and bars[0].get_ylabel()
        lowest = float(torch.minimum(bias[0], bias[3]).min())
        assert bool((bias <= 0).all()) and lowest == -2.5
        for ax, head in zip(panels, (0, 3), strict=True):
            assert ax.images[0].get_array().tolist() == bias[head].tolist()
            assert ax.images[0].get_clim() == (lowest, 0.0)
            assert ax.get_xlabel() == "key" and ax.get_ylabel() == "query"
        image = panels[0].images[0]
        lightness = [luminance(image.cmap(image.norm(v))) for v in torch.linspace(lowest, 0.0, 26).tolist()]
        assert all(a < b for a, b in itertools.pairwise(lightness))  # sequential: darker the further from 0
        # Head 4's furthest key (-0.31) is visibly darker than its diagonal (0).
        head_4 = panels[1].images[0]
        diagonal, furthest = (luminance(head_4.cmap(head_4.norm(v))) for v in (0.0, float(bias[3].min())))
        assert diagonal - furthest > 0.25
    finally:
        plt.close("all")
