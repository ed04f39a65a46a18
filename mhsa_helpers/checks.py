"""Every argument check of the package, in one place.

Public functions check their arguments once, at the entry point, and then compute: a function
decorated with ``@checked_by(checks.split_heads_args)`` runs ``split_heads_args`` with the same
arguments first. The function without its check is kept as ``split_heads.unchecked``, which is
what a caller that has already checked everything uses (``MultiHeadSelfAttention.forward`` calls
``split_heads.unchecked(q, num_heads)``). Methods call their check on their first line.

Every message names the argument, what was expected and what was given, so a learner sees
*which* input is wrong instead of a reshape traceback from deep inside the computation.

The module reads in three parts: the decorator; small building blocks (``check_tensor``,
``check_ndim``, ...); then one ``<function>_args`` check per public entry point, in the order
the notebooks teach them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ParamSpec, Protocol, TypeVar, cast

import numpy as np
import torch
from torch import nn

if TYPE_CHECKING:
    from .kv_cache import KVCache
    from .mha import MultiHeadSelfAttention
    from .rope import RotaryEmbedding

P = ParamSpec("P")
R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)

#: The accepted spellings of the string options (re-exported by the modules that use them).
ROPE_CONVENTIONS = ("interleaved", "half_split")
WEIGHT_LAYOUTS = ("out_in", "in_out")
FUSED_QKV_LAYOUTS = ("stacked", "per_head")

# ----------------------------------------------------------------------------- the decorator


class Checked(Protocol[P, R_co]):
    """A function that checks its arguments, and the same function without the check."""

    @property
    def unchecked(self) -> Callable[P, R_co]: ...

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R_co: ...


def checked_by(check: Callable[P, object]) -> Callable[[Callable[P, R]], Checked[P, R]]:
    """Decorate a function so that ``check`` (same signature) runs on its arguments first.

    The result keeps the function's name, signature and docstring; ``.unchecked`` is the
    function itself, for callers whose arguments are already checked.
    """

    def decorate(function: Callable[P, R]) -> Checked[P, R]:
        @functools.wraps(function)
        def checked(*args: P.args, **kwargs: P.kwargs) -> R:
            check(*args, **kwargs)
            return function(*args, **kwargs)

        checked.unchecked = function  # type: ignore[attr-defined]  # a plain function attribute, typed by Checked
        return cast("Checked[P, R]", checked)

    return decorate


# ----------------------------------------------------------------------------- building blocks


def check_tensor(name: str, value: object) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    return value


def check_floating(name: str, value: object) -> torch.Tensor:
    tensor = check_tensor(name, value)
    if not tensor.is_floating_point():
        raise TypeError(
            f"{name} must have a floating-point dtype (float16, bfloat16, float32 or float64), got dtype {tensor.dtype}"
        )
    return tensor


def check_ndim(name: str, value: torch.Tensor, min_ndim: int, shape_hint: str) -> None:
    if value.ndim < min_ndim:
        raise ValueError(
            f"{name} must have at least {min_ndim} dimensions {shape_hint}, got shape {tuple(value.shape)}"
        )


def check_size(name: str, value: torch.Tensor, dim: int, expected: int, what: str) -> None:
    if value.shape[dim] != expected:
        raise ValueError(
            f"{name} must have size {expected} ({what}) in dimension {dim}, got shape {tuple(value.shape)}"
        )


def check_positive_int(name: str, value: object, allow_zero: bool = False) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    lowest = 0 if allow_zero else 1
    if value < lowest:
        raise ValueError(f"{name} must be >= {lowest}, got {value}")
    return value


def check_int(name: str, value: object, low: int, high: int | None = None, why: str = "") -> int:
    """An int (numpy ints too, never a bool) in ``[low, high]`` (``high=None``: no upper bound);
    ``why`` is appended to the requirement, e.g. ``" (one of the heads)"``."""
    bounds = f">= {low}" if high is None else f"in [{low}, {high}]"
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r} (expected {bounds}{why})")
    if int(value) < low or (high is not None and int(value) > high):
        raise ValueError(f"{name} must be {bounds}{why}, got {name}={value}")
    return int(value)


def check_divisible(total_name: str, total: int, parts_name: str, parts: int) -> int:
    if total % parts != 0:
        # "x % (3 * num_heads)", not "x % 3 * num_heads"
        divisor = f"({parts_name})" if " " in parts_name else parts_name
        raise ValueError(
            f"{parts_name} must divide {total_name}: expected {total_name} % {divisor} == 0, "
            f"got {total_name}={total}, {parts_name}={parts}"
        )
    return total // parts


def check_same_dtype(name: str, value: torch.Tensor, reference_name: str, reference: torch.Tensor) -> None:
    if value.dtype != reference.dtype:
        raise TypeError(f"{name} must have the same dtype as {reference_name} ({reference.dtype}), got {value.dtype}")


def broadcast_shape(*shapes: Sequence[int]) -> tuple[int, ...] | None:
    """The shape the given shapes broadcast to, or ``None`` if they do not broadcast."""
    try:
        return tuple(torch.broadcast_shapes(*shapes))  # type: ignore[no-untyped-call]  # torch leaves it unannotated
    except RuntimeError:
        return None


def check_broadcasts_to(name: str, value: torch.Tensor, target_shape: Sequence[int], target_desc: str) -> None:
    """``value`` broadcasts to ``target_shape`` *without growing it* (the result keeps the target's shape)."""
    if broadcast_shape(tuple(value.shape), tuple(target_shape)) != tuple(target_shape):
        raise ValueError(
            f"{name} must be broadcastable to {target_desc} = {tuple(target_shape)}, got shape {tuple(value.shape)}"
        )


def check_bool_mask(
    name: str,
    mask: object,
    target_shape: Sequence[int],
    target_desc: str,
    device: torch.device | None = None,
) -> None:
    mask = check_tensor(name, mask)
    if mask.dtype != torch.bool:
        raise TypeError(
            f"{name} must be a boolean tensor where True means 'may attend', got dtype {mask.dtype}; "
            f"convert a 0/1 mask with mask.bool(), or a 'True = blocked' mask with ~mask"
        )
    check_broadcasts_to(name, mask, target_shape, target_desc)
    if device is not None and mask.device != device:
        raise ValueError(
            f"{name} must be on the device of the tensors it masks ({device}), got device {mask.device}; "
            f"move it with .to({str(device)!r})"
        )


def check_choice(name: str, value: object, choices: Sequence[str]) -> str:
    if not isinstance(value, str) or value not in choices:
        options = ", ".join(repr(c) for c in choices)
        raise ValueError(f"{name} must be one of {options}, got {value!r}")
    return value


def check_probability(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a float in [0, 1), got {type(value).__name__} {value!r}")
    if not 0.0 <= float(value) < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {value}")
    return float(value)


def check_bias(name: str, bias: object, size: int, dtype: torch.dtype | None = None) -> None:
    bias = check_floating(name, bias)
    if tuple(bias.shape) != (size,):
        raise ValueError(f"{name} must have shape ({size},), got shape {tuple(bias.shape)}")
    if dtype is not None and bias.dtype != dtype:
        raise TypeError(f"{name} must have the dtype of x ({dtype}), got {bias.dtype}")


def check_matrix(name: str, weight: object, hint: str = "matrix") -> torch.Tensor:
    weight = check_floating(name, weight)
    if weight.ndim != 2:
        raise ValueError(f"{name} must be a 2-D {hint}, got shape {tuple(weight.shape)}")
    return weight


def check_even_d_head(d_head: int, what: str = "d_head", given: str = "") -> None:
    """RoPE rotates dimensions in pairs. ``what`` says where d_head comes from, ``given`` shows
    the caller's values (default ``d_head=<d_head>``)."""
    if d_head % 2:
        raise ValueError(
            f"{what} must be even for RoPE (dimensions are rotated in pairs), got {given or f'd_head={d_head}'}"
        )


def check_rope_base(base: object) -> float:
    if isinstance(base, bool) or not isinstance(base, (int, float)):
        raise TypeError(f"base must be a number > 1 (10000 in most models), got {type(base).__name__} {base!r}")
    if not base > 1:
        raise ValueError(f"base must be a number > 1 (10000 in most models), got {base!r}")
    return float(base)


def check_integer_positions(token_positions: object) -> torch.Tensor:
    token_positions = check_tensor("token_positions", token_positions)
    if token_positions.is_floating_point() or token_positions.is_complex() or token_positions.dtype == torch.bool:
        raise TypeError(f"token_positions must be an integer tensor, got dtype {token_positions.dtype}")
    return token_positions


def check_positions_in_range(low: int, high: int, max_seq_len: int) -> None:
    """Positions ``low .. high`` must have a cached angle: ``0 <= low`` and ``high < max_seq_len``."""
    if low < 0 or high >= max_seq_len:
        raise ValueError(
            f"token_positions must lie in [0, max_seq_len - 1] = [0, {max_seq_len - 1}], "
            f"got values from {low} to {high}; build RotaryEmbedding with a larger max_seq_len"
        )


def check_positions_tensor_in_range(token_positions: torch.Tensor, max_seq_len: int) -> None:
    if token_positions.numel():
        check_positions_in_range(int(token_positions.min()), int(token_positions.max()), max_seq_len)


# ----------------------------------------------------------------------------- softmax and attention


def softmax_args(x: torch.Tensor, dim: int = -1) -> None:
    check_floating("x", x)


def check_qk(q: torch.Tensor, k: torch.Tensor) -> None:
    check_floating("q", q)
    check_floating("k", k)
    check_ndim("q", q, 2, "(..., seq_q, d_k)")
    check_ndim("k", k, 2, "(..., seq_k, d_k)")
    check_same_dtype("k", k, "q", q)
    if k.shape[-1] != q.shape[-1]:
        raise ValueError(
            f"k must have the same last dimension d_k as q: expected k.shape[-1] == {q.shape[-1]}, "
            f"got q shape {tuple(q.shape)} and k shape {tuple(k.shape)}"
        )


def check_batch_dims(**tensors: torch.Tensor) -> tuple[int, ...]:
    """The leading (batch) dimensions of the tensors, all but their last two, broadcast together."""
    batch_shapes = [tuple(t.shape[:-2]) for t in tensors.values()]
    if all(shape == batch_shapes[0] for shape in batch_shapes):
        # The usual case, and torch.broadcast_shapes costs ~10 us a call.
        return batch_shapes[0]
    batch = broadcast_shape(*batch_shapes)
    if batch is None:
        names = list(tensors)
        together = ", ".join(names[:-1]) + " and " + names[-1]
        given = ", ".join(f"{name} shape {tuple(t.shape)}" for name, t in tensors.items())
        raise ValueError(f"{together} must have broadcastable batch dimensions, got {given}")
    return batch


def attention_scores_args(q: torch.Tensor, k: torch.Tensor, scale: float | None = None) -> None:
    check_qk(q, k)
    check_batch_dims(q=q, k=k)


def attend_args(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    is_causal: bool = False,
    scale: float | None = None,
    dropout_p: float = 0.0,
    need_weights: bool = False,
    bias: torch.Tensor | None = None,
) -> None:
    check_qk(q, k)
    check_floating("v", v)
    check_ndim("v", v, 2, "(..., seq_k, d_v)")
    check_same_dtype("v", v, "q", q)
    seq_q, seq_k = q.shape[-2], k.shape[-2]
    if v.shape[-2] != seq_k:
        raise ValueError(
            f"v must have one row per key: expected v.shape[-2] == seq_k == {seq_k}, "
            f"got k shape {tuple(k.shape)} and v shape {tuple(v.shape)}"
        )
    if seq_q == 0 or seq_k == 0:
        raise ValueError(
            f"q and k must hold at least one position (seq >= 1), got q shape {tuple(q.shape)} "
            f"and k shape {tuple(k.shape)}"
        )
    batch = check_batch_dims(q=q, k=k, v=v)
    check_probability("dropout_p", dropout_p)
    if mask is not None:
        check_bool_mask("mask", mask, (*batch, seq_q, seq_k), "(..., seq_q, seq_k)", device=q.device)
    if bias is not None:
        check_floating("bias", bias)
        check_broadcasts_to("bias", bias, (*batch, seq_q, seq_k), "(..., seq_q, seq_k)")
    if is_causal and seq_q > seq_k:
        raise ValueError(
            f"is_causal needs seq_q <= seq_k (queries are the last seq_q positions), got seq_q={seq_q}, seq_k={seq_k}"
        )


# ----------------------------------------------------------------------------- masks


def causal_mask_args(seq_q: int, seq_k: int | None = None, *, device: str | torch.device | None = None) -> None:
    check_positive_int("seq_q", seq_q)
    if seq_k is not None:
        check_positive_int("seq_k", seq_k)
        if seq_q > seq_k:
            raise ValueError(
                f"seq_q must be <= seq_k (queries are the last seq_q of seq_k positions), "
                f"got seq_q={seq_q}, seq_k={seq_k}"
            )


def padding_mask_args(lengths: torch.Tensor, seq_len: int) -> None:
    check_tensor("lengths", lengths)
    check_positive_int("seq_len", seq_len)
    if lengths.is_floating_point() or lengths.is_complex() or lengths.dtype == torch.bool:
        raise TypeError(f"lengths must be an integer tensor (token counts), got dtype {lengths.dtype}")
    if lengths.ndim != 1:
        raise ValueError(f"lengths must be 1-D, one length per sequence (batch,), got shape {tuple(lengths.shape)}")
    if lengths.numel() and (int(lengths.min()) < 0 or int(lengths.max()) > seq_len):
        raise ValueError(
            f"lengths must lie in [0, seq_len={seq_len}], got values from {int(lengths.min())} to {int(lengths.max())}"
        )


def combine_masks_args(*masks: torch.Tensor | None) -> None:
    combined: tuple[int, ...] | None = None
    for index, mask in enumerate(masks):
        if mask is None:
            continue
        check_tensor(f"masks[{index}]", mask)
        if mask.dtype != torch.bool:
            raise TypeError(f"masks[{index}] must be a boolean tensor (True = may attend), got dtype {mask.dtype}")
        if combined is None:
            combined = tuple(mask.shape)
            continue
        together = broadcast_shape(combined, tuple(mask.shape))
        if together is None:
            raise ValueError(
                f"masks[{index}] of shape {tuple(mask.shape)} cannot be broadcast with the masks "
                f"before it, of combined shape {combined}"
            )
        combined = together


def masked_softmax_args(scores: torch.Tensor, mask: torch.Tensor) -> None:
    check_floating("scores", scores)
    check_bool_mask("mask", mask, scores.shape, "scores.shape", device=scores.device)


# ----------------------------------------------------------------------------- heads


def split_heads_args(x: torch.Tensor, num_heads: int) -> None:
    check_tensor("x", x)
    check_ndim("x", x, 2, "(..., seq, d_model)")
    check_positive_int("num_heads", num_heads)
    check_divisible("d_model (x.shape[-1])", x.shape[-1], "num_heads", num_heads)


def merge_heads_args(x: torch.Tensor) -> None:
    check_tensor("x", x)
    check_ndim("x", x, 3, "(..., heads, seq, d_head)")


# ----------------------------------------------------------------------------- RoPE


def rope_frequencies_args(
    d_head: int,
    base: float = 10000.0,
    *,
    device: str | torch.device | None = None,
    dtype: torch.dtype = torch.float32,
) -> None:
    check_positive_int("d_head", d_head)
    check_even_d_head(d_head)
    check_rope_base(base)


def rope_angles_args(token_positions: torch.Tensor, d_head: int, base: float = 10000.0) -> None:
    check_integer_positions(token_positions)
    check_positive_int("d_head", d_head)
    check_even_d_head(d_head)
    check_rope_base(base)
    if token_positions.numel() and int(token_positions.min()) < 0:
        raise ValueError(f"token_positions must be >= 0, got values from {int(token_positions.min())}")


def apply_rotary_args(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, convention: str = "interleaved") -> None:
    check_floating("x", x)
    check_ndim("x", x, 2, "(..., seq, d_head)")
    check_even_d_head(x.shape[-1], "x's last dimension d_head", f"x of shape {tuple(x.shape)}")
    pairs_shape = (*x.shape[:-1], x.shape[-1] // 2)
    for name, value in (("cos", cos), ("sin", sin)):
        check_tensor(name, value)
        check_broadcasts_to(name, value, pairs_shape, "(..., seq, d_head // 2)")
    check_choice("convention", convention, ROPE_CONVENTIONS)


def rotary_embedding_args(
    d_head: int,
    max_seq_len: int = 2048,
    base: float = 10000.0,
    convention: str = "interleaved",
    *,
    device: str | torch.device | None = None,
) -> None:
    check_positive_int("d_head", d_head)
    check_even_d_head(d_head)
    check_positive_int("max_seq_len", max_seq_len)
    check_rope_base(base)
    check_choice("convention", convention, ROPE_CONVENTIONS)


def rotary_positions_args(rope: RotaryEmbedding, token_positions: torch.Tensor) -> None:
    check_integer_positions(token_positions)
    check_positions_tensor_in_range(token_positions, rope.max_seq_len)


def rotary_call_args(rope: RotaryEmbedding, x: torch.Tensor, token_positions: torch.Tensor | None) -> None:
    check_floating("x", x)
    check_ndim("x", x, 2, "(..., seq, d_head)")
    if x.shape[-1] != rope.d_head:
        raise ValueError(f"x must have last dimension d_head={rope.d_head}, got shape {tuple(x.shape)}")
    if token_positions is None:
        check_positions_in_range(0, x.shape[-2] - 1, rope.max_seq_len)
        return
    check_tensor("token_positions", token_positions)
    if token_positions.ndim > 1 and token_positions.ndim != x.ndim - 1:
        raise ValueError(
            f"token_positions must be (seq,) or have x.ndim - 1 = {x.ndim - 1} dimensions, one per "
            f"dimension of x.shape[:-1] = {tuple(x.shape[:-1])} (for x (batch, heads, seq, d_head) pass "
            f"positions[:, None, :], shaped (batch, 1, seq)), got shape {tuple(token_positions.shape)}"
        )
    # Strict: positions that broadcast x up to a bigger shape are a mistake, not a feature.
    check_broadcasts_to("token_positions", token_positions, x.shape[:-1], "x.shape[:-1]")
    rotary_positions_args(rope, token_positions)


# ----------------------------------------------------------------------------- the key/value cache


def kv_cache_args(cache: KVCache, keys: torch.Tensor, values: torch.Tensor) -> None:
    check_tensor("keys", keys)
    check_tensor("values", values)
    check_ndim("keys", keys, 2, "(..., new, d_head)")
    check_ndim("values", values, 2, "(..., new, d_v)")
    if values.shape[:-1] != keys.shape[:-1]:
        raise ValueError(
            f"values must have one row per key, with the same leading dimensions: expected "
            f"values.shape[:-1] == keys.shape[:-1] = {tuple(keys.shape[:-1])}, got values of shape "
            f"{tuple(values.shape)}"
        )
    if values.dtype != keys.dtype:
        raise TypeError(f"values must have the dtype of keys ({keys.dtype}), got {values.dtype}")
    if values.device != keys.device:
        raise ValueError(f"values must be on the device of keys ({keys.device}), got device {values.device}")
    check_cache_room(cache, keys.shape[-2])
    held, held_values = cache.keys, cache.values
    if held is None or held_values is None:
        return
    if keys.shape[:-2] != held.shape[:-2] or keys.shape[-1] != held.shape[-1]:
        raise ValueError(
            f"keys must match the cached keys except along the sequence axis: keys of shape "
            f"{tuple(keys.shape)} have leading dimensions {tuple(keys.shape[:-2])} and d_head {keys.shape[-1]}, "
            f"but the cache holds leading dimensions {tuple(held.shape[:-2])} and d_head {held.shape[-1]}; "
            f"a cache follows one batch of sequences, so use a new KVCache (or reset()) for another"
        )
    if values.shape[-1] != held_values.shape[-1]:
        raise ValueError(
            f"values must match the cached values' last dimension d_v = {held_values.shape[-1]}, "
            f"got values of shape {tuple(values.shape)}"
        )
    if keys.dtype != held.dtype:
        raise TypeError(
            f"keys have dtype {keys.dtype} but the cache holds {held.dtype}; convert them with "
            f".to({held.dtype}) or start a new KVCache"
        )
    if keys.device != held.device:
        raise ValueError(
            f"keys are on device {keys.device} but the cache is on {held.device}; move them with "
            f".to({str(held.device)!r}) or start a new KVCache"
        )


def check_cache_room(cache: KVCache, new: int) -> None:
    """A preallocated cache must have room for ``new`` more tokens; checked before anything is written."""
    if cache.capacity is not None and cache.length + new > cache.capacity:
        raise ValueError(
            f"capacity={cache.capacity} is too small: the cache holds {cache.length} tokens and cannot take "
            f"{new} more; make a KVCache with a larger capacity (the cache is unchanged)"
        )


def check_num_kv_heads(num_heads: int, num_kv_heads: object) -> int:
    kv_heads = check_positive_int("num_kv_heads", num_kv_heads)
    check_divisible("num_heads", num_heads, "num_kv_heads", kv_heads)
    return kv_heads


def check_cache_fits(cache: object, x: torch.Tensor, num_heads: int, d_head: int) -> int:
    """A cache that this call can extend; returns its length (the first new position)."""
    from .kv_cache import KVCache  # here, not at the top: kv_cache imports this module

    if not isinstance(cache, KVCache):
        raise TypeError(f"cache must be a KVCache or None, got {type(cache).__name__}")
    check_cache_room(cache, x.shape[-2])
    if cache.keys is None or cache.values is None:
        return 0
    if cache.keys.shape[:-3] != x.shape[:-2]:
        raise ValueError(
            f"x has batch shape {tuple(x.shape[:-2])} but the cache holds batch shape "
            f"{tuple(cache.keys.shape[:-3])}; a KVCache follows one batch of sequences: use a new one "
            f"(or cache.reset()) for another"
        )
    for name, held in (("keys", cache.keys), ("values", cache.values)):
        if held.ndim != x.ndim + 1 or held.shape[-3] != num_heads or held.shape[-1] != d_head:
            raise ValueError(
                f"cache must hold {name} of {num_heads} heads of size d_head={d_head}, shaped "
                f"(..., heads, length, d_head), got cached {name} of shape {tuple(held.shape)}; "
                f"use a new KVCache for another module"
            )
        if held.dtype != x.dtype:
            raise TypeError(
                f"cache must hold the dtype of x ({x.dtype}), got cached {name} of dtype {held.dtype}; "
                f"start a new KVCache"
            )
        if held.device != x.device:
            raise ValueError(
                f"cache must be on the device of x ({x.device}), got cached {name} on device {held.device}; "
                f"start a new KVCache"
            )
    return cache.length


# ----------------------------------------------------------------------------- multi-head self-attention


def check_attention_input(x: object, d_in: int | None = None) -> torch.Tensor:
    x = check_floating("x", x)
    check_ndim("x", x, 2, "(..., seq, d_in)")
    if d_in is not None and x.shape[-1] != d_in:
        raise ValueError(f"x must have last dimension d_in={d_in}, got shape {tuple(x.shape)}")
    if x.shape[-2] == 0:
        raise ValueError(f"x must hold at least one position (seq >= 1), got shape {tuple(x.shape)}")
    return x


def check_rope_d_head(d_model: int, num_heads: int) -> None:
    """RotaryEmbedding would only report d_head; the learner chose d_model and num_heads."""
    d_head = d_model // num_heads
    check_even_d_head(
        d_head, "d_head = d_model // num_heads", f"d_head={d_head} from d_model={d_model}, num_heads={num_heads}"
    )


def check_token_positions(token_positions: object, x: torch.Tensor, rope_on: bool) -> torch.Tensor:
    """RoPE positions given for ``x (..., seq, d_in)``: integers broadcastable to ``x.shape[:-1]``."""
    token_positions = check_tensor("token_positions", token_positions)
    seq = x.shape[-2]
    if not rope_on:
        raise ValueError(
            "token_positions are RoPE positions, but RoPE is off: enable it (rope=True / rope_base=...) "
            f"or drop them; got token_positions of shape {tuple(token_positions.shape)}"
        )
    if token_positions.ndim == 0 or token_positions.shape[-1] != seq:
        raise ValueError(
            f"token_positions must have shape (..., seq) with seq={seq}, got shape {tuple(token_positions.shape)}"
        )
    check_broadcasts_to("token_positions", token_positions, x.shape[:-1], "x.shape[:-1]")
    return check_integer_positions(token_positions)


def mhsa_init_args(
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
    check_positive_int("d_model", d_model)
    check_positive_int("num_heads", num_heads)
    check_divisible("d_model", d_model, "num_heads", num_heads)
    if num_kv_heads is not None:
        check_num_kv_heads(num_heads, num_kv_heads)
    if d_in is not None:
        check_positive_int("d_in", d_in)
    if d_out is not None:
        check_positive_int("d_out", d_out)
    check_probability("dropout", dropout)
    check_choice("rope_convention", rope_convention, ROPE_CONVENTIONS)
    if rope:
        check_rope_d_head(d_model, num_heads)


def mhsa_forward_args(
    module: MultiHeadSelfAttention,
    x: torch.Tensor,
    mask: torch.Tensor | None,
    token_positions: torch.Tensor | None,
    cache: object,
) -> None:
    """Everything ``module(x, mask=..., token_positions=..., cache=...)`` needs, in the caller's terms."""
    check_attention_input(x, module.d_in)
    dtype = module.qkv_proj.weight.dtype
    if x.dtype != dtype:
        raise TypeError(
            f"x must have the module's dtype {dtype}, got {x.dtype}; use x.to({dtype}) or module.to({x.dtype})"
        )
    seq = x.shape[-2]
    past = 0 if cache is None else check_cache_fits(cache, x, module.num_kv_heads, module.d_head)
    held = None if cache is None else cast("KVCache", cache).keys
    stored = 0 if held is None else held.shape[-2]
    in_cache = cache is not None and cast("KVCache", cache).rope_positions == "cache"
    if token_positions is not None:
        check_token_positions(token_positions, x, rope_on=module.rope is not None)
        if in_cache:
            raise ValueError(
                "token_positions must be None with a SlidingWindowCache(rope_positions='cache'): it gives "
                f"each key and query its slot in the cache; got token_positions of shape "
                f"{tuple(token_positions.shape)}; use rope_positions='original' to rotate by positions you choose"
            )
    if module.rope is not None:
        if in_cache:  # slots 0 .. stored + seq - 1, however long the stream
            check_positions_in_range(0, stored + seq - 1, module.rope.max_seq_len)
        elif token_positions is None:
            check_positions_in_range(past, past + seq - 1, module.rope.max_seq_len)
        else:
            check_positions_tensor_in_range(token_positions, module.rope.max_seq_len)
    if mask is not None:
        target = (*x.shape[:-2], module.num_heads, seq, stored + seq)
        check_bool_mask("mask", mask, target, "(..., heads, seq, seq_k)", device=x.device)


def mhsa_functional_args(
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
) -> None:
    check_attention_input(x)
    check_positive_int("num_heads", num_heads)
    kv_heads = num_heads if num_kv_heads is None else check_num_kv_heads(num_heads, num_kv_heads)
    if token_positions is not None:
        check_tensor("token_positions", token_positions)
    names = ("q_weight", "k_weight", "v_weight", "o_weight")
    for name, weight in zip(names, (q_weight, k_weight, v_weight, o_weight), strict=True):
        check_matrix(name, weight, "(d_out, d_in) matrix")
        if weight.dtype != x.dtype:
            raise TypeError(f"{name} must have the dtype of x ({x.dtype}), got {weight.dtype}")
    d_model = q_weight.shape[0]
    if q_weight.shape != (d_model, x.shape[-1]):
        raise ValueError(
            f"q_weight must have shape (d_model, d_in) with d_in = x.shape[-1] = {x.shape[-1]}, "
            f"got shape {tuple(q_weight.shape)}"
        )
    d_head = check_divisible("d_model", d_model, "num_heads", num_heads)
    kv_rows = kv_heads * d_head
    for name, weight in zip(names[1:3], (k_weight, v_weight), strict=True):
        if weight.shape != (kv_rows, x.shape[-1]):
            raise ValueError(
                f"{name} must have shape (num_kv_heads * d_head, d_in) = ({kv_rows}, {x.shape[-1]}) to match "
                f"q_weight, x and num_kv_heads={kv_heads}, got shape {tuple(weight.shape)}"
            )
    if o_weight.shape[1] != d_model:
        raise ValueError(f"o_weight must have shape (d_out, d_model={d_model}), got shape {tuple(o_weight.shape)}")
    sizes = {"q_bias": d_model, "k_bias": kv_rows, "v_bias": kv_rows, "o_bias": o_weight.shape[0]}
    for (name, size), bias in zip(sizes.items(), (q_bias, k_bias, v_bias, o_bias), strict=True):
        if bias is not None:
            check_bias(name, bias, size, dtype=x.dtype)
    seq = x.shape[-2]
    if rope_base is not None:
        check_rope_d_head(d_model, num_heads)
        check_rope_base(rope_base)
        check_choice("rope_convention", rope_convention, ROPE_CONVENTIONS)
        if max_seq_len is not None:
            check_positive_int("max_seq_len", max_seq_len)
    if token_positions is not None:
        check_token_positions(token_positions, x, rope_on=rope_base is not None)
    if rope_base is not None and max_seq_len is not None:
        if token_positions is None:
            check_positions_in_range(0, seq - 1, max_seq_len)
        else:
            check_positions_tensor_in_range(token_positions, max_seq_len)
    elif rope_base is not None and token_positions is not None:
        # Without max_seq_len every position up to the largest has an angle; only negative ones lack one.
        check_positions_tensor_in_range(token_positions, max(seq, int(token_positions.max()) + 1))
    if mask is not None:
        target = (*x.shape[:-2], num_heads, seq, seq)
        check_bool_mask("mask", mask, target, "(..., heads, seq, seq_k)", device=x.device)


# ----------------------------------------------------------------------------- weight layouts


def stack_head_weights_args(head_weights: Sequence[torch.Tensor]) -> None:
    if isinstance(head_weights, torch.Tensor) or len(head_weights) == 0:
        raise TypeError(
            f"head_weights must be a non-empty list of (d_head, d_in) tensors, got {type(head_weights).__name__}"
        )
    first = check_tensor("head_weights[0]", head_weights[0])
    for index, weight in enumerate(head_weights):
        check_tensor(f"head_weights[{index}]", weight)
        if weight.ndim != 2 or weight.shape != first.shape:
            raise ValueError(
                f"head_weights[{index}] must be 2-D with the shape of head_weights[0] "
                f"{tuple(first.shape)} (d_head, d_in), got shape {tuple(weight.shape)}"
            )


def unstack_head_weights_args(weight: torch.Tensor, num_heads: int) -> None:
    check_tensor("weight", weight)
    if weight.ndim != 2:
        raise ValueError(f"weight must be 2-D (h * d_head, d_in), got shape {tuple(weight.shape)}")
    check_positive_int("num_heads", num_heads)
    check_divisible("weight.shape[0]", weight.shape[0], "num_heads", num_heads)


def fused_qkv_args(weight: torch.Tensor, num_heads: int) -> None:
    check_tensor("weight", weight)
    if weight.ndim not in (1, 2):
        raise ValueError(
            f"weight must be a (3 * d_model, d_in) weight or a (3 * d_model,) bias, got shape {tuple(weight.shape)}"
        )
    check_positive_int("num_heads", num_heads)
    check_divisible("weight.shape[0]", weight.shape[0], "3 * num_heads", 3 * num_heads)


def rope_permutation_args(d_head: int, source: str, target: str) -> None:
    check_positive_int("d_head", d_head)
    check_even_d_head(d_head)
    check_choice("source", source, ROPE_CONVENTIONS)
    check_choice("target", target, ROPE_CONVENTIONS)


def permute_rope_weight_args(weight: torch.Tensor, num_heads: int, source: str, target: str) -> None:
    check_tensor("weight", weight)
    if weight.ndim not in (1, 2):
        raise ValueError(
            f"weight must be a (num_heads * d_head, d_in) matrix or a (num_heads * d_head,) bias, "
            f"got shape {tuple(weight.shape)}"
        )
    check_positive_int("num_heads", num_heads)
    d_head = check_divisible("weight.shape[0]", weight.shape[0], "num_heads", num_heads)
    rope_permutation_args(d_head, source, target)


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


def check_loader_options(options: dict[str, object]) -> None:
    taken = [name for name in SET_BY_THE_WEIGHTS if name in options]
    if taken:
        raise TypeError(
            f"{', '.join(taken)} cannot be passed to a loader: it reads sizes, which biases exist, device and "
            f"dtype off the weights; its options may only be causal, dropout, rope, rope_base, rope_convention "
            f"or max_seq_len — convert afterwards with module.to(device, dtype)"
        )


def projection_weights_args(
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
) -> None:
    check_loader_options(options)
    check_choice("layout", layout, WEIGHT_LAYOUTS)
    names = ("q_weight", "k_weight", "v_weight", "o_weight")
    weights = [check_matrix(name, w) for name, w in zip(names, (q_weight, k_weight, v_weight, o_weight), strict=True)]
    if layout == "in_out":
        weights = [w.transpose(0, 1) for w in weights]
    q_w, k_w, v_w, o_w = weights
    d_model = q_w.shape[0]
    check_positive_int("num_heads", num_heads)
    d_head = check_divisible("d_model", d_model, "num_heads", num_heads)
    expected = "(d_model, d_in)" if layout == "out_in" else "(d_in, d_model)"
    for name, weight in zip(names[1:3], (k_w, v_w), strict=True):
        # Grouped-query attention: fewer key/value heads than query heads, so fewer rows.
        rows = weight.shape[0]
        grouped = weight.shape[1] == q_w.shape[1] and rows % d_head == 0 and num_heads % max(rows // d_head, 1) == 0
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
    sizes = (d_model, k_w.shape[0], v_w.shape[0])
    for name, bias, size in zip(("q_bias", "k_bias", "v_bias"), (q_bias, k_bias, v_bias), sizes, strict=True):
        if bias is not None:
            check_bias(name, bias, size)
    if o_bias is not None:
        check_bias("o_bias", o_bias, o_w.shape[0])


def head_weights_args(
    q_heads: Sequence[torch.Tensor],
    k_heads: Sequence[torch.Tensor],
    v_heads: Sequence[torch.Tensor],
    o_weight: torch.Tensor,
    *,
    layout: str,
    **options: Any,
) -> None:
    """Checked in the caller's layout and names: the stacked weights would report transposed
    shapes under other names (head_weights[i], q_weight)."""
    check_loader_options(options)
    check_choice("layout", layout, WEIGHT_LAYOUTS)
    lists = {"q_heads": q_heads, "k_heads": k_heads, "v_heads": v_heads}
    for name, heads in lists.items():
        if isinstance(heads, torch.Tensor) or not isinstance(heads, (list, tuple)) or not heads:
            raise TypeError(f"{name} must be a non-empty list of per-head matrices, got {type(heads).__name__}")
        if len(heads) != len(q_heads):
            raise ValueError(f"{name} must hold one matrix per head ({len(q_heads)}), got {len(heads)}")
    head_shape = "(d_in, d_head)" if layout == "in_out" else "(d_head, d_in)"
    for name, heads in lists.items():
        for index, head in enumerate(heads):
            check_matrix(f"{name}[{index}]", head)
            if head.shape != q_heads[0].shape:
                raise ValueError(
                    f"{name}[{index}] must have the shape of q_heads[0] {tuple(q_heads[0].shape)} "
                    f"{head_shape} with layout={layout!r}, got shape {tuple(head.shape)}"
                )
    check_matrix("o_weight", o_weight)
    d_model = len(q_heads) * q_heads[0].shape[1 if layout == "in_out" else 0]
    if o_weight.shape[0 if layout == "in_out" else 1] != d_model:
        expected = f"({d_model}, d_out)" if layout == "in_out" else f"(d_out, {d_model})"
        raise ValueError(
            f"o_weight must take the {len(q_heads)} heads' {d_model} concatenated features: expected shape "
            f"{expected} with layout={layout!r}, got shape {tuple(o_weight.shape)}"
        )


def fused_qkv_loader_args(
    qkv_weight: torch.Tensor,
    o_weight: torch.Tensor,
    *,
    num_heads: int,
    fused_layout: str,
    num_kv_heads: int | None = None,
    qkv_bias: torch.Tensor | None = None,
    o_bias: torch.Tensor | None = None,
    **options: Any,
) -> None:
    check_loader_options(options)
    check_choice("fused_layout", fused_layout, FUSED_QKV_LAYOUTS)
    check_matrix("qkv_weight", qkv_weight, "(3 * d_model, d_in) matrix")
    check_positive_int("num_heads", num_heads)
    kv_heads = num_heads if num_kv_heads is None else check_num_kv_heads(num_heads, num_kv_heads)
    if kv_heads != num_heads and fused_layout == "per_head":
        raise ValueError(
            "fused_layout='per_head' holds one [q|k|v] block per head, so num_kv_heads must equal num_heads "
            f"there; got num_heads={num_heads}, num_kv_heads={kv_heads} (use fused_layout='stacked')"
        )
    rows = qkv_weight.shape[0]
    heads_total = num_heads + 2 * kv_heads
    what = "3 * num_heads" if kv_heads == num_heads else "(num_heads + 2 * num_kv_heads)"
    d_head = check_divisible("qkv_weight.shape[0]", rows, what, heads_total)
    if qkv_bias is not None:
        check_tensor("qkv_bias", qkv_bias)
        if tuple(qkv_bias.shape) != (rows,):
            raise ValueError(f"qkv_bias must have shape ({rows},), got {tuple(qkv_bias.shape)}")
    sizes = [num_heads * d_head, kv_heads * d_head, kv_heads * d_head]
    q_w, k_w, v_w = torch.split(qkv_weight, sizes, dim=0)
    q_b, k_b, v_b = (None, None, None) if qkv_bias is None else torch.split(qkv_bias, sizes)
    projection_weights_args(
        q_w, k_w, v_w, o_weight, num_heads=num_heads, layout="out_in", q_bias=q_b, k_bias=k_b, v_bias=v_b, o_bias=o_bias
    )


def torch_mha_args(mha: nn.MultiheadAttention, **options: Any) -> None:
    check_loader_options(options)
    if not isinstance(mha, nn.MultiheadAttention):
        raise TypeError(f"mha must be a torch.nn.MultiheadAttention, got {type(mha).__name__}")
    if mha.in_proj_weight is None:
        raise ValueError("mha must have kdim == vdim == embed_dim (self-attention), got separate kdim/vdim")
    if mha.bias_k is not None or mha.add_zero_attn:
        raise ValueError("mha must not use add_bias_kv or add_zero_attn, which add an extra key position")


# ----------------------------------------------------------------------------- long context (notebook 09)

#: The ways RoPE can be stretched (:class:`mhsa_helpers.long_context.RopeScaling`).
ROPE_SCALING_METHODS = ("linear", "ntk", "yarn")


def check_positive_number(
    name: str, value: object, *, low: float = 0.0, inclusive: bool = False, why: str = ""
) -> float:
    """A finite real number above ``low`` (or at least ``low`` when ``inclusive``), never a bool."""
    bound = f">= {low:g}" if inclusive else f"> {low:g}"
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a number {bound}{why}, got {type(value).__name__} {value!r}")
    number = float(value)
    if not np.isfinite(number) or number < low or (number == low and not inclusive):
        raise ValueError(f"{name} must be a finite number {bound}{why}, got {name}={value!r}")
    return number


def sliding_window_mask_args(
    seq_q: int, seq_k: int | None = None, *, window: int, sinks: int = 0, device: str | torch.device | None = None
) -> None:
    causal_mask_args(seq_q, seq_k)
    check_int("window", window, 1, why=" (each query sees itself and the window - 1 keys before it)")
    check_int("sinks", sinks, 0, why=" (the first tokens every query may see)")


def alibi_slopes_args(num_heads: int) -> None:
    check_positive_int("num_heads", num_heads)


def alibi_bias_args(
    num_heads: int, seq_q: int, seq_k: int | None = None, *, device: str | torch.device | None = None
) -> None:
    check_positive_int("num_heads", num_heads)
    causal_mask_args(seq_q, seq_k)


def rope_scaling_args(scaling: Any) -> None:
    check_choice("method", scaling.method, ROPE_SCALING_METHODS)
    check_positive_number(
        "factor", scaling.factor, low=1.0, inclusive=True, why=" (how many times longer the context is)"
    )
    check_positive_int("original_max_seq_len", scaling.original_max_seq_len)
    slow = check_positive_number("beta_slow", scaling.beta_slow)
    fast = check_positive_number("beta_fast", scaling.beta_fast)
    if not fast > slow:
        raise ValueError(f"beta_fast must be > beta_slow, got beta_fast={fast:g}, beta_slow={slow:g}")


def scaled_rope_frequencies_args(d_head: int, base: float = 10000.0, scaling: Any = None) -> None:
    check_positive_int("d_head", d_head)
    check_even_d_head(d_head)
    check_rope_base(base)
    if scaling is not None:
        from .long_context import RopeScaling

        if not isinstance(scaling, RopeScaling):
            raise TypeError(f"scaling must be a RopeScaling or None, got {type(scaling).__name__}")
    if d_head == 2 and scaling is not None and scaling.method == "ntk":
        raise ValueError("d_head must be > 2 for method='ntk' (the base is scaled by factor^(d/(d-2))), got d_head=2")


def repeat_kv_args(x: torch.Tensor, groups: int) -> None:
    check_tensor("x", x)
    check_ndim("x", x, 3, "(..., kv_heads, seq, d_head)")
    check_positive_int("groups", groups)


def kv_cache_init_args(capacity: int | None = None) -> None:
    if capacity is not None:
        check_positive_int("capacity", capacity)


#: Where a :class:`~mhsa_helpers.kv_cache.SlidingWindowCache` has RoPE put its keys: at their
#: position in the stream, or at their slot in the cache (StreamingLLM).
CACHE_ROPE_POSITIONS = ("original", "cache")


def sliding_window_cache_args(window: int, sinks: int = 0, rope_positions: str = "original") -> None:
    check_int("window", window, 1, why=" (each new token sees itself and the window - 1 tokens before it)")
    check_int("sinks", sinks, 0, why=" (the first tokens that are never evicted)")
    check_choice("rope_positions", rope_positions, CACHE_ROPE_POSITIONS)


def cache_mask_args(cache: Any, new: int) -> None:
    check_positive_int("new", new)


def sinusoidal_positions_args(seq_len: int, d_model: int, base: float = 10000.0) -> None:
    check_positive_int("seq_len", seq_len)
    check_positive_int("d_model", d_model)
    if d_model % 2:
        raise ValueError(f"d_model must be even (positions fill sine/cosine pairs of features), got d_model={d_model}")
    check_positive_number("base", base, low=1.0, why=" (10000 in the original Transformer)")


def transformer_block_args(d_model: int, num_heads: int, *, d_ff: int | None = None, dropout: float = 0.0) -> None:
    check_positive_int("d_model", d_model)
    if d_ff is not None:
        check_positive_int("d_ff", d_ff)
    check_positive_number("dropout", dropout, low=0.0, inclusive=True)
    if dropout >= 1:
        raise ValueError(f"dropout must be in [0, 1), got dropout={dropout!r}")
