"""RoPE (mhsa_helpers/rope.py): edges that mutation testing (``make mutate``) showed unpinned.

Expected angles come from the paper's formula ``m * base^(-2i/d_head)`` in Python's ``math``
(float64); messages are compared whole, since they are what a learner reads.
"""

from __future__ import annotations

import pytest
import torch
from pinning import raises

from mhsa_helpers import RotaryEmbedding
from mhsa_helpers.rope import RopeScaling, apply_rotary, rope_angles, rope_frequencies, scaled_rope_frequencies

META = torch.device("meta")


def _angles(positions, d_head, base):
    return torch.tensor(
        [[m * base ** (-2 * i / d_head) for i in range(d_head // 2)] for m in positions], dtype=torch.float64
    )


def test_rope_angles_default_base_and_float64_angles_for_far_positions():
    positions = [0, 1, 7, 10_000, 30_001]
    cos, sin = rope_angles(torch.tensor(positions), 8)
    expected = _angles(positions, 8, 10000.0)
    assert cos.dtype == sin.dtype == torch.float32
    # m * theta in float32 would be off by ~1e-3 rad at m = 30001; in float64 only float32 rounding remains.
    torch.testing.assert_close(cos, expected.cos().float(), rtol=0, atol=2e-7)
    torch.testing.assert_close(sin, expected.sin().float(), rtol=0, atol=2e-7)


def test_rope_angles_uses_its_base():
    cos, sin = rope_angles(torch.tensor([3, 5]), 4, 100.0)
    expected = _angles([3, 5], 4, 100.0)
    torch.testing.assert_close(cos, expected.cos().float())
    torch.testing.assert_close(sin, expected.sin().float())


def test_rope_angles_messages():
    with raises(TypeError, "token_positions must be an integer tensor, got dtype torch.float32"):
        rope_angles(torch.tensor([0.0, 1.0]), 4)
    with raises(ValueError, "token_positions must be >= 0, got values from -2"):
        rope_angles(torch.tensor([3, -2, 0]), 4)


def test_rope_scaling_factor_message_says_what_it_is():
    with raises(
        ValueError, "factor must be a finite number >= 1 (how many times longer the context is), got factor=0.5"
    ):
        RopeScaling("linear", 0.5, 16)


@pytest.mark.parametrize("name", ["beta_slow", "beta_fast"])
@pytest.mark.parametrize("value", [0.0, -1.0])
def test_rope_scaling_betas_must_be_positive(name, value):
    betas = {"beta_fast": 32.0, "beta_slow": 1.0, name: value}
    with raises(ValueError, f"{name} must be a finite number > 0, got {name}={value}"):
        RopeScaling("yarn", 2.0, 16, **betas)


def test_rope_scaling_beta_fast_must_exceed_beta_slow():
    with raises(ValueError, "beta_fast must be > beta_slow, got beta_fast=2, beta_slow=2"):
        RopeScaling("yarn", 2.0, 16, beta_fast=2.0, beta_slow=2.0)
    assert RopeScaling("yarn", 2.0, 16, beta_fast=2.5, beta_slow=2.0).beta_fast == 2.5
    assert RopeScaling("yarn", 2.0, 16, beta_fast=0.5, beta_slow=0.25).beta_slow == 0.25


def test_half_precision_rebuilds_the_cache_on_the_module_device():
    rope = RotaryEmbedding(4, max_seq_len=8, device=META).half()
    assert rope.cos_cached.device == META and rope.sin_cached.device == META
    assert rope.cos_cached.dtype == rope.sin_cached.dtype == torch.float32
    assert rope.cos_cached.shape == rope.sin_cached.shape == (8, 2)


def test_extra_repr():
    assert repr(RotaryEmbedding(4, max_seq_len=8)) == (
        "RotaryEmbedding(d_head=4, max_seq_len=8, base=10000, convention='interleaved')"
    )
    scaling = RopeScaling("linear", 2.0, 8)
    assert repr(RotaryEmbedding(6, 16, 500.0, "half_split", scaling=scaling)) == (
        f"RotaryEmbedding(d_head=6, max_seq_len=16, base=500, convention='half_split', scaling={scaling})"
    )


def test_forward_and_angles_for_messages():
    rope = RotaryEmbedding(4, max_seq_len=8)
    with raises(TypeError, "x must be a torch.Tensor, got list"):
        rope([[0.0] * 4] * 3)
    with raises(ValueError, "x must have at least 2 dimensions (..., seq, d_head), got shape (4,)"):
        rope(torch.zeros(4))
    with raises(ValueError, "x must have last dimension d_head=4, got shape (3, 6)"):
        rope(torch.zeros(3, 6))
    with raises(TypeError, "token_positions must be a torch.Tensor, got list"):
        rope(torch.zeros(3, 4), [0, 1, 2])
    with raises(TypeError, "token_positions must be an integer tensor, got dtype torch.float32"):
        rope.angles_for(torch.tensor([0.5]))
    with raises(
        ValueError,
        "token_positions must be (seq,) or have x.ndim - 1 = 3 dimensions, one per dimension of "
        "x.shape[:-1] = (2, 2, 3) (for x (batch, heads, seq, d_head) pass positions[:, None, :], "
        "shaped (batch, 1, seq)), got shape (2, 3)",
    ):
        rope(torch.zeros(2, 2, 3, 4), torch.zeros(2, 3, dtype=torch.int64))


def test_argument_messages_of_the_rest_of_rope():
    with raises(ValueError, "d_head must be even for RoPE (dimensions are rotated in pairs), got d_head=5"):
        RotaryEmbedding(5)
    with raises(TypeError, "d_head must be an int, got float 4.0 (expected >= 1)"):
        rope_frequencies(4.0)
    with raises(ValueError, "base must be a finite number > 1 (10000 in most models), got base=1.0"):
        rope_frequencies(4, 1.0)
    with raises(ValueError, "max_seq_len must be >= 1, got 0"):
        RotaryEmbedding(4, 0)
    with raises(ValueError, "convention must be one of 'interleaved', 'half_split', got 'neox'"):
        RotaryEmbedding(4, convention="neox")
    with raises(
        ValueError,
        "x's last dimension d_head must be even for RoPE (dimensions are rotated in pairs), got x of shape (3, 5)",
    ):
        apply_rotary(torch.zeros(3, 5), torch.zeros(3, 2), torch.zeros(3, 2))
    for name in ("cos", "sin"):
        pair = {"cos": torch.zeros(3, 2), "sin": torch.zeros(3, 2), name: torch.zeros(3, 3)}
        with raises(ValueError, f"{name} must be broadcastable to (..., seq, d_head // 2) = (3, 2), got shape (3, 3)"):
            apply_rotary(torch.zeros(3, 4), pair["cos"], pair["sin"])
    with raises(TypeError, "scaling must be a RopeScaling or None, got str"):
        scaled_rope_frequencies(4, 10000.0, "yarn")
    with raises(
        ValueError, "d_head must be > 2 for method='ntk' (the base is scaled by factor^(d/(d-2))), got d_head=2"
    ):
        scaled_rope_frequencies(2, 10000.0, RopeScaling("ntk", 2.0, 16))
    with raises(
        ValueError,
        "token_positions must lie in [0, max_seq_len - 1] = [0, 7], got values from 2 to 8; "
        "build RotaryEmbedding with a larger max_seq_len",
    ):
        RotaryEmbedding(4, 8)(torch.zeros(3, 4), torch.tensor([2, 8, 5]))


def test_rope_frequencies_defaults_float32_and_exact_at_the_last_pair():
    theta = rope_frequencies(8)
    assert theta.dtype == torch.float32
    expected = torch.tensor([10000.0 ** (-2 * i / 8) for i in range(4)], dtype=torch.float64)
    torch.testing.assert_close(theta, expected.float(), rtol=0, atol=0)


def test_ntk_with_d_head_4_is_allowed():
    theta, factor = scaled_rope_frequencies(4, 10000.0, RopeScaling("ntk", 2.0, 16))
    # base * s^(d/(d-2)) = 10000 * 2^2; the slowest pair (i = 1) is divided by exactly s.
    expected = torch.tensor([1.0, (10000.0 * 4.0) ** (-2 / 4)], dtype=torch.float64)
    torch.testing.assert_close(theta, expected)
    assert factor == 1.0


def test_apply_rotary_x_messages():
    cos = sin = torch.zeros(2)
    with raises(TypeError, "x must be a torch.Tensor, got list"):
        apply_rotary([0.0] * 4, cos, sin)
    with raises(ValueError, "x must have at least 2 dimensions (..., seq, d_head), got shape (4,)"):
        apply_rotary(torch.zeros(4), cos, sin)


def test_rope_frequencies_are_made_on_the_device_asked_for():
    assert rope_frequencies(4, device=META).device == META
    assert rope_frequencies(4).device.type == "cpu"


def test_no_positions_give_no_angles():
    cos, sin = RotaryEmbedding(4, max_seq_len=8).angles_for(torch.zeros(0, dtype=torch.int64))
    assert cos.shape == sin.shape == (0, 2)


def test_apply_rotary_cos_sin_and_convention_messages():
    x, angles = torch.zeros(3, 4), torch.zeros(3, 2)
    with raises(TypeError, "cos must be a torch.Tensor, got list"):
        apply_rotary(x, [[0.0, 0.0]] * 3, angles)
    with raises(TypeError, "sin must be a torch.Tensor, got list"):
        apply_rotary(x, angles, [[0.0, 0.0]] * 3)
    with raises(ValueError, "convention must be one of 'interleaved', 'half_split', got 'neox'"):
        apply_rotary(x, angles, angles, "neox")


def test_scaled_rope_frequencies_default_base_is_10000():
    theta, factor = scaled_rope_frequencies(8)
    expected = torch.tensor([10000.0 ** (-2 * i / 8) for i in range(4)], dtype=torch.float64)
    torch.testing.assert_close(theta, expected, rtol=0, atol=0)
    assert factor == 1.0


def test_rotary_embedding_caches_2048_positions_by_default_and_saves_no_cache():
    rope = RotaryEmbedding(4)
    assert rope.max_seq_len == 2048 and rope.cos_cached.shape == rope.sin_cached.shape == (2048, 2)
    # The cache is a function of the settings: not in the state dict (checkpoints stay small).
    assert list(rope.state_dict()) == []


def test_angles_at_host_positions_are_the_table_rows_and_are_checked_as_integers():
    rope = RotaryEmbedding(d_head=4, max_seq_len=8)
    for start, length in ((0, 8), (3, 2), (7, 1)):
        cos, sin = rope.angles_at(start, length)
        expected_cos, expected_sin = rope.angles_for(torch.arange(start, start + length))
        assert torch.equal(cos, expected_cos) and torch.equal(sin, expected_sin)
    with pytest.raises(ValueError) as refused:
        rope.angles_at(6, 3)
    assert str(refused.value) == (
        "token_positions must lie in [0, max_seq_len - 1] = [0, 7], got values from 6 to 8; build RotaryEmbedding "
        "with a larger max_seq_len"
    )


@pytest.mark.parametrize("convention", ["interleaved", "half_split"])
def test_moved_back_rotates_each_row_back_by_its_shift_in_either_convention(convention):
    """A row rotated at position p + s, moved back by s, equals the row rotated at p (written out with
    rope_angles): rotations compose. A shift of 0 leaves its row exactly as it was."""
    rope = RotaryEmbedding(4, 16, convention=convention)
    raw = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(0))
    held_at, shifts = torch.tensor([5, 9, 4]), torch.tensor([0, 3, 4])
    rotated = apply_rotary(raw, *rope_angles(held_at, 4), convention)
    moved = rope.moved_back(rotated, shifts)
    torch.testing.assert_close(moved, apply_rotary(raw, *rope_angles(held_at - shifts, 4), convention))
    assert torch.equal(moved[:, 0], rotated[:, 0])


def test_moved_back_messages():
    rope = RotaryEmbedding(4, 8)
    x = torch.zeros(2, 4)
    with raises(TypeError, "shifts must be an integer tensor, got dtype torch.float32"):
        rope.moved_back(x, torch.tensor([0.0, 1.0]))
    with raises(ValueError, "shifts must lie in [0, max_seq_len - 1] = [0, 7], got values from -1 to 2"):
        rope.moved_back(x, torch.tensor([-1, 2]))
    with raises(ValueError, "shifts must lie in [0, max_seq_len - 1] = [0, 7], got values from 0 to 8"):
        rope.moved_back(x, torch.tensor([0, 8]))
