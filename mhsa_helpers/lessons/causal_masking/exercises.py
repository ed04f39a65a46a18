"""Exercise checkers for notebook 03 (causal masking): the causal mask, masked
attention, and a masked softmax that survives a fully masked row.

Polarity, as everywhere in the package: a boolean mask, ``True`` = may attend.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from ... import causal_mask, masked_softmax_neg_inf, scaled_dot_product_attention
from ...teaching.checking import Case, CheckResult, Misconception, check_function, random_tensor

__all__ = [
    "FINITE_FILL_HINT",
    "FINITE_FILL_NAME",
    "attention_blocked_key_gets_weight",
    "blocked_key_gets_weight",
    "check_causal_mask",
    "check_masked_attention",
    "check_masked_softmax",
    "random_mask",
]

POLARITY_NAME = "inverted mask polarity (True = blocked)"
POLARITY_HINT = (
    "Your code blocks the keys the mask allows. In this package (and in "
    "torch.nn.functional.scaled_dot_product_attention) True means 'may attend'; nn.MultiheadAttention and "
    "some code marks *blocked* positions with True/1, and such a mask must be inverted with ~mask. "
    "Passed unchanged, a causal model reads the future (notebook 10 runs this bug)."
)
AFTER_SOFTMAX_NAME = "mask applied after softmax without renormalizing"
AFTER_SOFTMAX_HINT = (
    "Your blocked weights are 0 but the rows sum to less than 1: they were zeroed after the softmax "
    "(dividing each row by its new sum would repair it). Simpler: fill blocked *scores* with -inf before "
    "the softmax."
)


FINITE_FILL_NAME = "blocked scores pushed down by a finite number instead of -inf"
FINITE_FILL_HINT = (
    "Your blocked keys still get weight when the visible scores are lower still: a query whose visible keys "
    "score -1e35 puts its weight on a blocked key. Filling with (or adding) a finite number such as -10000, "
    "-1e4 or -1e9 only works while every visible score stays far above it. Fill blocked scores with -inf: "
    "scores.masked_fill(~mask, float('-inf'))."
)

# Probes: tiny inputs, each built so that one mistake shows and the right answer is plain to see.
_FAR_BELOW = -1e35  # far below any finite fill a learner writes, and still a float32 number


def blocked_key_gets_weight(run: Callable[..., Any]) -> bool:
    """A softmax over scores whose visible keys score -1e35 and whose blocked key scores 0: with -inf
    the blocked key gets 0; with any finite fill (or added constant) above -1e35 it takes the weight."""
    scores = torch.tensor([[_FAR_BELOW, _FAR_BELOW, 0.0]], dtype=torch.float64)
    weights = run(scores, torch.tensor([[True, True, False]]))
    return bool(torch.as_tensor(weights).double()[0, 2] > 0.5)


def attention_blocked_key_gets_weight(run: Callable[..., Any]) -> bool:
    """The same probe through attention: d_k = 1, so the scores are q * k; the blocked key's value is 100."""
    q = torch.tensor([[1e17]], dtype=torch.float64)
    k = torch.tensor([[-1e18], [-1e18], [0.0]], dtype=torch.float64)
    v = torch.tensor([[1.0], [1.0], [100.0]], dtype=torch.float64)
    out = run(q, k, v, torch.tensor([[True, True, False]]))
    return bool(torch.as_tensor(out).double()[0, 0] > 50.0)


# ---------------------------------------------------------------- causal mask

NUMBER_MASK_NAME = "returned a 0/1 number mask instead of a boolean one"


def _as_number_mask(make_mask: Callable[[int], torch.Tensor]) -> Callable[[int], torch.Tensor]:
    def number_mask(n: int) -> torch.Tensor:
        # Number answers (int or float) are compared by value, so float32 stands for all of them.
        return make_mask(n).to(torch.float32)

    return number_mask


