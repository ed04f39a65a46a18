"""Long-context pieces (notebook 09): sliding-window masks, ALiBi and stretched RoPE, each
against its definition written out here with loops, and their bad-input messages."""

from __future__ import annotations

import math

import pytest
import torch

from mhsa_helpers.long_context import (
    RopeScaling,
    alibi_bias,
    alibi_slopes,
    rope_wavelengths,
    scaled_rope_frequencies,
    sliding_window_mask,
)
from mhsa_helpers.masking import causal_mask

# ---------------------------------------------------------------- sliding windows


@pytest.mark.parametrize(
    ("seq_q", "seq_k", "window", "sinks"),
    [(6, 6, 3, 0), (6, 6, 1, 0), (6, 6, 6, 0), (6, 6, 2, 1), (2, 7, 3, 0), (3, 9, 2, 2), (5, 5, 9, 0)],
)
def test_window_mask_is_the_loop(seq_q, seq_k, window, sinks):
    expected = torch.zeros(seq_q, seq_k, dtype=torch.bool)
    for i in range(seq_q):
        position = seq_k - seq_q + i
        for j in range(seq_k):
            expected[i, j] = j <= position and (position - j < window or j < sinks)
    assert torch.equal(sliding_window_mask(seq_q, seq_k, window=window, sinks=sinks), expected)


def test_a_window_as_long_as_the_sequence_is_the_causal_mask():
    assert torch.equal(sliding_window_mask(5, window=5), causal_mask(5))
    assert torch.equal(sliding_window_mask(3, 8, window=100), causal_mask(3, 8))
    assert sliding_window_mask(6, window=1).equal(torch.eye(6, dtype=torch.bool))


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"window": 0}, ValueError, "window must be >= 1"),
        ({"window": 2.0}, TypeError, "window must be an int"),
        ({"window": 2, "sinks": -1}, ValueError, "sinks must be >= 0"),
    ],
)
def test_window_mask_names_a_bad_setting(kwargs, error, match):
    with pytest.raises(error, match=match):
        sliding_window_mask(4, **kwargs)
    with pytest.raises(ValueError, match="seq_q must be <= seq_k"):
        sliding_window_mask(5, 3, window=2)


# ---------------------------------------------------------------- ALiBi


def published_slopes(n):
    # The ALiBi paper's code (Press et al., github.com/ofirpress/attention_with_linear_biases).
    def power_of_2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + published_slopes(2 * closest)[0::2][: n - closest]


@pytest.mark.parametrize("num_heads", [1, 2, 3, 4, 6, 8, 12, 16, 20])
def test_alibi_slopes_are_the_published_ones(num_heads):
    torch.testing.assert_close(alibi_slopes(num_heads), torch.tensor(published_slopes(num_heads), dtype=torch.float32))


def test_eight_heads_get_halving_slopes():
    assert alibi_slopes(8).tolist() == [1 / 2**k for k in range(1, 9)]


def test_alibi_bias_is_minus_slope_times_distance():
    bias = alibi_bias(4, 3, 5)
    slopes = published_slopes(4)
    assert bias.shape == (4, 3, 5)
    for h in range(4):
        for i in range(3):
            for j in range(5):
                assert bias[h, i, j].item() == pytest.approx(-slopes[h] * abs(2 + i - j))


def test_alibi_names_a_bad_setting():
    with pytest.raises(ValueError, match="num_heads must be >= 1"):
        alibi_slopes(0)
    with pytest.raises(TypeError, match="num_heads must be an int"):
        alibi_bias(2.0, 3)


# ---------------------------------------------------------------- stretching RoPE

D, BASE = 16, 10000.0


def plain_theta(d=D, base=BASE):
    return torch.tensor([base ** (-2 * i / d) for i in range(d // 2)], dtype=torch.float64)


def test_no_scaling_is_rope_as_trained():
    theta, factor = scaled_rope_frequencies(D, BASE)
    torch.testing.assert_close(theta, plain_theta())
    assert factor == 1.0


def test_position_interpolation_divides_every_frequency():
    theta, factor = scaled_rope_frequencies(D, BASE, RopeScaling("linear", 4.0, 32))
    torch.testing.assert_close(theta, plain_theta() / 4.0)
    torch.testing.assert_close(rope_wavelengths(theta), 4.0 * rope_wavelengths(plain_theta()))
    assert factor == 1.0


def test_ntk_scales_the_base_and_stretches_only_the_slow_pairs():
    theta, _ = scaled_rope_frequencies(D, BASE, RopeScaling("ntk", 4.0, 32))
    torch.testing.assert_close(theta, plain_theta(base=BASE * 4.0 ** (D / (D - 2))))
    assert theta[0].item() == pytest.approx(1.0)  # the fastest pair is untouched
    assert theta[-1].item() == pytest.approx(plain_theta()[-1].item() / 4.0)  # the slowest is interpolated


def test_yarn_is_the_papers_ramp():
    s, length, alpha, beta = 4.0, 32, 1.0, 32.0
    theta, factor = scaled_rope_frequencies(D, BASE, RopeScaling("yarn", s, length, beta_fast=beta, beta_slow=alpha))
    expected = []
    for t in plain_theta().tolist():
        r = length / (2 * math.pi / t)  # turns in the original context
        gamma = 0.0 if r < alpha else 1.0 if r > beta else (r - alpha) / (beta - alpha)
        expected.append((1 - gamma) * t / s + gamma * t)
    torch.testing.assert_close(theta, torch.tensor(expected, dtype=torch.float64))
    assert factor == pytest.approx((0.1 * math.log(s) + 1) ** 2)
    # In a 1024-token context, pairs that turn more than 32 times are kept and pairs that turn less
    # than once are interpolated.
    long, _ = scaled_rope_frequencies(D, BASE, RopeScaling("yarn", s, 1024))
    assert long[0].item() == pytest.approx(1.0)
    assert long[-1].item() == pytest.approx(plain_theta()[-1].item() / s)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"method": "dynamic"}, ValueError, "method must be one of 'linear', 'ntk', 'yarn'"),
        ({"factor": 0.5}, ValueError, "factor must be a finite number >= 1"),
        ({"factor": "2"}, TypeError, "factor must be a number"),
        ({"original_max_seq_len": 0}, ValueError, "original_max_seq_len must be >= 1"),
        ({"beta_fast": 1.0, "beta_slow": 2.0}, ValueError, "beta_fast must be > beta_slow"),
    ],
)
def test_rope_scaling_names_a_bad_setting(kwargs, error, match):
    settings = {"method": "yarn", "factor": 2.0, "original_max_seq_len": 32, **kwargs}
    with pytest.raises(error, match=match):
        RopeScaling(**settings)


