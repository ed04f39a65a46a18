"""Multi-head latent attention (notebook 13): the module against DeepSeek-V2's equations written out per head
(RoPE as complex multiplication, as RoFormer writes it), the absorbed path against the materialised one over
property-tested sizes, decoding from a ``LatentCache`` against the full pass, and what the cache holds."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from mhsa_helpers import KVCache, LatentCache, MultiHeadLatentAttention, RotaryEmbedding
from mhsa_helpers.rope import ROPE_CONVENTIONS

SEEDS = st.integers(0, 2**16)


def rotated(x: torch.Tensor, base: float, convention: str) -> torch.Tensor:
    """RoPE at positions 0 .. seq-1 as a complex multiplication: pair i of position m turns by m * base^(-2i/d)."""
    seq, d = x.shape[-2], x.shape[-1]
    angles = torch.arange(seq, dtype=torch.float64)[:, None] * base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    if convention == "interleaved":  # pairs (0, 1), (2, 3), ...
        pairs = torch.view_as_complex(x.reshape(*x.shape[:-1], d // 2, 2).contiguous())
        return torch.view_as_real(pairs * torch.polar(torch.ones_like(angles), angles)).flatten(-2)
    halves = torch.complex(x[..., : d // 2], x[..., d // 2 :])  # pairs (i, i + d/2)
    turned = halves * torch.polar(torch.ones_like(angles), angles)
    return torch.cat([turned.real, turned.imag], dim=-1)


def reference(module: MultiHeadLatentAttention, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """DeepSeek-V2's equations (section 2.1.2-2.1.3), one head at a time, every key and value built."""
    heads, d_head, d_rope, rope = module.num_heads, module.d_head, module.d_rope, module.rope
    c_q = x if module.q_down is None else x @ module.q_down.weight.T
    c_kv = x @ module.kv_down.weight.T
    seq = x.shape[-2]
    outputs = []
    for h in range(heads):
        rows = slice(h * d_head, (h + 1) * d_head)
        q, k, v = c_q @ module.q_up.weight[rows].T, c_kv @ module.k_up.weight[rows].T, c_kv @ module.v_up.weight[rows].T
        scores = q @ k.transpose(-2, -1)
        if rope is not None:
            q_r = rotated(c_q @ module.q_rope.weight[h * d_rope : (h + 1) * d_rope].T, rope.base, rope.convention)
            k_r = rotated(x @ module.k_rope.weight.T, rope.base, rope.convention)  # one key for every head
            scores = scores + q_r @ k_r.transpose(-2, -1)
        scores = scores / math.sqrt(d_head + d_rope)
        if module.causal:
            scores = scores.masked_fill(torch.ones(seq, seq, dtype=torch.bool).triu(1), -math.inf)
        if mask is not None:
            scores = scores.masked_fill(~mask[..., 0, :, :], -math.inf)
        outputs.append(torch.softmax(scores, dim=-1) @ v)
    return torch.cat(outputs, dim=-1) @ module.out_proj.weight.T


@pytest.mark.parametrize("q_latent", [None, 6])
@pytest.mark.parametrize("rope", [None, *ROPE_CONVENTIONS])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("absorbed", [False, True])
def test_module_equals_deepseeks_equations_written_out(q_latent, rope, causal, absorbed):
    torch.manual_seed(len(str((q_latent, rope, causal))))
    table = None if rope is None else RotaryEmbedding(4, base=100.0, convention=rope)
    module = MultiHeadLatentAttention(12, 3, 5, q_latent=q_latent, rope=table, causal=causal).double()
    x = torch.randn(2, 6, 12, dtype=torch.float64)
    mask = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])[:, None, None, :]  # the second sequence is padded
    torch.testing.assert_close(module(x, mask=mask, absorbed=absorbed), reference(module, x, mask))


def test_parameters_are_deepseeks_matrices_with_their_shapes():
    module = MultiHeadLatentAttention(16, 4, 8, d_head=5, q_latent=6, rope=RotaryEmbedding(2))
    shapes = {name: tuple(p.shape) for name, p in module.named_parameters()}
    assert shapes == {
        "q_down.weight": (6, 16),
        "q_up.weight": (20, 6),
        "kv_down.weight": (8, 16),
        "k_up.weight": (20, 8),
        "v_up.weight": (20, 8),
        "q_rope.weight": (8, 6),
        "k_rope.weight": (2, 16),
        "out_proj.weight": (16, 20),
    }
    bare = MultiHeadLatentAttention(16, 4, 8)
    assert (bare.d_head, bare.d_rope, bare.causal) == (4, 0, True)
    assert {name for name, _ in bare.named_parameters()} == {
        "q_up.weight", "kv_down.weight", "k_up.weight", "v_up.weight", "out_proj.weight"
    }  # fmt: skip
    assert module.extra_repr() == "d_model=16, num_heads=4, d_latent=8, d_head=5, d_rope=2, q_latent=6, causal=True"
    assert bare.extra_repr() == "d_model=16, num_heads=4, d_latent=8, d_head=4, d_rope=0, causal=True"


