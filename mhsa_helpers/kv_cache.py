"""A key/value cache for incremental (token-by-token) decoding.

During generation the keys and values of past tokens never change, so they are
kept instead of being recomputed. Keys are stored *after* RoPE: position ``m``
was rotated once, when its token arrived; new tokens continue at
``positions = cache.length, cache.length + 1, ...``.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch

from ._validation import check_tensor

__all__ = ["KVCache"]


class KVCache:
    """Keys and values seen so far, each ``(batch, heads, length, d_head)``.

    ``append`` concatenates along the sequence axis; that is ``O(length)`` per
    step, which keeps the class simple to read. ``length`` is the next token's
    position.
    """

    def __init__(self) -> None:
        self.keys: Optional[torch.Tensor] = None
        self.values: Optional[torch.Tensor] = None

    @property
    def length(self) -> int:
        return 0 if self.keys is None else self.keys.shape[-2]

    def append(self, keys: torch.Tensor, values: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Add ``(batch, heads, new, d_head)`` keys and values; return all of them so far."""
        check_tensor("keys", keys)
        check_tensor("values", values)
        if keys.ndim != 4 or values.shape[:-1] != keys.shape[:-1]:
            raise ValueError(
                f"keys and values must be (batch, heads, new, d_head) with matching first three "
                f"dimensions, got keys {tuple(keys.shape)} and values {tuple(values.shape)}"
            )
        if self.keys is None or self.values is None:
            self.keys, self.values = keys, values
        else:
            if keys.shape[:2] != self.keys.shape[:2] or keys.shape[-1] != self.keys.shape[-1]:
                raise ValueError(
                    f"keys must match the cached (batch, heads, ..., d_head) = "
                    f"{(*self.keys.shape[:2], '...', self.keys.shape[-1])}, got {tuple(keys.shape)}"
                )
            self.keys = torch.cat((self.keys, keys), dim=-2)
            self.values = torch.cat((self.values, values), dim=-2)
        return self.keys, self.values

    def reset(self) -> None:
        self.keys = None
        self.values = None

    def __repr__(self) -> str:
        shape = None if self.keys is None else tuple(self.keys.shape)
        return f"KVCache(length={self.length}, keys shape={shape})"
