"""Argument checks shared by the package.

Every message names the argument, what was expected and what was given, so a
learner sees *which* input is wrong instead of a reshape traceback from deep
inside the computation.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import torch

__all__ = [
    "check_tensor",
    "check_floating",
    "check_ndim",
    "check_size",
    "check_positive_int",
    "check_int",
    "check_divisible",
    "check_same_dtype",
    "check_broadcasts_to",
    "check_bool_mask",
    "check_choice",
    "check_probability",
]


def check_tensor(name: str, value: object) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    return value


def check_floating(name: str, value: torch.Tensor) -> torch.Tensor:
    check_tensor(name, value)
    if not value.is_floating_point():
        raise TypeError(
            f"{name} must have a floating-point dtype (float16, bfloat16, float32 or float64), "
            f"got dtype {value.dtype}"
        )
    return value


def check_ndim(name: str, value: torch.Tensor, min_ndim: int, shape_hint: str) -> None:
    if value.ndim < min_ndim:
        raise ValueError(
            f"{name} must have at least {min_ndim} dimensions {shape_hint}, "
            f"got shape {tuple(value.shape)}"
        )


def check_size(name: str, value: torch.Tensor, dim: int, expected: int, what: str) -> None:
    if value.shape[dim] != expected:
        raise ValueError(
            f"{name} must have size {expected} ({what}) in dimension {dim}, "
            f"got shape {tuple(value.shape)}"
        )


def check_positive_int(name: str, value: object, allow_zero: bool = False) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    lowest = 0 if allow_zero else 1
    if value < lowest:
        raise ValueError(f"{name} must be >= {lowest}, got {value}")
    return value


def check_int(name: str, value: object, low: int, high: Optional[int] = None, why: str = "") -> int:
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
        divisor = f"({parts_name})" if " " in parts_name else parts_name  # "x % (3 * num_heads)", not "x % 3 * num_heads"
        raise ValueError(
            f"{parts_name} must divide {total_name}: expected {total_name} % {divisor} == 0, "
            f"got {total_name}={total}, {parts_name}={parts}"
        )
    return total // parts


def check_same_dtype(name: str, value: torch.Tensor, reference_name: str, reference: torch.Tensor) -> None:
    if value.dtype != reference.dtype:
        raise TypeError(
            f"{name} must have the same dtype as {reference_name} ({reference.dtype}), got {value.dtype}"
        )


def check_broadcasts_to(name: str, value: torch.Tensor, target_shape: Sequence[int], target_desc: str) -> None:
    """``value`` broadcasts to ``target_shape`` *without growing it* (the result keeps the target's shape)."""
    try:
        broadcast = torch.broadcast_shapes(tuple(value.shape), tuple(target_shape))
    except RuntimeError:
        broadcast = None
    if broadcast != tuple(target_shape):
        raise ValueError(
            f"{name} must be broadcastable to {target_desc} = {tuple(target_shape)}, "
            f"got shape {tuple(value.shape)}"
        )


def check_bool_mask(
    name: str,
    mask: torch.Tensor,
    target_shape: Sequence[int],
    target_desc: str,
    device: Optional[torch.device] = None,
) -> None:
    check_tensor(name, mask)
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
    if value not in choices:
        options = ", ".join(repr(c) for c in choices)
        raise ValueError(f"{name} must be one of {options}, got {value!r}")
    return value  # type: ignore[return-value]


def check_probability(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a float in [0, 1), got {type(value).__name__} {value!r}")
    if not 0.0 <= float(value) < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {value}")
    return float(value)
