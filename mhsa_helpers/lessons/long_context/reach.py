"""How far information travels through stacked sliding-window layers (notebook 09)."""

from __future__ import annotations

import torch

from ...checks import expect_int
from ...long_context import sliding_window_mask

__all__ = ["window_reach"]


def window_reach(seq_len: int, window: int, layers: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(mask, reach)``, two boolean ``(seq_len, seq_len)`` matrices: ``mask`` is one layer's
    sliding window; ``reach[i, j]`` says whether token ``j`` can influence position ``i`` after
    ``layers`` layers — the boolean matrix power ``mask^layers``, since position ``i`` reads the
    outputs of the previous layer at the keys its window allows (the residual keeps ``i`` itself)."""
    expect_int("seq_len", seq_len, 1)
    expect_int("layers", layers, 1)
    mask = sliding_window_mask(seq_len, window=window)
    reach = mask.clone()
    for _ in range(layers - 1):
        reach = (mask.int() @ reach.int()) > 0
    return mask, reach
