"""Online softmax and tiled attention: the idea behind FlashAttention, in plain PyTorch.

Taught in notebook 08 ("Attention at scale"), sections 2 and 3.

Attention's textbook form builds the ``(seq_q, seq_k)`` matrix of scores, softmaxes each row
and multiplies by ``V``. Its memory grows with ``n²``. The online softmax removes the need
for the whole row at once: read the keys one *tile* at a time and carry, for every query,

* ``running_max`` ``m``: the largest score seen so far (starts at ``-inf``);
* ``normaliser`` ``l``: ``Σ exp(score - m)`` over the keys seen so far (starts at 0);
* ``output`` ``o``: ``Σ exp(score - m) · v`` over the keys seen so far (starts at 0).

When a tile raises the maximum from ``m`` to ``m'``, every term already summed was computed
against the old ``m``; multiplying ``l`` *and* ``o`` by ``exp(m - m')`` re-expresses them
against ``m'``. After the last tile, ``o / l`` is exactly ``softmax(scores) @ V``: the
``(seq_q, seq_k)`` matrix never exists, only ``(tile, tile)`` blocks of it.

:func:`online_softmax_update` is that one step; :func:`online_softmax` and
:func:`tiled_attention` drive it over the tiles; :func:`online_softmax_trace` records the
running maximum and normaliser after each tile, for a picture; :func:`tile_kinds` says which
``(query tile, key tile)`` blocks :func:`tiled_attention` computes, masks or skips.

Convention for rows with nothing to attend to (every score ``-inf``): the result is all
zeros, never NaN, as in :func:`mhsa_helpers.softmax.softmax` (``exp(-inf - (-inf))`` would be
NaN, so a row whose maximum is still ``-inf`` is shifted by 0 instead).

This is a teaching implementation: its Python loop over tiles is much slower than
:func:`torch.nn.functional.scaled_dot_product_attention` (``benchmarks/bench_tiled.py``
measures by how much), whose fused kernels do the same thing in compiled code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .checks import broadcast_shape, expect_bool, expect_dtype_of, expect_floating, expect_int, expect_number

__all__ = [
    "OnlineSoftmaxState",
    "SoftmaxTrace",
    "initial_online_softmax_state",
    "online_softmax",
    "online_softmax_finish",
    "online_softmax_trace",
    "online_softmax_update",
    "tile_kinds",
    "tiled_attention",
]

_LOW_PRECISION = (torch.float16, torch.bfloat16)

COMPUTED = "computed"
MASKED = "masked"
SKIPPED = "skipped"


@dataclass(frozen=True)
class OnlineSoftmaxState:
    """What the online softmax carries from one key tile to the next, for each query.

    Shapes: ``running_max (..., seq_q, 1)``, ``normaliser (..., seq_q, 1)``,
    ``output (..., seq_q, d_v)``. ``output`` is *unnormalised*: divide by ``normaliser``
    at the end (:func:`online_softmax_finish`).
    """

    running_max: torch.Tensor
    normaliser: torch.Tensor
    output: torch.Tensor


@dataclass(frozen=True)
class SoftmaxTrace:
    """The running maximum and normaliser after each tile (:func:`online_softmax_trace`).

    Shapes: ``running_max (..., num_tiles)``, ``normaliser (..., num_tiles)``;
    ``tiles`` holds the ``(start, stop)`` key positions of each tile.
    """

    running_max: torch.Tensor
    normaliser: torch.Tensor
    tiles: tuple[tuple[int, int], ...]


def initial_online_softmax_state(
    batch_shape: tuple[int, ...] | torch.Size,
    seq_q: int,
    d_v: int,
    *,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> OnlineSoftmaxState:
    """The state before any key is read: maximum ``-inf``, normaliser 0, output 0.

    Shapes: ``running_max`` and ``normaliser`` ``(*batch_shape, seq_q, 1)``, ``output``
    ``(*batch_shape, seq_q, d_v)``. The maximum must start at ``-inf``, not 0: starting at 0
    claims a score of 0 was seen, and rows whose scores are all far below 0 underflow to 0.
    """
    expect_int("seq_q", seq_q)
    expect_int("d_v", d_v)
    shape = (*batch_shape, seq_q, 1)
    return OnlineSoftmaxState(
        running_max=torch.full(shape, float("-inf"), dtype=dtype, device=device),
        normaliser=torch.zeros(shape, dtype=dtype, device=device),
        output=torch.zeros((*batch_shape, seq_q, d_v), dtype=dtype, device=device),
    )


def online_softmax_update(state: OnlineSoftmaxState, scores: torch.Tensor, values: torch.Tensor) -> OnlineSoftmaxState:
    """Fold one tile of keys into the state: the heart of the online softmax.

    Shapes: ``scores (..., seq_q, tile)`` (already scaled, ``-inf`` where masked),
    ``values (..., tile, d_v)``; the state's tensors as in :class:`OnlineSoftmaxState`.
    Computed in the state's dtype.

    .. code-block:: python

        new_max = torch.maximum(state.running_max, scores.amax(-1, keepdim=True))
        rescale = torch.exp(state.running_max - new_max)      # < 1 when the max grew
        weights = torch.exp(scores - new_max)                 # this tile, against the new max
        normaliser = state.normaliser * rescale + weights.sum(-1, keepdim=True)
        output = state.output * rescale + weights @ values

    (plus a guard: a row whose maximum is still ``-inf`` shifts by 0, so it stays all zeros).
    """
    if not isinstance(state, OnlineSoftmaxState):
        raise TypeError(f"state must be an OnlineSoftmaxState, got {type(state).__name__}")
    expect_floating("scores", scores, min_ndim=2, shape="(..., seq_q, tile)")
    expect_floating("values", values, min_ndim=2, shape="(..., tile, d_v)")
    if scores.shape[-1] != values.shape[-2]:
        raise ValueError(
            f"values must have one row per score column (key): expected values.shape[-2] == {scores.shape[-1]}, "
            f"got scores shape {tuple(scores.shape)} and values shape {tuple(values.shape)}"
        )
    scores = scores.to(state.running_max.dtype)
    values = values.to(state.output.dtype)
    new_max = torch.maximum(state.running_max, scores.amax(dim=-1, keepdim=True))
    # -inf - (-inf) is NaN: a row with no visible key yet shifts by 0 (its exps are all 0 anyway).
    shift = new_max.masked_fill(new_max == float("-inf"), 0.0)
    rescale = torch.exp(state.running_max - shift)
    weights = torch.exp(scores - shift)
    normaliser = state.normaliser * rescale + weights.sum(dim=-1, keepdim=True)
    output = state.output * rescale + weights @ values
    return OnlineSoftmaxState(running_max=new_max, normaliser=normaliser, output=output)


def online_softmax_finish(state: OnlineSoftmaxState) -> torch.Tensor:
    """``output / normaliser``: the softmax-weighted sum of the values, ``(..., seq_q, d_v)``.

    A row whose normaliser is 0 (no key was visible) gives zeros, not NaN.
    """
    safe = torch.where(state.normaliser == 0, torch.ones_like(state.normaliser), state.normaliser)
    return state.output / safe


def _tiles(length: int, tile_size: int) -> list[tuple[int, int]]:
    return [(start, min(start + tile_size, length)) for start in range(0, length, tile_size)]


def _accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    # exp and the running sums lose too many digits in 16 bits; float64 stays float64.
    return torch.float32 if dtype in _LOW_PRECISION else dtype


def online_softmax(scores: torch.Tensor, tile_size: int) -> torch.Tensor:
    """Softmax over the last axis, reading it one tile at a time (a single pass).

    Shapes: ``scores (..., n)`` -> ``(..., n)``, the same dtype (float16/bfloat16 are
    computed in float32). Equal to ``torch.softmax(scores, dim=-1)``, except that a row of
    only ``-inf`` gives zeros instead of NaN.

    The values here are the rows of the identity matrix: the weighted sum of one-hot
    vectors *is* the row of weights, so the same :func:`online_softmax_update` that
    computes attention computes the softmax itself (at ``O(n²)`` cost per row, fine for teaching).
    """
    expect_floating("scores", scores, min_ndim=1, shape="(..., n)")
    tile_size = expect_int("tile_size", tile_size)
    n = scores.shape[-1]
    if n == 0:
        raise ValueError(f"scores must have at least one entry in its last dimension, got shape {tuple(scores.shape)}")
    dtype = _accumulation_dtype(scores.dtype)
    rows = scores.unsqueeze(-2).to(dtype)  # (..., 1, n): one query per row
    identity = torch.eye(n, dtype=dtype, device=scores.device)
    state = initial_online_softmax_state(rows.shape[:-2], 1, n, dtype=dtype, device=scores.device)
    for start, stop in _tiles(n, tile_size):
        state = online_softmax_update(state, rows[..., start:stop], identity[start:stop])
    return online_softmax_finish(state).squeeze(-2).to(scores.dtype)


def online_softmax_trace(scores: torch.Tensor, tile_size: int) -> SoftmaxTrace:
    """The running maximum and normaliser after each tile of :func:`online_softmax`.

    Shapes: ``scores (..., n)`` -> :class:`SoftmaxTrace` with ``running_max`` and
    ``normaliser`` of shape ``(..., num_tiles)``, ``num_tiles = ceil(n / tile_size)``, in
    float32 (float64 for float64 scores). The last normaliser is ``Σ exp(score - max)`` of
    the whole row.
    """
    expect_floating("scores", scores, min_ndim=1, shape="(..., n)")
    tile_size = expect_int("tile_size", tile_size)
    n = scores.shape[-1]
    if n == 0:
        raise ValueError(f"scores must have at least one entry in its last dimension, got shape {tuple(scores.shape)}")
    dtype = _accumulation_dtype(scores.dtype)
    rows = scores.unsqueeze(-2).to(dtype)
    # The values do not change the maximum or the normaliser: one column of ones is enough.
    ones = torch.ones(n, 1, dtype=dtype, device=scores.device)
    state = initial_online_softmax_state(rows.shape[:-2], 1, 1, dtype=dtype, device=scores.device)
    tiles = _tiles(n, tile_size)
    maxima: list[torch.Tensor] = []
    normalisers: list[torch.Tensor] = []
    for start, stop in tiles:
        state = online_softmax_update(state, rows[..., start:stop], ones[start:stop])
        maxima.append(state.running_max[..., 0, 0])
        normalisers.append(state.normaliser[..., 0, 0])
    return SoftmaxTrace(torch.stack(maxima, dim=-1), torch.stack(normalisers, dim=-1), tuple(tiles))


def _block_kind(q_start: int, q_stop: int, k_start: int, k_stop: int, offset: int, causal: bool) -> str:
    """Query ``i`` sits at position ``offset + i`` and, causally, sees keys ``j <= offset + i``."""
    if not causal:
        return COMPUTED
    if k_start > offset + q_stop - 1:
        return SKIPPED  # even the tile's last query comes before the tile's first key
    if k_stop - 1 > offset + q_start:
        return MASKED  # some key is after some query: mask inside the block
    return COMPUTED


def tile_kinds(seq_q: int, seq_k: int, *, tile_size: int, causal: bool = False) -> list[list[str]]:
    """What :func:`tiled_attention` does with each ``(query tile, key tile)`` block.

    Returns a ``num_q_tiles x num_k_tiles`` list of lists of ``"computed"`` (every score
    used), ``"masked"`` (computed, with the future keys set to ``-inf``) or ``"skipped"``
    (every key after every query: never computed). Without ``causal`` every block is
    ``"computed"``. Causal queries are the *last* ``seq_q`` of ``seq_k`` positions.
    """
    expect_int("seq_q", seq_q)
    expect_int("seq_k", seq_k)
    tile_size = expect_int("tile_size", tile_size)
    _check_causal(causal, seq_q, seq_k)
    offset = seq_k - seq_q
    return [
        [_block_kind(q0, q1, k0, k1, offset, causal) for k0, k1 in _tiles(seq_k, tile_size)]
        for q0, q1 in _tiles(seq_q, tile_size)
    ]


def _check_causal(causal: object, seq_q: int, seq_k: int) -> None:
    if expect_bool("causal", causal) and seq_q > seq_k:
        raise ValueError(
            f"causal needs seq_q <= seq_k (queries are the last seq_q positions), got seq_q={seq_q}, seq_k={seq_k}"
        )


def _check_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[int, ...]:
    for name, tensor, hint in (("q", q, "(..., seq_q, d)"), ("k", k, "(..., seq_k, d)"), ("v", v, "(..., seq_k, d_v)")):
        expect_floating(name, tensor, min_ndim=2, shape=hint)
    expect_dtype_of("k", k, "q", q)
    expect_dtype_of("v", v, "q", q)
    if k.shape[-1] != q.shape[-1]:
        raise ValueError(
            f"k must have the same last dimension d as q: expected k.shape[-1] == {q.shape[-1]}, "
            f"got q shape {tuple(q.shape)} and k shape {tuple(k.shape)}"
        )
    if v.shape[-2] != k.shape[-2]:
        raise ValueError(
            f"v must have one row per key: expected v.shape[-2] == seq_k == {k.shape[-2]}, "
            f"got k shape {tuple(k.shape)} and v shape {tuple(v.shape)}"
        )
    if q.shape[-2] == 0 or k.shape[-2] == 0 or q.shape[-1] == 0:
        raise ValueError(
            f"q and k must hold at least one position and one feature, got q shape {tuple(q.shape)} "
            f"and k shape {tuple(k.shape)}"
        )
    batch_shape = broadcast_shape(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    if batch_shape is None:
        raise ValueError(
            f"q, k and v must have broadcastable batch dimensions, got q shape {tuple(q.shape)}, "
            f"k shape {tuple(k.shape)} and v shape {tuple(v.shape)}"
        )
    return batch_shape


def tiled_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    tile_size: int = 128,
    scale: float | None = None,
) -> torch.Tensor:
    """Attention computed tile by tile with the online softmax, never holding ``(seq_q, seq_k)``.

    Shapes: ``q (..., seq_q, d)``, ``k (..., seq_k, d)``, ``v (..., seq_k, d_v)`` (batch
    dimensions broadcast, e.g. ``(batch, heads, seq, d_head)``) -> ``(..., seq_q, d_v)`` in
    q's dtype. Equal to ``torch.nn.functional.scaled_dot_product_attention(q, k, v,
    scale=scale)`` and, with ``causal=True``, to it with the package's causal mask.

    For each tile of ``tile_size`` queries, the keys are read one tile at a time and folded
    in with :func:`online_softmax_update`; the largest temporary is one
    ``(..., tile_size, tile_size)`` block of scores, so memory grows like ``seq`` instead of
    ``seq²``. float16/bfloat16 inputs are accumulated in float32.

    ``causal=True`` aligns the mask to the *last* key, like ``is_causal`` in
    :func:`mhsa_helpers.attention.scaled_dot_product_attention`: the queries are the last
    ``seq_q`` of ``seq_k`` positions (decoding after ``seq_k - seq_q`` cached keys). Key tiles
    entirely in a query tile's future are skipped, not computed and masked
    (:func:`tile_kinds` shows which).
    """
    batch_shape = _check_inputs(q, k, v)
    tile_size = expect_int("tile_size", tile_size)
    seq_q, seq_k, d_v = q.shape[-2], k.shape[-2], v.shape[-1]
    _check_causal(causal, seq_q, seq_k)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else expect_number("scale", scale, why=" or None (1/sqrt(d))")
    dtype = _accumulation_dtype(q.dtype)
    offset = seq_k - seq_q

    output = torch.empty((*batch_shape, seq_q, d_v), dtype=q.dtype, device=q.device)
    for q_start, q_stop in _tiles(seq_q, tile_size):
        q_tile = q[..., q_start:q_stop, :].to(dtype) * scale
        state = initial_online_softmax_state(batch_shape, q_stop - q_start, d_v, dtype=dtype, device=q.device)
        for k_start, k_stop in _tiles(seq_k, tile_size):
            kind = _block_kind(q_start, q_stop, k_start, k_stop, offset, causal)
            if kind == SKIPPED:
                break  # key tiles only move further into the future
            scores = q_tile @ k[..., k_start:k_stop, :].to(dtype).transpose(-2, -1)
            if kind == MASKED:
                query_pos = torch.arange(q_start, q_stop, device=q.device)[:, None] + offset
                key_pos = torch.arange(k_start, k_stop, device=q.device)[None, :]
                scores = scores.masked_fill(key_pos > query_pos, float("-inf"))
            state = online_softmax_update(state, scores, v[..., k_start:k_stop, :])
        output[..., q_start:q_stop, :] = online_softmax_finish(state).to(q.dtype)
    return output
