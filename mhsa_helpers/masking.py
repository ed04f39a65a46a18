"""Attention masks: causal, padding, their combination, and the two ways to apply one.

Polarity: every mask here is boolean with ``True`` = "may attend", broadcastable to
``(..., seq_q, seq_k)``. Seed notebooks also use ``1 = blocked`` float masks
(``torch.triu(ones, diagonal=1)``); convert those with ``~mask.bool()``.
"""

from __future__ import annotations

from typing import Optional, Union

import torch

from .checks import check_bool_mask, check_floating, check_positive_int, check_tensor
from .softmax import softmax

__all__ = [
    "causal_mask",
    "padding_mask",
    "combine_masks",
    "masked_softmax_neg_inf",
    "masked_softmax_renormalize",
]


def causal_mask(
    seq_q: int,
    seq_k: Optional[int] = None,
    *,
    device: Optional[Union[str, torch.device]] = None,
) -> torch.Tensor:
    """Boolean ``(seq_q, seq_k)`` mask, ``True`` where query ``i`` may see key ``j``.

    With ``seq_k = seq_q`` (the default) this is the lower triangle. With
    ``seq_q < seq_k`` the queries are the *last* ``seq_q`` positions of the
    sequence, as when decoding with a key/value cache: query ``i`` sits at
    absolute position ``seq_k - seq_q + i`` and sees keys ``j <= seq_k - seq_q + i``.
    """
    check_positive_int("seq_q", seq_q)
    seq_k = seq_q if seq_k is None else check_positive_int("seq_k", seq_k)
    if seq_q > seq_k:
        raise ValueError(
            f"seq_q must be <= seq_k (queries are the last seq_q of seq_k positions), "
            f"got seq_q={seq_q}, seq_k={seq_k}"
        )
    return torch.ones(seq_q, seq_k, dtype=torch.bool, device=device).tril(diagonal=seq_k - seq_q)


def padding_mask(lengths: torch.Tensor, seq_len: int) -> torch.Tensor:
    """Key-padding mask from sequence lengths.

    Shapes: ``lengths (batch,)`` integers -> mask ``(batch, 1, 1, seq_len)``, ``True`` for
    real tokens (``j < lengths[b]``), ready to broadcast over ``(batch, heads, seq_q, seq_k)``.
    """
    check_tensor("lengths", lengths)
    check_positive_int("seq_len", seq_len)
    if lengths.is_floating_point() or lengths.is_complex() or lengths.dtype == torch.bool:
        raise TypeError(f"lengths must be an integer tensor (token counts), got dtype {lengths.dtype}")
    if lengths.ndim != 1:
        raise ValueError(f"lengths must be 1-D, one length per sequence (batch,), got shape {tuple(lengths.shape)}")
    if lengths.numel() and (int(lengths.min()) < 0 or int(lengths.max()) > seq_len):
        raise ValueError(
            f"lengths must lie in [0, seq_len={seq_len}], got values from {int(lengths.min())} "
            f"to {int(lengths.max())}"
        )
    positions = torch.arange(seq_len, device=lengths.device)
    return (positions < lengths[:, None])[:, None, None, :]


def combine_masks(*masks: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    """Logical AND of boolean masks (``None`` entries are skipped): a key is visible only
    if every mask allows it. Shapes broadcast together; ``None`` if no mask is given."""
    result: Optional[torch.Tensor] = None
    for index, mask in enumerate(masks):
        if mask is None:
            continue
        check_tensor(f"masks[{index}]", mask)
        if mask.dtype != torch.bool:
            raise TypeError(f"masks[{index}] must be a boolean tensor (True = may attend), got dtype {mask.dtype}")
        if result is None:
            result = mask
            continue
        try:
            torch.broadcast_shapes(result.shape, mask.shape)
        except RuntimeError:
            raise ValueError(
                f"masks[{index}] of shape {tuple(mask.shape)} cannot be broadcast with the masks "
                f"before it, of combined shape {tuple(result.shape)}"
            ) from None
        result = result & mask
    return result


def masked_softmax_neg_inf(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Method 2 of seed 002: set blocked scores to ``-inf``, then softmax.

    ``exp(-inf) = 0``, so blocked keys get exactly zero weight and the visible ones
    already sum to 1. Shapes: ``scores (..., seq_q, seq_k)``, ``mask`` broadcastable.
    """
    check_floating("scores", scores)
    check_bool_mask("mask", mask, scores.shape, "scores.shape", device=scores.device)
    return softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)


def masked_softmax_renormalize(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Method 1 of seed 002: softmax over *all* keys, zero the blocked weights, then
    divide each row by its new sum so it sums to 1 again.

    Mathematically the same weights as :func:`masked_softmax_neg_inf` (the softmax
    denominator cancels), at the cost of an extra pass. A row with no visible key stays all zeros.
    Shapes: ``scores (..., seq_q, seq_k)``, ``mask`` broadcastable.

    Caveat, in floating point: the softmax first subtracts the row's largest score, blocked
    ones included. In float32 (also used for float16/bfloat16 scores), a blocked score more
    than ~87 above every visible one pushes the visible exps below the smallest normal float
    (~1.2e-38), where they lose digits; beyond ~104 they underflow to 0 and the row comes out
    all zeros (float64: ~708 and ~745). :func:`masked_softmax_neg_inf` has no such limit.
    """
    check_floating("scores", scores)
    check_bool_mask("mask", mask, scores.shape, "scores.shape", device=scores.device)
    weights = softmax(scores, dim=-1) * mask
    row_sums = weights.sum(dim=-1, keepdim=True)
    return weights / torch.where(row_sums == 0, torch.ones_like(row_sums), row_sums)
