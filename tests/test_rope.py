"""RoPE against two independent formulations (Hugging Face's rotate_half and
Meta's complex numbers), its relative-position property, and the weight
permutation that converts between the two pairing conventions."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from mhsa_helpers import (
    RotaryEmbedding,
    permute_rope_weight,
    rope_frequencies,
    rope_permutation,
    split_heads,
)
from mhsa_helpers.weight_layouts import from_projection_weights

SEEDS = st.integers(0, 2**31 - 1)
CONVENTIONS = ["interleaved", "half_split"]
even_d_head = st.integers(1, 8).map(lambda n: 2 * n)


# ---------------------------------------------------------------- references written out here


def _inv_freq(d_head, base):
    return 1.0 / (base ** (torch.arange(0, d_head, 2, dtype=torch.float64) / d_head))


def _hf_rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def _hf_rope(x, positions, base):
    """Hugging Face LLaMA: emb = cat((freqs, freqs)); q * cos + rotate_half(q) * sin."""
    freqs = torch.outer(positions.to(torch.float64), _inv_freq(x.shape[-1], base))
    emb = torch.cat((freqs, freqs), dim=-1)
    return x * emb.cos() + _hf_rotate_half(x) * emb.sin()


def _complex_rope(x, positions, base):
    """Meta's LLaMA: pairs (x[2i], x[2i+1]) as complex numbers times exp(i * m * theta_i)."""
    freqs = torch.outer(positions.to(torch.float64), _inv_freq(x.shape[-1], base))
    freqs_cis = torch.polar(torch.ones_like(freqs), freqs)
    x_complex = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2).contiguous())
    return torch.view_as_real(x_complex * freqs_cis).flatten(-2)


# ---------------------------------------------------------------- tests


def test_rope_frequencies_by_hand():
    torch.testing.assert_close(rope_frequencies(4, 10000.0), torch.tensor([1.0, 0.01], dtype=torch.float32))
    torch.testing.assert_close(
        rope_frequencies(6, 64.0).double(), torch.tensor([1.0, 0.25, 1 / 16], dtype=torch.float64)
    )


def test_single_pair_rotation_by_hand():
    """d_head = 2, position 1: a plain rotation by 1 radian."""
    rope = RotaryEmbedding(2, max_seq_len=4)
    x = torch.tensor([[1.0, 0.0], [1.0, 0.0]], dtype=torch.float64)  # positions 0 and 1
    expected = torch.tensor([[1.0, 0.0], [math.cos(1.0), math.sin(1.0)]], dtype=torch.float64)
    torch.testing.assert_close(rope(x), expected, atol=1e-7, rtol=0)


@pytest.mark.parametrize(
    "convention, reference",
    [("half_split", _hf_rope), ("interleaved", _complex_rope)],
    ids=["half_split-equals-hugging-face-formula", "interleaved-equals-complex-formulation"],
)
@given(
    d_head=even_d_head,
    seq=st.integers(1, 6),
    start=st.integers(0, 2000),
    base=st.sampled_from([10000.0, 500000.0, 100.0]),
    seed=SEEDS,
)
def test_equals_independent_formula(convention, reference, d_head, seq, start, base, seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 3, seq, d_head, generator=gen, dtype=torch.float64)
    positions = torch.arange(start, start + seq)
    rope = RotaryEmbedding(d_head, max_seq_len=2048 + 6, base=base, convention=convention)
    # The angles are exact to float64; only cos/sin are rounded to float32 (|error| <= 6e-8 each).
    torch.testing.assert_close(rope(x, positions), reference(x, positions, base), atol=1e-6, rtol=0)


@pytest.mark.parametrize("convention", CONVENTIONS)
def test_default_positions_and_batched_positions(convention):
    gen = torch.Generator().manual_seed(0)
    rope = RotaryEmbedding(8, max_seq_len=32, convention=convention)
    x = torch.randn(2, 3, 5, 8, generator=gen, dtype=torch.float64)  # (batch, heads, seq, d_head)
    torch.testing.assert_close(rope(x), rope(x, torch.arange(5)))
    # Per-example positions (batch, 1, seq) broadcast over heads.
    positions = torch.stack([torch.arange(5), torch.arange(10, 15)])
    out = rope(x, positions[:, None, :])
    torch.testing.assert_close(out[0], rope(x[0], torch.arange(5)))
    torch.testing.assert_close(out[1], rope(x[1], torch.arange(10, 15)))
    reference = _hf_rope if convention == "half_split" else _complex_rope
    torch.testing.assert_close(out[1], reference(x[1], torch.arange(10, 15), 10000.0), atol=2e-6, rtol=1e-6)