@given(
    batch=st.integers(1, 2),
    heads=st.integers(1, 3),
    d_head=st.integers(1, 5),
    d_latent=st.integers(1, 7),
    d_rope=st.sampled_from([0, 2, 4]),
    q_latent=st.one_of(st.none(), st.integers(1, 6)),
    seq=st.integers(1, 6),
    causal=st.booleans(),
    seed=SEEDS,
)
def test_absorbed_equals_materialised_outputs_weights_and_gradients(
    batch, heads, d_head, d_latent, d_rope, q_latent, seq, causal, seed
):
    torch.manual_seed(seed)
    rope = RotaryEmbedding(d_rope) if d_rope else None
    module = MultiHeadLatentAttention(
        7, heads, d_latent, d_head=d_head, q_latent=q_latent, rope=rope, causal=causal
    ).double()
    x = torch.randn(batch, seq, 7, dtype=torch.float64)
    results = []
    for absorbed in (False, True):
        module.zero_grad()
        out, weights = module(x, need_weights=True, absorbed=absorbed)
        out.square().sum().backward()
        results.append((out, weights, [p.grad.clone() for p in module.parameters()]))
    (out_m, weights_m, grads_m), (out_a, weights_a, grads_a) = results
    torch.testing.assert_close(out_a, out_m)
    torch.testing.assert_close(weights_a, weights_m)
    assert weights_m.shape == (batch, heads, seq, seq)
    for grad_a, grad_m in zip(grads_a, grads_m, strict=True):
        torch.testing.assert_close(grad_a, grad_m)
    torch.testing.assert_close(module(x, absorbed=True), out_m)  # the fused kernel, without the weights


@given(
    heads=st.integers(1, 3),
    d_latent=st.integers(1, 6),
    d_rope=st.sampled_from([0, 2, 4]),
    chunks=st.lists(st.integers(1, 3), min_size=1, max_size=4),
    absorbed=st.booleans(),
    capacity=st.booleans(),
    seed=SEEDS,
)
def test_decoding_in_chunks_equals_the_full_pass(heads, d_latent, d_rope, chunks, absorbed, capacity, seed):
    torch.manual_seed(seed)
    rope = RotaryEmbedding(d_rope, base=50.0) if d_rope else None
    module = MultiHeadLatentAttention(6, heads, d_latent, d_head=3, rope=rope).double()
    seq = sum(chunks)
    x = torch.randn(2, seq, 6, dtype=torch.float64)
    full = module(x)
    cache = LatentCache(capacity=seq + 1) if capacity else LatentCache()
    outputs, start = [], 0
    with torch.no_grad():
        for size in chunks:
            outputs.append(module(x[:, start : start + size], cache=cache, absorbed=absorbed))
            start += size
    torch.testing.assert_close(torch.cat(outputs, dim=1), full.detach())
    assert cache.length == cache.next_position == seq


@pytest.mark.parametrize("rope", [False, True])
def test_the_cache_holds_the_latents_and_one_rotated_key_per_token(rope):
    torch.manual_seed(3)
    module = MultiHeadLatentAttention(8, 2, 5, rope=RotaryEmbedding(2) if rope else None).double()
    x = torch.randn(3, 4, 8, dtype=torch.float64)
    cache = LatentCache()
    module(x[:, :1], cache=cache)
    module(x[:, 1:], cache=cache)
    torch.testing.assert_close(cache.latents, x @ module.kv_down.weight.T)
    if rope:
        torch.testing.assert_close(cache.rope_keys, rotated(x @ module.k_rope.weight.T, 10000.0, "interleaved"))
    else:
        assert cache.rope_keys.shape == (3, 4, 0)
    # d_latent + d_rope numbers per token and layer, here in float64.
    assert cache.nbytes == 3 * 4 * (5 + module.d_rope) * 8
    assert LatentCache().nbytes == 0


def test_deepseek_v2s_sizes_cache_576_numbers_per_token_against_32768():
    """DeepSeek-V2 (h 128, d_head 128, d_latent 512, d_rope 64): measured on the cache object, on the meta device."""
    module = MultiHeadLatentAttention(
        5120, 128, 512, d_head=128, q_latent=1536, rope=RotaryEmbedding(64, device="meta"), device="meta"
    )
    cache = LatentCache()
    module(torch.empty(1, 3, 5120, device="meta"), cache=cache)
    assert cache.nbytes // (3 * 4) == 512 + 64 == 576
    assert 2 * module.num_heads * module.d_head == 32768


