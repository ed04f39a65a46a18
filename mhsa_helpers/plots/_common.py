"""What the plots share: turning tensors, arrays and lists into numpy arrays, checking
their shapes, labels and int arguments (errors name the argument), and a new pyplot Axes."""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np
import torch
from matplotlib.axes import Axes


def _as_array(name: str, value: object, *, dtype=np.float64) -> np.ndarray:
    """torch tensor / numpy array / nested list -> numpy array of ``dtype``."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        if value.dtype == torch.bfloat16:
            value = value.float()
        value = value.numpy()
    try:
        array = np.asarray(value, dtype=dtype)
    except (TypeError, ValueError):
        raise TypeError(
            f"{name} must be a torch tensor or numpy array of numbers, got {type(value).__name__}"
        ) from None
    return array


def _as_matrix(name: str, value: object, shape_hint: str, *, dtype=np.float64) -> np.ndarray:
    array = _as_array(name, value, dtype=dtype)
    if array.ndim != 2 or 0 in array.shape:
        raise ValueError(f"{name} must be a non-empty 2-D array {shape_hint}, got shape {array.shape}")
    return array


def _check_tokens(name: str, tokens: Optional[Sequence[str]], expected: int, what: str) -> Optional[List[str]]:
    if tokens is None:
        return None
    if isinstance(tokens, str):
        raise TypeError(f"{name} must be a list of strings, one per {what}, got the string {tokens!r}")
    tokens = [str(t) for t in tokens]
    if len(tokens) != expected:
        raise ValueError(f"{name} must hold one label per {what} ({expected}), got {len(tokens)}")
    return tokens



def _new_axes(figsize: Tuple[float, float]) -> Axes:
    # pyplot (not a bare Figure) so that Jupyter's inline backend shows it.
    import matplotlib.pyplot as plt

    _, ax = plt.subplots(figsize=figsize)
    return ax
