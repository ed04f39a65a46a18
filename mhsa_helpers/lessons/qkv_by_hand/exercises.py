"""Exercise checkers for notebook 01 (Q, K, V by hand), and what the checkers of notebooks 02 and 03
share with them: the wrong transpositions of K, and :func:`with_gradients`, which makes a checker
compare gradients as well as values.

Each ``check_*`` function runs the learner's function (or reads the learner's prediction) on
generated cases and prints (and returns, as a :class:`~mhsa_helpers.teaching.checking.CheckResult`)
one of: correct, not attempted yet, the name of the mistake the answer matches, or a plain
"differs from the reference" / "raised ..." message.

The exercises of notebook 01: predict a weight (``check_uniform_prediction``), find the two bugs of
a given function (``check_weights_debug``), and write one attention head
(``check_attention_head``), the first piece of the learner's own implementation.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
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

__all__ = [
    "check_attention_head",
    "check_uniform_prediction",
    "check_weights_debug",
]


def _constant(value: float) -> Callable[[], float]:
    return lambda: value


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
    misconceptions = [
        Misconception(
            "a score of 0 gives a weight of 0",
            _constant(0.0),
            "The softmax turns a score s into e^s / (sum of e^s), and e^0 = 1, not 0: equal scores, whatever "
            "their value, give equal weights. Three keys share the weight 1.",
        ),
        Misconception(
            "every weight is 1",
            _constant(1.0),
            "Each weight is e^0 = 1 *before* dividing by the row's sum, 1 + 1 + 1 = 3: the weights of a row "
            "always add up to 1.",
        ),
        Misconception(
            "the weights split between two words",
            _constant(0.5),
            "Bank's query meets every key of the sentence, its own included: three keys, not two.",
        ),
    ]
    return check_function(
        "predict: a weight when every key is zero",
        learner,
        uniform_weight,
        [Case((), description="Bank's weight on Money, head 1, W_K = 0")],
        misconceptions,
        atol=0.005,
        rtol=0.0,
        verbose=verbose,
    )


# ---------------------------------------------------------------- exercise 2: debug


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


_SCALE_BUGS = {
    "sqrt": None,
    "d_k": "it still divides by d_k instead of √d_k (the spread of q·k grows like √d_k, and dividing by d_k "
    "flattens the weights)",
    "none": "the scaling is gone: divide the scores by √d_k = math.sqrt(q.shape[-1]), do not drop it",
}
_DIM_BUGS = {
    -1: None,
    -2: "the softmax still runs down each column (dim=-2, over the queries): each query's row must sum to 1 over "
    "the keys, dim=-1",
    0: "the softmax runs over dim=0, the first axis (the batch when there is one): use dim=-1, the keys",
    1: "the softmax runs over dim=1, the key axis only when there is no batch axis in front: use dim=-1",
}


def check_weights_debug(learner: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    """Debugging exercise: ``learner(q, k)`` with ``q (..., seq_q, d_k)``, ``k (..., seq_k, d_k)`` must
    return the attention weights ``softmax(q kᵀ / √d_k)`` over the keys, ``(..., seq_q, seq_k)``. The
    notebook hands out a version that divides by ``d_k`` and normalises over the queries; the checker
    names whichever of those bugs (or a new one) is still there."""
    cases, square = _weights_cases()
    divisors: dict[str, Callable[[torch.Tensor], float]] = {
        "sqrt": lambda q: math.sqrt(q.shape[-1]),
        "d_k": lambda q: q.shape[-1],
        "none": lambda q: 1.0,
    }
    misconceptions = []
    for (scale, scale_bug), (dim, dim_bug) in itertools.product(_SCALE_BUGS.items(), _DIM_BUGS.items()):
        bugs = [bug for bug in (scale_bug, dim_bug) if bug]
        if not bugs:
            continue
        if len(bugs) == 2:
            name = "both bugs are still there" if (scale, dim) == ("d_k", -2) else "two bugs"
        else:
            name = "one bug left: " + ("the scale" if scale_bug else "the softmax's axis")

        def implementation(q: torch.Tensor, k: torch.Tensor, scale: str = scale, dim: int = dim) -> torch.Tensor:
            return _weights(q, k.transpose(-2, -1), divisors[scale](q), dim)

        text = "; and ".join(bugs) + "."
        misconceptions.append(Misconception(name, implementation, text[0].upper() + text[1:]))
    misconceptions += [
        *wrong_axes_misconceptions(lambda q, k_t: _weights(q, k_t, math.sqrt(q.shape[-1]))),
        Misconception(
            "scaled after the softmax",
            lambda q, k: softmax(q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1]),
            "Your rows sum to 1/√d_k: the division belongs on the scores, inside the softmax.",
        ),
    ]
    return check_function(
        "debug: attention weights",
        learner,
        lambda q, k: softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])),
        cases,
        misconceptions,
        square_cases=square,
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


def check_attention_head(learner: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    """Exercise: ``learner(x, w_q, w_k, w_v)`` with ``x (..., seq, d_in)``, ``w_q, w_k (d_in, d_k)`` and
    ``w_v (d_in, d_v)`` in the paper's layout must return ``(output, weights)``: the output
    ``softmax(Q Kᵀ / √d_k) V`` of shape ``(..., seq, d_v)`` and the weights ``(..., seq, seq)``, with
    ``Q = x W_Q``, ``K = x W_K``, ``V = x W_V``. Values and gradients (reaching ``x`` and every ``W``)
    are compared with the package's on batched, odd-sized and one-word cases."""
    cases, square = _head_cases()
    dim_hint = (
        "Your weights do not sum to 1 over the keys. Each query (row) shares its attention among the keys, the "
        "last axis: softmax(scores, dim=-1)."
    )
    mistakes = [
        Misconception(
            "no √d_k scaling",
            lambda *a: _head(*a, divide_by=lambda q, v, x: 1.0),
            "Divide the scores by √d_k, the width of one query or key (q.shape[-1]), before the softmax, as in "
            "step 3 of this notebook.",
        ),
        Misconception(
            "scaled by d_k instead of √d_k",
            lambda *a: _head(*a, divide_by=lambda q, v, x: q.shape[-1]),
            "Divide by the square root of d_k: math.sqrt(q.shape[-1]).",
        ),
        Misconception(
            "scaled by √d_in (the embedding width) instead of √d_k",
            lambda *a: _head(*a, divide_by=lambda q, v, x: math.sqrt(x.shape[-1])),
            "d_k is the width of the head's queries and keys, q.shape[-1] (the width of W_Q's columns), not of "
            "the input x.",
        ),
        Misconception(
            "scaled by √d_v (the value width) instead of √d_k",
            lambda *a: _head(*a, divide_by=lambda q, v, x: math.sqrt(v.shape[-1])),
            "The scores are dot products of queries and keys: scale by √d_k = √(q.shape[-1]); the values' width "
            "plays no part.",
        ),
        Misconception("softmax over the query axis", lambda *a: _head(*a, dim=-2), dim_hint),
        Misconception("softmax over the query axis", lambda *a: _head(*a, dim=0), dim_hint),
        Misconception("softmax over the query axis", lambda *a: _head(*a, dim=1), dim_hint),
        Misconception(
            "did not transpose K",
            lambda *a: _head(*a, key=lambda k: k),
            "Score (i, j) is query i · key j, so K is turned on its side: q @ k.transpose(-2, -1).",
        ),
        *[
            Misconception(
                WRONG_AXES_NAME, lambda *a, i=i: _head(*a, key=lambda k: transposed_key_variants(k)[i]), WRONG_AXES_HINT
            )
            for i in (0, 2)
        ],
        Misconception(
            "used PyTorch's x·Wᵀ layout on paper (d_in, d_out) matrices",
            lambda *a: _head(*a, layout="torch"),
            "In this notebook W has shape (d_in, d_out) and the product is x @ w. nn.Linear stores the transpose "
            "and computes x @ w.T; with square matrices both run, with different numbers.",
        ),
        Misconception(
            "returned the scores, not the weights",
            lambda *a: _head(*a, scores_only=True),
            "The second output is the softmax of the scaled scores: every row positive and summing to 1.",
        ),
        Misconception(
            "averaged x instead of V",
            lambda *a: _head(*a, values=lambda x, v: x),
            "The weights average the *values*, V = x @ w_v, not the inputs themselves.",
        ),
        Misconception(
            "swapped W_Q and W_K (rows are keys)",
            lambda x, w_q, w_k, w_v: _head(x, w_k, w_q, w_v),
            "Queries come from W_Q and keys from W_K: with them swapped, row i holds how much word i is looked "
            "at, not where it looks.",
        ),
        Misconception(
            "returned (weights, output) in the wrong order",
            lambda *a: _head(*a)[::-1],
            "Return the output first, then the weights: return output, weights.",
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
        verbose=verbose,
    )
