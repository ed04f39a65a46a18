"""Notebook 07's package code: the repeated-chunk task, the attention-only model, the head scores,
training and the shipped checkpoints."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from mhsa_helpers.lessons.induction_heads import (
    BOS,
    CHECKPOINT_FILE,
    CHECKPOINT_STEPS,
    AttentionOnlyTransformer,
    InductionBatch,
    InductionConfig,
    attention_entropy,
    bos_score,
    evaluation_batch,
    example_index,
    find_induction_circuit,
    head_scores,
    in_context_loss,
    induction_score,
    layer_heatmaps,
    load_checkpoints,
    loss_curves,
    make_checkpoints,
    make_induction_batch,
    phase_change_step,
    previous_token_score,
    repeat_chunk,
    score_bars,
    train_induction,
    training_explorer,
)


def batch(seed: int = 0, **options) -> InductionBatch:
    settings = {"batch_size": 128, "seq_len": 32, "vocab_size": 32, "min_repeat": 3, "max_repeat": 12} | options
    return make_induction_batch(generator=torch.Generator().manual_seed(seed), **settings)


# ------------------------------------------------------------------ the task


def test_batch_shapes_bos_and_vocabulary():
    b = batch()
    assert b.tokens.shape == b.induction_mask.shape == (128, 32)
    assert b.tokens.dtype == torch.int64 and b.induction_mask.dtype == torch.bool
    assert (b.tokens[:, 0] == BOS).all()
    assert ((b.tokens[:, 1:] >= 1) & (b.tokens[:, 1:] < 32)).all()


def test_second_copy_repeats_the_first_and_the_mask_marks_its_predictable_tokens():
    b = batch()
    for row in range(b.tokens.shape[0]):
        start, length = int(b.first_start[row]), int(b.repeat_len[row])
        tokens = b.tokens[row].tolist()
        assert 3 <= length <= 12 and start >= 1 and start + 2 * length <= 32
        assert tokens[start : start + length] == tokens[start + length : start + 2 * length]
        # Predictable next token: positions start+length .. start+2*length-2 (the last copy token's
        # successor is noise).
        expected = [start + length <= t <= start + 2 * length - 2 for t in range(32)]
        assert b.induction_mask[row].tolist() == expected


def test_offsets_and_lengths_vary_unless_fixed():
    b = batch()
    assert len(set(b.first_start.tolist())) > 5 and len(set(b.repeat_len.tolist())) == 10
    fixed = batch(fixed_offset=True)
    assert set(fixed.first_start.tolist()) == {1} and set(fixed.repeat_len.tolist()) == {12}
    assert (fixed.tokens[:, 1:13] == fixed.tokens[:, 13:25]).all()


def test_batch_is_deterministic_given_the_generator():
    assert torch.equal(batch(3).tokens, batch(3).tokens)
    assert not torch.equal(batch(3).tokens, batch(4).tokens)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"vocab_size": 1}, "vocab_size must be >= 3"),
        ({"vocab_size": 2}, "vocab_size must be >= 3"),
        ({"seq_len": 20, "max_repeat": 10}, r"seq_len must be >= 1 \+ 2 \* max_repeat = 21"),
        ({"min_repeat": 1}, "min_repeat must be >= 2"),
        ({"min_repeat": 8, "max_repeat": 5}, "max_repeat must be >= min_repeat"),
        ({"batch_size": 0}, "batch_size must be >= 1"),
    ],
)
def test_impossible_task_settings_name_the_setting(options, message):
    with pytest.raises(ValueError, match=message):
        batch(**options)


def test_bad_model_settings_name_the_setting():
    with pytest.raises(ValueError, match=r"num_heads must divide d_model.*d_model=30, num_heads=4"):
        InductionConfig(d_model=30)
    with pytest.raises(ValueError, match="num_heads must divide d_model"):
        AttentionOnlyTransformer(32, 30, 4)
    with pytest.raises(ValueError, match="d_model // num_heads must be even"):
        InductionConfig(d_model=12, num_heads=4, positions="rope")
    with pytest.raises(ValueError, match="positions must be one of 'learned', 'rope', got 'alibi'"):
        InductionConfig(positions="alibi")
    with pytest.raises(ValueError, match="seq_len must be >= 1 \\+ 2 \\* max_repeat"):
        InductionConfig(seq_len=16)
    with pytest.raises(ValueError, match="lr must be a positive number"):
        InductionConfig(lr=0)


# ------------------------------------------------------------------ the scores, on hand-built patterns


def one_hot_rows(seq: int, key_of) -> torch.Tensor:
    """``(1, 1, seq, seq)``: query ``t`` puts all its weight on ``key_of(t)``."""
    weights = torch.zeros(1, 1, seq, seq)
    for t in range(seq):
        weights[0, 0, t, key_of(t)] = 1.0
    return weights


def test_previous_token_bos_and_entropy_of_a_previous_token_head():
    weights = one_hot_rows(8, lambda t: max(t - 1, 0))
    assert previous_token_score(weights).tolist() == [1.0]
    assert bos_score(weights).tolist() == pytest.approx([1 / 7])  # only query 1's previous token is BOS
    assert attention_entropy(weights).tolist() == [0.0]


def test_scores_of_a_uniform_causal_head():
    seq = 6
    weights = torch.tril(torch.ones(seq, seq))
    weights = (weights / weights.sum(-1, keepdim=True))[None, None]
    # Query t spreads over t + 1 keys: 1/(t+1) on each, entropy log(t+1); averaged over t = 1..5.
    assert previous_token_score(weights).item() == pytest.approx(sum(1 / (t + 1) for t in range(1, seq)) / 5)
    assert bos_score(weights).item() == pytest.approx(sum(1 / (t + 1) for t in range(1, seq)) / 5)
    assert attention_entropy(weights).item() == pytest.approx(sum(math.log(t + 1) for t in range(1, seq)) / 5)


def hand_batch() -> InductionBatch:
    # BOS n n A B C A B C n n: first copy at 3..5, second at 6..8.
    tokens = torch.tensor([[0, 9, 9, 1, 2, 3, 1, 2, 3, 9, 9]])
    mask = torch.tensor([[t in (6, 7) for t in range(11)]])
    return InductionBatch(tokens, mask, torch.tensor([3]), torch.tensor([3]))


def test_induction_score_rewards_the_token_after_the_earlier_occurrence():
    b = hand_batch()
    # Queries 6, 7, 8 (A, B, C again) should look at 4, 5, 6 (B, C, and the A that followed C).
    induction = one_hot_rows(11, lambda t: {6: 4, 7: 5, 8: 6}.get(t, 0))
    assert induction_score(induction, b).tolist() == [1.0]
    earlier_token_itself = one_hot_rows(11, lambda t: {6: 3, 7: 4, 8: 5}.get(t, 0))
    assert induction_score(earlier_token_itself, b).tolist() == [0.0]
    half = one_hot_rows(11, lambda t: {6: 4}.get(t, 0))  # one query of three on target
    assert induction_score(half, b).item() == pytest.approx(1 / 3)
    # A previous-token head is not an induction head.
    assert induction_score(one_hot_rows(11, lambda t: max(t - 1, 0)), b).tolist() == [0.0]


def test_head_scores_and_find_induction_circuit():
    b = hand_batch()
    prev = one_hot_rows(11, lambda t: max(t - 1, 0))
    ind = one_hot_rows(11, lambda t: {6: 4, 7: 5, 8: 6}.get(t, 0))
    bos = one_hot_rows(11, lambda t: 0)
    layer0 = torch.cat([bos, prev], dim=1)  # (1, 2, 11, 11): head 1 is the previous-token head
    layer1 = torch.cat([ind, bos], dim=1)  # head 0 is the induction head
    scores = head_scores([layer0, layer1], b)
    assert set(scores) == {"previous_token", "induction", "bos", "entropy"}
    assert scores["previous_token"].shape == (2, 2)
    assert scores["bos"][0, 0] == 1.0 and scores["bos"][1, 1] == 1.0
    assert find_induction_circuit(scores) == ((0, 1), (1, 0))


def test_scores_reject_a_badly_shaped_pattern():
    with pytest.raises(ValueError, match=r"weights must have shape \(batch, heads, seq, seq\)"):
        previous_token_score(torch.ones(4, 4))
    with pytest.raises(ValueError, match="must match the batch's tokens"):
        induction_score(torch.ones(1, 1, 5, 5), hand_batch())


# ------------------------------------------------------------------ the model


def small_model(**options) -> AttentionOnlyTransformer:
    torch.manual_seed(0)
    return AttentionOnlyTransformer(16, 16, 4, max_seq_len=12, **options).eval()


@pytest.mark.parametrize("positions", ["learned", "rope"])
def test_model_shapes_and_causality(positions):
    model = small_model(positions=positions)
    tokens = torch.randint(1, 16, (3, 12), generator=torch.Generator().manual_seed(1))
    logits, weights = model(tokens)
    assert logits.shape == (3, 12, 16)
    assert [tuple(w.shape) for w in weights] == [(3, 4, 12, 12)] * 2
    assert torch.all(weights[1].triu(1) == 0)
    changed = tokens.clone()
    changed[:, 7] = (changed[:, 7] % 15) + 1
    new_logits, _ = model(changed)
    torch.testing.assert_close(new_logits[:, :7], logits[:, :7])
    assert not torch.allclose(new_logits[:, 7:], logits[:, 7:])


def test_ablation_removes_exactly_that_heads_contribution():
    model = small_model()
    tokens = torch.randint(1, 16, (2, 12), generator=torch.Generator().manual_seed(2))
    ablated, _ = model(tokens, ablate=[(0, 2)])
    plain, _ = model(tokens)
    assert not torch.allclose(ablated, plain)
    # Scrambling head 2's values in layer 0 changes nothing once that head is zeroed...
    d_model, d_head = 16, 4
    with torch.no_grad():
        values = model.layers[0].qkv_proj.weight[2 * d_model + 2 * d_head : 2 * d_model + 3 * d_head]
        values.copy_(torch.randn_like(values) * 5)
    torch.testing.assert_close(model(tokens, ablate=[(0, 2)])[0], ablated)
    # ...and changes the output when it is not.
    assert not torch.allclose(model(tokens)[0], plain)
    with pytest.raises(ValueError, match=r"ablate must hold \(layer, head\) pairs.*got \(2, 0\)"):
        model(tokens, ablate=[(2, 0)])


# ------------------------------------------------------------------ training


def test_training_is_deterministic_given_the_seed():
    config = InductionConfig(steps=5, batch_size=8)
    first, second = train_induction(config, seed=7, device="cpu"), train_induction(config, seed=7, device="cpu")
    assert first.loss == second.loss and len(first.loss) == 5
    assert train_induction(config, seed=8, device="cpu").loss != first.loss


def test_short_run_learns_the_fixed_offset_shortcut_but_not_induction():
    """80 steps on fixed-offset data: the repeated tokens become predictable (a positional lookup),
    yet on data with varied offsets the model is no better than guessing."""
    config = InductionConfig(steps=80, fixed_offset=True)
    calls = []
    run = train_induction(config, seed=0, device="cpu", progress=lambda step, total: calls.append((step, total)))
    assert calls[0] == (1, 80) and calls[-1] == (80, 80)
    assert sum(run.induction_loss[:5]) / 5 > 3.0
    assert sum(run.induction_loss[-10:]) / 10 < 1.0
    assert sum(run.other_loss[-10:]) / 10 > 3.0  # random tokens stay unpredictable
    chance = math.log(config.vocab_size - 1)
    varied = evaluation_batch(InductionConfig(), batch_size=64)
    assert in_context_loss(run.model, varied) > chance - 0.3


# ------------------------------------------------------------------ the shipped checkpoints


def test_shipped_checkpoints_are_small_and_show_the_circuit():
    assert CHECKPOINT_FILE.stat().st_size < 700_000
    shipped = load_checkpoints()
    assert len(shipped.history["induction_loss"]) == shipped.steps[-1]
    model = shipped.model_at(shipped.steps[-1])
    b = evaluation_batch(shipped.config)
    with torch.no_grad():
        _, weights = model(b.tokens)
    scores = head_scores(weights, b)
    (_, prev_head), (_, ind_head) = find_induction_circuit(scores)
    assert scores["previous_token"][0, prev_head] > 0.9
    assert scores["induction"][1, ind_head] > 0.4
    loss = in_context_loss(model, b)
    assert loss < 1.0
    prev_cost = in_context_loss(model, b, ablate=[(0, prev_head)]) - loss
    assert prev_cost > 2.0
    # Every other layer-0 head matters far less than the previous-token head.
    for other in range(model.num_heads):
        if other != prev_head:
            assert abs(in_context_loss(model, b, ablate=[(0, other)]) - loss) < prev_cost / 5
    untrained = shipped.model_at(0)
    with torch.no_grad():
        _, weights = untrained(b.tokens)
    assert head_scores(weights, b)["previous_token"].max() < 0.3


def test_regenerated_checkpoints_match_the_shipped_ones():
    """The first two checkpoints, retrained from the same seed.

    Tolerance: both sides are rounded to float16, so a weight whose float32 value moved across a
    rounding boundary differs by one float16 step, at most 2**-10 relative (rtol). On top of that
    another CPU may sum in another order: perturbing every
    initial weight by 1e-7 relative moved no weight by more than 1e-4 in 400 steps of training
    (phase change included), so atol 1e-3 is ten times that."""
    shipped = load_checkpoints()
    prefix = shipped.steps[:2]
    regenerated = make_checkpoints(steps=prefix, seed=shipped.seed, config=shipped.config)
    for step in prefix:
        for name, value in shipped.state_dicts[step].items():
            torch.testing.assert_close(
                regenerated.state_dicts[step][name].float(), value.float(), rtol=2**-10, atol=1e-3, msg=name
            )
    assert regenerated.history["induction_loss"] == pytest.approx(
        shipped.history["induction_loss"][: prefix[-1]], abs=1e-3
    )


# ------------------------------------------------------------------ the repeated batch, by hand


def test_repeat_chunk_copies_forward_and_marks_the_predictable_next_tokens():
    noise = torch.tensor([[0, 5, 6, 7, 8, 9, 4, 3, 2, 1]])
    tokens, mask = repeat_chunk(noise, torch.tensor([2]), torch.tensor([3]))
    # Chunk 6 7 8 at 2..4 is written again at 5..7; next tokens predictable after positions 5 and 6.
    assert tokens.tolist() == [[0, 5, 6, 7, 8, 6, 7, 8, 2, 1]]
    assert mask.dtype == torch.bool and mask.tolist() == [[t in (5, 6) for t in range(10)]]


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        ((torch.zeros(2, 8), torch.tensor([1, 1]), torch.tensor([2, 2])), TypeError, "noise must be an integer tensor"),
        ((torch.zeros(2, 8, dtype=torch.long), torch.tensor([1]), torch.tensor([2, 2])), ValueError, "first_start"),
        ((torch.zeros(2, 8, dtype=torch.long), torch.tensor([1, 1]), 3), ValueError, "repeat_len must be a tensor"),
        ((torch.zeros(1, 8, dtype=torch.long), torch.tensor([2]), torch.tensor([4])), ValueError, "inside seq=8"),
        ((torch.zeros(1, 8, dtype=torch.long), torch.tensor([0]), torch.tensor([2])), ValueError, "after BOS"),
    ],
)
def test_repeat_chunk_names_bad_input(args, error, message):
    with pytest.raises(error, match=message):
        repeat_chunk(*args)


def test_phase_change_step_is_the_first_window_below_the_threshold():
    losses = [3.0] * 20 + [0.5] * 20
    # Window ending at step 28 holds two 3.0s and eight 0.5s: mean 1.0, not below; at step 29, one 3.0: 0.75.
    assert phase_change_step(losses) == 29
    assert phase_change_step([3.0] * 50) is None
    with pytest.raises(ValueError, match="window must be an int >= 1"):
        phase_change_step(losses, window=0)


# ------------------------------------------------------------------ the figures


def test_layer_heatmaps_share_one_scale_and_name_the_axes():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    b = hand_batch()
    weights = [one_hot_rows(11, lambda t: max(t - 1, 0)).expand(1, 3, 11, 11)[0]] * 2
    fig = layer_heatmaps(weights, first_start=3, repeat_len=3)
    images = [ax.images[0] for ax in fig.axes if ax.images]
    assert len(images) == 6 and {im.get_clim() for im in images} == {(0.0, 1.0)}
    assert fig.axes[0].get_ylabel() == "query position" and fig.axes[3].get_xlabel() == "key position"
    assert any(ax.get_ylabel() == "attention weight" for ax in fig.axes)  # the colour bar
    plt.close(fig)
    with pytest.raises(ValueError, match=r"weights must be a list of \(heads, seq, seq\)"):
        layer_heatmaps([torch.ones(2, 3, 4)], first_start=1, repeat_len=1)
    with pytest.raises(ValueError, match="'other_loss' is missing"):
        loss_curves({"step": [0], "induction_loss": [1.0]}, vocab_size=32)
    with pytest.raises(ValueError, match="names must be among"):
        score_bars(head_scores([one_hot_rows(11, lambda t: 0)] * 2, b), names=("entropy",))


# ------------------------------------------------------------------ the explorer


@pytest.fixture
def explorer():
    made = training_explorer()
    yield made
    made.close()


def test_explorer_draws_the_shipped_weights_of_the_chosen_step_and_head(explorer):
    shipped = load_checkpoints()
    b = evaluation_batch(shipped.config)
    row = example_index(b)
    assert int(b.repeat_len[row]) == int(b.repeat_len.max())
    for step, layer, head in [(CHECKPOINT_STEPS[-1], 0, 0), (0, 1, 2), (260, 1, 3)]:
        explorer.update(step=step, layer=layer, head=head)
        with torch.no_grad():
            _, weights = shipped.model_at(step)(b.tokens)
        np.testing.assert_allclose(explorer.data["weights"], weights[layer][row, head].double().numpy(), atol=1e-6)
        np.testing.assert_allclose(
            explorer.data["scores"]["induction"], head_scores(weights, b)["induction"], atol=1e-6
        )
        heat = next(ax for ax in explorer.figure.axes if ax.images)
        np.testing.assert_allclose(heat.images[0].get_array(), explorer.data["weights"])
        assert f"layer {layer}, head {head} at step {step}" in heat.get_title()


def test_explorer_opens_on_the_previous_token_head_and_the_slider_changes_the_picture(explorer):
    assert explorer.values() == {"step": CHECKPOINT_STEPS[-1], "layer": 0, "head": 0}
    assert list(explorer.controls["step"].options) == list(load_checkpoints().steps)
    pictures = {explorer.picture}
    for step in (0, 200, 260):
        explorer.controls["step"].value = step
        assert explorer.data["step"] == step
        pictures.add(explorer.picture)
    assert len(pictures) == 4
    # The previous-token line is drawn only once it has formed.
    assert explorer.update(step=0).data["weights"].diagonal(-1).mean() < 0.3
    assert explorer.update(step=CHECKPOINT_STEPS[-1]).data["weights"].diagonal(-1).mean() > 0.9


@pytest.mark.parametrize(
    ("settings", "error", "message"),
    [
        ({"step": 150}, ValueError, r"step must be one of the saved steps \[0, 100, .*got step=150"),
        ({"step": 320.0}, TypeError, "step must be an int"),
        ({"layer": 2}, ValueError, r"layer must be in \[0, 1\]"),
        ({"head": 4}, ValueError, r"head must be in \[0, 3\] \(one of the heads\)"),
        ({"head": True}, TypeError, "head must be an int"),
    ],
)
def test_explorer_refuses_impossible_settings(explorer, settings, error, message):
    with pytest.raises(error, match=message):
        training_explorer(**settings)
    before = (explorer.values(), explorer.redraw_count)
    with pytest.raises(error, match=message):
        explorer.update(**settings)
    assert (explorer.values(), explorer.redraw_count) == before
