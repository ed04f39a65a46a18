"""Notebook 11's teaching pieces on the real model: the ablation hooks zero exactly the chosen heads
and always go away, the checkers accept right answers and name wrong ones, the explorer draws the
model's own weights, the schematic draws the loaded configuration's numbers, the maps draw what they get.

The model (540 MB of float32 weights, a few seconds to read) is loaded once for the module.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("gguf", reason="the real model needs the 'model' extra")

from mhsa_helpers.lessons.induction_heads import previous_token_score
from mhsa_helpers.lessons.real_model import (
    PREDICTION_HEADS,
    PRESET_SENTENCES,
    ablate_heads,
    attention_weights_of,
    check_ablation_prediction,
    check_copy_loss,
    check_head_induction_score,
    check_sink_heads,
    copy_loss,
    copy_losses,
    copying_test,
    head_score_maps,
    layer_head_maps,
    load_model,
    random_repeated_batch,
    real_attention_explorer,
    real_model_diagram,
    top_heads,
)
from mhsa_helpers.teaching.explorer import open_explorers


@pytest.fixture(scope="module")
def model():
    torch.set_num_threads(1)
    loaded, _ = load_model()
    return loaded


@pytest.fixture(scope="module")
def tokenizer(model):
    return load_model()[1]


@pytest.fixture(autouse=True)
def _close_explorers():
    yield
    for explorer in open_explorers():
        explorer.close()


# ---------------------------------------------------------------- ablation


def out_proj_inputs(model, ids, layer):
    """What layer ``layer``'s W_O receives: the heads' outputs side by side (batch, seq, 576)."""
    seen = []
    handle = model.blocks[layer].attn.out_proj.register_forward_pre_hook(lambda m, args: seen.append(args[0]))
    try:
        with torch.no_grad():
            model(ids)
    finally:
        handle.remove()
    return seen[0]


def test_ablation_zeroes_exactly_the_chosen_heads_and_removes_its_hooks(model, tokenizer):
    ids = torch.tensor([tokenizer.encode("She loves cats.")])
    before = out_proj_inputs(model, ids, 3)
    with torch.no_grad():
        logits_before = model(ids)
    hooks_before = [len(b.attn.out_proj._forward_pre_hooks) for b in model.blocks]
    with ablate_heads(model, [(3, 2), (3, 7), (20, 0)]):
        assert len(model.blocks[3].attn.out_proj._forward_pre_hooks) == hooks_before[3] + 1
        captured = out_proj_inputs(model, ids, 3)
        # out_proj_inputs' hook runs after ours, so it sees the zeroed input.
        inside = out_proj_inputs(model, ids, 3)
    assert torch.equal(captured, inside)
    d_head = model.config.d_head
    for head in range(model.config.num_heads):
        block = slice(head * d_head, (head + 1) * d_head)
        if head in (2, 7):
            assert torch.count_nonzero(inside[..., block]) == 0
        else:
            assert torch.equal(inside[..., block], before[..., block])
    assert [len(b.attn.out_proj._forward_pre_hooks) for b in model.blocks] == hooks_before
    with torch.no_grad():
        assert torch.equal(model(ids), logits_before)


def test_ablation_removes_its_hooks_when_the_block_raises(model):
    hooks_before = [len(b.attn.out_proj._forward_pre_hooks) for b in model.blocks]
    with pytest.raises(RuntimeError, match="inside"), ablate_heads(model, [(0, 0), (29, 8)]):
        raise RuntimeError("inside")
    assert [len(b.attn.out_proj._forward_pre_hooks) for b in model.blocks] == hooks_before


def test_ablation_changes_the_logits_and_zeroing_no_head_does_not(model, tokenizer):
    ids = torch.tensor([tokenizer.encode("Your journey starts with one step.")])
    with torch.no_grad():
        plain = model(ids)
        with ablate_heads(model, []):
            assert torch.equal(model(ids), plain)
        with ablate_heads(model, [(5, 4)]):
            assert not torch.allclose(model(ids), plain)


@pytest.mark.parametrize(
    ("heads", "error", "message"),
    [
        ([(30, 0)], ValueError, r"layer must be in \[0, 29\]"),
        ([(0, 9)], ValueError, r"head must be in \[0, 8\]"),
        ([(0,)], TypeError, r"\(layer, head\) pairs"),
        ("L18H6", TypeError, r"sequence of \(layer, head\) pairs"),
    ],
)
def test_ablation_names_a_bad_head(model, heads, error, message):
    with pytest.raises(error, match=message), ablate_heads(model, heads):
        pass


def test_zeroing_the_induction_heads_breaks_copying_and_random_heads_do_not(model):
    data = random_repeated_batch(1, 20, vocab_size=model.config.vocab_size, generator=torch.Generator().manual_seed(5))
    assert torch.equal(data.tokens[:, 1:21], data.tokens[:, 21:41])
    with torch.no_grad():
        _, weights = model(data.tokens, need_weights=True)
    scores = head_score_maps(weights, data)
    assert set(scores) == {"first_token", "previous_token", "induction"}
    assert all(table.shape == (30, 9) for table in scores.values())
    torch.testing.assert_close(scores["previous_token"][4], previous_token_score(weights[4]))
    first, baseline = copy_loss(model, data, copy="first"), copy_loss(model, data)
    assert baseline < first / 3
    induction = top_heads(scores["induction"], 5)
    assert scores["induction"][induction[0]] == scores["induction"].max()
    assert copy_loss(model, data, induction) > baseline + 3.0
    assert copy_loss(model, data, [(0, 1), (9, 3), (14, 2), (26, 5), (29, 7)]) < baseline + 1.0
    with pytest.raises(ValueError, match="copy must be 'first' or 'second'"):
        copy_loss(model, data, copy="third")
    with torch.no_grad():
        logits = model(data.tokens)
    assert copy_losses(logits, data) == (first, baseline)
    with pytest.raises(ValueError, match=r"logits must be \(batch, seq, vocab\) for tokens \(1, 41\)"):
        copy_losses(logits[:, :-1], data)


# ---------------------------------------------------------------- checkers


def random_causal(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    seq = shape[-1]
    scores = torch.randn(*shape, generator=g, dtype=torch.float64)
    return scores.masked_fill(torch.ones(seq, seq, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)


def right_induction(weights, repeat_len):
    q = torch.arange(1 + repeat_len, 1 + 2 * repeat_len)
    return weights[:, :, q, q - repeat_len + 1].mean(dim=(0, 2))


def test_induction_score_checker_agrees_with_notebook_07s_score():
    # The learner's answer written independently, with a loop, against the checker.
    def looped(weights, n):
        total = torch.zeros(weights.shape[1], dtype=weights.dtype)
        for b in range(weights.shape[0]):
            for t in range(1 + n, 1 + 2 * n):
                total += weights[b, :, t, t - n + 1]
        return total / (weights.shape[0] * n)

    assert check_head_induction_score(looped, verbose=False).correct
    assert check_head_induction_score(right_induction, verbose=False).correct


@pytest.mark.parametrize(
    ("wrong", "named"),
    [
        (lambda w, n: _key(w, n, 0), "off-by-one diagonal: the earlier"),
        (lambda w, n: _key(w, n, 2), "two after the earlier occurrence"),
        (lambda w, n: _key(w, n, 1, range(n - 1, 1 + 2 * n)), "included the first copy"),
        (lambda w, n: _key(w, n, 1, range(1 + n, 2 * n)), "left out the last token"),
        (lambda w, n: _key(w, n, n - 1), "previous-token pattern"),
    ],
)
def test_induction_score_checker_names_the_mistake(wrong, named):
    result = check_head_induction_score(wrong, verbose=False)
    assert not result.correct
    assert named in result.misconception


def _key(weights, n, shift, queries=None):
    queries = range(1 + n, 1 + 2 * n) if queries is None else queries
    picked = [weights[:, :, t, t - n + shift] for t in queries]
    return torch.stack(picked, -1).mean(dim=(0, 2))


def test_induction_score_checker_rejects_an_average_over_heads_and_a_constant():
    over_heads = check_head_induction_score(
        lambda w, n: torch.stack([w[:, :, t, t - n + 1] for t in range(1 + n, 1 + 2 * n)], -1).mean(dim=(1, 2)),
        verbose=False,
    )
    assert over_heads.misconception == "averaged over the heads, not the batch"
    constant = check_head_induction_score(lambda w, n: torch.full((w.shape[1],), 0.5, dtype=w.dtype), verbose=False)
    assert constant.status == "incorrect"


def test_sink_checker_accepts_the_right_answer_and_names_each_mistake():
    assert check_sink_heads(lambda w, c: w[..., 1:, 0].mean(-1) > c, verbose=False).correct
    wrong = {
        "counted query 0": lambda w, c: w[..., 0].mean(-1) > c,
        "read row 0 instead of column 0": lambda w, c: w[..., 0, :].mean(-1) > c,
        "took the largest weight, not the mean": lambda w, c: w[..., 1:, 0].max(-1).values > c,
        "returned the weights, not a mask": lambda w, c: w[..., 1:, 0].mean(-1),
        "comparison the wrong way round": lambda w, c: w[..., 1:, 0].mean(-1) <= c,
    }
    for name, answer in wrong.items():
        result = check_sink_heads(answer, verbose=False)
        assert result.misconception == name, (name, result.message)
    # A 0/1 float mask with the right values is still not a bool mask.
    assert not check_sink_heads(lambda w, c: (w[..., 1:, 0].mean(-1) > c).float(), verbose=False).correct


def test_sink_checker_on_a_real_layer_stack(model, tokenizer):
    # What the checker teaches, on the model: after layer 2 some heads are sinks, in layer 0 none.
    _, weights = attention_weights_of(PRESET_SENTENCES[0])
    stack = torch.tensor(weights)
    sinks = stack[..., 1:, 0].mean(-1) > 0.5
    assert sinks.shape == (30, 9)
    assert not sinks[0].any() and sinks[3:10].sum() > 10


def copy_reference(logits, tokens, n):
    flat = logits[:, n + 1 : 2 * n].reshape(-1, logits.shape[-1])
    return F.cross_entropy(flat, tokens[:, n + 2 : 2 * n + 1].reshape(-1))


def test_copy_loss_checker_accepts_the_right_answer_and_names_each_mistake():
    assert check_copy_loss(copy_reference, verbose=False).correct

    def loss(logits, tokens, start, stop, shift=1):
        return F.cross_entropy(logits[:, start:stop].transpose(1, 2), tokens[:, start + shift : stop + shift])

    wrong = {
        "no shift: each position scored on its own token": lambda x, y, n: loss(x, y, n + 1, 2 * n + 1, 0),
        "included the first token of the second copy": lambda x, y, n: loss(x, y, n, 2 * n),
        "scored the first copy": lambda x, y, n: loss(x, y, 1, n),
        "scored the whole sequence": lambda x, y, n: loss(x, y, 0, 2 * n),
    }
    for name, answer in wrong.items():
        assert check_copy_loss(answer, verbose=False).misconception == name
    summed = check_copy_loss(lambda x, y, n: copy_reference(x, y, n) * (n - 1), verbose=False)
    assert summed.status == "incorrect"


def test_the_copy_loss_checker_measures_what_copy_loss_measures(model):
    data = random_repeated_batch(1, 8, vocab_size=model.config.vocab_size, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        logits = model(data.tokens)
    assert float(copy_reference(logits, data.tokens, 8)) == pytest.approx(copy_loss(model, data), rel=1e-4)


def test_prediction_checker_measures_single_head_ablations(model):
    # The truth measured here, with the ablation hooks directly: zero one head, compare with nothing zeroed.
    data = copying_test(model.config.vocab_size)
    assert tuple(data.tokens.shape) == (2, 81) and torch.equal(data.tokens[:, 1:41], data.tokens[:, 41:])
    baseline = copy_loss(model, data)
    truth = []
    for head in PREDICTION_HEADS:
        with ablate_heads(model, [head]):
            truth.append(copy_loss(model, data) > baseline + 1.0)
    # Not every head that scores high is needed: the exercise has both answers.
    assert any(truth) and not all(truth)
    answer = torch.tensor(truth)
    result = check_ablation_prediction(lambda: answer, verbose=False)
    assert result.correct and "Measured rises (nats): L16H0" in result.message
    flipped = check_ablation_prediction(lambda: ~answer, verbose=False)
    assert not flipped.correct
    assert check_ablation_prediction(lambda: answer.long(), verbose=False).status == "incorrect"


@pytest.mark.parametrize(
    ("answer", "named"),
    [
        ([True, True, True, True], "a high score means the model needs the head"),
        ([False, False, False, False], "no single head matters"),
        ([False, True, True, False], "only induction heads matter"),
        ([True, False, False, True], "only previous-token heads matter"),
    ],
)
def test_prediction_checker_names_the_belief_behind_a_wrong_prediction(model, answer, named):
    result = check_ablation_prediction(lambda: torch.tensor(answer), verbose=False)
    assert result.misconception == named


def test_prediction_checker_measures_nothing_before_an_answer():
    def stub():
        raise NotImplementedError

    result = check_ablation_prediction(stub, verbose=False)
    assert result.status == "not_attempted" and "Measured" not in result.message


# ---------------------------------------------------------------- explorer, pictures


def test_explorer_draws_the_models_weights_with_tokens_on_the_axes(model, tokenizer):
    explorer = real_attention_explorer()
    ids = torch.tensor([tokenizer.encode(PRESET_SENTENCES[3])])
    with torch.no_grad():
        _, weights = model(ids, need_weights=True)
    np.testing.assert_allclose(explorer.data["weights"], weights[18][0, 6].double().numpy(), rtol=1e-6, atol=1e-7)
    (ax,) = [a for a in explorer.figure.axes if a.images]
    assert ax.get_xlabel() == "key" and ax.get_ylabel() == "query"
    assert [t.get_text() for t in ax.get_xticklabels()] == [t.replace(" ", "·") for t in tokenizer.tokens(ids[0])]
    explorer.update(layer=16, head=0, sentence=PRESET_SENTENCES[1])
    ids = torch.tensor([tokenizer.encode(PRESET_SENTENCES[1])])
    with torch.no_grad():
        _, weights = model(ids, need_weights=True)
    np.testing.assert_allclose(explorer.data["weights"], weights[16][0, 0].double().numpy(), rtol=1e-6, atol=1e-7)
    assert explorer.data["previous_token"] == pytest.approx(float(weights[16][0, 0].diagonal(-1).mean()), rel=1e-6)
    assert "layer 16, head 0" in explorer.data["caption"]


@pytest.mark.parametrize(
    ("settings", "error", "message"),
    [
        ({"layer": 30}, ValueError, r"layer must be in \[0, 29\] \(the model has 30 layers\)"),
        ({"head": -1}, ValueError, r"head must be in \[0, 8\]"),
        ({"head": 2.0}, TypeError, r"head must be an int"),
        ({"sentence": "Hello"}, ValueError, r"sentence must be one of"),
    ],
)
def test_explorer_refuses_impossible_settings(settings, error, message):
    with pytest.raises(error, match=message):
        real_attention_explorer(**settings)
    explorer = real_attention_explorer()
    with pytest.raises(error, match=message):
        explorer.update(**settings)


def texts(fig):
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def test_diagram_draws_the_loaded_configuration(model):
    drawn = " ".join(texts(real_model_diagram(model.config)))
    for part in (
        "× 30 layers",
        "9 query heads, 64 features",
        "3 key/value heads",
        "by 3 query heads (GQA)",
        "RoPE, base 100000",
        "SwiGLU: 576 → 1536 → 576",
        "embedding  (49152, 576)",
        "logits  (batch, seq, 49152)",
        "(tied)",
    ):
        assert part in drawn, part
    assert drawn.count("RMSNorm") >= 3 and drawn.count("residual") == 2
    from dataclasses import replace

    other = " ".join(texts(real_model_diagram(replace(model.config, num_layers=12, num_kv_heads=9))))
    assert "× 12 layers" in other and "by 1 query heads (GQA)" in other
    with pytest.raises(TypeError, match="config must be a LlamaConfig"):
        real_model_diagram({"num_layers": 30})


def test_layer_head_maps_draw_every_value_on_one_scale_and_frame_the_marks():
    values = torch.rand(30, 9, generator=torch.Generator().manual_seed(0))
    fig = layer_head_maps({"a": values, "b": 1 - values}, marks={"b": [(3, 4), (17, 8)]})
    panels = [ax for ax in fig.axes if ax.images]
    assert len(panels) == 2
    np.testing.assert_allclose(panels[0].images[0].get_array(), values.double().numpy())
    assert all(ax.images[0].get_clim() == (0.0, 1.0) for ax in panels)
    assert all(ax.get_xlabel() == "head" and ax.get_ylabel() == "layer" for ax in panels)
    frames = [(p.get_x(), p.get_y()) for p in panels[1].patches]
    assert frames == [(3.5, 2.5), (7.5, 16.5)] and not panels[0].patches
    with pytest.raises(ValueError, match="one shape"):
        layer_head_maps({"a": values, "b": values[:5]})
