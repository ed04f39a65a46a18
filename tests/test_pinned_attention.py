"""attend's defaults, which mutation testing (``make mutate``) showed unpinned: no causal mask
and no weights unless asked. The expected output is softmax(q kᵀ / √d) v written out here."""

from __future__ import annotations

import math
import re

import pytest
import torch

from mhsa_helpers.attention import attend, attention_scores


def test_attend_by_default_is_unmasked_and_returns_no_weights():
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 3, 4), torch.randn(1, 3, 4), torch.randn(1, 3, 2)
    out, weights = attend(q, k, v)
    assert weights is None
    expected = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(4), dim=-1) @ v
    torch.testing.assert_close(out, expected)  # the first query sees the last key: not causal


def test_half_precision_weights_use_the_scale_given():
    # float16 scores are computed in float32 (their own path): the scale must reach it too.
    torch.manual_seed(1)
    q, k, v = (torch.randn(1, 2, 4) for _ in range(3))
    _, weights = attend(q.half(), k.half(), v.half(), scale=0.1, need_weights=True)
    expected = torch.softmax(q.half().float() @ k.half().float().transpose(-2, -1) * 0.1, dim=-1)
    torch.testing.assert_close(weights.float(), expected, atol=2e-3, rtol=0)


# The argument messages of attention_scores / attend, compared whole (a learner reads them) -------

Z = torch.zeros


def _scores(q, k):
    return attention_scores(q, k)


