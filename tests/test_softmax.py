"""mhsa_helpers.softmax: stable, equal to torch.softmax, NaN-free on empty rows,
and computed in float32 for float16/bfloat16 inputs."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from mhsa_helpers import softmax


def _random(shape, seed, dtype=torch.float64, scale=3.0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen, dtype=torch.float64).mul(scale).to(dtype)


shapes = st.lists(st.integers(1, 6), min_size=1, max_size=4).map(tuple)


@given(shape=shapes, seed=st.integers(0, 2**31 - 1), data=st.data())
def test_equals_torch_softmax_on_every_dim(shape, seed, data):
    dim = data.draw(st.integers(-len(shape), len(shape) - 1), label="dim")
    x = _random(shape, seed)
    torch.testing.assert_close(softmax(x, dim=dim), torch.softmax(x, dim=dim))


@given(shape=shapes, seed=st.integers(0, 2**31 - 1), shift=st.sampled_from([1000.0, -1000.0, 1e4, 88.5]))
def test_shift_invariance_for_large_constants(shape, seed, shift):
    # exp(1000) overflows even in float64; the max-subtraction makes it irrelevant.
    x = _random(shape, seed)
    torch.testing.assert_close(softmax(x + shift), softmax(x), atol=1e-10, rtol=1e-6)
    torch.testing.assert_close(softmax(x + shift), torch.softmax(x, dim=-1), atol=1e-10, rtol=1e-6)


def test_naive_softmax_overflows_where_ours_does_not():
    x = torch.tensor([1000.0, 999.0, 0.0], dtype=torch.float64)
    naive = torch.exp(x) / torch.exp(x).sum()
    assert torch.isnan(naive).any(), "premise: the textbook formula overflows here"
    e = math.exp(-1.0)
    expected = torch.tensor([1 / (1 + e), e / (1 + e), 0.0], dtype=torch.float64)
    torch.testing.assert_close(softmax(x), expected, atol=1e-300, rtol=1e-12)


def test_hand_computed_values():
    x = torch.tensor([[0.0, math.log(2.0), math.log(5.0)]], dtype=torch.float64)
    torch.testing.assert_close(softmax(x), torch.tensor([[1 / 8, 2 / 8, 5 / 8]], dtype=torch.float64))


@given(shape=shapes, seed=st.integers(0, 2**31 - 1))
def test_rows_sum_to_one_and_are_non_negative(shape, seed):
    w = softmax(_random(shape, seed, scale=20.0))
    assert (w >= 0).all()
    torch.testing.assert_close(w.sum(-1), torch.ones(shape[:-1], dtype=torch.float64))


def test_fully_masked_rows_give_zeros_not_nan():
    x = torch.tensor(
        [[0.5, -float("inf"), 2.0], [-float("inf")] * 3, [-float("inf"), 1.0, -float("inf")]],
        dtype=torch.float64,
    )
    w = softmax(x)
    assert not torch.isnan(w).any()
    e = math.exp(1.5)
    expected = torch.tensor([[1 / (1 + e), 0.0, e / (1 + e)], [0.0, 0.0, 0.0], [0.0, 1.0, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(w, expected)
    # torch.softmax itself gives NaN on the empty row: ours differs on purpose.
    assert torch.isnan(torch.softmax(x, -1)[1]).all()


def test_fully_masked_row_has_finite_zero_gradient():
    x = torch.tensor([[-float("inf")] * 3, [0.1, 0.2, -float("inf")]], dtype=torch.float64, requires_grad=True)
    (softmax(x) * torch.arange(3.0, dtype=torch.float64)).sum().backward()
    assert torch.isfinite(x.grad).all()
    assert (x.grad[0] == 0).all()
    assert x.grad[1, 2] == 0


def _within_one_ulp(actual: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
    up = torch.nextafter(expected, torch.full_like(expected, float("inf")))
    down = torch.nextafter(expected, torch.full_like(expected, -float("inf")))
    return (actual == expected) | (actual == up) | (actual == down)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
def test_low_precision_is_computed_in_float32(dtype):
    x = _random((64, 257), seed=0, dtype=torch.float32, scale=4.0).to(dtype)
    reference = torch.softmax(x.float(), dim=-1).to(dtype)  # float32 math, one final rounding
    ours = softmax(x)
    assert ours.dtype == dtype
    assert _within_one_ulp(ours, reference).all()
    # The check has teeth: the same stable formula evaluated in the low dtype misses it.
    shifted = x - x.amax(-1, keepdim=True)
    low_precision = torch.exp(shifted) / torch.exp(shifted).sum(-1, keepdim=True)
    assert not _within_one_ulp(low_precision, reference).all()


def test_float16_case_where_naive_exp_overflows():
    # exp(12) = 162754.8 > 65504, the largest float16.
    x = torch.tensor([12.0, 11.0, -3.0], dtype=torch.float16)
    naive = torch.exp(x) / torch.exp(x).sum()
    assert torch.isinf(torch.exp(x)).any() and torch.isnan(naive).any()
    ours = softmax(x)
    assert ours.dtype == torch.float16 and torch.isfinite(ours).all()
    z = 1 + math.exp(-1.0) + math.exp(-15.0)
    expected = torch.tensor([1 / z, math.exp(-1.0) / z, math.exp(-15.0) / z], dtype=torch.float64)
    torch.testing.assert_close(ours.double(), expected, rtol=1e-3, atol=1e-7)
