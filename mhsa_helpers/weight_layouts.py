"""Where the weights of multi-head attention come from, and how their layouts convert.

Taught in notebook 04: per-head matrices (section 2) and one big matrix cut into heads
(section 3), the fused QKV row orders (optional section 9), and the weights of
``torch.nn.MultiheadAttention`` (optional section 10); the paper's ``E @ W`` layout in notebook 01
("Paper layout versus PyTorch layout"); the RoPE weight permutation in notebook 05, section 9.

Two equivalent views of multi-head projections:

* per head: ``h`` separate matrices per projection, one per head, each ``(d_head, d_in)``
  in PyTorch's layout (notebook 01's "Money Bank Grows");
* stacked (PyTorch): one big ``(h * d_head, d_in)`` matrix whose rows
  ``i*d_head:(i+1)*d_head`` belong to head ``i``.

Fused QKV matrices come in two row orders:

* ``"stacked"`` (``nn.MultiheadAttention.in_proj_weight``, nanoGPT's ``c_attn``):
  ``[W_Q; W_K; W_V]``, each ``(d_model, d_in)``;
* ``"per_head"``: for each head in turn, its ``[q | k | v]`` rows, each block ``(d_head, d_in)``.

Weights use PyTorch's ``nn.Linear`` layout ``(d_out, d_in)``, applied as ``x @ W^T``.
Pen-and-paper notes write ``E @ W`` with ``W (d_in, d_out)``: the loaders take a required
``layout`` argument, ``"out_in"`` or ``"in_out"``, and never guess it from the shape (a square
toy matrix fits both).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from .checks import expect_choice, expect_divisible, expect_int, expect_matrix, expect_shape, expect_tensor
from .mha import MultiHeadSelfAttention, expect_kv_heads
from .rope import ROPE_CONVENTIONS, expect_even_d_head

__all__ = [
    "FUSED_QKV_LAYOUTS",
    "WEIGHT_LAYOUTS",
    "from_fused_qkv",
    "from_head_weights",
    "from_projection_weights",
    "from_torch_mha",
    "fused_qkv_per_head_to_stacked",
    "fused_qkv_stacked_to_per_head",
    "permute_rope_weight",
    "rope_permutation",
    "stack_head_weights",
    "unstack_head_weights",
]

#: How a loader reads a weight matrix: PyTorch's ``(d_out, d_in)``, or the paper's ``(d_in, d_out)``.
WEIGHT_LAYOUTS = ("out_in", "in_out")
#: The row orders of a fused QKV matrix.
FUSED_QKV_LAYOUTS = ("stacked", "per_head")
#: Constructor arguments that a loader reads off the weights; passing them too is an error.
SET_BY_THE_WEIGHTS = (
    "d_model",
    "num_heads",
    "num_kv_heads",
    "d_in",
    "d_out",
    "qkv_bias",
    "out_bias",
    "device",
    "dtype",
)

# ----------------------------------------------------------------------------- per head <-> stacked


def stack_head_weights(head_weights: Sequence[torch.Tensor]) -> torch.Tensor:
    """Per-head projection matrices ``h x (d_head, d_in)`` -> one ``(h * d_head, d_in)``.

    Both sides are in PyTorch's ``(d_out, d_in)`` layout; transpose matrices written as
    ``E @ W`` with ``W (d_in, d_head)`` first.
    """
    if isinstance(head_weights, torch.Tensor) or len(head_weights) == 0:
        raise TypeError(
            f"head_weights must be a non-empty list of (d_head, d_in) tensors, got {type(head_weights).__name__}"
        )
    for index, weight in enumerate(head_weights):
        name = f"head_weights[{index}]"
        if expect_tensor(name, weight).ndim != 2:
            raise ValueError(f"{name} must be a 2-D (d_head, d_in) matrix, got shape {tuple(weight.shape)}")
        if weight.shape != head_weights[0].shape:
            raise ValueError(
                f"{name} must have the shape of head_weights[0] {tuple(head_weights[0].shape)}, "
                f"got shape {tuple(weight.shape)}"
            )
    return torch.cat(list(head_weights), dim=0)


def unstack_head_weights(weight: torch.Tensor, num_heads: int) -> list[torch.Tensor]:
    """One ``(h * d_head, d_in)`` projection matrix -> ``h`` matrices ``(d_head, d_in)``."""
    if expect_tensor("weight", weight).ndim != 2:
        raise ValueError(f"weight must be 2-D (h * d_head, d_in), got shape {tuple(weight.shape)}")
    expect_divisible("weight.shape[0]", weight.shape[0], "num_heads", expect_int("num_heads", num_heads))
    return list(weight.chunk(num_heads, dim=0))


# ----------------------------------------------------------------------------- fused QKV row orders


def fused_qkv_per_head_to_stacked(weight: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Per-head ``[q|k|v]`` row blocks -> PyTorch's stacked ``[Q; K; V]``.

    Shapes: ``(3 * d_model, d_in)`` weight or ``(3 * d_model,)`` bias, same shape out.
    """
    if expect_tensor("weight", weight).ndim not in (1, 2):
        raise ValueError(
            f"weight must be a (3 * d_model, d_in) weight or a (3 * d_model,) bias, got shape {tuple(weight.shape)}"
        )
    d_head = expect_divisible(
        "weight.shape[0]", weight.shape[0], "3 * num_heads", 3 * expect_int("num_heads", num_heads)
    )
    # rows are indexed (head, part, i); reorder to (part, head, i)
    return weight.reshape(num_heads, 3, d_head, *weight.shape[1:]).transpose(0, 1).reshape(weight.shape)