@pytest.mark.parametrize("convention", CONVENTIONS)
def test_rotation_preserves_norm_and_position_zero_is_identity(convention):
    gen = torch.Generator().manual_seed(1)
    rope = RotaryEmbedding(6, max_seq_len=64, convention=convention)
    x = torch.randn(4, 6, generator=gen, dtype=torch.float64)
    out = rope(x, torch.tensor([0, 5, 17, 63]))
    torch.testing.assert_close(out.norm(dim=-1), x.norm(dim=-1), atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(out[0], x[0])


@given(
    convention=st.sampled_from(CONVENTIONS),
    d_head=even_d_head,
    m=st.integers(0, 200),
    n=st.integers(0, 200),
    shift=st.integers(0, 300),
    seed=SEEDS,
)
def test_scores_depend_only_on_relative_position(convention, d_head, m, n, shift, seed):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(d_head, generator=gen, dtype=torch.float64)
    k = torch.randn(d_head, generator=gen, dtype=torch.float64)
    rope = RotaryEmbedding(d_head, max_seq_len=512, convention=convention)

    def score(qm, kn):
        return rope(q[None], torch.tensor([qm]))[0] @ rope(k[None], torch.tensor([kn]))[0]

    torch.testing.assert_close(score(m + shift, n + shift), score(m, n), atol=1e-5, rtol=1e-5)
    # Not a tautology: the score does move when only one of the two positions moves.
    assert not torch.allclose(score(m + 1, n), score(m, n), atol=1e-9, rtol=0)


@given(
    convention_pair=st.sampled_from([("interleaved", "half_split"), ("half_split", "interleaved")]),
    d_head=even_d_head,
    seed=SEEDS,
)
def test_rope_permutation_property(convention_pair, d_head, seed):
    source, target = convention_pair
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(5, d_head, generator=gen, dtype=torch.float64)
    positions = torch.tensor([0, 1, 7, 30, 99])
    rope_source = RotaryEmbedding(d_head, max_seq_len=100, convention=source)
    rope_target = RotaryEmbedding(d_head, max_seq_len=100, convention=target)
    perm = rope_permutation(d_head, source, target)
    assert sorted(perm.tolist()) == list(range(d_head))
    torch.testing.assert_close(rope_target(x[:, perm], positions), rope_source(x, positions)[:, perm])


def test_rope_permutation_by_hand():
    assert rope_permutation(6, "interleaved", "half_split").tolist() == [0, 2, 4, 1, 3, 5]
    assert rope_permutation(6, "half_split", "interleaved").tolist() == [0, 3, 1, 4, 2, 5]
    assert rope_permutation(4, "half_split", "half_split").tolist() == [0, 1, 2, 3]


def _rotated_scores(x, w_q, w_k, num_heads, rope):
    q = rope(split_heads(x @ w_q.T, num_heads))
    k = rope(split_heads(x @ w_k.T, num_heads))
    return q @ k.transpose(-2, -1)


@given(
    num_heads=st.integers(1, 3),
    d_head=st.sampled_from([4, 6, 8]),  # with d_head = 2 there is one pair and both conventions coincide
    seq=st.integers(2, 6),
    seed=SEEDS,
    direction=st.sampled_from([("interleaved", "half_split"), ("half_split", "interleaved")]),
)
def test_conventions_agree_after_permuting_wq_wk(num_heads, d_head, seq, seed, direction):
    source, target = direction
    gen = torch.Generator().manual_seed(seed)
    d_model = num_heads * d_head
    x = torch.randn(2, seq, d_model, generator=gen, dtype=torch.float64)
    w_q, w_k = (torch.randn(d_model, d_model, generator=gen, dtype=torch.float64) for _ in range(2))
    rope_s = RotaryEmbedding(d_head, max_seq_len=16, convention=source)
    rope_t = RotaryEmbedding(d_head, max_seq_len=16, convention=target)

    scores_source = _rotated_scores(x, w_q, w_k, num_heads, rope_s)
    w_q_t = permute_rope_weight(w_q, num_heads, source, target)
    w_k_t = permute_rope_weight(w_k, num_heads, source, target)
    torch.testing.assert_close(_rotated_scores(x, w_q_t, w_k_t, num_heads, rope_t), scores_source)

    # Without the permutation: the same at (0, 0), different elsewhere.
    unpermuted = _rotated_scores(x, w_q, w_k, num_heads, rope_t)
    torch.testing.assert_close(unpermuted[..., 0, 0], scores_source[..., 0, 0])
    assert not torch.allclose(unpermuted, scores_source, atol=1e-6)


@pytest.mark.parametrize("source, target", [("interleaved", "half_split"), ("half_split", "interleaved")])
def test_module_outputs_agree_after_permuting_wq_wk(source, target):
    gen = torch.Generator().manual_seed(3)
    num_heads, d_head, seq = 2, 4, 5
    d_model = num_heads * d_head
    w_q, w_k, w_v, w_o = (torch.randn(d_model, d_model, generator=gen, dtype=torch.float64) for _ in range(4))
    b_q, b_k, b_v = (torch.randn(d_model, generator=gen, dtype=torch.float64) for _ in range(3))
    x = torch.randn(3, seq, d_model, generator=gen, dtype=torch.float64)
    options = {"num_heads": num_heads, "layout": "out_in", "causal": True}

    def rotary(convention):
        return RotaryEmbedding(d_head, 16, convention=convention)

    original = from_projection_weights(
        w_q, w_k, w_v, w_o, q_bias=b_q, k_bias=b_k, v_bias=b_v, rope=rotary(source), **options
    )
    converted = from_projection_weights(
        permute_rope_weight(w_q, num_heads, source, target),
        permute_rope_weight(w_k, num_heads, source, target),
        w_v,
        w_o,
        q_bias=permute_rope_weight(b_q, num_heads, source, target),
        k_bias=permute_rope_weight(b_k, num_heads, source, target),
        v_bias=b_v,
        rope=rotary(target),
        **options,
    )
    mixed = from_projection_weights(
        w_q, w_k, w_v, w_o, q_bias=b_q, k_bias=b_k, v_bias=b_v, rope=rotary(target), **options
    )
    expected, expected_weights = original(x, need_weights=True)
    out, weights = converted(x, need_weights=True)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(weights, expected_weights)
    wrong = mixed(x)
    # Causal: position 0 only sees itself (rotation by 0 in both conventions).
    torch.testing.assert_close(wrong[:, 0], expected[:, 0])
    assert not torch.allclose(wrong[:, 1:], expected[:, 1:], atol=1e-6)


def test_half_precision_module_keeps_float32_cache():
    rope = RotaryEmbedding(8, max_seq_len=4096).half()
    assert rope.cos_cached.dtype == torch.float32 and rope.sin_cached.dtype == torch.float32
    x = torch.ones(1, 8, dtype=torch.float16)
    out = rope(x, torch.tensor([4000]))
    assert out.dtype == torch.float16
    reference = _complex_rope(x.double(), torch.tensor([4000]), 10000.0)
    torch.testing.assert_close(out.double(), reference, atol=2e-3, rtol=2e-3)


def test_angles_for_by_hand():
    rope = RotaryEmbedding(4, max_seq_len=10, base=100.0)
    cos, sin = rope.angles_for(torch.tensor([[3], [7]]))
    assert cos.shape == (2, 1, 2)
    angles = torch.tensor([[[3.0, 0.3]], [[7.0, 0.7]]], dtype=torch.float64)
    torch.testing.assert_close(cos.double(), angles.cos(), atol=1e-7, rtol=0)
    torch.testing.assert_close(sin.double(), angles.sin(), atol=1e-7, rtol=0)


def test_token_positions_may_not_grow_x_or_line_up_with_the_wrong_axis():
    rope = RotaryEmbedding(4, max_seq_len=16)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(1, 3, 4, generator=gen)
    assert rope(x, torch.arange(3)).shape == x.shape
    assert rope(x, torch.arange(3)[None]).shape == x.shape
    two_rows = torch.stack((torch.arange(3), torch.arange(5, 8)))  # (2, 3) would make the output (2, 3, 4)
    with pytest.raises(ValueError, match=r"token_positions must be broadcastable to x.shape\[:-1\] = \(1, 3\)"):
        rope(x, two_rows)
    # (batch, seq) positions against (batch, heads, seq, d_head) with batch == heads broadcast,
    # but would give head h the positions of example h: refused, with the fix in the message.
    x4 = torch.randn(2, 2, 3, 4, generator=gen)
    with pytest.raises(ValueError, match=r"token_positions .*\(batch, 1, seq\)"):
        rope(x4, two_rows)
    out = rope(x4, two_rows[:, None, :])
    assert out.shape == x4.shape
    for b in range(2):
        torch.testing.assert_close(out[b], rope(x4[b], two_rows[b]))
