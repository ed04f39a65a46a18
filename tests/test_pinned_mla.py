"""Latent attention (notebook 13): argument names, where parameters are made, and the cache's device, which mutation
testing (``make mutate``) showed unpinned. Each message is what a learner reads: its wording is behaviour."""

from __future__ import annotations

import pytest
import torch
from pinning import raises

import mhsa_helpers as mh


@pytest.mark.parametrize(
    ("setting", "value"),
    [("d_model", 0), ("num_heads", 0), ("d_latent", 0), ("d_head", 0), ("q_latent", 0)],
)
def test_each_size_is_named_when_it_is_impossible(setting, value):
    sizes = {"d_model": 8, "num_heads": 2, "d_latent": 3} | {setting: value}
    with raises(ValueError, f"{setting} must be >= 1, got {value}"):
        mh.MultiHeadLatentAttention(**sizes)


def test_every_parameter_is_made_on_the_device_and_in_the_dtype_asked_for_without_bias():
    layer = mh.MultiHeadLatentAttention(
        16, 4, 6, q_latent=5, rope=mh.RotaryEmbedding(2, device="meta"), device="meta", dtype=torch.float64
    )
    names = {name for name, _ in layer.named_parameters()}
    assert names == {
        f"{p}.weight" for p in ("q_down", "q_up", "q_rope", "kv_down", "k_rope", "k_up", "v_up", "out_proj")
    }
    assert all(p.device.type == "meta" and p.dtype == torch.float64 for p in layer.parameters())


def test_a_cache_on_another_device_is_named_before_anything_is_computed():
    layer = mh.MultiHeadLatentAttention(8, 2, 3, rope=mh.RotaryEmbedding(2))
    cache = mh.LatentCache()
    cache.commit(torch.zeros(1, 2, 3, device="meta"), torch.zeros(1, 2, 2, device="meta"))
    with raises(ValueError, "cache must be on the device of x (cpu), got cached latents on meta"):
        layer(torch.randn(1, 1, 8), cache=cache)
    assert cache.length == 2  # left as it was


def test_by_default_the_keys_and_values_are_built_and_absorbed_true_never_builds_them():
    layer = mh.MultiHeadLatentAttention(8, 2, 3, rope=mh.RotaryEmbedding(2))
    calls = []
    for name in ("k_up", "v_up"):
        getattr(layer, name).register_forward_hook(lambda module, args, out, name=name: calls.append(name))
    x = torch.randn(1, 3, 8)
    layer(x)
    assert calls == ["k_up", "v_up"]  # the materialised path, unless absorbed=True is asked for
    layer(x, absorbed=True)
    assert calls == ["k_up", "v_up"]


def test_a_mask_of_the_wrong_shape_or_device_is_named_with_the_scores_it_must_fit():
    layer = mh.MultiHeadLatentAttention(8, 2, 3)
    x = torch.randn(1, 3, 8)
    with raises(ValueError, "mask must be broadcastable to (..., seq_q, seq_k) = (1, 2, 3, 3), got shape (2, 2)"):
        layer(x, mask=torch.ones(2, 2, dtype=torch.bool))
    with raises(
        ValueError,
        "mask must be on the device of the tensors it masks (cpu), got device meta; move it with .to('cpu')",
    ):
        layer(x, mask=torch.ones(3, 3, dtype=torch.bool, device="meta"))


def test_a_prompt_as_long_as_the_rope_table_starts_at_position_0():
    # Without a cache the first token is at position 0: a prompt of the table's full length fits (from 1 it would not).
    torch.manual_seed(0)
    layer = mh.MultiHeadLatentAttention(8, 2, 3, rope=mh.RotaryEmbedding(2, max_seq_len=4))
    x = torch.randn(1, 4, 8)
    assert layer(x).shape == (1, 4, 8)
    with pytest.raises(ValueError):
        layer(torch.randn(1, 5, 8))
