"""mhsa_helpers — the implementation behind "Attention, step by step".

Small modules, one idea each:

* :mod:`~mhsa_helpers.softmax` — the numerically stable softmax;
* :mod:`~mhsa_helpers.attention` — scaled dot-product attention;
* :mod:`~mhsa_helpers.masking` — causal and padding masks, two ways to apply them;
* :mod:`~mhsa_helpers.heads` — splitting into heads, per-head and fused weight layouts;
* :mod:`~mhsa_helpers.rope` — rotary position embeddings;
* :mod:`~mhsa_helpers.kv_cache` — the key/value cache for incremental decoding;
* :mod:`~mhsa_helpers.mha` — the multi-head self-attention module and its loaders;
* :mod:`~mhsa_helpers.examples` — the toy sentences and matrices of the seed documents;
* :mod:`~mhsa_helpers.devices` — picking the GPU when there is one;
* :mod:`~mhsa_helpers.plots` and :mod:`~mhsa_helpers.explorers` — the notebooks' pictures and sliders;
* :mod:`~mhsa_helpers.exercises` — checkers that name the misconception behind a wrong answer;
* :mod:`~mhsa_helpers.benchmarking` — the implementations and timers behind ``benchmarks/``.

``plots``, ``explorers``, ``exercises`` and ``benchmarking`` are imported on demand
(``from mhsa_helpers import explorers``), so ``import mhsa_helpers`` stays light.
"""

from . import examples
from .attention import attention_scores, scaled_dot_product_attention
from .devices import default_device
from .heads import (
    fused_qkv_per_head_to_stacked,
    fused_qkv_stacked_to_per_head,
    merge_heads,
    split_heads,
    stack_head_weights,
    unstack_head_weights,
)
from .kv_cache import KVCache
from .masking import (
    causal_mask,
    combine_masks,
    masked_softmax_neg_inf,
    masked_softmax_renormalize,
    padding_mask,
)
from .mha import MultiHeadSelfAttention, multi_head_self_attention
from .rope import RotaryEmbedding, apply_rotary, permute_rope_weight, rope_frequencies, rope_permutation
from .softmax import softmax

__version__ = "0.1.0"

__all__ = [
    "KVCache",
    "MultiHeadSelfAttention",
    "RotaryEmbedding",
    "apply_rotary",
    "attention_scores",
    "causal_mask",
    "combine_masks",
    "default_device",
    "fused_qkv_per_head_to_stacked",
    "fused_qkv_stacked_to_per_head",
    "masked_softmax_neg_inf",
    "masked_softmax_renormalize",
    "merge_heads",
    "multi_head_self_attention",
    "padding_mask",
    "permute_rope_weight",
    "rope_frequencies",
    "rope_permutation",
    "scaled_dot_product_attention",
    "softmax",
    "split_heads",
    "stack_head_weights",
    "unstack_head_weights",
]
