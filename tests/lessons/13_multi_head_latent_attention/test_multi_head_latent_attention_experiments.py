"""Notebook 13's training comparison: the four kinds of attention, what they cache per token (against the formula and
against a cache filled by hand here), their parameters, a tiny training run of each, and the pictures."""

from __future__ import annotations

import dataclasses
import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pytest
import torch

from mhsa_helpers import MultiHeadSelfAttention
from mhsa_helpers.kv_cache import KVCache
from mhsa_helpers.lessons.multi_head_latent_attention.experiments import (
    KINDS,
    NOTEBOOK_CONFIG,
    AttentionKind,
    KindResult,
    attention_parameters,
    cache_numbers,
    measure_kind,
    train_kinds,
)
from mhsa_helpers.lessons.multi_head_latent_attention.figures import (
    cache_bars,
    kind_comparison,
    kind_loss_curves,
)
from mhsa_helpers.mla import LatentCache, MultiHeadLatentAttention
from mhsa_helpers.teaching.induction import (
    InductionConfig,
    TrainingRun,
    build_model,
    evaluation_batch,
    in_context_loss,
    induction_score,
    phase_change_step,
)

MHA, GQA, MQA, MLA = KINDS
#: A run short enough for the suite: every kind trains 3 steps on batches of 8.
TINY = dataclasses.replace(NOTEBOOK_CONFIG, steps=3, batch_size=8)


# ---------------------------------------------------------------- the kinds and what they cache


def test_the_kinds_are_mha_gqa_mqa_and_mla_in_the_notebooks_order():
    assert [k.name for k in KINDS] == ["MHA", "GQA", "MQA", "MLA"]
    layers = [k.build(NOTEBOOK_CONFIG) for k in KINDS]
    assert [type(layer) for layer in layers] == [MultiHeadSelfAttention] * 3 + [MultiHeadLatentAttention]
    assert [layer.num_kv_heads for layer in layers[:3]] == [4, 2, 1]
    assert all(layer.causal and layer.rope is not None for layer in layers)
    assert layers[3].rope.d_head == MLA.d_rope and layers[3].d_latent == MLA.d_latent


def test_the_cache_numbers_are_the_formulas():
    h, d_head = NOTEBOOK_CONFIG.num_heads, NOTEBOOK_CONFIG.d_model // NOTEBOOK_CONFIG.num_heads
    assert MLA.d_latent is not None
    expected = {"MHA": 2 * h * d_head, "GQA": 2 * 2 * d_head, "MQA": 2 * d_head, "MLA": MLA.d_latent + MLA.d_rope}
    assert {k.name: cache_numbers(k) for k in KINDS} == expected
    # the lesson's match: latent attention caches what multi-query attention does
    assert cache_numbers(MLA) == cache_numbers(MQA)


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
def test_the_cache_numbers_are_what_a_cache_holds_after_decoding(kind):
    # Decode 5 tokens one at a time with a fresh layer, then count what its cache holds per token.
    layer = kind.build(NOTEBOOK_CONFIG)
    cache = LatentCache() if kind.latent else KVCache()
    x = torch.randn(3, 5, NOTEBOOK_CONFIG.d_model)
    with torch.no_grad():
        for t in range(5):
            layer(x[:, t : t + 1], cache=cache)
    held = cache.keys.numel() + cache.values.numel()
    assert cache.length == 5
    assert held == 3 * 5 * cache_numbers(kind)
    if kind.latent:
        assert tuple(cache.latents.shape) == (3, 5, kind.d_latent)
        assert tuple(cache.rope_keys.shape) == (3, 5, kind.d_rope)
    else:
        assert tuple(cache.keys.shape) == (3, layer.num_kv_heads, 5, layer.d_head)


def test_the_counts_leave_the_global_random_state_alone():
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    cache_numbers(MLA), attention_parameters(MLA)
    torch.testing.assert_close(torch.rand(3), expected, rtol=0, atol=0)


