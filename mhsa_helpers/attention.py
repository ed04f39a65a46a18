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

from . import compat
from .checks import (
    broadcast_shape,
    checking,
    expect_broadcastable,
    expect_dtype_of,
    expect_floating,
    expect_mask,
    expect_number,
)
from .masking import causal_mask, combine_masks
from .softmax import LOW_PRECISION_DTYPES, softmax

__all__ = ["attend", "attention_scores", "scaled_dot_product_attention"]

Output = torch.Tensor | tuple[torch.Tensor, torch.Tensor]


def expect_queries_and_keys(q: object, k: object) -> tuple[int, ...]:
    """Float ``q (..., seq_q, d_k)`` and ``k (..., seq_k, d_k)`` of one dtype; their batch shape."""
    q = expect_floating("q", q, min_ndim=2, shape="(..., seq_q, d_k)")
    k = expect_floating("k", k, min_ndim=2, shape="(..., seq_k, d_k)")
    expect_dtype_of("k", k, "q", q)
    if k.shape[-1] != q.shape[-1]:
        raise ValueError(
            f"k must have the same last dimension d_k as q: expected k.shape[-1] == {q.shape[-1]}, "
            f"got q shape {tuple(q.shape)} and k shape {tuple(k.shape)}"
        )
    return expect_batch_dims(q=q, k=k)


def expect_batch_dims(**tensors: torch.Tensor) -> tuple[int, ...]:
    """The leading (batch) dimensions of the tensors, all but their last two, broadcast together."""
    batch = broadcast_shape(*(t.shape[:-2] for t in tensors.values()))
    if batch is None:
        names = list(tensors)
        together = ", ".join(names[:-1]) + " and " + names[-1]
        given = ", ".join(f"{name} shape {tuple(t.shape)}" for name, t in tensors.items())
        raise ValueError(f"{together} must have broadcastable batch dimensions, got {given}")
    return batch


def attention_scores(q: torch.Tensor, k: torch.Tensor, scale: float | None = None) -> torch.Tensor:
    """Scaled scores ``q @ k^T * scale`` with ``scale = 1/sqrt(d_k)`` by default.

    Shapes: ``q (..., seq_q, d_k)``, ``k (..., seq_k, d_k)`` -> ``(..., seq_q, seq_k)``.
    """
    if checking():
        expect_queries_and_keys(q, k)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    return (q @ k.transpose(-2, -1)) * scale


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
    sink: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """:func:`scaled_dot_product_attention` returning ``(output, weights)``, with ``weights = None``
    unless ``need_weights``: one return type, for callers that pass ``need_weights`` on.

    Shapes: ``q (..., seq_q, d_k)``, ``k (..., seq_k, d_k)``, ``v (..., seq_k, d_v)`` ->
    output ``(..., seq_q, d_v)``, weights ``(..., seq_q, seq_k)``; ``bias`` (float, broadcastable to
    ``(..., seq_q, seq_k)``) is added to the scaled scores before the mask and the softmax; ``sink``
    (float, finite, broadcastable to ``(..., seq_q)``) is one more logit in each row's softmax.
    """
    if checking():
        expect_attend_arguments(q, k, v, mask, is_causal, dropout_p, bias, sink)
    seq_q, seq_k = q.shape[-2], k.shape[-2]
    if not need_weights and dropout_p == 0.0 and bias is None:
        if sink is None:
            return _fused_attention(q, k, v, mask, is_causal=is_causal, scale=scale), None
        # One query (a decoding step) is faster explicitly: the fused path copies every key to add the sink's.
        if seq_q > 1:
            return _fused_attention_with_sink(q, k, v, mask, sink, is_causal=is_causal, scale=scale), None
    if is_causal:
        mask = combine_masks(mask, causal_mask(seq_q, seq_k, device=q.device))
    if q.dtype in LOW_PRECISION_DTYPES:
        # q . k can exceed float16's largest value (65504) when the weighted sum cannot:
        # scores and softmax in float32, weights back in q's dtype.
        scores = attention_scores(q.float(), k.float(), scale)
    else:
        scores = attention_scores(q, k, scale)
    if bias is not None:
        # An additive position bias (ALiBi, notebook 09) shifts the scores before the softmax.
        scores = scores + bias
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    if sink is None:
        weights = softmax(scores, dim=-1)
    else:
        # The sink is one more column of the softmax with no value vector behind it (gpt-oss): its share
        # goes nowhere, so the kept weights, its column dropped, sum to less than 1 (notebook 12).
        column = sink.to(scores.dtype).expand(scores.shape[:-1]).unsqueeze(-1)
        weights = softmax(torch.cat([scores, column], dim=-1), dim=-1)[..., :-1]
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p, training=True)
    weights = weights.to(q.dtype)
    return weights @ v, (weights if need_weights else None)


