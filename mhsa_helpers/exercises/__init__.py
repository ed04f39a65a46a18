"""Exercise checkers for the notebooks: each names the misconception a wrong answer matches.

The machinery is in :mod:`.core` (exported here); the checkers, one module per notebook:

* ``qkv`` — 01 Q, K, V by hand: ``check_paper_projection``, ``check_scores``, ``check_linear_projection``
* ``scaled_attention`` — 02 scaled dot-product attention: ``check_softmax``, ``check_attention``
* ``masking`` — 03 causal masking: ``check_causal_mask``, ``check_masked_attention``, ``check_masked_softmax``
* ``heads`` — 04 multi-head attention: ``check_split_heads``, ``check_merge_heads``,
  ``check_multi_head_attention``, ``check_stacked_to_per_head``
* ``rope`` — 05 rotary position embeddings: ``check_rope_frequencies``, ``check_apply_rope``,
  ``check_rope_attention``, ``check_interleaved_to_half_split``
* ``decoding`` — 06 causal MHSA with RoPE: ``check_decoding_mask``, ``check_attend_with_cache``,
  ``check_causal_mhsa_rope``
"""

from .core import Case, CheckResult, Misconception, check_function, random_tensor, random_tensors

__all__ = ["Case", "CheckResult", "Misconception", "check_function", "random_tensor", "random_tensors"]
