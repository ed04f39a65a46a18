"""Exercise checkers for notebook 01 (Q, K, V by hand).

Each ``check_*`` function runs the learner's function (or reads the learner's prediction) on the teaching
cases and on cases drawn for that answer, and prints (and returns, as a
:class:`~mhsa_helpers.teaching.checking.CheckResult`) one of: correct, not attempted yet, still the original
(the debugging exercise handed back unchanged), or what differs — a known mistake's name follows when the
same mistake comes again, and its fix on request (``result.hint()``, ``result.reveal()``).

The exercises of notebook 01: predict a weight (``check_uniform_prediction``), find the two bugs of
a given function (``check_weights_debug``), and write one attention head
(``check_attention_head``), the first piece of the learner's own implementation.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch

from ... import examples, scaled_dot_product_attention, softmax
from ...teaching.checking import Case, CheckResult, Misconception, check_function, random_tensor
from ...teaching.gradients import compare_with_gradients
from ...teaching.misconceptions import (
    WRONG_AXES_HINT,
    WRONG_AXES_NAME,
    transposed_key_variants,
    wrong_axes_misconceptions,
)
from ...teaching.predictions import check_prediction

__all__ = [
    "check_attention_head",
    "check_uniform_prediction",
    "check_weights_debug",
]


def _constant(value: float) -> Callable[[], float]:
    return lambda: value


def _sizes(generator: torch.Generator, count: int, low: int, high: int) -> list[int]:
    """``count`` whole numbers drawn from ``low`` to ``high`` (both included)."""
    return torch.randint(low, high + 1, (count,), generator=generator).tolist()


#: The name of a score table turned over: K·Qᵀ and W_Q, W_K swapped give the same numbers and gradients.
TRANSPOSED_SCORES_NAME = "score table transposed: K·Qᵀ, or W_Q and W_K swapped"

WRONG_AXES_SYMPTOM = "Your code is right for inputs of one rank and wrong (or raises) for inputs of another."
WRONG_AXES_FIX = "Transpose only the last two axes of k: `k.transpose(-2, -1)` (or `k.mT`)."


# ---------------------------------------------------------------- exercise 1: predict


def uniform_weight() -> float:
    """Head 1 of "Money Bank Grows" with W_K replaced by zeros: the weight of Bank's query on the key of Money."""
    ex = examples.money_bank_grows()
    q, v = ex.embeddings @ ex.w_q[0], ex.embeddings @ ex.w_v[0]
    k = ex.embeddings @ torch.zeros_like(ex.w_k[0])
    _, weights = scaled_dot_product_attention(q, k, v, need_weights=True)
    return float(weights[1, 0])


def check_uniform_prediction(learner: Callable[[], Any], *, verbose: bool = True) -> CheckResult:
    """Prediction: ``learner()`` returns the weight Bank's query gives to Money in head 1 when ``W_K`` is
    all zeros (every key is the zero vector, so every score is 0). Any answer within 0.005 counts."""
    mistakes = [
        Misconception(
            "a score of 0 gives a weight of 0",
            _constant(0.0),
            "The softmax turns a score s into e^s / (sum of e^s), and e^0 = 1, not 0: equal scores, whatever "
            "their value, give equal weights.",
            fix="Each of the three keys gets e^0 = 1 before the division by the row's sum.",
            symptom="Can e to some power be exactly 0?",
        ),
        Misconception(
            "every weight is 1",
            _constant(1.0),
            "e^0 = 1 is each key's share *before* the division by the row's sum: the weights of a row always "
            "add up to 1.",
            fix="Divide each e^0 = 1 by the row's sum, 1 + 1 + 1.",
            symptom="The weights of one row add up to 1, and Bank's row has more than one key.",
        ),
        Misconception(
            "the weights split between two words",
            _constant(0.5),
            "Bank's query meets every key of the sentence, its own included.",
            fix="Count Money, Bank and Grows: three keys share the weight equally.",
            symptom="Count the keys Bank's query is compared with.",
        ),
    ]
    return check_prediction(
        "predict: a weight when every key is zero",
        learner,
        uniform_weight,
        "Bank's weight on Money, head 1, W_K = 0",
        mistakes,
        atol=0.005,
        explain="every key is the zero vector, so every score is 0; each of the three keys gets e^0 = 1, and "
        "each weight is 1 / (1 + 1 + 1) = 1/3",
        verbose=verbose,
    )