def fused_qkv_stacked_to_per_head(weight: torch.Tensor, num_heads: int) -> torch.Tensor:
    """PyTorch's stacked ``[Q; K; V]`` rows -> per-head ``[q|k|v]`` blocks.

    Shapes: ``(3 * d_model, d_in)`` weight or ``(3 * d_model,)`` bias, same shape out.
    """
    if expect_tensor("weight", weight).ndim not in (1, 2):
        raise ValueError(
            f"weight must be a (3 * d_model, d_in) weight or a (3 * d_model,) bias, got shape {tuple(weight.shape)}"
        )
    d_head = expect_divisible(
        "weight.shape[0]", weight.shape[0], "3 * num_heads", 3 * expect_int("num_heads", num_heads)
    )
    # rows are indexed (part, head, i); reorder to (head, part, i)
    return weight.reshape(3, num_heads, d_head, *weight.shape[1:]).transpose(0, 1).reshape(weight.shape)


# ----------------------------------------------------------------------------- RoPE pairing conventions


def rope_permutation(d_head: int, source: str, target: str) -> torch.Tensor:
    """Index ``perm`` with ``rope_target(x[..., perm]) == rope_source(x)[..., perm]``.

    Reordering a head's q/k features by ``perm`` turns a model trained with the
    ``source`` pairing into one that uses the ``target`` pairing with identical scores.
    Shape ``(d_head,)``, int64.
    """
    expect_even_d_head(d_head)
    expect_choice("source", source, ROPE_CONVENTIONS)
    expect_choice("target", target, ROPE_CONVENTIONS)
    if source == target:
        return torch.arange(d_head)
    interleaved_to_half = torch.cat((torch.arange(0, d_head, 2), torch.arange(1, d_head, 2)))
    if source == "interleaved":
        return interleaved_to_half
    return torch.argsort(interleaved_to_half)


def permute_rope_weight(weight: torch.Tensor, num_heads: int, source: str, target: str) -> torch.Tensor:
    """Reorder the output rows of a q or k projection from one RoPE pairing to the other.

    Shapes: ``weight (num_heads * d_head, d_in)`` in PyTorch's ``(d_out, d_in)`` layout,
    or a bias ``(num_heads * d_head,)``; same shape out. Apply it to ``W_Q`` and ``W_K``
    (never ``W_V``); attention scores and outputs are unchanged.
    """
    if expect_tensor("weight", weight).ndim not in (1, 2):
        raise ValueError(
            f"weight must be a (num_heads * d_head, d_in) matrix or a (num_heads * d_head,) bias, "
            f"got shape {tuple(weight.shape)}"
        )
    d_head = expect_divisible("weight.shape[0]", weight.shape[0], "num_heads", expect_int("num_heads", num_heads))
    perm = rope_permutation(d_head, source, target).to(weight.device)
    heads = weight.reshape(num_heads, d_head, *weight.shape[1:])
    return heads[:, perm].reshape(weight.shape)


