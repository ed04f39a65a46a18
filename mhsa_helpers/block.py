"""A Transformer block: the place of attention in a model.

Taught in notebook 06, section 6 ("The block around attention"). Pre-norm, as in GPT-2 and
nanoGPT: each sub-layer reads a LayerNorm of the residual stream and adds its result back to it::

    x = x + attention(LayerNorm(x))     # tokens exchange information
    x = x + MLP(LayerNorm(x))           # each token computes on its own: d_model -> d_ff -> d_model

The residual additions let every layer refine the stream instead of replacing it (and keep
gradients flowing through deep stacks); the LayerNorms keep the sub-layers' inputs at a steady
scale. Only attention mixes positions: the MLP works on every token separately.
"""

from __future__ import annotations

import torch
from torch import nn

from . import checks
from .kv_cache import KVCache
from .mha import MultiHeadSelfAttention

__all__ = ["TransformerBlock"]


class TransformerBlock(nn.Module):
    """Pre-norm block: causal multi-head self-attention with RoPE, then an MLP, each with a residual.

    Args:
        d_model: width of the residual stream.
        num_heads: attention heads (must divide ``d_model``).
        d_ff: hidden width of the MLP (default ``4 * d_model``, as in the original Transformer).
        causal, rope, rope_base: passed to :class:`~mhsa_helpers.mha.MultiHeadSelfAttention`.
        dropout: on the attention weights and on the MLP's output.

    Call: ``block(x, cache=None, token_positions=None)`` with ``x (batch, seq, d_model)`` returns
    ``(batch, seq, d_model)``; ``cache`` and ``token_positions`` go to the attention, so a block
    decodes token by token exactly like its attention layer.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        *,
        d_ff: int | None = None,
        causal: bool = True,
        rope: bool = True,
        rope_base: float = 10000.0,
        dropout: float = 0.0,
    ) -> None:
        checks.transformer_block_args(d_model, num_heads, d_ff=d_ff, dropout=dropout)
        super().__init__()
        d_ff = 4 * d_model if d_ff is None else d_ff
        self.ln_1 = nn.LayerNorm(d_model)
        self.attn = MultiHeadSelfAttention(
            d_model, num_heads, causal=causal, rope=rope, rope_base=rope_base, dropout=dropout
        )
        self.ln_2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model), nn.Dropout(dropout))

    def forward(
        self, x: torch.Tensor, *, cache: KVCache | None = None, token_positions: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The two residual steps; shapes as in the class docstring."""
        x = x + self.attn(self.ln_1(x), cache=cache, token_positions=token_positions)
        x = x + self.mlp(self.ln_2(x))
        return x
