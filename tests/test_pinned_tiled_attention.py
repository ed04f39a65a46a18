"""Tiled attention and the online softmax: behaviour that mutation testing (``make mutate``) showed unpinned.

The expected values are worked from the definitions (softmax of one score is 1; the documented
default tile of 128 keys), not read from the code under test.
"""

from __future__ import annotations

import pytest
import torch
from pinning import raises

import mhsa_helpers.tiled_attention as tiled
from mhsa_helpers.tiled_attention import (
    initial_online_softmax_state,
    online_softmax,
    online_softmax_trace,
    online_softmax_update,
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


# ------------------------------------------------------------------ argument checks: the messages


@pytest.mark.parametrize("function", [online_softmax, online_softmax_trace])
def test_the_online_softmax_refuses_a_scalar_naming_scores_and_its_shape(function):
    with raises(ValueError, "scores must have at least 1 dimensions (..., n), got shape ()"):
        function(torch.tensor(1.0), 2)
    with raises(TypeError, "scores must be a torch.Tensor, got list"):
        function([1.0, 2.0], 2)


@pytest.mark.parametrize(
    "call",
    [
        lambda size: online_softmax(torch.zeros(3), size),
        lambda size: online_softmax_trace(torch.zeros(3), size),
        lambda size: tiled_attention(torch.zeros(1, 2, 2), torch.zeros(1, 2, 2), torch.zeros(1, 2, 2), tile_size=size),
        lambda size: tile_kinds(2, 2, tile_size=size),
    ],
    ids=["online_softmax", "online_softmax_trace", "tiled_attention", "tile_kinds"],
)
def test_a_bad_tile_size_is_named_first_in_the_message(call):
    with raises(ValueError, "tile_size must be >= 1, got 0"):
        call(0)
    with raises(TypeError, "tile_size must be an int, got float 2.0 (expected >= 1)"):
        call(2.0)


@pytest.mark.parametrize(
    ("name", "shape"), [("q", "(..., seq_q, d)"), ("k", "(..., seq_k, d)"), ("v", "(..., seq_k, d_v)")]
)
def test_tiled_attention_names_the_tensor_with_too_few_dimensions_and_its_shape(name, shape):
    tensors = {"q": torch.zeros(1, 2, 2), "k": torch.zeros(1, 2, 2), "v": torch.zeros(1, 2, 2)}
    tensors[name] = torch.zeros(2)
    with raises(ValueError, f"{name} must have at least 2 dimensions {shape}, got shape (2,)"):
        tiled_attention(**tensors)


def test_tiled_attention_names_the_tensor_of_another_dtype_and_the_dtype_expected():
    q = torch.zeros(1, 2, 2)
    with raises(TypeError, "k must have the same dtype as q (torch.float32), got torch.float64"):
        tiled_attention(q, q.double(), q)
    with raises(TypeError, "v must have the same dtype as q (torch.float32), got torch.float64"):
        tiled_attention(q, q, q.double())


def test_tiled_attention_gives_the_sizes_expected_in_its_shape_messages():
    q, k, v = torch.zeros(1, 2, 3), torch.zeros(1, 5, 3), torch.zeros(1, 5, 4)
    with raises(
        ValueError,
        "k must have the same last dimension d as q: expected k.shape[-1] == 3, got q shape (1, 2, 3) "
        "and k shape (1, 5, 2)",
    ):
        tiled_attention(q, k[..., :2], v)
    with raises(
        ValueError,
        "v must have one row per key: expected v.shape[-2] == seq_k == 5, got k shape (1, 5, 3) and v shape (1, 4, 4)",
    ):
        tiled_attention(q, k, v[..., :4, :])


@pytest.mark.parametrize(
    ("q_shape", "k_shape", "v_shape"),
    [((1, 2, 3), (1, 0, 3), (1, 0, 4)), ((1, 2, 0), (1, 5, 0), (1, 5, 4)), ((2, 0, 3), (2, 5, 3), (2, 5, 4))],
    ids=["no-keys", "no-features", "no-queries"],
)
def test_tiled_attention_refuses_empty_positions_or_features(q_shape, k_shape, v_shape):
    q, k, v = torch.zeros(q_shape), torch.zeros(k_shape), torch.zeros(v_shape)
    with raises(
        ValueError,
        f"q and k must hold at least one position and one feature, got q shape {q_shape} and k shape {k_shape}",
    ):
        tiled_attention(q, k, v)


@pytest.mark.parametrize("odd_one", ["k", "v"])
def test_keys_or_values_whose_batch_does_not_broadcast_are_refused_before_any_product(odd_one):
    shapes = {"q": (2, 3, 4), "k": (2, 3, 4), "v": (2, 3, 4)} | {odd_one: (3, 3, 4)}
    with raises(
        ValueError,
        f"q, k and v must have broadcastable batch dimensions, got q shape {shapes['q']}, k shape {shapes['k']} "
        f"and v shape {shapes['v']}",
    ):
        tiled_attention(*(torch.zeros(shape) for shape in shapes.values()))


@pytest.mark.parametrize("function", [online_softmax, online_softmax_trace])
def test_the_online_softmax_refuses_an_empty_row_giving_its_shape(function):
    with raises(ValueError, "scores must have at least one entry in its last dimension, got shape (3, 0)"):
        function(torch.zeros(3, 0), 2)


def test_tile_kinds_names_the_bad_length():
    with raises(ValueError, "seq_q must be >= 1, got 0"):
        tile_kinds(0, 2, tile_size=1)
    with raises(ValueError, "seq_k must be >= 1, got 0"):
        tile_kinds(1, 0, tile_size=1)
    with raises(ValueError, "causal needs seq_q <= seq_k (queries are the last seq_q positions), got seq_q=3, seq_k=2"):
        tile_kinds(3, 2, tile_size=1, causal=True)
    assert tile_kinds(3, 2, tile_size=1) == [["computed"] * 2] * 3  # more queries than keys: fine without causal


def test_the_state_and_the_update_name_their_bad_arguments():
    with raises(ValueError, "d_v must be >= 1, got 0"):
        initial_online_softmax_state((), 1, 0)
    state = initial_online_softmax_state((), 1, 2)
    with raises(TypeError, "state must be an OnlineSoftmaxState, got tuple"):
        online_softmax_update(tuple(vars(state).values()), torch.zeros(1, 3), torch.zeros(3, 2))
    with raises(ValueError, "scores must have at least 2 dimensions (..., seq_q, tile), got shape (3,)"):
        online_softmax_update(state, torch.zeros(3), torch.zeros(3, 2))
    with raises(ValueError, "values must have at least 2 dimensions (..., tile, d_v), got shape (3,)"):
        online_softmax_update(state, torch.zeros(1, 3), torch.zeros(3))
    with raises(
        ValueError,
        "values must have one row per score column (key): expected values.shape[-2] == 3, "
        "got scores shape (2, 1, 3) and values shape (2, 4, 2)",
    ):
        online_softmax_update(state, torch.zeros(2, 1, 3), torch.zeros(2, 4, 2))


def test_the_update_computes_in_the_states_dtype():
    # "Computed in the state's dtype": float64 scores and values fold into a float32 state as float32.
    state = initial_online_softmax_state((), 1, 2)
    scores = torch.tensor([[0.1, 0.2, 0.3]], dtype=torch.float64)
    new = online_softmax_update(state, scores, torch.ones(3, 2, dtype=torch.float64))
    for name in ("running_max", "normaliser", "output"):
        assert getattr(new, name).dtype == torch.float32, name
    assert new.running_max.item() == torch.tensor(0.3, dtype=torch.float32).item()
