"""Notebook 06, causal multi-head self-attention with RoPE and a KV cache: its exercise checkers (``exercises``)
its explorer (``explorer``) and its diagram (``diagrams``)."""

from ..multi_head.explorer import HEADS_SENTENCE, INPUT_SCALE, MODEL_SEED
from .diagrams import kv_cache_diagram, transformer_block_diagram
from .exercises import check_attend_with_cache, check_causal_mhsa_rope, check_decoding_mask
from .explorer import mhsa_explorer

__all__ = [
    "HEADS_SENTENCE",
    "INPUT_SCALE",
    "MODEL_SEED",
    "check_attend_with_cache",
    "check_causal_mhsa_rope",
    "check_decoding_mask",
    "kv_cache_diagram",
    "mhsa_explorer",
    "transformer_block_diagram",
]
