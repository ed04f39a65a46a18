"""Exercise checkers for notebook 01 (Q, K, V by hand).

Each ``check_*`` function runs the learner's function (or reads the learner's prediction) on the teaching
cases and on cases drawn for that answer, and prints (and returns, as a
:class:`~mhsa_helpers.teaching.checking.CheckResult`) one of: correct, not attempted yet, still the original
(the debugging exercise handed back unchanged), or what differs — a known mistake's name follows when the
same mistake comes again, and its fix on request (``result.hint()``, ``result.reveal()``).

The exercises of notebook 01: predict a weight (``check_uniform_prediction``), find the two bugs of
a given function (``check_weights_debug``), fill in the blank lines of one word's context vector
(``check_context_vector``), then write one attention head from an empty function
(``check_attention_head``), the first piece of the learner's own implementation, and put two heads together
with W_O (``check_multi_head_output``).
"""

from __future__ import annotations

import inspect
import itertools
import math
from collections.abc import Callable
from dataclasses import replace
from types import CodeType
from typing import Any

import torch

from ... import examples, scaled_dot_product_attention, softmax
from ...teaching.checking import Case, CheckResult, Misconception, check_function, judge, random_tensor
from ...teaching.gradients import compare_with_gradients, gradient_names, with_gradients
from ...teaching.misconceptions import (
    WRONG_AXES_HINT,
    WRONG_AXES_NAME,
    transposed_key_variants,
    wrong_axes_misconceptions,
)
from ...teaching.predictions import check_prediction

