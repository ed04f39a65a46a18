"""Grouped-query and multi-query attention (notebook 08): the module, the functional form, the
cache and the loaders with fewer key/value heads than query heads, against PyTorch's own
``enable_gqa`` and against the expansion written out here."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from mhsa_helpers import (
    AttentionWeights,
    KVCache,
    MultiHeadSelfAttention,
    RotaryEmbedding,
    multi_head_self_attention,
    repeat_kv,
)
from mhsa_helpers.weight_layouts import from_fused_qkv, from_projection_weights

D_MODEL, HEADS = 32, 8
D_HEAD = D_MODEL // HEADS


def reference(module: MultiHeadSelfAttention, x: torch.Tensor, *, causal: bool) -> torch.Tensor:
    """The module's computation written out: query head h reads key/value head h // groups."""
    kv = module.num_kv_heads
    groups = HEADS // kv
    q = x @ module.q_weight.T + module.qkv_proj.bias[:D_MODEL]
    k = x @ module.k_weight.T + module.qkv_proj.bias[D_MODEL : D_MODEL + kv * D_HEAD]
    v = x @ module.v_weight.T + module.qkv_proj.bias[D_MODEL + kv * D_HEAD :]
    seq = x.shape[-2]
    outputs = []
    for h in range(HEADS):
        g = h // groups
        qh = q[..., h * D_HEAD : (h + 1) * D_HEAD]
        kh, vh = k[..., g * D_HEAD : (g + 1) * D_HEAD], v[..., g * D_HEAD : (g + 1) * D_HEAD]
        scores = qh @ kh.transpose(-2, -1) / math.sqrt(D_HEAD)
        if causal:
            scores = scores.masked_fill(torch.ones(seq, seq, dtype=torch.bool).triu(1), -math.inf)
        outputs.append(torch.softmax(scores, -1) @ vh)
    return module.out_proj(torch.cat(outputs, dim=-1))


@pytest.mark.parametrize("num_kv_heads", [1, 2, 4, 8])
@pytest.mark.parametrize("causal", [False, True])
def test_module_equals_the_written_out_grouping(num_kv_heads, causal):
    torch.manual_seed(num_kv_heads)
    module = MultiHeadSelfAttention(D_MODEL, HEADS, num_kv_heads=num_kv_heads, causal=causal).double()
    assert module.qkv_proj.weight.shape == (D_MODEL + 2 * num_kv_heads * D_HEAD, D_MODEL)
    x = torch.randn(2, 5, D_MODEL, dtype=torch.float64)
    torch.testing.assert_close(module(x), reference(module, x, causal=causal))


@pytest.mark.parametrize("num_kv_heads", [1, 2, 4])
def test_repeat_kv_equals_pytorchs_enable_gqa(num_kv_heads):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, HEADS, 6, D_HEAD, generator=g)
    k, v = torch.randn(2, 2, num_kv_heads, 6, D_HEAD, generator=g).unbind(0)
    groups = HEADS // num_kv_heads
    expanded = F.scaled_dot_product_attention(q, repeat_kv(k, groups), repeat_kv(v, groups), is_causal=True)
    native = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    torch.testing.assert_close(expanded, native)
    assert torch.equal(repeat_kv(k, groups), k.repeat_interleave(groups, dim=1))


def test_repeat_instead_of_repeat_interleave_gives_another_answer():
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(1, 4, 5, D_HEAD, generator=g), torch.randn(1, 2, 5, D_HEAD, generator=g)
    right = F.scaled_dot_product_attention(q, repeat_kv(k, 2), repeat_kv(k, 2))
    tiled = F.scaled_dot_product_attention(q, k.repeat(1, 2, 1, 1), k.repeat(1, 2, 1, 1))
    # Heads 0 and 3 read the same key/value head either way; heads 1 and 2 do not.
    same = [torch.allclose(right[:, h], tiled[:, h]) for h in range(4)]
    assert same == [True, False, False, True]
    assert repeat_kv(k, 1) is k


def test_one_kv_head_per_query_head_is_todays_module():
    torch.manual_seed(3)
    plain = MultiHeadSelfAttention(D_MODEL, HEADS, causal=True)
    grouped = MultiHeadSelfAttention(D_MODEL, HEADS, num_kv_heads=HEADS, causal=True)
    grouped.load_state_dict(plain.state_dict())
    x = torch.randn(2, 7, D_MODEL)
    torch.testing.assert_close(grouped(x), plain(x))
    assert "num_kv_heads" not in repr(plain) and "num_kv_heads=2" in repr(MultiHeadSelfAttention(8, 4, num_kv_heads=2))


