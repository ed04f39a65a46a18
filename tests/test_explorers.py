"""The explorers, driven headlessly: controls are set from Python exactly as a slider
would set them, and the tests check what was computed and drawn (``explorer.data``,
the Axes of ``explorer.figure`` and the picture sent to the browser).

Expected values come from outside the explorer: seed 002's printed weights, formulas
written out here with numpy, or the package's module built independently with the
seed the explorers document.
"""

from __future__ import annotations

import gc
import io
import math

import matplotlib

matplotlib.use("Agg")

import ipywidgets as widgets
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from matplotlib.figure import Figure
from PIL import Image

from mhsa_helpers import MultiHeadSelfAttention, RotaryEmbedding
from mhsa_helpers.examples import TELESCOPE_SENTENCE, money_bank_grows, sentence_embeddings
from mhsa_helpers.lessons import LESSONS
from mhsa_helpers.lessons.causal_masking import masking_explorer
from mhsa_helpers.lessons.causal_mhsa_with_rope import mhsa_explorer
from mhsa_helpers.lessons.multi_head_attention import heads_explorer
from mhsa_helpers.lessons.qkv_by_hand import qkv_explorer
from mhsa_helpers.lessons.rotary_position_embeddings import rope_explorer
from mhsa_helpers.lessons.scaled_dot_product_attention import scaling_explorer
from mhsa_helpers.teaching.explorer import (
    CSS_DPI,
    DPI,
    LAYOUT_CACHE,
    Explorer,
    nearby_value,
    open_explorers,
    option_values,
)

ALL = [lesson.explorer for lesson in LESSONS if lesson.explorer is not None]


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")
    # Close the explorers a test left open, so that each test starts from none.
    for explorer in open_explorers():
        explorer.close()


def live_figures():
    gc.collect()
    return sum(type(o) is Figure for o in gc.get_objects())


def widget_registry():
    """ipywidgets' registry of open widgets (a widget leaves it when closed)."""
    from ipywidgets.widgets import widget as widget_module

    if hasattr(widget_module, "_instances"):  # ipywidgets 8
        return widget_module._instances
    return widgets.Widget.widgets  # ipywidgets 7


def heatmap_axes(figure):
    return [ax for ax in figure.axes if ax.images]


def module_weights(d_model, num_heads, seq_len, **options):
    """The weights the heads/MHSA explorers promise: their documented seed and inputs,
    built here independently of the explorer code."""
    torch.manual_seed(0)
    module = MultiHeadSelfAttention(d_model, num_heads, **options).eval()
    _, x = sentence_embeddings(TELESCOPE_SENTENCE, d_model, seed=0)
    x = 3.0 * x[:seq_len]
    with torch.no_grad():
        output, weights = module(x, need_weights=True)
    return module, x, weights.double().numpy(), output.double().numpy()


def softmax_np(scores):
    shifted = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


# ---------------------------------------------------------------- every explorer


@pytest.mark.parametrize("make", ALL, ids=lambda f: f.__name__)
def test_explorer_is_a_widget_with_a_picture_of_the_figure(make):
    explorer = make()
    assert isinstance(explorer, Explorer)
    assert isinstance(explorer, widgets.VBox)
    assert explorer.redraw_count == 1
    image = Image.open(io.BytesIO(explorer.picture))
    assert image.format == explorer._image.format.upper() == "JPEG"
    width, height = explorer.figure.get_size_inches() * explorer.figure.dpi
    assert image.size == (round(width), round(height))
    assert explorer.data["caption"] in explorer._caption.value
    # The picture is the drawn canvas, up to JPEG's small losses: compare with the figure's buffer.
    canvas = np.asarray(explorer.figure.canvas.buffer_rgba())[..., :3].astype(int)
    error = np.abs(np.asarray(image.convert("RGB")).astype(int) - canvas)
    assert error.mean() < 1.0, error.mean()
    assert np.percentile(error, 99.9) < 24, np.percentile(error, 99.9)


@pytest.mark.parametrize("make", ALL, ids=lambda f: f.__name__)
def test_the_image_is_rendered_sharp_and_shown_at_its_natural_size(make):
    # Two image pixels per CSS pixel (a high-DPI screen's ratio), for every layout an explorer
    # shows: the page scales the picture down, never up.
    explorer = make()
    for _ in range(3):
        inches = explorer.figure.get_size_inches()
        image = Image.open(io.BytesIO(explorer.picture))
        assert int(explorer._image.width) == round(inches[0] * 100), "one figure inch = 100 CSS pixels"
        assert image.width == 2 * int(explorer._image.width)
        assert image.height == round(inches[1] * 200)
        layout_controls = [c for c in explorer.controls.values() if not c.disabled and nearby_value(c) is not None]
        for control in layout_controls:
            control.value = nearby_value(control)


