"""The exercise checkers of notebooks 01-03 recognise right and wrong answers.

Every wrong implementation below is written the way a learner would write it
(not taken from the checker modules), so each test shows that the checker's
cases really tell that mistake apart from the right answer *and* from the other
named mistakes.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from mhsa_helpers.lessons import LESSONS
from mhsa_helpers.lessons.causal_masking import (
    check_causal_mask,
    check_masked_attention,
    check_masked_softmax,
)
from mhsa_helpers.lessons.causal_masking.exercises import random_mask
from mhsa_helpers.lessons.qkv_by_hand import (
    check_linear_projection,
    check_paper_projection,
    check_scores,
)
from mhsa_helpers.lessons.scaled_attention import check_attention, check_softmax
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


# ------------------------------------------------------------------ notebook 01


def test_paper_projection_correct():
    assert check_paper_projection(lambda x, w: torch.einsum("...si,io->...so", x, w), verbose=False).correct


@pytest.mark.parametrize(
    "learner, name",
    [
        (lambda x, w: x @ w.T, "used PyTorch's x·Wᵀ layout on a paper (d_in, d_out) matrix"),
        (lambda x, w: torch.matmul(w, x), "multiplied in the wrong order (W·E instead of E·W)"),
        (lambda x, w: x * w, "multiplied element by element (*) instead of a matrix product (@)"),
    ],
)
def test_paper_projection_mistakes(learner, name):
    result = assert_named(check_paper_projection, learner, name)
    # These only run on square inputs: the crash on rectangular ones is reported too.
    assert "On rectangular inputs your function raised" in result.message


def test_paper_projection_unknown_mistake_is_incorrect():
    result = check_paper_projection(lambda x, w: x @ w + 1.0, verbose=False)
    assert result.status == "incorrect"
    assert "largest difference 1" in result.message


def test_scores_correct():
    assert check_scores(lambda q, k: torch.einsum("...id,...jd->...ij", q, k), verbose=False).correct


def _k_dot_q(q, k):
    return k @ q.transpose(-2, -1)


@pytest.mark.parametrize(
    "learner, name",
    [
        (lambda q, k: q @ k, "did not transpose K"),
        (lambda q, k: q @ k.transpose(0, 1), "transposed the wrong axes of K"),
        (lambda q, k: q @ k.transpose(1, 2), "transposed the wrong axes of K"),
        (lambda q, k: q @ k.permute(*range(k.ndim - 1, -1, -1)), "transposed the wrong axes of K"),
        (_k_dot_q, "computed K·Qᵀ instead of Q·Kᵀ (rows are keys, not queries)"),
        (lambda q, k: q.transpose(-2, -1) @ k, "computed Qᵀ·K (a d_k × d_k matrix, not seq_q × seq_k)"),
        (lambda q, k: q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, "already scaled the scores by 1/√d_k"),
    ],
)
def test_scores_mistakes(learner, name):
    assert_named(check_scores, learner, name)


@pytest.mark.filterwarnings("ignore:The use of `x.T`")
def test_scores_k_dot_T_is_named_as_wrong_axes():
    # `.T` on a batched tensor reverses all axes (deprecated, warns): right in 2-D only.
    assert_named(check_scores, lambda q, k: q @ k.T, "transposed the wrong axes of K")


def test_linear_projection_correct():
    def by_rows(c, w):
        # one output feature per row of w: a dot product of each word's features with that row
        return torch.stack([(c * row).sum(-1) for row in w], dim=-1)

    assert check_linear_projection(by_rows, verbose=False).correct


@pytest.mark.parametrize(
    "learner, name",
    [
        (lambda c, w: c @ w, "used a (d_out, d_in) matrix as if it were (d_in, d_out): C·W instead of C·Wᵀ"),
        (lambda c, w: w @ c.transpose(-2, -1), "computed W·Cᵀ (the transposed result, one column per word)"),
    ],
)
def test_linear_projection_mistakes(learner, name):
    assert_named(check_linear_projection, learner, name)


def test_seed_001_output_projection_is_what_the_checker_expects():
    # Seed 001 prints W_O as 3x6 and concatenates two 3x3 heads into C (3x6):
    # O = C @ W_O cannot be computed, O = C @ W_O.T can (3x3).
    c = torch.ones(3, 6)
    w_o = torch.ones(3, 6)
    with pytest.raises(RuntimeError):
        c @ w_o
    assert check_linear_projection(lambda c, w: c @ w.T, verbose=False).correct


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


def test_attention_correct_with_pytorch():
    assert check_attention(F.scaled_dot_product_attention, verbose=False).correct


def test_attention_correct_with_einsum():
    def einsum_attention(q, k, v):
        weights = torch.softmax(torch.einsum("...id,...jd->...ij", q, k) / math.sqrt(q.shape[-1]), dim=-1)
        return torch.einsum("...ij,...jd->...id", weights, v)

    assert check_attention(einsum_attention, verbose=False).correct


def attention_with(*, divide=None, dim=-1, transpose_k=lambda k: k.transpose(-2, -1)):
    """A learner's attention with one thing changed."""

    def attention(q, k, v):
        scores = q @ transpose_k(k)
        scores = scores / math.sqrt(q.shape[-1]) if divide is None else divide(scores, q, v)
        return F.softmax(scores, dim=dim) @ v

    return attention


