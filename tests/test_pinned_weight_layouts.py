"""Loaders of weight_layouts: arguments that mutation testing (``make mutate``) showed unpinned.
The expected module is built by hand from the same numbers: stacked rows [W_Q; W_K; W_V] and
biases [b_Q; b_K; b_V], as MultiHeadSelfAttention's docstring lays them out."""

from __future__ import annotations

import torch

from mhsa_helpers.weight_layouts import from_fused_qkv, from_head_weights, from_projection_weights


def test_missing_biases_of_a_grouped_module_are_zeros_of_the_key_value_width():
    torch.manual_seed(0)
    d_model, d_in, kv_dim = 8, 6, 4  # 2 query heads of 4, 1 key/value head: W_K is (4, 6)
    q_w, k_w, v_w, o_w = (
        torch.randn(d_model, d_in),
        torch.randn(kv_dim, d_in),
        torch.randn(kv_dim, d_in),
        torch.randn(5, d_model),
    )
    q_b = torch.randn(d_model)
    module = from_projection_weights(q_w, k_w, v_w, o_w, num_heads=2, layout="out_in", q_bias=q_b)
    assert torch.equal(module.qkv_proj.bias, torch.cat([q_b, torch.zeros(2 * kv_dim)]))
    v_b = torch.randn(kv_dim)
    module = from_projection_weights(q_w, k_w, v_w, o_w, num_heads=2, layout="out_in", v_bias=v_b)
    assert torch.equal(module.qkv_proj.bias, torch.cat([torch.zeros(d_model + kv_dim), v_b]))


def test_a_fused_bias_reaches_the_keys_too():
    torch.manual_seed(1)
    qkv_w, o_w, qkv_b = torch.randn(24, 8), torch.randn(8, 8), torch.randn(24)
    module = from_fused_qkv(qkv_w, o_w, num_heads=2, fused_layout="stacked", qkv_bias=qkv_b)
    assert torch.equal(module.qkv_proj.bias, qkv_b) and torch.equal(module.qkv_proj.weight, qkv_w)


def test_options_of_head_weights_reach_the_module():
    torch.manual_seed(2)
    heads = [[torch.randn(4, 8) for _ in range(2)] for _ in range(3)]
    module = from_head_weights(*heads, torch.randn(8, 8), layout="out_in", causal=True)
    assert module.causal is True
    x = torch.randn(1, 3, 8)
    changed = x.clone()
    changed[0, 2] += 1.0
    with torch.no_grad():  # causal: the first two outputs do not see the third token
        assert torch.equal(module(x)[0, :2], module(changed)[0, :2])
