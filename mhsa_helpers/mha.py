"""Multi-head self-attention: the module, its weight loaders, and a functional form.

One block, end to end (shapes for ``x (batch, seq, d_in)``)::

    q, k, v = x @ W_Q^T, x @ W_K^T, x @ W_V^T          # (batch, seq, d_model) each
    q, k, v = split_heads(...)                          # (batch, heads, seq, d_head)
    q, k = rope(q), rope(k)                             # optional; never v
    heads = softmax(q k^T / sqrt(d_head) + mask) v      # (batch, heads, seq, d_head)
    out = merge_heads(heads) @ W_O^T                    # (batch, seq, d_out)

Weights use PyTorch's ``nn.Linear`` layout ``(d_out, d_in)``, applied as ``x @ W^T``.
Pen-and-paper notes (and the seeds) write ``E @ W`` with ``W (d_in, d_out)``: the loaders
take a required ``layout`` argument, ``"out_in"`` or ``"in_out"``, and never guess it
from the shape (a square toy matrix fits both).
"""

from __future__ import annotations

from typing import Optional, Sequence, Tuple, Union

import torch
import torch.nn.functional as F
from torch import nn

from .checks import (
    check_broadcasts_to,
    check_choice,
    check_divisible,
    check_floating,
    check_ndim,
    check_positive_int,
    check_probability,
    check_tensor,
)
from .attention import scaled_dot_product_attention
from .heads import fused_qkv_per_head_to_stacked, merge_heads, split_heads, stack_head_weights
from .kv_cache import KVCache
from .rope import ROPE_CONVENTIONS, RotaryEmbedding

__all__ = ["MultiHeadSelfAttention", "multi_head_self_attention", "WEIGHT_LAYOUTS", "FUSED_QKV_LAYOUTS"]

WEIGHT_LAYOUTS = ("out_in", "in_out")
FUSED_QKV_LAYOUTS = ("stacked", "per_head")

Output = Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]


def _check_rope_d_head(d_model: int, num_heads: int, d_head: int) -> None:
    # RotaryEmbedding would only report d_head; the learner chose d_model and num_heads.
    if d_head % 2:
        raise ValueError(
            f"d_head = d_model // num_heads must be even for RoPE (dimensions are rotated in pairs), "
            f"got d_head={d_head} from d_model={d_model}, num_heads={num_heads}"
        )


#: Constructor arguments that a loader reads off the weights; passing them too is an error.
_SET_BY_THE_WEIGHTS = ("d_model", "num_heads", "d_in", "d_out", "qkv_bias", "out_bias", "device", "dtype")


def _check_loader_options(options: dict) -> None:
    taken = [name for name in _SET_BY_THE_WEIGHTS if name in options]
    if taken:
        raise TypeError(
            f"{', '.join(taken)} cannot be passed to a loader: it reads sizes, which biases exist, device and "
            f"dtype off the weights; its options may only be causal, dropout, rope, rope_base, rope_convention "
            f"or max_seq_len — convert afterwards with module.to(device, dtype)"
        )


def _check_bias(name: str, bias: torch.Tensor, size: int) -> None:
    check_floating(name, bias)
    if tuple(bias.shape) != (size,):
        raise ValueError(f"{name} must have shape ({size},), got shape {tuple(bias.shape)}")