@pytest.mark.parametrize("make", ALL, ids=lambda f: f.__name__)
def test_selection_sliders_show_a_read_only_readout_of_their_label(make):
    # ipywidgets 8 draws a SelectionSlider's own readout as editable text that ignores typing:
    # each one is hidden and a label beside it shows the option's name.
    explorer = make()
    for name, control in explorer.controls.items():
        if not isinstance(control, widgets.SelectionSlider):
            continue
        assert control.readout is False, name
        boxes = [
            box
            for row in explorer.children
            if isinstance(row, widgets.HBox)
            for box in row.children
            if isinstance(box, widgets.HBox) and control in box.children
        ]
        assert len(boxes) == 1, f"{name} is not shown beside its readout"
        label = boxes[0].children[1]
        assert "mhsa-readout" in label._dom_classes
        assert f">{control.label}<" in label.value, name
        if not control.disabled and nearby_value(control) is not None:
            control.value = nearby_value(control)
            assert f">{control.label}<" in label.value, f"{name}: the readout did not follow the slider"


@pytest.mark.parametrize("make", ALL, ids=lambda f: f.__name__)
def test_moving_any_control_redraws(make):
    explorer = make()
    for name, control in explorer.controls.items():
        before = (explorer.redraw_count, explorer.picture)
        if control.disabled:
            continue  # e.g. the RoPE base while RoPE is off
        if isinstance(control, widgets.Checkbox):
            control.value = not control.value
        elif hasattr(control, "options"):
            values = [o[1] if isinstance(o, tuple) else o for o in control.options]
            others = [v for v in values if v != control.value]
            if not others:
                continue
            control.value = others[-1]
        else:
            # One step down from the top (not to the minimum: a 1-token sequence hides the mask).
            control.value = control.max if control.value != control.max else control.max - control.step
        assert explorer.redraw_count == before[0] + 1, name
        assert explorer.picture != before[1], f"moving {name} did not change the picture"
        assert explorer.data[name] == pytest.approx(control.value)


# (settings, error, message pattern): each is refused by the explorer's function and, for
# settings that are controls, by explorer.update(...) too. The message must name the setting.
IMPOSSIBLE = {
    qkv_explorer: [
        ({"head": 3}, ValueError, r"head must be in \[1, 2\].*got 3"),
        ({"head": 0}, ValueError, r"head must be in \[1, 2\]"),
        ({"head": True}, TypeError, r"head must be an int.*got bool True"),  # True == 1, but not a head
        ({"head": 1.0}, TypeError, r"head must be an int.*got float 1.0"),
        ({"score_scale": 0.0}, ValueError, r"score_scale must be in \[0.1, 1000\]"),
        ({"score_scale": float("nan")}, ValueError, r"score_scale must be in"),
        ({"score_scale": "big"}, TypeError, r"score_scale must be a number.*got str 'big'"),
    ],
    scaling_explorer: [
        ({"d_k": 0}, ValueError, r"d_k must be in \[1, 512\]"),
        ({"d_k": 513}, ValueError, r"d_k must be in \[1, 512\]"),
        ({"d_k": 64.0}, TypeError, r"d_k must be an int.*got float 64.0"),
        ({"sentence": "Hello there"}, ValueError, r"sentence must be one of"),
        ({"scaled": "yes"}, TypeError, r"scaled must be True or False.*got str 'yes'"),
        ({"scaled": 1}, TypeError, r"scaled must be True or False.*got int 1"),
    ],
    masking_explorer: [
        ({"seq_len": 0}, ValueError, r"seq_len must be in \[1, 6\]"),
        ({"seq_len": 7}, ValueError, r"seq_len must be in \[1, 6\]"),
        ({"causal": "no"}, TypeError, r"causal must be True or False.*got str 'no'"),  # bool("no") is True
        ({"causal": None}, TypeError, r"causal must be True or False.*got NoneType"),
        ({"method": "zero"}, ValueError, r"method must be one of 'neg_inf', 'renormalize'"),
        ({"dropout": 1.0}, ValueError, r"dropout must be in \[0, 0.9\]"),
        ({"dropout": -0.1}, ValueError, r"dropout must be in \[0, 0.9\]"),
        ({"dropout": True}, TypeError, r"dropout must be a number.*got bool"),
    ],
    heads_explorer: [
        ({"num_heads": 5}, ValueError, r"num_heads must divide d_model=12.*got num_heads=5"),
        ({"num_heads": 2.0}, TypeError, r"num_heads must be an int.*got float 2.0"),
        ({"num_heads": True}, TypeError, r"num_heads must be an int.*got bool"),
        ({"seq_len": 9}, ValueError, r"seq_len must be in \[1, 8\]"),
        ({"head": 3}, ValueError, r"head must be in \[1, 2\] \(one of the heads\)"),
        ({"head": 0}, ValueError, r"head must be in \[1, 2\]"),
        ({"d_model": 0}, ValueError, r"d_model must be in \[1, 64\]"),
        ({"d_model": 12.0}, TypeError, r"d_model must be an int.*got float"),
    ],
    rope_explorer: [
        ({"d_head": 15}, ValueError, r"d_head must be even"),
        ({"d_head": 16.0}, TypeError, r"d_head must be an int.*got float"),
        ({"base": 1.0}, ValueError, r"base must be in \[10, 1e\+06\]"),
        ({"offset": -1}, ValueError, r"offset must be in \[0, 256\]"),
        ({"offset": 257}, ValueError, r"offset must be in \[0, 256\]"),
        ({"pair_index": 8}, ValueError, r"pair_index must be in \[0, 7\] \(d_head=16 has 8 pairs\)"),
        ({"num_positions": 0}, ValueError, r"num_positions must be in \[1, 16\]"),
        ({"max_distance": 0}, ValueError, r"max_distance must be in \[1, 1024\]"),
    ],
    mhsa_explorer: [
        ({"num_heads": 3}, ValueError, r"num_heads must divide d_model=16.*got num_heads=3"),
        ({"num_heads": 4.0}, TypeError, r"num_heads must be an int.*got float 4.0"),
        ({"num_heads": 16, "rope": True}, ValueError, r"d_head = d_model / num_heads must be even.*d_head=1"),
        ({"rope": "yes"}, TypeError, r"rope must be True or False.*got str 'yes'"),
        ({"rope": 1}, TypeError, r"rope must be True or False.*got int 1"),
        ({"causal": "no"}, TypeError, r"causal must be True or False.*got str 'no'"),
        ({"base": 5.0}, ValueError, r"base must be in \[10, 1e\+06\]"),
        ({"seq_len": 0}, ValueError, r"seq_len must be in \[1, 8\]"),
    ],
}


