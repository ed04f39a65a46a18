"""KVCache and SlidingWindowCache: behaviour that mutation testing (``make mutate``) showed unpinned.

Each expected value is written from the docstrings (what is held, at which positions, for
which leading dimensions), never read back from the cache under test.
"""

from __future__ import annotations

import pytest
import torch
from pinning import raises

from mhsa_helpers import KVCache, SlidingWindowCache
from mhsa_helpers.kv_cache import expect_cache

META = torch.device("meta")


def _rows(*leading, start, stop, d):
    """Keys whose row for position p is filled with p: (..., stop - start, d)."""
    rows = torch.arange(start, stop, dtype=torch.float32)[:, None].expand(stop - start, d)
    return rows.expand(*leading, stop - start, d).clone()


def test_a_fresh_cache_holds_no_keys_and_no_values():
    for cache in (KVCache(), KVCache(capacity=3), SlidingWindowCache(3)):
        assert cache.length == 0 and cache.keys is None and cache.values is None


@pytest.mark.parametrize("leading", [(), (3,), (2, 1, 3)], ids=["no-batch", "heads", "5-D"])
def test_preallocated_cache_takes_any_leading_dimensions(leading):
    cache = KVCache(capacity=6)
    k1, v1 = torch.randn(*leading, 4, 5), torch.randn(*leading, 4, 7)
    k2, v2 = torch.randn(*leading, 2, 5), torch.randn(*leading, 2, 7)
    cache.append(k1, v1)
    keys, values = cache.append(k2, v2)
    assert cache.length == 6
    assert torch.equal(keys, torch.cat([k1, k2], dim=-2)) and torch.equal(values, torch.cat([v1, v2], dim=-2))
    assert torch.equal(cache.keys, keys) and torch.equal(cache.values, values)


def test_preallocated_cache_fills_exactly_to_its_capacity_and_no_further():
    cache = KVCache(capacity=4)
    cache.append(torch.zeros(1, 3, 2), torch.zeros(1, 3, 2))
    keys, _ = cache.append(torch.ones(1, 1, 2), torch.ones(1, 1, 2))  # the 4th of 4 rows
    assert cache.length == 4 and keys.shape == (1, 4, 2)
    with pytest.raises(ValueError, match="capacity"):
        cache.append(torch.ones(1, 1, 2), torch.ones(1, 1, 2))
    assert cache.length == 4
    whole = KVCache(capacity=4)
    whole.append(torch.zeros(2, 4, 2), torch.zeros(2, 4, 2))  # all four rows in one step
    assert whole.length == 4


def test_a_preallocated_cache_allocates_again_after_a_step_that_was_never_kept():
    """`extended` without `commit` is a failed step: the next first step may have another batch
    shape or dtype, and the cache must take it (buffers are allocated when length is 0)."""
    cache = KVCache(capacity=4)
    cache.extended(torch.zeros(1, 2, 3, dtype=torch.float64), torch.zeros(1, 2, 3, dtype=torch.float64))
    assert cache.length == 0 and cache.keys is None
    keys, values = torch.randn(3, 2, 5), torch.randn(3, 2, 4)
    got_keys, got_values = cache.append(keys, values)
    assert torch.equal(got_keys, keys) and torch.equal(got_values, values)
    assert got_keys.dtype == torch.float32 and cache.length == 2


def test_a_preallocated_cache_keeps_what_it_holds_across_steps():
    cache = KVCache(capacity=5)
    cache.append(_rows(2, start=0, stop=1, d=3), _rows(2, start=0, stop=1, d=3))
    keys, _ = cache.append(_rows(2, start=1, stop=3, d=3), _rows(2, start=1, stop=3, d=3))
    assert torch.equal(keys, _rows(2, start=0, stop=3, d=3))