def test_scaled_frequencies_name_a_bad_argument():
    with pytest.raises(ValueError, match="d_head must be even"):
        scaled_rope_frequencies(7)
    with pytest.raises(TypeError, match="scaling must be a RopeScaling"):
        scaled_rope_frequencies(8, 10000.0, "ntk")


# ---------------------------------------------------------------- RotaryEmbedding with scaling


def test_rotary_embedding_rotates_by_the_scaled_angles():
    from mhsa_helpers import RotaryEmbedding, apply_rotary

    scaling = RopeScaling("ntk", 4.0, 32)
    rope = RotaryEmbedding(D, max_seq_len=128, scaling=scaling)
    theta, _ = scaled_rope_frequencies(D, BASE, scaling)
    x = torch.randn(2, 100, D, generator=torch.Generator().manual_seed(0))
    angles = torch.arange(100, dtype=torch.float64)[:, None] * theta
    expected = apply_rotary(x, angles.cos().float(), angles.sin().float())
    torch.testing.assert_close(rope(x), expected)
    assert "ntk" in repr(rope)
    # Without scaling it is the plain rotation; linear scaling at position 4m equals plain at m.
    plain = RotaryEmbedding(D, max_seq_len=128)
    linear = RotaryEmbedding(D, max_seq_len=128, scaling=RopeScaling("linear", 4.0, 32))
    positions = torch.arange(0, 100, 4)
    torch.testing.assert_close(linear(x[:, :25], positions), plain(x[:, :25], positions // 4))


def test_yarn_scales_the_scores_by_its_factor():
    from mhsa_helpers import RotaryEmbedding

    scaling = RopeScaling("yarn", 4.0, 32)
    rope = RotaryEmbedding(D, max_seq_len=64, scaling=scaling)
    _, factor = scaled_rope_frequencies(D, BASE, scaling)
    q = torch.randn(1, D, generator=torch.Generator().manual_seed(1))
    position = torch.tensor([0])
    # At position 0 nothing turns: only the magnitude changes, so q·q grows by the factor.
    rotated = rope(q, position)
    assert float(rotated @ rotated.T) == pytest.approx(factor * float(q @ q.T), rel=1e-5)


def test_rotary_embedding_refuses_a_bad_scaling():
    from mhsa_helpers import RotaryEmbedding

    with pytest.raises(TypeError, match="scaling must be a RopeScaling"):
        RotaryEmbedding(D, scaling="yarn")


# ---------------------------------------------------------------- an additive bias in attention (ALiBi)


@pytest.mark.parametrize("causal", [False, True])
def test_attention_with_an_alibi_bias_is_the_formula(causal):
    from mhsa_helpers import scaled_dot_product_attention

    g = torch.Generator().manual_seed(2)
    q, k, v = torch.randn(3, 2, 4, 5, 8, generator=g, dtype=torch.float64).unbind(0)
    bias = alibi_bias(4, 5).double()
    out, weights = scaled_dot_product_attention(q, k, v, bias=bias, is_causal=causal, need_weights=True)
    scores = q @ k.transpose(-2, -1) / math.sqrt(8) + bias
    if causal:
        scores = scores.masked_fill(~causal_mask(5), -math.inf)
    expected = torch.softmax(scores, dim=-1)
    torch.testing.assert_close(weights, expected)
    torch.testing.assert_close(out, expected @ v)
    # Without weights requested it takes the explicit path too (the fused kernel has no bias).
    torch.testing.assert_close(scaled_dot_product_attention(q, k, v, bias=bias, is_causal=causal), out)


def test_attention_names_a_bias_of_the_wrong_shape():
    from mhsa_helpers import scaled_dot_product_attention

    q = torch.randn(1, 4, 5, 8)
    with pytest.raises(ValueError, match=r"bias must be broadcastable to \(\.\.\., seq_q, seq_k\)"):
        scaled_dot_product_attention(q, q, q, bias=torch.zeros(4, 5, 6))
    with pytest.raises(TypeError, match="bias"):
        scaled_dot_product_attention(q, q, q, bias=torch.zeros(4, 5, 5, dtype=torch.long))
