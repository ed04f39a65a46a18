"""What PyTorch's releases do differently, made the same, out of the reading path of the math.

A foundation module, taught by no notebook. Nothing here changes a result on a current PyTorch;
each function says which releases need it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["sdpa_zeroing_fully_masked_rows"]


def sdpa_zeroing_fully_masked_rows(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    *,
    is_causal: bool,
    scale: float | None,
) -> torch.Tensor:
    """:func:`torch.nn.functional.scaled_dot_product_attention`, with zeros for a query that may attend
    to no key.

    Shapes: ``q (..., seq_q, d_k)``, ``k (..., seq_k, d_k)``, ``v (..., seq_k, d_v)``, boolean ``mask``
    broadcastable to ``(..., seq_q, seq_k)`` (``True`` = may attend) -> ``(..., seq_q, d_v)``.

    A query whose mask row is all False has nothing to attend to; this package promises zeros there,
    on every release and every backend (the masked call pays one ``mask.any`` for it). PyTorch 2.2-2.4
    return NaN for it, and NaN gradients that no ``masked_fill`` afterwards can repair,
    so such a row attends everywhere (finite) and is zeroed after: the zeroed row also passes zero
    gradient back.
    """
    if mask is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale)
    if mask.ndim < 2:  # PyTorch's kernels index the mask's last two axes; a (seq_k,) mask has one
        mask = mask.reshape(*(1,) * (2 - mask.ndim), *mask.shape)
    has_key = mask.any(dim=-1, keepdim=True)
    output = F.scaled_dot_product_attention(q, k, v, attn_mask=mask | ~has_key, scale=scale)
    return output.masked_fill(~has_key, 0.0)
