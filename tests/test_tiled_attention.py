"""Online softmax and tiled attention (mhsa_helpers.tiled_attention) against PyTorch's own softmax
and scaled_dot_product_attention, including the causal alignment, skipped tiles and bad input."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

import mhsa_helpers.tiled_attention as tiled
from mhsa_helpers.tiled_attention import (
    OnlineSoftmaxState,
    initial_online_softmax_state,
    online_softmax,
    online_softmax_finish,
    online_softmax_trace,
    online_softmax_update,
    tile_kinds,
    tiled_attention,
)

NEG_INF = float("-inf")


def bottom_right_causal(seq_q: int, seq_k: int) -> torch.Tensor:
    """Query i (the last seq_q of seq_k positions) sees keys j <= seq_k - seq_q + i, written out by loops."""
    mask = torch.zeros(seq_q, seq_k, dtype=torch.bool)
    for i in range(seq_q):
        for j in range(seq_k):
            mask[i, j] = j <= seq_k - seq_q + i
    return mask


def reference(q, k, v, *, causal=False, scale=None):
    mask = bottom_right_causal(q.shape[-2], k.shape[-2]) if causal else None
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)


def qkv(batch, seq_q, seq_k, d, d_v, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*batch, seq_q, d, generator=g, dtype=dtype)
    k = torch.randn(*batch, seq_k, d, generator=g, dtype=dtype)
    v = torch.randn(*batch, seq_k, d_v, generator=g, dtype=dtype)
    return q, k, v


# ------------------------------------------------------------------ online softmax


@pytest.mark.parametrize("tile_size", [1, 2, 3, 7, 64])
def test_online_softmax_equals_torch_softmax(tile_size):
    scores = torch.randn(4, 5, 13, dtype=torch.float64) * 5
    torch.testing.assert_close(online_softmax(scores, tile_size), torch.softmax(scores, dim=-1))


@pytest.mark.parametrize("tile_size", [1, 2])
def test_online_softmax_huge_gap_and_masked_entries(tile_size):
    scores = torch.tensor(
        [
            [1000.0, 0.0],  # exp(1000) overflows: only the running max keeps it finite
            [0.0, 1000.0],  # the max grows on the second tile: the first tile must be rescaled to 0
            [NEG_INF, 2.0],  # the first tile has nothing visible yet
            [3.0, NEG_INF],
            [-1000.0, -1000.0],  # far below 0: a running max started at 0 would underflow
        ],
        dtype=torch.float64,
    )
    expected = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0], [1.0, 0.0], [0.5, 0.5]], dtype=torch.float64)
    torch.testing.assert_close(online_softmax(scores, tile_size), expected)
    torch.testing.assert_close(online_softmax(scores, tile_size), torch.softmax(scores, dim=-1))


@pytest.mark.parametrize("tile_size", [1, 2, 5])
def test_fully_masked_row_gives_zeros_not_nan(tile_size):
    scores = torch.tensor([[NEG_INF] * 5, [0.0, NEG_INF, 1.0, NEG_INF, 2.0]])
    result = online_softmax(scores, tile_size)
    assert not result.isnan().any()
    assert torch.equal(result[0], torch.zeros(5))
    torch.testing.assert_close(result[1], torch.softmax(scores[1], dim=-1))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_online_softmax_low_precision_keeps_dtype(dtype):
    scores = torch.randn(3, 17).to(dtype) * 4
    result = online_softmax(scores, 4)
    assert result.dtype == dtype
    torch.testing.assert_close(result, torch.softmax(scores.float(), dim=-1).to(dtype))


@given(
    rows=st.integers(1, 3),
    n=st.integers(1, 20),
    tile_size=st.integers(1, 25),
    spread=st.sampled_from([0.1, 1.0, 30.0, 300.0]),
    seed=st.integers(0, 2**16),
)
def test_online_softmax_property(rows, n, tile_size, spread, seed):
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(rows, n, generator=g, dtype=torch.float64) * spread
    torch.testing.assert_close(online_softmax(scores, tile_size), torch.softmax(scores, dim=-1))


def test_one_update_by_hand():
    """Two tiles of one row, every number computed here from the definition."""
    values = torch.tensor([[1.0], [2.0], [3.0], [4.0]], dtype=torch.float64)
    state = initial_online_softmax_state((), 1, 1, dtype=torch.float64)
    state = online_softmax_update(state, torch.tensor([[1.0, 2.0]], dtype=torch.float64), values[:2])
    assert state.running_max.item() == 2.0
    assert state.normaliser.item() == pytest.approx(math.exp(-1) + 1)
    assert state.output.item() == pytest.approx(math.exp(-1) * 1 + 2)
    # The second tile raises the max to 5: everything so far is multiplied by exp(2 - 5).
    state = online_softmax_update(state, torch.tensor([[5.0, 0.0]], dtype=torch.float64), values[2:])
    assert state.running_max.item() == 5.0
    assert state.normaliser.item() == pytest.approx((math.exp(-1) + 1) * math.exp(-3) + 1 + math.exp(-5))
    weights = torch.softmax(torch.tensor([1.0, 2.0, 5.0, 0.0], dtype=torch.float64), dim=0)
    assert online_softmax_finish(state).item() == pytest.approx(float(weights @ values[:, 0]))


def test_initial_state_starts_at_minus_infinity():
    state = initial_online_softmax_state((2,), 3, 4)
    assert state.running_max.shape == (2, 3, 1) and state.output.shape == (2, 3, 4)
    assert torch.all(state.running_max == NEG_INF)
    assert torch.all(state.normaliser == 0) and torch.all(state.output == 0)


def test_trace_by_hand():
    trace = online_softmax_trace(torch.tensor([1.0, 3.0, 2.0, 5.0, 4.0]), 2)
    assert trace.tiles == ((0, 2), (2, 4), (4, 5))
    torch.testing.assert_close(trace.running_max, torch.tensor([3.0, 5.0, 5.0]))
    first = math.exp(1 - 3) + 1
    second = first * math.exp(3 - 5) + math.exp(2 - 5) + 1
    third = second + math.exp(4 - 5)
    torch.testing.assert_close(trace.normaliser, torch.tensor([first, second, third]))


def test_trace_last_normaliser_is_the_softmax_denominator():
    scores = torch.randn(3, 11, dtype=torch.float64)
    trace = online_softmax_trace(scores, 4)
    assert trace.running_max.shape == (3, 3)
    torch.testing.assert_close(trace.running_max[:, -1], scores.amax(dim=-1))
    torch.testing.assert_close(trace.normaliser[:, -1], torch.exp(scores - scores.amax(-1, keepdim=True)).sum(-1))
    # The running max never decreases.
    assert torch.all(trace.running_max[:, 1:] >= trace.running_max[:, :-1])


# ------------------------------------------------------------------ tiled attention


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("tile_size", [1, 3, 4, 8, 16, 100])
@pytest.mark.parametrize(("seq_q", "seq_k"), [(16, 16), (13, 13), (5, 16), (1, 9), (16, 17)])
def test_tiled_attention_equals_sdpa(causal, tile_size, seq_q, seq_k):
    q, k, v = qkv((2, 3), seq_q, seq_k, 8, 5)
    torch.testing.assert_close(
        tiled_attention(q, k, v, causal=causal, tile_size=tile_size), reference(q, k, v, causal=causal)
    )


@pytest.mark.parametrize("seq_q", [7, 16])
def test_non_causal_allows_more_queries_than_keys(seq_q):
    q, k, v = qkv((2,), seq_q, 5, 4, 4)
    torch.testing.assert_close(tiled_attention(q, k, v, tile_size=3), reference(q, k, v))


def test_float32_and_explicit_scale():
    q, k, v = qkv((2, 4), 33, 33, 16, 16, dtype=torch.float32)
    out = tiled_attention(q, k, v, causal=True, tile_size=8, scale=0.3)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, reference(q, k, v, causal=True, scale=0.3))


def test_square_causal_equals_torch_is_causal():
    # For seq_q == seq_k both alignments agree, so torch's own is_causal is a second reference.
    q, k, v = qkv((1, 2), 20, 20, 8, 8)
    torch.testing.assert_close(
        tiled_attention(q, k, v, causal=True, tile_size=6), F.scaled_dot_product_attention(q, k, v, is_causal=True)
    )


def test_causal_decoding_sees_the_cache():
    # One new query after 9 cached keys attends to all 10: the causal mask must not hide the cache.
    q, k, v = qkv((2,), 1, 10, 4, 4)
    torch.testing.assert_close(tiled_attention(q, k, v, causal=True, tile_size=3), reference(q, k, v))


def test_batch_dimensions_broadcast():
    g = torch.Generator().manual_seed(1)
    q = torch.randn(2, 3, 10, 8, generator=g, dtype=torch.float64)
    k = torch.randn(1, 3, 12, 8, generator=g, dtype=torch.float64)  # shared across the batch
    v = torch.randn(12, 6, generator=g, dtype=torch.float64)  # shared by everything
    out = tiled_attention(q, k, v, tile_size=5, causal=True)
    assert out.shape == (2, 3, 10, 6)
    torch.testing.assert_close(out, reference(q, k.expand(2, 3, 12, 8), v.expand(2, 3, 12, 6), causal=True))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_accumulates_in_float32(dtype):
    # 256 keys in tiles of 4: 64 rescaled partial sums per query, whose roundings would add up
    # to several eps if they were kept in 16 bits (checked: 5 eps for float16, 5 for bfloat16).
    q, k, v = qkv((2,), 256, 256, 16, 16, dtype=torch.float32, seed=3)
    q, k, v = (t.to(dtype) for t in (q, k, v + 3))
    out = tiled_attention(q, k, v, causal=True, tile_size=4)
    assert out.dtype == dtype
    exact = reference(q.double(), k.double(), v.double(), causal=True)
    # Only the final cast to 16 bits loses digits: at most one rounding of the exact result.
    eps = torch.finfo(dtype).eps
    torch.testing.assert_close(out.double(), exact, rtol=eps, atol=eps)


def test_large_scores_do_not_overflow_float16():
    # q.k = 64 * 40 * 40 = 102400 > float16's largest value 65504: scores must be formed in float32.
    q = torch.full((1, 4, 64), 40.0, dtype=torch.float16)
    k = torch.full((1, 6, 64), 40.0, dtype=torch.float16)
    v = torch.arange(6 * 2, dtype=torch.float16).reshape(1, 6, 2)
    out = tiled_attention(q, k, v, tile_size=4, scale=1.0)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.float(), reference(q.float(), k.float(), v.float(), scale=1.0), rtol=1e-3, atol=1e-3)


@given(
    seq_q=st.integers(1, 12),
    extra_keys=st.integers(0, 6),
    d=st.integers(1, 6),
    tile_size=st.integers(1, 14),
    causal=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_tiled_attention_property(seq_q, extra_keys, d, tile_size, causal, seed):
    q, k, v = qkv((2,), seq_q, seq_q + extra_keys, d, 3, seed=seed)
    torch.testing.assert_close(
        tiled_attention(q, k, v, causal=causal, tile_size=tile_size), reference(q, k, v, causal=causal)
    )


def test_gradients_match_sdpa():
    q, k, v = qkv((2,), 7, 9, 4, 3)
    inputs = [t.clone().requires_grad_() for t in (q, k, v)]
    tiled_attention(*inputs, causal=True, tile_size=3).sum().backward()
    ref_inputs = [t.clone().requires_grad_() for t in (q, k, v)]
    reference(*ref_inputs, causal=True).sum().backward()
    for ours, theirs in zip(inputs, ref_inputs, strict=True):
        torch.testing.assert_close(ours.grad, theirs.grad)


# ------------------------------------------------------------------ tiles: what is computed, what is skipped


def test_tile_kinds_by_hand():
    # seq_q = seq_k = 6, tiles of 2: the lower triangle of blocks, diagonal blocks masked.
    assert tile_kinds(6, 6, tile_size=2, causal=True) == [
        ["masked", "skipped", "skipped"],
        ["computed", "masked", "skipped"],
        ["computed", "computed", "masked"],
    ]
    # 4 queries after 2 cached keys (offset 2): query tile 0 sits at positions 2-3.
    assert tile_kinds(4, 6, tile_size=2, causal=True) == [
        ["computed", "masked", "skipped"],
        ["computed", "computed", "masked"],
    ]
    assert tile_kinds(3, 5, tile_size=2) == [["computed"] * 3] * 2


def test_causal_skips_future_key_tiles(monkeypatch):
    calls = []
    real_update = tiled.online_softmax_update

    def counting_update(state, scores, values):
        calls.append(tuple(scores.shape[-2:]))
        return real_update(state, scores, values)

    monkeypatch.setattr(tiled, "online_softmax_update", counting_update)
    q, k, v = qkv((1,), 16, 16, 4, 4)
    out = tiled_attention(q, k, v, causal=True, tile_size=4)
    # 4 query tiles see 1, 2, 3 and 4 key tiles: 10 blocks of the 16.
    assert len(calls) == 1 + 2 + 3 + 4
    assert all(shape == (4, 4) for shape in calls)
    torch.testing.assert_close(out, reference(q, k, v, causal=True))
    calls.clear()
    tiled_attention(q, k, v, causal=False, tile_size=4)
    assert len(calls) == 16


def test_skipped_tiles_are_never_read():
    # NaN in keys/values 4.. : the first query tile (queries 0-3) must never touch them.
    q, k, v = qkv((1,), 12, 12, 4, 4)
    k_nan, v_nan = k.clone(), v.clone()
    k_nan[..., 4:, :] = float("nan")
    v_nan[..., 4:, :] = float("nan")
    out = tiled_attention(q, k_nan, v_nan, causal=True, tile_size=4)
    assert torch.isfinite(out[..., :4, :]).all()
    torch.testing.assert_close(out[..., :4, :], reference(q, k, v, causal=True)[..., :4, :])


def test_largest_temporary_is_one_block(monkeypatch):
    shapes = []
    real_update = tiled.online_softmax_update

    def recording_update(state, scores, values):
        shapes.append(tuple(scores.shape))
        return real_update(state, scores, values)

    monkeypatch.setattr(tiled, "online_softmax_update", recording_update)
    q, k, v = qkv((2, 3), 50, 50, 4, 4)
    tiled_attention(q, k, v, tile_size=8)
    assert max(s[-1] * s[-2] for s in shapes) == 8 * 8
    assert shapes[-1] == (2, 3, 2, 2)  # the last, ragged tile: 50 = 6 * 8 + 2


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    ("tile_size", "error"),
    [(0, ValueError), (-3, ValueError), (2.0, TypeError), ("4", TypeError), (True, TypeError), (None, TypeError)],
)
def test_bad_tile_size_names_the_argument(tile_size, error):
    q, k, v = qkv((1,), 4, 4, 2, 2)
    with pytest.raises(error, match="tile_size"):
        tiled_attention(q, k, v, tile_size=tile_size)
    with pytest.raises(error, match="tile_size"):
        online_softmax(q[0, 0], tile_size)
    with pytest.raises(error, match="tile_size"):
        online_softmax_trace(q[0, 0], tile_size)
    with pytest.raises(error, match="tile_size"):
        tile_kinds(4, 4, tile_size=tile_size)


def test_bad_tensors_name_the_argument():
    q, k, v = qkv((2,), 4, 6, 3, 5)
    with pytest.raises(TypeError, match=r"q must be a torch\.Tensor"):
        tiled_attention(q.tolist(), k, v)
    with pytest.raises(TypeError, match="k must have a floating-point dtype"):
        tiled_attention(q, k.long(), v)
    with pytest.raises(TypeError, match="v must have the same dtype as q"):
        tiled_attention(q, k, v.float())
    with pytest.raises(ValueError, match="k must have the same last dimension d as q"):
        tiled_attention(q, k[..., :2], v)
    with pytest.raises(ValueError, match="v must have one row per key"):
        tiled_attention(q, k, v[..., :5, :])
    with pytest.raises(ValueError, match="q must have at least 2 dimensions"):
        tiled_attention(q[0, 0], k, v)
    with pytest.raises(ValueError, match="broadcastable batch dimensions"):
        tiled_attention(q, torch.cat([k, k, k]), torch.cat([v, v, v]))
    with pytest.raises(ValueError, match="causal needs seq_q <= seq_k"):
        tiled_attention(k, q, q[..., :3], causal=True)
    with pytest.raises(TypeError, match="causal must be True or False"):
        tiled_attention(q, k, v, causal=1)
    with pytest.raises(TypeError, match="scale must be a number or None"):
        tiled_attention(q, k, v, scale="0.5")
    with pytest.raises(ValueError, match="scale must be a finite number"):
        tiled_attention(q, k, v, scale=float("inf"))
    with pytest.raises(ValueError, match="at least one position"):
        tiled_attention(q[..., :0, :], k, v)


def test_bad_online_softmax_input_names_the_argument():
    with pytest.raises(TypeError, match="scores must have a floating-point dtype"):
        online_softmax(torch.arange(4), 2)
    with pytest.raises(ValueError, match="scores must have at least one entry"):
        online_softmax(torch.zeros(3, 0), 2)
    state = initial_online_softmax_state((), 1, 2)
    with pytest.raises(TypeError, match="state must be an OnlineSoftmaxState"):
        online_softmax_update((state.running_max, state.normaliser, state.output), torch.zeros(1, 3), torch.zeros(3, 2))
    with pytest.raises(ValueError, match="values must have one row per score column"):
        online_softmax_update(state, torch.zeros(1, 3), torch.zeros(4, 2))
    with pytest.raises(ValueError, match="seq_q must be >= 1"):
        initial_online_softmax_state((), 0, 2)
    assert isinstance(state, OnlineSoftmaxState)