@pytest.mark.parametrize("num_kv_heads", [1, 2])
def test_functional_form_equals_the_module(num_kv_heads):
    torch.manual_seed(4)
    module = MultiHeadSelfAttention(
        D_MODEL, HEADS, num_kv_heads=num_kv_heads, causal=True, rope=RotaryEmbedding(D_MODEL // HEADS)
    ).double()
    x = torch.randn(2, 6, D_MODEL, dtype=torch.float64)
    bias = module.qkv_proj.bias
    kv_dim = num_kv_heads * D_HEAD
    weights = AttentionWeights(
        module.q_weight,
        module.k_weight,
        module.v_weight,
        module.o_weight,
        q_bias=bias[:D_MODEL],
        k_bias=bias[D_MODEL : D_MODEL + kv_dim],
        v_bias=bias[D_MODEL + kv_dim :],
        o_bias=module.out_proj.bias,
    )  # spelled out rather than AttentionWeights.of(module): the test of the slicing is this one
    out = multi_head_self_attention(
        x, weights, num_heads=HEADS, num_kv_heads=num_kv_heads, causal=True, rope=RotaryEmbedding(D_HEAD)
    )
    torch.testing.assert_close(out, module(x))


@pytest.mark.parametrize("capacity", [None, 16])
def test_decoding_with_a_grouped_cache_equals_the_full_pass(capacity):
    torch.manual_seed(5)
    module = MultiHeadSelfAttention(
        D_MODEL, HEADS, num_kv_heads=2, causal=True, rope=RotaryEmbedding(D_MODEL // HEADS)
    ).eval()
    x = torch.randn(2, 9, D_MODEL)
    full = module(x)
    cache = KVCache(capacity=capacity)
    with torch.no_grad():
        steps = [module(x[:, :4], cache=cache)] + [module(x[:, t : t + 1], cache=cache) for t in range(4, 9)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)
    # The cache holds only the 2 key/value heads: a quarter of what 8 heads would need.
    assert cache.keys.shape == (2, 2, 9, D_HEAD) and cache.length == 9


def test_loaders_accept_grouped_weights():
    torch.manual_seed(6)
    module = MultiHeadSelfAttention(D_MODEL, HEADS, num_kv_heads=2)
    x = torch.randn(1, 5, D_MODEL)
    bias = module.qkv_proj.bias.detach()
    kv_dim = 2 * D_HEAD
    loaded = from_projection_weights(
        module.q_weight.detach(),
        module.k_weight.detach(),
        module.v_weight.detach(),
        module.o_weight.detach(),
        num_heads=HEADS,
        layout="out_in",
        q_bias=bias[:D_MODEL],
        k_bias=bias[D_MODEL : D_MODEL + kv_dim],
        v_bias=bias[D_MODEL + kv_dim :],
        o_bias=module.out_proj.bias.detach(),
    )
    assert loaded.num_kv_heads == 2
    torch.testing.assert_close(loaded(x), module(x))
    fused = from_fused_qkv(
        module.qkv_proj.weight.detach(),
        module.o_weight.detach(),
        num_heads=HEADS,
        num_kv_heads=2,
        fused_layout="stacked",
        qkv_bias=bias,
        o_bias=module.out_proj.bias.detach(),
    )
    torch.testing.assert_close(fused(x), module(x))


@pytest.mark.parametrize(
    ("build", "error", "match"),
    [
        (lambda: MultiHeadSelfAttention(32, 8, num_kv_heads=3), ValueError, "num_kv_heads must divide num_heads"),
        (lambda: MultiHeadSelfAttention(32, 8, num_kv_heads=0), ValueError, "num_kv_heads must be >= 1"),
        (lambda: MultiHeadSelfAttention(32, 8, num_kv_heads=2.0), TypeError, "num_kv_heads must be an int"),
        (lambda: repeat_kv(torch.ones(2, 3), 2), ValueError, "x must have at least 3 dimensions"),
        (lambda: repeat_kv(torch.ones(1, 2, 3, 4), 0), ValueError, "groups must be >= 1"),
        (
            lambda: from_fused_qkv(
                torch.ones(48, 32), torch.ones(32, 32), num_heads=8, num_kv_heads=2, fused_layout="per_head"
            ),
            ValueError,
            "fused_layout='per_head'",
        ),
        (
            lambda: from_projection_weights(
                torch.ones(32, 32),
                torch.ones(12, 32),
                torch.ones(12, 32),
                torch.ones(32, 32),
                num_heads=8,
                layout="out_in",
            ),
            ValueError,
            "grouped-query attention",
        ),
    ],
)
def test_bad_grouping_names_the_setting(build, error, match):
    with pytest.raises(error, match=match):
        build()


def test_functional_form_names_wrong_kv_weight_shapes():
    x = torch.randn(1, 3, 32)
    w = torch.randn(32, 32)
    with pytest.raises(ValueError, match=r"weights.k must have shape \(num_kv_heads \* d_head, d_in\) = \(8, 32\)"):
        multi_head_self_attention(x, AttentionWeights(w, w, w, w), num_heads=8, num_kv_heads=2)
