"""TransformerBlock and RMSNorm, each compared with a reference that shares none of its parts.

A test that builds its expected value from the module's own sub-modules (``block.mlp``,
``block.attn``, ``block.ln_2``) cannot see a fault inside them: the fault is on both sides. Here:

* :class:`~mhsa_helpers.block.TransformerBlock` is compared with the pre-norm recipe its docstring
  states, spelled out with plain torch functions: LayerNorm from its formula, attention through
  ``torch.nn.functional.scaled_dot_product_attention`` (not the package's ``attend``), RoPE as the
  rotation of pairs, the exact GELU from ``erf``. Only the block's parameters are read, never its
  sub-modules called. Its MLP is also checked alone, on pre-activations that are negative, where
  GELU and ReLU differ most.
* :class:`~mhsa_helpers.block.RMSNorm` is compared with Hugging Face's ``LlamaRMSNorm``, the published
  reference for the order of its operations (normalise in float32, cast the normalised value back
  to the input's dtype, then multiply by the weight), with a weight that is not ones, on float32,
  bfloat16 and float16 inputs and with the weight in float32 or in the input's dtype.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from mhsa_helpers.block import RMSNorm, TransformerBlock

F64 = torch.float64

# ---------------------------------------------------------------- the recipe, written out


def _layer_norm(x, weight, bias, eps=1e-5):
    """LayerNorm (Ba et al., 2016) over the last axis; the biased variance, as nn.LayerNorm uses."""
    centred = x - x.mean(-1, keepdim=True)
    return centred / torch.sqrt(centred.pow(2).mean(-1, keepdim=True) + eps) * weight + bias


def _gelu(x):
    """GELU (Hendrycks & Gimpel, 2016), the exact form x * Phi(x) = x/2 * (1 + erf(x / sqrt 2))."""
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def _rotate_pairs(t, base=10000.0):
    """RoPE (Su et al., 2021), interleaved pairs: (t[2i], t[2i+1]) at position m turned by m * base^(-2i/d_head).

    The angles are computed in float64 and their cos and sin rounded to float32, because the module
    keeps its table in float32 whatever the model's dtype (rope.py); the rotation is in t's dtype."""
    seq, d_head = t.shape[-2], t.shape[-1]
    theta = base ** (-torch.arange(0, d_head, 2, dtype=F64) / d_head)
    angles = torch.arange(seq, dtype=F64)[:, None] * theta  # (seq, d_head // 2)
    cos, sin = angles.cos().float().to(t.dtype), angles.sin().float().to(t.dtype)
    a, b = t[..., 0::2], t[..., 1::2]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)


def _attention(h, params, num_heads, *, causal, rope):
    """Multi-head self-attention from the block's parameters: one projection whose rows are
    [W_Q; W_K; W_V], heads split as (batch, heads, seq, d_head), RoPE on Q and K, scaled dot-product
    attention by torch itself, heads merged back, then W_O."""
    batch, seq, d_model = h.shape
    qkv = h @ params["attn.qkv_proj.weight"].T + params["attn.qkv_proj.bias"]
    q, k, v = (t.reshape(batch, seq, num_heads, d_model // num_heads).transpose(1, 2) for t in qkv.chunk(3, dim=-1))
    if rope:
        q, k = _rotate_pairs(q), _rotate_pairs(k)
    heads = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    merged = heads.transpose(1, 2).reshape(batch, seq, d_model)
    return merged @ params["attn.out_proj.weight"].T + params["attn.out_proj.bias"]


def _mlp(h, params):
    """Linear d_model -> d_ff, exact GELU, Linear d_ff -> d_model (the block's ``mlp.0`` and ``mlp.2``)."""
    hidden = _gelu(h @ params["mlp.0.weight"].T + params["mlp.0.bias"])
    return hidden @ params["mlp.2.weight"].T + params["mlp.2.bias"]


def _random_block(d_model, num_heads, **kwargs):
    """A float64 block in eval mode whose every parameter is random: LayerNorm's default weight of
    ones and bias of zeros would hide a LayerNorm swapped for another or a bias dropped."""
    torch.manual_seed(0)
    block = TransformerBlock(d_model, num_heads, d_ff=3 * d_model, **kwargs).to(F64).eval()
    with torch.no_grad():
        for param in block.parameters():
            param.copy_(torch.randn_like(param) * 0.5)
    return block


# ---------------------------------------------------------------- TransformerBlock


def test_gelu_helper_gives_the_published_value_at_minus_one():
    # GELU(-1) = -Phi(-1) = -0.15865525393145707 (the standard normal CDF at -1); ReLU would give 0
    # and the tanh approximation -0.15880800939172324. This pins the reference the block is held to.
    assert _gelu(torch.tensor(-1.0, dtype=F64)).item() == pytest.approx(-0.15865525393145707, abs=1e-15)


@pytest.mark.parametrize(("causal", "rope"), [(True, True), (False, False), (True, False)])
def test_block_forward_equals_the_pre_norm_recipe_spelled_out_with_torch(causal, rope):
    """Catches a wrong MLP activation (GELU -> ReLU, or the tanh approximation), a LayerNorm used
    at the wrong step, a residual dropped, and the causal flag or RoPE not reaching attention:
    x1 = x + attention(LayerNorm_1(x)); out = x1 + MLP(LayerNorm_2(x1)), with nothing of the block
    but its parameters."""
    d_model, num_heads = 8, 2
    block = _random_block(d_model, num_heads, causal=causal, rope=rope)
    params = {name: p.detach() for name, p in block.named_parameters()}
    x = torch.randn(2, 5, d_model, dtype=F64)

    x1 = x + _attention(
        _layer_norm(x, params["ln_1.weight"], params["ln_1.bias"]), params, num_heads, causal=causal, rope=rope
    )
    expected = x1 + _mlp(_layer_norm(x1, params["ln_2.weight"], params["ln_2.bias"]), params)

    with torch.no_grad():
        out = block(x)
    assert out.shape == x.shape and out.dtype == F64
    # float64 throughout: the only differences left are in the order of the sums, around 1e-15.
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)


