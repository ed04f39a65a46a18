"""Multi-head self-attention: the module and the same steps as one function.

Taught in notebook 06: the recipe in section 1, assembled from the pieces in section 2, the
functional form and the module in section 3, and decoding with a key/value cache in section 4
(notebook 04, section 5 builds the block without RoPE). One block, end to end, for
``x (batch, seq, d_in)``::

    q, k, v = x @ W_Q^T, x @ W_K^T, x @ W_V^T          # (batch, seq, d_model) each
    q, k, v = split_heads(...)                          # (batch, heads, seq, d_head)
    q, k = rope(q), rope(k)                             # optional; never v
    heads = softmax(q k^T / sqrt(d_head) + mask) v      # (batch, heads, seq, d_head)
    out = merge_heads(heads) @ W_O^T                    # (batch, seq, d_out)

Weights use PyTorch's ``nn.Linear`` layout ``(d_out, d_in)``, applied as ``x @ W^T``. To build
a module from existing weights (per head, fused QKV, ``nn.MultiheadAttention``, the paper's
``E @ W`` layout) use the loaders of :mod:`~mhsa_helpers.weight_layouts`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from . import checks
from .attention import Output, attend
from .heads import merge_heads, repeat_kv, split_heads
from .kv_cache import KVCache
from .rope import RotaryEmbedding, apply_rotary, rope_angles

__all__ = ["MultiHeadSelfAttention", "multi_head_self_attention"]


class MultiHeadSelfAttention(nn.Module):
    """Multi-head self-attention with optional causal mask, RoPE, biases and dropout.

    Args:
        d_model: total attention width, ``num_heads * d_head``.
        num_heads: number of heads; must divide ``d_model``.
        num_kv_heads: number of key/value heads (default ``num_heads``); it must divide
            ``num_heads``, and each key/value head serves ``num_heads // num_kv_heads`` query heads
            (grouped-query attention; 1 is multi-query attention, notebook 08).
        d_in: size of the input features (default ``d_model``).
        d_out: size of the output features (default ``d_model``).
        causal: mask future positions (decoder self-attention).
        qkv_bias, out_bias: learnable biases on the input and output projections.
        dropout: probability of zeroing an attention weight in training mode.
        rope: apply rotary position embeddings to queries and keys.
        rope_base, rope_convention, max_seq_len: settings of :class:`RotaryEmbedding`.

    Parameters: ``qkv_proj`` is one ``nn.Linear(d_in, 3 * d_model)`` whose weight rows are
    ``[W_Q; W_K; W_V]`` (the layout of ``nn.MultiheadAttention.in_proj_weight``), so the
    three projections cost one matrix multiply; with ``num_kv_heads`` heads for keys and values,
    ``W_K`` and ``W_V`` have ``num_kv_heads * d_head`` rows each. ``out_proj`` is
    ``nn.Linear(d_model, d_out)``.

    Call: ``module(x, mask=None, token_positions=None, need_weights=False, cache=None)``
        x: ``(..., seq, d_in)``, usually ``(batch, seq, d_in)``.
        mask: boolean, ``True`` = may attend, broadcastable to ``(..., heads, seq, seq_k)``;
            combined with the causal mask when ``causal=True``. A key-padding mask must be
            ``(batch, 1, 1, seq_k)`` (:func:`~mhsa_helpers.masking.padding_mask`): a ``(batch, seq_k)``
            one broadcasts as ``(seq, seq_k)``, masking query ``b`` with row ``b``.
        token_positions: integer ``(seq,)`` or ``(batch, seq)`` RoPE positions; default
            ``cache.length + 0 .. seq-1``.
        need_weights: also return the attention weights ``(..., heads, seq, seq_k)``.
        cache: a :class:`KVCache` to read past keys/values from and append to; it holds
            ``num_kv_heads`` heads. With a ``SlidingWindowCache(rope_positions="cache")`` the keys
            are cached before RoPE and rotated by their slot in the cache (StreamingLLM).
    Returns ``(..., seq, d_out)``, or ``(output, weights)`` with ``need_weights=True``.

    Without ``need_weights`` and without active dropout the heads are computed by
    ``torch.nn.functional.scaled_dot_product_attention``.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        *,
        num_kv_heads: int | None = None,
        d_in: int | None = None,
        d_out: int | None = None,
        causal: bool = False,
        qkv_bias: bool = True,
        out_bias: bool = True,
        dropout: float = 0.0,
        rope: bool = False,
        rope_base: float = 10000.0,
        rope_convention: str = "interleaved",
        max_seq_len: int = 2048,
        device: str | torch.device | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        checks.mhsa_init_args(
            d_model,
            num_heads,
            num_kv_heads=num_kv_heads,
            d_in=d_in,
            d_out=d_out,
            dropout=dropout,
            rope=rope,
            rope_convention=rope_convention,
        )
        super().__init__()
        self.d_model = d_model
        self.num_heads = num_heads
        self.num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        self.d_head = d_model // num_heads
        self.kv_dim = self.num_kv_heads * self.d_head
        self.d_in = d_model if d_in is None else d_in
        self.d_out = d_model if d_out is None else d_out
        self.causal = bool(causal)
        self.dropout = float(dropout)
        self.qkv_proj = nn.Linear(self.d_in, d_model + 2 * self.kv_dim, bias=qkv_bias, device=device, dtype=dtype)
        self.out_proj = nn.Linear(d_model, self.d_out, bias=out_bias, device=device, dtype=dtype)
        self.rope: RotaryEmbedding | None = (
            RotaryEmbedding(self.d_head, max_seq_len, rope_base, rope_convention, device=device) if rope else None
        )

    def extra_repr(self) -> str:
        kv = "" if self.num_kv_heads == self.num_heads else f", num_kv_heads={self.num_kv_heads}"
        return (
            f"d_model={self.d_model}, num_heads={self.num_heads}{kv}, d_head={self.d_head}, "
            f"causal={self.causal}, dropout={self.dropout}"
        )

    @property
    def q_weight(self) -> torch.Tensor:
        """``W_Q`` ``(d_model, d_in)``, a view into ``qkv_proj.weight``."""
        return self.qkv_proj.weight[: self.d_model]

    @property
    def k_weight(self) -> torch.Tensor:
        """``W_K`` ``(num_kv_heads * d_head, d_in)``, a view into ``qkv_proj.weight``."""
        return self.qkv_proj.weight[self.d_model : self.d_model + self.kv_dim]

    @property
    def v_weight(self) -> torch.Tensor:
        """``W_V`` ``(num_kv_heads * d_head, d_in)``, a view into ``qkv_proj.weight``."""
        return self.qkv_proj.weight[self.d_model + self.kv_dim :]

    @property
    def o_weight(self) -> torch.Tensor:
        """``W_O`` ``(d_out, d_model)``."""
        return self.out_proj.weight

    def forward(
        self,
        x: torch.Tensor,
        *,
        mask: torch.Tensor | None = None,
        token_positions: torch.Tensor | None = None,
        need_weights: bool = False,
        cache: KVCache | None = None,
    ) -> Output:
        """Notebook 06's recipe; arguments and shapes as in the class docstring."""
        checks.mhsa_forward_args(self, x, mask, token_positions, cache)
        past = 0 if cache is None else cache.length

        # Project: one matrix multiply for the three projections.      (batch, seq, d_model | kv_dim)
        q, k, v = self.qkv_proj(x).split((self.d_model, self.kv_dim, self.kv_dim), dim=-1)
        # Split into heads.                                  (batch, heads | kv_heads, seq, d_head)
        q = split_heads.unchecked(q, self.num_heads)
        k, v = split_heads.unchecked(k, self.num_kv_heads), split_heads.unchecked(v, self.num_kv_heads)
        # Rotate queries and keys (never values) by their positions.
        in_cache = cache is not None and cache.rope_positions == "cache"
        if self.rope is not None and not in_cache:
            if token_positions is None:  # the new tokens come after the cached ones
                token_positions = torch.arange(past, past + x.shape[-2], device=x.device)
            elif token_positions.ndim > 1:  # (batch, seq) -> (batch, 1, seq): the same for every head
                token_positions = token_positions.expand(x.shape[:-1]).unsqueeze(-2)
            q, k = self.rope.rotate_unchecked(q, token_positions), self.rope.rotate_unchecked(k, token_positions)
        # Put the new keys and values after the cached ones.    (batch, kv_heads, past + seq, d_head)
        if cache is not None:
            k, v = cache.extended_unchecked(k, v)
        k_rotated = k
        if self.rope is not None and in_cache:  # StreamingLLM: keys held before RoPE, rotated by their slots
            slots = torch.arange(k.shape[-2], device=x.device)
            q, k_rotated = self.rope.rotate_unchecked(q, slots[-x.shape[-2] :]), self.rope.rotate_unchecked(k, slots)
        # Attend, every head on its own; a key/value head serves `groups` query heads.
        groups = self.num_heads // self.num_kv_heads
        k_heads, v_heads = repeat_kv.unchecked(k_rotated, groups), repeat_kv.unchecked(v, groups)
        dropout_p = self.dropout if self.training else 0.0
        heads, weights = attend.unchecked(  #                          (batch, heads, seq, d_head)
            q, k_heads, v_heads, mask, is_causal=self.causal, dropout_p=dropout_p, need_weights=need_weights
        )
        if cache is not None:
            # Kept only once attention has succeeded: a failed call leaves the cache as it was.
            cache.commit(k, v)
        # Merge the heads and project.                                  (batch, seq, d_out)
        out = self.out_proj(merge_heads.unchecked(heads))
        return out if weights is None else (out, weights)


