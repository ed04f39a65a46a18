"""Key/value caches for incremental (token-by-token) decoding.

Taught in notebook 06, section 4 ("Decoding one token at a time, with a key/value cache"); the
preallocated cache (``KVCache(capacity=...)``) in notebook 08, the sliding-window cache with
attention sinks (:class:`SlidingWindowCache`) in notebook 09.

During generation the keys and values of past tokens never change, so they are
kept instead of being recomputed. Keys are stored *after* RoPE: position ``m``
was rotated once, when its token arrived; new tokens continue at
``positions = cache.next_position, cache.next_position + 1, ...`` (``next_position`` is
``length``, the tokens seen). A ``SlidingWindowCache(rope_positions="cache")`` numbers its keys
by their slot in the cache instead (StreamingLLM, Xiao et al., 2023, §3.2): new tokens come at the
next free slot, and a key that moves down when the middle is evicted is rotated back by as many slots.

A module uses a cache in two steps, so that a call that fails leaves the cache as it was:
``keys, values = cache.extended(new_keys, new_values)`` gives everything to attend to, and
``cache.commit(keys, values, rope)`` keeps it once attention has succeeded (``rope``, the module's
:class:`~mhsa_helpers.rope.RotaryEmbedding`, for a cache that moves keys to other slots).
"""

from __future__ import annotations

import torch

from .checks import checking, expect_choice, expect_int, expect_tensor
from .rope import RotaryEmbedding

__all__ = ["CACHE_ROPE_POSITIONS", "KVCache", "SlidingWindowCache", "expect_cache"]

#: Where a :class:`SlidingWindowCache` has RoPE put its keys: at their position in the stream,
#: or at their slot in the cache (StreamingLLM).
CACHE_ROPE_POSITIONS = ("original", "cache")


