"""Splitting ``d_model`` into heads and back, and re-arranging projection weights.

Two equivalent views of multi-head projections:

* seed 001: ``h`` separate matrices per projection, one per head, each
  ``(d_head, d_in)`` in PyTorch's layout;
* seed 003 / PyTorch: one big ``(h * d_head, d_in)`` matrix whose rows
  ``i*d_head:(i+1)*d_head`` belong to head ``i``.

:func:`stack_head_weights` and :func:`unstack_head_weights` convert between them.
Fused QKV matrices come in two row orders, converted by
:func:`fused_qkv_per_head_to_stacked` and :func:`fused_qkv_stacked_to_per_head`:

* ``"stacked"`` (``nn.MultiheadAttention.in_proj_weight``, nanoGPT's ``c_attn``):
  ``[W_Q; W_K; W_V]``, each ``(d_model, d_in)``;
* ``"per_head"`` (seed 004): for each head in turn, its ``[q | k | v]`` rows,
  each block ``(d_head, d_in)``.
"""

from __future__ import annotations

from typing import List, Sequence

import torch

from .checks import check_divisible, check_ndim, check_positive_int, check_tensor

__all__ = [
    "split_heads",
    "merge_heads",
    "stack_head_weights",
    "unstack_head_weights",
    "fused_qkv_per_head_to_stacked",
    "fused_qkv_stacked_to_per_head",
]


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """``(..., seq, d_model)`` -> ``(..., heads, seq, d_head)``.

    The ``view`` cuts the feature axis into ``(heads, d_head)``; the ``transpose``
    then moves heads in front of seq so each head is an independent
    ``(seq, d_head)`` matrix. A ``view`` straight to ``(heads, seq, d_head)``
    without the transpose would mix positions between heads.
    """
    check_tensor("x", x)
    check_ndim("x", x, 2, "(..., seq, d_model)")
    check_positive_int("num_heads", num_heads)
    d_head = check_divisible("d_model (x.shape[-1])", x.shape[-1], "num_heads", num_heads)
    return x.unflatten(-1, (num_heads, d_head)).transpose(-3, -2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """``(..., heads, seq, d_head)`` -> ``(..., seq, heads * d_head)``: concatenate the heads."""
    check_tensor("x", x)
    check_ndim("x", x, 3, "(..., heads, seq, d_head)")
    return x.transpose(-3, -2).flatten(-2)


def stack_head_weights(head_weights: Sequence[torch.Tensor]) -> torch.Tensor:
    """Per-head projection matrices ``h x (d_head, d_in)`` -> one ``(h * d_head, d_in)``.

    Both sides are in PyTorch's ``(d_out, d_in)`` layout; transpose matrices written as
    ``E @ W`` with ``W (d_in, d_head)`` first.
    """
    if isinstance(head_weights, torch.Tensor) or len(head_weights) == 0:
        raise TypeError(
            "head_weights must be a non-empty list of (d_head, d_in) tensors, "
            f"got {type(head_weights).__name__}"
        )
    first = check_tensor("head_weights[0]", head_weights[0])
    for index, weight in enumerate(head_weights):
        check_tensor(f"head_weights[{index}]", weight)
        if weight.ndim != 2 or weight.shape != first.shape:
            raise ValueError(
                f"head_weights[{index}] must be 2-D with the shape of head_weights[0] "
                f"{tuple(first.shape)} (d_head, d_in), got shape {tuple(weight.shape)}"
            )
    return torch.cat(list(head_weights), dim=0)


def unstack_head_weights(weight: torch.Tensor, num_heads: int) -> List[torch.Tensor]:
    """One ``(h * d_head, d_in)`` projection matrix -> ``h`` matrices ``(d_head, d_in)``."""
    check_tensor("weight", weight)
    if weight.ndim != 2:
        raise ValueError(f"weight must be 2-D (h * d_head, d_in), got shape {tuple(weight.shape)}")
    check_positive_int("num_heads", num_heads)
    check_divisible("weight.shape[0]", weight.shape[0], "num_heads", num_heads)
    return list(weight.chunk(num_heads, dim=0))


def _check_fused(weight: torch.Tensor, num_heads: int, name: str) -> int:
    check_tensor(name, weight)
    if weight.ndim not in (1, 2):
        raise ValueError(
            f"{name} must be a (3 * d_model, d_in) weight or a (3 * d_model,) bias, "
            f"got shape {tuple(weight.shape)}"
        )
    check_positive_int("num_heads", num_heads)
    rows = weight.shape[0]
    check_divisible(f"{name}.shape[0]", rows, "3 * num_heads", 3 * num_heads)
    return rows // (3 * num_heads)


def fused_qkv_per_head_to_stacked(weight: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Seed 004's per-head ``[q|k|v]`` row blocks -> PyTorch's stacked ``[Q; K; V]``.

    Shapes: ``(3 * d_model, d_in)`` weight or ``(3 * d_model,)`` bias, same shape out.
    """
    d_head = _check_fused(weight, num_heads, "weight")
    rest = weight.shape[1:]
    # rows are indexed (head, part, i); reorder to (part, head, i)
    return weight.reshape(num_heads, 3, d_head, *rest).transpose(0, 1).reshape(weight.shape)


def fused_qkv_stacked_to_per_head(weight: torch.Tensor, num_heads: int) -> torch.Tensor:
    """PyTorch's stacked ``[Q; K; V]`` rows -> seed 004's per-head ``[q|k|v]`` blocks.

    Shapes: ``(3 * d_model, d_in)`` weight or ``(3 * d_model,)`` bias, same shape out.
    """
    d_head = _check_fused(weight, num_heads, "weight")
    rest = weight.shape[1:]
    return weight.reshape(3, num_heads, d_head, *rest).transpose(0, 1).reshape(weight.shape)
