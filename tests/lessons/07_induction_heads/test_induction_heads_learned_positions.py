"""Notebook 07 with learned positions instead of RoPE: the induction circuit still forms.

One run is retrained here (the shipped one's settings and seed) and the circuit is pinned by its
scores and by ablation; the shipped file (``scripts/make_induction_checkpoints.py --positions
learned``) is checked to be that run."""

from __future__ import annotations

import pytest
import torch

from mhsa_helpers.lessons.induction_heads import (
    CHECKPOINT_SEED,
    LEARNED_CHECKPOINT_FILE,
    LEARNED_CHECKPOINT_STEPS,
    InductionConfig,
    evaluation_batch,
    find_induction_circuit,
    head_scores,
    in_context_loss,
    load_checkpoints,
    phase_change_step,
    train_induction,
)


def circuit(model: torch.nn.Module, batch) -> dict[str, float]:
    """The best previous-token and induction scores, the repeated-token loss, and the loss with the
    previous-token head (and with the best other layer-0 head) zeroed."""
    with torch.no_grad():
        _, weights = model(batch.tokens)
    scores = head_scores(weights, batch)
    (_, prev_head), (_, ind_head) = find_induction_circuit(scores)
    loss = in_context_loss(model, batch)
    others = [h for h in range(model.num_heads) if h != prev_head]
    return {
        "previous_token": float(scores["previous_token"][0, prev_head]),
        "induction": float(scores["induction"][1, ind_head]),
        "layer1_previous_token": float(scores["previous_token"][1].max()),
        "loss": loss,
        "without_previous_token_head": in_context_loss(model, batch, ablate=[(0, prev_head)]),
        "without_other_layer0_head": max(in_context_loss(model, batch, ablate=[(0, h)]) for h in others),
    }


@pytest.fixture(scope="module")
def retrained():
    torch.set_num_threads(1)
    config = InductionConfig(positions="learned")
    return train_induction(config, seed=CHECKPOINT_SEED, device="cpu")


def assert_circuit(measured: dict[str, float]) -> None:
    # A previous-token head forms in layer 0, less sharp than RoPE's (above 0.9 in notebook 07).
    assert 0.5 < measured["previous_token"] < 0.8
    # Layer 1 holds induction heads, and no previous-token head.
    assert measured["induction"] > 0.5
    assert measured["layer1_previous_token"] < 0.2
    # The model copies: below 1 nat on the repeated tokens (chance is ln 31 = 3.43).
    assert measured["loss"] < 1.0
    # Zeroing the previous-token head sends the loss up by more than 1.5 nats, towards chance;
    # zeroing any other layer-0 head costs less than a fifth of that.
    cost = measured["without_previous_token_head"] - measured["loss"]
    assert cost > 1.5
    assert measured["without_other_layer0_head"] - measured["loss"] < cost / 5


def test_retrained_with_learned_positions_the_induction_circuit_forms(retrained):
    assert retrained.config.positions == "learned" and retrained.model.pos_embed is not None
    assert_circuit(circuit(retrained.model.cpu(), evaluation_batch(retrained.config, 128)))
    # Its phase change comes, after step 250 (the RoPE run's is after step 200, notebook 07).
    learned = phase_change_step(retrained.induction_loss)
    assert learned is not None and 250 < learned < retrained.config.steps


def test_the_shipped_learned_positions_checkpoint_is_that_run(retrained):
    assert LEARNED_CHECKPOINT_FILE.stat().st_size < 150_000
    shipped = load_checkpoints(LEARNED_CHECKPOINT_FILE)
    assert shipped.config == retrained.config and shipped.seed == retrained.seed
    assert shipped.steps == LEARNED_CHECKPOINT_STEPS == (retrained.config.steps,)
    # As notebook 07 compares its live run with the shipped one.
    torch.testing.assert_close(
        torch.tensor(shipped.history["induction_loss"]), torch.tensor(retrained.induction_loss), atol=0.05, rtol=0
    )
    model = shipped.model_at(shipped.steps[-1])
    assert_circuit(circuit(model, evaluation_batch(shipped.config, 128)))
    # float16 weights behave as the float32 ones they were rounded from.
    batch = evaluation_batch(shipped.config, 128)
    assert in_context_loss(model, batch) == pytest.approx(in_context_loss(retrained.model.cpu(), batch), abs=0.02)


def test_the_rope_run_has_the_sharper_previous_token_head():
    """The comparison notebook 07 draws, on the two shipped runs."""
    rope, learned = load_checkpoints(), load_checkpoints(LEARNED_CHECKPOINT_FILE)
    batch = evaluation_batch(rope.config, 128)
    rope_circuit = circuit(rope.model_at(rope.steps[-1]), batch)
    learned_circuit = circuit(learned.model_at(learned.steps[-1]), batch)
    assert rope_circuit["previous_token"] > learned_circuit["previous_token"] + 0.2
    assert rope_circuit["loss"] < learned_circuit["loss"]
    assert phase_change_step(rope.history["induction_loss"]) < phase_change_step(learned.history["induction_loss"])


# ------------------------------------------------------------------ notebook 07's loss curves: the caption


@pytest.mark.parametrize("drop_at", [40, 271])
def test_the_learned_at_step_caption_stays_inside_the_axes(drop_at):
    """Notebook 07's run learns at step 271 of 320: the caption goes left of the dashed line there,
    right of it when the line is in the left half."""
    from mhsa_helpers.lessons.induction_heads import loss_curves

    steps = 320
    induction = [3.4 if s < drop_at else 0.5 for s in range(steps)]
    ax = loss_curves(
        {"step": list(range(steps)), "induction_loss": induction, "other_loss": [3.5] * steps}, vocab_size=32
    )
    (caption,) = [t for t in ax.texts if t.get_text().startswith("learned at step")]
    assert caption.get_text() == f"learned at step {phase_change_step(induction)}"
    renderer = ax.figure.canvas.get_renderer()
    box, axes_box = caption.get_window_extent(renderer), ax.get_window_extent(renderer)
    assert axes_box.x0 <= box.x0 and box.x1 <= axes_box.x1
    line_x = ax.transData.transform((phase_change_step(induction), 0))[0]
    assert (box.x1 <= line_x) == (drop_at > steps / 2)
