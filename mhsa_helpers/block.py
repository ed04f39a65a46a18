"""A Transformer block: the place of attention in a model.

Taught in notebook 06, section 7 ("Where attention sits: the Transformer block"). Pre-norm, as in GPT-2 and
nanoGPT: each sub-layer reads a LayerNorm of the residual stream and adds its result back to it::

    x = x + attention(LayerNorm(x))     # tokens exchange information
    x = x + MLP(LayerNorm(x))           # each token computes on its own: d_model -> d_ff -> d_model

The residual additions let every layer refine the stream instead of replacing it (and keep
gradients flowing through deep stacks); the LayerNorms keep the sub-layers' inputs at a steady
scale. Only attention mixes positions: the MLP works on every token separately.

:class:`LlamaBlock` is the same two residual steps as Llama-family models write them (notebook 11
runs a real one): RMSNorm instead of LayerNorm, a gated SwiGLU MLP instead of GELU, no biases,
and attention with grouped key/value heads::

    x = x + attention(RMSNorm(x))
    x = x + W_down (SiLU(x W_gate^T) * (x W_up^T))     # with x = RMSNorm(x)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .checks import expect_divisible, expect_int, expect_number
from .kv_cache import KVCache
from .mha import MultiHeadSelfAttention
from .rope import RotaryEmbedding

__all__ = ["LlamaBlock", "RMSNorm", "SwiGLU", "TransformerBlock"]


class TransformerBlock(nn.Module):
    """Pre-norm block: causal multi-head self-attention with RoPE, then an MLP, each with a residual.

    Args:
        d_model: width of the residual stream.
        num_heads: attention heads (must divide ``d_model``).
        d_ff: hidden width of the MLP (default ``4 * d_model``, as in the original Transformer).
        causal: passed to :class:`~mhsa_helpers.mha.MultiHeadSelfAttention`.
        rope, rope_base: rotate queries and keys with a :class:`~mhsa_helpers.rope.RotaryEmbedding` of that base
            (the settings of notebook 06's ``MyBlock``).
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
        d_head = expect_divisible(
            "d_model", expect_int("d_model", d_model), "num_heads", expect_int("num_heads", num_heads)
        )
        d_ff = 4 * d_model if d_ff is None else expect_int("d_ff", d_ff)
        expect_number("dropout", dropout, 0.0, 1.0, open_high=True)
        super().__init__()
        self.ln_1 = nn.LayerNorm(d_model)
        rotary = RotaryEmbedding(d_head, base=rope_base) if rope else None
        self.attn = MultiHeadSelfAttention(d_model, num_heads, causal=causal, rope=rotary, dropout=dropout)
        self.ln_2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model), nn.Dropout(dropout))

    def forward(
        self, x: torch.Tensor, *, cache: KVCache | None = None, token_positions: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The two residual steps; shapes as in the class docstring."""
        x = x + self.attn(self.ln_1(x), cache=cache, token_positions=token_positions)
        x = x + self.mlp(self.ln_2(x))
        return x


class RMSNorm(nn.Module):
    """Root-mean-square normalisation (Zhang & Sennrich, 2019): ``x / sqrt(mean(x^2) + eps) * weight``.

    LayerNorm without the mean subtraction and without a bias. ``x (..., d_model)`` -> same shape;
    computed in float32 whatever ``x``'s dtype, as Llama's reference code does.
    """

    def __init__(self, d_model: int, eps: float = 1e-5, *, device: str | torch.device | None = None) -> None:
        expect_int("d_model", d_model)
        expect_number("eps", eps, 0.0)
        super().__init__()
        self.eps = float(eps)
        self.weight = nn.Parameter(torch.ones(d_model, device=device))

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps:g}"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        out: torch.Tensor = self.weight * normed.to(x.dtype)
        return out


class SwiGLU(nn.Module):
    """The gated MLP of Llama-family models (Shazeer, 2020): ``W_down (SiLU(W_gate x) * W_up x)``.

    ``x (..., d_model)`` -> ``(..., d_model)`` through a hidden width ``d_ff``; no biases.
    """

    def __init__(self, d_model: int, d_ff: int, *, device: str | torch.device | None = None) -> None:
        expect_int("d_model", d_model)
        expect_int("d_ff", d_ff)
        super().__init__()
        self.gate = nn.Linear(d_model, d_ff, bias=False, device=device)
        self.up = nn.Linear(d_model, d_ff, bias=False, device=device)
        self.down = nn.Linear(d_ff, d_model, bias=False, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.down(F.silu(self.gate(x)) * self.up(x))
        return out


class LlamaBlock(nn.Module):
    """Pre-norm block as Llama-family models write it: RMSNorm → causal attention with RoPE and
    grouped key/value heads → residual; RMSNorm → SwiGLU → residual. No biases anywhere.

    Args:
        d_model: width of the residual stream.
        num_heads, num_kv_heads: query heads and key/value heads (grouped-query attention, notebook 08).
        d_ff: hidden width of the SwiGLU MLP.
        rope: the :class:`~mhsa_helpers.rope.RotaryEmbedding` the attention rotates with (a model passes one
            to all its layers); by default one of the block's own, of ``d_model // num_heads``.
        eps: the RMSNorms' epsilon.
        device: where the parameters live (``"meta"``: shapes only, for a loader that assigns them).

    Call: ``block(x, cache=None, token_positions=None, need_weights=False)`` with
    ``x (batch, seq, d_model)`` returns ``(batch, seq, d_model)``, or with ``need_weights`` also the
    attention weights ``(batch, heads, seq, past + seq)``.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        *,
        num_kv_heads: int | None = None,
        d_ff: int,
        rope: RotaryEmbedding | None = None,
        eps: float = 1e-5,
        device: str | torch.device | None = None,
    ) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(d_model, eps, device=device)
        self.attn = MultiHeadSelfAttention(
            d_model,
            num_heads,
            num_kv_heads=num_kv_heads,
            causal=True,
            qkv_bias=False,
            out_bias=False,
            rope=RotaryEmbedding(d_model // num_heads, device=device) if rope is None else rope,
            device=device,
        )
        self.mlp_norm = RMSNorm(d_model, eps, device=device)
        self.mlp = SwiGLU(d_model, d_ff, device=device)

    def forward(
        self,
        x: torch.Tensor,
        *,
        cache: KVCache | None = None,
        token_positions: torch.Tensor | None = None,
        need_weights: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """The two residual steps; shapes as in the class docstring."""
        attended = self.attn(self.attn_norm(x), cache=cache, token_positions=token_positions, need_weights=need_weights)
        weights = None
        if need_weights:
            attended, weights = attended
        x = x + attended
        x = x + self.mlp(self.mlp_norm(x))
        return x if weights is None else (x, weights)
