"""Exercise checkers for notebook 02 (scaled dot-product attention): a prediction of how the scores
grow with d_k, the stable softmax (a debugging exercise), and the learner's own scaled dot-product
attention with an optional boolean mask, the second piece of their implementation.

Each checker runs the learner's function on the teaching cases and on cases drawn for that answer; a wrong
answer is told what differs first, the name of its mistake when the same mistake comes again, and the fix
on request (``result.hint()``, ``result.reveal()``)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import replace
from typing import Any, cast

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
from ...teaching.predictions import check_prediction

__all__ = ["check_my_attention", "check_softmax", "check_spread_prediction"]


def _sizes(generator: torch.Generator, count: int, low: int, high: int) -> list[int]:
    """``count`` whole numbers drawn from ``low`` to ``high`` (both included)."""
    return torch.randint(low, high + 1, (count,), generator=generator).tolist()


# ---------------------------------------------------------------- predict: how the scores grow


def spread_growth() -> float:
    """By what factor the standard deviation of ``q · k`` grows from d_k = 64 to d_k = 256, for entries of
    mean 0 and variance 1: ``√(256 / 64)``."""
    return math.sqrt(256 / 64)


def check_spread_prediction(learner: Callable[[], Any], *, verbose: bool = True) -> CheckResult:
    """Prediction: ``learner()`` returns the factor by which the typical size (standard deviation) of an
    unscaled score ``q · k`` grows when d_k goes from 64 to 256 (unit-variance entries). Within 2%: 0.04."""
    mistakes = [
        Misconception(
            "confused the spread with the variance",
            lambda: 4.0,
            "The *variance* of q·k is d_k, so it grows 4 times; the typical size of a score is its standard "
            "deviation, the square root of the variance.",
            fix="√4 = 2.",
            symptom="Four times as many terms do not make a sum four times as wide when the terms' signs are random.",
        ),
        Misconception(
            "the scores do not grow",
            lambda: 1.0,
            "q·k adds up d_k products of mean 0 and variance 1: four times as many terms, four times the variance.",
            fix="The variance grows 4 times, the standard deviation √4 = 2 times.",
            symptom="q·k adds up d_k products: with four times as many terms, the sum spreads wider.",
        ),
        Misconception(
            "grows with d_k squared",
            lambda: 16.0,
            "Independent terms add their variances: d_k terms give variance d_k (not d_k²), spread √d_k.",
            fix="√(256 / 64) = 2.",
            symptom="The spread of a sum of independent terms grows more slowly than the number of terms, not faster.",
        ),
    ]
    return check_prediction(
        "predict: how the scores grow",
        learner,
        spread_growth,
        "std of q·k at d_k = 256 divided by its std at d_k = 64",
        mistakes,
        atol=0.04,
        explain="the variance of q·k is d_k (a sum of d_k independent products of variance 1), so its standard "
        "deviation is √d_k, and √256 / √64 = 16 / 8 = 2",
        verbose=verbose,
    )


# ---------------------------------------------------------------- softmax (a debugging exercise)


def handed_out_stable_softmax(x: torch.Tensor) -> torch.Tensor:
    """The buggy softmax notebook 02 hands out, as it is there: ``x (..., n)`` -> ``(..., n)``, shifted by one
    global max and divided by the sum of the whole tensor."""
    e = torch.exp(x - x.max())
    return e / e.sum()


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


def _draw_softmax(generator: torch.Generator) -> list[Case]:
    """Rows of other lengths, with 1, 3, 2 and 1 leading axes, each row shifted by a random amount. Only a few
    dozen apart, so that float32 and float64 overflow and underflow alike: a known mistake is told by the same
    numbers in both (the teaching cases hold the far rows)."""
    cases = []
    for axes in (1, 3, 2, 1):
        leading, n = _sizes(generator, axes, 2, 4), _sizes(generator, 1, 2, 9)[0]
        x = random_tensor(generator, *leading, n, scale=3.0) + random_tensor(generator, *leading, 1, scale=5.0)
        cases.append(Case((x,), description=f"x {tuple(x.shape)}, each row shifted by a random amount"))
    return cases


def check_softmax(learner: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    """Exercise: ``learner(x)`` must return the numerically stable softmax of ``x (..., n)``
    along the last axis (same shape; each row sums to 1; no overflow for large inputs). The notebook hands
    out :func:`handed_out_stable_softmax`; handed back unchanged it is told so, and a fix of one bug is told
    what still differs."""
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

    def naive(x: torch.Tensor) -> torch.Tensor:
        e = torch.exp(x)
        return e / e.sum(dim=-1, keepdim=True)

    def no_keepdim(x: torch.Tensor) -> torch.Tensor:
        e = torch.exp(x - x.amax(dim=-1, keepdim=True))
        return e / e.sum(dim=-1)

    def shifted(x: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
        e = torch.exp(x - shift)
        return e / e.sum(dim=-1, keepdim=True)

    row_max = "Subtract each row's maximum: `x - x.amax(dim=-1, keepdim=True)`."
    axis = "Take the max and the sum over the last axis, each row's own: `dim=-1` with `keepdim=True`."
    far_apart = "Your rows whose entries lie far apart (like [1000, 0, 0, 0]) come out as NaN."
    misconceptions = [
        *(
            Misconception(
                "softmax over the wrong dimension",
                lambda x, dim=dim: softmax(x, dim=dim),
                f"Attention normalises each row over the last axis; {where}.",
                fix=axis,
                symptom=symptom,
            )
            for dim, where, symptom in (
                (-2, "dim=-2 normalises down each column", "Your columns sum to 1, not your rows."),
                (
                    0,
                    "dim=0 normalises over the first axis",
                    "Your values sum to 1 along the first axis, not along each row.",
                ),
                (
                    1,
                    "dim=1 is the last axis only when there is no batch axis in front",
                    "Your rows sum to 1 only for inputs with exactly two axes.",
                ),
            )
        ),
        Misconception(
            "subtracted the row's minimum instead of its maximum",
            lambda x: shifted(x, x.amin(dim=-1, keepdim=True)),
            "Any shift leaves the softmax unchanged, but only the maximum keeps every exponent <= 0: on a row "
            "like [1000, 0], x - min is [1000, 0] again and exp(1000) overflows to inf (inf/inf = NaN).",
            fix=row_max,
            symptom=far_apart,
        ),
        Misconception(
            "subtracted the row's mean instead of its maximum",
            lambda x: shifted(x, x.mean(dim=-1, keepdim=True)),
            "Any shift leaves the softmax unchanged, but only the maximum keeps every exponent <= 0: on a row "
            "like [1000, 0, 0, 0] the mean is 250, x - mean still holds 750, and exp(750) overflows to inf.",
            fix=row_max,
            symptom=far_apart,
        ),
        Misconception(
            "normalised by the sum without exp",
            lambda x: x / x.sum(dim=-1, keepdim=True),
            "Dividing the scores by their sum is not a softmax: negative scores give negative weights.",
            fix="Exponentiate first (after subtracting the row's max), then divide by the sum of the exps.",
            symptom="Some of your weights are negative.",
        ),
        Misconception(
            "took the max without keepdim=True",
            lambda x: shifted(x, x.amax(dim=-1)),
            "For x of shape (..., n), x.max(dim=-1).values has shape (...), the last axis dropped, so x - max lines "
            "each row's max up with the *columns*.",
            fix="Keep the axis: `x.amax(dim=-1, keepdim=True)`, of shape (..., 1).",
            symptom="Your rows sum to 1, but their weights are not the reference's; where the number of rows "
            "differs from a row's length, your code raises.",
        ),
        Misconception(
            "did not subtract the row's max",
            naive,
            "exp(1000) is inf in float64 (and exp(89) already in float32), and inf/inf is NaN; "
            "softmax(x - c) == softmax(x) for any shift c, so a shift costs nothing.",
            fix=f"{row_max} The largest exponent becomes exp(0) = 1.",
            symptom="Your rows near +1000 or near -1000 come out as NaN.",
        ),
        Misconception(
            "subtracted one global max instead of each row's max",
            global_max,
            "x.max() is one number for the whole tensor: a row far below it underflows to all zeros, and 0 / 0 is NaN.",
            fix="`x.amax(dim=-1, keepdim=True)`: one max per row.",
            symptom="A row far below the tensor's largest entry comes out as NaN.",
        ),
        Misconception(
            "summed over the whole tensor (forgot dim=-1 in the sum)",
            whole_sum_stable,
            "e.sum() adds up every entry of the tensor, not each row's own.",
            fix="`e.sum(dim=-1, keepdim=True)`.",
            symptom="Your rows do not sum to 1: the whole tensor does.",
        ),
        Misconception(
            "summed over the whole tensor (forgot dim=-1 in the sum)",
            whole_sum_naive,
            "e.sum() adds up every entry of the tensor, not each row's own; and exp of a large entry overflows.",
            fix=f"`e.sum(dim=-1, keepdim=True)`; and {row_max[0].lower()}{row_max[1:]}",
            symptom="Your rows do not sum to 1 (the whole tensor does), and large inputs give NaN.",
        ),
        Misconception(
            "summed without keepdim=True (the row sums broadcast along the wrong axis)",
            no_keepdim,
            "e.sum(dim=-1) drops the summed axis, so dividing lines the row sums up with the columns.",
            fix="`e.sum(dim=-1, keepdim=True)` keeps the shape (..., 1), so each row is divided by its own sum.",
            symptom="Your rows do not sum to 1; where the number of rows differs from a row's length, your code "
            "raises.",
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
        draw=_draw_softmax,
        original=handed_out_stable_softmax,
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


def _draw_attention(generator: torch.Generator) -> list[Case]:
    """Four cases of other sizes: no mask over a batch; a (seq_q, seq_k) mask over batch and heads; a padding
    mask (batch, 1, 1, seq_k); a mask per batch element. No mask blocks a whole row."""
    cases = []
    for kind in ("no mask", "shared mask", "padding mask", "mask"):
        batch = _sizes(generator, 2 if kind in ("shared mask", "padding mask") else 1, 2, 3)
        (seq_k,), (seq_q, d_k, d_v) = _sizes(generator, 1, 2, 8), _sizes(generator, 3, 1, 7)
        q, k, v = (random_tensor(generator, *batch, s, d) for s, d in ((seq_q, d_k), (seq_k, d_k), (seq_k, d_v)))
        mask = {
            "no mask": None,
            "shared mask": random_mask(generator, seq_q, seq_k),
            "padding mask": torch.arange(seq_k) < torch.randint(1, seq_k, (batch[0], 1, 1, 1), generator=generator),
            "mask": random_mask(generator, *batch, seq_q, seq_k),
        }[kind]
        shapes = f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
        if mask is None:
            cases.append(Case((q, k, v), description=shapes))
        else:
            cases.append(Case((q, k, v, mask), description=f"{shapes}, {kind} {tuple(mask.shape)}"))
    return cases


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


def _blocked_key_gets_weight(run: Callable[..., Any]) -> bool:
    """The shared probe of a blocked key through attention (visible keys scoring -1e35, a blocked one 0), taken
    as evidence only when the answer attends right to the two visible keys alone: an answer wrong for another
    reason (a softmax over the queries, say) is not told this. ``run`` is the learner wrapped by
    :func:`~mhsa_helpers.teaching.gradients.with_gradients`: the output comes first."""

    def output(*args: Any) -> Any:
        return run(*args)[0]

    q = torch.tensor([[1e17]], dtype=torch.float64)
    k, v = torch.full((2, 1), -1e18, dtype=torch.float64), torch.ones(2, 1, dtype=torch.float64)
    alone = torch.as_tensor(output(q, k, v)).double()
    return bool(torch.isclose(alone, torch.ones_like(alone)).all()) and attention_blocked_key_gets_weight(output)


def check_my_attention(learner: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    """Exercise: ``learner(q, k, v, mask=None)`` with ``q (..., seq_q, d_k)``, ``k (..., seq_k, d_k)``,
    ``v (..., seq_k, d_v)`` and an optional boolean ``mask`` broadcastable to ``(..., seq_q, seq_k)``
    (``True`` = may attend) must return ``softmax(q kᵀ / √d_k, blocked -> -inf) v`` of shape
    ``(..., seq_q, d_v)``, like the package's :func:`~mhsa_helpers.scaled_dot_product_attention`. Values
    and the gradients reaching q, k and v are compared, on cases with and without masks, batches and
    heads, seq_q ≠ seq_k and d_k ≠ d_v, and on cases drawn for the answer. No mask blocks a whole row. Every
    answer must also give a blocked key no weight at all, however far below it the visible keys score."""
    cases, square = _attention_cases()
    divide = "Divide the scores by `math.sqrt(q.shape[-1])` before the softmax"
    fill = "Fill the blocked scores with -inf before the softmax: `scores.masked_fill(~mask, float('-inf'))`."
    spread = "The spread of a dot product grows with the length of the vectors, d_k"
    other_scale = "Your weights are flatter (closer to uniform) than the reference's on some cases, sharper on others."
    misconceptions = [
        Misconception(
            "no √d_k scaling",
            lambda q, k, v, mask=None: _plain(q, k, v, mask, divide_by=1.0),
            f"{spread}: without dividing by √d_k, a wide head pushes the softmax into saturation.",
            fix=f"{divide}.",
            symptom="Your weights are sharper (further from uniform) than the reference's, the more so the wider d_k.",
        ),
        Misconception(
            "scaled by d_k instead of √d_k",
            lambda q, k, v, mask=None: _plain(q, k, v, mask, divide_by=q.shape[-1]),
            f"{spread}, like √d_k: dividing by d_k shrinks the scores too much and flattens the weights.",
            fix=f"{divide}, not by d_k.",
            symptom="Your weights are flatter (closer to uniform) than the reference's, the more so the wider d_k.",
        ),
        Misconception(
            "scaled by √seq_k (the number of keys) instead of √d_k",
            lambda q, k, v, mask=None: _plain(q, k, v, mask, divide_by=math.sqrt(k.shape[-2])),
            f"{spread}, not with the number of keys.",
            fix=f"{divide}, not by the square root of `k.shape[-2]`.",
            symptom=other_scale,
        ),
        Misconception(
            "scaled by √d_v (the value width) instead of √d_k",
            lambda q, k, v, mask=None: _plain(q, k, v, mask, divide_by=math.sqrt(v.shape[-1])),
            "The scores are dot products of d_k-wide queries and keys; the value width plays no part in them.",
            fix=f"{divide}, not by the square root of `v.shape[-1]`.",
            symptom=other_scale,
        ),
        Misconception(
            "multiplied by √d_k instead of dividing",
            lambda q, k, v, mask=None: _plain(q, k, v, mask, divide_by=1 / math.sqrt(q.shape[-1])),
            "The scale 1/√d_k shrinks the scores; multiplying by √d_k grows them instead.",
            fix=f"{divide}.",
            symptom="Your weights are much sharper than the reference's, the more so the wider d_k.",
        ),
        *(
            Misconception(
                "softmax over the wrong dimension",
                lambda q, k, v, mask=None, dim=dim: _plain(q, k, v, mask, dim=dim),
                "Each query (row) distributes its attention over the keys, the last axis; a softmax over another "
                "axis normalises the wrong numbers.",
                fix="`torch.softmax(scores, dim=-1)`.",
                symptom="Your weights do not sum to 1 over the keys of each query.",
            )
            for dim in (-2, 0, 1)
        ),
        Misconception(
            "did not transpose K",
            lambda q, k, v, mask=None: _attend(q, k, v, mask),
            "Score (i, j) is query i · key j, so K is turned on its side before the product.",
            fix="`q @ k.transpose(-2, -1)`.",
            symptom="Your score table is not the table of query i · key j.",
        ),
        *(
            replace(
                m,
                fix="Transpose only the last two axes of k: `k.transpose(-2, -1)` (or `k.mT`).",
                symptom="Your code is right for inputs of one rank and wrong (or raises) for inputs of another.",
            )
            for m in wrong_axes_misconceptions(_attend)
        ),
        Misconception(
            "scaled after the softmax",
            # weights / √d_k @ v and (weights @ v) / √d_k are the same numbers.
            lambda q, k, v, mask=None: _plain(q, k, v * (1 / math.sqrt(q.shape[-1])), mask, divide_by=1.0),
            "The scale belongs inside the softmax, on the scores: after it, the softmax has already seen the unscaled "
            "scores (too sharp for a wide head), and the weights divided afterwards sum to 1/√d_k, not 1.",
            fix="Divide the scores, not the weights or the output: "
            "`torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ v`.",
            symptom="Your output is shrunk towards zero, the more so the wider d_k, and no single factor turns it "
            "into the reference's.",
        ),
        Misconception(
            "divided by √d_k twice: the scores, and the weights or the output",
            lambda q, k, v, mask=None: _plain(q, k, v * (1 / math.sqrt(q.shape[-1])), mask),
            "The scores are divided by √d_k once, before the softmax; a second division after it shrinks every "
            "output, and the weights then sum to 1/√d_k, not 1.",
            fix="Keep the division of the scores and drop the one after the softmax: "
            "`torch.softmax(scores, dim=-1) @ v`.",
            symptom="Your output is the reference's times one factor smaller than 1, the smaller the wider d_k.",
        ),
        Misconception(
            "applied the softmax after multiplying by V",
            lambda q, k, v, mask=None: torch.softmax(_masked_scores(q, k, mask) @ v, dim=-1),
            "The softmax turns the scores into weights; the output is those weights times V.",
            fix="`torch.softmax(scores, dim=-1) @ v`.",
            symptom="Every row of your output is positive and sums to 1.",
        ),
        Misconception(
            "reshaped K instead of transposing it",
            lambda q, k, v, mask=None: _attend(q, k.reshape(*k.shape[:-2], k.shape[-1], k.shape[-2]), v, mask),
            "k.reshape(..., d_k, seq_k) has the shape of Kᵀ but reads the numbers in the wrong order: it is not Kᵀ.",
            fix="Swap the two axes: `k.transpose(-2, -1)` (or `k.mT`).",
            symptom="Your score table has the right shape, but it is not the table of query i · key j.",
        ),
        Misconception(
            "returned the weights instead of weights @ V",
            lambda q, k, v, mask=None: _plain(q, k, torch.eye(k.shape[-2], dtype=q.dtype), mask),
            "The output mixes the values with the weights: one row of d_v numbers per query.",
            fix="`return weights @ v`, of shape (..., seq_q, d_v).",
            symptom="Your output has one column per key, not one per feature of the values.",
        ),
        *(
            Misconception(
                POLARITY_NAME,
                implementation,
                POLARITY_HINT,
                fix="Fill where the mask is False: `scores.masked_fill(~mask, float('-inf'))`.",
                symptom="With a mask, your weights go to the keys it blocks, and none to those it allows.",
            )
            for implementation in (
                lambda q, k, v, mask=None: _plain(q, k, v, None if mask is None else ~mask),
                # What PyTorch's F.scaled_dot_product_attention (and the package) give for ~mask: zeros, not NaN,
                # for the rows the inverted mask blocks entirely.
                lambda q, k, v, mask=None: scaled_dot_product_attention(q, k, v, None if mask is None else ~mask),
            )
        ),
        Misconception(
            "the mask was not used",
            lambda q, k, v, mask=None: _plain(q, k, v),
            "The mask says which keys each query may see: the blocked scores must be removed before the softmax.",
            fix="When a mask is given, fill them with -inf: `scores.masked_fill(~mask, float('-inf'))`.",
            symptom="Your output is right in every case without a mask and wrong in every case with one.",
        ),
        Misconception(
            "blocked scores set to 0 instead of -inf",
            lambda q, k, v, mask=None: _plain(q, k, v, mask, fill=0.0),
            "A score of 0 still gets weight exp(0) = 1 relative to the others; only -inf gives exp(-inf) = 0. "
            "(Multiplying the scores by a 0/1 mask makes the same mistake.)",
            fix=fill,
            symptom="Your output still draws on the keys the mask blocks.",
        ),
        Misconception(
            AFTER_SOFTMAX_NAME,
            lambda q, k, v, mask=None: _plain(q, k, v, mask, after=True),
            AFTER_SOFTMAX_HINT,
            fix=fill,
            symptom="Blocked keys get weight 0, but the weights of a query sum to less than 1.",
        ),
        Misconception(
            FINITE_FILL_NAME,
            None,
            FINITE_FILL_HINT,
            detect=_blocked_key_gets_weight,
            fix=fill,
            symptom="A blocked key still takes weight when the visible keys score far below it (near -1e35).",
            always=True,
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
        draw=_draw_attention,
        verbose=verbose,
    )


# ---------------------------------------------------------------- cross-attention with the learner's attention


CROSS_INPUTS = ("x", "memory", "w_q", "w_k", "w_v")


def cross_attention(
    x: torch.Tensor,
    memory: torch.Tensor,
    w_q: torch.Tensor,
    w_k: torch.Tensor,
    w_v: torch.Tensor,
    memory_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """The reference of the cross-attention exercise: ``x (batch, seq_q, d_x)`` asks, ``memory (batch, seq_m, d_m)``
    answers, ``w_q (d_x, d_k)``, ``w_k (d_m, d_k)``, ``w_v (d_m, d_v)`` in the paper's layout, ``memory_mask``
    broadcastable to the scores ``(batch, seq_q, seq_m)`` (``True`` = may be seen) -> ``(batch, seq_q, d_v)``."""
    return cast(torch.Tensor, scaled_dot_product_attention(x @ w_q, memory @ w_k, memory @ w_v, memory_mask))


def _padding(lengths: list[int], seq_m: int) -> torch.Tensor:
    """``(batch, 1, seq_m)``: True before each sequence's length, the memory's padding after it."""
    return (torch.arange(seq_m) < torch.tensor(lengths)[:, None])[:, None, :]


def _cross_case(
    generator: torch.Generator,
    batch: int,
    seq_q: int,
    seq_m: int,
    d_x: int,
    d_m: int,
    d_k: int,
    d_v: int,
    mask: torch.Tensor | None,
) -> Case:
    x, memory = random_tensor(generator, batch, seq_q, d_x), random_tensor(generator, batch, seq_m, d_m)
    weights = tuple(random_tensor(generator, d_in, d_out) for d_in, d_out in ((d_x, d_k), (d_m, d_k), (d_m, d_v)))
    widths = f"d_x = d_m = {d_x}" if d_x == d_m else f"d_x = {d_x}, d_m = {d_m}"
    shapes = f"x {tuple(x.shape)}, memory {tuple(memory.shape)}: {widths}, d_k = {d_k}, d_v = {d_v}"
    if mask is None:
        return Case((x, memory, *weights), description=shapes)
    return Case((x, memory, *weights, mask), description=f"{shapes}, memory_mask {tuple(mask.shape)}")


def _cross_cases() -> tuple:
    g = torch.Generator().manual_seed(511)
    # seq_q ≠ seq_m everywhere, so a swap of x and memory, or a mask laid along the queries, gives another shape or
    # raises; no two other axes of a case have the same length, but for the two cases with d_x = d_m, where a swap
    # of the inputs runs.
    cases = [
        _cross_case(g, 2, 3, 6, 5, 4, 7, 8, None),
        _cross_case(g, 3, 4, 7, 6, 5, 8, 2, _padding([6, 4, 2], 7)),
        _cross_case(g, 2, 4, 9, 6, 6, 3, 5, None),
        _cross_case(g, 3, 2, 5, 4, 4, 6, 7, random_mask(g, 3, 1, 5)),
        _cross_case(g, 2, 1, 8, 3, 5, 4, 6, None),
        # memory shorter than the queries, and one mask shared by the whole batch
        _cross_case(g, 2, 5, 3, 4, 7, 6, 8, torch.tensor([True, False, True])),
    ]
    cases[4] = replace(cases[4], description=f"one query: {cases[4].description}")
    cases[5] = replace(cases[5], description=f"{cases[5].description} shared by the batch")
    square = [
        Case(random_tensors((3, 3, 3), (3, 3, 3), (3, 3), (3, 3), (3, 3), seed=512), description="square inputs"),
        Case(
            (*random_tensors((3, 3, 3), (3, 3, 3), (3, 3), (3, 3), (3, 3), seed=513), _padding([3, 2, 1], 3)),
            description="square inputs with a memory_mask (3, 1, 3)",
        ),
    ]
    return cases, square


def _draw_cross(generator: torch.Generator) -> list[Case]:
    """Four cases of other sizes, seq_q ≠ seq_m in each: two without a mask (one with d_x = d_m), one with a padding
    mask (d_x = d_m) and one with a random mask. A mask keeps at least one memory position of each sequence visible
    and one blocked."""
    cases = []
    for kind, same_width in (("no mask", False), ("padding mask", True), ("mask", False), ("no mask", True)):
        batch, seq_q, seq_m = _sizes(generator, 1, 1, 3)[0], *_sizes(generator, 2, 2, 7)
        seq_m += seq_m == seq_q
        d_x, d_m, d_k, d_v = _sizes(generator, 4, 1, 7)
        d_m = d_x if same_width else d_m + (d_m == d_x)
        mask = {
            "no mask": None,
            "padding mask": _padding(_sizes(generator, batch, 1, seq_m - 1), seq_m),
            "mask": random_mask(generator, batch, 1, seq_m),
        }[kind]
        cases.append(_cross_case(generator, batch, seq_q, seq_m, d_x, d_m, d_k, d_v, mask))
    return cases


def _attend_plainly(q, k, v, mask=None):
    # As a learner's attention computes it: a query that the mask leaves with no key at all gets NaN.
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def _along_the_queries(mask: torch.Tensor | None) -> torch.Tensor | None:
    return None if mask is None else mask.transpose(-2, -1)


#: Said after a shape error: the inputs differ in length and may differ in width, and the scores have one shape.
SHAPE_ERROR_ADVICE = (
    "In cross-attention x and memory have lengths of their own (seq_q, seq_m) and may have widths of their own "
    "(d_x, d_m): follow each through your lines, writing down the shape each step gives. The scores must come out "
    "(batch, seq_q, seq_m), one row per query, one column per memory position."
)


def _shape_error(message: str) -> bool:
    """Whether the learner's code raised an error about sizes, shapes or axes (told in ``message``)."""
    raised = re.search(r"raised (?:RuntimeError|IndexError|ValueError): (.*?)It was called with", message, re.DOTALL)
    return raised is not None and any(
        word in raised[1].lower() for word in ("size", "shape", "dimension", "cannot be multiplied")
    )


