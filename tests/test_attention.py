"""scaled_dot_product_attention against PyTorch's, and its properties:
causality, row sums, empty rows, fast path == weights path, dropout."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from mhsa_helpers import attention_scores, scaled_dot_product_attention

SEEDS = st.integers(0, 2**31 - 1)


def _randn(gen, *shape, dtype=torch.float64):
    return torch.randn(*shape, generator=gen, dtype=dtype)


def _bottom_right_causal(seq_q, seq_k):
    """Query i sits at absolute position seq_k - seq_q + i and sees keys j <= that position."""
    mask = torch.zeros(seq_q, seq_k, dtype=torch.bool)
    for i in range(seq_q):
        for j in range(seq_k):
            mask[i, j] = j <= seq_k - seq_q + i
    return mask


@st.composite
def attention_inputs(draw, allow_mask=True):
    batch = tuple(draw(st.lists(st.integers(1, 3), min_size=0, max_size=2)))
    seq_q = draw(st.integers(1, 6))
    seq_k = draw(st.integers(1, 6))
    d_k = draw(st.integers(1, 8))
    d_v = draw(st.integers(1, 8))
    gen = torch.Generator().manual_seed(draw(SEEDS))
    q = _randn(gen, *batch, seq_q, d_k)
    k = _randn(gen, *batch, seq_k, d_k)
    v = _randn(gen, *batch, seq_k, d_v)
    mask = None
    if allow_mask and draw(st.booleans()):
        # Either one (seq_q, seq_k) mask for the whole batch or a full-shape one.
        mask_shape = (seq_q, seq_k) if draw(st.booleans()) else (*batch, seq_q, seq_k)
        mask = torch.rand(*mask_shape, generator=gen) < 0.7
    return q, k, v, mask


def _reference_weights(q, k, mask=None, scale=None):
    """softmax(q k^T * scale) written out with exp/sum, masked entries contributing 0."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = torch.einsum("...qd,...kd->...qk", q, k) * scale
    scores = scores - scores.amax(-1, keepdim=True)  # exact in float64 for these sizes
    exps = torch.exp(scores)
    if mask is not None:
        exps = exps * mask
    totals = exps.sum(-1, keepdim=True)
    return torch.where(totals > 0, exps / torch.where(totals > 0, totals, 1.0), 0.0)


@given(attention_inputs(), st.booleans())
def test_equals_torch_sdpa(inputs, need_weights):
    q, k, v, mask = inputs
    result = scaled_dot_product_attention(q, k, v, mask, need_weights=need_weights)
    out = result[0] if need_weights else result
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    if mask is not None:
        # PyTorch's answer for a query that sees no key differs across versions (NaN or 0);
        # ours is documented as 0.
        empty = ~mask.any(-1, keepdim=True)
        expected = expected.masked_fill(empty, 0.0)
    torch.testing.assert_close(out, expected)
    assert not torch.isnan(out).any()
    # ...and the formula itself, written out independently of either implementation.
    torch.testing.assert_close(out, _reference_weights(q, k, mask) @ v)


@given(attention_inputs(allow_mask=False), st.booleans())
def test_is_causal_equals_torch_with_bottom_right_mask(inputs, need_weights):
    q, k, v, _ = inputs
    seq_q, seq_k = q.shape[-2], k.shape[-2]
    if seq_q > seq_k:
        q = q[..., :seq_k, :]
        seq_q = seq_k
    result = scaled_dot_product_attention(q, k, v, is_causal=True, need_weights=need_weights)
    out = result[0] if need_weights else result
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=_bottom_right_causal(seq_q, seq_k))
    torch.testing.assert_close(out, expected)
    if seq_q == seq_k:  # here PyTorch's own is_causal (top-left aligned) is the same mask
        torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True))


