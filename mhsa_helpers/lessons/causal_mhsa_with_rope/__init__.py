"""Notebook 06, causal multi-head self-attention with RoPE and a KV cache: its exercise checkers (``exercises``)
its explorer (``explorer``) and its diagram (``diagrams``)."""

from ...teaching.heads_explorer import HEADS_SENTENCE, INPUT_SCALE, MODEL_SEED
from ...teaching.modules import copy_package_weights
from .diagrams import kv_cache_diagram, transformer_block_diagram
from .exercises import (
    check_attend_with_cache,
    check_decoding_order,
    check_kv_cache,
    check_mask_prediction,
    check_my_block,
    check_my_causal_self_attention,
    check_static_cache,
    decoding_order_exercise,
)
from .explorer import mhsa_explorer
from .recall import check_recall

__all__ = [
    "HEADS_SENTENCE",
    "INPUT_SCALE",
    "MODEL_SEED",
    "check_attend_with_cache",
    "check_decoding_order",
    "check_kv_cache",
    "check_mask_prediction",
    "check_my_block",
    "check_my_causal_self_attention",
    "check_recall",
    "check_static_cache",
    "copy_package_weights",
    "decoding_order_exercise",
    "kv_cache_diagram",
    "mhsa_explorer",
    "transformer_block_diagram",
]
