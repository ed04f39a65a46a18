"""Misconceptions more than one notebook's checkers name: the wrong transpositions of K (notebooks 01-02),
and the masking mistakes (notebooks 02, 03 and 10) with the probes that show them whatever the numbers of a
case: a mask's polarity, weights zeroed after the softmax, and a finite fill where -inf belongs.

The probes are built so that the right answer is plain to see: a blocked key gets weight exactly 0 with
-inf, and some weight with any finite fill, an added constant or a fill relative to the scores.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .checking import Misconception

__all__ = [
    "AFTER_SOFTMAX_HINT",
    "AFTER_SOFTMAX_NAME",
    "FINITE_FILL_HINT",
    "FINITE_FILL_NAME",
    "POLARITY_HINT",
    "POLARITY_NAME",
    "WRONG_AXES_HINT",
    "WRONG_AXES_NAME",
    "attention_blocked_key_gets_weight",
    "blocked_key_gets_weight",
    "random_mask",
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


# ---------------------------------------------------------------- masks


POLARITY_NAME = "inverted mask polarity (True = blocked)"
POLARITY_HINT = (
    "Your code blocks the keys the mask allows. In this package (and in "
    "torch.nn.functional.scaled_dot_product_attention) True means 'may attend'; nn.MultiheadAttention and "
    "some code marks *blocked* positions with True/1, and such a mask must be inverted with ~mask. "
    "Passed unchanged, a causal model reads the future (notebook 10 runs this bug)."
)
AFTER_SOFTMAX_NAME = "mask applied after softmax without renormalizing"
AFTER_SOFTMAX_HINT = (
    "Your blocked weights are 0 but the rows sum to less than 1: they were zeroed after the softmax "
    "(dividing each row by its new sum would repair it). Simpler: fill blocked *scores* with -inf before "
    "the softmax."
)


FINITE_FILL_NAME = "blocked scores pushed down by a finite number instead of -inf"
FINITE_FILL_HINT = (
    "Your blocked keys still get weight when the visible scores are lower still: a query whose visible keys "
    "score -1e35 puts its weight on a blocked key. Filling with (or adding) a finite number such as -10000, "
    "-1e4 or -1e9 only works while every visible score stays far above it. Fill blocked scores with -inf: "
    "scores.masked_fill(~mask, float('-inf'))."
)

# Probes: tiny inputs, each built so that one mistake shows and the right answer is plain to see.
_FAR_BELOW = -1e35  # far below any finite fill a learner writes, and still a float32 number


def blocked_key_gets_weight(run: Callable[..., Any]) -> bool:
    """A softmax over scores whose visible keys score -1e35 and whose blocked key scores 0: with -inf the
    blocked key gets exactly 0; with any finite fill (or added constant) above -1e35 it takes the weight, and
    with a fill relative to the scores (``scores.min() - 1e4``, which rounds to -1e35) it shares it."""
    scores = torch.tensor([[_FAR_BELOW, _FAR_BELOW, 0.0]], dtype=torch.float64)
    weights = run(scores, torch.tensor([[True, True, False]]))
    return bool(torch.as_tensor(weights).double()[0, 2] != 0)


def attention_blocked_key_gets_weight(run: Callable[..., Any]) -> bool:
    """The same probe through attention: d_k = 1, so the scores are q * k; the visible keys' values are 1 and
    the blocked key's is 100, so any weight on the blocked key lifts the output above 1."""
    q = torch.tensor([[1e17]], dtype=torch.float64)
    k = torch.tensor([[-1e18], [-1e18], [0.0]], dtype=torch.float64)
    v = torch.tensor([[1.0], [1.0], [100.0]], dtype=torch.float64)
    out = run(q, k, v, torch.tensor([[True, True, False]]))
    return bool(torch.as_tensor(out).double()[0, 0] != 1.0)


def random_mask(generator: torch.Generator, *shape: int) -> torch.Tensor:
    """Random boolean mask ``(..., seq_q, seq_k)`` in which every row has at least one
    ``True`` and at least one ``False`` (so neither the mask nor its inverse blocks a whole row)."""
    if shape[-1] < 2:
        raise ValueError(f"shape[-1] (seq_k) must be >= 2, got shape {shape}")
    mask = torch.rand(*shape, generator=generator) < 0.5
    rows = mask.reshape(-1, shape[-1])
    for row in rows:
        picks = torch.randperm(shape[-1], generator=generator)[:2]
        row[picks[0]] = True
        row[picks[1]] = False
    return rows.reshape(shape)