@given(attention_inputs(), st.booleans())
def test_is_causal_combines_with_a_mask(inputs, need_weights):
    q, k, v, mask = inputs
    k, v = k[..., : q.shape[-2], :], v[..., : q.shape[-2], :]
    seq = min(q.shape[-2], k.shape[-2])
    q = q[..., :seq, :]
    if mask is not None:
        mask = mask[..., :seq, :seq]
    result = scaled_dot_product_attention(q, k, v, mask, is_causal=True, need_weights=need_weights)
    out = result[0] if need_weights else result
    combined = torch.ones(seq, seq, dtype=torch.bool).tril()
    if mask is not None:
        combined = combined & mask
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=combined)
    expected = expected.masked_fill(~combined.any(-1, keepdim=True), 0.0)
    torch.testing.assert_close(out, expected)


def test_scale_argument_matches_torch():
    gen = torch.Generator().manual_seed(1)
    q, k, v = _randn(gen, 2, 3, 4), _randn(gen, 2, 5, 4), _randn(gen, 2, 5, 6)
    for need_weights in (False, True):
        result = scaled_dot_product_attention(q, k, v, scale=0.3, need_weights=need_weights)
        out = result[0] if need_weights else result
        torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, scale=0.3))
        # The fast path *is* F.scaled_dot_product_attention: also compare with the formula.
        torch.testing.assert_close(out, _reference_weights(q, k, scale=0.3) @ v)
        assert not torch.allclose(out, _reference_weights(q, k) @ v)  # 0.3 is not the default 1/sqrt(4)


def test_attention_scores_by_hand():
    q = torch.tensor([[1.0, 2.0], [0.0, 1.0]], dtype=torch.float64)
    k = torch.tensor([[3.0, 1.0], [1.0, -1.0], [2.0, 2.0]], dtype=torch.float64)
    expected = torch.tensor([[5.0, -1.0, 6.0], [1.0, -1.0, 2.0]], dtype=torch.float64) / math.sqrt(2.0)
    torch.testing.assert_close(attention_scores(q, k), expected)
    torch.testing.assert_close(attention_scores(q, k, scale=1.0), expected * math.sqrt(2.0))


@given(attention_inputs())
def test_weights_rows_sum_to_one_or_are_all_zero(inputs):
    q, k, v, mask = inputs
    out, weights = scaled_dot_product_attention(q, k, v, mask, need_weights=True)
    assert weights.shape == (*torch.broadcast_shapes(q.shape[:-2], k.shape[:-2]), q.shape[-2], k.shape[-2])
    assert not torch.isnan(weights).any() and not torch.isnan(out).any()
    sees_something = torch.ones(weights.shape[:-1], dtype=torch.bool)
    if mask is not None:
        sees_something = mask.any(-1).expand(weights.shape[:-1])
        assert (weights.masked_select(~mask.expand(weights.shape)) == 0).all()
    torch.testing.assert_close(weights.sum(-1), sees_something.to(weights.dtype))
    assert (out[~sees_something] == 0).all()
    torch.testing.assert_close(weights, _reference_weights(q, k, mask).expand(weights.shape))
    torch.testing.assert_close(out, weights @ v)


def test_fully_masked_query_gives_zero_output_and_weights_on_both_paths():
    gen = torch.Generator().manual_seed(2)
    q, k, v = _randn(gen, 1, 3, 4), _randn(gen, 1, 3, 4), _randn(gen, 1, 3, 2)
    mask = torch.tensor([[True, False, True], [False, False, False], [True, True, True]])
    fast = scaled_dot_product_attention(q, k, v, mask)
    slow, weights = scaled_dot_product_attention(q, k, v, mask, need_weights=True)
    for out in (fast, slow):
        assert not torch.isnan(out).any()
        assert (out[:, 1] == 0).all()
        assert (out[:, 0] != 0).all()
    assert (weights[:, 1] == 0).all()


