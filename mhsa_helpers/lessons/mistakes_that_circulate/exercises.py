"""Exercise checkers for notebook 10 (mistakes that circulate): masking the scores the right
way, and the causal mask of a decoding step with a cache. Each names the mistake a wrong
answer matches, among them the ones the notebook's bug zoo shows in real code."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from ...masking import causal_mask
from ...softmax import softmax
from ...teaching.checking import Case, CheckResult, Misconception, check_function, random_tensor
from ...teaching.misconceptions import FINITE_FILL_HINT, FINITE_FILL_NAME, blocked_key_gets_weight

__all__ = ["check_decode_mask", "check_masked_weights"]


# ---------------------------------------------------------------- masked weights


def _reference_weights(scores: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    return softmax(scores.masked_fill(~allowed, -math.inf))


def _masked_weights_cases() -> list[Case]:
    g = torch.Generator().manual_seed(1001)
    padding = torch.tensor([[True, True, False, True, False]] * 3)
    extreme = random_tensor(g, 4, 4)
    # A query whose visible keys score far below a blocked one: adding -10000 is not enough there.
    extreme[1] = torch.tensor([-24_000.0, -25_000.0, -9_000.0, -30_000.0], dtype=torch.float64)
    return [
        Case((random_tensor(g, 2, 4, 4, scale=2.0), causal_mask(4)), description="scores (2, 4, 4), causal mask"),
        Case(
            (random_tensor(g, 2, 3, 5, scale=2.0), causal_mask(3, 5)),
            description="scores (2, 3, 5): 3 new queries after 2 cached keys",
        ),
        Case((random_tensor(g, 3, 5, scale=2.0), padding), description="scores (3, 5), padding mask"),
        Case((extreme, causal_mask(4)), description="scores (4, 4) with a row near -24000"),
        Case((random_tensor(g, 4, 4, scale=200.0), causal_mask(4)), description="scores (4, 4) of size ~200"),
    ]


def check_masked_weights(learner: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    """Exercise: ``learner(scores, allowed)`` returns the attention weights of ``scores (..., seq_q,
    seq_k)`` where only keys with ``allowed (seq_q, seq_k)`` True (a boolean mask, True = may
    attend) take part: blocked keys get weight exactly 0 and every row sums to 1."""
    blocked_in_softmax = (
        "The mask belongs inside the softmax: fill blocked scores with -inf, then softmax, "
        "softmax(scores.masked_fill(~allowed, float('-inf'))). "
    )
    misconceptions = [
        Misconception(
            "mask added after the softmax",
            lambda s, a: softmax(s) + torch.zeros_like(s).masked_fill(~a, -math.inf),
            "Your weights are -inf at blocked keys: the mask was added to the weights, not to the scores (the "
            "formula softmax(QKᵀ/√d_k)V + M that circulates). " + blocked_in_softmax,
        ),
        Misconception(
            "weights zeroed after the softmax, not renormalised",
            lambda s, a: softmax(s) * a,
            "Blocked keys get 0, but the rows no longer sum to 1: the softmax had already shared each row among "
            "all keys. " + blocked_in_softmax,
        ),
        Misconception(
            "mask polarity inverted (True read as blocked)",
            lambda s, a: softmax(s.masked_fill(a, -math.inf)),
            "Your code blocks the keys the mask allows: here True means *may attend* (as in "
            "F.scaled_dot_product_attention); blocking uses ~allowed.",
        ),
        Misconception(
            "blocked scores set to 0 instead of -inf",
            lambda s, a: softmax(s.masked_fill(~a, 0.0)),
            "Your blocked keys still get weight: their scores became 0 (filled with 0, or multiplied by the mask), "
            "and a score of 0 is an ordinary score, exp(0) = 1. Fill them with -inf.",
        ),
        Misconception(
            "blocked scores pushed down by adding -10000",
            lambda s, a: softmax(s + (~a) * -10_000.0),
            "Adding -10000 works only while every real score is far above the blocked ones: the query whose "
            "visible keys score near -24000 still puts its weight on a future key. Fill with -inf instead.",
        ),
        Misconception(
            "softmax over the wrong dimension",
            # torch's own softmax, as a learner writes it: NaN down a column that is blocked for every query.
            lambda s, a: torch.softmax(s.masked_fill(~a, -math.inf), dim=-2),
            "Your weights sum to 1 down each key's column: the softmax ran over the queries axis (dim=-2). "
            "Each query's row is normalised over the keys, dim=-1.",
        ),
    ]
    misconceptions.append(Misconception(FINITE_FILL_NAME, None, FINITE_FILL_HINT, detect=blocked_key_gets_weight))
    return check_function(
        "masked_weights", learner, _reference_weights, _masked_weights_cases(), misconceptions, verbose=verbose
    )


# ---------------------------------------------------------------- decode mask


def _reference_decode_mask(past_len: int, new_len: int) -> torch.Tensor:
    return causal_mask(new_len, past_len + new_len)


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
    misconceptions = [
        Misconception(
            "causal mask aligned top-left",
            lambda p, n: torch.ones(n, p + n, dtype=torch.bool).tril(),
            "Your mask lets new query i see keys 0..i, as if it sat at position i; it sits at past_len + i "
            "(the mask's lower-right corner is the diagonal). This is what is_causal=True does in PyTorch when "
            "seq_q != seq_k: chunked decoding then ignores most of the cache.",
        ),
        Misconception(
            "mask polarity inverted (True = blocked)",
            lambda p, n: ~causal_mask(n, p + n),
            "Your mask is True on the future keys: here True means *may attend*.",
        ),
        Misconception(
            "the query cannot see itself",
            lambda p, n: torch.ones(n, p + n, dtype=torch.bool).tril(diagonal=p - 1),
            "Your mask also blocks each query's own key (the diagonal). A token may attend to itself; "
            "only later keys are blocked. Blocking the diagonal leaves the very first query nothing: NaN.",
        ),
        Misconception(
            "off by one: the query sees the next token",
            lambda p, n: torch.ones(n, p + n, dtype=torch.bool).tril(diagonal=p + 1),
            "Your mask lets each query see one key too many, the token after it: the future leaks in.",
        ),
        Misconception(
            "a mask over the new tokens only",
            lambda p, n: causal_mask(n),
            "Your mask has one column per new token, but the keys are the cached ones plus the new ones: "
            "(new_len, past_len + new_len).",
        ),
        Misconception(
            "0/1 numbers instead of booleans",
            lambda p, n: causal_mask(n, p + n).float(),
            "The values are right, but a float mask of 0/1 is *added* to the scores by "
            "F.scaled_dot_product_attention instead of blocking them: return a torch.bool tensor.",
        ),
    ]
    return check_function(
        "decode_mask",
        learner,
        _reference_decode_mask,
        cases,
        misconceptions,
        shortcuts=("causal_mask",),
        verbose=verbose,
    )
