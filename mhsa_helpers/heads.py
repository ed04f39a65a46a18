"""Splitting ``d_model`` into heads and merging them back.

Taught in notebook 04, section 4 ("The shape walk, and the view that forgets to transpose");
:func:`repeat_kv`, which lets several query heads share one key/value head (grouped-query
attention), in notebook 08. The weight matrices behind the heads (per-head, stacked, fused) are
in :mod:`~mhsa_helpers.weight_layouts`.
"""

from __future__ import annotations

import torch

from .checks import checking, expect_divisible, expect_int, expect_tensor

__all__ = ["merge_heads", "repeat_kv", "split_heads"]


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """``(..., seq, d_model)`` -> ``(..., heads, seq, d_head)``.

    The ``reshape`` cuts the feature axis into ``(heads, d_head)``; the ``transpose``
    then moves heads in front of seq so each head is an independent
    ``(seq, d_head)`` matrix. A ``view`` straight to ``(heads, seq, d_head)``
    without the transpose would mix positions between heads.
    """
    if checking():
        expect_tensor("x", x, min_ndim=2, shape="(..., seq, d_model)")
        expect_divisible("d_model (x.shape[-1])", x.shape[-1], "num_heads", expect_int("num_heads", num_heads))
    return x.reshape(*x.shape[:-1], num_heads, x.shape[-1] // num_heads).transpose(-3, -2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """``(..., heads, seq, d_head)`` -> ``(..., seq, heads * d_head)``: concatenate the heads."""
    if checking():
        expect_tensor("x", x, min_ndim=3, shape="(..., heads, seq, d_head)")
    return x.transpose(-3, -2).flatten(-2)


def repeat_kv(x: torch.Tensor, groups: int) -> torch.Tensor:
    """``(..., kv_heads, seq, d_head)`` -> ``(..., kv_heads * groups, seq, d_head)``: each key/value
    head repeated ``groups`` times in a row (0, 0, 1, 1, ... for ``groups = 2``), so that query head
    ``h`` reads key/value head ``h // groups``.

    ``x.repeat`` would tile the heads instead (0, 1, 0, 1, ...): it runs, with the right shape,
    and pairs some query heads with the wrong key/value head — how many depends on the shape
    (6 of 8 for 8 query and 4 key/value heads, 28 of 32 for 32 and 8; notebook 08 counts them).
    """
    if checking():
        expect_tensor("x", x, min_ndim=3, shape="(..., kv_heads, seq, d_head)")
        expect_int("groups", groups)
    return x if groups == 1 else x.repeat_interleave(groups, dim=-3)
