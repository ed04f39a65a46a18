"""sinusoidal_positions: the default base and the float64 computation, which mutation testing
(``make mutate``) showed unpinned. Expected values from the paper's formula in Python's math."""

from __future__ import annotations

import math
import re

import pytest
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


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        ((0, 8), ValueError, "seq_len must be >= 1, got 0"),
        ((4.0, 8), TypeError, "seq_len must be an int, got float 4.0 (expected >= 1)"),
        ((4, 0), ValueError, "d_model must be >= 1, got 0"),
        ((4, 8.0), TypeError, "d_model must be an int, got float 8.0 (expected >= 1)"),
        ((4, 7), ValueError, "d_model must be even (positions fill sine/cosine pairs of features), got d_model=7"),
        (
            (4, 8, 1.0),
            ValueError,
            "base must be a finite number > 1 (10000 in the original Transformer), got base=1.0",
        ),
    ],
)
def test_argument_messages(args, error, message):
    with pytest.raises(error, match=f"^{re.escape(message)}$"):
        sinusoidal_positions(*args)


def test_a_base_just_above_1_is_allowed_and_used():
    torch.testing.assert_close(sinusoidal_positions(3, 4, 1.5)[2], _row(2, 4, 1.5), atol=1e-7, rtol=0)