def check_causal_mask(learner: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    """Exercise: ``learner(seq_len)`` must return the boolean ``(seq_len, seq_len)`` causal
    mask, ``True`` where query ``i`` may attend to key ``j`` (``j <= i``)."""
    # 17 tokens: longer than a fixed buffer such as torch.tril(torch.ones(8, 8))[:n, :n] or (16, 16).
    cases = [Case((n,), description=f"seq_len={n}") for n in (1, 3, 17)]

    def ones(n: int) -> torch.Tensor:
        return torch.ones(n, n, dtype=torch.bool)

    mask_mistakes = [
        Misconception(POLARITY_NAME, lambda n: ~causal_mask(n), POLARITY_HINT),
        Misconception(
            "blocked the diagonal (a token may attend to itself)",
            lambda n: ones(n).tril(diagonal=-1),
            "Position i may see every j <= i, itself included: torch.tril keeps the diagonal by "
            "default (diagonal=0). Without it the first token would have nothing to attend to.",
        ),
        Misconception(
            "kept the upper triangle (every token sees the future)",
            lambda n: ones(n).triu(),
            "Row i is the query, column j the key; a causal query sees the past, j <= i, which is the "
            "lower triangle: torch.tril.",
        ),
        Misconception(
            "no mask at all (everything may attend)",
            ones,
            "A causal mask blocks every key after the query: keep only the lower triangle.",
        ),
        Misconception(
            "off by one: each token also sees the next one (tril(diagonal=1))",
            lambda n: ones(n).tril(diagonal=1),
            "Your mask keeps one diagonal above the main one, so token i sees token i + 1: the future leaks "
            "in. torch.tril(..., diagonal=0), the default, keeps j <= i.",
        ),
    ]
    misconceptions = [
        Misconception(
            "returned an additive 0/-inf float mask instead of a boolean one",
            lambda n: torch.zeros(n, n).masked_fill(~causal_mask(n), float("-inf")),
            "Your mask holds 0 where a key is visible and -inf where it is blocked: a mask to *add* to the "
            "scores. This exercise asks for the boolean form, True = may attend (torch.tril of a bool tensor); "
            "the two are not interchangeable (PyTorch adds a float mask and selects with a bool one).",
        ),
        *mask_mistakes,
        # The same mistakes built from torch.ones(n, n) without .bool() (a common way to build the mask):
        # a bool answer never matches a number one, so each is listed in number form too.
        *[Misconception(m.name, _as_number_mask(m.implementation), m.hint) for m in mask_mistakes],  # type: ignore[arg-type]  # each has one
        Misconception(
            NUMBER_MASK_NAME,
            _as_number_mask(causal_mask),
            "Your mask holds the right 0/1 numbers, but the package's masks are boolean, True = may attend; "
            "a number mask is easily read with the opposite polarity. Build it with dtype=torch.bool or "
            "call .bool().",
        ),
    ]
    return check_function(
        "causal mask", learner, causal_mask, cases, misconceptions, shortcuts=("causal_mask",), verbose=verbose
    )


# ---------------------------------------------------------------- masked attention


def random_mask(generator: torch.Generator, *shape: int) -> torch.Tensor:
    """Random boolean mask ``(..., seq_q, seq_k)`` in which every row has at least one
    ``True`` and at least one ``False`` (so neither the mask nor its inverse blocks a whole row)."""
    if shape[-1] < 2:
        raise ValueError(f"shape[-1] (seq_k) must be >= 2, got shape {shape}")
    mask = torch.rand(*shape, generator=generator) < 0.5
    rows = mask.reshape(-1, shape[-1])
    for row in rows:
        picks = torch.randperm(shape[-1], generator=generator)[:2]
        row[picks[0]] = True
        row[picks[1]] = False
    return rows.reshape(shape)


def _masked_attention_cases() -> list:
    g = torch.Generator().manual_seed(601)
    lengths = torch.tensor([3, 5])
    padding = (torch.arange(6)[None, :] < lengths[:, None])[:, None, :]  # (2, 1, 6): keys < length
    return [
        Case(
            (random_tensor(g, 4, 4), random_tensor(g, 5, 4), random_tensor(g, 5, 3), random_mask(g, 4, 5)),
            description="q (4, 4), k (5, 4), v (5, 3), mask (4, 5)",
        ),
        Case(
            (random_tensor(g, 2, 6, 9), random_tensor(g, 2, 6, 9), random_tensor(g, 2, 6, 2), padding),
            description="batch with a padding mask (2, 1, 6) for lengths 3 and 5",
        ),
        Case(
            (
                random_tensor(g, 2, 2, 5, 16),
                random_tensor(g, 2, 2, 5, 16),
                random_tensor(g, 2, 2, 5, 8),
                random_mask(g, 2, 2, 5, 5),
            ),
            description="batch and heads: q, k (2, 2, 5, 16), v (2, 2, 5, 8), mask (2, 2, 5, 5)",
        ),
        # d_k = 1, so the scores are q * k: query 0's visible keys score near -24000 while a blocked key
        # scores -9000. Only -inf blocks it; a fill (or an added constant) of -10000 or -1e4 does not.
        Case(
            (
                torch.tensor([[100.0], [1.0]], dtype=torch.float64),
                torch.tensor([[-240.0], [-250.0], [-90.0], [-300.0]], dtype=torch.float64),
                random_tensor(g, 4, 2),
                torch.tensor([[True, True, False, True], [True, False, True, True]]),
            ),
            description="scores far apart: visible keys near -24000, a blocked key at -9000",
        ),
    ]


def _scores(q: torch.Tensor, k: torch.Tensor, divide_by: float) -> torch.Tensor:
    return q @ k.transpose(-2, -1) / divide_by


def check_masked_attention(learner: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    """Exercise: ``learner(q, k, v, mask)`` must return ``softmax(q kᵀ / √d_k, blocked -> -inf) v``
    of shape ``(..., seq_q, d_v)``; ``mask`` is boolean, ``True`` = may attend, broadcastable to
    ``(..., seq_q, seq_k)``. The cases never block a whole row."""
    cases = _masked_attention_cases()

    def masked(q, k, v, mask, *, divide_by=None, fill=float("-inf"), dim=-1):
        divide_by = math.sqrt(q.shape[-1]) if divide_by is None else divide_by
        s = _scores(q, k, divide_by).masked_fill(~mask, fill)
        return torch.softmax(s, dim=dim) @ v

    misconceptions = [
        Misconception(
            AFTER_SOFTMAX_NAME,
            lambda q, k, v, mask: (torch.softmax(_scores(q, k, math.sqrt(q.shape[-1])), dim=-1) * mask) @ v,
            AFTER_SOFTMAX_HINT,
        ),
        Misconception(POLARITY_NAME, lambda q, k, v, mask: masked(q, k, v, ~mask), POLARITY_HINT),
        Misconception(
            "blocked scores set to 0 instead of -inf",
            lambda q, k, v, mask: masked(q, k, v, mask, fill=0.0),
            "A score of 0 still gets weight exp(0) = 1 relative to the others; only -inf gives exp(-inf) = 0. "
            "(Multiplying the scores by a 0/1 mask makes the same mistake.)",
        ),
        Misconception(
            "the mask was not used",
            lambda q, k, v, mask: scaled_dot_product_attention(q, k, v),
            "Fill the blocked scores with -inf before the softmax: scores.masked_fill(~mask, float('-inf')).",
        ),
        Misconception(
            "scaled by d_k instead of √d_k",
            lambda q, k, v, mask: masked(q, k, v, mask, divide_by=q.shape[-1]),
            "Divide the scores by √d_k, not d_k.",
        ),
        Misconception(
            "no scaling",
            lambda q, k, v, mask: masked(q, k, v, mask, divide_by=1.0),
            "Divide the scores by √d_k (d_k = q.shape[-1]) before masking and the softmax.",
        ),
        Misconception(
            "softmax over the wrong dimension",
            lambda q, k, v, mask: masked(q, k, v, mask, dim=-2),
            "Your weights sum to 1 down each key's column (dim=-2). Each query's row is normalised over the "
            "keys: softmax(..., dim=-1).",
        ),
        Misconception(
            "softmax over the wrong dimension",
            lambda q, k, v, mask: masked(q, k, v, mask, dim=0),
            "Your weights sum to 1 over the first axis (dim=0, the batch when there is one). Each query's row "
            "is normalised over the keys: softmax(..., dim=-1).",
        ),
        Misconception(
            "mask added after the softmax",
            lambda q, k, v, mask: (
                (
                    torch.softmax(_scores(q, k, math.sqrt(q.shape[-1])), dim=-1)
                    + torch.zeros(mask.shape, dtype=q.dtype).masked_fill(~mask, -1e9)
                )
                @ v
            ),
            "Your weights were changed after the softmax (softmax(QKᵀ/√d_k)V + M, the mask added too late): "
            "the mask must change the *scores*, before the softmax: softmax(scores.masked_fill(~mask, -inf)).",
        ),
    ]
    misconceptions.append(
        Misconception(FINITE_FILL_NAME, None, FINITE_FILL_HINT, detect=attention_blocked_key_gets_weight)
    )
    return check_function(
        "masked attention",
        learner,
        lambda q, k, v, mask: scaled_dot_product_attention(q, k, v, mask),
        cases,
        misconceptions,
        shortcuts=("scaled_dot_product_attention",),
        verbose=verbose,
    )


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
