"""softmax (mhsa_helpers/softmax.py): edges that mutation testing (``make mutate``) showed unpinned.
Expected values are written from the formula exp(x_i) / sum_j exp(x_j), in Python's math."""

from __future__ import annotations

import math
import re

import pytest
import torch

from mhsa_helpers.softmax import softmax


def test_each_row_is_shifted_by_its_own_maximum():
    # Shifted by the largest score of the whole tensor, the second row would underflow to zeros.
    x = torch.tensor([[0.0, 1.0], [-200.0, -199.0]])
    row = [1 / (1 + math.e), math.e / (1 + math.e)]
    torch.testing.assert_close(softmax(x), torch.tensor([row, row]))
    torch.testing.assert_close(softmax(x.T, dim=0), torch.tensor([row, row]).T)


def test_argument_messages():
    with pytest.raises(TypeError, match=f"^{re.escape('x must be a torch.Tensor, got list')}$"):
        softmax([1.0, 2.0])
    message = "x must have a floating-point dtype (float16, bfloat16, float32 or float64), got dtype torch.int64"
    with pytest.raises(TypeError, match=f"^{re.escape(message)}$"):
        softmax(torch.tensor([1, 2]))