def test_block_mlp_alone_is_linear_exact_gelu_linear_on_negative_pre_activations():
    """Catches GELU -> ReLU (or -> the tanh approximation) in the MLP, on inputs where they differ:
    ReLU zeroes a negative pre-activation where GELU keeps x * Phi(x), down to about -0.17."""
    block = _random_block(8, 2)
    params = {name: p.detach() for name, p in block.named_parameters()}
    w1, b1 = params["mlp.0.weight"], params["mlp.0.bias"]
    # One token per hidden unit, pointing against that unit's row of W1: token i's pre-activation at
    # unit i is -0.7 |W1[i]|^2 + b1[i], mostly negative and within GELU's curved range.
    torch.manual_seed(1)
    h = -0.7 * w1 + 0.05 * torch.randn_like(w1)  # (d_ff, d_model): d_ff tokens of width d_model
    pre = h @ w1.T + b1
    # The inputs do exercise the difference: every token's own unit negative, and many others too.
    assert (pre.diagonal() < 0).all() and (pre < 0).float().mean() > 0.4
    assert (_gelu(pre) - F.relu(pre)).abs().max() > 0.1

    expected = _gelu(pre) @ params["mlp.2.weight"].T + params["mlp.2.bias"]
    with torch.no_grad():
        out = block.mlp(h)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)


# ---------------------------------------------------------------- RMSNorm against Hugging Face's LlamaRMSNorm

D_NORM = 64
EPS = 1e-5


def _norm_input(dtype):
    """Rows of different scales, one small enough (1e-3) for eps to matter next to mean(x^2)."""
    torch.manual_seed(2)
    scales = torch.tensor([1.0, 30.0, 1e-3, 0.2])[:, None]
    return (torch.randn(2, 4, D_NORM) * scales).to(dtype)


def _norm_weight():
    """A weight far from ones, with negative entries: with ones both orders of cast and multiply agree."""
    torch.manual_seed(3)
    return torch.randn(D_NORM) * 1.5 + 0.5


@pytest.fixture(scope="module")
def llama_rms_norm():
    """transformers' LlamaRMSNorm class; imported here, not at collection, as tests/test_real_model.py
    does (transformers takes a second or two to import and is a test-only dependency)."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    return LlamaRMSNorm


@pytest.mark.parametrize("weight_in", ["float32", "input dtype"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_rms_norm_equals_transformers_llama_rms_norm(llama_rms_norm, dtype, weight_in):
    """Catches the weight multiplied before the cast back (``(self.weight * normed).to(x.dtype)``),
    a norm computed in the input's dtype instead of float32, and eps or the mean misplaced.

    LlamaRMSNorm is the published reference: hidden.to(float32), * rsqrt(mean(hidden^2) + eps),
    .to(input dtype), then weight *. The same operations in the same order on the same numbers give
    the same bits, so the comparison is exact; and the result's dtype is what type promotion of the
    weight and the input's dtype gives (float32 for a float32 weight, as in HF)."""
    weight_dtype = torch.float32 if weight_in == "float32" else dtype
    x, weight = _norm_input(dtype), _norm_weight().to(weight_dtype)
    ours, theirs = RMSNorm(D_NORM, EPS).to(weight_dtype), llama_rms_norm(D_NORM, eps=EPS).to(weight_dtype)
    with torch.no_grad():
        ours.weight.copy_(weight)
        theirs.weight.copy_(weight)
        out, expected = ours(x), theirs(x)

    assert out.dtype == expected.dtype == torch.promote_types(weight_dtype, dtype)
    assert torch.equal(out, expected), (out.float() - expected.float()).abs().max().item()
    if dtype != torch.float32:
        # The comparison can fail: here the other order (multiply, then cast back) gives other values
        # or another dtype. (In float32 there is no cast, and both orders are the same numbers.)
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + EPS)
        wrong_order = (weight * normed).to(dtype)
        assert wrong_order.dtype != expected.dtype or not torch.equal(wrong_order, expected)
