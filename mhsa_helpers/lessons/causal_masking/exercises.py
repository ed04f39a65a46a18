"""Exercise checkers for notebook 03 (causal masking): a masked softmax that survives a fully masked
row (a debugging exercise), a prediction of what a cached query sees, the causal mask with an offset
for cached queries, and causal attention through the learner's own attention of notebook 02.

Polarity, as everywhere in the package: a boolean mask, ``True`` = may attend.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, cast

import torch

from ... import causal_mask, masked_softmax_neg_inf, scaled_dot_product_attention
from ...teaching.checking import Case, CheckResult, Misconception, check_function, random_tensor
from ...teaching.gradients import compare_with_gradients
from ...teaching.misconceptions import (
    AFTER_SOFTMAX_HINT,
    AFTER_SOFTMAX_NAME,
    FINITE_FILL_HINT,
    FINITE_FILL_NAME,
    POLARITY_HINT,
    POLARITY_NAME,
    blocked_key_gets_weight,
    random_mask,
)

__all__ = [
    "causal_attention",
    "check_cache_prediction",
    "check_cached_causal_mask",
    "check_causal_attention",
    "check_masked_softmax",
]

# ---------------------------------------------------------------- predict: cached queries


def first_query_keys() -> int:
    """How many keys the first of 3 new queries may see after 5 cached tokens (8 keys in all)."""
    return int(causal_mask(3, 8)[0].sum())


def check_cache_prediction(learner: Callable[[], Any], *, verbose: bool = True) -> CheckResult:
    """Prediction: ``learner()`` returns how many keys the *first* of 3 new queries may attend to when
    5 earlier tokens are cached (8 keys: the 5 cached ones and the 3 new ones)."""
    misconceptions = [
        Misconception(
            "the first new query is the first word (top-left aligned)",
            lambda: 1,
            "Row 0 of a square causal mask sees one key, but this query is not the sentence's first word: 5 "
            "tokens came before it. It sits at position 5 and sees keys 0 to 5.",
        ),
        Misconception(
            "a cached query sees every key",
            lambda: 8,
            "The cache holds the *past*; the 3 new tokens are in the keys too, and the first new query must not "
            "see the two that come after it.",
        ),
        Misconception(
            "the query does not see itself",
            lambda: 5,
            "A query sees the past *and itself*: the 5 cached keys plus its own.",
        ),
        Misconception(
            "the new queries see only the new keys",
            lambda: 3,
            "The cache is kept so that new tokens can attend to the earlier ones: the first new query sees the 5 "
            "cached keys and itself.",
        ),
    ]
    return check_function(
        "predict: keys seen by a cached query",
        learner,
        first_query_keys,
        [Case((), description="3 new queries after 5 cached tokens")],
        misconceptions,
        verbose=verbose,
    )


# ---------------------------------------------------------------- the causal mask with an offset

NUMBER_MASK_NAME = "returned a 0/1 number mask instead of a boolean one"
TOP_LEFT_NAME = "top-left aligned: no offset for the cached keys"
TOP_LEFT_HINT = (
    "With seq_q < seq_k the queries are the *last* seq_q positions: query i sits at position seq_k - seq_q + i "
    "and sees keys j <= seq_k - seq_q + i. A plain tril(ones(seq_q, seq_k)) aligns the mask to the top-left "
    "corner instead, as if the queries were the first words (PyTorch's F.scaled_dot_product_attention(..., "
    "is_causal=True) does the same). Shift the diagonal: tril(diagonal=seq_k - seq_q)."
)
WRONG_SIGN_NAME = "offset with the wrong sign"
WRONG_SIGN_HINT = (
    "The diagonal moves *up* by the number of cached keys: tril(diagonal=seq_k - seq_q), a positive offset. "
    "With seq_q - seq_k the early queries see nothing at all."
)
FUTURE_NAME = "an earlier output changes when a later token changes (the future leaks in)"
FUTURE_HINT = (
    "Changing the last key and value moved the output of an earlier query: that query can see the future. Build "
    "the mask from positions: query i sits at seq_k - seq_q + i and may see keys j <= that position."
)


def _as_number_mask(make_mask: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    def number_mask(*sizes: int) -> torch.Tensor:
        # Number answers (int or float) are compared by value, so float32 stands for all of them.
        return make_mask(*sizes).to(torch.float32)

    return number_mask


def _tril(seq_q: int, seq_k: int, diagonal: int) -> torch.Tensor:
    return torch.ones(seq_q, seq_k, dtype=torch.bool).tril(diagonal=diagonal)


def _offset_mistakes() -> list[Misconception]:
    """Wrong ``(seq_q, seq_k)`` causal masks, as functions of the two lengths."""
    return [
        Misconception(TOP_LEFT_NAME, lambda q, k: _tril(q, k, 0), TOP_LEFT_HINT),
        Misconception(WRONG_SIGN_NAME, lambda q, k: _tril(q, k, q - k), WRONG_SIGN_HINT),
        Misconception(POLARITY_NAME, lambda q, k: ~causal_mask(q, k), POLARITY_HINT),
        Misconception(
            "blocked the diagonal (a token may attend to itself)",
            lambda q, k: _tril(q, k, k - q - 1),
            "Query i may see every key up to its own position, itself included: tril(diagonal=seq_k - seq_q), "
            "without the - 1. Without it the first word has nothing to attend to.",
        ),
        Misconception(
            "off by one: each token also sees the next one",
            lambda q, k: _tril(q, k, k - q + 1),
            "Your mask keeps one diagonal too many, so a query sees the token after it: tril(diagonal=seq_k - seq_q).",
        ),
        Misconception(
            "kept the upper triangle (every token sees the future)",
            lambda q, k: torch.ones(q, k, dtype=torch.bool).triu(k - q),
            "Row i is the query, column j the key; a causal query sees the past, the lower triangle: torch.tril.",
        ),
        Misconception(
            "no mask at all (everything may attend)",
            lambda q, k: torch.ones(q, k, dtype=torch.bool),
            "A causal mask blocks every key after the query's own position.",
        ),
    ]


def check_cached_causal_mask(learner: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    """Exercise: ``learner(seq_q, seq_k)`` with ``seq_q <= seq_k`` must return the boolean ``(seq_q, seq_k)``
    causal mask of ``seq_q`` queries that are the *last* ``seq_q`` of ``seq_k`` positions (bottom-right
    aligned): ``True`` where key ``j <= seq_k - seq_q + i``. Square masks, one query after a cache, and
    lengths past 16 (longer than a fixed buffer) are checked."""
    sizes = [(1, 1), (3, 3), (17, 17), (1, 7), (3, 8), (5, 17), (4, 6)]
    cases = [Case(size, description=f"seq_q={size[0]}, seq_k={size[1]}") for size in sizes]
    mistakes = _offset_mistakes()
    misconceptions = [
        *mistakes,
        Misconception(
            "rows and columns swapped: (seq_k, seq_q)",
            lambda q, k: _tril(k, q, q - k),
            "Rows are queries and columns keys: the mask has shape (seq_q, seq_k).",
        ),
        Misconception(
            "returned an additive 0/-inf float mask instead of a boolean one",
            lambda q, k: torch.zeros(q, k).masked_fill(~causal_mask(q, k), float("-inf")),
            "Your mask holds 0 where a key is visible and -inf where it is blocked: a mask to *add* to the "
            "scores. This exercise asks for the boolean form, True = may attend.",
        ),
        # The same mistakes built from torch.ones without .bool(): a bool answer never matches a number one.
        *[
            Misconception(m.name, _as_number_mask(cast(Callable[..., torch.Tensor], m.implementation)), m.hint)
            for m in mistakes
        ],
        Misconception(
            NUMBER_MASK_NAME,
            _as_number_mask(causal_mask),
            "Your mask holds the right 0/1 numbers, but the package's masks are boolean, True = may attend; "
            "build it with dtype=torch.bool or call .bool().",
        ),
    ]
    return check_function(
        "causal mask with an offset",
        learner,
        causal_mask,
        cases,
        misconceptions,
        shortcuts=("causal_mask",),
        verbose=verbose,
    )


# ---------------------------------------------------------------- causal attention through the learner's own


def _future_leaks(run: Callable[..., Any]) -> bool:
    """Change the last key and value: the output of every query before the last position must not move."""
    g = torch.Generator().manual_seed(811)
    for seq_q, seq_k in ((5, 5), (3, 6)):
        q, k, v = (random_tensor(g, seq, 4) for seq in (seq_q, seq_k, seq_k))
        k2, v2 = k.clone(), v.clone()
        k2[-1], v2[-1] = random_tensor(g, 4) + 3.0, random_tensor(g, 4) + 3.0
        before, after = (torch.as_tensor(run(q, keys, values)[0]) for keys, values in ((k, v), (k2, v2)))
        # Only the last query sits at the last position; every other one comes before it.
        if not torch.equal(before[:-1], after[:-1]):
            return True
    return False


CAUSAL_OUTPUTS = ("output",)
CAUSAL_INPUTS = ("q", "k", "v")


def _causal_cases() -> list:
    g = torch.Generator().manual_seed(821)

    def qkv(*shapes: tuple) -> tuple:
        return tuple(random_tensor(g, *shape) for shape in shapes)

    return [
        Case(qkv((5, 4), (5, 4), (5, 3)), description="no cache: q, k (5, 4), v (5, 3)"),
        Case(
            qkv((2, 3, 7, 8), (2, 3, 7, 8), (2, 3, 7, 2)),
            description="batch and heads: q, k (2, 3, 7, 8), v (2, 3, 7, 2)",
        ),
        Case(qkv((3, 4), (8, 4), (8, 4)), description="3 new queries after 5 cached tokens: q (3, 4), k, v (8, 4)"),
        Case(
            qkv((2, 3, 1, 16), (2, 3, 17, 16), (2, 3, 17, 5)),
            description="decoding one token after 16 cached: q (2, 3, 1, 16), k (2, 3, 17, 16), v (2, 3, 17, 5)",
        ),
        Case(qkv((1, 6), (1, 6), (1, 6)), description="one token: q, k, v (1, 6)"),
    ]


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The package's causal attention, bottom-right aligned: ``q (..., seq_q, d_k)``, ``k (..., seq_k, d_k)``,
    ``v (..., seq_k, d_v)`` -> ``(..., seq_q, d_v)``."""
    return cast(torch.Tensor, scaled_dot_product_attention(q, k, v, is_causal=True))