@pytest.mark.parametrize("absorbed", [False, True])
def test_only_the_materialised_path_builds_per_head_keys_and_values(absorbed):
    module = MultiHeadLatentAttention(8, 2, 4, rope=RotaryEmbedding(2))
    built = []
    for name in ("k_up", "v_up"):
        getattr(module, name).register_forward_hook(
            lambda _module, _args, out, name=name: built.append((name, out.shape))
        )
    cache = LatentCache()
    module(torch.randn(1, 3, 8), cache=cache, absorbed=absorbed)
    module(torch.randn(1, 1, 8), cache=cache, absorbed=absorbed)
    # Materialised, every step rebuilds the keys and values of every token held: (batch, past + seq, heads * d_head).
    assert built == (
        [] if absorbed else [("k_up", (1, 3, 8)), ("v_up", (1, 3, 8)), ("k_up", (1, 4, 8)), ("v_up", (1, 4, 8))]
    )


def test_a_different_d_head_needs_no_divisible_d_model():
    module = MultiHeadLatentAttention(10, 3, 4, d_head=2)
    assert module(torch.randn(1, 2, 10)).shape == (1, 2, 10)


def raises(kind: type[Exception], match: str):
    return pytest.raises(kind, match=match)


def test_bad_arguments_name_what_was_expected():
    with raises(ValueError, "num_heads must divide d_model: .* got d_model=10, num_heads=3"):
        MultiHeadLatentAttention(10, 3, 4)
    with raises(TypeError, r"rope must be None or a RotaryEmbedding of d_rope, .* rope=RotaryEmbedding\(2\), got bool"):
        MultiHeadLatentAttention(16, 4, 4, rope=True)
    with raises(TypeError, r"e\.g\. rope=RotaryEmbedding\(8\), got int"):  # d_head 16: d_rope = d_head / 2
        MultiHeadLatentAttention(64, 4, 4, rope=8)
    with raises(ValueError, "d_latent"):
        MultiHeadLatentAttention(16, 4, 0)
    with raises(ValueError, "q_latent"):
        MultiHeadLatentAttention(16, 4, 4, q_latent=0)
    with raises(ValueError, "d_head"):
        MultiHeadLatentAttention(16, 4, 4, d_head=0)


def test_bad_calls_name_the_argument_and_leave_the_cache_as_it_was():
    torch.manual_seed(0)
    module = MultiHeadLatentAttention(8, 2, 4, rope=RotaryEmbedding(2))
    with raises(ValueError, r"x must have last dimension d_model=8, got shape \(1, 3, 7\)"):
        module(torch.randn(1, 3, 7))
    with raises(TypeError, "x must have the module's dtype torch.float32, got torch.float64"):
        module(torch.randn(1, 3, 8, dtype=torch.float64))
    with raises(TypeError, "cache must be a LatentCache or None .* got KVCache"):
        module(torch.randn(1, 3, 8), cache=KVCache())
    cache = LatentCache(capacity=4)
    module(torch.randn(2, 3, 8), cache=cache)
    held = cache.latents.clone()
    with raises(ValueError, "capacity=4 is too small: the cache holds 3 tokens and cannot take 2 more"):
        module(torch.randn(2, 2, 8), cache=cache)
    with raises(ValueError, r"x has batch shape \(1,\) but the cache holds batch shape \(2,\)"):
        module(torch.randn(1, 1, 8), cache=cache)
    with raises(ValueError, r"mask must be broadcastable"):
        module(torch.randn(2, 1, 8), cache=cache, mask=torch.ones(2, 1, 1, 3, dtype=torch.bool))
    other = MultiHeadLatentAttention(8, 2, 5, rope=RotaryEmbedding(2))
    with raises(ValueError, r"cache must hold latents of width 5 for this layer, got cached latents of shape"):
        other(torch.randn(2, 1, 8), cache=cache)
    no_rope = MultiHeadLatentAttention(8, 2, 4)
    with raises(ValueError, r"cache must hold rope_keys of width 0 for this layer"):
        no_rope(torch.randn(2, 1, 8), cache=cache)
    assert cache.length == 3 and torch.equal(cache.latents, held)
    module(torch.randn(2, 1, 8), cache=cache, mask=torch.ones(2, 1, 1, 4, dtype=torch.bool))
    assert cache.length == 4
    single = LatentCache()
    module(torch.randn(2, 1, 8), cache=single)
    with raises(TypeError, r"cache must hold the dtype of x \(torch.float64\), got cached latents of dtype"):
        module.double()(torch.randn(2, 1, 8, dtype=torch.float64), cache=single)
