"""Exercise checkers for notebook 01 (Q, K, V by hand), and the wrong transpositions
of K that the score and attention checkers (notebook 02) both know.

Each ``check_*`` function runs the learner's function on generated cases and prints
(and returns, as a :class:`~mhsa_helpers.teaching.checking.CheckResult`) one of: correct,
not attempted yet, the name of the misconception the answer matches, or a plain
"differs from the reference" / "raised ..." message.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from ... import attention_scores
from ...teaching.checking import Case, CheckResult, Misconception, check_function, random_tensor, random_tensors

__all__ = [
    "WRONG_AXES_HINT",
    "WRONG_AXES_NAME",
    "check_linear_projection",
    "check_paper_projection",
    "check_scores",
    "transposed_key_variants",
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


def wrong_axes_misconceptions(use: Callable[..., torch.Tensor]) -> list[Misconception]:
    """One misconception per wrong transposition of K (see :func:`transposed_key_variants`).

    ``use(q, k_t, *rest)`` computes the exercise's answer from ``q`` and an already
    transposed key ``k_t``; each misconception calls it with a wrong ``k_t``."""

    def with_variant(index: int) -> Callable[..., torch.Tensor]:
        def implementation(q: torch.Tensor, k: torch.Tensor, *rest: Any) -> torch.Tensor:
            k_t = transposed_key_variants(k)[index]
            if k_t is None:
                raise ValueError("this wrong transposition does not exist for this rank")
            return use(q, k_t, *rest)

        return implementation

    return [Misconception(WRONG_AXES_NAME, with_variant(i), WRONG_AXES_HINT) for i in range(3)]


# ---------------------------------------------------------------- exercise 1


def _paper_projection_cases() -> tuple:
    g = torch.Generator().manual_seed(101)
    cases = [
        Case((random_tensor(g, 3, 4), random_tensor(g, 4, 2)), description="E (3, 4) @ W (4, 2)"),
        Case((random_tensor(g, 2, 5, 3), random_tensor(g, 3, 6)), description="batch: E (2, 5, 3) @ W (3, 6)"),
        Case((random_tensor(g, 4, 5), random_tensor(g, 5, 5)), description="E (4, 5) @ W (5, 5)"),
    ]
    square = [
        Case(random_tensors((3, 3), (3, 3), seed=102), description="square E (3, 3), W (3, 3)"),
        Case(random_tensors((3, 3, 3), (3, 3), seed=103), description="square batch E (3, 3, 3), W (3, 3)"),
    ]
    return cases, square


def check_paper_projection(learner: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    """Exercise: ``learner(x, w)`` with ``x (..., seq, d_in)`` and a paper-layout
    ``w (d_in, d_out)`` must return ``x @ w`` of shape ``(..., seq, d_out)`` (the paper's ``E · W``)."""
    cases, square = _paper_projection_cases()
    misconceptions = [
        Misconception(
            "used PyTorch's x·Wᵀ layout on a paper (d_in, d_out) matrix",
            lambda x, w: x @ w.mT,
            "On paper (and in notebook 01's hand-worked example) W has shape (d_in, d_out) and the product "
            "is E·W. nn.Linear stores "
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
    return check_function(
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
        Case(random_tensors((3, 3), (3, 3), seed=202), description="square q, k (3, 3)"),
        Case(random_tensors((3, 3, 3), (3, 3, 3), seed=203), description="square q, k (3, 3, 3)"),
        Case(random_tensors((3, 3, 3, 3), (3, 3, 3, 3), seed=204), description="square q, k (3, 3, 3, 3)"),
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
        *wrong_axes_misconceptions(matmul),
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
        Misconception(
            "reshaped K instead of transposing it",
            lambda q, k: q @ k.reshape(*k.shape[:-2], k.shape[-1], k.shape[-2]),
            "k.reshape(..., d_k, seq_k) has the right shape but reads the numbers in the wrong order: it is not "
            "Kᵀ. Swap the two axes: k.transpose(-2, -1) (or k.mT).",
        ),
    ]
    return check_function(
        "raw scores Q·Kᵀ",
        learner,
        lambda q, k: attention_scores(q, k, scale=1.0),
        cases,
        misconceptions,
        square_cases=square,
        shortcuts=("attention_scores",),
        verbose=verbose,
    )


# ---------------------------------------------------------------- exercise 3


def _linear_projection_cases() -> tuple:
    g = torch.Generator().manual_seed(301)
    cases = [
        Case(
            (random_tensor(g, 3, 6), random_tensor(g, 3, 6)), description="the hand-worked shapes: C (3, 6), W_O (3, 6)"
        ),
        Case((random_tensor(g, 2, 4, 5), random_tensor(g, 2, 5)), description="batch: C (2, 4, 5), W_O (2, 5)"),
        Case((random_tensor(g, 5, 4), random_tensor(g, 4, 4)), description="C (5, 4), W_O (4, 4)"),
    ]
    square = [
        Case(random_tensors((3, 3), (3, 3), seed=302), description="square C (3, 3), W_O (3, 3)"),
        Case(random_tensors((3, 3, 3), (3, 3), seed=303), description="square batch C (3, 3, 3), W_O (3, 3)"),
    ]
    return cases, square


def check_linear_projection(learner: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    """Exercise: ``learner(c, w)`` with ``c (..., seq, d_in)`` and ``w (d_out, d_in)`` in
    PyTorch's ``nn.Linear`` layout (how the hand-worked example prints ``W_O``) must return ``c @ wᵀ``,
    shape ``(..., seq, d_out)``."""
    cases, square = _linear_projection_cases()
    misconceptions = [
        Misconception(
            "used a (d_out, d_in) matrix as if it were (d_in, d_out): C·W instead of C·Wᵀ",
            lambda c, w: c @ w,
            "nn.Linear (and W_O of the hand-worked example) stores one row per *output* feature, shape "
            "(d_out, d_in); the product is c @ w.T. With a square matrix C·W runs too, with wrong numbers.",
        ),
        Misconception(
            "computed W·Cᵀ (the transposed result, one column per word)",
            lambda c, w: w @ c.mT,
            "W·Cᵀ is (C·Wᵀ)ᵀ: the right numbers, but one column per word instead of one row. "
            "Keep words in rows: c @ w.T.",
        ),
    ]
    return check_function(
        "output projection C·W_Oᵀ",
        learner,
        F.linear,
        cases,
        misconceptions,
        square_cases=square,
        verbose=verbose,
    )
