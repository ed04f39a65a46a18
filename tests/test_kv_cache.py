"""KVCache: incremental decoding (token by token and in chunks) reproduces the
full causal forward pass, RoPE positions continue across steps, and the offset
causal mask is the one written out by hand."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from mhsa_helpers import KVCache, MultiHeadSelfAttention, RotaryEmbedding, causal_mask, scaled_dot_product_attention

SEEDS = st.integers(0, 2**31 - 1)
F64 = torch.float64


def _module(seed, *, rope, convention="interleaved", num_heads=2, d_head=4, max_seq_len=64):
    torch.manual_seed(seed)
    return MultiHeadSelfAttention(
        num_heads * d_head,
        num_heads,
        causal=True,
        rope=RotaryEmbedding(d_head, max_seq_len, convention=convention) if rope else None,
        dtype=F64,
    ).eval()


def _chunks(total, sizes):
    """Split range(total) into consecutive chunks with the given sizes (cycled)."""
    bounds, start, i = [], 0, 0
    while start < total:
        end = min(total, start + sizes[i % len(sizes)])
        bounds.append((start, end))
        start, i = end, i + 1
    return bounds


@given(
    rope=st.booleans(),
    convention=st.sampled_from(["interleaved", "half_split"]),
    seq=st.integers(1, 9),
    chunk_sizes=st.lists(st.integers(1, 4), min_size=1, max_size=3),
    seed=SEEDS,
)
def test_incremental_decoding_equals_full_causal_pass(rope, convention, seq, chunk_sizes, seed):
    module = _module(seed, rope=rope, convention=convention)
    x = torch.randn(2, seq, module.d_in, dtype=F64)
    full = module(x)

    cache = KVCache()
    pieces = []
    for start, end in _chunks(seq, chunk_sizes):
        assert cache.length == start
        pieces.append(module(x[:, start:end], cache=cache))
        assert cache.length == end
    torch.testing.assert_close(torch.cat(pieces, dim=1), full)
    assert cache.keys.shape == (2, module.num_heads, seq, module.d_head)
    assert cache.values.shape == (2, module.num_heads, seq, module.d_head)


@pytest.mark.parametrize("rope", [False, True], ids=["no-rope", "rope"])
def test_token_by_token_with_weights(rope):
    module = _module(11, rope=rope)
    x = torch.randn(3, 6, module.d_in, dtype=F64)
    full, full_weights = module(x, need_weights=True)
    cache = KVCache()
    for t in range(6):
        out, weights = module(x[:, t : t + 1], cache=cache, need_weights=True)
        assert weights.shape == (3, module.num_heads, 1, t + 1)
        torch.testing.assert_close(out[:, 0], full[:, t])
        torch.testing.assert_close(weights[..., 0, :], full_weights[..., t, : t + 1])
    assert cache.length == 6


@given(
    convention=st.sampled_from(["interleaved", "half_split"]),
    offset=st.integers(1, 40),
    seq=st.integers(1, 8),
    chunk_sizes=st.lists(st.integers(1, 4), min_size=1, max_size=3),
    seed=SEEDS,
)
def test_decoding_with_nonzero_start_offset(convention, offset, seq, chunk_sizes, seed):
    """A sequence that starts at position `offset` (e.g. after a dropped prefix): the full pass
    gets token_positions = offset .. offset + seq - 1; the cache steps pass their own slice."""
    module = _module(seed, rope=True, convention=convention)
    x = torch.randn(2, seq, module.d_in, dtype=F64)
    positions = torch.arange(offset, offset + seq)
    full = module(x, token_positions=positions)
    cache = KVCache()
    pieces = [module(x[:, s:e], cache=cache, token_positions=positions[s:e]) for s, e in _chunks(seq, chunk_sizes)]
    torch.testing.assert_close(torch.cat(pieces, dim=1), full)
    # RoPE sees only relative positions: the same tokens started at 0 give the same outputs
    # (up to the float32 cos/sin cache).
    torch.testing.assert_close(module(x), full, atol=1e-6, rtol=1e-6)


def test_cache_continues_rope_positions_by_default():
    """Without token_positions the new token sits at position cache.length: decoding one token after
    a 4-token prompt equals the full pass on all 5 tokens, not a fresh pass at position 0."""
    module = _module(3, rope=True)
    x = torch.randn(1, 5, module.d_in, dtype=F64)
    cache = KVCache()
    module(x[:, :4], cache=cache)
    last = module(x[:, 4:], cache=cache)
    torch.testing.assert_close(last[:, 0], module(x)[:, 4])
    # With positions restarted at 0 for the new token the answer is different.
    cache2 = KVCache()
    module(x[:, :4], cache=cache2)
    restarted = module(x[:, 4:], cache=cache2, token_positions=torch.tensor([0]))
    assert not torch.allclose(restarted, last)


def test_cache_append_length_and_reset():
    cache = KVCache()
    assert cache.length == 0 and cache.keys is None
    k1, v1 = torch.randn(2, 3, 4, 5), torch.randn(2, 3, 4, 6)
    keys, values = cache.append(k1, v1)
    assert cache.length == 4 and torch.equal(keys, k1) and torch.equal(values, v1)
    k2, v2 = torch.randn(2, 3, 1, 5), torch.randn(2, 3, 1, 6)
    keys, values = cache.append(k2, v2)
    assert cache.length == 5
    assert torch.equal(keys, torch.cat([k1, k2], dim=2)) and torch.equal(values, torch.cat([v1, v2], dim=2))
    assert "length=5" in repr(cache)
    cache.reset()
    assert cache.length == 0 and cache.keys is None and cache.values is None
    cache.append(k1, v1)
    with pytest.raises(ValueError, match=r"keys must match the cached") as info:
        cache.append(torch.randn(2, 2, 1, 5), torch.randn(2, 2, 1, 6))
    assert "leading dimensions (2, 3)" in str(info.value) and "'...'" not in str(info.value)
    assert cache.length == 4 and torch.equal(cache.keys, k1)


@pytest.mark.parametrize("leading", [(), (3,), (2, 3), (2, 1, 3)], ids=["none", "heads", "batch-heads", "5-D"])
def test_cache_takes_any_leading_dimensions(leading):
    k1, v1 = torch.randn(*leading, 4, 5), torch.randn(*leading, 4, 6)
    k2, v2 = torch.randn(*leading, 2, 5), torch.randn(*leading, 2, 6)
    cache = KVCache()
    cache.append(k1, v1)
    keys, values = cache.append(k2, v2)
    assert cache.length == 6
    assert torch.equal(keys, torch.cat([k1, k2], dim=-2)) and torch.equal(values, torch.cat([v1, v2], dim=-2))


def test_extended_returns_the_concatenation_without_storing_it():
    cache = KVCache()
    k1, v1 = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4)
    cache.append(k1, v1)
    k2, v2 = torch.randn(1, 2, 1, 4), torch.randn(1, 2, 1, 4)
    keys, values = cache.extended(k2, v2)
    assert torch.equal(keys, torch.cat([k1, k2], dim=-2)) and torch.equal(values, torch.cat([v1, v2], dim=-2))
    assert cache.length == 3 and cache.keys is k1 and cache.values is v1


@pytest.mark.parametrize("need_weights", [False, True], ids=["fast", "weights"])
def test_a_call_that_fails_leaves_the_cache_unchanged(need_weights):
    """The mask is checked against (..., heads, seq, past + seq) inside attention, after the
    new keys exist: the cache must not have grown by the failed step."""
    module = _module(5, rope=True)
    x = torch.randn(2, 5, module.d_in, dtype=F64)
    cache = KVCache()
    module(x[:, :3], cache=cache)
    keys, values = cache.keys, cache.values
    wrong_mask = torch.ones(2, 4, dtype=torch.bool)  # 2 new queries see 3 + 2 = 5 keys, not 4
    with pytest.raises(ValueError, match="mask"):
        module(x[:, 3:5], cache=cache, mask=wrong_mask, need_weights=need_weights)
    assert cache.length == 3 and cache.keys is keys and cache.values is values
    # ...and decoding goes on as if the failed call had not happened.
    rest = module(x[:, 3:5], cache=cache)
    torch.testing.assert_close(rest, module(x)[:, 3:5])
    assert cache.length == 5


def _hand_offset_mask(seq_q, seq_k):
    past = seq_k - seq_q
    return torch.tensor([[j <= past + i for j in range(seq_k)] for i in range(seq_q)])


@given(seq_q=st.integers(1, 6), past=st.integers(0, 6), seed=SEEDS)
def test_causal_offset_mask_and_is_causal_against_hand_built(seq_q, past, seed):
    seq_k = past + seq_q
    expected = _hand_offset_mask(seq_q, seq_k)
    assert torch.equal(causal_mask(seq_q, seq_k), expected)
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(2, seq_q, 3, generator=gen, dtype=F64)
    k = torch.randn(2, seq_k, 3, generator=gen, dtype=F64)
    v = torch.randn(2, seq_k, 3, generator=gen, dtype=F64)
    reference = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=expected)
    torch.testing.assert_close(scaled_dot_product_attention(q, k, v, is_causal=True), reference)
    out, weights = scaled_dot_product_attention(q, k, v, is_causal=True, need_weights=True)
    torch.testing.assert_close(out, reference)
    assert (weights.masked_select(~expected.expand_as(weights)) == 0).all()


# ---------------------------------------------------------------- the preallocated cache (notebook 08)


@pytest.mark.parametrize("rope", [False, True])
def test_preallocated_cache_gives_the_concatenating_caches_outputs(rope):
    torch.manual_seed(11)
    module = MultiHeadSelfAttention(16, 4, causal=True, rope=RotaryEmbedding(4) if rope else None).eval()
    x = torch.randn(2, 10, 16)
    growing, fixed = KVCache(), KVCache(capacity=12)
    with torch.no_grad():
        for chunk in (x[:, :3], x[:, 3:4], x[:, 4:9], x[:, 9:]):
            torch.testing.assert_close(module(chunk, cache=fixed), module(chunk, cache=growing))
    torch.testing.assert_close(fixed.keys, growing.keys)
    torch.testing.assert_close(fixed.values, growing.values)
    assert fixed.length == growing.length == 10
    # One buffer of 12 positions, allocated once: (batch 2, heads 4, capacity 12, d_head 4) float32.
    assert fixed.keys.untyped_storage().nbytes() == 2 * 4 * 12 * 4 * 4


def test_preallocated_cache_writes_in_place():
    cache = KVCache(capacity=5)
    cache.append(torch.ones(1, 2, 2, 3), torch.ones(1, 2, 2, 3))
    buffer = cache.keys.untyped_storage().data_ptr()
    cache.append(torch.zeros(1, 2, 1, 3), torch.zeros(1, 2, 1, 3))
    assert cache.keys.untyped_storage().data_ptr() == buffer
    assert cache.keys.shape == (1, 2, 3, 3) and cache.keys[..., 2, :].abs().sum() == 0
    cache.reset()
    assert cache.length == 0 and cache.keys is None


def test_over_capacity_raises_and_leaves_the_cache_unchanged():
    torch.manual_seed(12)
    module = MultiHeadSelfAttention(16, 4, causal=True).eval()
    cache = KVCache(capacity=4)
    with torch.no_grad():
        module(torch.randn(1, 3, 16), cache=cache)
        before = cache.keys.clone()
        with pytest.raises(ValueError, match=r"capacity=4 is too small: the cache holds 3 tokens and cannot take 2"):
            module(torch.randn(1, 2, 16), cache=cache)
    assert cache.length == 3 and torch.equal(cache.keys, before)
    with pytest.raises(ValueError, match="capacity=4 is too small"):
        cache.append(torch.ones(1, 4, 2, 4), torch.ones(1, 4, 2, 4))
    with pytest.raises(ValueError, match="capacity must be >= 1"):
        KVCache(capacity=0)


# ---------------------------------------------------------------- the sliding-window cache (notebook 09)


@pytest.mark.parametrize(("window", "sinks"), [(3, 0), (4, 1), (1, 0), (5, 2), (20, 0)])
def test_sliding_window_decoding_equals_the_full_pass_with_the_window_mask(window, sinks):
    from mhsa_helpers import SlidingWindowCache
    from mhsa_helpers.long_context import sliding_window_mask

    torch.manual_seed(13)
    module = MultiHeadSelfAttention(16, 4, num_kv_heads=2, causal=True, rope=RotaryEmbedding(4)).eval()
    x = torch.randn(2, 12, 16)
    full = module(x, mask=sliding_window_mask(12, window=window, sinks=sinks))
    cache = SlidingWindowCache(window, sinks=sinks)
    with torch.no_grad():
        prompt = module(x[:, :5], mask=cache.mask_for(5), cache=cache)
        steps = [module(x[:, t : t + 1], cache=cache) for t in range(5, 9)]
        chunk = module(x[:, 9:], mask=cache.mask_for(3), cache=cache)
    torch.testing.assert_close(torch.cat([prompt, *steps, chunk], dim=1), full, atol=1e-5, rtol=1e-5)
    # It holds at most sinks + window - 1 tokens, whatever the length.
    assert cache.length == 12 and cache.keys.shape[-2] == min(12, sinks + window - 1)
    kept = [p for p in range(12) if p < sinks or p > 12 - window]
    assert cache.positions.tolist() == kept


def test_sliding_window_cache_names_a_bad_setting():
    from mhsa_helpers import SlidingWindowCache

    with pytest.raises(ValueError, match="window must be >= 1"):
        SlidingWindowCache(0)
    with pytest.raises(ValueError, match="sinks must be >= 0"):
        SlidingWindowCache(3, sinks=-1)
    with pytest.raises(ValueError, match="new must be >= 1"):
        SlidingWindowCache(3).mask_for(0)
