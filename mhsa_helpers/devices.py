"""Where to run: the GPU when there is one, the CPU otherwise."""

from __future__ import annotations

import torch

__all__ = ["default_device"]


def default_device() -> torch.device:
    """``cuda`` if available, then Apple's ``mps``, else ``cpu``."""
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")