# ---------------------------------------------------------------- exercise 2: debug


def handed_out_attention_weights(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """The buggy function notebook 01 hands out, as it is there: ``q (..., seq_q, d_k)``, ``k (..., seq_k, d_k)``
    -> ``(..., seq_q, seq_k)``, divided by d_k and normalised over the queries."""
    scores = q @ k.transpose(-2, -1) / k.shape[-1]
    return torch.softmax(scores, dim=-2)


def _weights(q: torch.Tensor, k_t: torch.Tensor, divide_by: float, dim: int = -1) -> torch.Tensor:
    return softmax(q @ k_t / divide_by, dim=dim)


def _weights_cases() -> tuple:
    g = torch.Generator().manual_seed(111)
    cases = [
        Case((random_tensor(g, 3, 4), random_tensor(g, 5, 4)), description="q (3, 4), k (5, 4)"),
        Case((random_tensor(g, 2, 4, 9), random_tensor(g, 2, 7, 9)), description="batch: q (2, 4, 9), k (2, 7, 9)"),
        Case(
            (random_tensor(g, 2, 3, 1, 16), random_tensor(g, 2, 3, 17, 16)),
            description="batch and heads, one query: q (2, 3, 1, 16), k (2, 3, 17, 16)",
        ),
    ]
    square = [
        Case((random_tensor(g, 3, 3), random_tensor(g, 3, 3)), description="square q, k (3, 3)"),
        Case((random_tensor(g, 3, 3, 3), random_tensor(g, 3, 3, 3)), description="square q, k (3, 3, 3)"),
    ]
    return cases, square


def _draw_weights(generator: torch.Generator) -> list[Case]:
    """Queries and keys of other sizes, with 1, 2, 0 and 1 batch axes in front."""
    cases = []
    for axes in (1, 2, 0, 1):
        batch = _sizes(generator, axes, 2, 4)
        seq_q, seq_k, d_k = _sizes(generator, 3, 2, 9)
        q, k = random_tensor(generator, *batch, seq_q, d_k), random_tensor(generator, *batch, seq_k, d_k)
        cases.append(Case((q, k), description=f"q {tuple(q.shape)}, k {tuple(k.shape)}"))
    return cases


#: What each scale of the debugging exercise shows, means and needs: (symptom, idea, fix); None when right.
_SCALE_BUGS: dict[str, tuple[str, str, str] | None] = {
    "sqrt": None,
    "d_k": (
        "your weights are flatter (closer to uniform) than the reference's, the more so the wider d_k",
        "the scores are still divided by d_k: the spread of q·k grows like √d_k, so √d_k brings them back to "
        "unit scale, while d_k shrinks them too much and flattens the weights",
        "divide the scores by `math.sqrt(q.shape[-1])`, not by `k.shape[-1]`",
    ),
    "none": (
        "your weights are sharper (further from uniform) than the reference's, the more so the wider d_k",
        "the scale is gone altogether: unscaled scores grow like √d_k, and the softmax saturates for wide heads",
        "do not drop the scale, correct it: divide the scores by `math.sqrt(q.shape[-1])`",
    ),
}
_AXIS_FIX = "take the softmax over the keys, the last axis: `torch.softmax(scores, dim=-1)`"
_DIM_BUGS: dict[int, tuple[str, str, str] | None] = {
    -1: None,
    -2: (
        "your columns sum to 1, not your rows",
        "the softmax still runs down each column (over the queries): each query's row shares its attention "
        "among the keys, so each row must sum to 1",
        _AXIS_FIX,
    ),
    0: (
        "your weights sum to 1 along the first axis (across the batch when there is one), not along each row",
        "the softmax runs over the first axis, the batch when there is one: each query's row must sum to 1 over "
        "the keys",
        _AXIS_FIX,
    ),
    1: (
        "your rows sum to 1 only for inputs without a batch axis",
        "the softmax runs over axis 1, which is the key axis only when no batch axis comes first",
        _AXIS_FIX,
    ),
}


def _sentence(parts: list[str]) -> str:
    text = "; and ".join(parts) + "."
    return text[0].upper() + text[1:]


def _debug_misconceptions() -> list[Misconception]:
    """Every mix of the handed-out bugs but the handed-out one itself (that answer is still the original)."""
    divisors: dict[str, Callable[[torch.Tensor], float]] = {
        "sqrt": lambda q: math.sqrt(q.shape[-1]),
        "d_k": lambda q: q.shape[-1],
        "none": lambda q: 1.0,
    }
    misconceptions = []
    for (scale, scale_bug), (dim, dim_bug) in itertools.product(_SCALE_BUGS.items(), _DIM_BUGS.items()):
        bugs = [bug for bug in (scale_bug, dim_bug) if bug]
        if not bugs or (scale, dim) == ("d_k", -2):
            continue
        name = "two bugs" if len(bugs) == 2 else "one bug left: " + ("the scale" if scale_bug else "the softmax's axis")

        def implementation(q: torch.Tensor, k: torch.Tensor, scale: str = scale, dim: int = dim) -> torch.Tensor:
            return _weights(q, k.transpose(-2, -1), divisors[scale](q), dim)

        symptoms, ideas, fixes = zip(*bugs, strict=True)
        misconceptions.append(
            Misconception(
                name,
                implementation,
                _sentence(list(ideas)),
                fix=_sentence(list(fixes)),
                symptom=_sentence(list(symptoms)),
            )
        )
    return misconceptions


def check_weights_debug(learner: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    """Debugging exercise: ``learner(q, k)`` with ``q (..., seq_q, d_k)``, ``k (..., seq_k, d_k)`` must
    return the attention weights ``softmax(q kᵀ / √d_k)`` over the keys, ``(..., seq_q, seq_k)``. The
    notebook hands out :func:`handed_out_attention_weights`, which divides by ``d_k`` and normalises over the
    queries; handed back unchanged it is told so, and a fix of one bug is told what still differs."""
    cases, square = _weights_cases()
    misconceptions = [
        *_debug_misconceptions(),
        *(
            replace(m, symptom=WRONG_AXES_SYMPTOM, fix=WRONG_AXES_FIX)
            for m in wrong_axes_misconceptions(lambda q, k_t: _weights(q, k_t, math.sqrt(q.shape[-1])))
        ),
        Misconception(
            "scaled after the softmax",
            lambda q, k: softmax(q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1]),
            "The scale belongs on the scores, inside the softmax: weights divided afterwards no longer sum to 1.",
            fix="`torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)`.",
            symptom="Your rows sum to 1/√d_k instead of 1.",
        ),
    ]
    return check_function(
        "debug: attention weights",
        learner,
        lambda q, k: softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])),
        cases,
        misconceptions,
        square_cases=square,
        draw=_draw_weights,
        original=handed_out_attention_weights,
        verbose=verbose,
    )


