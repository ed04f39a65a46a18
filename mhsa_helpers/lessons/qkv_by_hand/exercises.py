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

import functools
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import torch

from ... import examples, scaled_dot_product_attention, softmax
from ...teaching.checking import AnswerRejected, Case, CheckResult, Misconception, check_function, random_tensor

__all__ = [
    "GRADIENT_HINT",
    "GRADIENT_NAME",
    "WRONG_AXES_HINT",
    "WRONG_AXES_NAME",
    "check_attention_head",
    "check_uniform_prediction",
    "check_weights_debug",
    "compare_with_gradients",
    "gradient_names",
    "transposed_key_variants",
    "with_gradients",
    "with_gradients_all",
    "wrong_axes_misconceptions",
]


def transposed_key_variants(k: torch.Tensor) -> list:
    """The wrong transpositions of ``k (..., seq_k, d_k)`` that learners write instead of
    ``k.transpose(-2, -1)``: ``k.transpose(0, 1)``, ``k.transpose(1, 2)`` and ``k.T`` (which
    reverses *every* axis of a batched tensor). Each is right for one rank only."""
    return [
        k.transpose(0, 1),
        k.transpose(1, 2) if k.ndim > 2 else None,
        k.permute(*reversed(range(k.ndim))),
    ]


WRONG_AXES_NAME = "transposed the wrong axes of K"
WRONG_AXES_HINT = (
    "Transpose only the last two axes: k.transpose(-2, -1) (or k.mT). k.T reverses every axis of a "
    "batched tensor, and k.transpose(0, 1) or k.transpose(1, 2) is right for one rank only."
)


def wrong_axes_misconceptions(use: Callable[..., Any]) -> list[Misconception]:
    """One misconception per wrong transposition of K (see :func:`transposed_key_variants`).

    ``use(q, k_t, *rest, **kwargs)`` computes the exercise's answer from ``q`` and an already
    transposed key ``k_t``; each misconception calls it with a wrong ``k_t``."""

    def with_variant(index: int) -> Callable[..., Any]:
        def implementation(q: torch.Tensor, k: torch.Tensor, *rest: Any, **kwargs: Any) -> Any:
            k_t = transposed_key_variants(k)[index]
            if k_t is None:
                raise ValueError("this wrong transposition does not exist for this rank")
            return use(q, k_t, *rest, **kwargs)

        return implementation

    return [Misconception(WRONG_AXES_NAME, with_variant(i), WRONG_AXES_HINT) for i in range(3)]


# ---------------------------------------------------------------- gradients as outputs


def _probe(output: torch.Tensor) -> torch.Tensor:
    # Fixed weights for the sum whose gradient is compared: the same for every answer of the same shape.
    return torch.cos(torch.arange(output.numel(), dtype=output.dtype)).reshape(output.shape) + 1.5


def _form(value: Any) -> str:
    """What a value is, as a learner reads it: "a tensor of shape (3, 4)", "a tuple of 1 tensor", "None"."""
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    if isinstance(value, (tuple, list)):
        kind = "tensor" if value and all(isinstance(v, torch.Tensor) for v in value) else "item"
        return f"a {type(value).__name__} of {len(value)} {kind}{'s' if len(value) != 1 else ''}"
    return "None" if value is None else f"a {type(value).__name__}"


GRADIENT_NAME = "no gradient reaches an argument (the graph is cut)"
GRADIENT_HINT = (
    "Your values may be right, but no gradient flows back from what your function returns to one of its "
    "arguments: a step cut the graph (`.detach()`, `torch.no_grad()`, `.item()` or `.tolist()`, or a new tensor "
    "built with `torch.tensor(...)` from computed numbers), or the result does not depend on that argument. "
    "Training adjusts the weights through these gradients: compute with tensor operations all the way."
)


