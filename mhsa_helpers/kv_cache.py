"""A key/value cache for incremental (token-by-token) decoding.

During generation the keys and values of past tokens never change, so they are
kept instead of being recomputed. Keys are stored *after* RoPE: position ``m``
was rotated once, when its token arrived; new tokens continue at
``positions = cache.length, cache.length + 1, ...``.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch

from .checks import check_ndim, check_tensor

__all__ = ["KVCache"]


class KVCache:
    """Keys and values seen so far, each ``(..., length, d)``, usually ``(batch, heads, length, d_head)``.

    ``append`` concatenates along the sequence axis; that is ``O(length)`` per
    step, which keeps the class simple to read. ``length`` is the next token's
    position. ``extended`` returns the same concatenation without storing it, for a
    caller that stores it only once the step has succeeded.
    """

    def __init__(self) -> None:
        self.keys: Optional[torch.Tensor] = None
        self.values: Optional[torch.Tensor] = None

    @property
    def length(self) -> int:
        return 0 if self.keys is None else self.keys.shape[-2]

    def append(self, keys: torch.Tensor, values: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Add ``(..., new, d_head)`` keys and ``(..., new, d_v)`` values; return all of them so far."""
        self.keys, self.values = self.extended(keys, values)
        return self.keys, self.values

    def extended(self, keys: torch.Tensor, values: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """What :meth:`append` would hold after adding ``keys`` and ``values``; the cache is unchanged."""
        check_tensor("keys", keys)
        check_tensor("values", values)
        check_ndim("keys", keys, 2, "(..., new, d_head)")
        check_ndim("values", values, 2, "(..., new, d_v)")
        if values.shape[:-1] != keys.shape[:-1]:
            raise ValueError(
                f"values must have one row per key, with the same leading dimensions: expected "
                f"values.shape[:-1] == keys.shape[:-1] = {tuple(keys.shape[:-1])}, got values of shape "
                f"{tuple(values.shape)}"
            )
        if values.dtype != keys.dtype:
            raise TypeError(f"values must have the dtype of keys ({keys.dtype}), got {values.dtype}")
        if values.device != keys.device:
            raise ValueError(f"values must be on the device of keys ({keys.device}), got device {values.device}")
        if self.keys is None or self.values is None:
            return keys, values
        held = self.keys
        if keys.shape[:-2] != held.shape[:-2] or keys.shape[-1] != held.shape[-1]:
            raise ValueError(
                f"keys must match the cached keys except along the sequence axis: keys of shape "
                f"{tuple(keys.shape)} have leading dimensions {tuple(keys.shape[:-2])} and d_head {keys.shape[-1]}, "
                f"but the cache holds leading dimensions {tuple(held.shape[:-2])} and d_head {held.shape[-1]}; "
                f"a cache follows one batch of sequences, so use a new KVCache (or reset()) for another"
            )
        if values.shape[-1] != self.values.shape[-1]:
            raise ValueError(
                f"values must match the cached values' last dimension d_v = {self.values.shape[-1]}, "
                f"got values of shape {tuple(values.shape)}"
            )
        if keys.dtype != held.dtype:
            raise TypeError(
                f"keys have dtype {keys.dtype} but the cache holds {held.dtype}; convert them with "
                f".to({held.dtype}) or start a new KVCache"
            )
        if keys.device != held.device:
            raise ValueError(
                f"keys are on device {keys.device} but the cache is on {held.device}; move them with "
                f".to({str(held.device)!r}) or start a new KVCache"
            )
        return torch.cat((held, keys), dim=-2), torch.cat((self.values, values), dim=-2)

    def reset(self) -> None:
        self.keys = None
        self.values = None

    def __repr__(self) -> str:
        shape = None if self.keys is None else tuple(self.keys.shape)
        return f"KVCache(length={self.length}, keys shape={shape})"