# ---------------------------------------------------------------- exercise 3: one head


HEAD_OUTPUTS = ("output", "weights")
HEAD_INPUTS = ("x", "w_q", "w_k", "w_v")


def attention_head(x: torch.Tensor, w_q: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor) -> tuple:
    """One head in the paper's layout: ``x (..., seq, d_in)``, ``w_q, w_k (d_in, d_k)``, ``w_v (d_in, d_v)``
    -> output ``(..., seq, d_v)`` and weights ``(..., seq, seq)``, through the package's attention."""
    output, weights = scaled_dot_product_attention(x @ w_q, x @ w_k, x @ w_v, need_weights=True)
    return output, weights


def _head(x, w_q, w_k, w_v, *, divide_by=None, dim=-1, layout="paper", key=None, values=None, scores_only=False):
    project = (lambda w: x @ w) if layout == "paper" else (lambda w: x @ w.mT)
    q, k, v = project(w_q), project(w_k), project(w_v)
    k_t = k.transpose(-2, -1) if key is None else key(k)
    scores = q @ k_t / (math.sqrt(q.shape[-1]) if divide_by is None else divide_by(q, v, x))
    weights = softmax(scores, dim=dim)
    output = weights @ (v if values is None else values(x, v))
    return output, (scores if scores_only else weights)


