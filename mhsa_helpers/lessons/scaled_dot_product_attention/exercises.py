"""Exercise checkers for notebook 02 (scaled dot-product attention): a prediction of how the scores
grow with d_k, the stable softmax (a debugging exercise), and the learner's own scaled dot-product
attention with an optional boolean mask, the second piece of their implementation. Each names the
misconception a wrong answer matches."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from ... import scaled_dot_product_attention, softmax
from ...teaching.checking import Case, CheckResult, Misconception, check_function, random_tensor, random_tensors
from ...teaching.gradients import compare_with_gradients
from ...teaching.misconceptions import (
    AFTER_SOFTMAX_HINT,
    AFTER_SOFTMAX_NAME,
    FINITE_FILL_HINT,
    FINITE_FILL_NAME,
    POLARITY_HINT,
    POLARITY_NAME,
    attention_blocked_key_gets_weight,
    random_mask,
    wrong_axes_misconceptions,
)

__all__ = ["check_my_attention", "check_softmax", "check_spread_prediction"]


# ---------------------------------------------------------------- predict: how the scores grow


def spread_growth() -> float:
    """By what factor the standard deviation of ``q · k`` grows from d_k = 64 to d_k = 256, for entries of
    mean 0 and variance 1: ``√(256 / 64)``."""
    return math.sqrt(256 / 64)


def check_spread_prediction(learner: Callable[[], Any], *, verbose: bool = True) -> CheckResult:
    """Prediction: ``learner()`` returns the factor by which the typical size (standard deviation) of an
    unscaled score ``q · k`` grows when d_k goes from 64 to 256 (unit-variance entries). Within 0.05."""
    misconceptions = [
        Misconception(
            "confused the spread with the variance",
            lambda: 4.0,
            "The *variance* of q·k is d_k, so it grows 4 times; the typical size of a score is its standard "
            "deviation, the square root of the variance: √4 = 2.",
        ),
        Misconception(
            "the scores do not grow",
            lambda: 1.0,
            "q·k adds up d_k products of mean 0 and variance 1: four times as many terms, four times the variance.",
        ),
        Misconception(
            "grows with d_k squared",
            lambda: 16.0,
            "Independent terms add their variances: d_k terms give variance d_k (not d_k²), spread √d_k.",
        ),
    ]
    return check_function(
        "predict: how the scores grow",
        learner,
        spread_growth,
        [Case((), description="std of q·k at d_k = 256 divided by its std at d_k = 64")],
        misconceptions,
        atol=0.05,
        rtol=0.0,
        verbose=verbose,
    )


# ---------------------------------------------------------------- softmax (a debugging exercise)


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
            "both bugs: one global max, and a sum over the whole tensor",
            lambda x: torch.exp(x - x.max()) / torch.exp(x - x.max()).sum(),
            "x.max() is one number for the whole tensor, so a row far below it underflows to zeros (then 0 / 0); "
            "and e.sum() adds every entry, so no row sums to 1. Take both per row, over the last axis: "
            "x.amax(dim=-1, keepdim=True) and e.sum(dim=-1, keepdim=True).",
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


# ---------------------------------------------------------------- the learner's attention


ATTENTION_OUTPUTS = ("output",)
ATTENTION_INPUTS = ("q", "k", "v")


def _attention_cases() -> tuple:
    g = torch.Generator().manual_seed(501)

    def qkv(*shapes: tuple) -> tuple:
        return tuple(random_tensor(g, *shape) for shape in shapes)

    lengths = torch.tensor([3, 7])
    padding = (torch.arange(7)[None, :] < lengths[:, None])[:, None, None, :]  # (2, 1, 1, 7): keys < length
    cases = [
        Case(qkv((3, 4), (5, 4), (5, 2)), description="q (3, 4), k (5, 4), v (5, 2): d_k=4, d_v=2"),
        Case(qkv((2, 4, 9), (2, 6, 9), (2, 6, 3)), description="batch: q (2, 4, 9), k (2, 6, 9), v (2, 6, 3)"),
        Case(
            qkv((2, 3, 5, 16), (2, 3, 5, 16), (2, 3, 5, 8)),
            description="batch and heads: q, k (2, 3, 5, 16), v (2, 3, 5, 8)",
        ),
        Case(qkv((1, 6), (17, 6), (17, 6)), description="one query, 17 keys: q (1, 6), k, v (17, 6)"),
        Case(qkv((7, 5), (7, 5), (7, 5)), description="self-attention: q, k, v (7, 5)"),
        Case(
            (*qkv((4, 4), (5, 4), (5, 3)), random_mask(g, 4, 5)),
            description="q (4, 4), k (5, 4), v (5, 3), mask (4, 5)",
        ),
        Case(
            (*qkv((2, 2, 7, 8), (2, 2, 7, 8), (2, 2, 7, 2)), padding),
            description="batch and heads with a padding mask (2, 1, 1, 7) for lengths 3 and 7",
        ),
        Case(
            (*qkv((2, 3, 5, 16), (2, 3, 6, 16), (2, 3, 6, 8)), random_mask(g, 2, 3, 5, 6)),
            description="batch and heads: q (2, 3, 5, 16), k (2, 3, 6, 16), v (2, 3, 6, 8), mask (2, 3, 5, 6)",
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
    square = [
        Case(random_tensors((3, 3), (3, 3), (3, 3), seed=502), description="square q, k, v (3, 3)"),
        Case(random_tensors((3, 3, 3), (3, 3, 3), (3, 3, 3), seed=503), description="square q, k, v (3, 3, 3)"),
        Case(
            random_tensors((3, 3, 3, 3), (3, 3, 3, 3), (3, 3, 3, 3), seed=504),
            description="square q, k, v (3, 3, 3, 3)",
        ),
    ]
    return cases, square


def _attend(q, k_t, v, mask=None, *, divide_by=None, dim=-1, fill=float("-inf"), after=False):
    scores = q @ k_t / (math.sqrt(q.shape[-1]) if divide_by is None else divide_by)
    if mask is not None and not after:
        scores = scores.masked_fill(~mask, fill)
    weights = torch.softmax(scores, dim=dim)
    if mask is not None and after:
        weights = weights * mask
    return weights @ v


def _masked_scores(q, k, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return scores if mask is None else scores.masked_fill(~mask, float("-inf"))


def _plain(q, k, v, mask=None, **options):
    return _attend(q, k.transpose(-2, -1), v, mask, **options)


def check_my_attention(learner: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    """Exercise: ``learner(q, k, v, mask=None)`` with ``q (..., seq_q, d_k)``, ``k (..., seq_k, d_k)``,
    ``v (..., seq_k, d_v)`` and an optional boolean ``mask`` broadcastable to ``(..., seq_q, seq_k)``
    (``True`` = may attend) must return ``softmax(q kᵀ / √d_k, blocked -> -inf) v`` of shape
    ``(..., seq_q, d_v)``, like the package's :func:`~mhsa_helpers.scaled_dot_product_attention`. Values
    and the gradients reaching q, k and v are compared, on cases with and without masks, batches and
    heads, seq_q ≠ seq_k and d_k ≠ d_v. No mask blocks a whole row."""
    cases, square = _attention_cases()
    sqrt_d_k = "√d_k = math.sqrt(q.shape[-1])"
    wrong_dim_hint = (
        "Your weights do not sum to 1 over the keys. Each query (row) distributes its attention over the "
        "keys (the last axis): softmax(..., dim=-1)."
    )
    misconceptions = [
        Misconception(
            "no √d_k scaling",
            lambda q, k, v, mask=None: _plain(q, k, v, mask, divide_by=1.0),
            f"Divide the scores by {sqrt_d_k} before the softmax; without it, large d_k pushes the softmax into "
            "saturation.",
        ),
        Misconception(
            "scaled by d_k instead of √d_k",
            lambda q, k, v, mask=None: _plain(q, k, v, mask, divide_by=q.shape[-1]),
            "Your scores are divided by d_k. The spread of q·k grows like √d_k; divide by "
            f"{sqrt_d_k}, not by d_k, which shrinks the scores too much and flattens the weights.",
        ),
        Misconception(
            "scaled by √seq_k (the number of keys) instead of √d_k",
            lambda q, k, v, mask=None: _plain(q, k, v, mask, divide_by=math.sqrt(k.shape[-2])),
            f"Your scale uses the number of keys, k.shape[-2]. The spread of a dot product grows with the length "
            f"of the vectors: divide by {sqrt_d_k}.",
        ),
        Misconception(
            "scaled by √d_v (the value width) instead of √d_k",
            lambda q, k, v, mask=None: _plain(q, k, v, mask, divide_by=math.sqrt(v.shape[-1])),
            f"The scores are dot products of d_k-wide queries and keys, so the scale is {sqrt_d_k}; the value "
            "width plays no part.",
        ),
        Misconception(
            "multiplied by √d_k instead of dividing",
            lambda q, k, v, mask=None: _plain(q, k, v, mask, divide_by=1 / math.sqrt(q.shape[-1])),
            "The scale is 1/√d_k: divide the scores by √d_k.",
        ),
        *[
            Misconception(
                "softmax over the wrong dimension",
                lambda q, k, v, mask=None, dim=dim: _plain(q, k, v, mask, dim=dim),
                wrong_dim_hint,
            )
            for dim in (-2, 0, 1)
        ],
        Misconception(
            "did not transpose K",
            lambda q, k, v, mask=None: _attend(q, k, v, mask),
            "Score (i, j) is query i · key j, so K must be transposed: q @ k.transpose(-2, -1).",
        ),
        *wrong_axes_misconceptions(_attend),
        Misconception(
            "scaled after the softmax",
            lambda q, k, v, mask=None: _plain(q, k, v * (1 / math.sqrt(q.shape[-1])), mask),
            "Your weights were divided by √d_k after the softmax, so they sum to 1/√d_k. The scale belongs "
            "inside: softmax(q kᵀ / √d_k).",
        ),
        Misconception(
            "applied the softmax after multiplying by V",
            lambda q, k, v, mask=None: torch.softmax(_masked_scores(q, k, mask) @ v, dim=-1),
            "The softmax turns the scores into weights; the output is those weights times V: softmax(q kᵀ / √d_k) @ v.",
        ),
        Misconception(
            "reshaped K instead of transposing it",
            lambda q, k, v, mask=None: _attend(q, k.reshape(*k.shape[:-2], k.shape[-1], k.shape[-2]), v, mask),
            "k.reshape(..., d_k, seq_k) has the right shape but reads the numbers in the wrong order: it is not "
            "Kᵀ. Swap the two axes: k.transpose(-2, -1) (or k.mT).",
        ),
        Misconception(
            "returned the weights instead of weights @ V",
            lambda q, k, v, mask=None: _plain(q, k, torch.eye(k.shape[-2], dtype=q.dtype), mask),
            "Your function returns the (seq_q, seq_k) attention weights. The output mixes the values with "
            "them: weights @ v, of shape (..., seq_q, d_v).",
        ),
        Misconception(
            POLARITY_NAME, lambda q, k, v, mask=None: _plain(q, k, v, None if mask is None else ~mask), POLARITY_HINT
        ),
        Misconception(
            POLARITY_NAME,
            # What PyTorch's F.scaled_dot_product_attention (and the package) give for ~mask: zeros, not NaN,
            # for the rows the inverted mask blocks entirely.
            lambda q, k, v, mask=None: scaled_dot_product_attention(q, k, v, None if mask is None else ~mask),
            POLARITY_HINT,
        ),
        Misconception(
            "the mask was not used",
            lambda q, k, v, mask=None: _plain(q, k, v),
            "When a mask is given, fill the blocked scores with -inf before the softmax: "
            "scores.masked_fill(~mask, float('-inf')).",
        ),
        Misconception(
            "blocked scores set to 0 instead of -inf",
            lambda q, k, v, mask=None: _plain(q, k, v, mask, fill=0.0),
            "A score of 0 still gets weight exp(0) = 1 relative to the others; only -inf gives exp(-inf) = 0. "
            "(Multiplying the scores by a 0/1 mask makes the same mistake.)",
        ),
        Misconception(
            AFTER_SOFTMAX_NAME, lambda q, k, v, mask=None: _plain(q, k, v, mask, after=True), AFTER_SOFTMAX_HINT
        ),
        Misconception(
            FINITE_FILL_NAME,
            None,
            FINITE_FILL_HINT,
            # The wrapped learner returns (output, gradients...): the probe reads the output.
            detect=lambda run: attention_blocked_key_gets_weight(lambda *args: run(*args)[0]),
        ),
    ]
    return compare_with_gradients(
        "my scaled dot-product attention",
        learner,
        scaled_dot_product_attention,
        cases,
        misconceptions,
        ATTENTION_OUTPUTS,
        ATTENTION_INPUTS,
        square_cases=square,
        shortcuts=("scaled_dot_product_attention", "MultiheadAttention"),
        verbose=verbose,
    )
