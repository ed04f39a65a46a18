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
    "AFTER_SOFTMAX_FIX",
    "AFTER_SOFTMAX_HINT",
    "AFTER_SOFTMAX_NAME",
    "AFTER_SOFTMAX_SYMPTOM",
    "FINITE_FILL_FIX",
    "FINITE_FILL_HINT",
    "FINITE_FILL_NAME",
    "FINITE_FILL_SYMPTOM",
    "POLARITY_FIX",
    "POLARITY_HINT",
    "POLARITY_NAME",
    "POLARITY_SYMPTOM",
    "WRONG_AXES_FIX",
    "WRONG_AXES_HINT",
    "WRONG_AXES_NAME",
    "WRONG_AXES_SYMPTOM",
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
    "k.T reverses every axis of a batched tensor, and k.transpose(0, 1) or k.transpose(1, 2) is right for one "
    "rank only: the key and feature axes are always the last two."
)
WRONG_AXES_FIX = "Transpose only the last two axes: k.transpose(-2, -1) (or k.mT)."
WRONG_AXES_SYMPTOM = "Your function is right for inputs of one rank only (with or without batch axes)."


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

    return [
        Misconception(WRONG_AXES_NAME, with_variant(i), WRONG_AXES_HINT, fix=WRONG_AXES_FIX, symptom=WRONG_AXES_SYMPTOM)
        for i in range(3)
    ]


# ---------------------------------------------------------------- masks


POLARITY_NAME = "inverted mask polarity (True = blocked)"
POLARITY_HINT = (
    "In this package (and in torch.nn.functional.scaled_dot_product_attention) True means 'may attend'; "
    "some code marks the *blocked* positions with True/1 instead. Passed unchanged, such a mask lets a causal "
    "model read the future."
)
POLARITY_FIX = (
    "Fill where the mask is False: scores.masked_fill(~mask, float('-inf')) (invert a True-means-blocked mask)."
)
POLARITY_SYMPTOM = "Your weights are zero exactly where the mask allows a key, and spread over the keys it blocks."
AFTER_SOFTMAX_NAME = "mask applied after softmax without renormalising"
AFTER_SOFTMAX_HINT = (
    "The softmax had already shared each row among all the keys: zeroing the blocked weights afterwards leaves "
    "rows that sum to less than 1."
)
AFTER_SOFTMAX_FIX = "Fill the blocked *scores* with -inf before the softmax (or divide each row by its new sum)."
AFTER_SOFTMAX_SYMPTOM = "Your blocked weights are 0, but the rows no longer sum to 1."


FINITE_FILL_NAME = "blocked scores pushed down by a finite number instead of -inf"
FINITE_FILL_HINT = (
    "A finite fill (-1e4 or -1e9, filled or added, or one below the row's minimum) works only while every "
    "visible score stays far above it: a query whose visible keys score -1e35 puts its weight on a "
    "blocked key."
)
FINITE_FILL_FIX = "Fill blocked scores with -inf: scores.masked_fill(~mask, float('-inf'))."
FINITE_FILL_SYMPTOM = (
    "Your numbers are right on ordinary scores, but when the visible keys score far below zero a blocked key gets "
    "weight."
)

# Probes: tiny inputs, each built so that one mistake shows and the right answer is plain to see.
_FAR_BELOW = -1e35  # far below any finite fill a learner writes, and still a float32 number


def blocked_key_gets_weight(run: Callable[..., Any]) -> bool:
    """A softmax over scores whose visible keys score -1e35 and whose blocked key scores 0: with -inf the
    blocked key gets exactly 0; with any finite fill (or added constant) above -1e35 it takes the weight, and
    with a fill relative to the scores (``scores.min() - 1e4``, which rounds to -1e35) it shares it."""
    scores = torch.tensor([[_FAR_BELOW, _FAR_BELOW, 0.0]], dtype=torch.float64)
    weights = run(scores, torch.tensor([[True, True, False]]))
    return bool(torch.as_tensor(weights).double()[0, 2] > 0)  # NaN is another mistake's sign, not this one's


def attention_blocked_key_gets_weight(run: Callable[..., Any]) -> bool:
    """The same probe through attention: d_k = 1, so the scores are q * k; the visible keys' values are 1 and
    the blocked key's is 100, so the output is 1 exactly when the blocked key gets no weight and the visible
    ones all of it."""
    q = torch.tensor([[1e17]], dtype=torch.float64)
    k = torch.tensor([[-1e18], [-1e18], [0.0]], dtype=torch.float64)
    v = torch.tensor([[1.0], [1.0], [100.0]], dtype=torch.float64)
    out = run(q, k, v, torch.tensor([[True, True, False]]))
    value = float(torch.as_tensor(out).double()[0, 0])
    return value == value and value != 1.0  # NaN is another mistake's sign, not this one's


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
