"""Scaled dot-product attention and the numerically stable softmax under it.

.. math::

    \\operatorname{Attention}(Q, K, V) = \\operatorname{softmax}\\!\\left(\\frac{Q K^\\top}{\\sqrt{d_k}}\\right) V

Mask polarity used everywhere in this package: a **boolean** mask where
``True`` means "this query may attend to this key" (the convention of
``torch.nn.functional.scaled_dot_product_attention``). Libraries and seeds
that mark *blocked* positions with ``True`` must pass ``~mask``.
"""

from __future__ import annotations

import math
from typing import Optional, Tuple, Union

import torch
import torch.nn.functional as F

from .checks import (
    check_bool_mask,
    check_floating,
    check_ndim,
    check_probability,
    check_same_dtype,
)
from .masking import causal_mask, combine_masks
from .softmax import softmax

__all__ = ["attention_scores", "scaled_dot_product_attention"]


_LOW_PRECISION = (torch.float16, torch.bfloat16)


def _check_qk(q: torch.Tensor, k: torch.Tensor) -> None:
    check_floating("q", q)
    check_floating("k", k)
    check_ndim("q", q, 2, "(..., seq_q, d_k)")
    check_ndim("k", k, 2, "(..., seq_k, d_k)")
    check_same_dtype("k", k, "q", q)
    if k.shape[-1] != q.shape[-1]:
        raise ValueError(
            f"k must have the same last dimension d_k as q: expected k.shape[-1] == {q.shape[-1]}, "
            f"got q shape {tuple(q.shape)} and k shape {tuple(k.shape)}"
        )


def _check_batch_dims(**tensors: torch.Tensor) -> None:
    batch_shapes = [t.shape[:-2] for t in tensors.values()]
    if all(shape == batch_shapes[0] for shape in batch_shapes):
        # The usual case, and torch.broadcast_shapes costs ~10 us a call (most of the
        # checks' overhead on the fast path), so equal batch shapes skip it.
        return
    try:
        torch.broadcast_shapes(*batch_shapes)
    except RuntimeError:
        names = list(tensors)
        together = ", ".join(names[:-1]) + " and " + names[-1]
        given = ", ".join(f"{name} shape {tuple(t.shape)}" for name, t in tensors.items())
        raise ValueError(f"{together} must have broadcastable batch dimensions, got {given}") from None


def _check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    _check_qk(q, k)
    check_floating("v", v)
    check_ndim("v", v, 2, "(..., seq_k, d_v)")
    check_same_dtype("v", v, "q", q)
    if v.shape[-2] != k.shape[-2]:
        raise ValueError(
            f"v must have one row per key: expected v.shape[-2] == seq_k == {k.shape[-2]}, "
            f"got k shape {tuple(k.shape)} and v shape {tuple(v.shape)}"
        )
    if q.shape[-2] == 0 or k.shape[-2] == 0:
        raise ValueError(
            f"q and k must hold at least one position (seq >= 1), got q shape {tuple(q.shape)} "
            f"and k shape {tuple(k.shape)}"
        )
    _check_batch_dims(q=q, k=k, v=v)


def attention_scores(q: torch.Tensor, k: torch.Tensor, scale: Optional[float] = None) -> torch.Tensor:
    """Scaled scores ``q @ k^T * scale`` with ``scale = 1/sqrt(d_k)`` by default.

    Shapes: ``q (..., seq_q, d_k)``, ``k (..., seq_k, d_k)`` -> ``(..., seq_q, seq_k)``.
    """
    _check_qk(q, k)
    _check_batch_dims(q=q, k=k)
    return _scores(q, k, scale)


def _scores(q: torch.Tensor, k: torch.Tensor, scale: Optional[float]) -> torch.Tensor:
    d_k = q.shape[-1]
    scale = 1.0 / math.sqrt(d_k) if scale is None else scale
    return (q @ k.transpose(-2, -1)) * scale


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: Optional[torch.Tensor] = None,
    *,
    is_causal: bool = False,
    scale: Optional[float] = None,
    dropout_p: float = 0.0,
    return_weights: bool = False,
) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
    """Attention of every query over the keys, with optional mask and dropout.

    Shapes:
        q: ``(..., seq_q, d_k)``; k: ``(..., seq_k, d_k)``; v: ``(..., seq_k, d_v)``
        mask: boolean, broadcastable to ``(..., seq_q, seq_k)``; ``True`` = may attend.
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
    """
    _check_qkv(q, k, v)
    dropout_p = check_probability("dropout_p", dropout_p)
    seq_q, seq_k = q.shape[-2], k.shape[-2]
    if mask is not None:
        batch_shape = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2])
        check_bool_mask("mask", mask, (*batch_shape, seq_q, seq_k), "(..., seq_q, seq_k)", device=q.device)
    if is_causal and seq_q > seq_k:
        raise ValueError(
            f"is_causal needs seq_q <= seq_k (queries are the last seq_q positions), "
            f"got seq_q={seq_q}, seq_k={seq_k}"
        )

    fused = not return_weights and dropout_p == 0.0
    if is_causal and (mask is not None or seq_q != seq_k or not fused):
        # PyTorch's is_causal is only used alone and for square scores: it aligns the mask to
        # the first key, while decoding with a cache needs it aligned to the last one.
        causal = causal_mask(seq_q, seq_k, device=q.device)
        mask = causal if mask is None else combine_masks(mask, causal)
        is_causal = False
    if fused:
        return _fused_attention(q, k, v, mask, is_causal, scale)

    if q.dtype in _LOW_PRECISION:
        # q . k can exceed float16's largest value (65504) when the weighted sum cannot:
        # scores and softmax in float32, weights back in q's dtype.
        scores = _scores(q.float(), k.float(), scale)
    else:
        scores = _scores(q, k, scale)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = softmax(scores, dim=-1)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p, training=True)
    weights = weights.to(q.dtype)
    output = weights @ v
    return (output, weights) if return_weights else output


def _fused_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: Optional[torch.Tensor],
    is_causal: bool,
    scale: Optional[float],
) -> torch.Tensor:
    if mask is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale)
    # A query whose mask row is all False has nothing to attend to; this package promises
    # zeros there. PyTorch 2.2-2.4 return NaN for it, and NaN gradients that no masked_fill
    # afterwards can repair, so let such a row attend everywhere (finite) and zero it after:
    # the zeroed row also passes zero gradient back.
    has_key = mask.any(dim=-1, keepdim=True)
    output = F.scaled_dot_product_attention(q, k, v, attn_mask=mask | ~has_key, scale=scale)
    return output.masked_fill(~has_key, 0.0)