def test_append_refuses_values_of_another_dtype_than_the_keys():
    for cache in (KVCache(), KVCache(capacity=4)):
        with pytest.raises(TypeError, match="values must have the dtype of keys"):
            cache.append(torch.zeros(1, 2, 3), torch.zeros(1, 2, 3, dtype=torch.float64))
        assert cache.length == 0


# ---------------------------------------------------------------- the sliding-window cache, default settings


def test_sliding_window_cache_has_no_sinks_unless_asked():
    cache = SlidingWindowCache(2)
    cache.append(_rows(1, start=0, stop=5, d=2), _rows(1, start=0, stop=5, d=2))
    # Without sinks only the last window - 1 = 1 token is kept: position 4.
    assert cache.positions.tolist() == [4]
    assert torch.equal(cache.keys, _rows(1, start=4, stop=5, d=2))


@pytest.mark.parametrize("leading", [(), (3,), (2, 1, 3)], ids=["no-batch", "heads", "5-D"])
def test_sliding_window_cache_takes_any_leading_dimensions(leading):
    cache = SlidingWindowCache(3, sinks=1)
    for start, stop in [(0, 4), (4, 5), (5, 7)]:
        cache.append(_rows(*leading, start=start, stop=stop, d=2), -_rows(*leading, start=start, stop=stop, d=2))
    # After 7 tokens: the sink (position 0) and the last window - 1 = 2 tokens (5 and 6).
    assert cache.length == 7 and cache.positions.tolist() == [0, 5, 6]
    expected = torch.cat([_rows(*leading, start=0, stop=1, d=2), _rows(*leading, start=5, stop=7, d=2)], dim=-2)
    assert torch.equal(cache.keys, expected) and torch.equal(cache.values, -expected)


def test_sliding_window_positions_are_integers():
    cache = SlidingWindowCache(3)
    assert cache.positions.dtype == torch.long
    cache.append(torch.zeros(1, 4, 2), torch.zeros(1, 4, 2))
    assert cache.positions.dtype == torch.long and cache.positions.tolist() == [2, 3]


def test_sliding_window_reset_forgets_the_positions_too():
    cache = SlidingWindowCache(3, sinks=1)
    cache.append(torch.zeros(1, 6, 2), torch.zeros(1, 6, 2))
    cache.reset()
    assert cache.length == 0 and cache.keys is None and cache.positions.tolist() == []
    assert cache.positions.dtype == torch.long
    # After a reset it behaves as a new cache: a first step of 2 tokens keeps both, at positions 0 and 1.
    cache.append(_rows(1, start=0, stop=2, d=2), _rows(1, start=0, stop=2, d=2))
    assert cache.length == 2 and cache.positions.tolist() == [0, 1]
    assert torch.equal(cache.keys, _rows(1, start=0, stop=2, d=2))
    # A new token at position 2 sees itself and the 2 tokens before it (window 3): 0, 1, 2.
    assert cache.mask_for(1).tolist() == [[True, True, True]]


def test_repr_says_the_class_length_capacity_and_shape():
    assert repr(KVCache()) == "KVCache(length=0, keys shape=None)"  # no capacity, none shown
    cache = KVCache(capacity=4)
    assert repr(cache) == "KVCache(length=0, capacity=4, keys shape=None)"
    cache.append(torch.zeros(1, 2, 3, 5), torch.zeros(1, 2, 3, 5))
    assert repr(cache) == "KVCache(length=3, capacity=4, keys shape=(1, 2, 3, 5))"
    window = SlidingWindowCache(2)
    window.append(torch.zeros(1, 4, 5), torch.zeros(1, 4, 5))
    assert (
        repr(window)
        == "SlidingWindowCache(window=2, sinks=0, rope_positions='original', length=4, keys shape=(1, 1, 5))"
    )
    streaming = SlidingWindowCache(3, sinks=1, rope_positions="cache")
    assert repr(streaming).startswith("SlidingWindowCache(window=3, sinks=1, rope_positions='cache', length=0")


# ---------------------------------------------------------------- argument checks: the messages


