"""split_heads / merge_heads / repeat_kv (mhsa_helpers/heads.py): the argument messages, which
mutation testing (``make mutate``) showed unpinned. Messages are compared whole: a learner reads them."""

from __future__ import annotations

import re

import pytest
import torch

from mhsa_helpers.heads import merge_heads, repeat_kv, split_heads


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: split_heads([1.0], 2), TypeError, "x must be a torch.Tensor, got list"),
        (
            lambda: split_heads(torch.zeros(4), 2),
            ValueError,
            "x must have at least 2 dimensions (..., seq, d_model), got shape (4,)",
        ),
        (
            lambda: split_heads(torch.zeros(3, 6), 4),
            ValueError,
            "num_heads must divide d_model (x.shape[-1]): expected d_model (x.shape[-1]) % num_heads == 0, "
            "got d_model (x.shape[-1])=6, num_heads=4",
        ),
        (lambda: split_heads(torch.zeros(3, 6), 0), ValueError, "num_heads must be >= 1, got 0"),
        (
            lambda: split_heads(torch.zeros(3, 6), 2.0),
            TypeError,
            "num_heads must be an int, got float 2.0 (expected >= 1)",
        ),
        (lambda: merge_heads([1.0]), TypeError, "x must be a torch.Tensor, got list"),
        (
            lambda: merge_heads(torch.zeros(3, 4)),
            ValueError,
            "x must have at least 3 dimensions (..., heads, seq, d_head), got shape (3, 4)",
        ),
        (lambda: repeat_kv([1.0], 2), TypeError, "x must be a torch.Tensor, got list"),
        (
            lambda: repeat_kv(torch.zeros(3, 4), 2),
            ValueError,
            "x must have at least 3 dimensions (..., kv_heads, seq, d_head), got shape (3, 4)",
        ),
        (lambda: repeat_kv(torch.zeros(2, 3, 4), 0), ValueError, "groups must be >= 1, got 0"),
        (
            lambda: repeat_kv(torch.zeros(2, 3, 4), 2.0),
            TypeError,
            "groups must be an int, got float 2.0 (expected >= 1)",
        ),
    ],
)
def test_argument_messages(call, error, message):
    with pytest.raises(error, match=f"^{re.escape(message)}$"):
        call()


def test_the_smallest_shapes_are_accepted():
    x = torch.arange(6.0).reshape(1, 6)  # (seq, d_model): two dimensions are enough
    assert split_heads(x, 3).shape == (3, 1, 2)
    assert merge_heads(split_heads(x, 3)).shape == (1, 6)
    assert repeat_kv(torch.zeros(2, 1, 4), 3).shape == (6, 1, 4)


@pytest.mark.parametrize("groups", [1, 2, 3])
def test_repeat_kv_repeats_each_head_in_a_row(groups):
    # Head h holds the value h; the repeated heads read 0, 0, 1, 1 (groups = 2), never 0, 1, 0, 1.
    x = torch.arange(2.0).reshape(2, 1, 1).expand(2, 3, 2)  # (kv_heads, seq, d_head), 3-D: the heads are dim -3
    out = repeat_kv(x, groups)
    assert out.shape == (2 * groups, 3, 2)
    assert torch.equal(
        out, torch.tensor([h // groups for h in range(2 * groups)], dtype=x.dtype)[:, None, None].expand(-1, 3, 2)
    )
    batched = repeat_kv(x[None], groups)
    assert torch.equal(batched, out[None])
