"""Every core entry point runs with all its inputs and modules on the ``meta`` device.

``meta`` tensors have shapes and dtypes but no data, and PyTorch refuses to mix them with CPU
tensors: a function that makes a tensor on the CPU (a mask, a range of positions, a table of
angles) while its inputs live elsewhere fails here, as it would on a GPU, where no CPU test sees it.
Each call's result must be on ``meta`` too.
"""

from __future__ import annotations

import pytest
import torch

import mhsa_helpers as mh
from mhsa_helpers import attention, long_context, masking, rope, tiled_attention, weight_layouts
from mhsa_helpers.block import LlamaBlock, RMSNorm, SwiGLU, TransformerBlock
from mhsa_helpers.kv_cache import KVCache, SlidingWindowCache

META = torch.device("meta")


def meta(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.empty(*shape, device=META, dtype=dtype)


def positions(n: int) -> torch.Tensor:
    return torch.arange(n, device=META)


def decode(cache_factory, **options):
    """Two steps through a module with a cache, on meta: the prompt, then one token."""
    module = mh.MultiHeadSelfAttention(
        8, 2, causal=True, rope=mh.RotaryEmbedding(4, device=META), device=META, **options
    )
    cache = cache_factory()
    module(meta(1, 3, 8), cache=cache)
    return module(meta(1, 1, 8), cache=cache)


def sliding_step(rope_positions):
    module = mh.MultiHeadSelfAttention(8, 2, causal=True, rope=mh.RotaryEmbedding(4, device=META), device=META)
    cache = SlidingWindowCache(2, 1, rope_positions=rope_positions)
    module(meta(1, 3, 8), cache=cache, mask=cache.mask_for(3, device=META))
    return module(meta(1, 2, 8), cache=cache, mask=cache.mask_for(2))


ENTRY_POINTS = {
    "softmax": lambda: mh.softmax(meta(2, 3)),
    "attention_scores": lambda: mh.attention_scores(meta(2, 3, 4), meta(2, 5, 4)),
    "sdpa-fused-causal-cached": lambda: mh.scaled_dot_product_attention(
        meta(2, 2, 4), meta(2, 5, 4), meta(2, 5, 4), is_causal=True
    ),
    "sdpa-mask-weights": lambda: mh.scaled_dot_product_attention(
        meta(2, 3, 4), meta(2, 3, 4), meta(2, 3, 4), meta(3, 3, dtype=torch.bool), is_causal=True, need_weights=True
    ),
    "sdpa-bias-dropout": lambda: attention.attend(
        meta(1, 8, 3, 4),
        meta(1, 8, 3, 4),
        meta(1, 8, 3, 4),
        bias=long_context.alibi_bias(8, 3, device=META),
        dropout_p=0.1,
        is_causal=True,
    )[0],
    "causal_mask": lambda: mh.causal_mask(3, 5, device=META),
    "padding_mask": lambda: mh.padding_mask(torch.tensor([2, 3], device=META), 4),
    "combine_masks": lambda: mh.combine_masks(meta(3, 3, dtype=torch.bool), mh.causal_mask(3, device=META)),
    "masked_softmax_neg_inf": lambda: mh.masked_softmax_neg_inf(meta(3, 3), mh.causal_mask(3, device=META)),
    "masked_softmax_renormalize": lambda: mh.masked_softmax_renormalize(meta(3, 3), mh.causal_mask(3, device=META)),
    "sliding_window_mask": lambda: mh.sliding_window_mask(3, 5, window=2, sinks=1, device=META),
    "split_heads": lambda: mh.split_heads(meta(2, 3, 8), 2),
    "merge_heads": lambda: mh.merge_heads(meta(2, 2, 3, 4)),
    "repeat_kv": lambda: mh.repeat_kv(meta(2, 2, 3, 4), 2),
    "rope_frequencies": lambda: mh.rope_frequencies(8, device=META),
    "rope_angles": lambda: rope.rope_angles(positions(3), 8)[0],
    "apply_rotary": lambda: mh.apply_rotary(meta(3, 8), meta(3, 4), meta(3, 4)),
    "RotaryEmbedding": lambda: mh.RotaryEmbedding(8, 16, device=META)(meta(2, 3, 8)),
    "RotaryEmbedding-positions": lambda: mh.RotaryEmbedding(8, 16, device=META)(meta(2, 3, 8), positions(3) + 2),
    "RotaryEmbedding-scaled": lambda: mh.RotaryEmbedding(8, 16, scaling=rope.RopeScaling("yarn", 2.0, 8), device=META)(
        meta(3, 8)
    ),
    "sinusoidal_positions": lambda: mh.sinusoidal_positions(3, 8).to(META),
    "alibi_bias": lambda: long_context.alibi_bias(4, 2, 3, device=META),
    "MultiHeadSelfAttention": lambda: mh.MultiHeadSelfAttention(
        8, 2, causal=True, rope=mh.RotaryEmbedding(4, device=META), device=META
    )(meta(2, 3, 8), mask=meta(2, 1, 1, 3, dtype=torch.bool), token_positions=positions(3)),
    "MultiHeadSelfAttention-weights": lambda: mh.MultiHeadSelfAttention(8, 2, num_kv_heads=1, device=META)(
        meta(2, 3, 8), need_weights=True
    )[1],
    "MultiHeadSelfAttention-KVCache": lambda: decode(KVCache),
    "MultiHeadSelfAttention-KVCache-capacity": lambda: decode(lambda: KVCache(capacity=4)),
    "SlidingWindowCache-original": lambda: sliding_step("original"),
    "SlidingWindowCache-cache": lambda: sliding_step("cache"),
    "KVCache.append": lambda: KVCache().append(meta(1, 2, 3, 4), meta(1, 2, 3, 4))[0],
    "multi_head_self_attention": lambda: mh.multi_head_self_attention(
        meta(2, 3, 8),
        mh.AttentionWeights(meta(8, 8), meta(4, 8), meta(4, 8), meta(8, 8), q_bias=meta(8)),
        num_heads=2,
        num_kv_heads=1,
        causal=True,
        rope=mh.RotaryEmbedding(4, 8, device=META),
        mask=meta(3, 3, dtype=torch.bool),
    ),
    "TransformerBlock": lambda: TransformerBlock(8, 2).to(META)(meta(2, 3, 8)),
    "LlamaBlock": lambda: LlamaBlock(8, 2, num_kv_heads=1, d_ff=16, device=META)(meta(2, 3, 8)),
    "RMSNorm": lambda: RMSNorm(8, device=META)(meta(2, 8)),
    "SwiGLU": lambda: SwiGLU(8, 16, device=META)(meta(2, 8)),
    "tiled_attention": lambda: tiled_attention.tiled_attention(
        meta(2, 5, 4), meta(2, 5, 4), meta(2, 5, 4), causal=True, tile_size=2
    ),
    "online_softmax": lambda: tiled_attention.online_softmax(meta(2, 5), 2),
    "stack_head_weights": lambda: mh.stack_head_weights([meta(4, 8), meta(4, 8)]),
    "unstack_head_weights": lambda: mh.unstack_head_weights(meta(8, 8), 2)[0],
    "fused_qkv_stacked_to_per_head": lambda: mh.fused_qkv_stacked_to_per_head(meta(24, 8), 2),
    "fused_qkv_per_head_to_stacked": lambda: mh.fused_qkv_per_head_to_stacked(meta(24), 2),
    "permute_rope_weight": lambda: mh.permute_rope_weight(meta(8, 8), 2, "interleaved", "half_split"),
    "from_fused_qkv": lambda: weight_layouts.from_fused_qkv(
        meta(16, 8), meta(8, 8), num_heads=2, num_kv_heads=1, fused_layout="stacked", qkv_bias=meta(16)
    )(meta(1, 3, 8)),
    "from_head_weights": lambda: weight_layouts.from_head_weights(
        [meta(8, 4)] * 2, [meta(8, 4)] * 2, [meta(8, 4)] * 2, meta(8, 8), layout="in_out", causal=True
    )(meta(1, 3, 8)),
    "masking.expect_seq_k": lambda: masking.causal_mask(2, device=META),
}


@pytest.mark.parametrize("name", sorted(ENTRY_POINTS))
def test_entry_point_runs_on_meta(name):
    result = ENTRY_POINTS[name]()
    outputs = result if isinstance(result, tuple) else (result,)
    for output in outputs:
        assert output.device == META, f"{name} returned a tensor on {output.device}"


def test_mixing_devices_raises_here():
    """What the test relies on: a CPU tensor where a meta one is expected is an error."""
    with pytest.raises((RuntimeError, NotImplementedError, ValueError)):
        _ = meta(3, 3) + torch.ones(3, 3).bool()
    with pytest.raises(ValueError, match="mask must be on the device"):
        mh.scaled_dot_product_attention(meta(3, 4), meta(3, 4), meta(3, 4), mh.causal_mask(3))


def test_a_sliding_window_mask_is_made_where_the_cache_is():
    cache = SlidingWindowCache(2)
    cache.append(meta(1, 3, 4), meta(1, 3, 4))
    assert cache.mask_for(2).device == META
    assert SlidingWindowCache(2).mask_for(2).device == torch.device("cpu")  # nothing held yet: the CPU


@pytest.mark.parametrize(("sink", "gate"), [("learned", "headwise"), ("plus_one", "elementwise")])
def test_the_sink_and_the_gate_are_made_on_the_device_and_in_the_dtype_asked_for(sink, gate):
    module = mh.MultiHeadSelfAttention(8, 2, causal=True, sink=sink, gate=gate, device=META, dtype=torch.float64)
    assert module.sink is not None and module.gate_proj is not None
    made = [module.sink, module.gate_proj.weight, module.gate_proj.bias]
    assert all(t.device == META and t.dtype == torch.float64 for t in made)
    # Three queries take the fused path: its extra key, mask column and causal mask are made where q is.
    assert module(meta(1, 3, 8, dtype=torch.float64)).device == META