def test_the_parameters_are_counted_from_the_shapes():
    d, h = NOTEBOOK_CONFIG.d_model, NOTEBOOK_CONFIG.num_heads
    d_head = d // h
    for kind, kv_heads in ((MHA, 4), (GQA, 2), (MQA, 1)):
        qkv = d * (d + 2 * kv_heads * d_head) + (d + 2 * kv_heads * d_head)  # weight and bias
        assert attention_parameters(kind) == qkv + d * d + d
    for kind, kv_heads in ((MHA, 4), (MQA, 1)):  # the same without biases
        plain = AttentionKind(kind.name, num_kv_heads=kind.num_kv_heads, bias=False)
        assert attention_parameters(plain) == d * (d + 2 * kv_heads * d_head) + d * d
        assert cache_numbers(plain) == cache_numbers(kind)
    latent, rope = MLA.d_latent, MLA.d_rope
    assert latent is not None
    # q_up, out_proj; kv_down, k_up, v_up; q_rope, k_rope (no biases)
    assert attention_parameters(MLA) == 2 * d * d + 3 * d * latent + d * h * rope + d * rope


def test_the_mla_factorys_layer_gives_the_same_outputs_absorbed_and_materialised():
    layer = MLA.build(NOTEBOOK_CONFIG)
    x = torch.randn(2, 9, NOTEBOOK_CONFIG.d_model)
    with torch.no_grad():
        out, weights = layer(x, need_weights=True)
        out_absorbed, weights_absorbed = layer(x, need_weights=True, absorbed=True)
    torch.testing.assert_close(out_absorbed, out, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(weights_absorbed, weights, rtol=1e-4, atol=1e-6)


def test_the_mha_kind_is_notebook_07s_model():
    config = dataclasses.replace(NOTEBOOK_CONFIG, steps=1)
    default, mha = build_model(config, 3), build_model(config, 3, attention=MHA.factory(config))
    assert default.state_dict().keys() == mha.state_dict().keys()
    for name, value in default.state_dict().items():
        torch.testing.assert_close(mha.state_dict()[name], value, rtol=0, atol=0)
    tokens = evaluation_batch(config, batch_size=4).tokens
    with torch.no_grad():
        torch.testing.assert_close(mha(tokens)[0], default(tokens)[0], rtol=0, atol=0)


def test_learned_positions_give_the_latent_layer_no_position_part():
    config = dataclasses.replace(NOTEBOOK_CONFIG, positions="learned")
    layer = MLA.build(config)
    assert layer.rope is None and layer.d_rope == 0
    assert cache_numbers(MLA, config) == MLA.d_latent
    assert MHA.build(config).rope is None


def test_impossible_kinds_are_refused_naming_the_setting():
    with pytest.raises(TypeError, match="name"):
        AttentionKind("")
    with pytest.raises(TypeError, match="num_kv_heads"):
        AttentionKind("GQA", num_kv_heads=2.0)  # type: ignore[arg-type]  # the wrong type on purpose
    with pytest.raises(ValueError, match="d_latent"):
        AttentionKind("MQA", d_rope=8)
    with pytest.raises(ValueError, match="num_kv_heads"):
        AttentionKind("both", num_kv_heads=1, d_latent=24)
    with pytest.raises(ValueError, match="d_rope"):
        AttentionKind("MLA", d_latent=24, d_rope=7)
    with pytest.raises(ValueError, match="d_latent"):
        AttentionKind("MLA", d_latent=0)
    with pytest.raises(ValueError, match="bias"):
        AttentionKind("MLA", d_latent=24, bias=True)
    with pytest.raises(TypeError, match="bias"):
        AttentionKind("MHA", bias="no")  # type: ignore[arg-type]  # the wrong type on purpose
    with pytest.raises(TypeError, match="config"):
        MLA.factory({"d_model": 64})  # type: ignore[arg-type]  # the wrong type on purpose
    with pytest.raises(TypeError, match="kind"):
        cache_numbers("MLA")  # type: ignore[arg-type]  # the wrong type on purpose
    with pytest.raises(TypeError, match="config"):
        attention_parameters(MLA, config=None)  # type: ignore[arg-type]  # the wrong type on purpose


# ---------------------------------------------------------------- training side by side


@pytest.fixture(scope="module")
def tiny_results():
    return train_kinds(TINY, seeds=(0, 1))


def test_train_kinds_returns_one_result_per_kind_and_seed(tiny_results):
    assert list(tiny_results) == [k.name for k in KINDS]
    batch = evaluation_batch(TINY)
    for kind in KINDS:
        results = tiny_results[kind.name]
        assert [r.seed for r in results] == [0, 1]
        for r in results:
            assert isinstance(r, KindResult) and r.kind == kind and isinstance(r.run, TrainingRun)
            assert r.run.config == TINY and r.run.seed == r.seed and len(r.run.induction_loss) == TINY.steps
            assert r.cache_numbers == cache_numbers(kind) and r.parameters == attention_parameters(kind)
            assert r.phase_change == phase_change_step(r.run.induction_loss) == r.steps_below(1.0)
            assert r.steps_below(2.5) == phase_change_step(r.run.induction_loss, below=2.5)
            # the scores are notebook 07's, on the held-out batch, and the model is the one trained
            with torch.no_grad():
                _, weights = r.run.model(batch.tokens)
            assert tuple(r.induction.shape) == (2, TINY.num_heads)
            torch.testing.assert_close(r.induction[1], induction_score(weights[1], batch))
            assert r.best_induction == pytest.approx(float(induction_score(weights[1], batch).max()))
            assert r.in_context_loss == pytest.approx(in_context_loss(r.run.model, batch), abs=1e-6)
            layers = [type(layer) for layer in r.run.model.layers]
            assert layers == [type(kind.build(TINY))] * 2


def test_train_kinds_is_deterministic_for_a_seed(tiny_results):
    again = train_kinds(TINY, seeds=(1,), kinds=(MLA, MQA))
    for name in ("MLA", "MQA"):
        first, second = tiny_results[name][1], again[name][0]
        assert second.run.induction_loss == first.run.induction_loss
        torch.testing.assert_close(second.induction, first.induction, rtol=0, atol=0)
    # the same seed gives every kind the same embeddings (only the attention layers differ)
    embeddings = {name: runs[0].run.checkpoints for name, runs in tiny_results.items()}
    assert all(not c for c in embeddings.values())  # no checkpoints were asked for
    start = [build_model(TINY, 0, attention=k.factory(TINY)).embed.weight for k in KINDS]
    assert all(torch.equal(w, start[0]) for w in start)


def test_train_kinds_reports_progress_per_kind():
    seen = []
    train_kinds(dataclasses.replace(TINY, steps=2), kinds=(MQA,), progress=lambda *a: seen.append(a))
    assert seen == [("MQA", 1, 2), ("MQA", 2, 2)]


def test_train_kinds_refuses_bad_arguments_naming_them():
    with pytest.raises(TypeError, match="config"):
        train_kinds({"steps": 3})  # type: ignore[arg-type]  # the wrong type on purpose
    with pytest.raises(ValueError, match="seeds"):
        train_kinds(TINY, seeds=())
    with pytest.raises(ValueError, match="seeds"):
        train_kinds(TINY, seeds=(0.5,))  # type: ignore[arg-type]  # the wrong type on purpose
    with pytest.raises(TypeError, match="seeds"):
        train_kinds(TINY, seeds=0)  # type: ignore[arg-type]  # the wrong type on purpose
    with pytest.raises(TypeError, match="kinds"):
        train_kinds(TINY, kinds=("MHA",))  # type: ignore[arg-type]  # the wrong type on purpose
    with pytest.raises(ValueError, match="distinct"):
        train_kinds(TINY, kinds=(MHA, AttentionKind("MHA", num_kv_heads=1)))
    with pytest.raises(TypeError, match="progress"):
        train_kinds(TINY, progress="bar")  # type: ignore[arg-type]  # the wrong type on purpose
    with pytest.raises(ValueError, match="loss"):
        train_kinds(TINY, kinds=(MQA,))["MQA"][0].steps_below(0.0)
    with pytest.raises(TypeError, match="batch"):
        measure_kind(build_model(TINY), batch=None)  # type: ignore[arg-type]  # the wrong type on purpose
    with pytest.raises(TypeError, match="model"):
        measure_kind(torch.nn.Linear(2, 2), evaluation_batch(TINY, batch_size=2))


def test_the_notebook_config_is_an_induction_config_the_kinds_accept():
    assert isinstance(NOTEBOOK_CONFIG, InductionConfig)
    with pytest.raises(dataclasses.FrozenInstanceError):
        NOTEBOOK_CONFIG.steps = 1  # type: ignore[misc]  # frozen on purpose


# ---------------------------------------------------------------- the pictures


def test_the_loss_curves_share_one_axes_with_chance_and_the_threshold():
    histories = {"MHA": [3.4, 2.0, 0.5, 0.3], "MLA": [3.4, 3.3, 3.0, 2.0]}
    ax = kind_loss_curves(histories, vocab_size=32, crossings={"MHA": 3, "MLA": None})
    labels = ax.get_legend_handles_labels()[1]
    assert labels[:2] == ["MHA", "MLA"]
    assert any("ln 31" in label for label in labels) and any("1.0" in label for label in labels)
    levels = {round(float(line.get_ydata()[0]), 4) for line in ax.get_lines() if len(line.get_ydata()) == 2}
    assert round(math.log(31), 4) in levels and 1.0 in levels
    assert ax.get_xlabel() and ax.get_ylabel()
    markers = [line for line in ax.get_lines() if line.get_marker() == "o"]
    assert len(markers) == 1 and markers[0].get_xydata().tolist() == [[2.0, 1.0]]  # MHA's only
    with pytest.raises(ValueError, match="histories"):
        kind_loss_curves({}, vocab_size=32)
    with pytest.raises(ValueError, match="vocab_size"):
        kind_loss_curves(histories, vocab_size=2)
    with pytest.raises(ValueError, match="crossings"):
        kind_loss_curves(histories, vocab_size=32, crossings={"GQA": 3})
    with pytest.raises(ValueError, match="level"):
        kind_loss_curves(histories, vocab_size=32, level=0.0)
    # another level: its own dashed line beside 1.0's, and the dots on it
    ax = kind_loss_curves(histories, vocab_size=32, crossings={"MLA": 4}, level=2.5)
    assert [line.get_xydata().tolist() for line in ax.get_lines() if line.get_marker() == "o"] == [[[3.0, 2.5]]]
    assert "2.5 nats" in ax.get_legend_handles_labels()[1]
    with pytest.raises(ValueError, match="colors"):
        kind_loss_curves(histories, vocab_size=32, colors=("black",))


def test_the_cache_bars_show_each_kinds_count():
    ax = cache_bars({k.name: cache_numbers(k) for k in KINDS})
    widths = [patch.get_width() for patch in ax.patches]
    assert widths == [128, 64, 32, 32]
    assert [t.get_text() for t in ax.texts] == ["128", "64", "32", "32"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["MHA", "GQA", "MQA", "MLA"]
    with pytest.raises(ValueError, match="numbers"):
        cache_bars({})
    with pytest.raises(ValueError, match="numbers"):
        cache_bars({"MHA": -1})


def test_the_comparison_figure_puts_both_side_by_side():
    fig = kind_comparison({"MHA": [3.0, 1.0], "MQA": [3.0, 2.0]}, {"MHA": 128, "MQA": 32}, vocab_size=32)
    assert len(fig.axes) == 2
    plt.close(fig)
    with pytest.raises(ValueError, match="same kinds"):
        kind_comparison({"MHA": [3.0]}, {"MQA": 32}, vocab_size=32)