def _head_cases() -> tuple:
    g = torch.Generator().manual_seed(121)
    shapes = [
        ((3, 4), 4, 2, 2, "the notebook's size of problem: x (3, 4), d_k = d_v = 2"),
        ((2, 5, 6), 6, 3, 4, "batch: x (2, 5, 6), d_k = 3, d_v = 4"),
        ((2, 3, 7, 5), 5, 8, 2, "two batch axes: x (2, 3, 7, 5), d_k = 8, d_v = 2"),
        ((1, 6), 6, 4, 3, "one word: x (1, 6)"),
        ((17, 8), 8, 5, 7, "17 words: x (17, 8), d_k = 5, d_v = 7"),
    ]
    cases = [
        Case(
            (
                random_tensor(g, *x),
                random_tensor(g, d_in, d_k),
                random_tensor(g, d_in, d_k),
                random_tensor(g, d_in, d_v),
            ),
            description=text,
        )
        for x, d_in, d_k, d_v, text in shapes
    ]
    square = [
        Case(tuple(random_tensor(g, *s) for s in ((3, 3), (3, 3), (3, 3), (3, 3))), description="square: all (3, 3)"),
        Case(
            tuple(random_tensor(g, *s) for s in ((3, 3, 3), (3, 3), (3, 3), (3, 3))),
            description="square batch: x (3, 3, 3), every W (3, 3)",
        ),
    ]
    return cases, square


def _draw_head(generator: torch.Generator) -> list[Case]:
    """Inputs of other sizes, with 1, 2, 0 and 1 batch axes, and d_in, d_k, d_v drawn apart."""
    cases = []
    for axes in (1, 2, 0, 1):
        batch = _sizes(generator, axes, 2, 4)
        seq, d_in, d_k, d_v = _sizes(generator, 4, 1, 9)
        x = random_tensor(generator, *batch, seq, d_in)
        weights = tuple(random_tensor(generator, d_in, d) for d in (d_k, d_k, d_v))
        cases.append(Case((x, *weights), description=f"x {tuple(x.shape)}, d_k = {d_k}, d_v = {d_v}"))
    return cases


