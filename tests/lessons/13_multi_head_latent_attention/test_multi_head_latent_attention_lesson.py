"""Notebook 13's lesson pieces: the explorer's numbers against a real latent-attention module (its parameters, what
its cache holds, and torch's FlopCounterMode on a decoding step of each path), its controls, its picture; the
diagrams (arrows between boxes, no text on text, readable text); the recall questions."""

from __future__ import annotations

import itertools

import matplotlib

matplotlib.use("Agg")

import ipywidgets as widgets
import matplotlib.pyplot as plt
import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from mhsa_helpers import LatentCache, MultiHeadLatentAttention, MultiHeadSelfAttention, RotaryEmbedding
from mhsa_helpers.lessons.multi_head_latent_attention.diagrams import absorption_diagram, latent_diagram
from mhsa_helpers.lessons.multi_head_latent_attention.explorer import (
    LATENT_PRESETS,
    LatentShape,
    attention_parameters,
    cache_per_token,
    decoding_multiply_adds,
    latent_explorer,
)
from mhsa_helpers.lessons.multi_head_latent_attention.recall import RECALL, check_recall
from mhsa_helpers.teaching.explorer import STATIC_NOTE, nearby_value, open_explorers

#: Small shapes of every kind the counts must cover: with and without a query latent, with and without RoPE.
SHAPES = [
    LatentShape("plain", d_model=32, num_heads=4, d_head=8, d_latent=12, d_rope=0),
    LatentShape("rope", d_model=32, num_heads=2, d_head=16, d_latent=24, d_rope=4),
    LatentShape("rope, query latent", d_model=40, num_heads=3, d_head=8, d_latent=16, d_rope=6, q_latent=20),
]


@pytest.fixture(autouse=True)
def _close_everything():
    yield
    plt.close("all")
    for explorer in open_explorers():
        explorer.close()


def module(shape: LatentShape) -> MultiHeadLatentAttention:
    torch.manual_seed(0)
    rope = RotaryEmbedding(shape.d_rope, 64) if shape.d_rope else None
    return MultiHeadLatentAttention(
        shape.d_model, shape.num_heads, shape.d_latent, d_head=shape.d_head, q_latent=shape.q_latent, rope=rope
    ).eval()


# ---------------------------------------------------------------- the counts, against a real module


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.name)
def test_the_counts_are_the_modules_parameters_and_cache(shape):
    layer = module(shape)
    assert attention_parameters(shape)["MLA"] == sum(p.numel() for p in layer.parameters())
    cache = LatentCache()
    with torch.no_grad():
        layer(torch.randn(1, 5, shape.d_model), cache=cache)
    assert cache.latents is not None and cache.rope_keys is not None
    held = cache.latents.numel() + cache.rope_keys.numel()
    assert cache_per_token(shape)["MLA"] == held / 5 == shape.d_latent + shape.d_rope


def test_the_mha_counts_are_multi_head_attentions_own():
    mha = MultiHeadSelfAttention(32, 4, qkv_bias=False, out_bias=False)
    shape = SHAPES[0]
    assert attention_parameters(shape)["MHA"] == sum(p.numel() for p in mha.parameters())
    assert cache_per_token(shape) == {"MHA": 64, "GQA": 16, "MQA": 16, "MLA": 12}
    assert cache_per_token(shape, gqa_kv_heads=2)["GQA"] == 2 * 2 * 8


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.name)
@pytest.mark.parametrize("absorbed", [False, True], ids=["materialised", "absorbed"])
@pytest.mark.parametrize(("new", "past"), [(1, 7), (3, 0)])
def test_the_multiply_adds_are_what_torchs_flop_counter_counts(shape, absorbed, new, past):
    layer = module(shape)
    cache = LatentCache()
    if past:
        cache.append(torch.randn(1, past, shape.d_latent), torch.randn(1, past, shape.d_rope))
    # The math kernel: where queries and values have the same width (no RoPE, materialised) torch would otherwise
    # take a fused CPU kernel that FlopCounterMode does not count.
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        layer(torch.randn(1, new, shape.d_model), cache=cache, absorbed=absorbed)
    assert decoding_multiply_adds(shape, past, absorbed=absorbed, new=new).total == counter.get_total_flops() // 2