@pytest.mark.parametrize(
    "make, settings, error, message",
    [(make, *case) for make, cases in IMPOSSIBLE.items() for case in cases],
    ids=lambda v: v.__name__ if callable(v) else None,
)
def test_impossible_settings_are_refused_with_the_setting_named(make, settings, error, message):
    with pytest.raises(error, match=message):
        make(**settings)
    explorer = make()
    if not set(settings) <= set(explorer.controls):
        return  # e.g. d_model: fixed when the explorer is made, not a control
    before = (explorer.values(), explorer.redraw_count, explorer.picture)
    with pytest.raises(error, match=message):
        explorer.update(**settings)
    # Refused before any control moved: nothing changed, nothing was redrawn.
    assert (explorer.values(), explorer.redraw_count, explorer.picture) == before


@pytest.mark.parametrize("make", ALL, ids=lambda f: f.__name__)
def test_unknown_settings_are_refused(make):
    explorer = make()
    with pytest.raises(ValueError, match=r"unknown setting\(s\) \['no_such_control'\]"):
        explorer.update(no_such_control=1)
    with pytest.raises(TypeError, match="no_such_control"):
        make(no_such_control=1)


def test_close_frees_the_figures_and_the_widgets():
    figures, registered = live_figures(), len(widget_registry())
    for make in [heads_explorer] * 2 + ALL:
        explorer = make()
        if make is heads_explorer:
            for num_heads, seq_len in [(1, 3), (3, 4), (4, 5), (6, 6), (12, 7)]:
                explorer.update(num_heads=num_heads, seq_len=seq_len)
            assert len(explorer._layouts) == LAYOUT_CACHE == 4
        assert isinstance(explorer.figure, Figure)  # (not every live figure counted: a full gc each time)
        explorer.close()
        assert len(explorer._layouts) == 0
        with pytest.raises(RuntimeError, match="closed"):
            _ = explorer.figure
        with pytest.raises(RuntimeError, match="closed"):
            explorer.redraw()
        # A control moved after close() draws nothing (and builds no figure).
        count = explorer.redraw_count
        for control in explorer.controls.values():
            if isinstance(control, widgets.IntSlider):
                control.value = control.max if control.value != control.max else control.min
                assert explorer.redraw_count == count
        explorer.close()  # a second close() is harmless
    del explorer, control
    # Every figure is gone, and so is every widget the explorers made (incl. Layout and Style widgets).
    assert live_figures() == figures
    assert len(widget_registry()) == registered


