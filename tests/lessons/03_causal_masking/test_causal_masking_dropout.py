"""Notebook 03's exercise 7, dropout on the attention weights (``check_attention_dropout``): right answers drawn in
any way are accepted, and behave as ``torch.nn.functional.dropout`` does (the same properties, the same mean over
many draws); each known slip is told by its symptom, then named; the check gives the same verdict run after run
and leaves the notebook's random generator as it found it."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from mhsa_helpers.lessons.causal_masking import check_attention_dropout
from mhsa_helpers.lessons.causal_masking.exercises import (
    DROPOUT_BLOCKS,
    DROPOUT_IN_EVALUATION,
    DROPOUT_KEEP_PROBABILITY,
    DROPOUT_NOT_RESCALED,
    DROPOUT_NOTHING_DROPPED,
    DROPOUT_RANDN,
    DROPOUT_RENORMALISED,
    DROPOUT_REVERSED,
    DROPOUT_SAME_DRAW,
    DROPOUT_SCALED_AT_TEST,
    DROPOUT_SHARE,
    DROPOUT_SHARED,
    DROPOUT_TIMES_KEEP,
)


def right(weights, p, training):
    if not training:
        return weights
    keep = torch.rand_like(weights) >= p
    return weights * keep / (1 - p)


def right_bernoulli(weights, p, training):
    if not training or p == 0:
        return weights.clone()
    return weights * torch.bernoulli(torch.full_like(weights, 1 - p)) / (1 - p)


def right_where_float32_draw(weights, p, training):
    if training:
        kept = torch.rand(weights.shape) < 1 - p  # drawn in float32 whatever the weights' dtype
        return torch.where(kept, weights / (1 - p), torch.zeros_like(weights))
    return weights


@pytest.mark.parametrize("answer", [right, right_bernoulli, right_where_float32_draw])
def test_a_right_answer_is_accepted_whichever_way_it_draws(answer):
    result = check_attention_dropout(answer, verbose=False)
    assert result.correct, result.message
    assert result.shortcuts == ()


def test_the_right_answer_behaves_as_pytorchs_dropout():
    torch.manual_seed(0)
    weights = torch.softmax(torch.randn(1, 2, 3, 5, dtype=torch.float64), dim=-1)
    copies = weights.expand(40_000, 2, 3, 5)  # 40 000 independent draws of each weight
    p = 0.3
    mine, theirs = right(copies, p, True), F.dropout(copies, p, training=True)
    scaled = copies / (1 - p)
    for out in (mine, theirs):  # every weight is 0 or exactly weight / (1 - p)
        assert bool(((out == 0) | ((out - scaled).abs() <= 1e-12 * scaled)).all())
    # The share zeroed and the mean, weight by weight: 40 000 draws put both within 6 standard deviations (0.014 and
    # below 0.02) of p and of the weight, and of F.dropout's.
    share_mine, share_theirs = (mine == 0).double().mean(0), (theirs == 0).double().mean(0)
    torch.testing.assert_close(share_mine, torch.full_like(share_mine, p), atol=0.014, rtol=0)
    torch.testing.assert_close(share_mine, share_theirs, atol=0.02, rtol=0)
    torch.testing.assert_close(mine.mean(0), weights[0], atol=0.02, rtol=0)
    torch.testing.assert_close(mine.mean(0), theirs.mean(0), atol=0.025, rtol=0)
    assert torch.equal(right(weights, p, False), F.dropout(weights, p, training=False))
    assert torch.equal(right(weights, 0.0, True), F.dropout(weights, 0.0, training=True))


def test_pytorchs_dropout_is_accepted_with_a_note():
    result = check_attention_dropout(lambda weights, p, training: F.dropout(weights, p, training), verbose=False)
    assert result.correct and result.shortcuts == ("torch.nn.functional.dropout",)
    assert "which does what this exercise asks you to write yourself" in result.message


def test_the_verdict_is_the_same_run_after_run_and_the_notebooks_generator_is_left_alone():
    torch.manual_seed(123)
    state = torch.get_rng_state()
    first = check_attention_dropout(right, verbose=False)
    assert torch.equal(torch.get_rng_state(), state)
    assert check_attention_dropout(right, verbose=False).message == first.message


def keep_where(weights, p, training, keep, scale):
    return weights if not training else weights * keep * scale


@pytest.mark.parametrize(
    ("wrong", "symptom", "name"),
    [
        (lambda w, p, t: w if t else right(w, p, True), "and with training=True it is the weights unchanged",
         DROPOUT_REVERSED),
        (lambda w, p, t: right(w, p, True), "With training=False your output has zeros", DROPOUT_IN_EVALUATION),
        (lambda w, p, t: torch.nn.Dropout(p)(w), "With training=False your output has zeros", DROPOUT_IN_EVALUATION),
        (lambda w, p, t: w * (torch.rand_like(w) >= p) if t else w * (1 - p), "the weights times (1 - p)",
         DROPOUT_SCALED_AT_TEST),
        (lambda w, p, t: w.clone(), "your output is the weights unchanged", DROPOUT_NOTHING_DROPPED),
        (lambda w, p, t: keep_where(w, p, t, torch.rand_like(w) >= p, 1), "the weights themselves",
         DROPOUT_NOT_RESCALED),
        (lambda w, p, t: keep_where(w, p, t, torch.rand_like(w) >= p, 1 - p), "smaller than the weights",
         DROPOUT_TIMES_KEEP),
        (lambda w, p, t: w if not t else (lambda k: k / k.sum(-1, keepdim=True))(w * (torch.rand_like(w) >= p)),
         "sums to exactly 1", DROPOUT_RENORMALISED),
        (lambda w, p, t: keep_where(w, p, t, torch.rand(w.shape[-2:], dtype=w.dtype) >= p, 1 / (1 - p)),
         "the same positions in every sequence", DROPOUT_SHARED),
        (lambda w, p, t: keep_where(w, p, t, torch.rand(*w.shape[:-1], 1, dtype=w.dtype) >= p, 1 / (1 - p)),
         "whole rows or columns", DROPOUT_BLOCKS),
        (lambda w, p, t: keep_where(w, p, t, torch.rand(w.shape, generator=torch.Generator()) >= p, 1 / (1 - p)),
         "drop exactly the same positions", DROPOUT_SAME_DRAW),
        (lambda w, p, t: keep_where(w, p, t, torch.rand_like(w) < p, 1 / (1 - p)), "a share 1 - p",
         DROPOUT_KEEP_PROBABILITY),
        (lambda w, p, t: keep_where(w, p, t, torch.randn_like(w) >= p, 1 / (1 - p)), "neither p nor 1 - p",
         DROPOUT_RANDN),
        (lambda w, p, t: w if not t or p == 0 else torch.zeros_like(w), "far from p", DROPOUT_SHARE),
    ],
    ids=["reversed", "always", "nn.Dropout", "test-time scaling", "nothing", "not rescaled", "times 1 - p",
         "renormalised", "shared", "rows", "same draw", "keep probability", "randn", "all zero"],
)  # fmt: skip
def test_a_known_slip_is_told_by_its_symptom_then_named(wrong, symptom, name):
    def answer(weights, p, training):
        return wrong(weights, p, training)

    first = check_attention_dropout(answer, verbose=False)
    assert not first.correct and symptom in first.message and name not in first.message, first.message
    second = check_attention_dropout(answer, verbose=False)
    assert second.misconception == name and name in second.message, second.message


def test_a_mask_returned_instead_of_the_weights_is_refused_for_its_dtype():
    result = check_attention_dropout(lambda weights, p, training: torch.rand_like(weights) >= p, verbose=False)
    assert not result.correct and "returned dtype torch.bool, expected torch.float64" in result.message