def _attend(q, k, v, **options):
    return attend(q, k, v, **options)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: _scores([1.0], Z(2, 3)), TypeError, "q must be a torch.Tensor, got list"),
        (
            lambda: _scores(Z(3), Z(2, 3)),
            ValueError,
            "q must have at least 2 dimensions (..., seq_q, d_k), got shape (3,)",
        ),
        (lambda: _scores(Z(2, 3), [1.0]), TypeError, "k must be a torch.Tensor, got list"),
        (
            lambda: _scores(Z(2, 3), Z(3)),
            ValueError,
            "k must have at least 2 dimensions (..., seq_k, d_k), got shape (3,)",
        ),
        (
            lambda: _scores(Z(2, 3, dtype=torch.long), Z(2, 3)),
            TypeError,
            "q must have a floating-point dtype (float16, bfloat16, float32 or float64), got dtype torch.int64",
        ),
        (
            lambda: _scores(Z(2, 3), Z(2, 3, dtype=torch.long)),
            TypeError,
            "k must have a floating-point dtype (float16, bfloat16, float32 or float64), got dtype torch.int64",
        ),
        (
            lambda: _scores(Z(2, 3), Z(2, 3, dtype=torch.float64)),
            TypeError,
            "k must have the same dtype as q (torch.float32), got torch.float64",
        ),
        (
            lambda: _scores(Z(2, 3), Z(2, 4)),
            ValueError,
            "k must have the same last dimension d_k as q: expected k.shape[-1] == 3, "
            "got q shape (2, 3) and k shape (2, 4)",
        ),
        (
            lambda: _scores(Z(2, 2, 3), Z(3, 2, 3)),
            ValueError,
            "q and k must have broadcastable batch dimensions, got q shape (2, 2, 3), k shape (3, 2, 3)",
        ),
        (
            lambda: _attend(Z(2, 2, 3), Z(2, 2, 3), Z(3, 2, 3)),
            ValueError,
            "q, k and v must have broadcastable batch dimensions, got q shape (2, 2, 3), k shape (2, 2, 3), "
            "v shape (3, 2, 3)",
        ),
        (lambda: _attend(Z(2, 3), Z(2, 3), [1.0]), TypeError, "v must be a torch.Tensor, got list"),
        (
            lambda: _attend(Z(2, 3), Z(2, 3), Z(3)),
            ValueError,
            "v must have at least 2 dimensions (..., seq_k, d_v), got shape (3,)",
        ),
        (
            lambda: _attend(Z(2, 3), Z(2, 3), Z(2, 3, dtype=torch.float64)),
            TypeError,
            "v must have the same dtype as q (torch.float32), got torch.float64",
        ),
        (
            lambda: _attend(Z(2, 3), Z(2, 3), Z(3, 3)),
            ValueError,
            "v must have one row per key: expected v.shape[-2] == seq_k == 2, got k shape (2, 3) and v shape (3, 3)",
        ),
        (
            lambda: _attend(Z(0, 3), Z(2, 3), Z(2, 3)),
            ValueError,
            "q and k must hold at least one position (seq >= 1), got q shape (0, 3) and k shape (2, 3)",
        ),
        (
            lambda: _attend(Z(2, 3), Z(2, 3), Z(2, 3), dropout_p=1.0),
            ValueError,
            "dropout_p must be in [0, 1), got dropout_p=1.0",
        ),
        (
            lambda: _attend(Z(2, 3), Z(2, 3), Z(2, 3), bias=Z(3, 3)),
            ValueError,
            "bias must be broadcastable to (..., seq_q, seq_k) = (2, 2), got shape (3, 3)",
        ),
        (lambda: _attend(Z(2, 3), Z(2, 3), Z(2, 3), bias=[1.0]), TypeError, "bias must be a torch.Tensor, got list"),
        (
            lambda: _attend(Z(3, 3), Z(2, 3), Z(2, 3), is_causal=True),
            ValueError,
            "is_causal needs seq_q <= seq_k (queries are the last seq_q positions), got seq_q=3, seq_k=2",
        ),
    ],
)
def test_argument_messages(call, error, message):
    with pytest.raises(error, match=f"^{re.escape(message)}$"):
        call()


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda: _attend(Z(3, 2, 3), Z(1, 2, 3), Z(2, 2, 3)),
            ValueError,
            "q, k and v must have broadcastable batch dimensions, got q shape (3, 2, 3), k shape (1, 2, 3), "
            "v shape (2, 2, 3)",
        ),
        (
            lambda: _attend(Z(1, 2, 3), Z(3, 2, 3), Z(2, 2, 3)),
            ValueError,
            "q, k and v must have broadcastable batch dimensions, got q shape (1, 2, 3), k shape (3, 2, 3), "
            "v shape (2, 2, 3)",
        ),
        (
            lambda: _attend(Z(2, 3), Z(2, 3), Z(2, 3), dropout_p=-0.1),
            ValueError,
            "dropout_p must be in [0, 1), got dropout_p=-0.1",
        ),
        (
            lambda: _attend(Z(2, 3), Z(2, 3), Z(2, 3), mask=Z(2, 2)),
            TypeError,
            "mask must be a boolean tensor where True means 'may attend', got dtype torch.float32; convert a 0/1 "
            "mask with mask.bool(), or a 'True = blocked' mask with ~mask",
        ),
        (
            lambda: _attend(Z(2, 3), Z(2, 3), Z(2, 3), mask=torch.ones(3, 3, dtype=torch.bool)),
            ValueError,
            "mask must be broadcastable to (..., seq_q, seq_k) = (2, 2), got shape (3, 3)",
        ),
        (
            lambda: _attend(Z(2, 3), Z(2, 3), Z(2, 3), mask=torch.ones(2, 2, dtype=torch.bool, device="meta")),
            ValueError,
            "mask must be on the device of the tensors it masks (cpu), got device meta; move it with .to('cpu')",
        ),
        (
            lambda: _attend(Z(2, 3), Z(2, 3), Z(2, 3), bias=torch.zeros(2, 2, dtype=torch.long)),
            TypeError,
            "bias must have a floating-point dtype (float16, bfloat16, float32 or float64), got dtype torch.int64",
        ),
    ],
)
def test_more_argument_messages(call, error, message):
    with pytest.raises(error, match=f"^{re.escape(message)}$"):
        call()


def test_a_dropout_just_below_1_is_allowed():
    out, weights = attend(Z(2, 3), Z(2, 3), torch.ones(2, 3), dropout_p=0.999, need_weights=True)
    assert out.shape == (2, 3) and weights.shape == (2, 2)


def test_the_bias_is_added_to_the_scaled_scores():
    from mhsa_helpers.attention import scaled_dot_product_attention

    torch.manual_seed(2)
    q, k, v = torch.randn(1, 3, 4), torch.randn(1, 3, 4), torch.randn(1, 3, 2)
    bias = torch.tensor([[0.0, -1.0, -2.0], [-1.0, 0.0, -1.0], [-2.0, -1.0, 0.0]])
    weights = torch.softmax(q @ k.transpose(-2, -1) / 2.0 + bias, dim=-1)
    out, got = scaled_dot_product_attention(q, k, v, bias=bias, need_weights=True)
    torch.testing.assert_close(got, weights)
    torch.testing.assert_close(out, weights @ v)
    torch.testing.assert_close(scaled_dot_product_attention(q, k, v, bias=bias), weights @ v)


def test_the_d_k_message_names_the_last_dimension_of_batched_queries():
    message = (
        "k must have the same last dimension d_k as q: expected k.shape[-1] == 3, "
        "got q shape (1, 2, 3) and k shape (1, 2, 4)"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        attention_scores(Z(1, 2, 3), Z(1, 2, 4))