def expect_attend_arguments(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    is_causal: bool,
    dropout_p: float,
    bias: torch.Tensor | None,
    sink: torch.Tensor | None,
) -> None:
    """The checks of :func:`attend`, shapes as there."""
    expect_queries_and_keys(q, k)
    seq_q, seq_k = q.shape[-2], k.shape[-2]
    expect_floating("v", v, min_ndim=2, shape="(..., seq_k, d_v)")
    expect_dtype_of("v", v, "q", q)
    if v.shape[-2] != seq_k:
        raise ValueError(
            f"v must have one row per key: expected v.shape[-2] == seq_k == {seq_k}, "
            f"got k shape {tuple(k.shape)} and v shape {tuple(v.shape)}"
        )
    if seq_q == 0 or seq_k == 0:
        raise ValueError(
            f"q and k must hold at least one position (seq >= 1), got q shape {tuple(q.shape)} "
            f"and k shape {tuple(k.shape)}"
        )
    scores_shape = (*expect_batch_dims(q=q, k=k, v=v), seq_q, seq_k)
    expect_number("dropout_p", dropout_p, 0.0, 1.0, open_high=True)
    if mask is not None:
        expect_mask("mask", mask, scores_shape, "(..., seq_q, seq_k)", device=q.device)
    if bias is not None:
        expect_broadcastable("bias", expect_floating("bias", bias), scores_shape, "(..., seq_q, seq_k)")
    if sink is not None:
        expect_broadcastable("sink", expect_floating("sink", sink), scores_shape[:-1], "(..., seq_q)")
    if is_causal and seq_q > seq_k:
        raise ValueError(
            f"is_causal needs seq_q <= seq_k (queries are the last seq_q positions), got seq_q={seq_q}, seq_k={seq_k}"
        )


def _fused_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    *,
    is_causal: bool,
    scale: float | None,
) -> torch.Tensor:
    """:func:`attend`'s output from PyTorch's fused kernels
    (:func:`torch.nn.functional.scaled_dot_product_attention`), for a call without weights, dropout
    or bias; its arguments are the ones :func:`attend` has checked, shapes as there.

    PyTorch's ``is_causal`` aligns the causal mask to the *first* key; this package aligns it to the
    last (a block of new queries after cached keys), so it is passed as a mask unless the scores are square.
    """
    seq_q, seq_k = q.shape[-2], k.shape[-2]
    if is_causal and seq_q > 1 and (mask is not None or seq_q != seq_k):
        mask, is_causal = combine_masks(mask, causal_mask(seq_q, seq_k, device=q.device)), False
    # One query at the end of the sequence (decoding a token) sees every key: nothing to mask.
    is_causal = is_causal and seq_q > 1
    return compat.sdpa_zeroing_fully_masked_rows(q, k, v, mask, is_causal=is_causal, scale=scale)


def _fused_attention_with_sink(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    sink: torch.Tensor,
    *,
    is_causal: bool,
    scale: float | None,
) -> torch.Tensor:
    """:func:`attend`'s output with a ``sink`` logit per row, from PyTorch's fused kernels: the sink is
    one more key whose score is the sink (``q . 0`` plus an additive mask) and whose value is zero.
    Arguments as :func:`attend` has checked them, shapes as there."""
    seq_q, seq_k = q.shape[-2], k.shape[-2]
    batch = broadcast_shape(q.shape[:-2], k.shape[:-2], v.shape[:-2], sink.shape[:-1]) or ()
    if is_causal:
        mask = combine_masks(mask, causal_mask(seq_q, seq_k, device=q.device))
    allowed = torch.zeros((*batch, seq_q, seq_k), dtype=q.dtype, device=q.device)
    if mask is not None:
        allowed = allowed.masked_fill(~mask, float("-inf"))
    column = sink.to(q.dtype).expand((*batch, seq_q)).unsqueeze(-1)
    q, k, v = (t.expand((*batch, *t.shape[-2:])) for t in (q, k, v))
    k = torch.cat([k, k.new_zeros((*batch, 1, k.shape[-1]))], dim=-2)
    v = torch.cat([v, v.new_zeros((*batch, 1, v.shape[-1]))], dim=-2)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=torch.cat([allowed, column], dim=-1), scale=scale)


def scaled_dot_product_attention(
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
    sink: torch.Tensor | None = None,
) -> Output:
    """Attention of every query over the keys, with optional mask and dropout.

    Shapes:
        q: ``(..., seq_q, d_k)``; k: ``(..., seq_k, d_k)``; v: ``(..., seq_k, d_v)``
        mask: boolean, broadcastable to ``(..., seq_q, seq_k)``; ``True`` = may attend.
        bias: float, broadcastable to ``(..., seq_q, seq_k)``, added to the scaled scores before
            the mask and the softmax (ALiBi's distance penalty, notebook 09).
        sink: float, finite, broadcastable to ``(..., seq_q)``: a logit added to each row's softmax
            as one more column with no value vector (gpt-oss's attention sinks, notebook 12); the row's
            weights then sum to less than 1, ``softmax(scores) * sigmoid(logsumexp(scores) - sink)``, and
            a fully masked row gives all its weight to the sink. ``sink = 0`` is softmax-plus-one.
        returns: output ``(..., seq_q, d_v)``, and with ``need_weights=True`` also the
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
        q, k, v, mask, is_causal=is_causal, scale=scale, dropout_p=dropout_p, need_weights=need_weights, bias=bias,
        sink=sink,
    )  # fmt: skip
    return output if weights is None else (output, weights)
