"""Notebook 03's masked-softmax checker recognises right and wrong answers, and its random masks never
block or allow a whole row.

Every wrong implementation below is written the way a learner would write it (not taken from the checker
modules), so each test shows that the checker's cases really tell that mistake apart from the right answer
*and* from the other named mistakes.
"""

from __future__ import annotations

import pytest
import torch

from mhsa_helpers.lessons.causal_masking import check_masked_softmax
from mhsa_helpers.lessons.causal_masking.exercises import (
    FULLY_MASKED_NAME,
    MAX_CLAMPED_NAME,
    NO_MAX_NAME,
)
from mhsa_helpers.teaching.misconceptions import FINITE_FILL_NAME, random_mask


def assert_named(checker, learner, name):
    """The first attempt is told the symptom without the name; the same answer again is named."""
    result = checker(learner, verbose=False)
    assert result.status == "misconception", result.message
    assert result.misconception == name, result.message
    assert name not in result.message and result.message == result.symptom
    again = checker(learner, verbose=False)
    assert name in again.message
    return again


def test_masked_softmax_correct_with_an_explicit_guard():
    def guarded(scores, mask):
        # Blocked scores to -inf first, the max over the visible keys (0 for a row with none), a guarded division.
        filled = scores.masked_fill(~mask, float("-inf"))
        visible_max = filled.amax(dim=-1, keepdim=True)
        visible_max = torch.where(torch.isfinite(visible_max), visible_max, torch.zeros_like(visible_max))
        weights = torch.exp(filled - visible_max)
        total = weights.sum(dim=-1, keepdim=True)
        return torch.where(total > 0, weights / total.clamp_min(1e-300), torch.zeros_like(weights))

    assert check_masked_softmax(guarded, verbose=False).correct

    def exp_then_mask(scores, mask, *, visible_max):
        # Right on ordinary scores; a blocked score far from the visible ones leaves float range in exp.
        source = scores.masked_fill(~mask, float("-inf")) if visible_max else scores
        row_max = source.amax(dim=-1, keepdim=True)
        row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
        weights = torch.exp(scores - row_max) * mask
        total = weights.sum(dim=-1, keepdim=True)
        return torch.where(total > 0, weights / total.clamp_min(1e-300), torch.zeros_like(weights))

    for visible_max in (False, True):
        result = check_masked_softmax(lambda s, m, v=visible_max: exp_then_mask(s, m, visible_max=v), verbose=False)
        assert result.misconception == "blocked scores reach exp before the mask removes them"


def _guarded_but_inverted(scores, mask):
    # NaN-safe, but fills where the mask is True (reads it as "True = blocked")
    filled = scores.masked_fill(mask, float("-inf"))
    row_max = filled.amax(dim=-1, keepdim=True)
    exps = torch.exp(filled - torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max)))
    total = exps.sum(dim=-1, keepdim=True)
    return exps / torch.where(total == 0, torch.ones_like(total), total)


def _renormalize_without_guard(scores, mask):
    weights = torch.softmax(scores, dim=-1) * mask
    return weights / weights.sum(dim=-1, keepdim=True)


@pytest.mark.parametrize(
    "learner, name",
    [
        (
            lambda s, m: torch.softmax(s.masked_fill(~m, float("-inf")), dim=-1),
            FULLY_MASKED_NAME,
        ),
        (_renormalize_without_guard, FULLY_MASKED_NAME),
        (
            lambda s, m: torch.softmax(s.masked_fill(~m, -1e9), dim=-1),
            "used a large negative number instead of -inf (a fully masked row becomes uniform)",
        ),
        (lambda s, m: torch.softmax(s, dim=-1) * m, "mask applied after softmax without renormalising"),
        (_guarded_but_inverted, "inverted mask polarity (True = blocked)"),
        (lambda s, m: torch.softmax(s.masked_fill(~m, 0.0), dim=-1), "blocked scores set to 0 instead of -inf"),
    ],
)
def test_masked_softmax_mistakes(learner, name):
    assert_named(check_masked_softmax, learner, name)


def _guarded(exps):
    total = exps.sum(dim=-1, keepdim=True)
    return exps / torch.where(total == 0, torch.ones_like(total), total)


@pytest.mark.parametrize(
    "learner",
    [
        lambda s, m: _guarded(torch.exp(s).masked_fill(~m, 0.0)),
        lambda s, m: _guarded(torch.exp(s.masked_fill(~m, float("-inf")))),
        lambda s, m: _guarded(torch.exp(s) * m),
        lambda s, m: _guarded(torch.exp(s.masked_fill(~m, float("-inf")) - 50.0)),  # a constant, far below 1000
    ],
    ids=["exp, then blocked set to 0", "-inf, then exp", "exp times the mask", "a constant shift of 50"],
)
def test_a_guarded_softmax_without_the_rows_max_is_named_so_and_not_a_clamped_max_or_a_finite_fill(learner):
    # Right on every fully masked row, but exp of unshifted scores overflows near +1000 and underflows near
    # -24000: the probes of a clamped max and of a finite fill fire too, and must not name it.
    again = assert_named(check_masked_softmax, learner, NO_MAX_NAME)
    assert MAX_CLAMPED_NAME not in again.message and FINITE_FILL_NAME not in again.message


def test_the_handed_out_polarity_bug_is_still_the_original_however_it_is_written():
    result = check_masked_softmax(lambda s, m: torch.softmax(s.masked_fill(m, float("-inf")), dim=-1), verbose=False)
    assert result.status == "original", result.message


def test_masked_softmax_cases_contain_fully_masked_rows():
    # Otherwise the NaN trap could not be detected: the NaN learner must not pass.
    def nan_learner(s, m):
        return torch.softmax(s.masked_fill(~m, float("-inf")), dim=-1)

    assert not check_masked_softmax(nan_learner, verbose=False).correct


def test_random_mask_never_blocks_or_allows_a_whole_row():
    g = torch.Generator().manual_seed(0)
    mask = random_mask(g, 3, 7, 2)
    assert mask.dtype == torch.bool and mask.shape == (3, 7, 2)
    assert mask.any(dim=-1).all() and (~mask).any(dim=-1).all()
    with pytest.raises(ValueError, match="seq_k"):
        random_mask(g, 3, 1)


def test_an_answer_wrong_for_another_reason_is_not_told_a_probes_mistake():
    # A softmax over the queries also gives a blocked key weight on the probes: it must not be named so.
    def over_the_queries(scores, mask):
        return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-2).nan_to_num()

    result = check_masked_softmax(over_the_queries, verbose=False)
    assert result.status == "incorrect" and result.misconception is None, result.message


def test_a_float16_answer_is_not_told_the_probe_of_scores_float16_cannot_hold():
    def in_half_precision(scores, mask):  # -1e35 is -inf in float16: the finite-fill probes say nothing here
        return torch.softmax(scores.half().masked_fill(~mask, float("-inf")), dim=-1)

    result = check_masked_softmax(in_half_precision, verbose=False)
    assert result.misconception == FULLY_MASKED_NAME, result.message
