"""Tiled attention and the online softmax: behaviour that mutation testing (``make mutate``) showed unpinned.

The expected values are worked from the definitions (softmax of one score is 1; the documented
default tile of 128 keys), not read from the code under test.
"""

from __future__ import annotations

import pytest
import torch

import mhsa_helpers.tiled_attention as tiled
from mhsa_helpers.tiled_attention import (
    initial_online_softmax_state,
    online_softmax,
    online_softmax_trace,
    tile_kinds,
    tiled_attention,
)


def test_the_trace_of_a_single_score_is_that_score_and_a_normaliser_of_one():
    trace = online_softmax_trace(torch.tensor([[2.5], [-7.0]]), tile_size=4)
    # One key: the running maximum is the score itself and exp(score - max) sums to 1.
    assert torch.equal(trace.running_max, torch.tensor([[2.5], [-7.0]]))
    assert torch.equal(trace.normaliser, torch.ones(2, 1))
    assert trace.tiles == ((0, 1),)
    assert torch.equal(online_softmax(torch.tensor([3.0]), 1), torch.tensor([1.0]))


def test_the_default_tile_is_128_keys(monkeypatch):
    widths = []
    real_update = tiled.online_softmax_update

    def recording_update(state, scores, values):
        widths.append((scores.shape[-2], scores.shape[-1]))
        return real_update(state, scores, values)

    monkeypatch.setattr(tiled, "online_softmax_update", recording_update)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, n, 2, generator=g) for n in (129, 129, 129))
    tiled_attention(q, k, v)
    # 129 queries and keys: a tile of 128 and a tile of 1, on each side.
    assert widths == [(128, 128), (128, 1), (1, 128), (1, 1)]


@pytest.mark.parametrize("causal", [False, True])
def test_tiled_attention_computes_where_its_inputs_are(causal):
    # The "meta" device holds shapes only: any intermediate made on the CPU instead of q's
    # device either mixes devices (an error) or hands back a CPU tensor.
    q = torch.empty(2, 5, 4, device="meta")
    k = torch.empty(2, 7, 4, device="meta")
    v = torch.empty(2, 7, 3, device="meta")
    out = tiled_attention(q, k, v, causal=causal, tile_size=2)
    assert out.device.type == "meta" and out.shape == (2, 5, 3)


def test_the_online_softmax_computes_where_its_scores_are():
    scores = torch.empty(3, 5, device="meta")
    assert online_softmax(scores, 2).device.type == "meta"
    trace = online_softmax_trace(scores, 2)
    assert trace.running_max.device.type == trace.normaliser.device.type == "meta"


def _kinds_by_rule(seq_q, seq_k, tile_size):
    """Query i sits at position seq_k - seq_q + i and sees key j when j <= that position: a block is
    "computed" when every query sees every key, "skipped" when none sees any, "masked" otherwise."""
    offset = seq_k - seq_q
    kinds = []
    for q0 in range(0, seq_q, tile_size):
        row = []
        for k0 in range(0, seq_k, tile_size):
            seen = [
                j <= offset + i
                for i in range(q0, min(q0 + tile_size, seq_q))
                for j in range(k0, min(k0 + tile_size, seq_k))
            ]
            row.append("computed" if all(seen) else "skipped" if not any(seen) else "masked")
        kinds.append(row)
    return kinds


@pytest.mark.parametrize(("seq_q", "seq_k", "tile_size"), [(3, 3, 1), (3, 4, 2), (5, 9, 2), (4, 4, 3), (6, 6, 2)])
def test_a_block_whose_last_key_is_its_first_querys_own_position_is_computed_unmasked(seq_q, seq_k, tile_size):
    assert tile_kinds(seq_q, seq_k, tile_size=tile_size, causal=True) == _kinds_by_rule(seq_q, seq_k, tile_size)


def test_the_trace_keeps_two_batch_dimensions():
    scores = torch.randn(2, 3, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    trace = online_softmax_trace(scores, tile_size=2)
    assert trace.running_max.shape == trace.normaliser.shape == (2, 3, 3)
    row_max = scores.amax(-1)
    torch.testing.assert_close(trace.running_max[..., -1], row_max)
    torch.testing.assert_close(trace.normaliser[..., -1], (scores - row_max[..., None]).exp().sum(-1))
    torch.testing.assert_close(trace.running_max[..., 0], scores[..., :2].amax(-1))


def test_the_initial_state_is_made_with_the_dtype_and_on_the_device_asked_for():
    default = initial_online_softmax_state((2,), 3, 4)
    made = initial_online_softmax_state((2,), 3, 4, dtype=torch.float64, device="meta")
    for name in ("running_max", "normaliser", "output"):
        assert getattr(default, name).dtype == torch.float32 and getattr(default, name).device.type == "cpu"
        assert getattr(made, name).dtype == torch.float64 and getattr(made, name).device.type == "meta", name
    assert made.output.shape == (2, 3, 4) and made.running_max.shape == made.normaliser.shape == (2, 3, 1)
