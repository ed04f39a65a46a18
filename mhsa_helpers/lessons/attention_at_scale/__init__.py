"""Notebook 08, attention at scale (online softmax and tiled attention, GQA/MQA, the KV cache's
memory): its KV-cache size calculator and model presets (``memory``).

The core math (online softmax, tiled attention) lives in :mod:`mhsa_helpers.tiled_attention`.
"""

from .memory import (
    BYTES_PER_ELEMENT,
    PRESETS,
    CacheVariant,
    ModelConfig,
    bytes_per_element,
    format_bytes,
    kv_cache_bytes,
    kv_cache_bytes_for,
    kv_cache_variants,
)

__all__ = [
    "BYTES_PER_ELEMENT",
    "PRESETS",
    "CacheVariant",
    "ModelConfig",
    "bytes_per_element",
    "format_bytes",
    "kv_cache_bytes",
    "kv_cache_bytes_for",
    "kv_cache_variants",
]
