"""causal_mask, padding_mask, combine_masks and the two masked softmax methods,
against masks and weights built by hand."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from mhsa_helpers import (
    causal_mask,
    combine_masks,
    masked_softmax_neg_inf,
    masked_softmax_renormalize,
    padding_mask,
    softmax,
)

SEEDS = st.integers(0, 2**31 - 1)


def _hand_causal(seq_q, seq_k):
    rows = []
    for i in range(seq_q):
        absolute = seq_k - seq_q + i
        rows.append([j <= absolute for j in range(seq_k)])
    return torch.tensor(rows, dtype=torch.bool)


def test_causal_mask_literal():
    expected = torch.tensor([[True, False, False], [True, True, False], [True, True, True]], dtype=torch.bool)
    assert torch.equal(causal_mask(3), expected)
    # Two new queries after three cached keys: they sit at positions 3 and 4.
    expected_offset = torch.tensor([[True, True, True, True, False], [True, True, True, True, True]], dtype=torch.bool)
    assert torch.equal(causal_mask(2, 5), expected_offset)


@given(seq_q=st.integers(1, 12), extra=st.integers(0, 12))
def test_causal_mask_matches_hand_built(seq_q, extra):
    seq_k = seq_q + extra
    mask = causal_mask(seq_q, seq_k)
    assert mask.dtype == torch.bool and mask.shape == (seq_q, seq_k)
    assert torch.equal(mask, _hand_causal(seq_q, seq_k))
    # The last query of an offset mask is a row of the full square mask.
    assert torch.equal(mask, causal_mask(seq_k)[seq_k - seq_q :])


def test_causal_mask_device_argument():
    assert causal_mask(3, device="cpu").device.type == "cpu"


def test_padding_mask_literal():
    mask = padding_mask(torch.tensor([2, 4, 0]), 4)
    assert mask.shape == (3, 1, 1, 4) and mask.dtype == torch.bool
    expected = torch.tensor([[True, True, False, False], [True, True, True, True], [False, False, False, False]])
    assert torch.equal(mask[:, 0, 0], expected)


@given(lengths=st.lists(st.integers(0, 9), min_size=1, max_size=5), extra=st.integers(0, 3))
def test_padding_mask_matches_hand_built(lengths, extra):
    seq_len = max(lengths) + extra if max(lengths) + extra > 0 else 1
    mask = padding_mask(torch.tensor(lengths), seq_len)
    for b, length in enumerate(lengths):
        assert mask[b, 0, 0].tolist() == [j < length for j in range(seq_len)]


def test_combine_masks_is_logical_and_with_broadcasting():
    causal = causal_mask(4)  # (4, 4)
    padding = padding_mask(torch.tensor([3, 4]), 4)  # (2, 1, 1, 4)
    combined = combine_masks(causal, None, padding)
    assert combined.shape == (2, 1, 4, 4)
    for b, length in enumerate([3, 4]):
        for i in range(4):
            for j in range(4):
                assert bool(combined[b, 0, i, j]) == (j <= i and j < length)
    assert combine_masks() is None
    assert combine_masks(None, None) is None
    assert torch.equal(combine_masks(causal), causal)


@st.composite
def scores_and_mask(draw):
    batch = tuple(draw(st.lists(st.integers(1, 3), min_size=0, max_size=2)))
    seq_q, seq_k = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    gen = torch.Generator().manual_seed(draw(SEEDS))
    scores = torch.randn(*batch, seq_q, seq_k, generator=gen, dtype=torch.float64) * 4
    mask_shape = (seq_q, seq_k) if draw(st.booleans()) else (*batch, seq_q, seq_k)
    mask = torch.rand(*mask_shape, generator=gen) < draw(st.sampled_from([0.3, 0.7, 1.0]))
    return scores, mask


def _hand_masked_softmax(scores, mask):
    mask = mask.expand(scores.shape)
    out = torch.zeros_like(scores)
    for index in itertools.product(*(range(n) for n in scores.shape[:-1])):
        row, keep = scores[index], mask[index]
        exps = [math.exp(s) if m else 0.0 for s, m in zip(row.tolist(), keep.tolist(), strict=True)]
        total = sum(exps)
        out[index] = torch.tensor([e / total if total else 0.0 for e in exps], dtype=scores.dtype)
    return out


@given(scores_and_mask())
def test_both_masked_softmax_methods_match_hand_built(inputs):
    scores, mask = inputs
    expected = _hand_masked_softmax(scores, mask)
    neg_inf = masked_softmax_neg_inf(scores, mask)
    renorm = masked_softmax_renormalize(scores, mask)
    torch.testing.assert_close(neg_inf, expected)
    torch.testing.assert_close(renorm, expected)
    torch.testing.assert_close(neg_inf, renorm)
    assert not torch.isnan(neg_inf).any() and not torch.isnan(renorm).any()


def test_seed_002_style_example():
    """Seed 002's running example: a causal mask on a 3-token score matrix."""
    scores = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]], dtype=torch.float64)
    weights = masked_softmax_neg_inf(scores, causal_mask(3))
    e = math.e
    expected = torch.tensor(
        [
            [1.0, 0.0, 0.0],
            [1 / (1 + e), e / (1 + e), 0.0],
            [1 / (1 + e + e * e), e / (1 + e + e * e), e * e / (1 + e + e * e)],
        ],
        dtype=torch.float64,
    )
    torch.testing.assert_close(weights, expected)
    torch.testing.assert_close(masked_softmax_renormalize(scores, causal_mask(3)), expected)
    # Rows sum to one (seed 002's "not zero" means "not one" before renormalising).
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, dtype=torch.float64))
    unmasked_then_zeroed = softmax(scores) * causal_mask(3)
    assert not torch.allclose(unmasked_then_zeroed.sum(-1), torch.ones(3, dtype=torch.float64))


def test_masked_softmax_with_combined_causal_and_padding_masks():
    gen = torch.Generator().manual_seed(7)
    scores = torch.randn(2, 3, 4, 4, generator=gen, dtype=torch.float64)
    mask = combine_masks(causal_mask(4), padding_mask(torch.tensor([4, 2]), 4))
    weights = masked_softmax_neg_inf(scores, mask)
    assert (weights[1, :, :, 2:] == 0).all()
    torch.testing.assert_close(weights, _hand_masked_softmax(scores, mask))
    torch.testing.assert_close(weights, masked_softmax_renormalize(scores, mask))


@pytest.mark.parametrize("gap, exact_in_float32", [(50.0, True), (100.0, False), (110.0, False)])
def test_renormalize_loses_visible_weights_when_a_blocked_score_dominates(gap, exact_in_float32):
    """The documented caveat: method 1 takes the softmax over all keys first, so a blocked score
    `gap` above the visible ones shrinks their exps to ~exp(-gap). In float32 that loses digits
    past ~87 and underflows to 0 past ~104 (the row becomes all zeros); method 2 and float64 are fine."""
    mask = torch.tensor([[True, True, False]])
    expected = torch.tensor([[1.0, math.e, 0.0]], dtype=torch.float64) / (1.0 + math.e)  # softmax([0, 1]) by hand
    scores = torch.tensor([[0.0, 1.0, gap]], dtype=torch.float64)
    torch.testing.assert_close(masked_softmax_renormalize(scores, mask), expected)
    torch.testing.assert_close(masked_softmax_neg_inf(scores.float(), mask), expected.float())
    renormalized = masked_softmax_renormalize(scores.float(), mask)
    assert torch.allclose(renormalized, expected.float()) == exact_in_float32
    if gap > 104:
        assert (renormalized == 0).all()
