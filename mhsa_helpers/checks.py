"""The words the package checks its arguments with: ``expect_tensor``, ``expect_int``, ``expect_choice``…

Each public function checks its arguments in its first lines, in these words, then computes
(as PyTorch's own functions do)::

    def split_heads(x, num_heads):
        if checking():
            expect_tensor("x", x, min_ndim=2, shape="(..., seq, d_model)")
            expect_divisible("d_model (x.shape[-1])", x.shape[-1], "num_heads", expect_int("num_heads", num_heads))
        ...

Every message names the argument, what was expected and what was given, so a learner sees
*which* input is wrong instead of a reshape traceback from deep inside the computation. Each
``expect_*`` returns the value it accepted (as an ``int``, ``float`` or tensor), or raises
``TypeError`` for the wrong kind of value and ``ValueError`` for the right kind with a wrong value.

Each argument is checked once, at the door. An entry point that calls other public functions
(``MultiHeadSelfAttention.forward`` calls ``split_heads``, ``apply_rotary``, ``attend``…) checks what its
caller passed, then runs its body inside :func:`arguments_checked`; there the functions it calls skip
their checks (``if checking():``), because every argument they get is built from checked ones — as
``torch.distributions`` skips its checks under ``validate_args=False``. There is still one version of each
function, the one a reader opens; called on its own, it checks.

A foundation module, taught by no notebook: every module of the package may use it, the
teaching scaffolding included.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Iterator, Sequence

import numpy as np
import torch

__all__ = [
    "arguments_checked",
    "broadcast_shape",
    "checking",
    "expect_bool",
    "expect_broadcastable",
    "expect_choice",
    "expect_divisible",
    "expect_dtype_of",
    "expect_floating",
    "expect_int",
    "expect_integer_tensor",
    "expect_mask",
    "expect_matrix",
    "expect_number",
    "expect_shape",
    "expect_tensor",
]


# A context variable rather than a global: each thread (and each asyncio task) has its own door.
_ARGUMENTS_CHECKED: contextvars.ContextVar[bool] = contextvars.ContextVar("arguments_checked", default=False)


@contextlib.contextmanager
def arguments_checked() -> Iterator[None]:
    """The body of an entry point that has checked what its caller passed: inside, :func:`checking` is
    false, and the public functions the body calls skip their checks. Left on return and on error."""
    token = _ARGUMENTS_CHECKED.set(True)
    try:
        yield
    finally:
        _ARGUMENTS_CHECKED.reset(token)


def checking() -> bool:
    """Whether a public function checks its arguments: yes, unless it runs inside :func:`arguments_checked`."""
    return not _ARGUMENTS_CHECKED.get()


def expect_tensor(name: str, value: object, *, min_ndim: int = 0, shape: str = "") -> torch.Tensor:
    """A tensor with at least ``min_ndim`` dimensions (``shape`` describes them in the message)."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    if value.ndim < min_ndim:
        described = f"{min_ndim} dimensions {shape}" if shape else f"{min_ndim} dimensions"
        raise ValueError(f"{name} must have at least {described}, got shape {tuple(value.shape)}")
    return value


def expect_floating(name: str, value: object, *, min_ndim: int = 0, shape: str = "") -> torch.Tensor:
    """A floating-point tensor with at least ``min_ndim`` dimensions."""
    if isinstance(value, torch.Tensor) and not value.is_floating_point():
        raise TypeError(
            f"{name} must have a floating-point dtype (float16, bfloat16, float32 or float64), got dtype {value.dtype}"
        )
    return expect_tensor(name, value, min_ndim=min_ndim, shape=shape)


def expect_integer_tensor(name: str, value: object, what: str = "") -> torch.Tensor:
    """A tensor of integers (not bool): token positions, lengths, ids. ``what`` says what they count."""
    tensor = expect_tensor(name, value)
    if tensor.is_floating_point() or tensor.is_complex() or tensor.dtype == torch.bool:
        raise TypeError(f"{name} must be an integer tensor{what}, got dtype {tensor.dtype}")
    return tensor


def expect_matrix(name: str, value: object, what: str = "matrix") -> torch.Tensor:
    """A 2-D floating-point tensor; ``what`` describes it, e.g. ``"(d_out, d_in) matrix"``."""
    matrix = expect_floating(name, value)
    if matrix.ndim != 2:
        raise ValueError(f"{name} must be a 2-D {what}, got shape {tuple(matrix.shape)}")
    return matrix


def expect_shape(name: str, value: object, shape: tuple[int, ...], dtype: torch.dtype | None = None) -> torch.Tensor:
    """A floating-point tensor of exactly ``shape`` (a bias), of ``dtype`` (x's) when it is given."""
    tensor = expect_floating(name, value)
    if tuple(tensor.shape) != shape:
        raise ValueError(f"{name} must have shape {shape}, got shape {tuple(tensor.shape)}")
    if dtype is not None and tensor.dtype != dtype:
        raise TypeError(f"{name} must have the dtype of x ({dtype}), got {tensor.dtype}")
    return tensor