@given(attention_inputs(), st.booleans())
def test_fast_path_equals_weights_path(inputs, causal):
    q, k, v, mask = inputs
    if causal and q.shape[-2] > k.shape[-2]:
        q = q[..., : k.shape[-2], :]
        if mask is not None:
            mask = mask[..., : k.shape[-2], :]
    fast = scaled_dot_product_attention(q, k, v, mask, is_causal=causal)
    slow, _ = scaled_dot_product_attention(q, k, v, mask, is_causal=causal, need_weights=True)
    torch.testing.assert_close(fast, slow)


@given(
    seq=st.integers(2, 7),
    extra_keys=st.integers(0, 3),
    d=st.integers(1, 6),
    seed=SEEDS,
    data=st.data(),
    need_weights=st.booleans(),
)
def test_is_causal_output_ignores_future_tokens(seq, extra_keys, d, seed, data, need_weights):
    """Changing the keys/values after query i's absolute position leaves output i unchanged."""
    gen = torch.Generator().manual_seed(seed)
    seq_k = seq + extra_keys
    q, k, v = _randn(gen, 2, seq, d), _randn(gen, 2, seq_k, d), _randn(gen, 2, seq_k, d)
    i = data.draw(st.integers(0, seq - 1), label="query")
    position = extra_keys + i  # absolute position of query i
    k2, v2 = k.clone(), v.clone()
    k2[:, position + 1 :] = _randn(gen, 2, seq_k - position - 1, d) * 5
    v2[:, position + 1 :] = _randn(gen, 2, seq_k - position - 1, d) * 5

    def run(kk, vv):
        result = scaled_dot_product_attention(q, kk, vv, is_causal=True, need_weights=need_weights)
        return result[0] if need_weights else result

    before, after = run(k, v), run(k2, v2)
    torch.testing.assert_close(after[:, : i + 1], before[:, : i + 1], atol=1e-12, rtol=0)
    if position + 1 < seq_k:
        # ...while the last query (which sees everything) does change.
        assert not torch.allclose(after[:, -1], before[:, -1])


def test_dropout_on_weights_zeroes_and_rescales():
    gen = torch.Generator().manual_seed(3)
    q, k, v = _randn(gen, 4, 16, 8), _randn(gen, 4, 16, 8), _randn(gen, 4, 16, 8)
    p = 0.25
    _, reference = scaled_dot_product_attention(q, k, v, need_weights=True)
    torch.manual_seed(0)
    out, dropped = scaled_dot_product_attention(q, k, v, dropout_p=p, need_weights=True)
    zeroed = dropped == 0
    assert (reference > 0).all()
    fraction = zeroed.double().mean().item()
    assert 0.15 < fraction < 0.35, fraction
    torch.testing.assert_close(dropped[~zeroed], reference[~zeroed] / (1 - p))
    torch.testing.assert_close(out, dropped @ v)
    # Same seed, same dropout pattern; different seed, different pattern.
    torch.manual_seed(0)
    again = scaled_dot_product_attention(q, k, v, dropout_p=p, need_weights=True)[1]
    assert torch.equal(again, dropped)
    torch.manual_seed(1)
    other = scaled_dot_product_attention(q, k, v, dropout_p=p, need_weights=True)[1]
    assert not torch.equal(other, dropped)


def test_dropout_without_weights_still_applies_dropout():
    gen = torch.Generator().manual_seed(4)
    q, k, v = _randn(gen, 2, 6, 4), _randn(gen, 2, 6, 4), _randn(gen, 2, 6, 4)
    torch.manual_seed(5)
    out = scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    torch.manual_seed(5)
    out_w, _weights = scaled_dot_product_attention(q, k, v, dropout_p=0.5, need_weights=True)
    torch.testing.assert_close(out, out_w)
    assert not torch.allclose(out, scaled_dot_product_attention(q, k, v))


class _CountingSDPA:
    def __init__(self):
        self.calls = 0
        self.original = F.scaled_dot_product_attention

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.original(*args, **kwargs)


