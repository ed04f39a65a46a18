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

from .checks import (
    broadcast_shape,
    checking,
    expect_floating,
    expect_int,
    expect_integer_tensor,
    expect_mask,
    expect_tensor,
)
from .softmax import softmax

__all__ = [
    "causal_mask",
    "combine_masks",
    "masked_softmax_neg_inf",
    "masked_softmax_renormalize",
    "padding_mask",
    "sliding_window_mask",
]


def causal_mask(seq_q: int, seq_k: int | None = None, *, device: str | torch.device | None = None) -> torch.Tensor:
    """Boolean ``(seq_q, seq_k)`` mask, ``True`` where query ``i`` may see key ``j``.

    With ``seq_k = seq_q`` (the default) this is the lower triangle. With
    ``seq_q < seq_k`` the queries are the *last* ``seq_q`` positions of the
    sequence, as when decoding with a key/value cache: query ``i`` sits at
    absolute position ``seq_k - seq_q + i`` and sees keys ``j <= seq_k - seq_q + i``.
    """
    if checking():
        expect_seq_k(seq_q, seq_k)
    seq_k = seq_q if seq_k is None else seq_k
    return torch.ones(seq_q, seq_k, dtype=torch.bool, device=device).tril(diagonal=seq_k - seq_q)


def padding_mask(lengths: torch.Tensor, seq_len: int) -> torch.Tensor:
    """Key-padding mask from sequence lengths.

    Shapes: ``lengths (batch,)`` integers -> mask ``(batch, 1, 1, seq_len)``, ``True`` for
    real tokens (``j < lengths[b]``), ready to broadcast over ``(batch, heads, seq_q, seq_k)``.
    """
    expect_integer_tensor("lengths", lengths, " (token counts)")
    expect_int("seq_len", seq_len)
    if lengths.ndim != 1:
        raise ValueError(f"lengths must be 1-D, one length per sequence (batch,), got shape {tuple(lengths.shape)}")
    if lengths.numel() and not lengths.is_meta and (int(lengths.min()) < 0 or int(lengths.max()) > seq_len):
        raise ValueError(
            f"lengths must lie in [0, seq_len={seq_len}], got values from {int(lengths.min())} to {int(lengths.max())}"
        )
    positions = torch.arange(seq_len, device=lengths.device)
    return (positions < lengths[:, None])[:, None, None, :]


def combine_masks(*masks: torch.Tensor | None) -> torch.Tensor | None:
    """Logical AND of boolean masks (``None`` entries are skipped): a key is visible only
    if every mask allows it. Shapes broadcast together; ``None`` if no mask is given."""
    result: torch.Tensor | None = None
    for index, mask in enumerate(masks):
        if mask is None:
            continue
        if checking():
            if expect_tensor(f"masks[{index}]", mask).dtype != torch.bool:
                raise TypeError(f"masks[{index}] must be a boolean tensor (True = may attend), got dtype {mask.dtype}")
            if result is not None and broadcast_shape(result.shape, mask.shape) is None:
                raise ValueError(
                    f"masks[{index}] of shape {tuple(mask.shape)} cannot be broadcast with the masks "
                    f"before it, of combined shape {tuple(result.shape)}"
                )
        result = mask if result is None else result & mask
    return result


def masked_softmax_neg_inf(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Method 2: set blocked scores to ``-inf``, then softmax.

    ``exp(-inf) = 0``, so blocked keys get exactly zero weight and the visible ones
    already sum to 1. Shapes: ``scores (..., seq_q, seq_k)``, ``mask`` broadcastable.
    """
    expect_scores_and_mask(scores, mask)
    return softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)


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
    expect_scores_and_mask(scores, mask)
    weights = softmax(scores, dim=-1) * mask
    row_sums = weights.sum(dim=-1, keepdim=True)
    return weights / torch.where(row_sums == 0, torch.ones_like(row_sums), row_sums)


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
    seq_k = expect_seq_k(seq_q, seq_k)
    expect_int("window", window, 1, why=" (each query sees itself and the window - 1 keys before it)")
    expect_int("sinks", sinks, 0, why=" (the first tokens every query may see)")
    query_positions = torch.arange(seq_k - seq_q, seq_k, device=device)[:, None]
    key_positions = torch.arange(seq_k, device=device)[None, :]
    behind = query_positions - key_positions  # >= 0 for the past and the query itself
    in_window = (behind >= 0) & (behind < window)
    return in_window | ((key_positions < sinks) & (behind >= 0))


def expect_seq_k(seq_q: int, seq_k: int | None) -> int:
    """``seq_k`` (default ``seq_q``), both lengths >= 1 and ``seq_q <= seq_k``: the queries are the
    last ``seq_q`` of ``seq_k`` positions (shared by the masks and biases of a block of queries)."""
    expect_int("seq_q", seq_q)
    if seq_k is None:
        return seq_q
    if expect_int("seq_k", seq_k) < seq_q:
        raise ValueError(
            f"seq_q must be <= seq_k (queries are the last seq_q of seq_k positions), got seq_q={seq_q}, seq_k={seq_k}"
        )
    return seq_k


def expect_scores_and_mask(scores: torch.Tensor, mask: torch.Tensor) -> None:
    """Float ``scores`` and a boolean ``mask`` broadcastable to them, on their device."""
    expect_floating("scores", scores)
    expect_mask("mask", mask, scores.shape, "scores.shape", device=scores.device)
