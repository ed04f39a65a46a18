"""Scaled dot-product attention.

.. math::

    \\operatorname{Attention}(Q, K, V) = \\operatorname{softmax}\\!\\left(\\frac{Q K^\\top}{\\sqrt{d_k}}\\right) V

Taught in notebook 02, sections "Why divide by √d_k?" and "Scaled dot-product attention from
scratch" (worked by hand in notebook 01, Steps 2 to 5).

Mask polarity used everywhere in this package: a **boolean** mask where ``True`` means "this
query may attend to this key" (the convention of ``torch.nn.functional.scaled_dot_product_attention``).
Libraries that mark *blocked* positions with ``True`` need ``~mask``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from . import checks, compat
from .masking import causal_mask, combine_masks
from .softmax import LOW_PRECISION_DTYPES, softmax

__all__ = ["attend", "attention_scores", "scaled_dot_product_attention"]

Output = torch.Tensor | tuple[torch.Tensor, torch.Tensor]


@checks.checked_by(checks.attention_scores_args)
def attention_scores(q: torch.Tensor, k: torch.Tensor, scale: float | None = None) -> torch.Tensor:
    """Scaled scores ``q @ k^T * scale`` with ``scale = 1/sqrt(d_k)`` by default.

    Shapes: ``q (..., seq_q, d_k)``, ``k (..., seq_k, d_k)`` -> ``(..., seq_q, seq_k)``.
    """
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    return (q @ k.transpose(-2, -1)) * scale


@checks.checked_by(checks.attend_args)
def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    is_causal: bool = False,
    scale: float | None = None,
    dropout_p: float = 0.0,
    need_weights: bool = False,
    bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """:func:`scaled_dot_product_attention` returning ``(output, weights)``, with ``weights = None``
    unless ``need_weights``: one return type, for callers that pass ``need_weights`` on.

    Shapes: ``q (..., seq_q, d_k)``, ``k (..., seq_k, d_k)``, ``v (..., seq_k, d_v)`` ->
    output ``(..., seq_q, d_v)``, weights ``(..., seq_q, seq_k)``; ``bias`` (float, broadcastable to
    ``(..., seq_q, seq_k)``) is added to the scaled scores before the mask and the softmax.
    """
    seq_q, seq_k = q.shape[-2], k.shape[-2]
    # PyTorch's fused kernels take no bias next to a boolean mask: with a bias the weights are explicit.
    fused = not need_weights and dropout_p == 0.0 and bias is None
    if is_causal and seq_q == 1 and mask is None:
        # One query at the end of the sequence (decoding a token) sees every key: nothing to mask.
        is_causal = False
    if is_causal and (mask is not None or seq_q != seq_k or not fused):
        # PyTorch's is_causal is only used alone and for square scores: it aligns the mask to
        # the first key, while decoding with a cache needs it aligned to the last one.
        causal = causal_mask.unchecked(seq_q, seq_k, device=q.device)
        mask = causal if mask is None else combine_masks.unchecked(mask, causal)
        is_causal = False
    if fused:
        return compat.fused_attention(q, k, v, mask, is_causal=is_causal, scale=scale), None

    if q.dtype in LOW_PRECISION_DTYPES:
        # q . k can exceed float16's largest value (65504) when the weighted sum cannot:
        # scores and softmax in float32, weights back in q's dtype.
        scores = attention_scores.unchecked(q.float(), k.float(), scale)
    else:
        scores = attention_scores.unchecked(q, k, scale)
    if bias is not None:
        # An additive position bias (ALiBi, notebook 09) shifts the scores before the softmax.
        scores = scores + bias
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = softmax.unchecked(scores, dim=-1)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p, training=True)
    weights = weights.to(q.dtype)
    return weights @ v, (weights if need_weights else None)


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    is_causal: bool = False,
    scale: float | None = None,
    dropout_p: float = 0.0,
    return_weights: bool = False,
    bias: torch.Tensor | None = None,
) -> Output:
    """Attention of every query over the keys, with optional mask and dropout.

    Shapes:
        q: ``(..., seq_q, d_k)``; k: ``(..., seq_k, d_k)``; v: ``(..., seq_k, d_v)``
        mask: boolean, broadcastable to ``(..., seq_q, seq_k)``; ``True`` = may attend.
        bias: float, broadcastable to ``(..., seq_q, seq_k)``, added to the scaled scores before
            the mask and the softmax (ALiBi's distance penalty, notebook 09).
        returns: output ``(..., seq_q, d_v)``, and with ``return_weights=True`` also the
        attention weights ``(..., seq_q, seq_k)``. Without dropout each row sums to 1, or is
        all zeros when the mask leaves the query nothing to attend to; with ``dropout_p > 0``
        the returned weights are the dropped-out ones (zeros, the rest scaled by
        ``1 / (1 - dropout_p)``), whose rows sum to 1 only on average.

    A key-padding mask must reach the key axis: for ``q (batch, heads, seq_q, d_k)`` shape it
    ``(batch, 1, 1, seq_k)`` (what :func:`mhsa_helpers.masking.padding_mask` returns). A
    ``(batch, seq_k)`` mask broadcasts as ``(seq_q, seq_k)`` instead, its row ``b`` masking
    query ``b``: rejected unless ``batch`` is 1 or ``seq_q``, and silently wrong when
    ``batch == seq_q > 1``.

    ``is_causal=True`` adds a causal mask aligned to the *last* key, so a block of
    ``seq_q`` new queries after ``seq_k - seq_q`` cached keys sees exactly its past
    (see :func:`mhsa_helpers.masking.causal_mask`).

    ``dropout_p`` is applied to the attention weights; pass ``0.0`` outside training.

    When neither weights nor dropout are requested, the work is done by
    :func:`torch.nn.functional.scaled_dot_product_attention` (fused kernels); otherwise
    the weights are computed explicitly with :func:`softmax` (in float32 for
    float16/bfloat16 inputs, whose scores can overflow). Both give the same output.
    Arguments are checked by :func:`attend`.
    """
    output, weights = attend(
        q, k, v, mask, is_causal=is_causal, scale=scale, dropout_p=dropout_p, need_weights=return_weights, bias=bias
    )
    return output if weights is None else (output, weights)