@pytest.mark.parametrize(
    "kwargs, expected_calls",
    [
        ({}, 1),
        ({"is_causal": True}, 1),
        ({"need_weights": True}, 0),
        ({"dropout_p": 0.1}, 0),
    ],
    ids=["plain", "causal", "weights", "dropout"],
)
def test_function_uses_torch_sdpa_only_without_weights_and_dropout(monkeypatch, kwargs, expected_calls):
    counter = _CountingSDPA()
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", counter)
    gen = torch.Generator().manual_seed(6)
    q, k, v = _randn(gen, 1, 3, 4), _randn(gen, 1, 3, 4), _randn(gen, 1, 3, 4)
    scaled_dot_product_attention(q, k, v, **kwargs)
    assert counter.calls == expected_calls


def _sdpa_like_torch_2_4(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):
    """F.scaled_dot_product_attention as PyTorch 2.2-2.4 compute it on the CPU: a plain softmax,
    so a query whose mask row is all False gets NaN (0/0) in the output and in every gradient."""
    assert dropout_p == 0.0 and not is_causal
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q @ k.transpose(-2, -1)) * scale
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


@pytest.mark.parametrize("sdpa", ["installed", "torch_2_4"])
def test_fully_masked_query_has_finite_gradients_equal_to_the_weights_path(monkeypatch, sdpa):
    if sdpa == "torch_2_4":
        monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", _sdpa_like_torch_2_4)
    gen = torch.Generator().manual_seed(7)
    inputs = [_randn(gen, 2, 3, 4) for _ in range(3)]
    mask = torch.tensor([[True, True, False], [False, False, False], [True, False, False]])
    outputs, grads = [], []
    for need_weights in (False, True):
        q, k, v = (t.clone().requires_grad_() for t in inputs)
        result = scaled_dot_product_attention(q, k, v, mask, need_weights=need_weights)
        out = result[0] if need_weights else result
        (out * torch.arange(1.0, 5.0, dtype=out.dtype)).sum().backward()
        outputs.append(out.detach())
        grads.append((q.grad, k.grad, v.grad))
    (fast_out, slow_out), (fast_grads, slow_grads) = outputs, grads
    assert (fast_out[:, 1] == 0).all()
    torch.testing.assert_close(fast_out, slow_out)
    for name, fast, slow in zip("qkv", fast_grads, slow_grads, strict=True):
        assert torch.isfinite(fast).all(), f"d{name} is not finite: {fast}"
        torch.testing.assert_close(fast, slow)
    dq, dk, dv = fast_grads
    assert (dq[:, 1] == 0).all()  # the query that sees nothing changes nothing
    assert (dk[:, 2] == 0).all() and (dv[:, 2] == 0).all()  # key 2 is visible to no query


def test_float16_weights_path_computes_scores_in_float32():
    """q . k = 4 * 160^2 = 102400 overflows float16 (max 65504) before the 1/sqrt(d_k) scaling
    brings it back to 51200; the explicit path must not turn that into inf and NaN."""
    gen = torch.Generator().manual_seed(8)
    q = torch.full((1, 2, 4), 160.0) * torch.tensor([[1.0], [-1.0]])
    k = torch.full((1, 3, 4), 160.0) * torch.tensor([[1.0], [0.5], [-1.0]])
    v = _randn(gen, 1, 3, 4, dtype=torch.float32)
    reference = _reference_weights(q.double(), k.double()) @ v.double()
    q16, k16, v16 = q.half(), k.half(), v.half()
    fast = scaled_dot_product_attention(q16, k16, v16)
    slow, weights = scaled_dot_product_attention(q16, k16, v16, need_weights=True)
    assert weights.dtype == torch.float16 and slow.dtype == torch.float16
    assert not torch.isnan(slow).any() and not torch.isnan(weights).any()
    torch.testing.assert_close(weights.double(), _reference_weights(q.double(), k.double()), atol=1e-3, rtol=0)
    for out in (fast, slow):
        torch.testing.assert_close(out.double(), reference, atol=2e-3, rtol=2e-3)