class KVCache:
    """Keys and values seen so far, each ``(..., length, d)``, usually ``(batch, kv_heads, length, d_head)``.

    Without ``capacity`` each step concatenates the new keys to the old ones: ``O(length)`` copying
    per step, which keeps the class simple to read. With ``capacity`` (notebook 08) the first step
    allocates ``(..., capacity, d)`` buffers and every step writes its rows in place: no copy,
    constant cost per token; more than ``capacity`` tokens raise ``ValueError`` and change nothing.
    Write in place only without autograd (``torch.no_grad()``), as when generating.

    ``length`` counts the tokens seen; ``keys`` and ``values`` are what is held.
    ``rope_positions`` says where RoPE puts the held keys: always ``"original"`` here (rotated
    once, at their position in the stream, and stored rotated), so the next token's position,
    ``next_position``, is ``length``; see :class:`SlidingWindowCache`.
    """

    #: Where RoPE places the held keys: at their position in the stream.
    rope_positions: str = "original"

    def __init__(self, capacity: int | None = None) -> None:
        self.capacity = None if capacity is None else expect_int("capacity", capacity)
        self._keys: torch.Tensor | None = None
        self._values: torch.Tensor | None = None
        self._length = 0

    @property
    def length(self) -> int:
        return self._length

    @property
    def next_position(self) -> int:
        """The RoPE position of the next token: after the ones seen."""
        return self._length

    @property
    def held(self) -> int:
        """How many keys (and values) the cache holds, the ones a new query sees before its own: every one
        seen here (a sliding window keeps fewer)."""
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
        if checking():  # a module's forward checked the cache at its door (expect_cache)
            expect_tensor("keys", keys, min_ndim=2, shape="(..., new, d_head)")
            expect_tensor("values", values, min_ndim=2, shape="(..., new, d_v)")
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
            self.expect_room(keys.shape[-2])
            self.expect_like_held(keys, values)
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

    def expect_room(self, new: int) -> None:
        """A preallocated cache has room for ``new`` more tokens; checked before anything is written."""
        if self.capacity is not None and self.length + new > self.capacity:
            raise ValueError(
                f"capacity={self.capacity} is too small: the cache holds {self.length} tokens and cannot take "
                f"{new} more; make a KVCache with a larger capacity (the cache is unchanged)"
            )

    def expect_like_held(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """New keys and values continue the held ones: the same leading dimensions, sizes, dtype and device."""
        held, held_values = self.keys, self.values
        if held is None or held_values is None:
            return
        if keys.shape[:-2] != held.shape[:-2] or keys.shape[-1] != held.shape[-1]:
            raise ValueError(
                f"keys must match the cached keys except along the sequence axis: keys of shape "
                f"{tuple(keys.shape)} have leading dimensions {tuple(keys.shape[:-2])} and d_head {keys.shape[-1]}, "
                f"but the cache holds leading dimensions {tuple(held.shape[:-2])} and d_head {held.shape[-1]}; "
                f"a cache follows one batch of sequences, so use a new KVCache (or reset()) for another"
            )
        if values.shape[-1] != held_values.shape[-1]:
            raise ValueError(
                f"values must match the cached values' last dimension d_v = {held_values.shape[-1]}, "
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

    def commit(self, keys: torch.Tensor, values: torch.Tensor, rope: RotaryEmbedding | None = None) -> None:
        """Keep ``keys`` and ``values``, the result of :meth:`extended`, as the cache's content. ``rope`` is
        unused here: a key stays where it was rotated (see :class:`SlidingWindowCache`)."""
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
    * ``"cache"`` (StreamingLLM, Xiao et al., 2023, §3.2): each key is held rotated by its slot in
      the cache, ``0 .. kept - 1``: new tokens come at the next free slot (``next_position``, the
      number of keys held), and when the middle is evicted the keys after it move down as many
      slots and are rotated back by as many (:meth:`~mhsa_helpers.rope.RotaryEmbedding.moved_back`:
      rotations compose). A sink is then never more than ``sinks + window - 1`` positions from the
      query, and the window keys keep their true distances. Positions never exceed the cache's
      size, so a stream may be longer than the module's RoPE table (``max_seq_len``). Explicit
      ``token_positions`` are refused with such a cache.

    Until the first token is evicted the two agree exactly (slot = position).
    """

    def __init__(self, window: int, sinks: int = 0, *, rope_positions: str = "original") -> None:
        super().__init__()
        self.window = expect_int(
            "window", window, 1, why=" (each new token sees itself and the window - 1 tokens before it)"
        )
        self.sinks = expect_int("sinks", sinks, 0, why=" (the first tokens that are never evicted)")
        self.rope_positions = expect_choice("rope_positions", rope_positions, CACHE_ROPE_POSITIONS)
        self.positions = torch.zeros(0, dtype=torch.long)

    @property
    def next_position(self) -> int:
        """The RoPE position of the next token: after the ones seen, or with ``rope_positions="cache"`` at
        the next free slot."""
        return self.held if self.rope_positions == "cache" else self._length

    @property
    def held(self) -> int:
        """How many keys the cache holds: the sinks and the window."""
        return self.positions.numel()

    def commit(self, keys: torch.Tensor, values: torch.Tensor, rope: RotaryEmbedding | None = None) -> None:
        """Keep the sinks and the window of ``keys`` and ``values``, the result of :meth:`extended`. With
        ``rope_positions="cache"``, ``rope`` (the module's) rotates each kept key back by the slots it moved
        down; without it the keys are kept as they are (a module without RoPE)."""
        new = keys.shape[-2] - self.held
        positions = torch.cat((self.positions, torch.arange(self._length, self._length + new)))
        self._length += new
        # The next query sits at position `length` and sees positions > length - window, and the sinks.
        keep = (positions < self.sinks) | (positions > self._length - self.window)
        index = keep.nonzero().squeeze(-1)
        keys = keys.index_select(-2, index.to(keys.device))
        self._values = values.index_select(-2, index.to(values.device))
        if rope is not None and self.rope_positions == "cache":
            # Slot index[j] becomes slot j: the kept keys behind an evicted stretch move down by its length.
            keys = rope.moved_back(keys, index - torch.arange(index.numel()))
        self._keys, self.positions = keys, positions[keep]

    def mask_for(self, new: int, *, device: str | torch.device | None = None) -> torch.Tensor:
        """The boolean mask ``(new, kept + new)`` of a step that feeds ``new`` tokens: each sees the
        kept keys and new keys within its window (or among the sinks), none after it. It is made on
        ``device``, by default where the cache's keys are (the CPU before the first step)."""
        expect_int("new", new)
        if device is None:
            device = "cpu" if self._keys is None else self._keys.device
        positions = self.positions.to(device)
        key_positions = torch.cat((positions, torch.arange(self._length, self._length + new, device=device)))
        query_positions = torch.arange(self._length, self._length + new, device=device)[:, None]
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


def expect_cache(
    cache: object, x: torch.Tensor, num_heads: int, d_head: int, token_positions: torch.Tensor | None = None
) -> KVCache:
    """A cache that a layer of ``num_heads`` key/value heads of size ``d_head`` can extend with ``x``'s tokens
    (at ``token_positions``, if the caller gives them)."""
    if not isinstance(cache, KVCache):
        raise TypeError(f"cache must be a KVCache or None, got {type(cache).__name__}")
    if token_positions is not None and cache.rope_positions == "cache":
        raise ValueError(
            "token_positions must be None with a SlidingWindowCache(rope_positions='cache'): it gives "
            f"each key and query its slot in the cache; got token_positions of shape "
            f"{tuple(token_positions.shape)}; use rope_positions='original' to rotate by positions you choose"
        )
    cache.expect_room(x.shape[-2])
    if cache.keys is None or cache.values is None:
        return cache
    if cache.keys.shape[:-3] != x.shape[:-2]:
        raise ValueError(
            f"x has batch shape {tuple(x.shape[:-2])} but the cache holds batch shape "
            f"{tuple(cache.keys.shape[:-3])}; a KVCache follows one batch of sequences: use a new one "
            f"(or cache.reset()) for another"
        )
    for name, held in (("keys", cache.keys), ("values", cache.values)):
        # No ndim check: the keys matched x's batch shape above, and append keeps the values' beside them.
        if held.shape[-3] != num_heads or held.shape[-1] != d_head:
            raise ValueError(
                f"cache must hold {name} of {num_heads} heads of size d_head={d_head}, shaped "
                f"(..., heads, length, d_head), got cached {name} of shape {tuple(held.shape)}; "
                f"use a new KVCache for another module"
            )
        if held.dtype != x.dtype:
            raise TypeError(
                f"cache must hold the dtype of x ({x.dtype}), got cached {name} of dtype {held.dtype}; "
                f"start a new KVCache"
            )
        if held.device != x.device:
            raise ValueError(
                f"cache must be on the device of x ({x.device}), got cached {name} on device {held.device}; "
                f"start a new KVCache"
            )
    return cache
