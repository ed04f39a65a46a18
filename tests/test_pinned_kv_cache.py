"""KVCache and SlidingWindowCache: behaviour that mutation testing (``make mutate``) showed unpinned.

Each expected value is written from the docstrings (what is held, at which positions, for
which leading dimensions), never read back from the cache under test.
"""

from __future__ import annotations

import pytest
import torch

from mhsa_helpers import KVCache, SlidingWindowCache


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