def _attend_heads(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    num_heads: int,
    causal: bool,
    mask: Optional[torch.Tensor],
    rope: Optional[RotaryEmbedding],
    token_positions: Optional[torch.Tensor],
    cache: Optional[KVCache],
    dropout_p: float,
    need_weights: bool,
) -> Output:
    """Projected ``q, k, v (..., seq, d_model)`` -> merged heads ``(..., seq, d_model)``
    (and weights ``(..., heads, seq, seq_k)`` when ``need_weights``)."""
    q, k, v = split_heads(q, num_heads), split_heads(k, num_heads), split_heads(v, num_heads)
    seq = q.shape[-2]
    past = 0 if cache is None else cache.length
    leading = (*q.shape[:-3], seq)  # x.shape[:-1]
    if token_positions is not None:
        check_tensor("token_positions", token_positions)
        if rope is None:
            raise ValueError(
                "token_positions are RoPE positions, but RoPE is off: enable it (rope=True / rope_base=...) "
                f"or drop them; got token_positions of shape {tuple(token_positions.shape)}"
            )
        if token_positions.ndim == 0 or token_positions.shape[-1] != seq:
            raise ValueError(
                f"token_positions must have shape (..., seq) with seq={seq}, "
                f"got shape {tuple(token_positions.shape)}"
            )
        # Checked against x before the heads axis is inserted, so the message shows the caller's shapes.
        check_broadcasts_to("token_positions", token_positions, leading, "x.shape[:-1]")
    if rope is not None:
        if token_positions is None:
            positions = torch.arange(past, past + seq, device=q.device)
        elif token_positions.ndim == 1:
            positions = token_positions  # (seq,): shared by every sequence and head
        else:
            # (..., seq) -> (..., 1, seq): the same positions for every head.
            positions = token_positions.expand(leading).unsqueeze(-2)
        q, k = rope(q, positions), rope(k, positions)
    if cache is not None:
        # Not stored yet: a call that fails below (a mask of the wrong shape, say) must leave
        # the cache as it was.
        k, v = cache.extended(k, v)
    result = scaled_dot_product_attention(
        q, k, v, mask, is_causal=causal, dropout_p=dropout_p, return_weights=need_weights
    )
    if cache is not None:
        cache.keys, cache.values = k, v
    if need_weights:
        heads, weights = result
        return merge_heads(heads), weights
    return merge_heads(result)  # type: ignore[arg-type]