__all__ = [
    "check_attention_head",
    "check_context_vector",
    "check_multi_head_output",
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


# ---------------------------------------------------------------- exercise 3: one word's context vector


CONTEXT_OUTPUTS = ("context", "weights")


def context_vector(x: torch.Tensor, w_q: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor, i: int) -> tuple:
    """Word ``i``'s row of one head in the paper's layout: ``x (seq, d_in)``, ``w_q, w_k (d_in, d_k)``,
    ``w_v (d_in, d_v)`` -> its context vector ``(d_v,)`` and its weights ``(seq,)``, through the package's
    attention of every word."""
    output, weights = scaled_dot_product_attention(x @ w_q, x @ w_k, x @ w_v, need_weights=True)
    return output[i], weights[i]


def _one_query(
    x, w_q, w_k, w_v, i, *, query=None, key=None, divide_by=None, normalise=None, values=None, scores_only=False
):
    q = x[i] @ w_q if query is None else query(x, w_q, i)
    k, v = x @ w_k, x @ w_v
    scores = (k @ q if key is None else key(q, k)) / (
        math.sqrt(q.shape[-1]) if divide_by is None else divide_by(x, q, v)
    )
    weights = softmax(scores, dim=-1) if normalise is None else normalise(scores, q)
    context = weights @ (v if values is None else values(x, k, v))
    return context, (scores if scores_only else weights)


def _context_cases() -> tuple:
    g = torch.Generator().manual_seed(131)
    # seq, d_in, d_k and d_v differ within each case, so that a wrong width or a wrong axis shows
    shapes = [
        (5, 4, 3, 2, 2, "a middle word: x (5, 4), d_k = 3, d_v = 2, i = 2"),
        (7, 6, 8, 5, 6, "the last word: x (7, 6), d_k = 8, d_v = 5, i = 6"),
        (17, 9, 16, 6, 0, "the first of 17 words: x (17, 9), d_k = 16, d_v = 6, i = 0"),
        (1, 4, 3, 5, 0, "one word: x (1, 4), d_k = 3, d_v = 5, i = 0"),
    ]
    cases = []
    for seq, d_in, d_k, d_v, i, text in shapes:
        x, w_q, w_k, w_v = (random_tensor(g, *s) for s in ((seq, d_in), (d_in, d_k), (d_in, d_k), (d_in, d_v)))
        cases.append(Case((x, w_q, w_k, w_v, i), description=text))
    # The notebook's example comes last: its weights are so close to uniform that most mistakes change them by
    # less than 0.01 there, and the first case that differs is the one a message shows.
    ex = examples.money_bank_grows()
    cases.append(
        Case(
            (ex.embeddings, ex.w_q[0], ex.w_k[0], ex.w_v[0], 1),
            description="Bank in “Money Bank Grows”, head 1: x (3, 3), i = 1",
        )
    )
    square = [
        Case((*(random_tensor(g, n, n) for _ in range(4)), i), description=f"square: x and every W ({n}, {n}), i = {i}")
        for n, i in ((3, 1), (4, 3))
    ]
    return cases, square


def _draw_context(generator: torch.Generator) -> list[Case]:
    """Inputs of other sizes, seq, d_in, d_k and d_v drawn apart, and a query word drawn among them."""
    cases = []
    for _ in range(4):
        seq, d_in, d_k, d_v = _sizes(generator, 4, 1, 9)
        i = _sizes(generator, 1, 0, seq - 1)[0]
        x = random_tensor(generator, seq, d_in)
        weights = tuple(random_tensor(generator, d_in, d) for d in (d_k, d_k, d_v))
        cases.append(Case((x, *weights, i), description=f"x {tuple(x.shape)}, d_k = {d_k}, d_v = {d_v}, i = {i}"))
    return cases


def _answers_for_another_word(run: Callable[..., Any]) -> bool:
    """Five words, each asked for in turn: for some ``i`` the outputs are exactly those of another word ``j``."""
    g = torch.Generator().manual_seed(132)
    x, w_q, w_k, w_v = (random_tensor(g, *s) for s in ((5, 4), (4, 3), (4, 3), (4, 2)))
    contexts, weights = scaled_dot_product_attention(x @ w_q, x @ w_k, x @ w_v, need_weights=True)

    def same(got: Any, j: int) -> bool:
        context, weight = (torch.as_tensor(t).detach().double() for t in got)
        return (
            context.shape == contexts[j].shape
            and weight.shape == weights[j].shape
            and torch.allclose(context, contexts[j])
            and torch.allclose(weight, weights[j])
        )

    for i in range(5):
        got = run(x, w_q, w_k, w_v, i)
        if not same(got, i) and any(same(got, j) for j in range(5) if j != i):
            return True
    return False


def check_context_vector(learner: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    """Exercise: ``learner(x, w_q, w_k, w_v, i)`` with ``x (seq, d_in)``, ``w_q, w_k (d_in, d_k)`` and
    ``w_v (d_in, d_v)`` in the paper's layout must return ``(context, weights)`` for the one query of word ``i``:
    the weights ``softmax(K q / √d_k)`` of shape ``(seq,)``, with ``q = x[i] W_Q`` and ``K = x W_K``, and the
    context vector, their weighted sum of the values ``V = x W_V``, of shape ``(d_v,)``. The reference is row
    ``i`` of the package's attention of every word; the cases are "Money Bank Grows", words first, in the middle
    and last, one word alone, and cases drawn for the answer (float32, under ``torch.no_grad()``)."""
    cases, square = _context_cases()
    flatter = "Your weights are flatter (closer to uniform) than the reference's"
    other_scale = f"{flatter} on some cases and sharper on others."
    scale_fix = "Divide the scores by `math.sqrt(q.shape[-1])`, the width of one query, before the softmax."
    widths = {
        "√d_in (the embedding width)": (
            lambda x, q, v: math.sqrt(x.shape[-1]),
            "d_k is the width of the queries and keys (the width of W_Q's columns), not of the input x.",
            "not by the square root of `x.shape[-1]`",
        ),
        "√d_v (the value width)": (
            lambda x, q, v: math.sqrt(v.shape[-1]),
            "The scores are dot products of a query and the keys; the width of the values plays no part in them.",
            "not by the square root of `v.shape[-1]`",
        ),
        "√seq (the number of words)": (
            lambda x, q, v: math.sqrt(x.shape[-2]),
            "The spread of one score q·k grows with the number of terms it adds up, d_k; how many words there are "
            "changes how many scores there are, not their size.",
            "not by the square root of the number of words",
        ),
    }
    mistakes = [
        Misconception(
            "no √d_k scaling",
            lambda *a: _one_query(*a, divide_by=lambda x, q, v: 1.0),
            "The spread of q·k grows like √d_k; unscaled scores saturate the softmax of a wide head.",
            fix=scale_fix,
            symptom="Your weights are sharper (further from uniform) than the reference's, the more so the wider d_k.",
        ),
        Misconception(
            "scaled by d_k instead of √d_k",
            lambda *a: _one_query(*a, divide_by=lambda x, q, v: q.shape[-1]),
            "The spread of q·k grows like √d_k: dividing by d_k shrinks the scores too much.",
            fix="Divide by the square root of d_k: `math.sqrt(q.shape[-1])`.",
            symptom=f"{flatter}, the more so the wider d_k.",
        ),
        *(
            Misconception(
                f"scaled by {width} instead of √d_k",
                lambda *a, divide_by=divide_by: _one_query(*a, divide_by=divide_by),
                idea,
                fix=f"Divide by `math.sqrt(q.shape[-1])`, {instead}.",
                symptom=other_scale,
            )
            for width, (divide_by, idea, instead) in widths.items()
        ),
        Misconception(
            "scaled after the softmax",
            lambda *a: _one_query(
                *a, normalise=lambda s, q: softmax(s * math.sqrt(q.shape[-1])) / math.sqrt(q.shape[-1])
            ),
            "The scale belongs on the scores, inside the softmax: weights divided afterwards no longer sum to 1.",
            fix="Divide the scores first, then take the softmax: `torch.softmax(scores, dim=-1)` of the scaled scores.",
            symptom="Your weights sum to 1/√d_k instead of 1.",
        ),
        Misconception(
            "divided the scores by their sum instead of a softmax",
            lambda *a: _one_query(*a, normalise=lambda s, q: s / s.sum(dim=-1, keepdim=True)),
            "Dividing by the sum makes the weights add up to 1, but a negative score gives a negative weight and a "
            "sum near 0 gives huge ones. The softmax takes e to the power of each score first, so every weight is "
            "positive, and a larger score always gets more.",
            fix="`weights = torch.softmax(scores, dim=-1)`.",
            symptom="Your weights sum to 1, but on some cases they are not all between 0 and 1.",
        ),
        Misconception(
            "column i of the score table: every word's query against word i's key",
            # W_Q and W_K swapped give the same numbers: no case tells them apart.
            lambda x, w_q, w_k, w_v, i: _one_query(x, w_k, w_q, w_v, i),
            "Row i of the score table is where word i looks: its query against every word's key. Column i holds how "
            "much every word looks at word i: every word's query against word i's key (the numbers you also get "
            "from a query made with W_K and keys made with W_Q).",
            fix="Make word i's query with W_Q, `q = x[i] @ w_q`, and the keys of every word with W_K, "
            "`k = x @ w_k`; the scores are `k @ q`.",
            symptom="Your weights are the softmax of column i of the score table, where the reference's are of row i.",
        ),
        Misconception(
            "the query of another word",
            None,
            "Word i's query is made from row i of x, the embedding of word i: `x[0]`, `x[1]` or `x[i - 1]` ask for "
            "another word's view.",
            detect=_answers_for_another_word,
            fix="`q = x[i] @ w_q`: row i of x, then its projection.",
            symptom="Asked for each of five words in turn, your function answers, for some word, with the right "
            "outputs of another.",
        ),
        *(
            Misconception(
                "the query taken from column i, not row i",
                lambda *a, query=query: _one_query(*a, query=query),
                "Each word is a row of x (and of x @ w_q): column i holds feature i of every word.",
                fix="`q = x[i] @ w_q`: row i of x, then its projection.",
                symptom="Your query is not word i's.",
            )
            for query in (lambda x, w_q, i: x[:, i] @ w_q, lambda x, w_q, i: (x @ w_q)[:, i])
        ),
        Misconception(
            "did not transpose K",
            lambda *a: _one_query(*a, key=lambda q, k: q @ k),
            "Word i's score with word j is q · k_j, and each key k_j is a row of k, (seq, d_k): the product must "
            "pair q with each row, not with each column.",
            fix="`k @ q` (or `q @ k.T`): one dot product per row of k.",
            symptom="Your scores are not word i's query against each word's key.",
        ),
        Misconception(
            "weighted sum of the keys, not the values",
            lambda *a: _one_query(*a, values=lambda x, k, v: k),
            "The weights say how much to take from each word; what is taken is its value, v_j = x_j W_V. A key is "
            "only there to be matched against the query.",
            fix="`context = weights @ v`.",
            symptom="Your weights are right, but your context vector has as many entries as a key (d_k), where a "
            "value has d_v.",
        ),
        Misconception(
            "averaged x instead of the values",
            lambda *a: _one_query(*a, values=lambda x, k, v: x),
            "The weights average the values, V = x @ w_v, not the embeddings themselves (the warm-up averaged E "
            "only because there each word's embedding was its own value).",
            fix="`context = weights @ v`, with `v = x @ w_v`.",
            symptom="Your weights are right, but your context vector has as many entries as a word's embedding "
            "(d_in), where a value has d_v.",
        ),
        Misconception(
            "returned the scores, not the weights",
            lambda *a: _one_query(*a, scores_only=True),
            "The second output is the softmax of the scaled scores: every weight positive, all of them summing to 1.",
            fix="Return `torch.softmax(scores, dim=-1)` as the second output.",
            symptom="Your context vector is right, but your second output does not sum to 1.",
        ),
        Misconception(
            "returned (weights, context) in the wrong order",
            lambda *a: _one_query(*a)[::-1],
            "The exercise asks for the context vector first, then the weights.",
            fix="`return context, weights`.",
            symptom="Your first output holds the numbers of the weights, and your second those of the context vector.",
        ),
    ]
    return check_function(
        "one word's context vector",
        learner,
        context_vector,
        cases,
        mistakes,
        square_cases=square,
        output_names=CONTEXT_OUTPUTS,
        shortcuts=("scaled_dot_product_attention", "attention_scores"),
        draw=_draw_context,
        verbose=verbose,
    )


# ---------------------------------------------------------------- exercise 4: one head


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
    # dim=None: the axis `F.softmax` picks when it is given none
    weights = softmax(scores, dim=(0 if scores.ndim in (0, 1, 3) else 1) if dim is None else dim)
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
        Misconception(
            "scaled by √seq (the number of words) instead of √d_k",
            lambda *a: _head(*a, divide_by=lambda q, v, x: math.sqrt(x.shape[-2])),
            "The spread of one score q·k grows with the number of terms it adds up, d_k; how many words there are "
            "changes how many scores there are, not their size.",
            fix="Divide by `math.sqrt(q.shape[-1])`, not by the square root of the number of words.",
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
            "softmax without dim: PyTorch picks the axis",
            lambda *a: _head(*a, dim=None),
            "Called without `dim`, `F.softmax` picks an axis from the number of axes (and warns): the last of a "
            "table without batch axes, but the first of a 3-D tensor and the second of a 4-D one.",
            fix="Say which axis: `torch.softmax(scores, dim=-1)`.",
            symptom="Your rows sum to 1 only for inputs without a batch axis.",
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


# ---------------------------------------------------------------- exercise 5: two heads and W_O


MULTI_HEAD_EXERCISE = "two heads and W_O"
MULTI_HEAD_OUTPUTS = ("output",)
MULTI_HEAD_INPUTS = ("x", "w_qs", "w_ks", "w_vs", "w_o")
#: The name of exercise 4's function in the notebook, which the answer to exercise 5 calls for each head.
HEAD_FUNCTION = "my_attention_head"


def multi_head_output(
    x: torch.Tensor, w_qs: torch.Tensor, w_ks: torch.Tensor, w_vs: torch.Tensor, w_o: torch.Tensor
) -> torch.Tensor:
    """Every head, then the heads concatenated and projected: ``x (..., seq, d_in)``, ``w_qs, w_ks
    (heads, d_in, d_k)`` and ``w_vs (heads, d_in, d_v)`` in the paper's layout, ``w_o (d_model, heads · d_v)``
    in ``nn.Linear``'s -> ``C W_Oᵀ (..., seq, d_model)``, through the package's attention."""
    outputs = [attention_head(x, w_q, w_k, w_v)[0] for w_q, w_k, w_v in zip(w_qs, w_ks, w_vs, strict=True)]
    return torch.cat(outputs, dim=-1) @ w_o.T


def _lean_head(x: torch.Tensor, w_q: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor) -> tuple:
    # The mistakes' heads: a wrong answer is compared with every mistake on every case, and the package's attention,
    # which checks its arguments, would make that twice as slow (the reference keeps the package's).
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    weights = torch.softmax(q @ k.mT / math.sqrt(q.shape[-1]), dim=-1)
    return weights @ v, weights


def _outputs_of_heads(x, w_qs, w_ks, w_vs, *, pick=None, transposed=False, weights=False) -> list:
    """Each head's output (or weights), in head order; ``pick(h, heads)`` says whose matrices head ``h`` uses."""
    heads = len(w_qs)
    found = []
    for h in range(heads):
        j = h if pick is None else pick(h, heads)
        w_q, w_k, w_v = (w[j].mT if transposed else w[j] for w in (w_qs, w_ks, w_vs))
        output, weight = _lean_head(x, w_q, w_k, w_v)
        found.append(weight if weights else output)
    return found


def _joined(outputs: list, how: str) -> torch.Tensor:
    """The heads' outputs ``(..., seq, d_v)`` put side by side, right (``"cat"``) or as a learner slips."""
    if how == "reversed":
        return torch.cat(outputs[::-1], dim=-1)
    if how == "interleaved":  # stacked on a new last axis: feature f of every head, then feature f + 1
        return torch.stack(outputs, dim=-1).flatten(-2)
    if how in ("reshaped", "reshaped from the front"):  # (..., heads, seq, d_v) read row by row as (..., seq, ·)
        stacked = torch.stack(outputs, dim=-3 if how == "reshaped" else 0)
        return stacked.reshape(*outputs[0].shape[:-1], -1)
    return torch.cat(outputs, dim=-1)


def _multi_head(x, w_qs, w_ks, w_vs, w_o, *, pick=None, transposed=False, weights=False, join="cat", project="right"):
    joined = _joined(_outputs_of_heads(x, w_qs, w_ks, w_vs, pick=pick, transposed=transposed, weights=weights), join)
    if project == "none":
        return joined
    if project == "untransposed":
        return joined @ w_o
    if project == "left":
        return w_o @ joined.mT
    if project == "averaged":  # each head by its own columns of W_O, then the mean of the heads' projections
        return joined @ w_o.T / len(w_qs)
    if project == "side by side":  # each head by its own columns of W_O, the projections then concatenated
        columns = w_o.split(w_o.shape[-1] // len(w_qs), dim=-1)
        return torch.cat([part @ w.T for part, w in zip(joined.chunk(len(w_qs), dim=-1), columns, strict=True)], -1)
    return joined @ w_o.T


def _multi_head_case(g: torch.Generator, x: tuple, heads: int, d_k: int, d_v: int, d_model: int, text: str) -> Case:
    d_in = x[-1]
    shapes = (x, (heads, d_in, d_k), (heads, d_in, d_k), (heads, d_in, d_v), (d_model, heads * d_v))
    return Case(tuple(random_tensor(g, *s) for s in shapes), description=text)


def _multi_head_cases() -> tuple:
    ex = examples.money_bank_grows()
    money = Case(
        (ex.embeddings, *(torch.stack(w) for w in (ex.w_q, ex.w_k, ex.w_v)), ex.w_o),
        description="“Money Bank Grows”, step 6: x (3, 3), two heads of 3, W_O (3, 6)",
    )
    g = torch.Generator().manual_seed(151)
    # Within each case seq, d_in, d_k, d_v, heads, d_model and heads · d_v all differ (batch axes too), so that a
    # wrong axis or a missing transpose cannot go unnoticed.
    cases = [
        _multi_head_case(g, (4, 5), 2, 3, 6, 7, "two heads: x (4, 5), d_k = 3, d_v = 6, W_O (7, 12)"),
        _multi_head_case(g, (2, 5, 4), 3, 6, 7, 9, "batch, three heads: x (2, 5, 4), d_k = 6, d_v = 7, W_O (9, 21)"),
        _multi_head_case(
            g, (3, 2, 6, 5), 4, 7, 8, 9, "two batch axes, four heads: x (3, 2, 6, 5), d_k = 7, d_v = 8, W_O (9, 32)"
        ),
        _multi_head_case(g, (1, 5), 2, 4, 3, 7, "one word, two heads: x (1, 5), d_k = 4, d_v = 3, W_O (7, 6)"),
        # The notebook's example comes last: its attention is so nearly uniform that most mistakes change its output
        # by a few thousandths, and the first case that differs is the one a message shows.
        money,
    ]
    # Every axis 3 and W_O (9, 9): where W_O is square, and a head's weights as wide as its output, slips run.
    square = [
        _multi_head_case(g, (3, 3), 3, 3, 3, 9, "square: x (3, 3), three heads of 3, W_O (9, 9)"),
        _multi_head_case(g, (3, 3, 3), 3, 3, 3, 9, "square batch: x (3, 3, 3), three heads of 3, W_O (9, 9)"),
    ]
    return cases, square


def _draw_multi_head(generator: torch.Generator) -> list[Case]:
    """Inputs of other sizes, with 1, 2, 0 and 1 batch axes, 2 to 4 heads, and the widths drawn apart."""
    cases = []
    for axes in (1, 2, 0, 1):
        batch = _sizes(generator, axes, 2, 4)
        seq, d_in, d_k, d_v, d_model = _sizes(generator, 5, 1, 9)
        heads = _sizes(generator, 1, 2, 4)[0]
        text = f"x {(*batch, seq, d_in)}, {heads} heads, d_k = {d_k}, d_v = {d_v}, W_O ({d_model}, {heads * d_v})"
        cases.append(_multi_head_case(generator, (*batch, seq, d_in), heads, d_k, d_v, d_model, text))
    return cases


def _names_in(code: CodeType) -> set[str]:
    """The global names a function's code reads, in its comprehensions and inner functions too."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, CodeType):
            names |= _names_in(const)
    return names


def _head_not_accepted(learner: Callable[..., Any]) -> CheckResult | None:
    """When the answer calls the notebook's ``my_attention_head`` and exercise 4's checks do not accept that head
    yet, what to say instead of judging the answer (a wrong head would make right lines look wrong); else None."""
    function = inspect.unwrap(learner) if callable(learner) else learner
    code = getattr(function, "__code__", None)
    if not isinstance(code, CodeType) or HEAD_FUNCTION not in _names_in(code):
        return None
    head = getattr(function, "__globals__", {}).get(HEAD_FUNCTION)
    if not callable(head):
        return None  # the answer's own call fails, at its line
    cases, square = _head_cases()
    # Exercise 4's cases, drawn ones included, values and gradients: the verdict of its checker, not yet told.
    verdict = judge(
        MULTI_HEAD_EXERCISE,
        with_gradients(head, HEAD_OUTPUTS, HEAD_INPUTS),
        with_gradients(attention_head, HEAD_OUTPUTS, HEAD_INPUTS),
        cases,
        square_cases=square,
        output_names=gradient_names(HEAD_OUTPUTS, HEAD_INPUTS),
        draw=_draw_head,
    )
    if verdict.correct:
        return None
    if verdict.status == "not_attempted":
        return CheckResult(
            MULTI_HEAD_EXERCISE,
            "not_attempted",
            f"[{MULTI_HEAD_EXERCISE}] not attempted yet: your function calls `{HEAD_FUNCTION}`, which still raises "
            "NotImplementedError. Write it in exercise 4 first, then run this cell again.",
        )
    return CheckResult(
        MULTI_HEAD_EXERCISE,
        "incorrect",
        f"[{MULTI_HEAD_EXERCISE}] not yet: your function calls `{HEAD_FUNCTION}`, and exercise 4's checker does not "
        f"accept that `{HEAD_FUNCTION}` yet, and a head that is not right would make right lines here look wrong. "
        "Run exercise 4's cell until it says correct, then run this cell again.",
    )


def check_multi_head_output(learner: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    """Exercise: ``learner(x, w_qs, w_ks, w_vs, w_o)`` with ``x (..., seq, d_in)``, each head's matrices stacked in
    the paper's layout, ``w_qs, w_ks (heads, d_in, d_k)`` and ``w_vs (heads, d_in, d_v)``, and ``w_o`` in
    ``nn.Linear``'s layout, ``(d_model, heads · d_v)``, must return ``C W_Oᵀ (..., seq, d_model)``: ``C`` is the
    outputs of the heads, each with its own three matrices, side by side along the features in head order. Values
    and gradients (reaching ``x`` and every matrix) are compared with the package's attention, head by head, on
    "Money Bank Grows" (step 6 of the notebook), on cases where every size differs, with batch axes and with one
    word, and on cases drawn for the answer. An answer that calls the notebook's ``my_attention_head`` is judged
    only once exercise 4's checks accept that head."""
    waiting = _head_not_accepted(learner)
    if waiting is not None:
        if verbose:
            print(waiting.message)
        return waiting
    cases, square = _multi_head_cases()
    unchanged = "Your output keeps its numbers when some heads' matrices change, where the reference's does not."
    mistakes = [
        Misconception(
            "W_O not transposed: the paper's layout assumed",
            lambda *a: _multi_head(*a, project="untransposed"),
            "w_o is stored in nn.Linear's layout, (d_model, heads · d_v): one row per output feature. `C @ w_o` "
            "pairs the features of C with the rows of W_O, which fits only when W_O is square, and even then "
            "gives other numbers: O = C W_Oᵀ, as in step 6 and the section on the two layouts.",
            fix="Project with the transpose: `torch.cat(outputs, dim=-1) @ w_o.T`.",
            symptom="Your product with W_O fits only where W_O is square, and gives other numbers there.",
        ),
        Misconception(
            "W_O multiplied on the left: W_O·Cᵀ, the output turned on its side",
            lambda *a: _multi_head(*a, project="left"),
            "`w_o @ C.T` computes W_O Cᵀ, which is Oᵀ: one row per output feature and one column per word. The "
            "output keeps one row per word, O = C W_Oᵀ.",
            fix="Put C first: `C @ w_o.T`.",
            symptom="Your output has one row per output feature and one column per word, where the reference has "
            "one row per word.",
        ),
        Misconception(
            "returned the concatenated heads without W_O",
            lambda *a: _multi_head(*a, project="none"),
            "The concatenation C has heads · d_v numbers per word; W_O then mixes them into d_model numbers, the "
            "last step of multi-head attention.",
            fix="Return `C @ w_o.T`, with C the concatenated outputs.",
            symptom="Your output has heads · d_v numbers per word, as many as the heads give together, where the "
            "reference has d_model.",
        ),
        Misconception(
            "each head projected by its columns of W_O, then averaged instead of summed",
            lambda *a: _multi_head(*a, project="averaged"),
            "C W_Oᵀ splits into one product per head: C^h times head h's own columns of W_O, transposed. These "
            "add up to O; their average is O divided by the number of heads.",
            fix="Add the heads' products instead of averaging them, or concatenate the heads and project once: "
            "`torch.cat(outputs, dim=-1) @ w_o.T`.",
            symptom="Your output is the reference's divided by the number of heads.",
        ),
        Misconception(
            "each head projected by its columns of W_O, then concatenated instead of summed",
            lambda *a: _multi_head(*a, project="side by side"),
            "C W_Oᵀ splits into one product per head: C^h times head h's own columns of W_O, transposed, each "
            "with d_model numbers per word. O is their sum, still d_model numbers per word; side by side they "
            "make heads · d_model.",
            fix="Add the heads' products instead of concatenating them, or concatenate the heads and project once: "
            "`torch.cat(outputs, dim=-1) @ w_o.T`.",
            symptom="Your output has heads · d_model numbers per word, where the reference has d_model.",
        ),
        Misconception(
            "heads concatenated in reverse order",
            lambda *a: _multi_head(*a, join="reversed"),
            "Head 1 comes first in the concatenation: the first d_v columns of W_O are made for head 1's output, "
            "the next for head 2's, and so on.",
            fix="Concatenate the outputs in head order: `torch.cat(outputs, dim=-1)` with `outputs[0]` head 1's.",
            symptom="Your concatenation holds the right numbers in another order: the columns of W_O meant for one "
            "head meet another head's output.",
        ),
        Misconception(
            "features of the heads interleaved: stacked on a new last axis, then flattened",
            lambda *a: _multi_head(*a, join="interleaved"),
            "Stacking on a new last axis and flattening puts feature 1 of every head first, then feature 2 of every "
            "head, and so on; the concatenation keeps each head's features together: all of head 1, then all of "
            "head 2.",
            fix="`torch.cat(outputs, dim=-1)`: the heads side by side, one whole head after the other.",
            symptom="Your concatenation holds the right numbers in another order: features of different heads "
            "alternate.",
        ),
        *(
            Misconception(
                "heads stacked in front, then reshaped: each row mixes several words",
                lambda *a, how=how: _multi_head(*a, join=how),
                "A stack of the heads has shape (heads, seq, d_v); reshaping it to (seq, heads · d_v) reads its "
                "numbers in memory order, head 1's words first, so a row collects numbers of several words. The "
                "concatenation puts each word's outputs from every head side by side in that word's row.",
                fix="`torch.cat(outputs, dim=-1)`: joined along the features, each word keeps its own row.",
                symptom="Rows of your concatenation hold numbers that belong to other words.",
            )
            for how in ("reshaped", "reshaped from the front")
        ),
        *(
            Misconception(
                "one head's matrices used for every head",
                lambda *a, pick=pick: _multi_head(*a, pick=pick),
                "Head h has its own W_Q^h, W_K^h and W_V^h: the h-th of w_qs, w_ks and w_vs. With one head's "
                "matrices for all of them every head computes the same output, and nothing is left for the other "
                "heads to look for.",
                fix="Give head h its own three matrices: `for w_q, w_k, w_v in zip(w_qs, w_ks, w_vs):`, or index all "
                "three with the same h.",
                symptom=unchanged,
            )
            for pick in (lambda h, heads: 0, lambda h, heads: heads - 1)
        ),
        Misconception(
            "concatenated the heads' weights, not their outputs",
            lambda *a: _multi_head(*a, weights=True),
            f"`{HEAD_FUNCTION}` returns two things, (output, weights): the outputs, (..., seq, d_v), are what the "
            "heads hand on; the weights, (..., seq, seq), only made them.",
            fix=f"Keep the first of the two: `output, _ = {HEAD_FUNCTION}(x, w_q, w_k, w_v)`.",
            symptom="Your concatenation has as many numbers per word as there are words times heads.",
        ),
        Misconception(
            "W_Q, W_K and W_V transposed: nn.Linear's layout assumed for them too",
            lambda *a: _multi_head(*a, transposed=True),
            "Only W_O is stored in nn.Linear's layout here; the heads' matrices are in the paper's, (d_in, d_k), "
            "as in exercise 4: each goes to the head as it is.",
            fix=f"Pass each head's matrices as they are: `{HEAD_FUNCTION}(x, w_qs[h], w_ks[h], w_vs[h])`.",
            symptom="Your heads' matrices fit only where they are square, and give other numbers there.",
        ),
    ]
    return compare_with_gradients(
        MULTI_HEAD_EXERCISE,
        learner,
        multi_head_output,
        cases,
        mistakes,
        MULTI_HEAD_OUTPUTS,
        MULTI_HEAD_INPUTS,
        square_cases=square,
        shortcuts=(
            "merge_heads",
            "multi_head_self_attention",
            "MultiHeadSelfAttention",
            "MultiheadAttention",
            "multi_head_attention_forward",
            "from_head_weights",
        ),
        draw=_draw_multi_head,
        verbose=verbose,
    )
