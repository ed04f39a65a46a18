"""Key/value caches for incremental (token-by-token) decoding.

Taught in notebook 06, section 4 ("Decoding one token at a time, with a key/value cache"); the
preallocated cache (``KVCache(capacity=...)``) in notebook 08, the sliding-window cache with
attention sinks (:class:`SlidingWindowCache`) in notebook 09.

During generation the keys and values of past tokens never change, so they are
kept instead of being recomputed. Keys are stored *after* RoPE: position ``m``
was rotated once, when its token arrived; new tokens continue at
``positions = cache.length, cache.length + 1, ...``. The one exception is a
``SlidingWindowCache(rope_positions="cache")``, which stores keys *before* RoPE and
has them rotated at every step by their slot in the cache (StreamingLLM, Xiao et al., 2023, §3.2).

A module uses a cache in two steps, so that a call that fails leaves the cache as it was:
``keys, values = cache.extended(new_keys, new_values)`` gives everything to attend to, and
``cache.commit(keys, values)`` keeps it once attention has succeeded.
"""

from __future__ import annotations

import torch

from . import checks

__all__ = ["KVCache", "SlidingWindowCache"]


class KVCache:
    """Keys and values seen so far, each ``(..., length, d)``, usually ``(batch, kv_heads, length, d_head)``.

    Without ``capacity`` each step concatenates the new keys to the old ones: ``O(length)`` copying
    per step, which keeps the class simple to read. With ``capacity`` (notebook 08) the first step
    allocates ``(..., capacity, d)`` buffers and every step writes its rows in place: no copy,
    constant cost per token; more than ``capacity`` tokens raise ``ValueError`` and change nothing.
    Write in place only without autograd (``torch.no_grad()``), as when generating.

    ``length`` is the next token's position; ``keys`` and ``values`` are what is held.
    ``rope_positions`` says where RoPE puts the held keys: always ``"original"`` here (rotated
    once, at their position in the stream, and stored rotated); see :class:`SlidingWindowCache`.
    """

    #: Where RoPE places the held keys (read by ``MultiHeadSelfAttention.forward``).
    rope_positions: str = "original"

    def __init__(self, capacity: int | None = None) -> None:
        checks.kv_cache_init_args(capacity)
        self.capacity = capacity
        self._keys: torch.Tensor | None = None
        self._values: torch.Tensor | None = None
        self._length = 0

    @property
    def length(self) -> int:
        return self._length

    @property
    def keys(self) -> torch.Tensor | None:
        if self._keys is None or self.capacity is None:
            return self._keys
        return self._keys[..., : self._length, :] if self._length else None

    @property
    def values(self) -> torch.Tensor | None:
        if self._values is None or self.capacity is None:
            return self._values
        return self._values[..., : self._length, :] if self._length else None

    def append(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add ``(..., new, d_head)`` keys and ``(..., new, d_v)`` values; return all of them so far."""
        all_keys, all_values = self.extended(keys, values)
        self.commit(all_keys, all_values)
        return all_keys, all_values

    def extended(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """What :meth:`append` would hold after adding ``keys`` and ``values``; the cache's
        :attr:`length`, :attr:`keys` and :attr:`values` are unchanged until :meth:`commit`."""
        checks.kv_cache_args(self, keys, values)
        return self.extended_unchecked(keys, values)

    def extended_unchecked(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`extended` without its argument checks, for a caller that has made them
        (``MultiHeadSelfAttention.forward``)."""
        if self.capacity is None:
            if self._keys is None or self._values is None:
                return keys, values
            return torch.cat((self._keys, keys), dim=-2), torch.cat((self._values, values), dim=-2)
        if self._keys is None or self._values is None or self._length == 0:
            # Allocated at the first step, when the batch shape, dtype and device are known.
            self._keys = keys.new_empty((*keys.shape[:-2], self.capacity, keys.shape[-1]))
            self._values = values.new_empty((*values.shape[:-2], self.capacity, values.shape[-1]))
        end = self._length + keys.shape[-2]
        # Rows beyond `length` are not part of the cache yet: writing them changes nothing that is held.
        self._keys[..., self._length : end, :] = keys
        self._values[..., self._length : end, :] = values
        return self._keys[..., :end, :], self._values[..., :end, :]

    def commit(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Keep ``keys`` and ``values``, the result of :meth:`extended`, as the cache's content."""
        if self.capacity is None:
            self._keys, self._values = keys, values
        self._length = keys.shape[-2]

    def reset(self) -> None:
        """Forget everything (a preallocated cache allocates again at its next step)."""
        self._keys = None
        self._values = None
        self._length = 0

    def __repr__(self) -> str:
        shape = None if self.keys is None else tuple(self.keys.shape)
        capacity = "" if self.capacity is None else f", capacity={self.capacity}"
        return f"{type(self).__name__}(length={self.length}{capacity}, keys shape={shape})"


class SlidingWindowCache(KVCache):
    """A cache for sliding-window attention (notebook 09): it keeps the keys and values of the
    first ``sinks`` tokens and of the last ``window - 1`` tokens, so that the next token, which
    sees itself and the ``window - 1`` tokens before it (plus the sinks), finds exactly what it
    may attend to. Memory stays ``sinks + window`` rows however long the stream.

    ``length`` counts every token seen; ``keys``/``values`` hold only the kept rows, and
    ``positions`` their positions in the stream. Decoding one token at a time needs no mask; a
    step of several new tokens passes ``mask=cache.mask_for(new)``.

    ``rope_positions`` chooses the positions RoPE rotates by, once the middle has been evicted:

    * ``"original"`` (default): each key is rotated once, at its position in the stream, and
      stored rotated, as in :class:`KVCache`. Decoding equals the full pass with
      ``sliding_window_mask(..., window, sinks)``; but after ``t`` tokens the query sees a sink
      ``t`` positions back, a distance that grows without bound and that a model trained on
      short sequences never saw.
    * ``"cache"`` (StreamingLLM, Xiao et al., 2023, §3.2): keys are stored *before* RoPE; at
      each step the held keys and the new ones are rotated by their slot in the cache,
      ``0 .. kept + new - 1``, and each new query by its own slot. A sink is then never more than
      ``sinks + window - 1`` positions from the query, and the window keys keep their true
      distances. Positions never exceed the cache's size, so a stream may be longer than the
      module's RoPE table (``max_seq_len``). ``MultiHeadSelfAttention`` does the rotation; it
      refuses explicit ``token_positions`` with such a cache.

    Until the first token is evicted the two agree exactly (slot = position).
    """

    def __init__(self, window: int, sinks: int = 0, *, rope_positions: str = "original") -> None:
        checks.sliding_window_cache_args(window, sinks, rope_positions)
        super().__init__()
        self.window, self.sinks = window, sinks
        self.rope_positions = rope_positions
        self.positions = torch.zeros(0, dtype=torch.long)

    def commit(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        new = keys.shape[-2] - self.positions.numel()
        positions = torch.cat((self.positions, torch.arange(self._length, self._length + new)))
        self._length += new
        # The next query sits at position `length` and sees positions > length - window, and the sinks.
        keep = (positions < self.sinks) | (positions > self._length - self.window)
        index = keep.nonzero().squeeze(-1).to(keys.device)
        self._keys, self._values = keys.index_select(-2, index), values.index_select(-2, index)
        self.positions = positions[keep]

    def mask_for(self, new: int) -> torch.Tensor:
        """The boolean mask ``(new, kept + new)`` of a step that feeds ``new`` tokens: each sees the
        kept keys and new keys within its window (or among the sinks), none after it."""
        checks.cache_mask_args(self, new)
        key_positions = torch.cat((self.positions, torch.arange(self._length, self._length + new)))
        query_positions = torch.arange(self._length, self._length + new)[:, None]
        behind = query_positions - key_positions[None, :]
        return (behind >= 0) & ((behind < self.window) | (key_positions[None, :] < self.sinks))

    def reset(self) -> None:
        super().reset()
        self.positions = torch.zeros(0, dtype=torch.long)

    def __repr__(self) -> str:
        shape = None if self.keys is None else tuple(self.keys.shape)
        return (
            f"{type(self).__name__}(window={self.window}, sinks={self.sinks}, "
            f"rope_positions={self.rope_positions!r}, length={self.length}, keys shape={shape})"
        )