def _with_shape_advice(result: CheckResult) -> CheckResult:
    """The result, with :data:`SHAPE_ERROR_ADVICE` after a shape error in what the learner is told."""
    told = "check which shapes your code assumes."
    if not _shape_error(result.message) or told not in result.message:
        return result
    return replace(
        result,
        message=result.message.replace(told, f"{told} {SHAPE_ERROR_ADVICE}", 1),
        symptom=result.symptom.replace(told, f"{told} {SHAPE_ERROR_ADVICE}", 1),
    )


def check_cross_attention(learner: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    """Exercise: ``learner(x, memory, w_q, w_k, w_v, memory_mask=None)`` with ``x (batch, seq_q, d_x)`` (the
    words that ask), ``memory (batch, seq_m, d_m)`` (the words that answer), ``w_q (d_x, d_k)``, ``w_k (d_m, d_k)``,
    ``w_v (d_m, d_v)`` and an optional boolean ``memory_mask`` broadcastable to the scores
    ``(batch, seq_q, seq_m)`` (``True`` = may be seen) must return ``(batch, seq_q, d_v)``: the learner's own
    attention of ``x W_Q`` over ``memory W_K`` and ``memory W_V`` (:func:`cross_attention`). Values and the
    gradients reaching the inputs and the weights are compared on cases where seq_q ≠ seq_m, d_x ≠ d_m or
    d_x = d_m, with padding masks, random masks and one mask shared by the batch, and on cases drawn for the
    answer. A shape error is told what to follow; a swap that raises is named on square inputs."""
    cases, square = _cross_cases()
    asks = "x holds the words that ask, the memory the words that answer"
    misconceptions = [
        *(
            Misconception(
                "queries taken from the memory",
                implementation,
                f"The queries are the asking side: {asks}. The output has one row per query, seq_q rows, whatever "
                "the memory's length.",
                fix="`q = x @ w_q`; the keys and the values come from the memory.",
                symptom="Your output has one row per memory position, not one per row of x.",
            )
            for implementation in (
                lambda x, memory, w_q, w_k, w_v, mask=None: cross_attention(memory, x, w_q, w_k, w_v, mask),
                lambda x, memory, w_q, w_k, w_v, mask=None: cross_attention(memory, memory, w_q, w_k, w_v, mask),
            )
        ),
        *(
            Misconception(
                "keys and values taken from different inputs",
                implementation,
                "A query's weights are one per key, and each multiplies the value at the same position: the keys "
                f"and the values are the same words, those that answer ({asks}).",
                fix="`k = memory @ w_k` and `v = memory @ w_v`: both from the memory.",
                symptom="Your score table has one column per row of x, or your weights meet values of another length.",
            )
            for implementation in (
                lambda x, memory, w_q, w_k, w_v, mask=None: scaled_dot_product_attention(
                    x @ w_q, x @ w_k, memory @ w_v, mask
                ),
                lambda x, memory, w_q, w_k, w_v, mask=None: scaled_dot_product_attention(
                    x @ w_q, memory @ w_k, x @ w_v, mask
                ),
            )
        ),
        Misconception(
            "keys and values taken from x (self-attention on x)",
            lambda x, memory, w_q, w_k, w_v, mask=None: cross_attention(x, x, w_q, w_k, w_v, mask),
            f"That is self-attention: x answers its own questions and the memory plays no part. In cross-attention "
            f"{asks}: the keys and values come from the memory.",
            fix="`k = memory @ w_k` and `v = memory @ w_v`.",
            symptom="Your output does not depend on the memory at all.",
        ),
        Misconception(
            POLARITY_NAME,
            lambda x, memory, w_q, w_k, w_v, mask=None: cross_attention(
                x, memory, w_q, w_k, w_v, None if mask is None else ~mask
            ),
            "memory_mask is True where a memory position may be seen, as the mask of your attention is: "
            "inverted, it hides the positions it should show and shows those it should hide.",
            fix="Pass `memory_mask` on as it is, without `~`.",
            symptom="With a mask, your output draws on the memory positions it blocks, and on none it allows.",
        ),
        Misconception(
            "the memory mask was not used",
            lambda x, memory, w_q, w_k, w_v, mask=None: cross_attention(x, memory, w_q, w_k, w_v),
            "memory_mask says which memory positions the queries may see (the padding of a shorter memory, say): "
            "your attention must be given it, or every query also weighs the padding.",
            fix="Give it to your attention: `my_scaled_dot_product_attention(q, k, v, memory_mask)`.",
            symptom="Your output is right in every case without a mask and wrong in every case with one.",
        ),
        *(
            Misconception(
                "the mask laid along the queries' axis",
                implementation,
                "The scores are (batch, seq_q, seq_m): the memory positions are their last axis, and so are the "
                "mask's. Its axis of length 1 stands for the queries, so that one row of the mask serves every "
                "query; turned on its side, it blocks whole queries instead of memory positions.",
                fix="Pass `memory_mask` on as it is: `(batch, 1, seq_m)` broadcasts against `(batch, seq_q, seq_m)`.",
                symptom="With a mask, your code blocks whole queries rather than memory positions.",
            )
            for implementation in (
                lambda x, memory, w_q, w_k, w_v, mask=None: _attend_plainly(
                    x @ w_q, memory @ w_k, memory @ w_v, _along_the_queries(mask)
                ),
                # What PyTorch's F.scaled_dot_product_attention and the package give a query with no key: zeros.
                lambda x, memory, w_q, w_k, w_v, mask=None: cross_attention(
                    x, memory, w_q, w_k, w_v, _along_the_queries(mask)
                ),
            )
        ),
    ]
    result = compare_with_gradients(
        "cross-attention with your own attention",
        learner,
        cross_attention,
        cases,
        misconceptions,
        ATTENTION_OUTPUTS,
        CROSS_INPUTS,
        square_cases=square,
        shortcuts=("scaled_dot_product_attention", "MultiheadAttention"),
        draw=_draw_cross,
        verbose=False,
    )
    result = _with_shape_advice(result)
    if verbose:
        print(result.message)
    return result