def _with_mask(make_mask: Callable[[int, int], torch.Tensor], guarded: bool) -> Callable[..., torch.Tensor]:
    def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        mask = make_mask(q.shape[-2], k.shape[-2])
        if guarded:  # the package's attention: a fully masked row gives zeros
            return cast(torch.Tensor, scaled_dot_product_attention(q, k, v, mask))
        scores = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~mask, float("-inf"))
        return torch.softmax(scores, dim=-1) @ v  # plain -inf: a fully masked row gives NaN

    return attention


def check_causal_attention(learner: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    """Exercise: ``learner(q, k, v)`` must return causal attention with the queries aligned to the *last*
    keys (query i at position seq_k - seq_q + i), like the package's
    ``scaled_dot_product_attention(q, k, v, is_causal=True)``: without a cache, with cached keys, when
    decoding one token, with batch and head axes. Values and the gradients reaching q, k and v are compared,
    and a wrong answer that lets an earlier output see a later token is named as such."""
    misconceptions = [
        Misconception(m.name, _with_mask(cast(Callable[[int, int], torch.Tensor], m.implementation), guarded), m.hint)
        for m in _offset_mistakes()
        for guarded in (True, False)
    ]
    misconceptions.append(Misconception(FUTURE_NAME, None, FUTURE_HINT, detect=_future_leaks))
    return compare_with_gradients(
        "causal attention with a cache",
        learner,
        causal_attention,
        _causal_cases(),
        misconceptions,
        CAUSAL_OUTPUTS,
        CAUSAL_INPUTS,
        verbose=verbose,
    )


# ---------------------------------------------------------------- masked attention


# ---------------------------------------------------------------- masked softmax


def _masked_softmax_cases() -> list:
    g = torch.Generator().manual_seed(701)
    one_row = random_mask(g, 4, 5)
    one_row[2] = False  # a query with nothing to attend to
    # Left padding with a causal mask: sequence 0 starts with two pad tokens, so its
    # first two queries see only padding -- fully masked rows that occur in practice.
    causal = torch.ones(4, 4, dtype=torch.bool).tril()
    real = torch.tensor([[False, False, True, True], [True, True, True, True]])
    left_padded = causal[None] & real[:, None, :]
    # Scores far apart: exp overflows without the max subtracted, and a query whose visible keys score
    # near -24000 while a blocked key scores -9000 defeats "add -10000 to blocked scores".
    wide = torch.tensor(
        [[1000.0, 2.0, -3.0, 1.0], [-24000.0, -25000.0, -9000.0, -30000.0], [0.5, 800.0, -1.0, 3.0]],
        dtype=torch.float64,
    )
    wide_mask = torch.ones(3, 4, dtype=torch.bool).tril()
    return [
        Case((random_tensor(g, 4, 5, scale=2.0), one_row), description="scores (4, 5), row 2 fully masked"),
        Case((random_tensor(g, 2, 4, 4, scale=2.0), left_padded), description="left padding + causal (2, 4, 4)"),
        Case(
            (random_tensor(g, 2, 3, 6, scale=2.0), random_mask(g, 2, 3, 6)),
            description="scores (2, 3, 6), no fully masked row",
        ),
        Case((wide, wide_mask), description="scores (3, 4) far apart: near +1000 and a row near -24000"),
    ]


def check_masked_softmax(learner: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    """Exercise: ``learner(scores, mask)`` must return the softmax of ``scores (..., seq_q, seq_k)``
    over the keys that ``mask`` allows (``True`` = may attend), zeros elsewhere, and a row of
    zeros -- never NaN -- for a query whose keys are all blocked."""
    cases = _masked_softmax_cases()

    def fill_then_softmax(scores, mask, fill=float("-inf")):
        return torch.softmax(scores.masked_fill(~mask, fill), dim=-1)

    def no_max(scores, mask):
        e = torch.exp(scores) * mask
        return e / e.sum(dim=-1, keepdim=True)

    def renormalised(scores, mask):
        weights = torch.softmax(scores, dim=-1) * mask
        return weights / weights.sum(dim=-1, keepdim=True)

    def global_row_max(scores, mask):
        weights = torch.exp(scores - scores.amax(dim=-1, keepdim=True)) * mask
        total = weights.sum(dim=-1, keepdim=True)
        return weights / torch.where(total == 0, torch.ones_like(total), total)

    def clamped_max(scores, mask):
        filled = scores.masked_fill(~mask, float("-inf"))
        weights = torch.exp(filled - filled.amax(dim=-1, keepdim=True).clamp_min(0.0))
        total = weights.sum(dim=-1, keepdim=True)
        return weights / torch.where(total == 0, torch.ones_like(total), total)

    misconceptions = [
        Misconception(
            "a fully masked row gives NaN (softmax of a row of -inf)",
            fill_then_softmax,
            "When every score in a row is -inf, its max is -inf too, and -inf - (-inf) is NaN; renormalising "
            "after the softmax divides 0 by 0 instead. Guard that row: subtract 0 instead of an infinite max "
            "(or divide by 1 where the row sum is 0), so it comes out as zeros.",
        ),
        Misconception(
            "a fully masked row gives NaN (softmax of a row of -inf)",
            renormalised,
            "Your fully masked row is NaN: renormalising after the softmax divides its sum, 0, by 0. Guard that "
            "row (divide by 1 where the sum is 0), so it comes out as zeros.",
        ),
        Misconception(
            MAX_CLAMPED_NAME,
            clamped_max,
            MAX_CLAMPED_HINT,
            detect=_visible_row_far_below_zero_fails,
        ),
        Misconception(
            "blocked scores reach exp before the mask removes them",
            global_row_max,
            "Your row is all zeros for the query whose visible keys score near -24000 while a blocked key scores "
            "-9000: the blocked score took part in exp (or in the row's max) before the mask removed it, and "
            "exp left the range of floating-point numbers (overflow to inf, or underflow of every visible key "
            "to 0). Fill blocked scores with -inf *before* the max and the exp.",
            detect=_blocked_score_reaches_exp,
        ),
        Misconception(
            "used a large negative number instead of -inf (a fully masked row becomes uniform)",
            lambda scores, mask: fill_then_softmax(scores, mask, -1e9),
            "Filling with -1e9 hides the NaN but gives a query with nothing to see equal weight on every "
            "blocked key -- it attends to padding. Use -inf and guard the fully masked row so it is all zeros.",
        ),
        Misconception(
            AFTER_SOFTMAX_NAME,
            lambda scores, mask: torch.softmax(scores, dim=-1) * mask,
            AFTER_SOFTMAX_HINT,
        ),
        Misconception(POLARITY_NAME, lambda scores, mask: masked_softmax_neg_inf(scores, ~mask), POLARITY_HINT),
        Misconception(POLARITY_NAME, lambda scores, mask: fill_then_softmax(scores, ~mask), POLARITY_HINT),
        Misconception(
            "blocked scores set to 0 instead of -inf",
            lambda scores, mask: fill_then_softmax(scores, mask, 0.0),
            "A blocked score of 0 still gets weight; only -inf gives exp(-inf) = 0.",
        ),
        Misconception(
            "did not subtract the max: exp overflows to inf and gives NaN",
            no_max,
            "exp(1000) is inf, and inf / inf is NaN: on the row near +1000 your weights are NaN. Subtract each "
            "row's largest visible score before exp (torch.softmax does it for you).",
        ),
        Misconception(
            "blocked scores pushed down by adding -10000 instead of -inf",
            lambda scores, mask: torch.softmax(scores - 10_000.0 * (~mask), dim=-1) * mask.any(-1, keepdim=True),
            "Adding -10000 works only while every visible score is far above the blocked ones: the query whose "
            "visible keys score near -24000 still puts its weight on a blocked key at -9000. Fill with -inf.",
        ),
        Misconception(
            "added the boolean mask to the scores",
            lambda scores, mask: torch.softmax(scores + mask, dim=-1),
            "scores + mask adds 1 to every allowed score and 0 to every blocked one: nothing is blocked. "
            "Select with the mask instead: scores.masked_fill(~mask, float('-inf')).",
        ),
        Misconception(
            "multiplied -inf by (1 - mask): 0 × inf is NaN",
            lambda scores, mask: torch.softmax(scores + (1 - mask.to(scores.dtype)) * float("-inf"), dim=-1),
            "(1 - mask) * -inf is -inf where the mask is 0, but 0 × -inf = NaN where it is 1: every allowed "
            "score becomes NaN. Use masked_fill, which never multiplies by infinity.",
        ),
    ]
    misconceptions += [
        # Known by their symptoms, so that close variants are named too.
        Misconception(MAX_CLAMPED_NAME, None, MAX_CLAMPED_HINT, detect=_visible_row_far_below_zero_fails),
        Misconception(FINITE_FILL_NAME, None, FINITE_FILL_HINT, detect=blocked_key_gets_weight),
        Misconception(
            "a fully masked row gives NaN (softmax of a row of -inf)",
            None,
            "Your row for a query whose keys are all blocked is NaN: its max is -inf and -inf - (-inf) is NaN, "
            "or its sum is 0 and 0 / 0 is NaN. Guard that row (subtract 0 where the max is -inf, divide by 1 "
            "where the sum is 0), so it comes out as zeros.",
            detect=_fully_masked_row_is_nan,
        ),
    ]
    return check_function(
        "masked softmax",
        learner,
        masked_softmax_neg_inf,
        cases,
        misconceptions,
        shortcuts=("masked_softmax_neg_inf", "masked_softmax_renormalize"),
        verbose=verbose,
    )


MAX_CLAMPED_NAME = "the row's max clamped at 0 (or a constant), not taken over the visible scores"
MAX_CLAMPED_HINT = (
    "Your row whose visible scores lie near -24000 comes out as zeros (and so does a row of scores near -1000 "
    "with nothing blocked): the max you subtract is not the row's largest visible score (clamp_min(0), or a "
    "fixed number, turns -24000 into 0, and exp(-24000) underflows to 0). Only a fully masked row, whose max "
    "is -inf, needs a replacement: torch.where(row_max == float('-inf'), 0, row_max)."
)


def _visible_row_far_below_zero_fails(run: Callable[..., Any]) -> bool:
    """Nothing blocked, every score near -1000: a max over the visible scores gives a row summing to 1."""
    scores = torch.tensor([[-1000.0, -1001.0, -1002.0, -999.5]], dtype=torch.float64)
    total = torch.as_tensor(run(scores, torch.ones(1, 4, dtype=torch.bool))).double().sum()
    return not bool(torch.isclose(total, torch.tensor(1.0, dtype=torch.float64), atol=1e-3))


def _blocked_score_reaches_exp(run: Callable[..., Any]) -> bool:
    """Visible scores near 0 and one blocked score of 1000: if the blocked score takes part in the max or
    in exp, the visible weights vanish (or become NaN)."""
    scores = torch.tensor([[0.0, 1.0, 1000.0, 2.0]], dtype=torch.float64)
    weights = torch.as_tensor(run(scores, torch.tensor([[True, True, False, True]]))).double()
    visible = weights[0, [0, 1, 3]].sum()
    return not bool(torch.isclose(visible, torch.tensor(1.0, dtype=torch.float64), atol=1e-3))


def _fully_masked_row_is_nan(run: Callable[..., Any]) -> bool:
    scores = torch.tensor([[0.5, -1.0, 2.0], [1.0, 0.0, -1.0]], dtype=torch.float64)
    mask = torch.tensor([[False, False, False], [True, False, True]])
    return bool(torch.isnan(torch.as_tensor(run(scores, mask)).double()[0]).any())