def expect_dtype_of(name: str, value: torch.Tensor, reference_name: str, reference: torch.Tensor) -> None:
    """``value`` has the dtype of ``reference``."""
    if value.dtype != reference.dtype:
        raise TypeError(f"{name} must have the same dtype as {reference_name} ({reference.dtype}), got {value.dtype}")


def broadcast_shape(*shapes: Sequence[int]) -> tuple[int, ...] | None:
    """The shape the given shapes broadcast to (NumPy's rule), or ``None`` if they do not broadcast."""
    first = tuple(shapes[0])
    if all(tuple(shape) == first for shape in shapes[1:]):
        return first  # the usual case, at once
    result: list[int] = []
    for axis in range(-max(len(shape) for shape in shapes), 0):
        sizes = {shape[axis] for shape in shapes if len(shape) >= -axis} - {1}
        if len(sizes) > 1:
            return None
        result.append(sizes.pop() if sizes else 1)
    return tuple(result)


def expect_broadcastable(name: str, value: torch.Tensor, target: Sequence[int], target_desc: str) -> None:
    """``value`` broadcasts to ``target`` *without growing it* (the result keeps the target's shape):
    no more dimensions, and each of its trailing sizes 1 or the target's."""
    shape = tuple(value.shape)
    if len(shape) > len(target) or any(s not in (1, t) for s, t in zip(shape[::-1], tuple(target)[::-1], strict=False)):
        raise ValueError(
            f"{name} must be broadcastable to {target_desc} = {tuple(target)}, got shape {tuple(value.shape)}"
        )


def expect_mask(
    name: str, mask: object, target: Sequence[int], target_desc: str, device: torch.device | None = None
) -> torch.Tensor:
    """A boolean mask (``True`` = may attend) broadcastable to ``target``, on ``device`` when given."""
    mask = expect_tensor(name, mask)
    if mask.dtype != torch.bool:
        raise TypeError(
            f"{name} must be a boolean tensor where True means 'may attend', got dtype {mask.dtype}; "
            f"convert a 0/1 mask with mask.bool(), or a 'True = blocked' mask with ~mask"
        )
    expect_broadcastable(name, mask, target, target_desc)
    if device is not None and mask.device != device:
        raise ValueError(
            f"{name} must be on the device of the tensors it masks ({device}), got device {mask.device}; "
            f"move it with .to({str(device)!r})"
        )
    return mask


def expect_int(name: str, value: object, low: int = 1, high: int | None = None, why: str = "") -> int:
    """An int (numpy's too, never a bool) in ``[low, high]`` (``high=None``: no upper bound);
    ``why`` is appended to the requirement, e.g. ``" (one of the heads)"``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(
            f"{name} must be an int, got {type(value).__name__} {value!r} (expected {_bounds(low, high)}{why})"
        )
    if value < low or (high is not None and value > high):
        raise ValueError(f"{name} must be {_bounds(low, high)}{why}, got {value}")
    return int(value)


def expect_number(
    name: str,
    value: object,
    low: float | None = None,
    high: float | None = None,
    *,
    open_low: bool = False,
    open_high: bool = False,
    why: str = "",
) -> float:
    """A finite real number (never a bool) between ``low`` and ``high``, each included unless ``open_*``."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        bounds = _bounds(low, high, open_low, open_high)
        raise TypeError(f"{name} must be a number{bounds and ' '}{bounds}{why}, got {type(value).__name__} {value!r}")
    number = float(value)
    too_low = low is not None and (number < low or (open_low and number == low))
    too_high = high is not None and (number > high or (open_high and number == high))
    if too_low or too_high or not math.isfinite(number):
        bounds = _bounds(low, high, open_low, open_high)
        kind = "" if high is not None else " a finite number"  # "in [0, 1)" says finite already
        raise ValueError(f"{name} must be{kind}{bounds and ' '}{bounds}{why}, got {name}={value}")
    return number


def _bounds(low: float | None, high: float | None, open_low: bool = False, open_high: bool = False) -> str:
    """``">= 1"``, ``"> 0"``, ``"in [0, 1)"``, or ``""`` without bounds."""
    if high is None:
        return "" if low is None else f"{'>' if open_low else '>='} {low:g}"
    return f"in {'(' if open_low else '['}{-math.inf if low is None else low:g}, {high:g}{')' if open_high else ']'}"


def expect_bool(name: str, value: object) -> bool:
    """``True`` or ``False`` (numpy's too): ``bool("no")`` would be True."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}")
    return bool(value)


def expect_choice(name: str, value: object, choices: Sequence[str]) -> str:
    """One of the strings ``choices``."""
    if not isinstance(value, str) or value not in choices:
        options = ", ".join(repr(c) for c in choices)
        raise ValueError(f"{name} must be one of {options}, got {value!r}")
    return value


def expect_divisible(total_name: str, total: int, parts_name: str, parts: int) -> int:
    """``parts`` divides ``total``; returns the size of one part."""
    if total % parts != 0:
        divisor = f"({parts_name})" if " " in parts_name else parts_name  # "x % (3 * num_heads)"
        raise ValueError(
            f"{parts_name} must divide {total_name}: expected {total_name} % {divisor} == 0, "
            f"got {total_name}={total}, {parts_name}={parts}"
        )
    return total // parts