def test_extended_names_the_tensor_that_is_not_keys_and_values_shaped():
    cache = KVCache()
    with raises(TypeError, "keys must be a torch.Tensor, got list"):
        cache.append([[0.0]], torch.zeros(1, 2))
    with raises(ValueError, "keys must have at least 2 dimensions (..., new, d_head), got shape (3,)"):
        cache.append(torch.zeros(3), torch.zeros(1, 2))
    with raises(ValueError, "values must have at least 2 dimensions (..., new, d_v), got shape (3,)"):
        cache.append(torch.zeros(1, 2), torch.zeros(3))
    with raises(
        ValueError,
        "values must have one row per key, with the same leading dimensions: expected "
        "values.shape[:-1] == keys.shape[:-1] = (2, 3), got values of shape (2, 2, 5)",
    ):
        cache.append(torch.zeros(2, 3, 4), torch.zeros(2, 2, 5))
    with raises(TypeError, "values must have the dtype of keys (torch.float32), got torch.float64"):
        cache.append(torch.zeros(1, 2), torch.zeros(1, 2, dtype=torch.float64))
    with raises(ValueError, "values must be on the device of keys (cpu), got device meta"):
        cache.append(torch.zeros(1, 2), torch.zeros(1, 2, device=META))
    assert cache.length == 0 and cache.keys is None


def test_a_full_cache_says_its_capacity_what_it_holds_and_what_was_asked():
    cache = KVCache(capacity=4)
    cache.append(torch.zeros(1, 3, 2), torch.zeros(1, 3, 2))
    with raises(
        ValueError,
        "capacity=4 is too small: the cache holds 3 tokens and cannot take 2 more; make a KVCache with a "
        "larger capacity (the cache is unchanged)",
    ):
        cache.append(torch.zeros(1, 2, 2), torch.zeros(1, 2, 2))
    with raises(ValueError, "capacity must be >= 1, got 0"):
        KVCache(capacity=0)
    with raises(TypeError, "capacity must be an int, got float 4.0 (expected >= 1)"):
        KVCache(capacity=4.0)


def _holding(keys_shape=(1, 2, 4), values_shape=(1, 2, 3)):
    cache = KVCache()
    cache.append(torch.zeros(keys_shape), torch.zeros(values_shape))
    return cache


def test_new_keys_must_match_the_held_leading_dimensions_and_d_head_each_on_its_own():
    tail = "a cache follows one batch of sequences, so use a new KVCache (or reset()) for another"
    with raises(
        ValueError,
        "keys must match the cached keys except along the sequence axis: keys of shape (2, 1, 4) have leading "
        f"dimensions (2,) and d_head 4, but the cache holds leading dimensions (1,) and d_head 4; {tail}",
    ):
        _holding().append(torch.zeros(2, 1, 4), torch.zeros(2, 1, 3))
    with raises(
        ValueError,
        "keys must match the cached keys except along the sequence axis: keys of shape (1, 1, 5) have leading "
        f"dimensions (1,) and d_head 5, but the cache holds leading dimensions (1,) and d_head 4; {tail}",
    ):
        _holding().append(torch.zeros(1, 1, 5), torch.zeros(1, 1, 3))
    with raises(
        ValueError, "values must match the cached values' last dimension d_v = 3, got values of shape (1, 1, 2)"
    ):
        _holding().append(torch.zeros(1, 1, 4), torch.zeros(1, 1, 2))


def test_new_keys_must_have_the_held_dtype_and_device():
    with raises(
        TypeError,
        "keys have dtype torch.float64 but the cache holds torch.float32; convert them with .to(torch.float32) "
        "or start a new KVCache",
    ):
        _holding().append(torch.zeros(1, 1, 4, dtype=torch.float64), torch.zeros(1, 1, 3, dtype=torch.float64))
    with raises(
        ValueError, "keys are on device meta but the cache is on cpu; move them with .to('cpu') or start a new KVCache"
    ):
        _holding().append(torch.zeros(1, 1, 4, device=META), torch.zeros(1, 1, 3, device=META))


