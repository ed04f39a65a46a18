"""SlidingWindowCache(rope_positions="cache"): StreamingLLM's positions within the cache (notebook 09).

Every decoding step is compared with an explicit re-indexing written here from the definition
(Xiao et al., 2023, §3.2): take the un-rotated keys and values of the tokens the cache keeps plus
the new ones, rotate the keys by 0 .. n - 1 and each query by its own slot, and attend."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from mhsa_helpers import MultiHeadSelfAttention, SlidingWindowCache
from mhsa_helpers.long_context import sliding_window_mask
from mhsa_helpers.rope import RopeScaling, RotaryEmbedding, apply_rotary, rope_angles


def make_layer(num_kv_heads: int | None = None, convention: str = "interleaved", max_seq_len: int = 64):
    torch.manual_seed(0)
    return MultiHeadSelfAttention(
        16,
        4,
        num_kv_heads=num_kv_heads,
        causal=True,
        rope=RotaryEmbedding(4, max_seq_len=max_seq_len, convention=convention),
    ).eval()


def kept_positions(t: int, window: int, sinks: int) -> list[int]:
    """Positions whose keys the query at ``t`` sees: the sinks and the last ``window`` tokens, in order."""
    return [j for j in range(t + 1) if j < sinks or j > t - window]


def reindexed(layer: MultiHeadSelfAttention, x: torch.Tensor, keys_at: list[int], queries_at: list[int]):
    """Attention of the queries at stream positions ``queries_at`` over the keys at ``keys_at``, every
    key rotated by its index in ``keys_at`` and each query by the index of its own token there;
    ``x (batch, seq, d_model)`` -> ``(batch, len(queries_at), d_model)``."""
    d_head, heads, kv_heads = layer.d_head, layer.num_heads, layer.num_kv_heads
    q = F.linear(x, layer.q_weight, layer.qkv_proj.bias[: layer.d_model])
    k = F.linear(x, layer.k_weight, layer.qkv_proj.bias[layer.d_model : layer.d_model + layer.kv_dim])
    v = F.linear(x, layer.v_weight, layer.qkv_proj.bias[layer.d_model + layer.kv_dim :])

    def split(t: torch.Tensor, n: int) -> torch.Tensor:  # (batch, seq, n * d_head) -> (batch, n, seq, d_head)
        return t.unflatten(-1, (n, d_head)).transpose(1, 2)

    q, k, v = split(q, heads)[:, :, queries_at], split(k, kv_heads)[:, :, keys_at], split(v, kv_heads)[:, :, keys_at]
    slots = torch.arange(len(keys_at))
    query_slots = torch.tensor([keys_at.index(p) for p in queries_at])
    convention = layer.rope.convention
    k = apply_rotary(k, *rope_angles(slots, d_head), convention)
    q = apply_rotary(q, *rope_angles(query_slots, d_head), convention)
    groups = heads // kv_heads
    k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_head)
    # A query sees the keys up to its own token (the later new tokens of the same step are masked).
    visible = torch.tensor([[p <= qp for p in keys_at] for qp in queries_at])
    weights = scores.masked_fill(~visible, -math.inf).softmax(-1)
    merged = (weights @ v).transpose(1, 2).flatten(-2)
    return layer.out_proj(merged)


@pytest.mark.parametrize(
    ("window", "sinks", "num_kv_heads", "convention"),
    [(4, 1, None, "interleaved"), (3, 2, None, "half_split"), (5, 0, 2, "interleaved"), (2, 3, 1, "half_split")],
)
def test_token_by_token_decoding_equals_an_explicit_reindexing(window, sinks, num_kv_heads, convention):
    layer = make_layer(num_kv_heads, convention)
    x = torch.randn(2, 14, 16, generator=torch.Generator().manual_seed(1))
    cache = SlidingWindowCache(window, sinks, rope_positions="cache")
    with torch.no_grad():
        for t in range(x.shape[1]):
            decoded = layer(x[:, t : t + 1], cache=cache)
            expected = reindexed(layer, x, kept_positions(t, window, sinks), [t])
            torch.testing.assert_close(decoded, expected, atol=1e-5, rtol=1e-5, msg=f"step {t}")
    assert cache.positions.tolist() == [p for p in range(14) if p < sinks or p > 14 - window]


def test_a_step_of_several_tokens_rotates_by_the_slots_of_kept_and_new_keys():
    """A prefill (slot = position: the full pass), then a step of 3 tokens: query i is rotated by its
    slot among kept + new keys, even where its mask hides some of them."""
    window, sinks = 3, 1
    layer = make_layer()
    x = torch.randn(1, 10, 16, generator=torch.Generator().manual_seed(3))
    cache = SlidingWindowCache(window, sinks, rope_positions="cache")
    with torch.no_grad():
        prefill = layer(x[:, :6], mask=sliding_window_mask(6, window=window, sinks=sinks), cache=cache)
        full = layer(x[:, :6], mask=sliding_window_mask(6, window=window, sinks=sinks))
        torch.testing.assert_close(prefill, full, atol=1e-5, rtol=1e-5)
        layer(x[:, 6:7], cache=cache)
        keys_at = [*cache.positions.tolist(), 7, 8, 9]  # [0, 5, 6, 7, 8, 9]
        mask = cache.mask_for(3)
        out = layer(x[:, 7:10], mask=mask, cache=cache)
    # Explicit: rotate all six keys by 0..5, query i by slot 3 + i, mask as the cache says.
    d_head = layer.d_head
    q, k, v = layer.qkv_proj(x).split(16, dim=-1)
    q, k, v = (t.unflatten(-1, (4, d_head)).transpose(1, 2) for t in (q, k, v))
    q, k, v = q[:, :, 7:10], k[:, :, keys_at], v[:, :, keys_at]
    k = apply_rotary(k, *rope_angles(torch.arange(6), d_head))
    q = apply_rotary(q, *rope_angles(torch.arange(3, 6), d_head))
    scores = (q @ k.transpose(-2, -1) / math.sqrt(d_head)).masked_fill(~mask, -math.inf)
    expected = layer.out_proj((scores.softmax(-1) @ v).transpose(1, 2).flatten(-2))
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    assert keys_at == [0, 5, 6, 7, 8, 9]


def test_the_two_conventions_agree_until_the_first_eviction_then_differ_with_sinks():
    layer = make_layer()
    x = torch.randn(1, 12, 16, generator=torch.Generator().manual_seed(4))
    original = SlidingWindowCache(4, 1)
    in_cache = SlidingWindowCache(4, 1, rope_positions="cache")
    with torch.no_grad():
        for t in range(12):
            a, b = layer(x[:, t : t + 1], cache=original), layer(x[:, t : t + 1], cache=in_cache)
            if t < 1 + 4:  # sinks + window: nothing evicted yet, slot = position
                torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)
            else:
                assert (a - b).abs().max() > 1e-3, f"step {t}"
    assert original.positions.tolist() == in_cache.positions.tolist() == [0, 9, 10, 11]


def test_without_sinks_only_distances_matter_and_the_two_agree():
    """No sink: the cache is the last window - 1 tokens, in order, so slots and positions differ by a
    constant, and RoPE's scores depend only on differences."""
    layer = make_layer()
    x = torch.randn(1, 20, 16, generator=torch.Generator().manual_seed(5))
    original, in_cache = SlidingWindowCache(5), SlidingWindowCache(5, rope_positions="cache")
    with torch.no_grad():
        a = torch.cat([layer(x[:, t : t + 1], cache=original) for t in range(20)], dim=1)
        b = torch.cat([layer(x[:, t : t + 1], cache=in_cache) for t in range(20)], dim=1)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_kept_keys_are_held_rotated_by_their_slot_in_cache_mode_and_by_their_position_otherwise():
    layer = make_layer()
    x = torch.randn(1, 9, 16, generator=torch.Generator().manual_seed(6))
    raw_keys = layer.qkv_proj(x)[..., 16:32].unflatten(-1, (4, 4)).transpose(1, 2)  # (1, 4, 9, d_head)
    original, in_cache = SlidingWindowCache(3, 1), SlidingWindowCache(3, 1, rope_positions="cache")
    with torch.no_grad():
        for t in range(9):
            layer(x[:, t : t + 1], cache=original)
            layer(x[:, t : t + 1], cache=in_cache)
            # The next token comes at the next free slot in cache mode, after the tokens seen otherwise.
            assert in_cache.next_position == min(t + 1, 3) and original.next_position == t + 1
    kept = [0, 7, 8]
    assert in_cache.positions.tolist() == kept
    # Keys 7 and 8 arrived at slot 3 and moved down, evicting the middle each step: rotated back each time.
    by_slot = apply_rotary(raw_keys[:, :, kept], *rope_angles(torch.arange(3), 4))
    torch.testing.assert_close(in_cache.keys, by_slot, atol=1e-6, rtol=1e-6)
    by_position = apply_rotary(raw_keys[:, :, kept], *rope_angles(torch.tensor(kept), 4))
    torch.testing.assert_close(original.keys, by_position, atol=1e-6, rtol=1e-6)
    # The sink never moves: it is held exactly as it was rotated at slot 0, never rotated again.
    assert torch.equal(in_cache.keys[:, :, 0], original.keys[:, :, 0])