# ----------------------------------------------------------------------------- loaders


def from_projection_weights(
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    v_weight: torch.Tensor,
    o_weight: torch.Tensor,
    *,
    num_heads: int,
    layout: str,
    q_bias: torch.Tensor | None = None,
    k_bias: torch.Tensor | None = None,
    v_bias: torch.Tensor | None = None,
    o_bias: torch.Tensor | None = None,
    **options: Any,
) -> MultiHeadSelfAttention:
    """A module holding copies of four projection matrices.

    ``layout="out_in"``: ``W_Q, W_K, W_V (d_model, d_in)``, ``W_O (d_out, d_model)``
    (``nn.Linear.weight``, used as ``x @ W.T``).
    ``layout="in_out"``: ``W_Q, W_K, W_V (d_in, d_model)``, ``W_O (d_model, d_out)``
    (written ``E @ W`` on paper). Missing q/k/v biases are zero when any is given.
    ``options`` go to the constructor (``causal``, ``rope``, ``dropout``, ...); sizes,
    biases, device and dtype come from the weights.
    """
    expect_loader_options(options)
    names = ("q_weight", "k_weight", "v_weight", "o_weight")
    weights = [expect_matrix(name, w) for name, w in zip(names, (q_weight, k_weight, v_weight, o_weight), strict=True)]
    if expect_choice("layout", layout, WEIGHT_LAYOUTS) == "in_out":
        weights = [w.transpose(0, 1) for w in weights]
    q_w, k_w, v_w, o_w = weights
    d_model, d_in = q_w.shape
    d_head = expect_divisible("d_model", d_model, "num_heads", expect_int("num_heads", num_heads))
    expected = "(d_model, d_in)" if layout == "out_in" else "(d_in, d_model)"
    for name, weight in zip(names[1:3], (k_w, v_w), strict=True):
        # Grouped-query attention: fewer key/value heads than query heads, so fewer rows.
        rows = weight.shape[0]
        grouped = weight.shape[1] == d_in and rows % d_head == 0 and num_heads % max(rows // d_head, 1) == 0
        if weight.shape != k_w.shape or not (weight.shape == q_w.shape or (grouped and rows > 0)):
            shown = tuple(weight.shape) if layout == "out_in" else tuple(weight.shape[::-1])
            wanted = tuple(q_w.shape) if layout == "out_in" else tuple(q_w.shape[::-1])
            raise ValueError(
                f"{name} must have the shape of q_weight {wanted} {expected} with layout={layout!r} (or, for "
                f"grouped-query attention, num_kv_heads * d_head rows with num_kv_heads dividing "
                f"num_heads={num_heads}, the same for k_weight and v_weight), got shape {shown}"
            )
    if o_w.shape[1] != d_model:
        raise ValueError(
            f"o_weight must take the d_model={d_model} concatenated head features: expected shape "
            + (f"(d_out, {d_model})" if layout == "out_in" else f"({d_model}, d_out)")
            + f" with layout={layout!r}, got shape {tuple(o_weight.shape)}"
        )
    sizes = (d_model, k_w.shape[0], v_w.shape[0], o_w.shape[0])
    for name, bias, size in zip(
        ("q_bias", "k_bias", "v_bias", "o_bias"), (q_bias, k_bias, v_bias, o_bias), sizes, strict=True
    ):
        if bias is not None:
            expect_shape(name, bias, (size,))
    qkv_biases = (q_bias, k_bias, v_bias)
    has_qkv_bias = any(b is not None for b in qkv_biases)
    module = MultiHeadSelfAttention(
        d_model,
        num_heads,
        # Fewer key/value rows than query rows: grouped-query attention.
        num_kv_heads=k_w.shape[0] // d_head,
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
            module.qkv_proj.bias.copy_(
                torch.cat(
                    [
                        torch.zeros(size, dtype=q_w.dtype, device=q_w.device) if b is None else b
                        for b, size in zip(qkv_biases, sizes[:3], strict=True)
                    ]
                )
            )
        if o_bias is not None:
            module.out_proj.bias.copy_(o_bias)
    return module


def from_head_weights(
    q_heads: Sequence[torch.Tensor],
    k_heads: Sequence[torch.Tensor],
    v_heads: Sequence[torch.Tensor],
    o_weight: torch.Tensor,
    *,
    layout: str,
    **options: Any,
) -> MultiHeadSelfAttention:
    """A module from one set of ``W_Q^i, W_K^i, W_V^i`` per head (notebook 01's view).

    ``layout="in_out"``: each head matrix is ``(d_in, d_head)`` and ``W_O`` is
    ``(heads * d_head, d_out)``; ``"out_in"``: ``(d_head, d_in)`` and ``(d_out, heads * d_head)``.
    Head ``i`` becomes rows ``i*d_head:(i+1)*d_head`` of the stacked projections.
    """
    expect_loader_options(options)
    expect_choice("layout", layout, WEIGHT_LAYOUTS)
    # Checked in the caller's layout and names: the stacked weights would report transposed
    # shapes under other names (head_weights[i], q_weight).
    lists = {"q_heads": q_heads, "k_heads": k_heads, "v_heads": v_heads}
    for name, heads in lists.items():
        if isinstance(heads, torch.Tensor) or not isinstance(heads, (list, tuple)) or not heads:
            raise TypeError(f"{name} must be a non-empty list of per-head matrices, got {type(heads).__name__}")
        if len(heads) != len(q_heads):
            raise ValueError(f"{name} must hold one matrix per head ({len(q_heads)}), got {len(heads)}")
    head_shape = "(d_in, d_head)" if layout == "in_out" else "(d_head, d_in)"
    for name, heads in lists.items():
        for index, head in enumerate(heads):
            if expect_matrix(f"{name}[{index}]", head).shape != q_heads[0].shape:
                raise ValueError(
                    f"{name}[{index}] must have the shape of q_heads[0] {tuple(q_heads[0].shape)} "
                    f"{head_shape} with layout={layout!r}, got shape {tuple(head.shape)}"
                )
    d_model = len(q_heads) * q_heads[0].shape[1 if layout == "in_out" else 0]
    if expect_matrix("o_weight", o_weight).shape[0 if layout == "in_out" else 1] != d_model:
        expected = f"({d_model}, d_out)" if layout == "in_out" else f"(d_out, {d_model})"
        raise ValueError(
            f"o_weight must take the {len(q_heads)} heads' {d_model} concatenated features: expected shape "
            f"{expected} with layout={layout!r}, got shape {tuple(o_weight.shape)}"
        )
    if layout == "in_out":
        q_heads, k_heads, v_heads = ([head.transpose(0, 1) for head in heads] for heads in (q_heads, k_heads, v_heads))
        o_weight = o_weight.transpose(0, 1)
    q_w, k_w, v_w = (stack_head_weights(heads) for heads in (q_heads, k_heads, v_heads))
    return from_projection_weights(q_w, k_w, v_w, o_weight, num_heads=len(q_heads), layout="out_in", **options)


def from_fused_qkv(
    qkv_weight: torch.Tensor,
    o_weight: torch.Tensor,
    *,
    num_heads: int,
    fused_layout: str,
    num_kv_heads: int | None = None,
    qkv_bias: torch.Tensor | None = None,
    o_bias: torch.Tensor | None = None,
    **options: Any,
) -> MultiHeadSelfAttention:
    """A module from one fused ``(3 * d_model, d_in)`` QKV matrix (``nn.Linear`` layout).

    ``fused_layout="stacked"``: rows ``[W_Q; W_K; W_V]`` (PyTorch, nanoGPT); with
    ``num_kv_heads`` (grouped-query attention) ``W_K`` and ``W_V`` have ``num_kv_heads * d_head``
    rows each, ``(num_heads + 2 * num_kv_heads) * d_head`` in all.
    ``"per_head"``: for each head its ``[q|k|v]`` row blocks (one key/value head per query head).
    ``o_weight`` is ``(d_out, d_model)``.
    """
    expect_loader_options(options)
    expect_choice("fused_layout", fused_layout, FUSED_QKV_LAYOUTS)
    rows = expect_matrix("qkv_weight", qkv_weight, "(3 * d_model, d_in) matrix").shape[0]
    kv_heads = expect_kv_heads(expect_int("num_heads", num_heads), num_kv_heads)
    if kv_heads != num_heads and fused_layout == "per_head":
        raise ValueError(
            "fused_layout='per_head' holds one [q|k|v] block per head, so num_kv_heads must equal num_heads "
            f"there; got num_heads={num_heads}, num_kv_heads={kv_heads} (use fused_layout='stacked')"
        )
    what = "3 * num_heads" if kv_heads == num_heads else "num_heads + 2 * num_kv_heads"
    d_head = expect_divisible("qkv_weight.shape[0]", rows, what, num_heads + 2 * kv_heads)
    if qkv_bias is not None:
        expect_shape("qkv_bias", qkv_bias, (rows,))
    if fused_layout == "per_head":
        qkv_weight = fused_qkv_per_head_to_stacked(qkv_weight, num_heads)
        if qkv_bias is not None:
            qkv_bias = fused_qkv_per_head_to_stacked(qkv_bias, num_heads)
    sizes = [num_heads * d_head, kv_heads * d_head, kv_heads * d_head]
    q_w, k_w, v_w = torch.split(qkv_weight, sizes, dim=0)
    q_b, k_b, v_b = (None, None, None) if qkv_bias is None else torch.split(qkv_bias, sizes)
    return from_projection_weights(
        q_w,
        k_w,
        v_w,
        o_weight,
        num_heads=num_heads,
        layout="out_in",
        q_bias=q_b,
        k_bias=k_b,
        v_bias=v_b,
        o_bias=o_bias,
        **options,
    )


def from_torch_mha(mha: nn.MultiheadAttention, **options: Any) -> MultiHeadSelfAttention:
    """A module with the weights of a ``torch.nn.MultiheadAttention`` (self-attention use).

    Masks are not copied: pass ``causal=True`` or a ``mask`` (True = may attend; PyTorch's
    boolean ``attn_mask`` uses True = blocked, so pass ``~attn_mask``). ``mha.dropout`` is
    copied unless ``dropout`` is given.

    Inputs: this module takes ``(batch, seq, d)``; an ``nn.MultiheadAttention`` built with
    ``batch_first=False`` (the default) takes ``(seq, batch, d)``, so compare
    ``module(x)`` with ``mha(x_t, x_t, x_t)[0].transpose(0, 1)`` for ``x_t = x.transpose(0, 1)``.
    """
    expect_loader_options(options)
    if not isinstance(mha, nn.MultiheadAttention):
        raise TypeError(f"mha must be a torch.nn.MultiheadAttention, got {type(mha).__name__}")
    if mha.in_proj_weight is None:
        raise ValueError("mha must have kdim == vdim == embed_dim (self-attention), got separate kdim/vdim")
    if mha.bias_k is not None or mha.add_zero_attn:
        raise ValueError("mha must not use add_bias_kv or add_zero_attn, which add an extra key position")
    options.setdefault("dropout", mha.dropout)
    return from_fused_qkv(
        mha.in_proj_weight.detach(),
        mha.out_proj.weight.detach(),
        num_heads=mha.num_heads,
        fused_layout="stacked",
        qkv_bias=None if mha.in_proj_bias is None else mha.in_proj_bias.detach(),
        o_bias=None if mha.out_proj.bias is None else mha.out_proj.bias.detach(),
        **options,
    )


def expect_loader_options(options: dict[str, object]) -> None:
    """A loader's options may not set what it reads off the weights."""
    taken = [name for name in SET_BY_THE_WEIGHTS if name in options]
    if taken:
        raise TypeError(
            f"{', '.join(taken)} cannot be passed to a loader: it reads sizes, which biases exist, device and "
            f"dtype off the weights; its options may only be causal, dropout, rope, rope_base, rope_convention "
            f"or max_seq_len — convert afterwards with module.to(device, dtype)"
        )
