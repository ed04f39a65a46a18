"""Exercise checkers for notebook 10 (mistakes that circulate): masking the scores the right
way, and the causal mask of a decoding step with a cache. A wrong answer is told what differs
first; the known mistake it matches, among them the ones the notebook's bug zoo shows in real
code, is named when the same mistake comes again (or on ``result.hint()``), and its fix on
``result.reveal()``.

What a fully masked row gives is not asked here: every row of every case keeps at least one key it
may see, as the exercise says (notebook 03 settled that row). Zeroing the weights after the softmax
and renormalising, which section 3 shows equal to masking on ordinary scores, is rejected and named
where floating point breaks it: a blocked key far above the visible ones leaves the row 0/0.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from ...masking import causal_mask
from ...softmax import softmax
from ...teaching.checking import Case, CheckResult, Misconception, check_function, random_tensor
from ...teaching.misconceptions import FINITE_FILL_NAME, POLARITY_NAME, random_mask

__all__ = ["check_decode_mask", "check_masked_weights"]


# ---------------------------------------------------------------- masked weights


def _reference_weights(scores: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    return softmax(scores.masked_fill(~allowed, -math.inf))


def _renormalised(scores: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    kept = softmax(scores) * allowed
    return kept / kept.sum(-1, keepdim=True)


def _without_max(scores: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    e = torch.exp(scores.masked_fill(~allowed, -math.inf))
    return e / e.sum(-1, keepdim=True)


def _extreme_scores(generator: torch.Generator, allowed: torch.Tensor, row: int) -> torch.Tensor:
    """Scores ``allowed.shape`` of a few units, except row ``row``: its visible keys score between -30000 and
    -20000 and its blocked keys between -9500 and -5000, so a blocked key wins unless it is removed outright."""
    scores = random_tensor(generator, *allowed.shape, scale=2.0)
    visible = -torch.empty(allowed.shape[-1], dtype=torch.float64).uniform_(20_000, 30_000, generator=generator)
    blocked = -torch.empty(allowed.shape[-1], dtype=torch.float64).uniform_(5_000, 9_500, generator=generator)
    scores[row] = torch.where(allowed[row], visible, blocked)
    return scores


def _masked_weights_cases() -> list[Case]:
    g = torch.Generator().manual_seed(1001)
    padding = torch.tensor([[True, True, False, True, False]] * 3)
    extreme = random_tensor(g, 4, 4)
    # Row 1: a query whose visible keys score far below a blocked one (adding -10000 is not enough there, and
    # a softmax over every key leaves the visible keys exactly 0). Row 2: scores where exp overflows.
    extreme[1] = torch.tensor([-24_000.0, -25_000.0, -9_000.0, -30_000.0], dtype=torch.float64)
    extreme[2] = torch.tensor([800.0, 790.0, 805.0, 700.0], dtype=torch.float64)
    return [
        Case((random_tensor(g, 2, 4, 4, scale=2.0), causal_mask(4)), description="scores (2, 4, 4), causal mask"),
        Case(
            (random_tensor(g, 2, 3, 5, scale=2.0), causal_mask(3, 5)),
            description="scores (2, 3, 5): 3 new queries after 2 cached keys",
        ),
        Case((random_tensor(g, 3, 5, scale=2.0), padding), description="scores (3, 5), padding mask"),
        Case((extreme, causal_mask(4)), description="scores (4, 4) with a row near -24000 and one near +800"),
        Case((random_tensor(g, 4, 4, scale=200.0), causal_mask(4)), description="scores (4, 4) of size ~200"),
    ]


def _draw_masked_weights(g: torch.Generator) -> list[Case]:
    """Four cases of other sizes (no key axis of 4 or 5, the teaching cases' lengths): a batch of heads with
    cached queries, random masks, and a row of extreme scores whose place moves."""
    k1, k2, k3 = (int(torch.randint(6, 10, (1,), generator=g)) for _ in range(3))
    q1 = int(torch.randint(2, k1, (1,), generator=g))
    row = int(torch.randint(0, 3, (1,), generator=g))
    mask3 = random_mask(g, 3, k3)
    return [
        Case(
            (random_tensor(g, 3, 2, q1, k1, scale=2.0), causal_mask(q1, k1)),
            description=f"scores (3, 2, {q1}, {k1}): {q1} new queries after {k1 - q1} cached keys",
        ),
        Case((random_tensor(g, 2, 7, k2, scale=3.0), random_mask(g, 7, k2)), description=f"scores (2, 7, {k2})"),
        Case((random_tensor(g, 1, 3, k2, scale=2.0), random_mask(g, 3, k2)), description=f"scores (1, 3, {k2})"),
        Case(
            (_extreme_scores(g, mask3, row), mask3),
            description=f"scores (3, {k3}) with row {row} near -25000 and its blocked keys near -7000",
        ),
    ]


def _run_on(run: Callable[..., Any], scores: list[float], allowed: list[bool]) -> torch.Tensor:
    """The learner's weights for one query: ``scores`` and ``allowed`` as (1, seq_k) tensors."""
    weights = run(torch.tensor([scores], dtype=torch.float64), torch.tensor([allowed]))
    return torch.as_tensor(weights).detach().double().reshape(-1)


def _takes_weight_when_far_above(run: Callable[..., Any]) -> bool:
    """A blocked key gets positive weight when the visible keys score -1e35 and it scores 0 (with -inf it gets
    exactly 0; with any finite fill or added constant above -1e35 it wins), while on ordinary scores the mask
    holds (so a mask read the wrong way round, or not used, is not this)."""
    ordinary = _run_on(run, [0.0, 0.0, 0.0], [True, True, False])
    far = _run_on(run, [-1e35, -1e35, 0.0], [True, True, False])
    return bool(ordinary[2] < 0.1 and ordinary[0] > 0.4 and far[2] > 0)


def _reads_mask_inverted(run: Callable[..., Any]) -> bool:
    """Equal scores, only key 0 allowed: a right answer puts all the weight on key 0, an answer that reads
    True as blocked none, sharing it between keys 1 and 2."""
    weights = _run_on(run, [0.0, 0.0, 0.0], [True, False, False])
    return bool(weights[0] < 1e-6 and weights[1] > 0.4)


def _normalised_down_columns(run: Callable[..., Any]) -> bool:
    """Scores (3, 4) with every key allowed: the columns of the weights sum to 1 and the rows do not."""
    scores = torch.tensor([[0.5, -1.0, 2.0, 0.0], [1.5, 0.3, -0.7, 1.0], [-2.0, 0.8, 0.1, 0.4]], dtype=torch.float64)
    weights = torch.as_tensor(run(scores, torch.ones(3, 4, dtype=torch.bool))).detach().double()
    ones = torch.ones(4, dtype=torch.float64)
    return bool(torch.allclose(weights.sum(-2), ones, atol=1e-3) and not torch.allclose(weights.sum(-1), ones[:3]))


_MASK_BEFORE = "Mask the scores before the softmax: softmax(scores.masked_fill(~allowed, float('-inf')), dim=-1)."

MASKED_WEIGHTS_MISCONCEPTIONS = (
    Misconception(
        "mask added after the softmax",
        lambda s, a: softmax(s) + torch.zeros_like(s).masked_fill(~a, -math.inf),
        "The mask was added to the weights, after the softmax, as the copied formula softmax(QKᵀ/√d_k)V + M "
        "has it (section 2): there it removes nothing. The mask must change the scores, before the softmax "
        "shares each row out.",
        fix=_MASK_BEFORE,
        symptom="Your weights are -inf at the blocked keys, and at the other keys they are a softmax over every key.",
    ),
    Misconception(
        "the mask was not used",
        lambda s, a: softmax(s),
        "The weights are a softmax over every key: the mask never reached the scores (a masked copy computed "
        "and not used, say).",
        fix=_MASK_BEFORE,
        symptom="Your weights are the same whatever the mask says.",
    ),
    Misconception(
        "weights zeroed after the softmax, not renormalised",
        lambda s, a: softmax(s) * a,
        "The softmax had already shared each row among all the keys; zeroing the blocked ones afterwards throws "
        "their share away instead of giving it to the visible keys (section 3).",
        fix=_MASK_BEFORE,
        symptom="Your blocked keys get 0, but the rows with a blocked key sum to less than 1.",
    ),
    Misconception(
        "weights zeroed after the softmax, then renormalised",
        _renormalised,
        "Zeroing after the softmax and dividing by the new row sum equals masking in exact arithmetic, not in "
        "floating point: the softmax over every key measures each score against the row's largest, a blocked "
        "one included. When a blocked key scores thousands above the visible ones, every visible weight "
        "underflows to exactly 0 before the zeroing, and the row becomes 0/0 (section 3).",
        fix=_MASK_BEFORE + " The softmax then measures the scores against the largest visible one.",
        symptom="Your weights are NaN on a row whose blocked key scores far above its visible keys (near -24000), "
        "and right on the rows of ordinary scores.",
    ),
    Misconception(
        "did not subtract the row's max",
        _without_max,
        "exp overflows to inf above about 709 (88 in float32) and underflows to 0 below about -745: a softmax "
        "that calls exp on the raw scores gives inf/inf or 0/0 on such rows. Subtracting each row's largest "
        "visible score first changes nothing mathematically and keeps exp in range (notebook 02).",
        fix="With masked = scores.masked_fill(~allowed, float('-inf')): e = torch.exp(masked - "
        "masked.amax(dim=-1, keepdim=True)), then e / e.sum(dim=-1, keepdim=True); or softmax(masked, dim=-1).",
        symptom="Your weights are NaN at the visible keys of the rows whose scores are all very large (near +800) "
        "or all very low (near -24000), and right on the rows of ordinary scores.",
    ),
    Misconception(
        POLARITY_NAME,
        lambda s, a: softmax(s.masked_fill(a, -math.inf)),
        "Your code blocks the keys the mask allows. Here, as in F.scaled_dot_product_attention, True means "
        "*may attend*; code written for masks that mark blocked keys with True (nn.MultiheadAttention's) reads "
        "the future when it gets this one (section 13).",
        fix="Block where the mask is False: scores.masked_fill(~allowed, float('-inf')).",
        symptom="Your weights are 0 on the keys the mask allows, and shared among the keys it blocks.",
    ),
    # The same mistake through torch.softmax (NaN on the rows it blocks entirely) or with a finite fill.
    Misconception(
        POLARITY_NAME,
        None,
        "Your code blocks the keys the mask allows. Here, as in F.scaled_dot_product_attention, True means "
        "*may attend*; code written for masks that mark blocked keys with True (nn.MultiheadAttention's) reads "
        "the future when it gets this one (section 13).",
        detect=_reads_mask_inverted,
        fix="Block where the mask is False: scores.masked_fill(~allowed, float('-inf')).",
        symptom="Given equal scores with only the first key allowed, your function puts no weight on that key.",
    ),
    Misconception(
        "blocked scores set to 0 instead of -inf",
        lambda s, a: softmax(s.masked_fill(~a, 0.0)),
        "A score of 0 is an ordinary score: exp(0) = 1, so a blocked key filled with 0 (or whose score was "
        "multiplied by the mask) competes like any other key.",
        fix="Fill the blocked scores with -inf, since exp(-inf) = 0: scores.masked_fill(~allowed, float('-inf')).",
        symptom="Your blocked keys still get weight: measure one.",
    ),
    Misconception(
        "mask built by multiplying with -inf",
        lambda s, a: softmax(s + (~a).to(s.dtype) * -math.inf),
        "0 · (-inf) is NaN, not 0: multiplying a 0/1 mask by -inf puts NaN on every key that may be looked at "
        "(section 4).",
        fix="Build the mask with masked_fill (or torch.where), not a product: "
        "scores.masked_fill(~allowed, float('-inf')).",
        symptom="Your weights are NaN everywhere.",
    ),
    Misconception(
        FINITE_FILL_NAME,
        lambda s, a: softmax(s + (~a) * -10_000.0),
        "A finite number pushed onto the blocked scores (filled or added: -10000, -1e9, even -1e30) removes a key "
        "only while every visible score stays far above it. Scores can fall that low, and then the blocked key "
        "takes the weight (section 4).",
        fix="Use -inf, since exp(-inf) is exactly 0 (scores.masked_fill(~allowed, float('-inf'))), or add the "
        "dtype's smallest number, torch.finfo(scores.dtype).min, which no score falls below.",
        symptom="On the row whose visible keys score near -24000, your weights go to a blocked key; on the rows "
        "of ordinary scores they are right.",
    ),
    # Any finite fill, filled or added: a property every right answer has, tested on every answer.
    Misconception(
        FINITE_FILL_NAME,
        None,
        "A finite number pushed onto the blocked scores (filled or added: -10000, -1e9, even -1e30) removes a key "
        "only while every visible score stays far above it. Scores can fall that low, and then the blocked key "
        "takes the weight (section 4).",
        detect=_takes_weight_when_far_above,
        fix="Use -inf, since exp(-inf) is exactly 0 (scores.masked_fill(~allowed, float('-inf'))), or add the "
        "dtype's smallest number, torch.finfo(scores.dtype).min, which no score falls below.",
        symptom="Given a query whose visible keys all score -1e35 and whose blocked key scores 0, your function "
        "gives the blocked key weight.",
        always=True,
    ),
    Misconception(
        "softmax over the wrong dimension",
        # torch's own softmax, as a learner writes it: NaN down a column that is blocked for every query.
        lambda s, a: torch.softmax(s.masked_fill(~a, -math.inf), dim=-2),
        "Each query shares its attention among the keys, so the softmax normalises each row, over the keys "
        "(the last axis). Normalised over the queries, each key's column sums to 1 instead.",
        fix="softmax(scores.masked_fill(~allowed, float('-inf')), dim=-1): dim=-1 is the keys.",
        symptom="Down each column, over the queries, your weights sum to 1 wherever some query may see that key; "
        "along a row they do not.",
    ),
    Misconception(
        "softmax over the wrong dimension",
        None,
        "Each query shares its attention among the keys, so the softmax normalises each row, over the keys "
        "(the last axis). Normalised over the queries, each key's column sums to 1 instead.",
        detect=_normalised_down_columns,
        fix="softmax(scores.masked_fill(~allowed, float('-inf')), dim=-1): dim=-1 is the keys.",
        symptom="Down each column, over the queries, your weights sum to 1 wherever some query may see that key; "
        "along a row they do not.",
    ),
)


def check_masked_weights(learner: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    """Exercise: ``learner(scores, allowed)`` returns the attention weights of ``scores (..., seq_q,
    seq_k)`` where only keys with ``allowed (seq_q, seq_k)`` True (a boolean mask, True = may
    attend) take part: blocked keys get weight exactly 0 and every row sums to 1. Every row of every
    case allows at least one key."""
    return check_function(
        "masked_weights",
        learner,
        _reference_weights,
        _masked_weights_cases(),
        MASKED_WEIGHTS_MISCONCEPTIONS,
        draw=_draw_masked_weights,
        verbose=verbose,
    )


# ---------------------------------------------------------------- decode mask


def _reference_decode_mask(past_len: int, new_len: int) -> torch.Tensor:
    return causal_mask(new_len, past_len + new_len)


def _draw_decode_masks(g: torch.Generator) -> list[Case]:
    """Four steps of other lengths: a long cache with a few new tokens (more keys than a (16, 16) buffer
    holds), a short cache with many, a middle one, and a prompt of odd length."""

    def pick(low: int, high: int) -> int:
        return int(torch.randint(low, high + 1, (1,), generator=g))

    steps = [(pick(17, 40), pick(1, 3)), (pick(1, 2), pick(4, 7)), (pick(5, 12), pick(2, 5)), (0, pick(5, 9))]
    return [Case((p, n), description=f"past_len={p}, new_len={n}") for p, n in steps]


_BOTTOM_RIGHT = "torch.ones(new_len, past_len + new_len, dtype=torch.bool).tril(diagonal=past_len)"

DECODE_MASK_MISCONCEPTIONS = (
    Misconception(
        "causal mask aligned top-left",
        lambda p, n: torch.ones(n, p + n, dtype=torch.bool).tril(),
        "New query i sits at position past_len + i, after the cached tokens, so it may see keys 0 .. past_len + i: "
        "the triangle's diagonal ends in the rectangle's lower-right corner. Aligned top-left (what is_causal=True "
        "does in PyTorch when seq_q != seq_k), chunked decoding ignores most of the cache.",
        fix=_BOTTOM_RIGHT,
        symptom="Your mask is right for the prompt (past_len=0); after cached tokens, each new query may see "
        "past_len keys fewer than in the reference's mask.",
    ),
    Misconception(
        POLARITY_NAME,
        lambda p, n: ~causal_mask(n, p + n),
        "Here True means *may attend*, as in F.scaled_dot_product_attention: a mask that marks the blocked keys "
        "with True lets the model read the future when it is passed there (section 13).",
        fix=_BOTTOM_RIGHT,
        symptom="Your mask is True exactly where the reference's is False.",
    ),
    Misconception(
        "the query cannot see itself",
        lambda p, n: torch.ones(n, p + n, dtype=torch.bool).tril(diagonal=p - 1),
        "A token may attend to itself; only the keys after its own position are blocked. Without its own key, "
        "the first token of a prompt has nothing left to attend to.",
        fix=_BOTTOM_RIGHT,
        symptom="Each row of your mask has one True fewer than the reference's: the last True of each row.",
    ),
    Misconception(
        "off by one: the query sees the next token",
        lambda p, n: torch.ones(n, p + n, dtype=torch.bool).tril(diagonal=p + 1),
        "A query may see the keys up to its own position, past_len + i, and no further: one key more is the token "
        "after it, the future.",
        fix=_BOTTOM_RIGHT,
        symptom="Each row of your mask has one True more than the reference's, just after its last True.",
    ),
    Misconception(
        "no mask at all (everything may attend)",
        lambda p, n: torch.ones(n, p + n, dtype=torch.bool),
        "Every new query except the last has new tokens after it among the keys: its future, which a causal mask "
        "blocks. Only a step that feeds one token at a time needs no blocking.",
        fix=_BOTTOM_RIGHT,
        symptom="Your mask is True everywhere: no key is ever blocked.",
    ),
    Misconception(
        "a mask over the new tokens only",
        lambda p, n: causal_mask(n),
        "The keys of a decoding step are the cached tokens and the new ones: the mask has one column per key, "
        "past_len + new_len of them.",
        fix=_BOTTOM_RIGHT,
        symptom="Your mask has new_len columns; the reference's has past_len + new_len.",
    ),
    Misconception(
        "0/1 numbers instead of booleans",
        lambda p, n: causal_mask(n, p + n).float(),
        "F.scaled_dot_product_attention *adds* a mask of numbers to the scores instead of blocking keys: a mask "
        "that blocks must be a torch.bool tensor.",
        fix=_BOTTOM_RIGHT + " (dtype=torch.bool, or .bool() on a 0/1 tensor)",
        symptom="Your mask has the right values, but as numbers (0 and 1), not True/False.",
    ),
)


def check_decode_mask(learner: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    """Exercise: ``learner(past_len, new_len)`` returns the boolean mask ``(new_len, past_len +
    new_len)`` of a decoding step that feeds ``new_len`` tokens after ``past_len`` cached ones:
    True where new query ``i`` (at position ``past_len + i``) may attend to key ``j``."""
    cases = [
        Case((0, 4), description="past_len=0, new_len=4 (the prompt)"),
        Case((3, 1), description="past_len=3, new_len=1 (one generated token)"),
        Case((3, 3), description="past_len=3, new_len=3"),
        Case((15, 2), description="past_len=15, new_len=2 (17 keys: longer than a fixed (16, 16) buffer)"),
    ]
    return check_function(
        "decode_mask",
        learner,
        _reference_decode_mask,
        cases,
        DECODE_MASK_MISCONCEPTIONS,
        shortcuts=("causal_mask",),
        draw=_draw_decode_masks,
        verbose=verbose,
    )
