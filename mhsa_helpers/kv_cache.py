"""A key/value cache for incremental (token-by-token) decoding.

Taught in notebook 06, section 4 ("Decoding one token at a time, with a key/value cache").

During generation the keys and values of past tokens never change, so they are
kept instead of being recomputed. Keys are stored *after* RoPE: position ``m``
was rotated once, when its token arrived; new tokens continue at
``positions = cache.length, cache.length + 1, ...``.
"""

from __future__ import annotations

import torch

from . import checks

__all__ = ["KVCache"]


class KVCache:
    """Keys and values seen so far, each ``(..., length, d)``, usually ``(batch, heads, length, d_head)``.

    ``append`` concatenates along the sequence axis; that is ``O(length)`` per
    step, which keeps the class simple to read. ``length`` is the next token's
    position. ``extended`` returns the same concatenation without storing it, for a
    caller that stores it only once the step has succeeded.
    """

    def __init__(self) -> None:
        self.keys: torch.Tensor | None = None
        self.values: torch.Tensor | None = None

    @property
    def length(self) -> int:
        return 0 if self.keys is None else self.keys.shape[-2]

    def append(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add ``(..., new, d_head)`` keys and ``(..., new, d_v)`` values; return all of them so far."""
        self.keys, self.values = self.extended(keys, values)
        return self.keys, self.values

    def extended(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """What :meth:`append` would hold after adding ``keys`` and ``values``; the cache is unchanged."""
        checks.kv_cache_args(self, keys, values)
        return self.extended_unchecked(keys, values)

    def extended_unchecked(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`extended` without its argument checks, for a caller that has made them
        (``MultiHeadSelfAttention.forward``)."""
        if self.keys is None or self.values is None:
            return keys, values
        return torch.cat((self.keys, keys), dim=-2), torch.cat((self.values, values), dim=-2)

    def reset(self) -> None:
        self.keys = None
        self.values = None

    def __repr__(self) -> str:
        shape = None if self.keys is None else tuple(self.keys.shape)
        return f"KVCache(length={self.length}, keys shape={shape})"
