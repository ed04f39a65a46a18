"""Attention masks: causal, padding, their combination, and the two ways to apply one.

Taught in notebook 03: "Why a decoder must not see the future" (:func:`causal_mask`), "Two ways
to apply the mask" (:func:`masked_softmax_neg_inf`, :func:`masked_softmax_renormalize`) and
"Padding masks, combined with the causal mask" (:func:`padding_mask`, :func:`combine_masks`);
:func:`sliding_window_mask` in notebook 09, section 2 ("Sliding-window attention").

Polarity: every mask here is boolean with ``True`` = "may attend", broadcastable to
``(..., seq_q, seq_k)``. Some notes use ``1 = blocked`` float masks
(``torch.triu(ones, diagonal=1)``); convert those with ``~mask.bool()``.
"""

from __future__ import annotations

import torch

from . import checks
from .softmax import softmax

__all__ = [
    "causal_mask",
    "combine_masks",
    "masked_softmax_neg_inf",
    "masked_softmax_renormalize",
    "padding_mask",
    "sliding_window_mask",
]


@checks.checked_by(checks.causal_mask_args)
def causal_mask(seq_q: int, seq_k: int | None = None, *, device: str | torch.device | None = None) -> torch.Tensor:
    """Boolean ``(seq_q, seq_k)`` mask, ``True`` where query ``i`` may see key ``j``.

    With ``seq_k = seq_q`` (the default) this is the lower triangle. With
    ``seq_q < seq_k`` the queries are the *last* ``seq_q`` positions of the
    sequence, as when decoding with a key/value cache: query ``i`` sits at
    absolute position ``seq_k - seq_q + i`` and sees keys ``j <= seq_k - seq_q + i``.
    """
    seq_k = seq_q if seq_k is None else seq_k
    return torch.ones(seq_q, seq_k, dtype=torch.bool, device=device).tril(diagonal=seq_k - seq_q)


@checks.checked_by(checks.padding_mask_args)
def padding_mask(lengths: torch.Tensor, seq_len: int) -> torch.Tensor:
    """Key-padding mask from sequence lengths.

    Shapes: ``lengths (batch,)`` integers -> mask ``(batch, 1, 1, seq_len)``, ``True`` for
    real tokens (``j < lengths[b]``), ready to broadcast over ``(batch, heads, seq_q, seq_k)``.
    """
    positions = torch.arange(seq_len, device=lengths.device)
    return (positions < lengths[:, None])[:, None, None, :]


@checks.checked_by(checks.combine_masks_args)
def combine_masks(*masks: torch.Tensor | None) -> torch.Tensor | None:
    """Logical AND of boolean masks (``None`` entries are skipped): a key is visible only
    if every mask allows it. Shapes broadcast together; ``None`` if no mask is given."""
    result: torch.Tensor | None = None
    for mask in masks:
        if mask is not None:
            result = mask if result is None else result & mask
    return result


@checks.checked_by(checks.masked_softmax_args)
def masked_softmax_neg_inf(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Method 2: set blocked scores to ``-inf``, then softmax.

    ``exp(-inf) = 0``, so blocked keys get exactly zero weight and the visible ones
    already sum to 1. Shapes: ``scores (..., seq_q, seq_k)``, ``mask`` broadcastable.
    """
    return softmax.unchecked(scores.masked_fill(~mask, float("-inf")), dim=-1)


@checks.checked_by(checks.masked_softmax_args)
def masked_softmax_renormalize(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Method 1: softmax over *all* keys, zero the blocked weights, then divide each row by
    its new sum so it sums to 1 again.

    Mathematically the same weights as :func:`masked_softmax_neg_inf` (the softmax
    denominator cancels), at the cost of an extra pass. A row with no visible key stays all zeros.
    Shapes: ``scores (..., seq_q, seq_k)``, ``mask`` broadcastable.

    Caveat, in floating point: the softmax first subtracts the row's largest score, blocked
    ones included. In float32 (also used for float16/bfloat16 scores), a blocked score more
    than ~87 above every visible one pushes the visible exps below the smallest normal float
    (~1.2e-38), where they lose digits; beyond ~104 they underflow to 0 and the row comes out
    all zeros (float64: ~708 and ~745). :func:`masked_softmax_neg_inf` has no such limit.
    """
    weights = softmax.unchecked(scores, dim=-1) * mask
    row_sums = weights.sum(dim=-1, keepdim=True)
    return weights / torch.where(row_sums == 0, torch.ones_like(row_sums), row_sums)


@checks.checked_by(checks.sliding_window_mask_args)
def sliding_window_mask(
    seq_q: int,
    seq_k: int | None = None,
    *,
    window: int,
    sinks: int = 0,
    device: str | torch.device | None = None,
) -> torch.Tensor:
    """Boolean ``(seq_q, seq_k)`` mask: causal, and each query sees at most its last ``window`` keys
    (itself included), plus the first ``sinks`` keys of the sequence.

    As in :func:`~mhsa_helpers.masking.causal_mask`, with ``seq_q < seq_k`` the queries are the
    last ``seq_q`` positions: query ``i`` sits at position ``p = seq_k - seq_q + i`` and sees key
    ``j`` when ``p - window < j <= p``, or ``j < sinks``.
    """
    seq_k = seq_q if seq_k is None else seq_k
    query_positions = torch.arange(seq_k - seq_q, seq_k, device=device)[:, None]
    key_positions = torch.arange(seq_k, device=device)[None, :]
    behind = query_positions - key_positions  # >= 0 for the past and the query itself
    in_window = (behind >= 0) & (behind < window)
    return in_window | ((key_positions < sinks) & (behind >= 0))