def test_keys_moved_down_are_rotated_back_without_a_scalings_magnitude_again():
    """YaRN multiplies cos and sin by the square root of its score factor: a key rotated back by a shift must be
    rotated, not scaled a second time, so a long stream holds keys of the same length as a fresh rotation's."""
    scaling = RopeScaling("yarn", 4.0, 16)
    torch.manual_seed(0)
    layer = MultiHeadSelfAttention(16, 4, causal=True, rope=RotaryEmbedding(4, max_seq_len=64)).eval()
    layer.rope = RotaryEmbedding(4, 64, scaling=scaling)
    x = torch.randn(1, 12, 16, generator=torch.Generator().manual_seed(8))
    cache = SlidingWindowCache(3, 1, rope_positions="cache")
    with torch.no_grad():
        for t in range(12):
            layer(x[:, t : t + 1], cache=cache)
    raw_keys = layer.qkv_proj(x)[..., 16:32].unflatten(-1, (4, 4)).transpose(1, 2)[:, :, cache.positions.tolist()]
    cos, sin = layer.rope.angles_at(0, 3)
    torch.testing.assert_close(cache.keys, apply_rotary(raw_keys, cos, sin), atol=1e-6, rtol=1e-6)


def test_a_stream_longer_than_the_rope_table_needs_slots_only():
    layer = make_layer(max_seq_len=8)
    x = torch.randn(1, 30, 16, generator=torch.Generator().manual_seed(7))
    in_cache = SlidingWindowCache(5, 2, rope_positions="cache")  # slots 0 .. 6 < 8
    with torch.no_grad():
        for t in range(30):
            out = layer(x[:, t : t + 1], cache=in_cache)
    assert in_cache.length == 30 and torch.isfinite(out).all()
    original = SlidingWindowCache(5, 2)
    with torch.no_grad(), pytest.raises(ValueError, match=r"max_seq_len - 1\] = \[0, 7\], got values from 8 to 8"):
        for t in range(30):
            layer(x[:, t : t + 1], cache=original)
    assert original.length == 8  # the failed step left the cache as it was
    too_big = SlidingWindowCache(8, 2, rope_positions="cache")  # slots up to 9 do not fit a table of 8
    with torch.no_grad(), pytest.raises(ValueError, match="token_positions must lie in"):
        for t in range(30):
            layer(x[:, t : t + 1], cache=too_big)
    assert too_big.length == 8


