"""The real model with the learner's attention in every layer (notebook 11, "your module runs it").

Notebook 06 ends with the learner's ``MyCausalSelfAttention(d_model, num_heads, *, d_in=None,
bias=True, rope_base=10000.0)``: four ``nn.Linear`` (``w_q``, ``w_k``, ``w_v``, ``w_o``), RoPE on
interleaved pairs, and ``forward(x, cache=None, need_weights=False)``. It has as many key/value heads
as query heads. SmolLM2 has 9 query heads but only 3 key/value heads (grouped-query attention,
notebook 08): query heads 0-2 read key/value head 0, 3-5 head 1, 6-8 head 2. Repeating each key/value
head's rows of ``W_K`` and ``W_V`` for the query heads it serves gives an ordinary multi-head module
that computes exactly the same thing::

    W_K (3 * 64, 576)  ->  rows of head 0, head 0, head 0, head 1, head 1, head 1, head 2, ...  (9 * 64, 576)

GQA *is* multi-head attention with repeated key/value heads; it only stores (and caches) fewer.
:func:`copy_gqa_weights` does that for one layer and :func:`with_attention` for the whole model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import torch
from torch import nn

from ...block import LlamaBlock
from ...kv_cache import KVCache
from ...mha import MultiHeadSelfAttention
from ...real_model import CausalLM
from ...teaching.modules import copy_gqa_weights, projection

__all__ = ["YourAttention", "copy_gqa_weights", "with_attention"]


class YourAttention(nn.Module):
    """A block's attention slot holding the learner's module: a ``LlamaBlock`` calls its attention
    with ``token_positions`` too, which notebook 06's ``forward(x, cache=None, need_weights=False)``
    does not take; this passes the rest on. ``module`` is the learner's module; ``out_proj`` is its
    ``w_o``, so that :func:`~.tools.ablate_heads` zeroes heads in it as in the package's."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    @property
    def out_proj(self) -> nn.Module:
        return projection(self.module, "w_o")

    def forward(
        self,
        x: torch.Tensor,
        *,
        cache: KVCache | None = None,
        token_positions: torch.Tensor | None = None,
        need_weights: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """``x (batch, seq, d_model)`` -> the learner's ``module(x, cache=cache, need_weights=...)``."""
        if token_positions is not None:
            raise ValueError("token_positions is not part of notebook 06's contract: the learner's module counts "
                             "positions from its cache (cache.length + 0 .. seq - 1)")  # fmt: skip
        return cast(
            "torch.Tensor | tuple[torch.Tensor, torch.Tensor]", self.module(x, cache=cache, need_weights=need_weights)
        )


def with_attention(model: CausalLM, attention: Callable[..., nn.Module]) -> CausalLM:
    """A model that computes with ``attention`` in every layer: ``model``'s embedding, norms and MLPs
    (shared, not copied) and, in each block, ``attention(d_model, num_heads, bias=False,
    rope_base=...)`` holding that block's weights (:func:`copy_gqa_weights`). ``model`` is unchanged.

    ``attention`` is notebook 06's ``MyCausalSelfAttention`` (or any class with its signature and
    ``w_q``, ``w_k``, ``w_v``, ``w_o``). Its cache holds every query head's keys: ``model.new_cache()``
    works as it is, at 3 times the memory of the grouped one.
    """
    if not isinstance(model, CausalLM):
        raise TypeError(f"model must be a CausalLM (load_model()), got {type(model).__name__}")
    if not callable(attention) or isinstance(attention, nn.Module):
        raise TypeError(
            "attention must be a class such as MyCausalSelfAttention (called once per layer), "
            f"got {type(attention).__name__}"
        )
    config = model.config
    # Shapes only: every part of the shell is replaced below, by model's own or by the learner's modules.
    swapped = CausalLM(config, device="meta")
    swapped.embed, swapped.norm, swapped.lm_head = model.embed, model.norm, model.lm_head
    device = model.embed.weight.device
    for theirs_block, block in zip(model.blocks, swapped.blocks, strict=True):
        theirs_block, block = cast(LlamaBlock, theirs_block), cast(LlamaBlock, block)
        mine = attention(config.d_model, config.num_heads, bias=False, rope_base=config.rope_base)
        if not isinstance(mine, nn.Module):
            raise TypeError(f"attention(...) must return an nn.Module, got {type(mine).__name__}")
        copy_gqa_weights(mine.to(device), theirs_block.attn)
        block.attn_norm, block.mlp_norm, block.mlp = theirs_block.attn_norm, theirs_block.mlp_norm, theirs_block.mlp
        block.attn = cast(MultiHeadSelfAttention, YourAttention(mine))
    return swapped.eval()
