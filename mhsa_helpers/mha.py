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

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .attention import Output, attend
from .checks import (
    arguments_checked,
    expect_broadcastable,
    expect_choice,
    expect_divisible,
    expect_floating,
    expect_int,
    expect_integer_tensor,
    expect_mask,
    expect_matrix,
    expect_number,
    expect_shape,
    expect_tensor,
)
from .heads import merge_heads, repeat_kv, split_heads
from .kv_cache import KVCache, expect_cache
from .rope import RotaryEmbedding, apply_rotary, expect_even_d_head

__all__ = ["GATES", "SINKS", "AttentionWeights", "MultiHeadSelfAttention", "multi_head_self_attention"]

#: ``sink=``: a learned logit per head (gpt-oss), or a fixed 0 per head (softmax-plus-one).
SINKS = ("learned", "plus_one")
#: ``gate=``: one sigmoid gate per head and token, or one per channel of each head (Qiu et al., 2025).
GATES = ("headwise", "elementwise")


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
        rope: ``None``, or a :class:`RotaryEmbedding` of ``d_head`` to rotate queries and keys by their
            positions with (RoPE, notebook 05): its base, pairing and table length are its own settings, and a
            model passes one to all its layers (one cos/sin table).
        sink: ``None``, ``"learned"`` or ``"plus_one"``: each head's softmax gets one more logit with no
            value vector, so a head may attend to nothing — learned per head (``sink`` parameter, gpt-oss)
            or fixed at 0 (softmax-plus-one). Notebook 12.
        gate: ``None``, ``"headwise"`` or ``"elementwise"``: each head's output is multiplied by
            ``sigmoid(x W_g + b_g)`` of the token's own input before ``W_O`` — one gate per head, or one per
            channel (``gate_proj``, Qiu et al., 2025). Notebook 12.

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
            ``cache.next_position + 0 .. seq-1``.
        need_weights: also return the attention weights ``(..., heads, seq, seq_k)``.
        cache: a :class:`KVCache` to read past keys/values from and append to; it holds
            ``num_kv_heads`` heads. With a ``SlidingWindowCache(rope_positions="cache")`` the keys
            are rotated by their slot in the cache (StreamingLLM): the cache says where.
    Returns ``(..., seq, d_out)``, or ``(output, weights)`` with ``need_weights=True``.

    Without ``need_weights`` and without active dropout the heads are computed by
    ``torch.nn.functional.scaled_dot_product_attention``. The arguments are checked once, at the door
    (:meth:`expect_call`); the functions the recipe calls then skip their own checks
    (:func:`~mhsa_helpers.checks.arguments_checked`).
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
        rope: RotaryEmbedding | None = None,
        sink: str | None = None,
        gate: str | None = None,
        device: str | torch.device | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.d_model, self.num_heads = expect_int("d_model", d_model), expect_int("num_heads", num_heads)
        self.d_head = expect_divisible("d_model", d_model, "num_heads", num_heads)
        self.num_kv_heads = expect_kv_heads(num_heads, num_kv_heads)
        self.kv_dim = self.num_kv_heads * self.d_head
        self.d_in = d_model if d_in is None else expect_int("d_in", d_in)
        self.d_out = d_model if d_out is None else expect_int("d_out", d_out)
        self.causal = bool(causal)
        self.dropout = expect_number("dropout", dropout, 0.0, 1.0, open_high=True)
        if rope is not None:
            expect_rope_d_head(d_model, num_heads)
            expect_rope_for(rope, self.d_head, "None or a RotaryEmbedding")
        self.qkv_proj = nn.Linear(self.d_in, d_model + 2 * self.kv_dim, bias=qkv_bias, device=device, dtype=dtype)
        self.out_proj = nn.Linear(d_model, self.d_out, bias=out_bias, device=device, dtype=dtype)
        self.rope = rope
        # (heads,): the logit of each head's sink; softmax-plus-one's fixed zeros are not saved with the weights.
        logits = torch.zeros(num_heads, device=device, dtype=dtype)
        if sink is not None and expect_choice("sink", sink, SINKS) == "learned":
            self.sink: torch.Tensor | None = nn.Parameter(logits)
        else:
            self.register_buffer("sink", None if sink is None else logits, persistent=False)
        self.gate_proj: nn.Linear | None = None
        if gate is not None:
            width = num_heads if expect_choice("gate", gate, GATES) == "headwise" else d_model
            self.gate_proj = nn.Linear(self.d_in, width, device=device, dtype=dtype)

    def extra_repr(self) -> str:
        kv = "" if self.num_kv_heads == self.num_heads else f", num_kv_heads={self.num_kv_heads}"
        # The sink is a parameter or a buffer, not a child module: without this line the printed module hides it.
        sink = "" if self.sink is None else f", sink={'learned' if isinstance(self.sink, nn.Parameter) else 'plus_one'}"
        gate = ""
        if self.gate_proj is not None:
            gate = f", gate={'headwise' if self.gate_proj.out_features == self.num_heads else 'elementwise'}"
        return (
            f"d_model={self.d_model}, num_heads={self.num_heads}{kv}, d_head={self.d_head}, "
            f"causal={self.causal}, dropout={self.dropout}{sink}{gate}"
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
        cache = self.expect_call(x, mask, token_positions, cache)
        past, seq = (0 if cache is None else cache.next_position), x.shape[-2]
        heads_q, heads_kv, rope = self.num_heads, self.num_kv_heads, self.rope
        with arguments_checked():  # every function below gets arguments built from the ones just checked
            # Project: one matrix multiply for the three projections.  (batch, seq, d_model | kv_dim)
            q, k, v = self.qkv_proj(x).split((self.d_model, self.kv_dim, self.kv_dim), dim=-1)
            # Split into heads.                              (batch, heads | kv_heads, seq, d_head)
            q, k, v = split_heads(q, heads_q), split_heads(k, heads_kv), split_heads(v, heads_kv)
            if rope is not None:  # rotate queries and keys (never values) by their positions
                if token_positions is None:  # the new tokens come after the cached ones: counted on the host
                    cos, sin = rope.angles_at(past, seq)
                else:  # (seq,) or (batch, seq) -> (batch, 1, seq): the same for every head
                    cos, sin = rope.angles_for(token_positions.expand(x.shape[:-1]).unsqueeze(-2))
                q, k = apply_rotary(q, cos, sin, rope.convention), apply_rotary(k, cos, sin, rope.convention)
            # Put the new keys and values after the cached ones.  (batch, kv_heads, past + seq, d_head)
            if cache is not None:
                k, v = cache.extended(k, v)
            # Attend, every head on its own; a key/value head serves `groups` query heads.
            groups, dropout_p = heads_q // heads_kv, (self.dropout if self.training else 0.0)
            sink = None if self.sink is None else self.sink.view(-1, 1)  # (heads, 1): one logit per head, every row
            heads, weights = attend(  #                                  (batch, heads, seq, d_head)
                q, repeat_kv(k, groups), repeat_kv(v, groups), mask, is_causal=self.causal, dropout_p=dropout_p,
                need_weights=need_weights, sink=sink,
            )  # fmt: skip
            if cache is not None:  # kept once attention has succeeded: a failed call leaves the cache as it was
                cache.commit(k, v, rope)
            if self.gate_proj is not None:  # each head scaled by a sigmoid of its token's input (notebook 12)
                heads = heads * torch.sigmoid(split_heads(self.gate_proj(x), heads_q))
            # Merge the heads and project.                              (batch, seq, d_out)
            out = self.out_proj(merge_heads(heads))
        return out if weights is None else (out, weights)

    def expect_call(
        self, x: torch.Tensor, mask: torch.Tensor | None, token_positions: torch.Tensor | None, cache: KVCache | None
    ) -> KVCache | None:
        """The checks of :meth:`forward`, made once at its door: ``x``, the ``mask`` against the scores
        ``(..., heads, seq, past + seq)``, the positions and the cache; returns the cache."""
        x = expect_input(x, self.d_in, self.qkv_proj.weight.dtype)
        expect_token_positions(token_positions, x, rope_on=self.rope is not None)
        cache = None if cache is None else expect_cache(cache, x, self.num_kv_heads, self.d_head, token_positions)
        if mask is not None:
            seq = x.shape[-2]
            scores = (*x.shape[:-2], self.num_heads, seq, (0 if cache is None else cache.held) + seq)
            expect_mask("mask", mask, scores, "(..., seq_q, seq_k)", device=x.device)
        return cache


@dataclass(frozen=True)
class AttentionWeights:
    """The projections of multi-head self-attention, in ``nn.Linear`` layout ``(d_out, d_in)`` (applied as
    ``x @ W.T``), and their optional biases: what :func:`multi_head_self_attention` takes as one value.

    Shapes: ``q (d_model, d_in)``; ``k``, ``v (num_kv_heads * d_head, d_in)``; ``o (d_out, d_model)``; each bias
    ``(rows,)`` of its matrix.
    """

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    o: torch.Tensor
    q_bias: torch.Tensor | None = None
    k_bias: torch.Tensor | None = None
    v_bias: torch.Tensor | None = None
    o_bias: torch.Tensor | None = None

    @classmethod
    def of(cls, module: MultiHeadSelfAttention) -> AttentionWeights:
        """A module's weights and biases (views into its parameters)."""
        q_bias = k_bias = v_bias = None
        if module.qkv_proj.bias is not None:
            q_bias, k_bias, v_bias = torch.split(module.qkv_proj.bias, [module.d_model, module.kv_dim, module.kv_dim])
        return cls(
            module.q_weight, module.k_weight, module.v_weight, module.o_weight, q_bias, k_bias, v_bias,
            module.out_proj.bias,
        )  # fmt: skip


def multi_head_self_attention(
    x: torch.Tensor,
    weights: AttentionWeights,
    *,
    num_heads: int,
    num_kv_heads: int | None = None,
    causal: bool = False,
    mask: torch.Tensor | None = None,
    rope: RotaryEmbedding | None = None,
    token_positions: torch.Tensor | None = None,
    need_weights: bool = False,
) -> Output:
    """Functional multi-head self-attention: weights in, output out (the same steps as the module).

    Shapes: ``x (..., seq, d_in)``; ``weights`` an :class:`AttentionWeights` (``num_kv_heads`` key/value heads,
    default ``num_heads``). With ``rope`` (a :class:`RotaryEmbedding` of ``d_head``) queries and keys are rotated
    at ``token_positions`` (integers broadcastable to ``(..., seq)``, default ``0 .. seq-1``).
    Returns ``(..., seq, d_out)``, or ``(output, weights (..., heads, seq, seq))``.
    """
    expect_input(x)
    kv_heads = expect_weights(weights, x, expect_int("num_heads", num_heads), num_kv_heads)
    if rope is not None:
        expect_rope_for(rope, weights.q.shape[0] // num_heads)
    expect_token_positions(token_positions, x, rope_on=rope is not None)  # their range: rope.angles_at / angles_for
    if mask is not None:
        expect_mask(
            "mask", mask, (*x.shape[:-2], num_heads, x.shape[-2], x.shape[-2]), "(..., heads, seq, seq_k)", x.device
        )

    with arguments_checked():  # every function below gets arguments built from the ones just checked
        # Project.                                                          (batch, seq, d_model) each
        q = F.linear(x, weights.q, weights.q_bias)
        k, v = F.linear(x, weights.k, weights.k_bias), F.linear(x, weights.v, weights.v_bias)
        # Split into heads.                                       (batch, heads | kv_heads, seq, d_head)
        q, k, v = split_heads(q, num_heads), split_heads(k, kv_heads), split_heads(v, kv_heads)
        # Rotate queries and keys (never values) by their positions.
        if rope is not None:
            if token_positions is None:
                cos, sin = rope.angles_at(0, x.shape[-2])
            else:  # (seq,) or (batch, seq) -> (batch, 1, seq): the same for every head
                cos, sin = rope.angles_for(token_positions.expand(x.shape[:-1]).unsqueeze(-2))
            q, k = apply_rotary(q, cos, sin, rope.convention), apply_rotary(k, cos, sin, rope.convention)
        # Attend, every head on its own; a key/value head serves num_heads // kv_heads query heads.
        k, v = repeat_kv(k, num_heads // kv_heads), repeat_kv(v, num_heads // kv_heads)
        heads, attention = attend(q, k, v, mask, is_causal=causal, need_weights=need_weights)
        # Merge the heads and project.                                      (batch, seq, d_out)
        out = F.linear(merge_heads(heads), weights.o, weights.o_bias)
    return out if attention is None else (out, attention)


def expect_weights(weights: object, x: torch.Tensor, num_heads: int, num_kv_heads: int | None) -> int:
    """:class:`AttentionWeights` whose shapes and dtype fit ``x (..., seq, d_in)`` and the heads; the number of
    key/value heads."""
    if not isinstance(weights, AttentionWeights):
        raise TypeError(f"weights must be an AttentionWeights(q, k, v, o, ...), got {type(weights).__name__}")
    kv_heads = expect_kv_heads(num_heads, num_kv_heads)
    for name in ("q", "k", "v", "o"):
        if expect_matrix(f"weights.{name}", getattr(weights, name), "(d_out, d_in) matrix").dtype != x.dtype:
            raise TypeError(f"weights.{name} must have the dtype of x ({x.dtype}), got {getattr(weights, name).dtype}")
    d_model, d_in = weights.q.shape[0], x.shape[-1]
    if weights.q.shape != (d_model, d_in):
        raise ValueError(
            f"weights.q must have shape (d_model, d_in) with d_in = x.shape[-1] = {d_in}, "
            f"got shape {tuple(weights.q.shape)}"
        )
    kv_rows = kv_heads * expect_divisible("d_model", d_model, "num_heads", num_heads)
    for name in ("k", "v"):
        if getattr(weights, name).shape != (kv_rows, d_in):
            raise ValueError(
                f"weights.{name} must have shape (num_kv_heads * d_head, d_in) = ({kv_rows}, {d_in}) to match "
                f"weights.q, x and num_kv_heads={kv_heads}, got shape {tuple(getattr(weights, name).shape)}"
            )
    if weights.o.shape[1] != d_model:
        raise ValueError(f"weights.o must have shape (d_out, d_model={d_model}), got shape {tuple(weights.o.shape)}")
    sizes = {"q": d_model, "k": kv_rows, "v": kv_rows, "o": weights.o.shape[0]}
    for name, size in sizes.items():
        bias = getattr(weights, f"{name}_bias")
        if bias is not None:
            expect_shape(f"weights.{name}_bias", bias, (size,), dtype=x.dtype)
    return kv_heads


def expect_rope_for(rope: object, d_head: int, expected: str = "a RotaryEmbedding") -> RotaryEmbedding:
    """A :class:`RotaryEmbedding` that rotates heads of ``d_head`` (``expected`` says what else was allowed)."""
    if not isinstance(rope, RotaryEmbedding):
        raise TypeError(
            f"rope must be {expected}, e.g. rope=RotaryEmbedding({d_head}) for heads of d_head={d_head}, "
            f"got {type(rope).__name__}"
        )
    if rope.d_head != d_head:
        raise ValueError(
            f"rope must rotate heads of d_head = d_model // num_heads = {d_head}, got a RotaryEmbedding of "
            f"d_head={rope.d_head}"
        )
    return rope


def expect_input(
    x: object, d_in: int | None = None, dtype: torch.dtype | None = None, *, size: str = "d_in"
) -> torch.Tensor:
    """``x (..., seq, d_in)``: floating point, at least one position, ``d_in`` features and the
    module's ``dtype`` when given; ``size`` is what the module calls ``d_in`` (latent attention: ``d_model``)."""
    x = expect_floating("x", x, min_ndim=2, shape="(..., seq, d_in)")
    if dtype is not None and x.dtype != dtype:
        raise TypeError(
            f"x must have the module's dtype {dtype}, got {x.dtype}; use x.to({dtype}) or module.to({x.dtype})"
        )
    if d_in is not None and x.shape[-1] != d_in:
        raise ValueError(f"x must have last dimension {size}={d_in}, got shape {tuple(x.shape)}")
    if x.shape[-2] == 0:
        raise ValueError(f"x must hold at least one position (seq >= 1), got shape {tuple(x.shape)}")
    return x


def expect_kv_heads(num_heads: int, num_kv_heads: object) -> int:
    """``num_kv_heads`` (default ``num_heads``) divides ``num_heads``."""
    if num_kv_heads is None:
        return num_heads
    kv_heads = expect_int("num_kv_heads", num_kv_heads)
    expect_divisible("num_heads", num_heads, "num_kv_heads", kv_heads)
    return kv_heads


def expect_rope_d_head(d_model: int, num_heads: int) -> None:
    """RotaryEmbedding would only report d_head; the learner chose d_model and num_heads."""
    d_head = d_model // num_heads
    expect_even_d_head(
        d_head, "d_head = d_model // num_heads", f"d_head={d_head} from d_model={d_model}, num_heads={num_heads}"
    )


def expect_token_positions(token_positions: object, x: torch.Tensor, *, rope_on: bool) -> None:
    """RoPE positions for ``x (..., seq, d_in)``, if any: integers broadcastable to ``x.shape[:-1]``,
    given only when RoPE is on."""
    if token_positions is None:
        return
    token_positions = expect_tensor("token_positions", token_positions)
    if not rope_on:
        raise ValueError(
            "token_positions are RoPE positions, but RoPE is off: enable it (rope=a RotaryEmbedding) "
            f"or drop them; got token_positions of shape {tuple(token_positions.shape)}"
        )
    seq = x.shape[-2]
    if token_positions.ndim == 0 or token_positions.shape[-1] != seq:
        raise ValueError(
            f"token_positions must have shape (..., seq) with seq={seq}, got shape {tuple(token_positions.shape)}"
        )
    expect_broadcastable("token_positions", token_positions, x.shape[:-1], "x.shape[:-1]")
    expect_integer_tensor("token_positions", token_positions)
