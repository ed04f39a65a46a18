"""mhsa_helpers — the implementation behind "Attention, step by step".

Small modules, one idea each, in the order of the notebooks:

* :mod:`~mhsa_helpers.softmax` — the numerically stable softmax (notebook 02);
* :mod:`~mhsa_helpers.attention` — scaled dot-product attention (notebooks 01 and 02);
* :mod:`~mhsa_helpers.masking` — causal and padding masks, two ways to apply them (notebook 03);
* :mod:`~mhsa_helpers.heads` — splitting into heads and merging them back (notebook 04), sharing
  key/value heads (notebook 08);
* :mod:`~mhsa_helpers.positions` — absolute position embeddings, sinusoidal and learned (notebook 05);
* :mod:`~mhsa_helpers.rope` — rotary position embeddings (notebook 05), and stretching them (notebook 09);
* :mod:`~mhsa_helpers.kv_cache` — the key/value cache for incremental decoding (notebook 06), preallocated
  (notebook 08) and with a sliding window (notebook 09);
* :mod:`~mhsa_helpers.mha` — the multi-head self-attention module and its functional form (notebook 06);
* :mod:`~mhsa_helpers.block` — the Transformer block around attention: LayerNorm, residual, MLP (notebook 06);
* :mod:`~mhsa_helpers.tiled_attention` — the online softmax and tiled attention (notebook 08);
* :mod:`~mhsa_helpers.kv_cache_memory` — what the KV cache costs, MHA/GQA/MQA (notebook 08);
* :mod:`~mhsa_helpers.long_context` — sliding windows, ALiBi, stretching RoPE (notebook 09);
* :mod:`~mhsa_helpers.weight_layouts` — loaders, per-head/stacked/fused weights, the RoPE weight permutation;
* :mod:`~mhsa_helpers.checks` — the ``expect_*`` words each public function checks its arguments with;
* :mod:`~mhsa_helpers.compat` — what PyTorch's releases do differently, made the same;
* :mod:`~mhsa_helpers.examples` — the toy sentences and matrices of the series;
* :mod:`~mhsa_helpers.devices` — picking the GPU when there is one.

The notebooks' checkers, explorers and figures live in :mod:`mhsa_helpers.teaching` and
:mod:`mhsa_helpers.lessons`, imported on demand, so ``import mhsa_helpers`` stays light.
"""

from . import examples, weight_layouts
from .attention import attention_scores, scaled_dot_product_attention
from .block import TransformerBlock
from .devices import default_device
from .heads import merge_heads, repeat_kv, split_heads
from .kv_cache import KVCache, SlidingWindowCache
from .masking import (
    causal_mask,
    combine_masks,
    masked_softmax_neg_inf,
    masked_softmax_renormalize,
    padding_mask,
    sliding_window_mask,
)
from .mha import AttentionWeights, MultiHeadSelfAttention, multi_head_self_attention
from .mla import LatentCache, MultiHeadLatentAttention
from .positions import sinusoidal_positions
from .rope import RotaryEmbedding, apply_rotary, rope_frequencies
from .softmax import softmax
from .weight_layouts import (
    fused_qkv_per_head_to_stacked,
    fused_qkv_stacked_to_per_head,
    permute_rope_weight,
    rope_permutation,
    stack_head_weights,
    unstack_head_weights,
)

__version__ = "0.1.0"

__all__ = [
    "AttentionWeights",
    "KVCache",
    "LatentCache",
    "MultiHeadLatentAttention",
    "MultiHeadSelfAttention",
    "RotaryEmbedding",
    "SlidingWindowCache",
    "TransformerBlock",
    "apply_rotary",
    "attention_scores",
    "causal_mask",
    "combine_masks",
    "default_device",
    "examples",
    "fused_qkv_per_head_to_stacked",
    "fused_qkv_stacked_to_per_head",
    "masked_softmax_neg_inf",
    "masked_softmax_renormalize",
    "merge_heads",
    "multi_head_self_attention",
    "padding_mask",
    "permute_rope_weight",
    "repeat_kv",
    "rope_frequencies",
    "rope_permutation",
    "scaled_dot_product_attention",
    "sinusoidal_positions",
    "sliding_window_mask",
    "softmax",
    "split_heads",
    "stack_head_weights",
    "unstack_head_weights",
    "weight_layouts",
]