def test_the_sliding_window_cache_names_its_bad_settings():
    with raises(
        ValueError, "window must be >= 1 (each new token sees itself and the window - 1 tokens before it), got 0"
    ):
        SlidingWindowCache(0)
    with raises(ValueError, "sinks must be >= 0 (the first tokens that are never evicted), got -1"):
        SlidingWindowCache(2, -1)
    with raises(ValueError, "rope_positions must be one of 'original', 'cache', got 'stream'"):
        SlidingWindowCache(2, rope_positions="stream")
    with raises(ValueError, "new must be >= 1, got 0"):
        SlidingWindowCache(2).mask_for(0)


def _cache_of(batch, heads, length, d_head, d_v=None):
    cache = KVCache()
    cache.append(torch.zeros(*batch, heads, length, d_head), torch.zeros(*batch, heads, length, d_v or d_head))
    return cache


def test_expect_cache_names_what_does_not_fit_the_layer():
    with raises(TypeError, "cache must be a KVCache or None, got dict"):
        expect_cache({}, torch.zeros(1, 2, 6), 2, 3)
    x = torch.zeros(1, 2, 6)  # (batch 1, seq 2, d_model 6): 2 heads of size 3
    assert expect_cache(_cache_of((1,), 2, 4, 3), x, 2, 3).length == 4
    with raises(
        ValueError,
        "x has batch shape (1,) but the cache holds batch shape (2,); a KVCache follows one batch of sequences: "
        "use a new one (or cache.reset()) for another",
    ):
        expect_cache(_cache_of((2,), 2, 4, 3), x, 2, 3)
    tail = "shaped (..., heads, length, d_head), got cached {0} of shape {1}; use a new KVCache for another module"
    with raises(ValueError, "cache must hold keys of 2 heads of size d_head=3, " + tail.format("keys", (1, 1, 4, 3))):
        expect_cache(_cache_of((1,), 1, 4, 3), x, 2, 3)
    with raises(ValueError, "cache must hold keys of 2 heads of size d_head=3, " + tail.format("keys", (1, 2, 4, 2))):
        expect_cache(_cache_of((1,), 2, 4, 2, d_v=3), x, 2, 3)
    with raises(
        ValueError, "cache must hold values of 2 heads of size d_head=3, " + tail.format("values", (1, 2, 4, 5))
    ):
        expect_cache(_cache_of((1,), 2, 4, 3, d_v=5), x, 2, 3)
    unbatched = KVCache()  # keys (heads, length, d_head): one dimension short for x (batch, seq, d_model)
    unbatched.append(torch.zeros(2, 4, 3), torch.zeros(2, 4, 3))
    with pytest.raises(ValueError, match=r"^x has batch shape \(1,\) but the cache holds batch shape \(\)"):
        expect_cache(unbatched, x, 2, 3)


def test_expect_cache_names_the_dtype_and_device_of_x():
    with raises(
        TypeError,
        "cache must hold the dtype of x (torch.float64), got cached keys of dtype torch.float32; start a new KVCache",
    ):
        expect_cache(_cache_of((1,), 2, 4, 3), torch.zeros(1, 2, 6, dtype=torch.float64), 2, 3)
    with raises(
        ValueError, "cache must be on the device of x (meta), got cached keys on device cpu; start a new KVCache"
    ):
        expect_cache(_cache_of((1,), 2, 4, 3), torch.zeros(1, 2, 6, device=META), 2, 3)
    full = KVCache(capacity=4)
    full.append(torch.zeros(1, 2, 4, 3), torch.zeros(1, 2, 4, 3))
    with pytest.raises(ValueError, match=r"^capacity=4 is too small: the cache holds 4 tokens and cannot take 2 more"):
        expect_cache(full, torch.zeros(1, 2, 6), 2, 3)