@checks.checked_by(checks.mhsa_functional_args)
def multi_head_self_attention(
    x: torch.Tensor,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    v_weight: torch.Tensor,
    o_weight: torch.Tensor,
    *,
    num_heads: int,
    num_kv_heads: int | None = None,
    causal: bool = False,
    mask: torch.Tensor | None = None,
    rope_base: float | None = None,
    rope_convention: str = "interleaved",
    max_seq_len: int | None = None,
    token_positions: torch.Tensor | None = None,
    q_bias: torch.Tensor | None = None,
    k_bias: torch.Tensor | None = None,
    v_bias: torch.Tensor | None = None,
    o_bias: torch.Tensor | None = None,
    need_weights: bool = False,
) -> Output:
    """Functional multi-head self-attention: weights in, output out (the same steps as the module).

    Shapes: ``x (..., seq, d_in)``; ``q_weight (d_model, d_in)``; ``k_weight, v_weight
    (num_kv_heads * d_head, d_in)`` (``num_kv_heads`` defaults to ``num_heads``);
    ``o_weight (d_out, d_model)`` — ``nn.Linear`` layout, applied as ``x @ W.T``.
    ``rope_base=None`` disables RoPE; otherwise queries and keys are rotated at
    ``token_positions`` (integers broadcastable to ``(..., seq)``, default ``0 .. seq-1``),
    which must be below ``max_seq_len`` when it is given.
    Returns ``(..., seq, d_out)``, or ``(output, weights (..., heads, seq, seq))``.
    """
    # Project.                                                          (batch, seq, d_model) each
    q, k, v = F.linear(x, q_weight, q_bias), F.linear(x, k_weight, k_bias), F.linear(x, v_weight, v_bias)
    # Split into heads.                                       (batch, heads | kv_heads, seq, d_head)
    kv_heads = num_heads if num_kv_heads is None else num_kv_heads
    q, k, v = (
        split_heads.unchecked(q, num_heads),
        split_heads.unchecked(k, kv_heads),
        split_heads.unchecked(v, kv_heads),
    )
    # Rotate queries and keys (never values) by their positions.
    if rope_base is not None:
        if token_positions is None:
            token_positions = torch.arange(x.shape[-2], device=x.device)
        elif token_positions.ndim > 1:  # (batch, seq) -> (batch, 1, seq): the same for every head
            token_positions = token_positions.expand(x.shape[:-1]).unsqueeze(-2)
        cos, sin = rope_angles.unchecked(token_positions.to(x.device), q.shape[-1], rope_base)
        q, k = (
            apply_rotary.unchecked(q, cos, sin, rope_convention),
            apply_rotary.unchecked(k, cos, sin, rope_convention),
        )
    # Attend, every head on its own; a key/value head serves num_heads // kv_heads query heads.
    k, v = repeat_kv.unchecked(k, num_heads // kv_heads), repeat_kv.unchecked(v, num_heads // kv_heads)
    heads, weights = attend.unchecked(q, k, v, mask, is_causal=causal, need_weights=need_weights)
    # Merge the heads and project.                                      (batch, seq, d_out)
    out = F.linear(merge_heads.unchecked(heads), o_weight, o_bias)
    return out if weights is None else (out, weights)