def test_rope_positions_is_checked():
    with pytest.raises(ValueError, match=r"rope_positions must be one of 'original', 'cache', got 'stream'"):
        SlidingWindowCache(4, 1, rope_positions="stream")
    with pytest.raises(ValueError, match="rope_positions must be one of"):
        SlidingWindowCache(4, rope_positions=None)  # type: ignore[arg-type]  # a wrong type on purpose
    cache = SlidingWindowCache(4, 1, rope_positions="cache")
    assert "rope_positions='cache'" in repr(cache)
    assert SlidingWindowCache(4).rope_positions == "original"


def test_explicit_token_positions_are_refused_with_cache_positions():
    layer = make_layer()
    cache = SlidingWindowCache(4, 1, rope_positions="cache")
    with pytest.raises(
        ValueError, match=r"token_positions must be None with a SlidingWindowCache\(rope_positions='cache'\)"
    ):
        layer(torch.randn(1, 1, 16), token_positions=torch.tensor([0]), cache=cache)
    assert cache.length == 0 and cache.keys is None
    # The default cache takes them as before.
    original = SlidingWindowCache(4, 1)
    layer(torch.randn(1, 1, 16), token_positions=torch.tensor([5]), cache=original)
    assert original.length == 1


def test_without_rope_the_two_conventions_are_the_same_cache():
    torch.manual_seed(0)
    layer = MultiHeadSelfAttention(16, 4, causal=True).eval()
    x = torch.randn(1, 10, 16)
    with torch.no_grad():
        a = [layer(x[:, t : t + 1], cache=c) for c in [SlidingWindowCache(3, 1)] for t in range(10)]
        in_cache = SlidingWindowCache(3, 1, rope_positions="cache")
        b = [layer(x[:, t : t + 1], cache=in_cache) for t in range(10)]
    torch.testing.assert_close(torch.cat(a, 1), torch.cat(b, 1))
