"""Notebook 07's payoff, "train your own module": the learner's attention (tests/learner_reference.py)
swapped into the induction model by one argument computes what the package's does from the same
weights. That it also goes through the same phase change when trained from its own start is claimed, and
so checked, by the solutions notebook, which trains the solutions' module (the one 400-step run)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from learner_modules import causal_module
from learner_reference import MyCausalSelfAttention
from notebook_cells import payoff_cell_problems
from torch import nn

from mhsa_helpers.lessons.induction_heads import (
    AttentionOnlyTransformer,
    InductionConfig,
    build_model,
    evaluation_batch,
    in_context_loss,
    load_checkpoints,
    phase_change_step,
    train_induction,
)
from mhsa_helpers.teaching.claims import ClaimError, claim
from mhsa_helpers.teaching.modules import copy_gqa_weights, explained, module_is_written


def same_weights(package: AttentionOnlyTransformer) -> AttentionOnlyTransformer:
    """The learner's model holding ``package``'s weights."""
    mine = AttentionOnlyTransformer(
        package.vocab_size, package.d_model, package.num_heads, max_seq_len=package.max_seq_len,
        positions="rope", attention=MyCausalSelfAttention,
    )  # fmt: skip
    mine.embed.load_state_dict(package.embed.state_dict())
    mine.unembed.load_state_dict(package.unembed.state_dict())
    for my_layer, layer in zip(mine.layers, package.layers, strict=True):
        copy_gqa_weights(my_layer, layer)
    return mine.eval()


def test_one_argument_swaps_every_layer_and_the_seed_fixes_its_weights():
    config = InductionConfig()
    model = build_model(config, seed=3, attention=MyCausalSelfAttention)
    assert all(isinstance(layer, MyCausalSelfAttention) for layer in model.layers) and len(model.layers) == 2
    assert model.pos_embed is None and model.custom_attention
    again = build_model(config, seed=3, attention=MyCausalSelfAttention)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values(), strict=True))
    other = build_model(config, seed=4, attention=MyCausalSelfAttention)
    assert not torch.equal(model.layers[0].w_q.weight, other.layers[0].w_q.weight)
    assert not build_model(config, seed=3).custom_attention


def test_the_same_weights_give_the_same_logits_weights_and_ablations():
    config = InductionConfig()
    package = load_checkpoints().model_at(320)  # the trained model: its heads are sharp
    mine = same_weights(package)
    batch = evaluation_batch(config, 16)
    with torch.no_grad():
        want, want_weights = package(batch.tokens)
        got, got_weights = mine(batch.tokens)
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
        for w_got, w_want in zip(got_weights, want_weights, strict=True):
            torch.testing.assert_close(w_got, w_want, atol=1e-5, rtol=1e-4)
        for pair in ((0, 1), (1, 3)):  # ablation hooks the learner's w_o as it hooks the package's out_proj
            zeroed, _ = mine(batch.tokens, ablate=[pair])
            torch.testing.assert_close(zeroed, package(batch.tokens, ablate=[pair])[0], atol=1e-4, rtol=1e-4)
            assert (zeroed - got).abs().max() > 1e-2
    assert in_context_loss(mine, batch, ablate=[(0, 2)]) == pytest.approx(
        in_context_loss(package, batch, ablate=[(0, 2)]), abs=1e-4
    )


class NoProjection(nn.Module):
    def __init__(self, d_model, num_heads):
        super().__init__()
        self.inner = MyCausalSelfAttention(d_model, num_heads)

    def forward(self, x, need_weights=False):
        return self.inner(x, need_weights=need_weights)


class WeightsOfOneHead(MyCausalSelfAttention):
    def forward(self, x, cache=None, need_weights=False):
        out, weights = super().forward(x, cache, need_weights=True)
        return out, weights[:, 0]


def test_bad_attention_arguments_are_named():
    with pytest.raises(TypeError, match=r"attention must be a class or function called as attention\(d_model"):
        AttentionOnlyTransformer(16, 16, 4, attention=3)
    with pytest.raises(TypeError, match="not an instance"):
        AttentionOnlyTransformer(16, 16, 4, attention=MyCausalSelfAttention(16, 4))
    with pytest.raises(TypeError, match=r"must return an nn\.Module, got int"):
        AttentionOnlyTransformer(16, 16, 4, attention=lambda d_model, num_heads: 7)
    tokens = torch.zeros(2, 5, dtype=torch.long)
    with pytest.raises(
        ValueError, match=r"weights \(batch, heads, seq, seq\) = \(2, 4, 5, 5\).*got \(\(2, 5, 16\), \(2, 5, 5\)\)"
    ):
        AttentionOnlyTransformer(16, 16, 4, positions="rope", attention=WeightsOfOneHead)(tokens)
    model = AttentionOnlyTransformer(16, 16, 4, positions="rope", attention=NoProjection)
    assert model(tokens)[0].shape == (2, 5, 16)
    with pytest.raises(ValueError, match=r"out_proj .* or w_o"):
        model(tokens, ablate=[(0, 1)])
    with pytest.raises(ValueError, match="mask works only with the package's attention"):
        AttentionOnlyTransformer(16, 16, 4, attention=MyCausalSelfAttention)(tokens, mask=torch.ones(5, 5).bool())


class Placeholder(nn.Module):
    def __init__(self, d_model, num_heads, *, d_in=None, bias=True, rope_base=10000.0):
        super().__init__()

    def forward(self, x, cache=None, need_weights=False):
        raise NotImplementedError


class Broken(MyCausalSelfAttention):
    def forward(self, x, cache=None, need_weights=False):
        return self.w_q(x.transpose(1, 2))


def test_a_placeholder_is_reported_and_a_bug_is_raised(capsys):
    assert module_is_written(MyCausalSelfAttention) and capsys.readouterr().out == ""
    assert not module_is_written(Placeholder)
    assert "not written yet" in capsys.readouterr().out
    assert not module_is_written(None)
    assert "write it in notebook 06 and save it there with save_mine" in capsys.readouterr().out
    with pytest.raises(RuntimeError):  # the learner's own bug is shown as it is, not hidden
        module_is_written(Broken)


NOTEBOOK = Path(__file__).resolve().parents[3] / "notebooks" / "07_induction_heads.ipynb"


def test_the_payoff_cell_runs_its_claims_where_a_failure_is_explained():
    assert payoff_cell_problems(NOTEBOOK, "h22c-07-run") == []


@pytest.mark.parametrize(
    ("slips", "cause"),
    [
        ({"half_split": True}, "'rotating pairs half-split instead of interleaved'"),
        ({"positions": "zero"}, "'positions not offset by the cache'"),
        ({"mask_top_left": True}, "'mask not offset by the cache'"),
        ({"fast_path_without_mask": True}, "'need_weights=True takes another path'"),
        ({"weights_dropped": True}, "'need_weights=True ignored'"),
    ],
)
def test_a_wrong_module_trained_as_the_payoff_cell_does_is_told_its_cause(slips, cause, capsys):
    """The payoff cell's first steps on a learner's wrong module: a short run, then a claim about it. Whether the
    training itself fails (need_weights ignored) or a claim does, the cell says the cause in one line."""
    wrong = causal_module(**slips)
    with pytest.raises((ClaimError, ValueError)), explained(wrong):
        run = train_induction(InductionConfig(steps=3), seed=0, device="cpu", attention=wrong)
        claim("and learns to copy (10-step mean below 1.0)", phase_change_step(run.induction_loss) is not None)
    printed = capsys.readouterr().out.strip().splitlines()
    assert (
        printed[-1].startswith("What the checker of notebook 06, exercise 4 finds in your module (the likely cause)")
        and cause in printed[-1]
        and "notebook 06, exercise 4" in printed[-1]
    )
