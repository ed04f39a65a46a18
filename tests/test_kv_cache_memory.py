"""The KV-cache size calculator of notebook 08 (mhsa_helpers.kv_cache_memory).

Expected sizes are computed here independently: by hand for tiny configurations, and by
allocating the very tensors a cache holds and adding up their bytes."""

from __future__ import annotations

import pytest
import torch

import mhsa_helpers as mh
from mhsa_helpers.kv_cache_memory import (
    DEEPSEEK_V2,
    PRESETS,
    LatentConfig,
    ModelConfig,
    bytes_per_element,
    format_bytes,
    kv_cache_bytes,
    kv_cache_bytes_for,
    kv_cache_variants,
    latent_cache_bytes,
)


def allocated_cache_bytes(num_layers, num_kv_heads, head_dim, tokens, batch, dtype):
    """Build a cache the way a decoder does: one K and one V tensor per layer; count their bytes."""
    total = 0
    for _ in range(num_layers):
        keys = torch.zeros(batch, num_kv_heads, tokens, head_dim, dtype=dtype)
        values = torch.zeros(batch, num_kv_heads, tokens, head_dim, dtype=dtype)
        total += keys.nelement() * keys.element_size() + values.nelement() * values.element_size()
    return total


def test_tiny_config_by_hand():
    # 2 (K, V) * 2 layers * 3 kv heads * 4 dims * 5 tokens * 2 sequences * 2 bytes = 960
    assert kv_cache_bytes(num_layers=2, num_kv_heads=3, head_dim=4, tokens=5, batch=2, bytes_per_element=2) == 960
    # one token, one layer, one head of size 1, float32: a key and a value of 4 bytes each
    assert kv_cache_bytes(num_layers=1, num_kv_heads=1, head_dim=1, tokens=1, bytes_per_element=4) == 8
    assert kv_cache_bytes(num_layers=3, num_kv_heads=2, head_dim=8, tokens=0) == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize(("layers", "kv_heads", "head_dim", "tokens", "batch"), [(2, 3, 4, 5, 2), (1, 1, 8, 17, 1)])
def test_matches_allocated_tensors(dtype, layers, kv_heads, head_dim, tokens, batch):
    config = ModelConfig("tiny", layers, kv_heads * 2, kv_heads, head_dim)
    expected = allocated_cache_bytes(layers, kv_heads, head_dim, tokens, batch, dtype)
    assert kv_cache_bytes_for(config, tokens=tokens, batch=batch, dtype=dtype) == expected


def test_dtype_names():
    assert bytes_per_element("float32") == 4
    assert bytes_per_element("float16") == 2
    assert bytes_per_element("bfloat16") == 2
    assert bytes_per_element("int8") == 1
    assert bytes_per_element(torch.float64) == 8
    config = ModelConfig("tiny", 1, 2, 1, 4)
    # 2 * 1 layer * 1 kv head * 4 dims * 3 tokens = 24 numbers
    assert kv_cache_bytes_for(config, tokens=3, dtype="float32") == 24 * 4
    assert kv_cache_bytes_for(config, tokens=3, dtype="bfloat16") == 24 * 2