def check_attention_head(learner: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    """Exercise: ``learner(x, w_q, w_k, w_v)`` with ``x (..., seq, d_in)``, ``w_q, w_k (d_in, d_k)`` and
    ``w_v (d_in, d_v)`` in the paper's layout must return ``(output, weights)``: the output
    ``softmax(Q Kᵀ / √d_k) V`` of shape ``(..., seq, d_v)`` and the weights ``(..., seq, seq)``, with
    ``Q = x W_Q``, ``K = x W_K``, ``V = x W_V``. Values and gradients (reaching ``x`` and every ``W``)
    are compared with the package's on batched, odd-sized and one-word cases, and on cases drawn for the
    answer (float32, under ``torch.no_grad()``)."""
    cases, square = _head_cases()
    flatter = "Your weights are flatter (closer to uniform) than the reference's"
    other_scale = f"{flatter} on some cases and sharper on others."
    scale_fix = "Divide the scores by `math.sqrt(q.shape[-1])` before the softmax, as in step 3 of this notebook."
    mistakes = [
        Misconception(
            "no √d_k scaling",
            lambda *a: _head(*a, divide_by=lambda q, v, x: 1.0),
            "The spread of q·k grows like √d_k; unscaled scores saturate the softmax of a wide head.",
            fix=scale_fix,
            symptom="Your weights are sharper (further from uniform) than the reference's, the more so the wider d_k.",
        ),
        Misconception(
            "scaled by d_k instead of √d_k",
            lambda *a: _head(*a, divide_by=lambda q, v, x: q.shape[-1]),
            "The spread of q·k grows like √d_k: dividing by d_k shrinks the scores too much.",
            fix="Divide by the square root of d_k: `math.sqrt(q.shape[-1])`.",
            symptom=f"{flatter}, the more so the wider d_k.",
        ),
        Misconception(
            "scaled by √d_in (the embedding width) instead of √d_k",
            lambda *a: _head(*a, divide_by=lambda q, v, x: math.sqrt(x.shape[-1])),
            "d_k is the width of the head's queries and keys (the width of W_Q's columns), not of the input x.",
            fix="Divide by `math.sqrt(q.shape[-1])`, not by the square root of `x.shape[-1]`.",
            symptom=other_scale,
        ),
        Misconception(
            "scaled by √d_v (the value width) instead of √d_k",
            lambda *a: _head(*a, divide_by=lambda q, v, x: math.sqrt(v.shape[-1])),
            "The scores are dot products of queries and keys; the width of the values plays no part in them.",
            fix="Divide by `math.sqrt(q.shape[-1])`, not by the square root of `v.shape[-1]`.",
            symptom=other_scale,
        ),
        *(
            Misconception(
                name,
                lambda *a, dim=dim: _head(*a, dim=dim),
                f"Each query (a row) shares its attention among the keys, the last axis; {where}.",
                fix="`torch.softmax(scores, dim=-1)`.",
                symptom=symptom,
            )
            for dim, name, where, symptom in (
                (
                    -2,
                    "softmax over the queries axis",
                    "dim=-2 normalises down each column, over the queries",
                    "Your columns sum to 1, not your rows.",
                ),
                (
                    0,
                    "softmax over the wrong axis",
                    "dim=0 normalises over the first axis, the batch when there is one",
                    "Your weights sum to 1 along the first axis, not along each row.",
                ),
                (
                    1,
                    "softmax over the wrong axis",
                    "dim=1 is the key axis only when no batch axis comes first",
                    "Your rows sum to 1 only for inputs without a batch axis.",
                ),
            )
        ),
        Misconception(
            "did not transpose K",
            lambda *a: _head(*a, key=lambda k: k),
            "Score (i, j) is query i · key j, so K is turned on its side before the product.",
            fix="`q @ k.transpose(-2, -1)`.",
            symptom="Your score table is not the table of query i · key j.",
        ),
        *(
            Misconception(
                WRONG_AXES_NAME,
                lambda *a, i=i: _head(*a, key=lambda k: transposed_key_variants(k)[i]),
                WRONG_AXES_HINT,
                fix=WRONG_AXES_FIX,
                symptom=WRONG_AXES_SYMPTOM,
            )
            for i in (0, 2)
        ),
        Misconception(
            "used PyTorch's x·Wᵀ layout on paper (d_in, d_out) matrices",
            lambda *a: _head(*a, layout="torch"),
            "In this notebook W has shape (d_in, d_out) and the product is x @ w; nn.Linear stores the transpose "
            "and computes x @ w.T. With square matrices both run, with different numbers.",
            fix="Project with `x @ w_q`, `x @ w_k` and `x @ w_v`.",
            symptom="Your queries, keys and values are not the reference's, even where every shape fits.",
        ),
        Misconception(
            "returned the scores, not the weights",
            lambda *a: _head(*a, scores_only=True),
            "The second output is the softmax of the scaled scores: every row positive and summing to 1.",
            fix="Return `torch.softmax(scores, dim=-1)` as the second output.",
            symptom="Your second output has negative entries, and its rows do not sum to 1.",
        ),
        Misconception(
            "averaged x instead of V",
            lambda *a: _head(*a, values=lambda x, v: x),
            "The weights average the *values*, V = x @ w_v, not the inputs themselves.",
            fix="`output = weights @ (x @ w_v)`.",
            symptom="Your weights are right, but your output is not the weighted sum of the values.",
        ),
        Misconception(
            TRANSPOSED_SCORES_NAME,
            # K·Qᵀ and W_Q, W_K swapped compute the same numbers, gradients included: no case tells them apart.
            lambda x, w_q, w_k, w_v: _head(x, w_k, w_q, w_v),
            "Score (i, j) is query i · key j, so row i is where word i looks. With K·Qᵀ, or with queries made with "
            "W_K and keys with W_Q (the same numbers), row i holds how much word i is looked at instead.",
            fix="Make the queries with W_Q and the keys with W_K, `q, k = x @ w_q, x @ w_k`, and put the queries "
            "first: `q @ k.transpose(-2, -1)`.",
            symptom="Your scores are the reference's scores transposed (before the softmax).",
        ),
        Misconception(
            "returned (weights, output) in the wrong order",
            lambda *a: _head(*a)[::-1],
            "The exercise asks for the output first, then the weights.",
            fix="`return output, weights`.",
            symptom="Your first output holds the numbers of the weights, and your second those of the output.",
        ),
    ]
    return compare_with_gradients(
        "one attention head",
        learner,
        attention_head,
        cases,
        mistakes,
        HEAD_OUTPUTS,
        HEAD_INPUTS,
        square_cases=square,
        shortcuts=("scaled_dot_product_attention", "attention_scores"),
        draw=_draw_head,
        verbose=verbose,
    )
