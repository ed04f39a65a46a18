"""sliding_window_mask: edges that mutation testing (``make mutate``) showed unpinned.

The expected masks are written from the docstring's rule, query at position p sees key j when
j <= p and (p - window < j or j < sinks), as a plain loop.
"""

from __future__ import annotations

import re

import pytest
import torch

from mhsa_helpers.masking import (
    causal_mask,
    combine_masks,
    masked_softmax_neg_inf,
    masked_softmax_renormalize,
    padding_mask,
    sliding_window_mask,
)


def _loop(seq_q, seq_k, window, sinks):
    expected = torch.zeros(seq_q, seq_k, dtype=torch.bool)
    for i in range(seq_q):
        p = seq_k - seq_q + i
        for j in range(seq_k):
            expected[i, j] = j <= p and (p - window < j or j < sinks)
    return expected


@pytest.mark.parametrize(
    ("seq_q", "seq_k", "window", "sinks"),
    [(5, 5, 1, 3), (4, 4, 2, 4), (2, 6, 1, 6), (6, 6, 2, 10)],
)
def test_sinks_are_never_seen_by_a_query_before_them(seq_q, seq_k, window, sinks):
    mask = sliding_window_mask(seq_q, seq_k, window=window, sinks=sinks)
    assert torch.equal(mask, _loop(seq_q, seq_k, window, sinks))
    # Above the diagonal (keys after the query) nothing is visible, sinks included.
    offset = seq_k - seq_q
    assert not mask.triu(diagonal=offset + 1).any()


def test_the_first_query_of_a_square_mask_sees_only_itself():
    mask = sliding_window_mask(4, window=1, sinks=3)
    assert mask[0].tolist() == [True, False, False, False]
    assert mask[3].tolist() == [True, True, True, True]  # the three sinks and itself


def test_the_mask_is_made_on_the_device_asked_for():
    # The "meta" device has shapes and no data: enough to see where the mask is made.
    mask = sliding_window_mask(3, 5, window=2, sinks=1, device="meta")
    assert mask.device.type == "meta" and mask.shape == (3, 5) and mask.dtype == torch.bool
    assert sliding_window_mask(3, window=2).device.type == "cpu"


def test_the_causal_mask_is_made_on_the_device_asked_for():
    from mhsa_helpers.masking import causal_mask

    assert causal_mask(3, 5, device="meta").device.type == "meta"


def test_renormalize_treats_each_row_on_its_own():
    """Method 1 takes the softmax of each row: a row far below another must not underflow."""
    from mhsa_helpers.masking import masked_softmax_renormalize

    scores = torch.tensor([[0.0, 1.0, 2.0], [-200.0, -199.0, -198.0]])
    mask = torch.tensor([[True, True, False], [True, True, False]])
    weights = masked_softmax_renormalize(scores, mask)
    e = torch.exp(torch.tensor(-1.0))
    expected_row = torch.stack([e / (1 + e), 1 / (1 + e), torch.tensor(0.0)])  # softmax of (0, 1), then 0
    torch.testing.assert_close(weights, torch.stack([expected_row, expected_row]))


# padding_mask and combine_masks: their argument messages, compared whole -------------------------


def _raises(kind, message):
    return pytest.raises(kind, match=f"^{re.escape(message)}$")


@pytest.mark.parametrize(
    ("lengths", "seq_len", "error", "message"),
    [
        ([1.0], 3, TypeError, "lengths must be an integer tensor (token counts), got dtype torch.float32"),
        ([1], 0, ValueError, "seq_len must be >= 1, got 0"),
        ([1], 3.0, TypeError, "seq_len must be an int, got float 3.0 (expected >= 1)"),
        ([[1]], 3, ValueError, "lengths must be 1-D, one length per sequence (batch,), got shape (1, 1)"),
        ([2, 4], 3, ValueError, "lengths must lie in [0, seq_len=3], got values from 2 to 4"),
        ([-1, 2], 3, ValueError, "lengths must lie in [0, seq_len=3], got values from -1 to 2"),
    ],
)
def test_padding_mask_messages(lengths, seq_len, error, message):
    with _raises(error, message):
        padding_mask(torch.tensor(lengths), seq_len)


def test_padding_mask_of_meta_lengths_has_no_values_to_check():
    mask = padding_mask(torch.tensor([1, 2], device="meta"), 3)
    assert mask.device.type == "meta" and mask.shape == (2, 1, 1, 3)


def test_combine_masks_messages():
    rows = torch.ones(2, 3, dtype=torch.bool)
    with _raises(TypeError, "masks[1] must be a boolean tensor (True = may attend), got dtype torch.float32"):
        combine_masks(rows, torch.ones(3))
    with _raises(TypeError, "masks[1] must be a torch.Tensor, got list"):
        combine_masks(None, [True])
    with _raises(
        ValueError,
        "masks[1] of shape (4,) cannot be broadcast with the masks before it, of combined shape (2, 3)",
    ):
        combine_masks(rows, torch.ones(4, dtype=torch.bool))


def test_no_sinks_by_default():
    assert torch.equal(sliding_window_mask(3, window=1), torch.eye(3, dtype=torch.bool))


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        (
            {"window": 0},
            ValueError,
            "window must be >= 1 (each query sees itself and the window - 1 keys before it), got 0",
        ),
        (
            {"window": 2.0},
            TypeError,
            "window must be an int, got float 2.0 (expected >= 1 (each query sees itself and the window - 1 keys "
            "before it))",
        ),
        ({"window": 2, "sinks": -1}, ValueError, "sinks must be >= 0 (the first tokens every query may see), got -1"),
        (
            {"window": 2, "sinks": 1.0},
            TypeError,
            "sinks must be an int, got float 1.0 (expected >= 0 (the first tokens every query may see))",
        ),
    ],
)
def test_sliding_window_messages(options, error, message):
    with _raises(error, message):
        sliding_window_mask(3, **options)


def test_lengths_messages():
    with _raises(ValueError, "seq_q must be >= 1, got 0"):
        causal_mask(0)
    with _raises(ValueError, "seq_k must be >= 1, got 0"):
        causal_mask(2, 0)
    with _raises(
        ValueError, "seq_q must be <= seq_k (queries are the last seq_q of seq_k positions), got seq_q=3, seq_k=2"
    ):
        causal_mask(3, 2)


@pytest.mark.parametrize("method", [masked_softmax_neg_inf, masked_softmax_renormalize])
def test_scores_and_mask_messages(method):
    rows = torch.ones(2, dtype=torch.bool)
    with _raises(
        TypeError,
        "scores must have a floating-point dtype (float16, bfloat16, float32 or float64), got dtype torch.int64",
    ):
        method(torch.tensor([1, 2]), rows)
    with _raises(ValueError, "mask must be broadcastable to scores.shape = (2, 3), got shape (4,)"):
        method(torch.zeros(2, 3), torch.ones(4, dtype=torch.bool))
    with _raises(
        ValueError,
        "mask must be on the device of the tensors it masks (cpu), got device meta; move it with .to('cpu')",
    ):
        method(torch.zeros(2, 3), torch.ones(3, dtype=torch.bool, device="meta"))