@pytest.mark.parametrize(
    "learner, name",
    [
        (attention_with(divide=lambda s, q, v: s / q.size(-1)), "scaled by d_k instead of √d_k"),
        (attention_with(divide=lambda s, q, v: s), "no scaling"),
        (
            attention_with(divide=lambda s, q, v: s / v.size(-1) ** 0.5),
            "scaled by √d_v (the value width) instead of √d_k",
        ),
        (attention_with(divide=lambda s, q, v: s * q.size(-1) ** 0.5), "multiplied by √d_k instead of dividing"),
        (attention_with(dim=-2), "softmax over the wrong dimension"),
        (attention_with(dim=0), "softmax over the wrong dimension"),
        (attention_with(dim=1), "softmax over the wrong dimension"),
        (attention_with(transpose_k=lambda k: k), "did not transpose K"),
        (attention_with(transpose_k=lambda k: k.transpose(0, 1)), "transposed the wrong axes of K"),
        (attention_with(transpose_k=lambda k: k.transpose(1, 2)), "transposed the wrong axes of K"),
        (
            attention_with(transpose_k=lambda k: k.permute(*range(k.ndim - 1, -1, -1))),
            "transposed the wrong axes of K",
        ),
        (
            lambda q, k, v: torch.softmax(q @ k.mT / math.sqrt(q.shape[-1]) @ v, dim=-1),
            "applied the softmax after multiplying by V",
        ),
    ],
)
def test_attention_mistakes(learner, name):
    assert_named(check_attention, learner, name)


def test_attention_crash_that_matches_nothing_stays_an_error():
    def crashes_unless_2d(q, k, v):
        if q.ndim != 2:
            raise RuntimeError("only 2-D")
        return F.scaled_dot_product_attention(q, k, v)

    result = check_attention(crashes_unless_2d, verbose=False)
    # correct on the square 2-D case, crashing elsewhere: nothing to name
    assert result.status == "error"
    assert "only 2-D" in result.message


# ------------------------------------------------------------------ notebook 03


def test_causal_mask_correct():
    def by_comparison(n):
        i = torch.arange(n)
        return i[:, None] >= i[None, :]

    assert check_causal_mask(by_comparison, verbose=False).correct


@pytest.mark.parametrize(
    "learner, name",
    [
        # seed 002's mask: 1 above the diagonal = blocked
        (lambda n: torch.triu(torch.ones(n, n), diagonal=1).bool(), "inverted mask polarity (True = blocked)"),
        (lambda n: torch.triu(torch.ones(n, n), diagonal=1), "inverted mask polarity (True = blocked)"),
        (
            lambda n: torch.tril(torch.ones(n, n), diagonal=-1).bool(),
            "blocked the diagonal (a token may attend to itself)",
        ),
        (lambda n: torch.triu(torch.ones(n, n)).bool(), "kept the upper triangle (every token sees the future)"),
        (lambda n: torch.ones(n, n, dtype=torch.bool), "no mask at all (everything may attend)"),
        (lambda n: torch.tril(torch.ones(n, n)), "returned a 0/1 number mask instead of a boolean one"),
    ],
)
def test_causal_mask_mistakes(learner, name):
    assert_named(check_causal_mask, learner, name)


def test_causal_mask_verbose_prints_the_misconception(capsys):
    check_causal_mask(lambda n: torch.tril(torch.ones(n, n)))
    assert "0/1 number mask" in capsys.readouterr().out


def test_masked_attention_correct_with_pytorch():
    def pytorch(q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    assert check_masked_attention(pytorch, verbose=False).correct


def masked_attention_with(*, fill=float("-inf"), invert=False, after_softmax=False, divide=None, dim=-1):
    def attention(q, k, v, mask):
        scores = q @ k.transpose(-2, -1)
        scores = scores / (math.sqrt(q.shape[-1]) if divide is None else divide(q))
        if after_softmax:
            return (torch.softmax(scores, dim=-1) * mask) @ v
        blocked = mask if invert else ~mask
        return torch.softmax(scores.masked_fill(blocked, fill), dim=dim) @ v

    return attention


def _scores_times_mask(q, k, v, mask):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) * mask
    return torch.softmax(scores, dim=-1) @ v


def _ignores_mask(q, k, v, mask):
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ v


@pytest.mark.parametrize(
    "learner, name",
    [
        (masked_attention_with(after_softmax=True), "mask applied after softmax without renormalizing"),
        (masked_attention_with(invert=True), "inverted mask polarity (True = blocked)"),
        (masked_attention_with(fill=0.0), "blocked scores set to 0 instead of -inf"),
        (_scores_times_mask, "blocked scores set to 0 instead of -inf"),
        (_ignores_mask, "the mask was not used"),
        (masked_attention_with(divide=lambda q: q.shape[-1]), "scaled by d_k instead of √d_k"),
        (masked_attention_with(divide=lambda q: 1.0), "no scaling"),
        (masked_attention_with(dim=-2), "softmax over the wrong dimension"),
    ],
)
def test_masked_attention_mistakes(learner, name):
    assert_named(check_masked_attention, learner, name)


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
