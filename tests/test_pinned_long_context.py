"""ALiBi, RoPE scaling and wavelengths: edges that mutation testing (``make mutate``) showed unpinned.

Expected values come from the formulas in the docstrings (and the papers they cite), computed
here in plain Python, never from the functions under test.
"""

from __future__ import annotations

import math

import pytest
import torch
from pinning import raises

from mhsa_helpers.long_context import RopeScaling, alibi_bias, alibi_slopes, rope_wavelengths, scaled_rope_frequencies


def test_alibi_slopes_are_float32_whatever_the_default_dtype():
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        slopes = alibi_slopes(4)
    finally:
        torch.set_default_dtype(previous)
    assert slopes.dtype == torch.float32
    assert slopes.tolist() == [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8]


def test_alibi_bias_has_no_negative_zero():
    # -slope * 0 is -0.0 in floating point; the diagonal must print as 0, not -0.
    bias = alibi_bias(2, 3, 5)
    zeros = bias[bias == 0]
    assert zeros.numel() == 2 * 3 and not torch.signbit(zeros).any()


def test_alibi_bias_is_made_on_the_device_asked_for():
    # The "meta" device has shapes and no data: enough to see where every part is made.
    bias = alibi_bias(2, 3, 5, device="meta")
    assert bias.device.type == "meta" and bias.shape == (2, 3, 5)


@pytest.mark.parametrize("factor", [1.0, 1.5, 2.0, 4.0])
def test_yarn_score_factor_is_the_square_of_0_1_ln_s_plus_1(factor):
    scaling = RopeScaling("yarn", factor, original_max_seq_len=64)
    _, score_factor = scaled_rope_frequencies(8, scaling=scaling)
    assert score_factor == pytest.approx((0.1 * math.log(factor) + 1.0) ** 2, rel=1e-12)


def test_rope_wavelengths_are_tokens_per_full_turn():
    theta = torch.tensor([1.0, 0.5, 2 * math.pi, 2 * math.pi / 100], dtype=torch.float64)
    assert rope_wavelengths(theta).tolist() == pytest.approx([2 * math.pi, 4 * math.pi, 1.0, 100.0])


@pytest.mark.parametrize("theta", [torch.tensor([1, 2]), [1.0, 2.0]], ids=["int tensor", "list"])
def test_rope_wavelengths_name_theta_when_refusing_it(theta):
    with pytest.raises(TypeError, match=r"^theta must"):
        rope_wavelengths(theta)


def test_bad_arguments_are_named_in_the_message():
    with raises(ValueError, "num_heads must be >= 1, got 0"):
        alibi_slopes(0)
    with raises(ValueError, "num_heads must be >= 1, got 0"):
        alibi_bias(0, 2)
    with raises(TypeError, "num_heads must be an int, got float 2.0 (expected >= 1)"):
        alibi_bias(2.0, 2)
    with raises(
        ValueError, "seq_q must be <= seq_k (queries are the last seq_q of seq_k positions), got seq_q=3, seq_k=2"
    ):
        alibi_bias(2, 3, 2)
    with raises(
        TypeError,
        "theta must have a floating-point dtype (float16, bfloat16, float32 or float64), got dtype torch.int64",
    ):
        rope_wavelengths(torch.arange(3))
    with raises(TypeError, "theta must be a torch.Tensor, got list"):
        rope_wavelengths([1.0])
