"""sinusoidal_positions: the default base and the float64 computation, which mutation testing
(``make mutate``) showed unpinned. Expected values from the paper's formula in Python's math."""

from __future__ import annotations

import math

import torch

from mhsa_helpers import sinusoidal_positions


def _row(pos, d_model, base):
    row = []
    for i in range(d_model // 2):
        angle = pos * base ** (-2 * i / d_model)
        row += [math.sin(angle), math.cos(angle)]
    return torch.tensor(row, dtype=torch.float64).float()


def test_the_default_base_is_10000():
    torch.testing.assert_close(sinusoidal_positions(3, 4)[2], _row(2, 4, 10000.0), atol=1e-7, rtol=0)


def test_far_positions_are_computed_in_float64():
    # At position 99999 the angle pos * 0.01 needs more than float32's 24 bits: computed in
    # float32 (the frequencies included), it would be off by ~1e-5.
    table = sinusoidal_positions(100000, 4)
    torch.testing.assert_close(table[-1], _row(99999, 4, 10000.0), atol=1e-6, rtol=0)
