"""split_heads / merge_heads, per-head weight stacking, and the two fused QKV row orders."""

from __future__ import annotations

import torch
from hypothesis import given
from hypothesis import strategies as st

from mhsa_helpers import (
    fused_qkv_per_head_to_stacked,
    fused_qkv_stacked_to_per_head,
    merge_heads,
    split_heads,
    stack_head_weights,
    unstack_head_weights,
)

SEEDS = st.integers(0, 2**31 - 1)
batches = st.lists(st.integers(1, 3), min_size=0, max_size=2).map(tuple)


@given(batch=batches, seq=st.integers(1, 5), heads=st.integers(1, 4), d_head=st.integers(1, 4), seed=SEEDS)
def test_split_heads_layout_and_round_trip(batch, seq, heads, d_head, seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(*batch, seq, heads * d_head, generator=gen)
    split = split_heads(x, heads)
    assert split.shape == (*batch, heads, seq, d_head)
    # Head h at position s holds features h*d_head .. (h+1)*d_head - 1 of token s.
    for h in range(heads):
        for s in range(seq):
            assert torch.equal(split[..., h, s, :], x[..., s, h * d_head : (h + 1) * d_head])
    assert torch.equal(merge_heads(split), x)
    y = torch.randn(*batch, heads, seq, d_head, generator=gen)
    assert torch.equal(split_heads(merge_heads(y), heads), y)


def test_merge_heads_is_concatenation_of_heads():
    heads = torch.arange(2 * 3 * 2, dtype=torch.float32).reshape(2, 3, 2)  # (heads=2, seq=3, d_head=2)
    expected = torch.cat([heads[0], heads[1]], dim=-1)  # (seq, 4)
    assert torch.equal(merge_heads(heads), expected)
    # Seed 004's reshape without transposing back is not the same thing.
    assert not torch.equal(heads.reshape(3, 4), expected)


@given(heads=st.integers(1, 4), d_head=st.integers(1, 4), d_in=st.integers(1, 5), seed=SEEDS)
def test_stack_and_unstack_head_weights(heads, d_head, d_in, seed):
    gen = torch.Generator().manual_seed(seed)
    per_head = [torch.randn(d_head, d_in, generator=gen) for _ in range(heads)]
    stacked = stack_head_weights(per_head)
    assert stacked.shape == (heads * d_head, d_in)
    for i, w in enumerate(per_head):
        assert torch.equal(stacked[i * d_head : (i + 1) * d_head], w)
    back = unstack_head_weights(stacked, heads)
    assert len(back) == heads and all(torch.equal(a, b) for a, b in zip(back, per_head, strict=True))
    # Projecting with the stack then splitting == projecting with each head's matrix.
    x = torch.randn(3, d_in, generator=gen, dtype=torch.float32)
    split = split_heads(x @ stacked.T, heads)
    for i, w in enumerate(per_head):
        torch.testing.assert_close(split[i], x @ w.T)


def _seed_004_heads(x, w_fused, b_fused, num_heads):
    """Seed 004's compute_attention, up to the chunk: (b, n, 3*d_model) -> q, k, v (b, h, n, d_head)."""
    batch, seq, _ = x.shape
    head_dim = w_fused.shape[0] // (3 * num_heads)
    qkv = x @ w_fused.T + b_fused
    qkv = qkv.reshape(batch, seq, num_heads, 3 * head_dim)
    qkv = qkv.permute(0, 2, 1, 3)
    return qkv.chunk(3, dim=-1)


@given(heads=st.integers(1, 4), d_head=st.integers(1, 4), d_in=st.integers(1, 5), seed=SEEDS)
def test_fused_qkv_conversions_are_inverse_permutations(heads, d_head, d_in, seed):
    gen = torch.Generator().manual_seed(seed)
    rows = 3 * heads * d_head
    w = torch.randn(rows, d_in, generator=gen)
    b = torch.randn(rows, generator=gen)
    for convert, inverse in (
        (fused_qkv_per_head_to_stacked, fused_qkv_stacked_to_per_head),
        (fused_qkv_stacked_to_per_head, fused_qkv_per_head_to_stacked),
    ):
        for t in (w, b):
            converted = convert(t, heads)
            assert converted.shape == t.shape
            assert torch.equal(inverse(converted, heads), t)
        # A pure row permutation: every row appears exactly once.
        labels = torch.arange(rows, dtype=torch.float64)
        assert sorted(convert(labels, heads).tolist()) == labels.tolist()


@given(
    batch=st.integers(1, 3),
    seq=st.integers(1, 4),
    heads=st.integers(1, 4),
    d_head=st.integers(1, 4),
    d_in=st.integers(1, 5),
    seed=SEEDS,
)
def test_per_head_to_stacked_agrees_with_seed_004_chunking(batch, seq, heads, d_head, d_in, seed):
    gen = torch.Generator().manual_seed(seed)
    d_model = heads * d_head
    w_per_head = torch.randn(3 * d_model, d_in, generator=gen, dtype=torch.float64)
    b_per_head = torch.randn(3 * d_model, generator=gen, dtype=torch.float64)
    x = torch.randn(batch, seq, d_in, generator=gen, dtype=torch.float64)
    q_ref, k_ref, v_ref = _seed_004_heads(x, w_per_head, b_per_head, heads)

    w_stacked = fused_qkv_per_head_to_stacked(w_per_head, heads)
    b_stacked = fused_qkv_per_head_to_stacked(b_per_head, heads)
    q, k, v = (x @ w_stacked.T + b_stacked).chunk(3, dim=-1)  # [Q; K; V] rows
    for ours, ref in ((q, q_ref), (k, k_ref), (v, v_ref)):
        torch.testing.assert_close(split_heads(ours, heads), ref)

    # And the other direction: PyTorch's [Q; K; V] fed to seed 004's chunking.
    w_back = fused_qkv_stacked_to_per_head(w_stacked, heads)
    b_back = fused_qkv_stacked_to_per_head(b_stacked, heads)
    for ours, ref in zip((q, k, v), _seed_004_heads(x, w_back, b_back, heads), strict=True):
        torch.testing.assert_close(split_heads(ours, heads), ref)


def test_per_head_layout_by_hand():
    # 2 heads, d_head 1: per-head rows are [q0, k0, v0, q1, k1, v1].
    per_head = torch.tensor([10.0, 20.0, 30.0, 11.0, 21.0, 31.0])
    assert fused_qkv_per_head_to_stacked(per_head, 2).tolist() == [10.0, 11.0, 20.0, 21.0, 30.0, 31.0]
    assert fused_qkv_stacked_to_per_head(torch.tensor([10.0, 11.0, 20.0, 21.0, 30.0, 31.0]), 2).tolist() == [
        10.0,
        20.0,
        30.0,
        11.0,
        21.0,
        31.0,
    ]