def test_deepseek_v2s_numbers():
    shape = LATENT_PRESETS["DeepSeek-V2"]
    assert (shape.d_model, shape.num_heads, shape.d_head, shape.d_latent, shape.d_rope, shape.q_latent) == (
        5120, 128, 128, 512, 64, 1536,
    )  # fmt: skip
    assert cache_per_token(shape) == {"MHA": 32768, "GQA": 8192, "MQA": 256, "MLA": 576}
    # DeepSeek-V2, section 2.1.4: MLA caches as much as GQA with 2.25 groups.
    assert cache_per_token(shape)["MLA"] / cache_per_token(shape)["MQA"] == 2.25
    materialised = decoding_multiply_adds(shape, 4096, absorbed=False)
    absorbed = decoding_multiply_adds(shape, 4096, absorbed=True)
    assert materialised.projections == absorbed.projections
    assert materialised.keys_values == 2 * 4097 * 512 * 128 * 128


# ---------------------------------------------------------------- the explorer


def test_the_explorer_opens_on_deepseek_v2_and_shows_its_numbers():
    explorer = latent_explorer()
    data = explorer.data
    assert data["cache"] == {"MHA": 32768, "GQA": 8192, "MQA": 256, "MLA": 576}
    assert data["cache_ratio"] == pytest.approx(32768 / 576)
    assert data["gqa_equivalent"] == 2.25
    shape = LATENT_PRESETS["DeepSeek-V2"]
    assert data["parameters"] == attention_parameters(shape)
    for path in ("materialised", "absorbed"):
        assert data["multiply_adds"][path] == decoding_multiply_adds(shape, 4096, absorbed=path == "absorbed").total
    cache_ax, param_ax, step_ax = explorer.figure.axes
    # Each panel in percent of its reference bar (MHA's cache and parameters, the materialised step), on fixed linear
    # axes that hold every bar, each bar labelled with its count.
    heights = [bar.get_height() for bar in cache_ax.patches]
    assert heights == pytest.approx([100 * n / 32768 for n in (32768, 8192, 256, 576)])
    assert [t.get_text() for t in cache_ax.texts][3] == "576" and cache_ax.texts[0].get_text() == "32,768\n128 kv"
    mla_share = 100 * data["parameters"]["MLA"] / data["parameters"]["MHA"]
    assert [bar.get_height() for bar in param_ax.patches] == pytest.approx([100, mla_share])
    totals = [sum(bar.get_height() for bar in step_ax.patches[i::2]) for i in (0, 1)]
    steps = data["multiply_adds"]
    assert totals == pytest.approx([100, 100 * steps["absorbed"] / steps["materialised"]])
    for ax in (cache_ax, param_ax, step_ax):
        assert ax.get_yscale() == "linear" and ax.get_ylim()[0] == 0
        assert max(bar.get_y() + bar.get_height() for bar in ax.patches) < ax.get_ylim()[1]
    assert cache_ax.get_ylabel() == "numbers cached per token and layer\n(% of MHA's)"
    assert "576" in data["caption"] and "32,768" in data["caption"]


def test_latent_attention_with_more_parameters_than_mha_still_fits_its_panel():
    explorer = latent_explorer(preset="small", d_latent=2048)
    param_ax = explorer.figure.axes[1]
    share = 100 * explorer.data["parameters"]["MLA"] / explorer.data["parameters"]["MHA"]
    assert share > 1000 and param_ax.patches[1].get_height() == pytest.approx(share)
    assert share < param_ax.get_ylim()[1]


def test_the_controls_change_the_numbers_as_the_formulas_say():
    explorer = latent_explorer()
    data = explorer.update(d_latent=256, d_rope=32, heads=16, context=131072).data
    assert data["cache"] == {"MHA": 2 * 16 * 128, "GQA": 2 * 4 * 128, "MQA": 256, "MLA": 256 + 32}
    assert data["shape"].num_heads == 16 and not data["as_published"]
    shape = data["shape"]
    assert data["multiply_adds"]["absorbed"] == decoding_multiply_adds(shape, 131072, absorbed=True).total
    assert data["step_ratio"] == pytest.approx(
        decoding_multiply_adds(shape, 131072, absorbed=False).total / data["multiply_adds"]["absorbed"]
    )
    # A model sets its own sizes; sizes given with it are set after it.
    data = explorer.update(preset="small").data
    small = LATENT_PRESETS["small"]
    assert (data["d_latent"], data["d_rope"], data["heads"]) == (small.d_latent, small.d_rope, small.num_heads)
    assert data["cache"]["MLA"] == small.d_latent + small.d_rope and data["as_published"]
    data = explorer.update(preset="DeepSeek-V2", d_latent=1024).data
    assert (data["d_latent"], data["d_rope"], data["heads"]) == (1024, 64, 128)


