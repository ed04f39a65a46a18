"""torch.autograd.gradcheck (float64 finite differences vs autograd) for the
package's differentiable pieces."""

from __future__ import annotations

import pytest
import torch
from torch.autograd import gradcheck
from torch.func import functional_call

from mhsa_helpers import MultiHeadSelfAttention, RotaryEmbedding, scaled_dot_product_attention, softmax

F64 = torch.float64


def _leaf(gen, *shape):
    return torch.randn(*shape, generator=gen, dtype=F64).requires_grad_()


MASK = torch.tensor(
    [[True, False, True, True], [True, True, False, False], [False, True, True, True]], dtype=torch.bool
)  # (seq_q=3, seq_k=4), every query sees at least one key


@pytest.mark.parametrize("need_weights", [True, False], ids=["weights-path", "fast-path"])
@pytest.mark.parametrize("mask", [None, MASK], ids=["no-mask", "mask"])
def test_gradcheck_scaled_dot_product_attention(need_weights, mask):
    gen = torch.Generator().manual_seed(0)
    q, k, v = _leaf(gen, 2, 3, 5), _leaf(gen, 2, 4, 5), _leaf(gen, 2, 4, 3)

    def f(q, k, v):
        return scaled_dot_product_attention(q, k, v, mask, need_weights=need_weights)

    assert gradcheck(f, (q, k, v))


@pytest.mark.parametrize("need_weights", [True, False], ids=["weights-path", "fast-path"])
def test_gradcheck_causal_with_cached_keys(need_weights):
    gen = torch.Generator().manual_seed(1)
    q, k, v = _leaf(gen, 2, 2, 4), _leaf(gen, 2, 5, 4), _leaf(gen, 2, 5, 4)

    def f(q, k, v):
        return scaled_dot_product_attention(q, k, v, is_causal=True, need_weights=need_weights)

    assert gradcheck(f, (q, k, v))


def test_gradcheck_softmax_with_partly_and_fully_masked_rows():
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(3, 5, generator=gen, dtype=F64)
    blocked = torch.tensor(
        [[False] * 5, [False, True, False, True, True], [True] * 5]
    )  # row 1 partly masked, row 2 fully masked
    x = x.masked_fill(blocked, float("-inf"))
    # Finite differences cannot perturb -inf entries meaningfully, so check w.r.t. the finite ones.
    finite = x[~blocked].clone().requires_grad_()

    def f(values):
        full = torch.full((3, 5), float("-inf"), dtype=F64).masked_scatter(~blocked, values)
        return softmax(full, dim=-1)

    assert gradcheck(f, (finite,))
    assert gradcheck(lambda t: softmax(t, dim=0), (torch.randn(4, 3, generator=gen, dtype=F64).requires_grad_(),))


@pytest.mark.parametrize("convention", ["interleaved", "half_split"])
def test_gradcheck_rotary_embedding(convention):
    # The cos/sin cache is float32, but x -> rope(x) is linear in x with those fixed
    # coefficients, so float64 finite differences still match the analytic gradient.
    gen = torch.Generator().manual_seed(3)
    rope = RotaryEmbedding(6, max_seq_len=32, convention=convention)
    x = _leaf(gen, 2, 4, 6)
    positions = torch.tensor([0, 3, 9, 31])
    assert gradcheck(lambda t: rope(t, positions), (x,))


def _module():
    torch.manual_seed(4)
    return MultiHeadSelfAttention(8, 2, causal=True, rope=RotaryEmbedding(4, max_seq_len=16), dtype=F64).double()


@pytest.mark.parametrize("need_weights", [False, True], ids=["fast-path", "weights-path"])
def test_gradcheck_module_wrt_input(need_weights):
    module = _module()
    assert module.rope.cos_cached.dtype == torch.float32  # .double() must not touch the cache
    x = torch.randn(2, 4, 8, dtype=F64, requires_grad=True)
    assert gradcheck(lambda t: module(t, need_weights=need_weights), (x,))


def test_gradcheck_module_wrt_parameters():
    module = _module()
    x = torch.randn(2, 4, 8, dtype=F64)
    names = [name for name, _ in module.named_parameters()]
    assert names == ["qkv_proj.weight", "qkv_proj.bias", "out_proj.weight", "out_proj.bias"]
    params = tuple(p.detach().clone().requires_grad_() for p in module.parameters())

    def f(*values):
        return functional_call(module, dict(zip(names, values, strict=True)), (x,))

    assert gradcheck(f, params)
