"""Exercise checkers for notebook 02 (scaled dot-product attention): the stable
softmax and attention itself. Each names the misconception a wrong answer matches."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from ... import scaled_dot_product_attention, softmax
from ...teaching.checking import Case, CheckResult, Misconception, check_function, random_tensor, random_tensors
from ..qkv_by_hand.exercises import wrong_axes_misconceptions

__all__ = ["check_attention", "check_softmax"]


# ---------------------------------------------------------------- softmax


def _naive_softmax(x: torch.Tensor) -> torch.Tensor:
    e = torch.exp(x)
    return e / e.sum(dim=-1, keepdim=True)


def _softmax_cases() -> tuple:
    g = torch.Generator().manual_seed(401)
    extreme = random_tensor(g, 2, 2, 4)
    # One row far above zero (exp overflows), one far below (exp underflows to 0):
    # only a per-row max keeps both finite.
    extreme[0, 0] += 1000.0
    extreme[1, 1] -= 1000.0
    # Rows whose entries lie far apart, like [1000, 0]: subtracting anything but the row's max
    # (its min, its mean) still leaves an exponent near 1000, and exp overflows.
    wide = random_tensor(g, 3, 4)
    wide[0, 0], wide[1, 0], wide[2, 1] = 1000.0, -1000.0, 800.0
    cases = [
        Case((random_tensor(g, 3, 4, scale=2.0),), description="x (3, 4)"),
        Case((random_tensor(g, 2, 3, 5, scale=2.0),), description="batch: x (2, 3, 5)"),
        Case((extreme,), description="x (2, 2, 4) with rows near +1000 and -1000"),
        Case((wide,), description="x (3, 4) with rows like [1000, 0, 0, 0] and [-1000, 0, 0, 0]"),
    ]
    square = [
        Case(random_tensors((3, 3), seed=402), description="square x (3, 3)"),
        Case(random_tensors((3, 3, 3), seed=403), description="square x (3, 3, 3)"),
    ]
    return cases, square


def check_softmax(learner: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    """Exercise: ``learner(x)`` must return the numerically stable softmax of ``x (..., n)``
    along the last axis (same shape; each row sums to 1; no overflow for large inputs)."""
    cases, square = _softmax_cases()

    def global_max(x: torch.Tensor) -> torch.Tensor:
        e = torch.exp(x - x.max())
        return e / e.sum(dim=-1, keepdim=True)

    def whole_sum_stable(x: torch.Tensor) -> torch.Tensor:
        e = torch.exp(x - x.amax(dim=-1, keepdim=True))
        return e / e.sum()

    def whole_sum_naive(x: torch.Tensor) -> torch.Tensor:
        e = torch.exp(x)
        return e / e.sum()

    def no_keepdim(x: torch.Tensor) -> torch.Tensor:
        e = torch.exp(x - x.amax(dim=-1, keepdim=True))
        return e / e.sum(dim=-1)

    def shifted(x: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
        e = torch.exp(x - shift)
        return e / e.sum(dim=-1, keepdim=True)

    def hint(where: str) -> str:
        return f"Your values sum to 1 {where}. Attention normalises each row over the last axis: softmax(x, dim=-1)."

    misconceptions = [
        Misconception(
            "softmax over the wrong dimension", lambda x: softmax(x, dim=-2), hint("down each column (dim=-2)")
        ),
        Misconception(
            "softmax over the wrong dimension", lambda x: softmax(x, dim=0), hint("over the first axis (dim=0)")
        ),
        # dim=1 is right for one (seq, n) matrix only; with a batch axis in front it is wrong.
        Misconception(
            "softmax over the wrong dimension",
            lambda x: softmax(x, dim=1),
            hint("over dim=1, which is the last axis only when there is no batch axis in front"),
        ),
        Misconception(
            "subtracted the row's minimum instead of its maximum",
            lambda x: shifted(x, x.amin(dim=-1, keepdim=True)),
            "Any shift leaves the softmax unchanged, but only the maximum keeps every exponent <= 0: on a row "
            "like [1000, 0], x - min is [1000, 0] again and exp(1000) overflows to inf (inf/inf = NaN).",
        ),
        Misconception(
            "subtracted the row's mean instead of its maximum",
            lambda x: shifted(x, x.mean(dim=-1, keepdim=True)),
            "Any shift leaves the softmax unchanged, but only the maximum keeps every exponent <= 0: on a row "
            "like [1000, 0, 0, 0] the mean is 250, x - mean still holds 750, and exp(750) overflows to inf.",
        ),
        Misconception(
            "normalised by the sum without exp",
            lambda x: x / x.sum(dim=-1, keepdim=True),
            "Dividing the scores by their sum is not a softmax: negative scores give negative weights. "
            "Exponentiate first (after subtracting the row's max), then divide by the sum of the exps.",
        ),
        Misconception(
            "took the max without keepdim=True",
            lambda x: shifted(x, x.amax(dim=-1)),
            "x.max(dim=-1).values has shape (..., n) without the last axis, so x - max lines each row's max up "
            "with the *columns*. Keep the axis: x.amax(dim=-1, keepdim=True) of shape (..., n, 1).",
        ),
        Misconception(
            "did not subtract the max: exp overflows to inf and gives NaN",
            _naive_softmax,
            "exp(1000) is inf in float64 (and exp(89) already in float32), and inf/inf is NaN. Subtract "
            "each row's max first: softmax(x - max) == softmax(x), and the largest exponent becomes exp(0) = 1.",
        ),
        Misconception(
            "subtracted one global max instead of each row's max",
            global_max,
            "A row far below the global max underflows to all zeros and then divides 0 by 0. Use "
            "x.amax(dim=-1, keepdim=True): one max per row.",
        ),
        Misconception(
            "summed over the whole tensor (forgot dim=-1 in the sum)",
            whole_sum_stable,
            "e.sum() adds up every entry of the tensor, so no row sums to 1. Use e.sum(dim=-1, keepdim=True).",
        ),
        Misconception(
            "summed over the whole tensor (forgot dim=-1 in the sum)",
            whole_sum_naive,
            "e.sum() adds up every entry of the tensor, so no row sums to 1. Use e.sum(dim=-1, keepdim=True); "
            "and subtract each row's max before exp so that large inputs cannot overflow.",
        ),
        Misconception(
            "summed without keepdim=True (the row sums broadcast along the wrong axis)",
            no_keepdim,
            "e.sum(dim=-1) drops the summed axis, so dividing lines the row sums up with the columns. "
            "keepdim=True keeps the shape (..., n, 1) so each row is divided by its own sum.",
        ),
    ]
    return check_function(
        "stable softmax",
        learner,
        softmax,
        cases,
        misconceptions,
        square_cases=square,
        shortcuts=("softmax",),
        verbose=verbose,
    )


# ---------------------------------------------------------------- attention


def _attention_cases() -> tuple:
    g = torch.Generator().manual_seed(501)
    cases = [
        Case(
            (random_tensor(g, 3, 4), random_tensor(g, 5, 4), random_tensor(g, 5, 2)),
            description="q (3, 4), k (5, 4), v (5, 2): d_k=4, d_v=2",
        ),
        Case(
            (random_tensor(g, 2, 4, 9), random_tensor(g, 2, 6, 9), random_tensor(g, 2, 6, 3)),
            description="batch: q (2, 4, 9), k (2, 6, 9), v (2, 6, 3)",
        ),
        Case(
            (random_tensor(g, 2, 3, 5, 16), random_tensor(g, 2, 3, 5, 16), random_tensor(g, 2, 3, 5, 8)),
            description="batch and heads: q, k (2, 3, 5, 16), v (2, 3, 5, 8)",
        ),
        Case(
            (random_tensor(g, 4, 6), random_tensor(g, 4, 6), random_tensor(g, 4, 6)),
            description="self-attention: q, k, v (4, 6)",
        ),
    ]
    square = [
        Case(random_tensors((3, 3), (3, 3), (3, 3), seed=502), description="square q, k, v (3, 3)"),
        Case(random_tensors((3, 3, 3), (3, 3, 3), (3, 3, 3), seed=503), description="square q, k, v (3, 3, 3)"),
        Case(
            random_tensors((3, 3, 3, 3), (3, 3, 3, 3), (3, 3, 3, 3), seed=504),
            description="square q, k, v (3, 3, 3, 3)",
        ),
    ]
    return cases, square


def _attend(scores: torch.Tensor, v: torch.Tensor, dim: int = -1) -> torch.Tensor:
    return torch.softmax(scores, dim=dim) @ v


def check_attention(learner: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    """Exercise: ``learner(q, k, v)`` with ``q (..., seq_q, d_k)``, ``k (..., seq_k, d_k)``,
    ``v (..., seq_k, d_v)`` must return ``softmax(q kᵀ / √d_k) v`` of shape ``(..., seq_q, d_v)``."""
    cases, square = _attention_cases()

    def scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return q @ k.transpose(-2, -1)

    def with_wrong_axes(q: torch.Tensor, k_t: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return _attend(q @ k_t / math.sqrt(q.shape[-1]), v)

    wrong_dim_hint = (
        "Your weights do not sum to 1 over the keys. Each query (row) distributes its attention over the "
        "keys (the last axis): softmax(..., dim=-1)."
    )
    misconceptions = [
        Misconception(
            "scaled by d_k instead of √d_k",
            lambda q, k, v: _attend(scores(q, k) / q.shape[-1], v),
            "Your scores are divided by d_k (as dividing by √d_k twice would do). The variance of q·k grows "
            "like d_k, so its spread grows like √d_k; dividing once by √d_k brings it back to about 1, "
            "dividing by d_k shrinks the scores too much and flattens the weights.",
        ),
        Misconception(
            "scaled by √seq_k (the number of keys) instead of √d_k",
            lambda q, k, v: _attend(scores(q, k) / math.sqrt(k.shape[-2]), v),
            "Your scale uses the number of keys, k.shape[-2]. The spread of a dot product grows with the length "
            "of the vectors, d_k = q.shape[-1]: divide by √d_k.",
        ),
        Misconception(
            "scaled after the softmax",
            lambda q, k, v: (torch.softmax(scores(q, k), dim=-1) / math.sqrt(q.shape[-1])) @ v,
            "Your weights were divided by √d_k after the softmax, so they sum to 1/√d_k. The scale belongs "
            "inside: softmax(q kᵀ / √d_k).",
        ),
        Misconception(
            "returned the weights instead of weights @ V",
            lambda q, k, v: torch.softmax(scores(q, k) / math.sqrt(q.shape[-1]), dim=-1),
            "Your function returns the (seq_q, seq_k) attention weights. The output mixes the values with "
            "them: weights @ v, of shape (..., seq_q, d_v).",
        ),
        Misconception(
            "no scaling",
            lambda q, k, v: _attend(scores(q, k), v),
            "Divide the scores by √d_k (d_k = q.shape[-1]) before the softmax; without it, large d_k "
            "pushes the softmax into saturation.",
        ),
        Misconception(
            "scaled by √d_v (the value width) instead of √d_k",
            lambda q, k, v: _attend(scores(q, k) / math.sqrt(v.shape[-1]), v),
            "The scores are dot products of d_k-dimensional queries and keys, so the scale is √d_k = "
            "√(q.shape[-1]); the value width d_v plays no part in the scores.",
        ),
        Misconception(
            "multiplied by √d_k instead of dividing",
            lambda q, k, v: _attend(scores(q, k) * math.sqrt(q.shape[-1]), v),
            "The scale is 1/√d_k: divide the scores by √d_k.",
        ),
        Misconception(
            "softmax over the wrong dimension",
            lambda q, k, v: _attend(scores(q, k) / math.sqrt(q.shape[-1]), v, dim=-2),
            wrong_dim_hint,
        ),
        Misconception(
            "softmax over the wrong dimension",
            lambda q, k, v: _attend(scores(q, k) / math.sqrt(q.shape[-1]), v, dim=0),
            wrong_dim_hint,
        ),
        Misconception(
            "softmax over the wrong dimension",
            # dim=1 is the key axis of one (seq_q, seq_k) matrix only; with batch axes in front it is not.
            lambda q, k, v: _attend(scores(q, k) / math.sqrt(q.shape[-1]), v, dim=1),
            wrong_dim_hint,
        ),
        Misconception(
            "did not transpose K",
            lambda q, k, v: _attend(q @ k / math.sqrt(q.shape[-1]), v),
            "Score (i, j) is query i · key j, so K must be transposed: q @ k.transpose(-2, -1).",
        ),
        *wrong_axes_misconceptions(with_wrong_axes),
        Misconception(
            "reshaped K instead of transposing it",
            lambda q, k, v: _attend(q @ k.reshape(*k.shape[:-2], k.shape[-1], k.shape[-2]) / math.sqrt(q.shape[-1]), v),
            "k.reshape(..., d_k, seq_k) has the right shape but reads the numbers in the wrong order: it is not "
            "Kᵀ. Swap the two axes: k.transpose(-2, -1) (or k.mT).",
        ),
        Misconception(
            "applied the softmax after multiplying by V",
            lambda q, k, v: torch.softmax((scores(q, k) / math.sqrt(q.shape[-1])) @ v, dim=-1),
            "The softmax turns the scores into weights; the output is those weights times V: softmax(q kᵀ / √d_k) @ v.",
        ),
    ]
    return check_function(
        "scaled dot-product attention",
        learner,
        scaled_dot_product_attention,
        cases,
        misconceptions,
        square_cases=square,
        shortcuts=("scaled_dot_product_attention", "MultiheadAttention"),
        verbose=verbose,
    )