class MultiHeadSelfAttention(nn.Module):
    """Multi-head self-attention with optional causal mask, RoPE, biases and dropout.

    Args:
        d_model: total attention width, ``num_heads * d_head``.
        num_heads: number of heads; must divide ``d_model``.
        d_in: size of the input features (default ``d_model``).
        d_out: size of the output features (default ``d_model``).
        causal: mask future positions (decoder self-attention).
        qkv_bias, out_bias: learnable biases on the input and output projections.
        dropout: probability of zeroing an attention weight in training mode.
        rope: apply rotary position embeddings to queries and keys.
        rope_base, rope_convention, max_seq_len: settings of :class:`RotaryEmbedding`.

    Parameters: ``qkv_proj`` is one ``nn.Linear(d_in, 3 * d_model)`` whose weight rows are
    ``[W_Q; W_K; W_V]`` (the layout of ``nn.MultiheadAttention.in_proj_weight``), so the
    three projections cost one matrix multiply; ``out_proj`` is ``nn.Linear(d_model, d_out)``.

    Call: ``module(x, mask=None, token_positions=None, need_weights=False, cache=None)``
        x: ``(..., seq, d_in)``, usually ``(batch, seq, d_in)``.
        mask: boolean, ``True`` = may attend, broadcastable to ``(..., heads, seq, seq_k)``;
            combined with the causal mask when ``causal=True``. A key-padding mask must be
            ``(batch, 1, 1, seq_k)`` (:func:`~mhsa_helpers.masking.padding_mask`): a ``(batch, seq_k)``
            one broadcasts as ``(seq, seq_k)``, masking query ``b`` with row ``b``.
        token_positions: integer ``(seq,)`` or ``(batch, seq)`` RoPE positions; default
            ``cache.length + 0 .. seq-1``.
        need_weights: also return the attention weights ``(..., heads, seq, seq_k)``.
        cache: a :class:`KVCache` to read past keys/values from and append to.
    Returns ``(..., seq, d_out)``, or ``(output, weights)`` with ``need_weights=True``.

    Without ``need_weights`` and without active dropout the heads are computed by
    ``torch.nn.functional.scaled_dot_product_attention``.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        *,
        d_in: Optional[int] = None,
        d_out: Optional[int] = None,
        causal: bool = False,
        qkv_bias: bool = True,
        out_bias: bool = True,
        dropout: float = 0.0,
        rope: bool = False,
        rope_base: float = 10000.0,
        rope_convention: str = "interleaved",
        max_seq_len: int = 2048,
        device: Optional[Union[str, torch.device]] = None,
        dtype: Optional[torch.dtype] = None,
    ) -> None:
        super().__init__()
        check_positive_int("d_model", d_model)
        check_positive_int("num_heads", num_heads)
        self.d_head = check_divisible("d_model", d_model, "num_heads", num_heads)
        self.d_model = d_model
        self.num_heads = num_heads
        self.d_in = d_model if d_in is None else check_positive_int("d_in", d_in)
        self.d_out = d_model if d_out is None else check_positive_int("d_out", d_out)
        self.causal = bool(causal)
        self.dropout = check_probability("dropout", dropout)
        check_choice("rope_convention", rope_convention, ROPE_CONVENTIONS)
        if rope:
            _check_rope_d_head(d_model, num_heads, self.d_head)
        factory = {"device": device, "dtype": dtype}
        self.qkv_proj = nn.Linear(self.d_in, 3 * d_model, bias=qkv_bias, **factory)
        self.out_proj = nn.Linear(d_model, self.d_out, bias=out_bias, **factory)
        self.rope: Optional[RotaryEmbedding] = (
            RotaryEmbedding(self.d_head, max_seq_len, rope_base, rope_convention, device=device) if rope else None
        )

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, num_heads={self.num_heads}, d_head={self.d_head}, "
            f"causal={self.causal}, dropout={self.dropout}"
        )

    @property
    def q_weight(self) -> torch.Tensor:
        """``W_Q`` ``(d_model, d_in)``, a view into ``qkv_proj.weight``."""
        return self.qkv_proj.weight[: self.d_model]

    @property
    def k_weight(self) -> torch.Tensor:
        """``W_K`` ``(d_model, d_in)``, a view into ``qkv_proj.weight``."""
        return self.qkv_proj.weight[self.d_model : 2 * self.d_model]

    @property
    def v_weight(self) -> torch.Tensor:
        """``W_V`` ``(d_model, d_in)``, a view into ``qkv_proj.weight``."""
        return self.qkv_proj.weight[2 * self.d_model :]

    @property
    def o_weight(self) -> torch.Tensor:
        """``W_O`` ``(d_out, d_model)``."""
        return self.out_proj.weight

    def forward(
        self,
        x: torch.Tensor,
        *,
        mask: Optional[torch.Tensor] = None,
        token_positions: Optional[torch.Tensor] = None,
        need_weights: bool = False,
        cache: Optional[KVCache] = None,
    ) -> Output:
        check_floating("x", x)
        check_ndim("x", x, 2, "(..., seq, d_in)")
        if x.shape[-1] != self.d_in:
            raise ValueError(f"x must have last dimension d_in={self.d_in}, got shape {tuple(x.shape)}")
        if x.shape[-2] == 0:
            raise ValueError(f"x must hold at least one position (seq >= 1), got shape {tuple(x.shape)}")
        if x.dtype != self.qkv_proj.weight.dtype:
            raise TypeError(
                f"x must have the module's dtype {self.qkv_proj.weight.dtype}, got {x.dtype}; "
                f"use x.to({self.qkv_proj.weight.dtype}) or module.to({x.dtype})"
            )
        if cache is not None and not isinstance(cache, KVCache):
            raise TypeError(f"cache must be a KVCache or None, got {type(cache).__name__}")
        if cache is not None and cache.keys is not None and cache.keys.shape[:-3] != x.shape[:-2]:
            raise ValueError(
                f"x has batch shape {tuple(x.shape[:-2])} but the cache holds batch shape "
                f"{tuple(cache.keys.shape[:-3])}; a KVCache follows one batch of sequences: use a new one "
                f"(or cache.reset()) for another"
            )
        q, k, v = self.qkv_proj(x).chunk(3, dim=-1)
        result = _attend_heads(
            q,
            k,
            v,
            num_heads=self.num_heads,
            causal=self.causal,
            mask=mask,
            rope=self.rope,
            token_positions=token_positions,
            cache=cache,
            dropout_p=self.dropout if self.training else 0.0,
            need_weights=need_weights,
        )
        if need_weights:
            heads, weights = result
            return self.out_proj(heads), weights
        return self.out_proj(result)  # type: ignore[arg-type]

    # ------------------------------------------------------------------ loaders

    @classmethod
    def from_projection_weights(
        cls,
        q_weight: torch.Tensor,
        k_weight: torch.Tensor,
        v_weight: torch.Tensor,
        o_weight: torch.Tensor,
        *,
        num_heads: int,
        layout: str,
        q_bias: Optional[torch.Tensor] = None,
        k_bias: Optional[torch.Tensor] = None,
        v_bias: Optional[torch.Tensor] = None,
        o_bias: Optional[torch.Tensor] = None,
        **options,
    ) -> "MultiHeadSelfAttention":
        """A module holding copies of four projection matrices.

        ``layout="out_in"``: ``W_Q, W_K, W_V (d_model, d_in)``, ``W_O (d_out, d_model)``
        (``nn.Linear.weight``, used as ``x @ W.T``).
        ``layout="in_out"``: ``W_Q, W_K, W_V (d_in, d_model)``, ``W_O (d_model, d_out)``
        (written ``E @ W`` on paper). Missing q/k/v biases are zero when any is given.
        ``options`` go to the constructor (``causal``, ``rope``, ``dropout``, ...); sizes,
        biases, device and dtype come from the weights.
        """
        _check_loader_options(options)
        check_choice("layout", layout, WEIGHT_LAYOUTS)
        names = ("q_weight", "k_weight", "v_weight", "o_weight")
        weights = [q_weight, k_weight, v_weight, o_weight]
        for name, weight in zip(names, weights):
            check_floating(name, weight)
            if weight.ndim != 2:
                raise ValueError(f"{name} must be a 2-D matrix, got shape {tuple(weight.shape)}")
        if layout == "in_out":
            weights = [w.transpose(0, 1) for w in weights]
        q_w, k_w, v_w, o_w = weights
        d_model, d_in = q_w.shape
        expected = "(d_model, d_in)" if layout == "out_in" else "(d_in, d_model)"
        for name, weight in zip(names[1:3], (k_w, v_w)):
            if weight.shape != q_w.shape:
                shown = tuple(weight.shape) if layout == "out_in" else tuple(weight.shape[::-1])
                wanted = tuple(q_w.shape) if layout == "out_in" else tuple(q_w.shape[::-1])
                raise ValueError(
                    f"{name} must have the shape of q_weight {wanted} {expected} with layout={layout!r}, "
                    f"got shape {shown}"
                )
        if o_w.shape[1] != d_model:
            shown = tuple(o_weight.shape)
            raise ValueError(
                f"o_weight must take the d_model={d_model} concatenated head features: expected shape "
                + (f"(d_out, {d_model})" if layout == "out_in" else f"({d_model}, d_out)")
                + f" with layout={layout!r}, got shape {shown}"
            )
        qkv_biases = (q_bias, k_bias, v_bias)
        for name, bias in zip(("q_bias", "k_bias", "v_bias"), qkv_biases):
            if bias is not None:
                _check_bias(name, bias, d_model)
        if o_bias is not None:
            _check_bias("o_bias", o_bias, o_w.shape[0])
        has_qkv_bias = any(b is not None for b in qkv_biases)
        module = cls(
            d_model,
            num_heads,
            d_in=d_in,
            d_out=o_w.shape[0],
            qkv_bias=has_qkv_bias,
            out_bias=o_bias is not None,
            device=q_w.device,
            dtype=q_w.dtype,
            **options,
        )
        with torch.no_grad():
            module.qkv_proj.weight.copy_(torch.cat((q_w, k_w, v_w), dim=0))
            module.out_proj.weight.copy_(o_w)
            if has_qkv_bias:
                full = [torch.zeros(d_model, dtype=q_w.dtype, device=q_w.device) if b is None else b for b in qkv_biases]
                module.qkv_proj.bias.copy_(torch.cat(full))
            if o_bias is not None:
                module.out_proj.bias.copy_(o_bias)
        return module

    @classmethod
    def from_head_weights(
        cls,
        q_heads: Sequence[torch.Tensor],
        k_heads: Sequence[torch.Tensor],
        v_heads: Sequence[torch.Tensor],
        o_weight: torch.Tensor,
        *,
        layout: str,
        **options,
    ) -> "MultiHeadSelfAttention":
        """A module from one set of ``W_Q^i, W_K^i, W_V^i`` per head (seed 001's view).

        ``layout="in_out"``: each head matrix is ``(d_in, d_head)`` and ``W_O`` is
        ``(heads * d_head, d_out)``; ``"out_in"``: ``(d_head, d_in)`` and ``(d_out, heads * d_head)``.
        Head ``i`` becomes rows ``i*d_head:(i+1)*d_head`` of the stacked projections.
        """
        _check_loader_options(options)
        check_choice("layout", layout, WEIGHT_LAYOUTS)
        lists = {"q_heads": q_heads, "k_heads": k_heads, "v_heads": v_heads}
        for name, heads in lists.items():
            if isinstance(heads, torch.Tensor) or not isinstance(heads, (list, tuple)) or not heads:
                raise TypeError(f"{name} must be a non-empty list of per-head matrices, got {type(heads).__name__}")
            if len(heads) != len(q_heads):
                raise ValueError(f"{name} must hold one matrix per head ({len(q_heads)}), got {len(heads)}")
        # Checked here in the caller's layout and names; the loaders below would report
        # transposed shapes under other names (head_weights[i], q_weight).
        head_shape = "(d_in, d_head)" if layout == "in_out" else "(d_head, d_in)"
        stacked = []
        for name, heads in lists.items():
            for index, head in enumerate(heads):
                check_floating(f"{name}[{index}]", head)
                if head.ndim != 2:
                    raise ValueError(f"{name}[{index}] must be a 2-D matrix, got shape {tuple(head.shape)}")
                if head.shape != q_heads[0].shape:
                    raise ValueError(
                        f"{name}[{index}] must have the shape of q_heads[0] {tuple(q_heads[0].shape)} "
                        f"{head_shape} with layout={layout!r}, got shape {tuple(head.shape)}"
                    )
            if layout == "in_out":
                heads = [head.transpose(0, 1) for head in heads]
            stacked.append(stack_head_weights(heads))
        check_floating("o_weight", o_weight)
        if o_weight.ndim != 2:
            raise ValueError(f"o_weight must be a 2-D matrix, got shape {tuple(o_weight.shape)}")
        d_model = stacked[0].shape[0]
        if o_weight.shape[0 if layout == "in_out" else 1] != d_model:
            expected = f"({d_model}, d_out)" if layout == "in_out" else f"(d_out, {d_model})"
            raise ValueError(
                f"o_weight must take the {len(q_heads)} heads' {d_model} concatenated features: expected shape "
                f"{expected} with layout={layout!r}, got shape {tuple(o_weight.shape)}"
            )
        o_out_in = o_weight if layout == "out_in" else o_weight.transpose(0, 1)
        return cls.from_projection_weights(
            *stacked, o_out_in, num_heads=len(q_heads), layout="out_in", **options
        )

    @classmethod
    def from_fused_qkv(
        cls,
        qkv_weight: torch.Tensor,
        o_weight: torch.Tensor,
        *,
        num_heads: int,
        fused_layout: str,
        qkv_bias: Optional[torch.Tensor] = None,
        o_bias: Optional[torch.Tensor] = None,
        **options,
    ) -> "MultiHeadSelfAttention":
        """A module from one fused ``(3 * d_model, d_in)`` QKV matrix (``nn.Linear`` layout).

        ``fused_layout="stacked"``: rows ``[W_Q; W_K; W_V]`` (PyTorch, nanoGPT);
        ``"per_head"``: for each head its ``[q|k|v]`` row blocks (seed 004).
        ``o_weight`` is ``(d_out, d_model)``.
        """
        _check_loader_options(options)
        check_choice("fused_layout", fused_layout, FUSED_QKV_LAYOUTS)
        check_floating("qkv_weight", qkv_weight)
        if qkv_weight.ndim != 2:
            raise ValueError(f"qkv_weight must be 2-D (3 * d_model, d_in), got shape {tuple(qkv_weight.shape)}")
        check_positive_int("num_heads", num_heads)
        check_divisible("qkv_weight.shape[0]", qkv_weight.shape[0], "3 * num_heads", 3 * num_heads)
        if qkv_bias is not None:
            # Checked before the per_head conversion, whose own error would call it "weight".
            check_tensor("qkv_bias", qkv_bias)
            if tuple(qkv_bias.shape) != (qkv_weight.shape[0],):
                raise ValueError(f"qkv_bias must have shape ({qkv_weight.shape[0]},), got {tuple(qkv_bias.shape)}")
        if fused_layout == "per_head":
            qkv_weight = fused_qkv_per_head_to_stacked(qkv_weight, num_heads)
            if qkv_bias is not None:
                qkv_bias = fused_qkv_per_head_to_stacked(qkv_bias, num_heads)
        q_w, k_w, v_w = qkv_weight.chunk(3, dim=0)
        q_b = k_b = v_b = None
        if qkv_bias is not None:
            q_b, k_b, v_b = qkv_bias.chunk(3)
        return cls.from_projection_weights(
            q_w, k_w, v_w, o_weight, num_heads=num_heads, layout="out_in",
            q_bias=q_b, k_bias=k_b, v_bias=v_b, o_bias=o_bias, **options,
        )

    @classmethod
    def from_torch_mha(cls, mha: nn.MultiheadAttention, **options) -> "MultiHeadSelfAttention":
        """A module with the weights of a ``torch.nn.MultiheadAttention`` (self-attention use).

        Masks are not copied: pass ``causal=True`` or a ``mask`` (True = may attend; PyTorch's
        boolean ``attn_mask`` uses True = blocked, so pass ``~attn_mask``). ``mha.dropout`` is
        copied unless ``dropout`` is given.

        Inputs: this module takes ``(batch, seq, d)``; an ``nn.MultiheadAttention`` built with
        ``batch_first=False`` (the default) takes ``(seq, batch, d)``, so compare
        ``module(x)`` with ``mha(x_t, x_t, x_t)[0].transpose(0, 1)`` for ``x_t = x.transpose(0, 1)``.
        """
        _check_loader_options(options)
        if not isinstance(mha, nn.MultiheadAttention):
            raise TypeError(f"mha must be a torch.nn.MultiheadAttention, got {type(mha).__name__}")
        if not mha._qkv_same_embed_dim:
            raise ValueError("mha must have kdim == vdim == embed_dim (self-attention), got separate kdim/vdim")
        if mha.bias_k is not None or mha.add_zero_attn:
            raise ValueError("mha must not use add_bias_kv or add_zero_attn, which add an extra key position")
        options.setdefault("dropout", mha.dropout)
        return cls.from_fused_qkv(
            mha.in_proj_weight.detach(),
            mha.out_proj.weight.detach(),
            num_heads=mha.num_heads,
            fused_layout="stacked",
            qkv_bias=None if mha.in_proj_bias is None else mha.in_proj_bias.detach(),
            o_bias=None if mha.out_proj.bias is None else mha.out_proj.bias.detach(),
            **options,
        )


def multi_head_self_attention(
    x: torch.Tensor,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    v_weight: torch.Tensor,
    o_weight: torch.Tensor,
    *,
    num_heads: int,
    causal: bool = False,
    mask: Optional[torch.Tensor] = None,
    rope_base: Optional[float] = None,
    rope_convention: str = "interleaved",
    max_seq_len: Optional[int] = None,
    token_positions: Optional[torch.Tensor] = None,
    q_bias: Optional[torch.Tensor] = None,
    k_bias: Optional[torch.Tensor] = None,
    v_bias: Optional[torch.Tensor] = None,
    o_bias: Optional[torch.Tensor] = None,
    need_weights: bool = False,
) -> Output:
    """Functional multi-head self-attention (seed 003's interface): weights in, output out.

    Shapes: ``x (..., seq, d_in)``; ``q_weight, k_weight, v_weight (d_model, d_in)``;
    ``o_weight (d_out, d_model)`` — ``nn.Linear`` layout, applied as ``x @ W.T``.
    ``rope_base=None`` disables RoPE; otherwise queries and keys are rotated at
    ``token_positions`` (integers broadcastable to ``(..., seq)``, default ``0 .. seq-1``)
    with a cache of ``max_seq_len`` positions (default: just enough for the positions).
    Returns ``(..., seq, d_out)``, or ``(output, weights (..., heads, seq, seq))``.
    """
    check_floating("x", x)
    check_ndim("x", x, 2, "(..., seq, d_in)")
    check_positive_int("num_heads", num_heads)
    if token_positions is not None:
        check_tensor("token_positions", token_positions)
    names = ("q_weight", "k_weight", "v_weight", "o_weight")
    for name, weight in zip(names, (q_weight, k_weight, v_weight, o_weight)):
        check_floating(name, weight)
        if weight.ndim != 2:
            raise ValueError(f"{name} must be a 2-D (d_out, d_in) matrix, got shape {tuple(weight.shape)}")
        if weight.dtype != x.dtype:
            raise TypeError(f"{name} must have the dtype of x ({x.dtype}), got {weight.dtype}")
    d_model = q_weight.shape[0]
    for name, weight in zip(names[:3], (q_weight, k_weight, v_weight)):
        if weight.shape != (d_model, x.shape[-1]):
            raise ValueError(
                f"{name} must have shape (d_model, d_in) = ({d_model}, {x.shape[-1]}) to match q_weight and x, "
                f"got shape {tuple(weight.shape)}"
            )
    if o_weight.shape[1] != d_model:
        raise ValueError(f"o_weight must have shape (d_out, d_model={d_model}), got shape {tuple(o_weight.shape)}")
    biases = {"q_bias": (q_bias, d_model), "k_bias": (k_bias, d_model), "v_bias": (v_bias, d_model),
              "o_bias": (o_bias, o_weight.shape[0])}
    for name, (bias, size) in biases.items():
        if bias is not None:
            _check_bias(name, bias, size)
            if bias.dtype != x.dtype:
                raise TypeError(f"{name} must have the dtype of x ({x.dtype}), got {bias.dtype}")
    d_head = check_divisible("d_model", d_model, "num_heads", num_heads)
    seq = x.shape[-2]
    if seq == 0:
        raise ValueError(f"x must hold at least one position (seq >= 1), got shape {tuple(x.shape)}")
    rope = None
    if rope_base is not None:
        _check_rope_d_head(d_model, num_heads, d_head)
        if max_seq_len is None:
            max_seq_len = seq if token_positions is None or token_positions.numel() == 0 else max(
                seq, int(token_positions.max()) + 1
            )
        rope = RotaryEmbedding(d_head, max_seq_len, rope_base, rope_convention, device=x.device)
    result = _attend_heads(
        F.linear(x, q_weight, q_bias),
        F.linear(x, k_weight, k_bias),
        F.linear(x, v_weight, v_bias),
        num_heads=num_heads,
        causal=causal,
        mask=mask,
        rope=rope,
        token_positions=token_positions,
        cache=None,
        dropout_p=0.0,
        need_weights=need_weights,
    )
    if need_weights:
        heads, weights = result
        return F.linear(heads, o_weight, o_bias), weights
    return F.linear(result, o_weight, o_bias)  # type: ignore[arg-type]
