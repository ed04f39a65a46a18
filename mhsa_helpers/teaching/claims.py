"""Claims a notebook makes, checked where it makes them.

Every number or property a notebook states is checked in that notebook, so that re-running it
(as the test suite does) fails the moment the statement stops being true. A check should read as
part of the lesson, not as test plumbing::

    claim("each row of the weights sums to 1", torch.allclose(weights.sum(-1), torch.ones(3)))
    # ✓ each row of the weights sums to 1

    claim_close("the package gives the same output as our five lines", ours, theirs)
    # ✓ the package gives the same output as our five lines (largest difference 2.4e-08)

A false claim raises :class:`ClaimError`, which says which statement failed and, for
:func:`claim_close`, by how much.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = ["ClaimError", "claim", "claim_close"]


class ClaimError(AssertionError):
    """A statement the notebook makes is not true for the numbers it just computed."""


def _as_bool(name: str, holds: Any) -> bool:
    if isinstance(holds, torch.Tensor):
        if holds.numel() != 1:
            raise TypeError(
                f"{name} must be a single True/False, got a tensor of shape {tuple(holds.shape)}; "
                "reduce it first, e.g. with .all()"
            )
        return bool(holds.item())
    if isinstance(holds, (bool, np.bool_)):
        return bool(holds)
    raise TypeError(f"{name} must be True or False (or a one-element tensor), got {type(holds).__name__} {holds!r}")


def _as_float64(value: Any) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().to(torch.float64)
    # Through numpy in float64, so a Python number is not rounded to float32 first.
    return torch.from_numpy(np.asarray(value, dtype=np.float64))


def claim(statement: str, holds: Any) -> None:
    """Print ``✓ statement`` when ``holds`` is true; raise :class:`ClaimError` when it is not.

    ``holds`` is a bool (numpy's too) or a one-element boolean tensor such as ``(w >= 0).all()``.
    """
    if not isinstance(statement, str) or not statement.strip():
        raise TypeError(f"statement must be a non-empty sentence, got {statement!r}")
    if not _as_bool("holds", holds):
        raise ClaimError(f"✗ not true: {statement}")
    print(f"✓ {statement}")


def claim_close(statement: str, actual: Any, expected: Any, *, atol: float = 1e-6, rtol: float = 1e-5) -> None:
    """Print ``✓ statement (largest difference …)`` when ``actual`` equals ``expected`` within
    ``atol + rtol * |expected|`` elementwise; raise :class:`ClaimError` with the largest
    difference when not.

    ``actual`` and ``expected`` are tensors, arrays or numbers of the same shape (any shape,
    e.g. ``(batch, heads, seq, d_head)``); NaNs are equal only to NaNs in the same places.
    """
    if not isinstance(statement, str) or not statement.strip():
        raise TypeError(f"statement must be a non-empty sentence, got {statement!r}")
    got, want = _as_float64(actual), _as_float64(expected)
    if got.shape != want.shape:
        raise ClaimError(f"✗ not true: {statement} (shape {tuple(got.shape)} where {tuple(want.shape)} was expected)")
    close = torch.isclose(got, want, atol=atol, rtol=rtol, equal_nan=True)
    finite = torch.isfinite(got) & torch.isfinite(want)
    diff = (got - want).abs()[finite]
    largest = float(diff.max()) if diff.numel() else 0.0
    if not bool(close.all()):
        raise ClaimError(f"✗ not true: {statement} (largest difference {largest:.3g}, tolerance atol={atol:g})")
    print(f"✓ {statement} (largest difference {largest:.1e})")
