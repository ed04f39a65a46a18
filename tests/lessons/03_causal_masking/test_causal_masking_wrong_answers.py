"""Wrong answers to notebook 03's exercises (the masked softmax, the causal mask with an offset, causal
attention, the cache prediction), written the way a learner writes them, and answers fitted to the checker:
to the teaching lengths and scores, to float64, to inputs that require grad, or changing PyTorch's global
settings. No checker may accept one; where a name is given, the checker must name that mistake by the second
attempt (and what it then says must contain the listed words). ``test_the_catalogue_is_counted`` prints the
counts.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from checker_table import catalogue_tests
from test_wrong_answers import Wrong

from mhsa_helpers.lessons.causal_masking import (
    check_cache_prediction,
    check_cached_causal_mask,
    check_causal_attention,
    check_masked_softmax,
)
from mhsa_helpers.lessons.causal_masking.exercises import (
    FULLY_MASKED_NAME,
    FUTURE_NAME,
    MAX_CLAMPED_NAME,
    NO_MAX_NAME,
    SELF_BLOCKED_NAME,
    TOP_LEFT_NAME,
)
from mhsa_helpers.teaching.checking import STATE_CHANGED
from mhsa_helpers.teaching.gradients import GRADIENT_NAME
from mhsa_helpers.teaching.misconceptions import FINITE_FILL_NAME, POLARITY_NAME

INF = float("inf")


MASK_16 = torch.ones(16, 16, dtype=torch.bool).tril()
MASK_32 = torch.ones(32, 32, dtype=torch.bool).tril()


def guarded(scores, mask, weights):
    """``weights`` with the rows of queries that see no key set to zeros."""
    return weights * mask.any(dim=-1, keepdim=True)


def masked_softmax_additive(scores, mask):
    return guarded(scores, mask, torch.softmax(scores + (1 - mask.to(scores.dtype)) * -1e9, dim=-1))


def masked_softmax_not_mask_times_minus_1e9(scores, mask):
    return guarded(scores, mask, torch.softmax(scores + ~mask * -1e9, dim=-1))


def masked_softmax_fill_below_everything(scores, mask):
    return guarded(scores, mask, torch.softmax(scores.masked_fill(~mask, scores.min() - 1e4), dim=-1))


def masked_softmax_fill_then_zero(scores, mask):
    return torch.softmax(scores.masked_fill(~mask, -1e9), dim=-1) * mask  # zeroes the blocked weights, and a dead row


def masked_softmax_fill_below_the_checkers_scores(scores, mask):
    return guarded(scores, mask, torch.softmax(scores.masked_fill(~mask, -50_000.0), dim=-1))


def masked_softmax_float64_guard(scores, mask):
    filled = scores.masked_fill(~mask, -INF)
    row_max = filled.amax(dim=-1, keepdim=True)
    exps = torch.exp(filled - torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max)))
    sums = exps.sum(dim=-1, keepdim=True)
    return exps / torch.where(sums == 0, torch.ones(sums.shape, dtype=torch.float64), sums)


def masked_softmax_setting_float64_as_default(scores, mask):
    torch.set_default_dtype(torch.float64)
    return masked_softmax_float64_guard(scores, mask)


def masked_softmax_renormalised_unguarded(scores, mask):
    weights = torch.softmax(scores, dim=-1) * mask
    return weights / weights.sum(dim=-1, keepdim=True)


def masked_softmax_guarded_without_the_max(scores, mask):
    exps = torch.exp(scores).masked_fill(~mask, 0.0)  # "blocked keys get 0, and a row with none divides by 1"
    sums = exps.sum(dim=-1, keepdim=True)
    return exps / torch.where(sums == 0, 1, sums)


def masked_softmax_max_clamped(scores, mask):
    filled = scores.masked_fill(~mask, -INF)
    exps = torch.exp(filled - filled.amax(dim=-1, keepdim=True).clamp_min(0))  # "so that -inf cannot come out"
    sums = exps.sum(dim=-1, keepdim=True)
    return exps / torch.where(sums == 0, torch.ones_like(sums), sums)


MASKED_SOFTMAX = [
    Wrong(
        check_masked_softmax,
        "renormalised without a guard",
        masked_softmax_renormalised_unguarded,
        FULLY_MASKED_NAME,
        ("0, by 0",),
    ),
    Wrong(
        check_masked_softmax,
        "fills with 0",
        lambda s, m: torch.softmax(s.masked_fill(~m, 0.0), dim=-1),
        "blocked scores set to 0 instead of -inf",
    ),
    Wrong(
        check_masked_softmax,
        "zeroes after the softmax",
        lambda s, m: torch.softmax(s, dim=-1) * m,
        "mask applied after softmax without renormalising",
    ),
    Wrong(
        check_masked_softmax,
        "max clamped at 0",
        masked_softmax_max_clamped,
        MAX_CLAMPED_NAME,
    ),
    Wrong(
        check_masked_softmax,
        "guarded, no max subtracted",
        masked_softmax_guarded_without_the_max,
        NO_MAX_NAME,
        ("exp(1000) is inf",),
    ),
    Wrong(
        check_masked_softmax,
        "(1 - mask) * -inf added",
        lambda s, m: torch.softmax(s + (1 - m.to(s.dtype)) * -INF, dim=-1),
        "multiplied -inf by (1 - mask): 0 × inf is NaN",
    ),
    Wrong(
        check_masked_softmax,
        "the boolean mask added",
        lambda s, m: torch.softmax(s + m, dim=-1),
        "added the boolean mask to the scores",
    ),
    Wrong(check_masked_softmax, "(1 - mask) * -1e9 added, rows guarded", masked_softmax_additive, FINITE_FILL_NAME),
    Wrong(check_masked_softmax, "~mask * -1e9 added", masked_softmax_not_mask_times_minus_1e9, FINITE_FILL_NAME),
    Wrong(check_masked_softmax, "scores.min() - 1e4", masked_softmax_fill_below_everything, FINITE_FILL_NAME),
    Wrong(
        check_masked_softmax,
        "-1e9, then weights * mask",
        masked_softmax_fill_then_zero,
        FINITE_FILL_NAME,
        ("zeroing it afterwards",),
    ),
    Wrong(
        check_masked_softmax,
        "-50000, below the checker's scores",
        masked_softmax_fill_below_the_checkers_scores,
        FINITE_FILL_NAME,
    ),
    Wrong(
        check_masked_softmax,
        "a float64 guard",
        masked_softmax_float64_guard,
        None,
        ("returned dtype torch.float64 for torch.float32 inputs",),
    ),
    Wrong(
        check_masked_softmax,
        "float64 as the default dtype",
        masked_softmax_setting_float64_as_default,
        STATE_CHANGED,
        ("changed the default dtype",),
    ),
    Wrong(
        check_masked_softmax,
        "softmax over the queries",
        lambda s, m: torch.softmax(s.masked_fill(~m, -INF), dim=-2).nan_to_num(),
        None,
    ),
    Wrong(
        check_masked_softmax,
        "the handed-out code, rewritten",
        lambda s, m: torch.where(m, float("-inf"), s).softmax(-1),
        None,
        ("still the original",),
    ),
]


def mask_reseeding(seq_q, seq_k):
    torch.manual_seed(1234)
    return torch.ones(seq_q, seq_k, dtype=torch.bool).tril(seq_k - seq_q)


MASK = [
    Wrong(
        check_cached_causal_mask,
        "tril without offset",
        lambda q, k: torch.ones(q, k, dtype=torch.bool).tril(),
        TOP_LEFT_NAME,
    ),
    Wrong(
        check_cached_causal_mask,
        "offset seq_q - seq_k",
        lambda q, k: torch.ones(q, k, dtype=torch.bool).tril(q - k),
        "offset with the wrong sign",
    ),
    Wrong(
        check_cached_causal_mask,
        "True = blocked",
        lambda q, k: torch.ones(q, k, dtype=torch.bool).triu(k - q + 1),
        POLARITY_NAME,
    ),
    Wrong(
        check_cached_causal_mask,
        "diagonal blocked",
        lambda q, k: torch.ones(q, k, dtype=torch.bool).tril(k - q - 1),
        SELF_BLOCKED_NAME,
    ),
    Wrong(
        check_cached_causal_mask,
        "one too many",
        lambda q, k: torch.ones(q, k, dtype=torch.bool).tril(k - q + 1),
        "off by one: each token also sees the next one",
    ),
    Wrong(
        check_cached_causal_mask,
        "all True",
        lambda q, k: torch.ones(q, k, dtype=torch.bool),
        "no mask at all (everything may attend)",
    ),
    Wrong(
        check_cached_causal_mask,
        "upper triangle",
        lambda q, k: torch.ones(q, k, dtype=torch.bool).triu(k - q),
        "kept the upper triangle (every token sees the future)",
    ),
    Wrong(
        check_cached_causal_mask,
        "(seq_k, seq_q)",
        lambda q, k: torch.ones(k, q, dtype=torch.bool).tril(q - k),
        "rows and columns swapped: (seq_k, seq_q)",
    ),
    Wrong(
        check_cached_causal_mask,
        "0/1 float mask",
        lambda q, k: torch.ones(q, k).tril(k - q),
        "returned a 0/1 number mask instead of a boolean one",
    ),
    Wrong(
        check_cached_causal_mask,
        "0/1 float mask, no offset",
        lambda q, k: torch.ones(q, k).tril(),
        TOP_LEFT_NAME,
    ),
    Wrong(
        check_cached_causal_mask,
        "additive 0/-inf mask",
        lambda q, k: torch.zeros(q, k).masked_fill(torch.ones(q, k, dtype=torch.bool).triu(k - q + 1), -INF),
        "returned an additive 0/-inf float mask instead of a boolean one",
    ),
    Wrong(check_cached_causal_mask, "a (16, 16) buffer", lambda q, k: MASK_16[k - q : k, :k]),
    Wrong(
        check_cached_causal_mask,
        "a (32, 32) buffer: longer than every teaching case",
        lambda q, k: MASK_32[k - q : k, :k],
        None,
        ("a case drawn at random for your code",),
    ),
    Wrong(check_cached_causal_mask, "manual_seed(1234)", mask_reseeding, STATE_CHANGED, ("random generator",)),
    Wrong(
        check_cached_causal_mask,
        "positions compared the wrong way",
        lambda q, k: torch.arange(k)[None, :] >= torch.arange(k - q, k)[:, None],
        "kept the upper triangle (every token sees the future)",
    ),
]


def masked(q, k, v, mask):
    scores = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~mask, -INF)
    return torch.softmax(scores, dim=-1) @ v


def causal_mask_of(q, k):
    return torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril(k.shape[-2] - q.shape[-2])


def causal_in_float64(q, k, v):
    bias = torch.zeros(q.shape[-2], k.shape[-2], dtype=torch.float64).masked_fill(~causal_mask_of(q, k), -INF)
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) + bias, dim=-1) @ v


def causal_keeping_the_scores_gradient(q, k, v):
    scores = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~causal_mask_of(q, k), -INF)
    scores.retain_grad()  # left over from looking at the gradients: needs inputs that require grad
    return torch.softmax(scores, dim=-1) @ v


def causal_turning_gradients_off(q, k, v):
    torch.set_grad_enabled(False)  # copied from a set-up cell
    return masked(q, k, v, causal_mask_of(q, k))


def causal_leaking_one_step(q, k, v):
    """Sees one key too many only when there is a cache: no offset mistake of the list, a leak."""
    seq_q, seq_k = q.shape[-2], k.shape[-2]
    extra = 1 if seq_q < seq_k else 0
    return masked(q, k, v, torch.ones(seq_q, seq_k, dtype=torch.bool).tril(seq_k - seq_q + extra))


CAUSAL = [
    Wrong(
        check_causal_attention,
        "PyTorch's is_causal with a cache",
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        TOP_LEFT_NAME,
        ("top-left",),
    ),
    Wrong(
        check_causal_attention,
        "tril without offset",
        lambda q, k, v: masked(q, k, v, torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()),
        TOP_LEFT_NAME,
    ),
    Wrong(
        check_causal_attention,
        "triu mask used as may-attend",
        lambda q, k, v: masked(
            q, k, v, torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).triu(k.shape[-2] - q.shape[-2] + 1)
        ),
        POLARITY_NAME,
    ),
    Wrong(
        check_causal_attention,
        "no mask",
        lambda q, k, v: masked(q, k, v, torch.ones(1, dtype=torch.bool)),
        "no mask at all (everything may attend)",
    ),
    Wrong(check_causal_attention, "leaks one step with a cache", causal_leaking_one_step, FUTURE_NAME, ("the future",)),
    Wrong(
        check_causal_attention,
        "detached",
        lambda q, k, v: masked(
            q, k, v, torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril(k.shape[-2] - q.shape[-2])
        ).detach(),
        GRADIENT_NAME,
        ("no gradient",),
    ),
    Wrong(check_causal_attention, "a float64 additive mask", causal_in_float64, None, ("Double",)),
    Wrong(
        check_causal_attention,
        "retain_grad: needs inputs that require grad",
        causal_keeping_the_scores_gradient,
        None,
        ("under torch.no_grad()", "scores.retain_grad()"),
    ),
    Wrong(
        check_causal_attention,
        "turns gradients off",
        causal_turning_gradients_off,
        STATE_CHANGED,
        ("turned gradients off",),
    ),
]


PREDICTIONS = [
    Wrong(
        check_cache_prediction,
        "row 0 of a square mask",
        lambda: 1,
        "the first new query is the first word (top-left aligned)",
    ),
    Wrong(check_cache_prediction, "everything", lambda: 8, "a cached query sees every key"),
    Wrong(check_cache_prediction, "only the cache", lambda: 5, "the query does not see itself"),
    Wrong(check_cache_prediction, "only the new tokens", lambda: 3, "the new queries see only the new keys"),
    Wrong(check_cache_prediction, "6.5", lambda: 6.5, None, ("too high",)),
    Wrong(check_cache_prediction, "7: one too many", lambda: 7, None, ("too high",)),
]


CATALOGUE = MASKED_SOFTMAX + MASK + CAUSAL + PREDICTIONS


test_no_checker_accepts_a_wrong_answer_and_names_it, test_the_catalogue_is_counted = catalogue_tests(
    CATALOGUE, "notebook 03"
)