def with_gradients(
    function: Callable[..., Any],
    outputs: Sequence[str],
    inputs: Sequence[str],
    missing: list[str] | None = None,
) -> Callable[..., Any]:
    """``function``'s outputs followed by the gradient, for each tensor argument named in ``inputs`` (the
    first positional ones, in order), of a fixed weighted sum of the outputs.

    A checker compares these with the reference's, so an answer must get the gradients right as well as
    the values. Where no gradient reaches an argument (an answer that cuts the graph with ``.detach()``,
    ``torch.no_grad()``, ``.item()``, a new tensor built with ``torch.tensor(...)``, or does not use it), its
    gradient counts as zeros and its name is added to ``missing``. The function gets
    copies of its arguments; if it changes one in place, it is told so. ``outputs`` names what the
    function returns: one name for a bare tensor, several for a tuple. Errors keep pointing at the
    learner's own line (the wrapper sets ``__wrapped__``)."""

    @functools.wraps(function)
    def run(*args: Any, **kwargs: Any) -> tuple:
        leaves = [
            a.detach().clone().requires_grad_() if i < len(inputs) and isinstance(a, torch.Tensor) else a
            for i, a in enumerate(args)
        ]
        given = [leaf.clone() if i < len(inputs) else leaf for i, leaf in enumerate(leaves)]
        result = function(*given, **kwargs)
        changed = False
        for original, leaf, passed in zip(args, leaves, given, strict=False):
            if passed.shape != leaf.shape or not torch.equal(passed.detach(), leaf.detach()):
                # Hand the change on to the argument the checker gave us (its own copy), so that the checker
                # names it as the change of an argument in place, with the argument's name.
                with torch.no_grad():
                    original.set_(passed.detach().clone())
                changed = True
        if changed:
            return result
        if result is None:
            raise AnswerRejected("your function returned None — did you forget `return`?")
        if len(outputs) == 1:
            if isinstance(result, (tuple, list)) and len(result) == 1 and isinstance(result[0], torch.Tensor):
                raise AnswerRejected(f"your function returned {_form(result)}; return the tensor itself")
            if not isinstance(result, torch.Tensor):
                raise AnswerRejected(f"return the {outputs[0]} as one tensor; your function returned {_form(result)}")
            results: tuple = (result,)
        else:
            if not isinstance(result, (tuple, list)) or len(result) != len(outputs):
                raise AnswerRejected(
                    f"return {len(outputs)} tensors, ({', '.join(outputs)}); your function returned {_form(result)}"
                )
            results = tuple(result)
        for name, value in zip(outputs, results, strict=True):
            if not isinstance(value, torch.Tensor) or not (value.is_floating_point() or value.is_complex()):
                raise AnswerRejected(f"the {name} you return must be a tensor of numbers; it is {_form(value)}")
        carried = [value for value in results if value.requires_grad]
        grads: tuple = (None,) * len(inputs)
        if carried:
            total = sum((value * _probe(value)).sum() for value in carried)
            grads = torch.autograd.grad(total, leaves[: len(inputs)], allow_unused=True)
        if missing is not None:
            missing[:] = [name for name, grad in zip(inputs, grads, strict=True) if grad is None]
        grads = tuple(
            torch.zeros_like(leaf) if grad is None else grad for leaf, grad in zip(leaves, grads, strict=False)
        )
        return (*(value.detach() for value in results), *grads)

    return run


def compare_with_gradients(
    exercise: str,
    learner: Callable[..., Any],
    reference: Callable[..., Any],
    cases: Sequence[Case],
    misconceptions: Sequence[Misconception],
    outputs: Sequence[str],
    inputs: Sequence[str],
    **options: Any,
) -> CheckResult:
    """:func:`~mhsa_helpers.teaching.checking.check_function` with the learner, the reference and the
    misconceptions wrapped by :func:`with_gradients`, and the outputs named. Something that is not a function,
    a class, or a module without ``forward`` is passed to ``check_function`` as it is, which refuses it (a
    TypeError) or names that mistake before running anything."""
    if (
        not callable(learner)
        or isinstance(learner, type)
        or (isinstance(learner, torch.nn.Module) and type(learner).forward is torch.nn.Module.forward)
    ):
        return check_function(exercise, learner, reference, cases, **options)
    missing: list[str] = []

    def cuts_the_graph(run: Callable[..., Any]) -> bool:
        missing.clear()
        run(*cases[0].args, **cases[0].kwargs)
        return bool(missing)

    graph_cut = Misconception(GRADIENT_NAME, None, GRADIENT_HINT, detect=cuts_the_graph)
    return check_function(
        exercise,
        with_gradients(learner, outputs, inputs, missing),
        with_gradients(reference, outputs, inputs),
        cases,
        [*with_gradients_all(misconceptions, outputs, inputs), graph_cut],
        output_names=gradient_names(outputs, inputs),
        **options,
    )


def with_gradients_all(misconceptions: Sequence[Misconception], outputs: Sequence[str], inputs: Sequence[str]) -> list:
    """The ``misconceptions`` with their implementations wrapped by :func:`with_gradients` too."""
    return [
        m if m.implementation is None else replace(m, implementation=with_gradients(m.implementation, outputs, inputs))
        for m in misconceptions
    ]


def gradient_names(outputs: Sequence[str], inputs: Sequence[str]) -> tuple[str, ...]:
    """The names of :func:`with_gradients`' outputs, for the checker's messages."""
    return (*outputs, *(f"gradient reaching {name}" for name in inputs))


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
