"""Exercise checkers for notebook 01 (Q, K, V by hand), and the checking helpers
that the attention and masking checkers share.

Each ``check_*`` function runs the learner's function on generated cases and prints
(and returns, as a :class:`~mhsa_helpers.exercises.core.CheckResult`) one of: correct,
not attempted yet, the name of the misconception the answer matches, or a plain
"differs from the reference" / "raised ..." message.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional, Sequence

import torch
import torch.nn.functional as F

from ..attention import attention_scores
from .core import Case, CheckResult, Misconception, check_function

__all__ = [
    "check_paper_projection",
    "check_scores",
    "check_linear_projection",
    "run_checker",
    "random_tensor",
    "transposed_key_variants",
]

# Stands in for NaN while outputs are compared, so that a misconception whose
# output contains NaN (an unguarded softmax) can still be recognised: NaN never
# compares equal to NaN, the sentinel does.
_NAN_SENTINEL = -123456.75


def _nan_as_sentinel(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        if value.is_floating_point():
            return torch.where(torch.isnan(value), torch.full_like(value, _NAN_SENTINEL), value)
        return value
    if isinstance(value, (tuple, list)):
        return type(value)(_nan_as_sentinel(v) for v in value)
    return value


def _comparable(function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        return _nan_as_sentinel(function(*args, **kwargs))

    return wrapped


def _runs(function: Callable[..., Any], case: Case) -> bool:
    args = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in case.args)
    try:
        function(*args, **case.kwargs)
    except Exception:  # any failure means "this case cannot diagnose it"
        return False
    return True


def run_checker(
    exercise: str,
    learner: Callable[..., Any],
    reference: Callable[..., Any],
    cases: Sequence[Case],
    misconceptions: Sequence[Misconception] = (),
    *,
    square_cases: Sequence[Case] = (),
    verbose: bool = True,
    atol: float = 1e-5,
    rtol: float = 1e-4,
) -> CheckResult:
    """:func:`~mhsa_helpers.exercises.core.check_function` with two refinements.

    * NaN is compared as an ordinary value, so a misconception that produces NaN
      (softmax over a row of ``-inf``, ``exp`` overflowing) can be named.
    * When the learner's function *raises* on some case, it is run again on
      ``square_cases`` — inputs whose axes all have the same length. A layout or
      transposition mistake crashes on rectangular shapes but runs silently on
      square ones; if the outputs there match a misconception, that misconception
      is named together with the crash.
    """
    if not callable(learner):
        raise TypeError(f"learner must be a function, got {type(learner).__name__}")
    wrapped = [Misconception(m.name, _comparable(m.implementation), m.hint) for m in misconceptions]
    comparable_learner, comparable_reference = _comparable(learner), _comparable(reference)
    result = check_function(
        exercise, comparable_learner, comparable_reference, cases, wrapped, atol=atol, rtol=rtol, verbose=False
    )
    if result.status == "error" and square_cases:
        runnable = [case for case in square_cases if _runs(learner, case)]
        if runnable:
            square = check_function(
                exercise, comparable_learner, comparable_reference, runnable, wrapped,
                atol=atol, rtol=rtol, verbose=False,
            )
            if square.status == "misconception":
                crash = result.message.split("] ", 1)[-1]
                result = CheckResult(
                    exercise,
                    "misconception",
                    f"{square.message} (On rectangular inputs {crash}; on square inputs, where every "
                    f"axis has the same length, the same mistake runs without an error and gives wrong numbers.)",
                    misconception=square.misconception,
                )
    if verbose:
        print(result.message)
    return result


def random_tensor(generator: torch.Generator, *shape: int, scale: float = 1.0) -> torch.Tensor:
    """Standard-normal float64 values times ``scale``, drawn from ``generator``."""
    return torch.randn(*shape, generator=generator, dtype=torch.float64) * scale


def transposed_key_variants(k: torch.Tensor) -> list:
    """The wrong transpositions of ``k (..., seq_k, d_k)`` that learners write instead of
    ``k.transpose(-2, -1)``: ``k.transpose(0, 1)``, ``k.transpose(1, 2)`` and ``k.T`` (which
    reverses *every* axis of a batched tensor). Each is right for one rank only."""
    return [
        k.transpose(0, 1),
        k.transpose(1, 2) if k.ndim > 2 else None,
        k.permute(*reversed(range(k.ndim))),
    ]


def _wrong_axes(index: int, use: Callable[[torch.Tensor], torch.Tensor]) -> Callable[..., torch.Tensor]:
    """Build a misconception that uses the ``index``-th wrong transposition of K."""

    def implementation(q: torch.Tensor, k: torch.Tensor, *rest: torch.Tensor) -> torch.Tensor:
        k_t = transposed_key_variants(k)[index]
        if k_t is None:
            raise ValueError("this wrong transposition does not exist for this rank")
        return use(q, k_t, *rest)

    return implementation


WRONG_AXES_NAME = "transposed the wrong axes of K"
WRONG_AXES_HINT = (
    "Transpose only the last two axes: k.transpose(-2, -1) (or k.mT). k.T reverses every axis of a "
    "batched tensor, and k.transpose(0, 1) or k.transpose(1, 2) is right for one rank only."
)


def _square(*shapes: Sequence[int], seed: int) -> tuple:
    generator = torch.Generator().manual_seed(seed)
    return tuple(random_tensor(generator, *shape) for shape in shapes)


# ---------------------------------------------------------------- exercise 1


def _paper_projection_cases() -> tuple:
    g = torch.Generator().manual_seed(101)
    cases = [
        Case((random_tensor(g, 3, 4), random_tensor(g, 4, 2)), description="E (3, 4) @ W (4, 2)"),
        Case((random_tensor(g, 2, 5, 3), random_tensor(g, 3, 6)), description="batch: E (2, 5, 3) @ W (3, 6)"),
        Case((random_tensor(g, 4, 5), random_tensor(g, 5, 5)), description="E (4, 5) @ W (5, 5)"),
    ]
    square = [
        Case(_square((3, 3), (3, 3), seed=102), description="square E (3, 3), W (3, 3)"),
        Case(_square((3, 3, 3), (3, 3), seed=103), description="square batch E (3, 3, 3), W (3, 3)"),
    ]
    return cases, square


def check_paper_projection(learner: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    """Exercise: ``learner(x, w)`` with ``x (..., seq, d_in)`` and a paper-layout
    ``w (d_in, d_out)`` must return ``x @ w`` of shape ``(..., seq, d_out)`` (seed 001's ``E · W``)."""
    cases, square = _paper_projection_cases()
    misconceptions = [
        Misconception(
            "used PyTorch's x·Wᵀ layout on a paper (d_in, d_out) matrix",
            lambda x, w: x @ w.mT,
            "On paper (and in seed 001) W has shape (d_in, d_out) and the product is E·W. nn.Linear stores "
            "its weight as (d_out, d_in) and computes x·Wᵀ. With a square toy matrix both run; only the "
            "numbers are wrong.",
        ),
        Misconception(
            "multiplied in the wrong order (W·E instead of E·W)",
            lambda x, w: w @ x,
            "Each row of E is one word. E·W turns every row's d_in features into d_out features; W·E "
            "would mix the words with each other instead.",
        ),
        Misconception(
            "multiplied element by element (*) instead of a matrix product (@)",
            lambda x, w: x * w,
            "`*` multiplies matching entries; a projection needs the matrix product `x @ w`, where each "
            "output feature is a weighted sum of all input features.",
        ),
    ]
    return run_checker(
        "paper projection E·W",
        learner,
        lambda x, w: F.linear(x, w.mT),  # nn.Linear's layout is the transpose of the paper's
        cases,
        misconceptions,
        square_cases=square,
        verbose=verbose,
    )


# ---------------------------------------------------------------- exercise 2


def _score_cases() -> tuple:
    g = torch.Generator().manual_seed(201)
    cases = [
        Case((random_tensor(g, 3, 4), random_tensor(g, 5, 4)), description="q (3, 4), k (5, 4)"),
        Case((random_tensor(g, 2, 4, 6), random_tensor(g, 2, 3, 6)), description="batch: q (2, 4, 6), k (2, 3, 6)"),
        Case(
            (random_tensor(g, 2, 2, 3, 5), random_tensor(g, 2, 2, 4, 5)),
            description="batch and heads: q (2, 2, 3, 5), k (2, 2, 4, 5)",
        ),
    ]
    square = [
        Case(_square((3, 3), (3, 3), seed=202), description="square q, k (3, 3)"),
        Case(_square((3, 3, 3), (3, 3, 3), seed=203), description="square q, k (3, 3, 3)"),
        Case(_square((3, 3, 3, 3), (3, 3, 3, 3), seed=204), description="square q, k (3, 3, 3, 3)"),
    ]
    return cases, square


def check_scores(learner: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    """Exercise: ``learner(q, k)`` with ``q (..., seq_q, d_k)``, ``k (..., seq_k, d_k)`` must
    return the raw (unscaled) scores ``q @ kᵀ`` of shape ``(..., seq_q, seq_k)``."""
    cases, square = _score_cases()

    def matmul(q: torch.Tensor, k_t: torch.Tensor) -> torch.Tensor:
        return q @ k_t

    misconceptions = [
        Misconception(
            "did not transpose K",
            lambda q, k: q @ k,
            "Entry (i, j) is the dot product of query row i with key row j, so K must be turned on its "
            "side: q @ k.transpose(-2, -1).",
        ),
        *[Misconception(WRONG_AXES_NAME, _wrong_axes(i, matmul), WRONG_AXES_HINT) for i in range(3)],
        Misconception(
            "computed K·Qᵀ instead of Q·Kᵀ (rows are keys, not queries)",
            lambda q, k: k @ q.mT,
            "Rows of the score matrix belong to queries (the word that is looking), columns to keys: "
            "q @ k.transpose(-2, -1), shape (..., seq_q, seq_k).",
        ),
        Misconception(
            "computed Qᵀ·K (a d_k × d_k matrix, not seq_q × seq_k)",
            lambda q, k: q.mT @ k,
            "Qᵀ·K sums over positions and compares features; attention compares positions, summing over "
            "the d_k features: q @ k.transpose(-2, -1).",
        ),
        Misconception(
            "already scaled the scores by 1/√d_k",
            lambda q, k: attention_scores(q, k),
            "This step asks for the raw dot products; the division by √d_k comes next.",
        ),
    ]
    return run_checker(
        "raw scores Q·Kᵀ",
        learner,
        lambda q, k: attention_scores(q, k, scale=1.0),
        cases,
        misconceptions,
        square_cases=square,
        verbose=verbose,
    )


# ---------------------------------------------------------------- exercise 3


def _linear_projection_cases() -> tuple:
    g = torch.Generator().manual_seed(301)
    cases = [
        Case((random_tensor(g, 3, 6), random_tensor(g, 3, 6)), description="seed 001's shapes: C (3, 6), W_O (3, 6)"),
        Case((random_tensor(g, 2, 4, 5), random_tensor(g, 2, 5)), description="batch: C (2, 4, 5), W_O (2, 5)"),
        Case((random_tensor(g, 5, 4), random_tensor(g, 4, 4)), description="C (5, 4), W_O (4, 4)"),
    ]
    square = [
        Case(_square((3, 3), (3, 3), seed=302), description="square C (3, 3), W_O (3, 3)"),
        Case(_square((3, 3, 3), (3, 3), seed=303), description="square batch C (3, 3, 3), W_O (3, 3)"),
    ]
    return cases, square


def check_linear_projection(learner: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    """Exercise: ``learner(c, w)`` with ``c (..., seq, d_in)`` and ``w (d_out, d_in)`` in
    PyTorch's ``nn.Linear`` layout (how seed 001 prints ``W_O``) must return ``c @ wᵀ``,
    shape ``(..., seq, d_out)``."""
    cases, square = _linear_projection_cases()
    misconceptions = [
        Misconception(
            "used a (d_out, d_in) matrix as if it were (d_in, d_out): C·W instead of C·Wᵀ",
            lambda c, w: c @ w,
            "nn.Linear (and seed 001's printed W_O) stores one row per *output* feature, shape "
            "(d_out, d_in); the product is c @ w.T. With a square matrix C·W runs too, with wrong numbers.",
        ),
        Misconception(
            "computed W·Cᵀ (the transposed result, one column per word)",
            lambda c, w: w @ c.mT,
            "W·Cᵀ is (C·Wᵀ)ᵀ: the right numbers, but one column per word instead of one row. "
            "Keep words in rows: c @ w.T.",
        ),
    ]
    return run_checker(
        "output projection C·W_Oᵀ",
        learner,
        F.linear,
        cases,
        misconceptions,
        square_cases=square,
        verbose=verbose,
    )
