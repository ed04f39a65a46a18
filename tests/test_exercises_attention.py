"""The exercise checkers of notebooks 01-03 recognise right and wrong answers (the softmax and the
masked softmax here; the learner's own attention, its predictions and its causal mask in
``test_build_early_checkers.py``).

Every wrong implementation below is written the way a learner would write it
(not taken from the checker modules), so each test shows that the checker's
cases really tell that mistake apart from the right answer *and* from the other
named mistakes.
"""

from __future__ import annotations

import pytest
import torch

from mhsa_helpers.lessons import LESSONS
from mhsa_helpers.lessons.causal_masking import check_masked_softmax
from mhsa_helpers.lessons.causal_masking.exercises import random_mask
from mhsa_helpers.lessons.scaled_dot_product_attention import check_softmax
from mhsa_helpers.teaching.checking import Case, Misconception, check_function

# Every registered checker (notebooks 04-06 too) treats a stub, a crash and a non-function alike.
ALL_CHECKERS = [checker for lesson in LESSONS for checker in lesson.checkers]


def stub(*args):
    raise NotImplementedError


def crashes(*args):
    raise ZeroDivisionError("learner bug")


@pytest.mark.parametrize("checker", ALL_CHECKERS, ids=lambda c: c.__name__)
def test_stub_is_not_attempted_and_does_not_raise(checker, capsys):
    result = checker(stub)
    assert result.status == "not_attempted"
    assert not result.correct
    assert "not attempted yet" in capsys.readouterr().out


@pytest.mark.parametrize("checker", ALL_CHECKERS, ids=lambda c: c.__name__)
def test_learner_exception_is_reported_not_raised(checker):
    result = checker(crashes, verbose=False)
    assert result.status == "error"
    assert "ZeroDivisionError" in result.message and "learner bug" in result.message


@pytest.mark.parametrize("checker", ALL_CHECKERS, ids=lambda c: c.__name__)
def test_non_function_is_a_type_error(checker):
    with pytest.raises(TypeError, match="learner must be a function"):
        checker("not a function", verbose=False)


def assert_named(checker, learner, name):
    result = checker(learner, verbose=False)
    assert result.status == "misconception", result.message
    assert result.misconception == name, result.message
    assert name in result.message
    return result


# ------------------------------------------------------------------ notebook 02


def test_softmax_correct_with_an_independent_stable_formula():
    def log_sum_exp_softmax(x):
        return torch.exp(x - torch.logsumexp(x, dim=-1, keepdim=True))

    assert check_softmax(log_sum_exp_softmax, verbose=False).correct


def _naive_softmax(x):
    return torch.exp(x) / torch.exp(x).sum(dim=-1, keepdim=True)


def _global_max_softmax(x):
    e = torch.exp(x - x.max())
    return e / e.sum(dim=-1, keepdim=True)


def _whole_sum_softmax(x):
    e = torch.exp(x)
    return e / e.sum()


def _stable_whole_sum_softmax(x):
    e = torch.exp(x - x.max(dim=-1, keepdim=True).values)
    return e / torch.sum(e)


def _no_keepdim_softmax(x):
    e = torch.exp(x - x.max(dim=-1, keepdim=True).values)
    return e / e.sum(dim=-1)


@pytest.mark.parametrize(
    "learner, name",
    [
        (lambda x: torch.softmax(x, dim=-2), "softmax over the wrong dimension"),
        (lambda x: torch.softmax(x, dim=0), "softmax over the wrong dimension"),
        (lambda x: torch.softmax(x, dim=1), "softmax over the wrong dimension"),
        (_naive_softmax, "did not subtract the max: exp overflows to inf and gives NaN"),
        (_global_max_softmax, "subtracted one global max instead of each row's max"),
        (_whole_sum_softmax, "summed over the whole tensor (forgot dim=-1 in the sum)"),
        (_stable_whole_sum_softmax, "summed over the whole tensor (forgot dim=-1 in the sum)"),
        (_no_keepdim_softmax, "summed without keepdim=True (the row sums broadcast along the wrong axis)"),
    ],
)
def test_softmax_mistakes(learner, name):
    assert_named(check_softmax, learner, name)


# ------------------------------------------------------------------ notebook 03


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
            "a fully masked row gives NaN (softmax of a row of -inf)",
        ),
        (_renormalize_without_guard, "a fully masked row gives NaN (softmax of a row of -inf)"),
        (
            lambda s, m: torch.softmax(s.masked_fill(~m, -1e9), dim=-1),
            "used a large negative number instead of -inf (a fully masked row becomes uniform)",
        ),
        (lambda s, m: torch.softmax(s, dim=-1) * m, "mask applied after softmax without renormalizing"),
        (
            lambda s, m: torch.softmax(s.masked_fill(m, float("-inf")), dim=-1),
            "inverted mask polarity (True = blocked)",
        ),
        (_guarded_but_inverted, "inverted mask polarity (True = blocked)"),
        (lambda s, m: torch.softmax(s.masked_fill(~m, 0.0), dim=-1), "blocked scores set to 0 instead of -inf"),
    ],
)
def test_masked_softmax_mistakes(learner, name):
    assert_named(check_masked_softmax, learner, name)


def test_masked_softmax_cases_contain_fully_masked_rows():
    # Otherwise the NaN trap could not be detected: the NaN learner must not pass.
    def nan_learner(s, m):
        return torch.softmax(s.masked_fill(~m, float("-inf")), dim=-1)

    assert not check_masked_softmax(nan_learner, verbose=False).correct


# ------------------------------------------------------------------ shared machinery


def test_random_mask_never_blocks_or_allows_a_whole_row():
    g = torch.Generator().manual_seed(0)
    mask = random_mask(g, 3, 7, 2)
    assert mask.dtype == torch.bool and mask.shape == (3, 7, 2)
    assert mask.any(dim=-1).all() and (~mask).any(dim=-1).all()
    with pytest.raises(ValueError, match="seq_k"):
        random_mask(g, 3, 1)


def test_check_function_names_a_misconception_that_produces_nan():
    cases = [Case((torch.tensor([0.0, 1.0]),))]
    nan_mistake = Misconception("divides by zero", lambda x: x / 0.0 * 0.0, "hint")
    result = check_function("demo", lambda x: x / 0.0 * 0.0, lambda x: x.clone(), cases, [nan_mistake], verbose=False)
    # 0/0 * 0 is NaN, inf * 0 is NaN: without NaN-aware comparison nothing would match.
    assert result.misconception == "divides by zero"


def test_check_function_square_cases_are_only_used_after_a_crash():
    rectangular = [Case((torch.ones(2, 3),))]
    square = [Case((torch.ones(2, 2) * 2,))]
    mistake = Misconception("transposed", lambda x: x.T, "hint")

    def learner(x):
        return x.T  # the shape differs on the rectangular case: wrong, but no crash

    result = check_function(
        "demo", learner, lambda x: x.clone(), rectangular, [mistake], square_cases=square, verbose=False
    )
    assert result.misconception == "transposed"  # named on the ordinary cases
    assert "rectangular" not in result.message
