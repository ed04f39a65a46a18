"""The numerically stable softmax that turns attention scores into weights.

Taught in notebook 02, section "The numerically stable softmax" (and by hand in notebook 01, Step 4).
"""

from __future__ import annotations

import torch

from .checks import checking, expect_floating

__all__ = ["LOW_PRECISION_DTYPES", "softmax"]

#: Dtypes whose scores and softmax are computed in float32 and cast back.
LOW_PRECISION_DTYPES = (torch.float16, torch.bfloat16)


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Numerically stable softmax along ``dim``.

    Subtracting the maximum before ``exp`` changes nothing mathematically
    (``exp(x - c) / sum(exp(x - c)) == exp(x) / sum(exp(x))``) but keeps
    ``exp`` from overflowing: ``softmax(x + 100) == softmax(x)``.

    A slice that is ``-inf`` everywhere (a query with nothing to attend to)
    gives zeros, never NaN. float16/bfloat16 inputs are computed in float32
    and cast back.

    Shapes: ``x`` any shape; the result has the same shape and dtype.
    """
    if checking():
        expect_floating("x", x)
    out_dtype = x.dtype
    if out_dtype in LOW_PRECISION_DTYPES:
        x = x.float()
    row_max = x.amax(dim=dim, keepdim=True)
    # An all -inf row has max -inf; -inf - (-inf) is NaN, so shift by 0 instead.
    row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max)).detach()
    exps = torch.exp(x - row_max)
    total = exps.sum(dim=dim, keepdim=True)
    # Dividing by 1 where the total is 0 keeps both the value and its gradient finite.
    total = torch.where(total == 0, torch.ones_like(total), total)
    return (exps / total).to(out_dtype)