def test_presets_hold_the_published_numbers():
    # (layers, query heads, kv heads, head size) as published; see the sources in memory.py.
    published = {
        "GPT-2 small": (12, 12, 12, 768 // 12),
        "Llama-2-7B": (32, 32, 32, 4096 // 32),
        "Llama-2-70B": (80, 64, 8, 8192 // 64),
        "Llama-3-8B": (32, 32, 8, 4096 // 32),
        "Mistral-7B-v0.1": (32, 32, 8, 4096 // 32),
    }
    assert set(PRESETS) == set(published)
    for name, numbers in published.items():
        preset = PRESETS[name]
        assert (preset.num_layers, preset.num_heads, preset.num_kv_heads, preset.head_dim) == numbers
        assert preset.name == name
        assert preset.source, f"{name} names no source"
    assert PRESETS["Llama-2-7B"].attention == "MHA"
    assert PRESETS["Llama-3-8B"].attention == "GQA"


def test_llama_2_7b_half_a_mebibyte_per_token():
    # The often quoted figure: 2 * 32 layers * 32 heads * 128 dims * 2 bytes = 524288 bytes per token.
    per_token = 2 * 32 * 32 * 128 * 2
    assert per_token == 2**19
    assert kv_cache_bytes_for("Llama-2-7B", tokens=1, dtype="float16") == per_token
    assert kv_cache_bytes_for("Llama-2-7B", tokens=4096, batch=3, dtype="float16") == per_token * 4096 * 3
    # Llama 3 8B has the same layers and head size but 8 kv heads instead of 32: a quarter of the cache.
    assert kv_cache_bytes_for("Llama-3-8B", tokens=4096, dtype="float16") * 4 == per_token * 4096


def test_mha_gqa_mqa_of_the_same_model():
    config = ModelConfig("toy", num_layers=2, num_heads=8, num_kv_heads=2, head_dim=4)
    variants = kv_cache_variants(config, tokens=10, dtype="float32")
    assert [v.name for v in variants] == ["MHA", "GQA", "MQA"]
    assert [v.num_kv_heads for v in variants] == [8, 2, 1]
    # 2 * 2 layers * kv_heads * 4 dims * 10 tokens * 4 bytes = 640 bytes per kv head
    assert [v.bytes for v in variants] == [640 * 8, 640 * 2, 640 * 1]


def test_variants_of_an_mha_model_take_a_group_count():
    variants = kv_cache_variants("Llama-2-7B", tokens=1, dtype="float16", gqa_kv_heads=8)
    assert [v.num_kv_heads for v in variants] == [32, 8, 1]
    assert [v.bytes for v in variants] == [2 * 32 * k * 128 * 2 for k in (32, 8, 1)]


def test_format_bytes():
    assert format_bytes(0) == "0 bytes"
    assert format_bytes(1023) == "1023 bytes"
    assert format_bytes(1536) == "1.50 KiB"
    assert format_bytes(2**31) == "2.00 GiB"
    assert format_bytes(3 * 2**40) == "3.00 TiB"


def test_bad_input_names_the_setting():
    with pytest.raises(ValueError, match="num_kv_heads must divide num_heads"):
        ModelConfig("bad", 2, 8, 3, 4)
    with pytest.raises(ValueError, match="num_kv_heads must be <= num_heads"):
        ModelConfig("bad", 2, 4, 8, 4)
    with pytest.raises(ValueError, match="num_layers must be >= 1"):
        ModelConfig("bad", 0, 4, 4, 4)
    with pytest.raises(TypeError, match="head_dim must be an int"):
        ModelConfig("bad", 2, 4, 4, 4.0)
    with pytest.raises(ValueError, match="tokens must be >= 0"):
        kv_cache_bytes(num_layers=1, num_kv_heads=1, head_dim=1, tokens=-1)
    with pytest.raises(ValueError, match="batch must be >= 1"):
        kv_cache_bytes(num_layers=1, num_kv_heads=1, head_dim=1, tokens=1, batch=0)
    with pytest.raises(TypeError, match="tokens must be an int"):
        kv_cache_bytes(num_layers=1, num_kv_heads=1, head_dim=1, tokens=2.5)
    with pytest.raises(ValueError, match="dtype must be one of"):
        kv_cache_bytes_for("Llama-3-8B", tokens=1, dtype="fp16")
    with pytest.raises(ValueError, match="config must be one of"):
        kv_cache_bytes_for("Llama-9-1B", tokens=1)
    with pytest.raises(ValueError, match="gqa_kv_heads must divide num_heads"):
        kv_cache_variants("Llama-2-7B", tokens=1, gqa_kv_heads=5)
    with pytest.raises(ValueError, match="gqa_kv_heads must be <= num_heads"):
        kv_cache_variants("GPT-2 small", tokens=1, gqa_kv_heads=24)
    with pytest.raises(ValueError, match="n must be >= 0"):
        format_bytes(-1)


def test_latent_cache_by_hand_and_from_a_real_cache():
    # 3 layers * (5 + 2) numbers * 4 tokens * 2 sequences * 4 bytes = 672: no factor 2, no heads
    assert latent_cache_bytes(num_layers=3, d_latent=5, d_rope=2, tokens=4, batch=2, bytes_per_element=4) == 672
    assert latent_cache_bytes(num_layers=1, d_latent=8, d_rope=0, tokens=1, bytes_per_element=1) == 8
    layer = mh.MultiHeadLatentAttention(16, 4, 5, rope=mh.RotaryEmbedding(2))
    cache = mh.LatentCache()
    layer(torch.randn(2, 4, 16), cache=cache)
    assert (
        latent_cache_bytes(num_layers=1, d_latent=5, d_rope=2, tokens=4, batch=2, bytes_per_element=4) == cache.nbytes
    )


def test_deepseek_v2_caches_576_numbers_per_token_and_layer_against_mhas_32768():
    per_token = latent_cache_bytes(
        num_layers=DEEPSEEK_V2.num_layers,
        d_latent=DEEPSEEK_V2.d_latent,
        d_rope=DEEPSEEK_V2.d_rope,
        tokens=1,
        bytes_per_element=1,
    )
    assert per_token == 60 * 576
    mha = kv_cache_bytes(
        num_layers=60, num_kv_heads=DEEPSEEK_V2.num_heads, head_dim=DEEPSEEK_V2.head_dim, tokens=1, bytes_per_element=1
    )
    assert mha == 60 * 32768
    assert (DEEPSEEK_V2.d_latent + DEEPSEEK_V2.d_rope) / (2 * DEEPSEEK_V2.head_dim) == 2.25  # "GQA with 2.25 groups"


def test_latent_settings_are_checked_by_name():
    with pytest.raises(TypeError, match="d_latent must be an int"):
        latent_cache_bytes(num_layers=1, d_latent=2.0, d_rope=0, tokens=1)
    with pytest.raises(ValueError, match="d_rope must be"):
        latent_cache_bytes(num_layers=1, d_latent=2, d_rope=-1, tokens=1)
    with pytest.raises(ValueError, match="d_latent must be"):
        LatentConfig("x", num_layers=1, num_heads=1, head_dim=1, d_latent=0, d_rope=0)