def test_every_control_redraws_and_the_explorer_has_a_static_picture():
    explorer = latent_explorer(preset="small")
    for name, control in explorer.controls.items():
        before = (explorer.redraw_count, explorer.picture)
        control.value = nearby_value(control)
        assert explorer.redraw_count == before[0] + 1, name
        assert explorer.picture != before[1], name
        assert explorer.data[name] == control.value
    assert not any(isinstance(control, widgets.Dropdown) for control in explorer.controls.values())
    bundle, _ = explorer._repr_mimebundle_()
    assert "image/png" in bundle and bundle["text/plain"].endswith(STATIC_NOTE)
    assert explorer.static_png().startswith(b"\x89PNG")


@pytest.mark.parametrize(
    ("settings", "error", "message"),
    [
        ({"preset": "GPT-2"}, ValueError, r"preset must be one of"),
        ({"d_latent": 500}, ValueError, r"d_latent must be one of"),
        ({"d_rope": 3}, ValueError, r"d_rope must be one of"),
        ({"heads": 3}, ValueError, r"heads must be one of"),
        ({"heads": 4.0}, TypeError, r"heads must be an int"),
        ({"context": 100}, ValueError, r"context must be one of"),
    ],
)
def test_impossible_settings_are_refused_with_the_setting_named(settings, error, message):
    with pytest.raises(error, match=message):
        latent_explorer(**settings)
    explorer = latent_explorer()
    before = (explorer.values(), explorer.redraw_count)
    with pytest.raises(error, match=message):
        explorer.update(**settings)
    assert (explorer.values(), explorer.redraw_count) == before


def test_the_explorers_labels_do_not_overlap():
    for preset in LATENT_PRESETS:
        explorer = latent_explorer(preset=preset)
        figure = explorer.figure
        renderer = figure.canvas.get_renderer()
        for ax in figure.axes:
            ticks = [t.get_window_extent(renderer) for t in ax.get_xticklabels() if t.get_text()]
            assert not any(a.overlaps(b) for a, b in itertools.combinations(ticks, 2)), preset
            legend = ax.get_legend()
            if legend is not None:
                assert not any(legend.get_window_extent(renderer).overlaps(t) for t in ticks)


# ---------------------------------------------------------------- the diagrams


@pytest.mark.parametrize("make", [latent_diagram, absorption_diagram])
def test_the_diagrams_text_is_readable_and_never_on_other_text(make):
    fig = make()
    renderer = fig.canvas.get_renderer()
    texts = [t for t in fig.axes[0].texts if t.get_text().strip()]
    assert all(t.get_fontsize() >= 9 for t in texts)
    # Shown at its size (100 pixels an inch, as the notebooks): no wider than a notebook's cell.
    assert fig.get_size_inches()[0] <= 10.0
    extents = [(t.get_text(), t.get_window_extent(renderer)) for t in texts]
    for (a, box_a), (b, box_b) in itertools.combinations(extents, 2):
        assert not box_a.overlaps(box_b), f"{a!r} overlaps {b!r}"
    # Nothing drawn outside the figure.
    for text, extent in extents:
        assert extent.x0 >= 0 and extent.x1 <= fig.bbox.width and extent.y0 >= 0, text


def test_the_diagrams_name_the_cached_tensors_with_their_shapes():
    latent = {t.get_text() for t in latent_diagram().axes[0].texts}
    assert {"c_kv", "k_r", "k_h", "v_h", "[k_h, k_r]", "[q_h, q_r_h]", "(seq, d_latent)", "(seq, d_rope)"} <= latent
    assert {"cached", "cached, one\nfor all heads", "merge, · W_Oᵀ", "· W_UK_hᵀ", "· W_UV_hᵀ"} <= latent
    absorbed = {t.get_text() for t in absorption_diagram().axes[0].texts}
    assert {"q_h · k_hᵀ", "q̃_h · c_kvᵀ", "(N, d_head)", "(1, d_latent)", "(1, N)"} <= absorbed


# ---------------------------------------------------------------- recall


def test_the_recall_accepts_the_right_answers_and_names_the_slips(capsys):
    assert [question.truth() for question in RECALL] == [4, True, (2, 8, 10, 8)]
    assert check_recall({1: 4, 2: True, 3: [2, 8, 10, 8]}).correct
    assert capsys.readouterr().out.startswith("[recall_13] correct: all 3 right.")
    wrong = {1: 8, 2: False, 3: (2, 10, 8, 8)}
    assert not check_recall(wrong, verbose=False).correct
    again = check_recall(wrong, verbose=False)
    assert "the number of key/value heads were the ratio" in again.message
    assert "without moving the heads before the tokens" in again.message