def test_a_new_explorer_trims_the_figures_of_the_older_ones_of_its_kind():
    old = heads_explorer()
    for num_heads, seq_len in [(1, 3), (3, 4), (4, 5), (2, 6)]:
        old.update(num_heads=num_heads, seq_len=seq_len)
    assert len(old._layouts) == 4
    shown = old.figure
    other_kind = masking_explorer()
    assert len(old._layouts) == 4  # another kind leaves it alone
    new = heads_explorer()
    # The old explorer keeps only the figure it shows, and still answers its controls.
    assert len(old._layouts) == 1 and old.figure is shown
    assert len(new._layouts) == 1 and len(other_kind._layouts) == 1
    old.update(num_heads=3, seq_len=4)
    _, _, expected, _ = module_weights(12, 3, 4)
    np.testing.assert_allclose(old.data["weights"], expected, rtol=1e-6, atol=1e-7)
    assert len(heatmap_axes(old.figure)) == 3


def test_open_figures_and_artists_stay_flat_after_24_slider_moves():
    plt.close("all")
    baseline = live_figures()
    explorer = heads_explorer()
    divisors = [1, 2]
    counts = {}
    figure_objects = []
    # A dozen layouts of (heads, length), most visited twice, more than the cache holds: some are evicted.
    for move in range(24):
        if move % 2:
            explorer.controls["num_heads"].value = divisors[(move // 2) % len(divisors)]
        else:
            explorer.controls["seq_len"].value = 3 + (move // 2) % 6
        key = (explorer.data["num_heads"], explorer.data["seq_len"])
        counts.setdefault(key, set()).add((len(explorer.figure.axes), len(explorer.figure.findobj())))
        if move in (11, 23):
            gc.collect()
            figure_objects.append(sum(type(o) is Figure for o in gc.get_objects()))
    assert explorer.redraw_count == 25
    # No pyplot figure is ever opened...
    assert plt.get_fignums() == []
    # ...the off-screen figures (one per recent layout) do not grow with the moves...
    assert figure_objects[0] == figure_objects[1] == baseline + LAYOUT_CACHE
    assert len(explorer._layouts) == LAYOUT_CACHE
    # ...and a layout drawn again holds the same number of axes and artists: nothing piles up.
    assert all(len(seen) == 1 for seen in counts.values()), counts


# ---------------------------------------------------------------- nb01: Q, K, V


def test_qkv_weights_match_seed_001_by_hand_and_sharpen_with_the_score_scale():
    explorer = qkv_explorer()
    example = money_bank_grows()
    for head in (1, 2):
        explorer.controls["head"].value = head
        e = example.embeddings.numpy()
        q = e @ example.w_q[head - 1].numpy()
        k = e @ example.w_k[head - 1].numpy()
        maxima = []
        for scale in (0.1, 1.0, 10.0, 100.0, 1000.0):
            explorer.controls["score_scale"].value = scale
            expected = softmax_np(scale * (q @ k.T) / math.sqrt(3))
            np.testing.assert_allclose(explorer.data["weights"], expected, rtol=1e-10, atol=1e-12)
            np.testing.assert_allclose(explorer.data["weights"].sum(axis=1), 1.0, atol=1e-12)
            maxima.append(explorer.data["weights"].max())
            # The right-hand heatmap draws these weights.
            np.testing.assert_allclose(np.asarray(heatmap_axes(explorer.figure)[1].images[0].get_array()), expected)
        assert maxima == sorted(maxima) and maxima[-1] > 0.9 and abs(maxima[1] - 1 / 3) < 0.03
    explorer.controls["head"].value = 1
    # Seed 001's (correct) Q for "Money" in head 1.
    np.testing.assert_allclose(explorer.data["q"][0], [0.07, 0.05, 0.04], atol=1e-12)


def test_qkv_annotations_show_the_weights():
    explorer = qkv_explorer(score_scale=100.0)
    texts = [t.get_text() for t in heatmap_axes(explorer.figure)[1].texts]
    assert texts == [f"{w:.3f}" for w in explorer.data["weights"].ravel()]


def test_qkv_refuses_impossible_settings():
    with pytest.raises(ValueError, match="head"):
        qkv_explorer(head=3)
    with pytest.raises(ValueError, match="score_scale"):
        qkv_explorer(score_scale=0.0)


# ---------------------------------------------------------------- nb02: scaling


def test_scaling_divides_scores_by_sqrt_dk_and_keeps_the_softmax_from_saturating():
    explorer = scaling_explorer(d_k=512, scaled=True)
    scaled = explorer.data
    explorer.controls["scaled"].value = False
    unscaled = explorer.data
    np.testing.assert_allclose(unscaled["scores"], scaled["scores"] * math.sqrt(512), rtol=1e-6)
    assert unscaled["score_std"] == pytest.approx(scaled["score_std"] * math.sqrt(512), rel=1e-6)
    # q.k of unit-variance vectors: std about sqrt(d_k) unscaled, about 1 scaled.
    assert 0.5 < scaled["score_std"] < 2.0
    assert unscaled["weights"].max() > 0.99 > scaled["weights"].max()
    q, k = scaled["q"], scaled["k"]
    np.testing.assert_allclose(scaled["scores"], q @ k.T / math.sqrt(512), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(scaled["weights"], softmax_np(q @ k.T / math.sqrt(512)), rtol=1e-4, atol=1e-6)


def test_scaling_sentence_switch_changes_the_tokens():
    explorer = scaling_explorer()
    explorer.controls["sentence"].value = "She loves cats"
    assert explorer.data["tokens"] == ["She", "loves", "cats"]
    assert explorer.data["weights"].shape == (3, 3)
    labels = [t.get_text() for t in heatmap_axes(explorer.figure)[1].get_yticklabels()]
    assert labels == ["She", "loves", "cats"]
    with pytest.raises(ValueError, match="d_k"):
        scaling_explorer(d_k=0)


# ---------------------------------------------------------------- nb03: masking

# Seed 002, "masked_attn_wt" (printed to 4 decimals).
SEED_002_CAUSAL_WEIGHTS = np.array(
    [
        [1.0000, 0.0000, 0.0000, 0.0000, 0.0000, 0.0000],
        [0.5043, 0.4957, 0.0000, 0.0000, 0.0000, 0.0000],
        [0.3362, 0.3307, 0.3330, 0.0000, 0.0000, 0.0000],
        [0.2487, 0.2458, 0.2465, 0.2589, 0.0000, 0.0000],
        [0.1939, 0.1937, 0.1947, 0.1993, 0.2183, 0.0000],
        [0.1631, 0.1602, 0.1607, 0.1722, 0.1778, 0.1660],
    ]
)


def test_masking_reproduces_seed_002_and_both_methods_agree():
    explorer = masking_explorer(method="neg_inf")
    np.testing.assert_allclose(explorer.data["weights"], SEED_002_CAUSAL_WEIGHTS, atol=5e-5)
    neg_inf = explorer.data["weights"]
    explorer.controls["method"].value = "renormalize"
    np.testing.assert_allclose(explorer.data["weights"], neg_inf, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(explorer.data["weights"].sum(axis=1), 1.0, atol=1e-6)


def test_causal_toggle_zeros_the_upper_triangle():
    explorer = masking_explorer(causal=False)
    upper = np.triu_indices(6, k=1)
    assert (explorer.data["weights"][upper] > 0).all()
    assert explorer.data["mask"].all()
    explorer.controls["causal"].value = True
    assert (explorer.data["weights"][upper] == 0).all()
    np.testing.assert_array_equal(explorer.data["mask"], np.tril(np.ones((6, 6), dtype=bool)))
    mask_ax, weights_ax = heatmap_axes(explorer.figure)
    np.testing.assert_array_equal(np.asarray(mask_ax.images[0].get_array()), np.tril(np.ones((6, 6))))
    np.testing.assert_array_equal(np.asarray(weights_ax.images[0].get_array()), explorer.data["weights"])


def test_masking_seq_len_and_dropout():
    explorer = masking_explorer()
    explorer.controls["seq_len"].value = 3
    assert explorer.data["weights"].shape == (3, 3) and explorer.data["tokens"] == ["Your", "journey", "starts"]
    # A shorter causal sequence is the top-left corner of the longer one.
    np.testing.assert_allclose(explorer.data["weights"], SEED_002_CAUSAL_WEIGHTS[:3, :3], atol=5e-5)
    explorer.update(seq_len=6, dropout=0.5)
    before, after = explorer.data["weights_before_dropout"], explorer.data["weights"]
    dropped = after == 0
    kept = ~dropped & (before > 0)
    assert dropped[before > 0].any() and kept.any()
    np.testing.assert_allclose(after[kept], before[kept] / (1 - 0.5), rtol=1e-6)
    # Fixed seed: the same dropout pattern on every redraw, and the caller's RNG is untouched.
    state = torch.random.get_rng_state()
    explorer.redraw()
    np.testing.assert_array_equal(explorer.data["weights"], after)
    assert torch.equal(torch.random.get_rng_state(), state)


def test_masking_refuses_impossible_settings():
    with pytest.raises(ValueError, match="seq_len"):
        masking_explorer(seq_len=0)
    with pytest.raises(ValueError, match="method"):
        masking_explorer(method="zero")
    with pytest.raises(ValueError, match="dropout"):
        masking_explorer(dropout=1.0)
    explorer = masking_explorer()
    with pytest.raises(ValueError, match="seq_len"):
        explorer.update(seq_len=0)
    assert explorer.controls["seq_len"].min == 1


# ---------------------------------------------------------------- nb04: heads


def test_heads_from_2_to_4_draws_4_heatmaps_of_the_module_weights():
    explorer = heads_explorer()
    assert explorer.data["weights"].shape == (2, 6, 6)
    explorer.controls["num_heads"].value = 4
    module, x, expected, output = module_weights(12, 4, 6)
    assert explorer.data["weights"].shape == (4, 6, 6)
    np.testing.assert_allclose(explorer.data["weights"], expected, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(explorer.data["output"], output, rtol=1e-6, atol=1e-6)
    # ...which are softmax(q_h k_h^T / sqrt(d_head)) of the module's own projections, written out here.
    with torch.no_grad():
        q = (x @ module.q_weight.T + module.qkv_proj.bias[:12]).numpy().reshape(6, 4, 3).transpose(1, 0, 2)
        k = (x @ module.k_weight.T + module.qkv_proj.bias[12:24]).numpy().reshape(6, 4, 3).transpose(1, 0, 2)
    np.testing.assert_allclose(
        explorer.data["weights"], softmax_np(q @ k.transpose(0, 2, 1) / math.sqrt(3)), rtol=1e-5, atol=1e-6
    )
    panels = heatmap_axes(explorer.figure)
    assert len(panels) == 4 == explorer.data["panels"]
    for h, ax in enumerate(panels):
        np.testing.assert_array_equal(np.asarray(ax.images[0].get_array()), explorer.data["weights"][h])
        assert ax.get_title() == f"head {h + 1}"
    assert explorer.data["caption"].startswith("4 heads, seq 6")


def test_heads_selector_follows_the_number_of_heads():
    explorer = heads_explorer()
    assert list(explorer.controls["num_heads"].options) == [1, 2, 3, 4, 6, 12]
    explorer.controls["num_heads"].value = 6
    assert [v for _, v in explorer.controls["head"].options] == [1, 2, 3, 4, 5, 6]
    explorer.controls["head"].value = 5
    np.testing.assert_array_equal(explorer.data["head_weights"], explorer.data["weights"][4])
    explorer.controls["num_heads"].value = 3
    assert explorer.controls["head"].value == 3 and explorer.data["head"] == 3
    explorer.controls["seq_len"].value = 2
    _, _, expected, _ = module_weights(12, 3, 2)
    np.testing.assert_allclose(explorer.data["weights"], expected, rtol=1e-6, atol=1e-7)
    assert explorer.data["tokens"] == ["The", "man"]


def test_set_values_moves_the_controls_and_their_followers_without_drawing():
    explorer = heads_explorer()
    drawn, picture, data = explorer.redraw_count, explorer.picture, explorer.data
    explorer.set_values(num_heads=6, head=5)
    assert explorer.values()["num_heads"] == 6 and explorer.values()["head"] == 5
    assert option_values(explorer.controls["head"]) == [1, 2, 3, 4, 5, 6]
    assert (explorer.redraw_count, explorer.picture, explorer.data) == (drawn, picture, data)
    with pytest.raises(ValueError, match="head"):
        explorer.set_values(num_heads=2, head=5)
    assert explorer.values()["num_heads"] == 6, "a refused setting moves nothing"
    explorer.update()
    assert explorer.redraw_count == drawn + 1 and explorer.data["head"] == 5


def test_option_values_reads_plain_and_labelled_options():
    assert option_values(widgets.ToggleButtons(options=[2, 4, 8])) == [2, 4, 8]
    labelled = widgets.SelectionSlider(options=[("one", 1), ("ten", 10)], value=10)
    assert option_values(labelled) == [1, 10]
    assert nearby_value(labelled) == 1


@pytest.mark.parametrize("make", ALL, ids=lambda f: f.__name__)
def test_shown_width_is_the_figure_width_at_the_css_resolution(make):
    explorer = make()
    width = round(explorer.figure.get_size_inches()[0] * CSS_DPI)
    assert explorer.shown_width == width
    assert explorer._repr_mimebundle_()[1]["image/png"]["width"] == width
    explorer.close()
    with pytest.raises(RuntimeError, match="closed"):
        _ = explorer.shown_width


def test_sharp_pixels_are_the_figure_at_full_resolution():
    explorer = heads_explorer()
    explorer.update(num_heads=3)  # a move shows the quick picture first
    pixels = explorer.sharp_pixels()
    width, height = explorer.figure.get_size_inches() * DPI
    assert pixels.shape == (round(height), round(width), 3) and pixels.dtype == np.uint8
    assert Image.open(io.BytesIO(explorer.static_png())).size[0] == round(width)
    explorer.close()
    with pytest.raises(RuntimeError, match="closed"):
        explorer.sharp_pixels()


def test_heads_annotates_the_framed_head():
    explorer = heads_explorer()
    explorer.update(num_heads=3, head=2)
    panels = heatmap_axes(explorer.figure)
    assert [len(ax.texts) for ax in panels] == [0, 36, 0]
    assert [t.get_text() for t in panels[1].texts] == [f"{w:.2f}" for w in explorer.data["weights"][1].ravel()]


def test_heads_refuses_impossible_settings():
    with pytest.raises(ValueError, match="num_heads"):
        heads_explorer(num_heads=5)
    with pytest.raises(ValueError, match="seq_len"):
        heads_explorer(seq_len=0)
    with pytest.raises(ValueError, match="head"):
        heads_explorer(num_heads=2, head=3)
    explorer = heads_explorer()
    with pytest.raises(ValueError, match="num_heads"):
        explorer.update(num_heads=5)
    assert explorer.data["num_heads"] == 2


# ---------------------------------------------------------------- nb05: RoPE


def test_rope_explorer_angles_rotations_and_scores():
    explorer = rope_explorer(d_head=16)
    explorer.update(base=100.0, pair_index=3, offset=5)
    data = explorer.data
    i = np.arange(8)
    np.testing.assert_allclose(data["frequencies"], 100.0 ** (-2 * i / 16), rtol=1e-6)
    theta = 100.0 ** (-2 * 3 / 16)
    positions = np.arange(5, 11)
    np.testing.assert_allclose(data["angles"], positions * theta, rtol=1e-6)
    np.testing.assert_allclose(
        data["rotated"], np.stack([np.cos(positions * theta), np.sin(positions * theta)], 1), atol=1e-5
    )
    # q = k = ones: each pair contributes 2 cos(d theta_i) at distance d.
    d = np.arange(49)
    expected = 2 * np.cos(np.outer(d, 100.0 ** (-2 * i / 16))).sum(axis=1)
    np.testing.assert_allclose(data["scores"], expected, atol=2e-4)
    # The drawn line is that curve.
    np.testing.assert_allclose(explorer.figure.axes[2].lines[0].get_ydata(), data["scores"])


def test_rope_offset_moves_the_angles_but_not_the_scores():
    explorer = rope_explorer()
    scores, angles = explorer.data["scores"], explorer.data["angles"]
    explorer.controls["offset"].value = 200
    np.testing.assert_allclose(explorer.data["scores"], scores, atol=1e-3)
    assert not np.allclose(explorer.data["angles"], angles)


def test_rope_refuses_impossible_settings():
    with pytest.raises(ValueError, match="d_head"):
        rope_explorer(d_head=15)
    with pytest.raises(ValueError, match="pair_index"):
        rope_explorer(d_head=8, pair_index=4)
    with pytest.raises(ValueError, match="base"):
        rope_explorer(base=1.0)
    assert rope_explorer(d_head=8).controls["pair_index"].max == 3


# ---------------------------------------------------------------- nb06: the block


def test_mhsa_weights_equal_the_module_for_each_setting():
    explorer = mhsa_explorer()
    for settings in ({}, {"causal": True}, {"rope": True}, {"rope": True, "num_heads": 2, "seq_len": 8}):
        explorer.update(**settings)
        v = explorer.values()
        _, _, expected, output = module_weights(
            16,
            v["num_heads"],
            v["seq_len"],
            causal=v["causal"],
            rope=RotaryEmbedding(16 // v["num_heads"], 8, v["base"]) if v["rope"] else None,
        )
        np.testing.assert_allclose(explorer.data["weights"], expected, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(explorer.data["output"], output, rtol=1e-6, atol=1e-6)
        assert len(heatmap_axes(explorer.figure)) == v["num_heads"] + 1  # heads + output
    assert explorer.data["causal"]
    upper = np.triu_indices(8, k=1)
    assert (explorer.data["weights"][:, upper[0], upper[1]] == 0).all()


def test_mhsa_rope_offers_only_even_head_sizes():
    explorer = mhsa_explorer(d_model=16, num_heads=16, rope=False)
    assert list(explorer.controls["num_heads"].options) == [1, 2, 4, 8, 16]
    explorer.controls["rope"].value = True
    options = list(explorer.controls["num_heads"].options)
    assert options == [1, 2, 4, 8] and all((16 // h) % 2 == 0 for h in options)
    assert explorer.data["num_heads"] == 8 and explorer.data["rope"]
    assert not explorer.controls["base"].disabled
    explorer.controls["rope"].value = False
    assert list(explorer.controls["num_heads"].options) == [1, 2, 4, 8, 16]
    assert explorer.controls["base"].disabled


def test_mhsa_opens_on_the_notebooks_block_causal_with_rope():
    data = mhsa_explorer().data
    assert data["rope"] and data["causal"]
    assert np.all(np.triu(data["weights"], k=1) == 0)


def test_mhsa_rope_changes_weights_and_base_matters():
    explorer = mhsa_explorer(rope=False)
    plain = explorer.data["weights"]
    explorer.controls["rope"].value = True
    with_rope = explorer.data["weights"]
    assert not np.allclose(plain, with_rope)
    explorer.controls["base"].value = 10.0
    assert not np.allclose(with_rope, explorer.data["weights"])
    assert explorer.data["base"] == pytest.approx(10.0)


def test_mhsa_refuses_impossible_settings():
    with pytest.raises(ValueError, match="num_heads"):
        mhsa_explorer(num_heads=3)
    with pytest.raises(ValueError, match="d_head"):
        mhsa_explorer(d_model=18, num_heads=2, rope=True)
    with pytest.raises(ValueError, match="seq_len"):
        mhsa_explorer(seq_len=0)
    explorer = mhsa_explorer(num_heads=16, rope=False)
    with pytest.raises(ValueError, match="d_head"):
        explorer.update(rope=True)
    # An odd d_model admits no even head size: RoPE cannot be switched on.
    assert mhsa_explorer(d_model=9, num_heads=3, rope=False).controls["rope"].disabled


def test_update_turns_rope_off_before_choosing_a_head_count_only_valid_without_it():
    # d_model 16, 16 heads -> d_head 1, which RoPE cannot rotate: only valid once RoPE is off.
    explorer = mhsa_explorer()
    explorer.update(rope=True)
    assert 16 not in explorer.controls["num_heads"].options
    explorer.update(rope=False, num_heads=16)
    assert explorer.controls["num_heads"].value == 16
    assert explorer.data["weights"].shape[0] == 16


def test_a_disabled_rope_base_says_why_it_is_off():
    explorer = mhsa_explorer(rope=True)
    assert not explorer.controls["base"].disabled and explorer.controls["base"].description == "RoPE base"
    explorer.update(rope=False)
    assert explorer.controls["base"].disabled and "off" in explorer.controls["base"].description
    explorer.update(rope=True)
    assert explorer.controls["base"].description == "RoPE base"


def test_qkv_score_factor_reads_the_same_on_the_slider_and_in_the_caption():
    from mhsa_helpers.lessons.qkv_by_hand import qkv_explorer

    explorer = qkv_explorer(score_scale=1000.0)
    shown = format(1000.0, explorer.controls["score_scale"].readout_format)
    assert shown == "1,000" and f"score × {shown} ·" in explorer.data["caption"]


@pytest.mark.parametrize("item", [i for i in LESSONS if i.explorer is not None], ids=lambda i: i.slug)
def test_no_explorer_control_is_a_dropdown(item):
    # Arrow keys on a dropdown move JupyterLab's cell selection instead of its value; sliders and
    # toggle buttons keep the keys.
    explorer = item.explorer()
    try:
        assert not [name for name, control in explorer.controls.items() if isinstance(control, widgets.Dropdown)]
    finally:
        explorer.close()


def test_rope_arrow_labels_do_not_pile_up_on_slow_pairs():
    explorer = rope_explorer()

    def labels():
        return [text.get_text() for text in explorer.figure.axes[1].texts]

    assert labels() == [f"m={m}" for m in range(6)]  # pair 0 turns 1 rad per step: one label per arrow
    explorer.update(pair_index=7)  # 0.0003 rad per step: all six arrows on top of each other
    assert labels() == ["", "", "", "", "", "m=0–5"]
