"""RMSNorm, SwiGLU and LlamaBlock (mhsa_helpers.block): behaviour that mutation testing (``make mutate``)
showed unpinned — every constructor and call argument changes the result or the module it builds."""

from __future__ import annotations

import torch
from pinning import raises

from mhsa_helpers.block import LlamaBlock, RMSNorm, SwiGLU
from mhsa_helpers.rope import RotaryEmbedding


def test_rms_norm_defaults_and_repr():
    norm = RMSNorm(4)
    assert norm.eps == 1e-5 and norm.weight.shape == (4,) and torch.equal(norm.weight, torch.ones(4))
    assert repr(RMSNorm(6, eps=1e-6)) == "RMSNorm(6, eps=1e-06)"
    # eps sits under the root: mean(x^2) = 1 and eps = 3 give 1 / sqrt(4).
    torch.testing.assert_close(RMSNorm(2, eps=3.0)(torch.tensor([[1.0, -1.0]])), torch.tensor([[0.5, -0.5]]))


def test_rms_norm_and_swiglu_are_made_on_the_device_asked_for():
    assert RMSNorm(4, device="meta").weight.device.type == "meta"
    mlp = SwiGLU(4, 6, device="meta")
    assert all(p.device.type == "meta" for p in mlp.parameters())
    assert (mlp.gate.weight.shape, mlp.up.weight.shape, mlp.down.weight.shape) == ((6, 4), (6, 4), (4, 6))


def test_llama_block_defaults():
    block = LlamaBlock(16, 4, d_ff=24)
    assert block.attn.num_kv_heads == 4  # no grouping unless asked
    assert block.attn.rope.base == 10000.0 and block.attn.rope.convention == "interleaved"
    assert block.attn.rope.max_seq_len == 2048
    assert block.attn_norm.eps == block.mlp_norm.eps == 1e-5
    assert block.mlp.down.in_features == 24 and block.attn_norm.weight.shape == (16,)
    assert all(p.device.type == "cpu" for p in block.parameters())


def test_llama_block_is_made_on_the_device_asked_for():
    block = LlamaBlock(16, 4, num_kv_heads=2, d_ff=24, device="meta")
    assert all(p.device.type == "meta" for p in block.parameters())


def test_the_rope_convention_reaches_the_attention_and_changes_the_output():
    torch.manual_seed(0)
    interleaved = LlamaBlock(16, 2, d_ff=24)
    half_split = LlamaBlock(16, 2, d_ff=24, rope=RotaryEmbedding(8, convention="half_split"))
    half_split.load_state_dict(interleaved.state_dict())
    assert half_split.attn.rope.convention == "half_split"
    x = torch.randn(1, 6, 16)
    with torch.no_grad():
        # Same weights, other pairs of features rotated together: other scores from position 1 on.
        a, b = interleaved(x), half_split(x)
    torch.testing.assert_close(a[:, 0], b[:, 0])  # position 0 is not rotated
    assert not torch.allclose(a[:, 1:], b[:, 1:], atol=1e-4)


def test_token_positions_reach_the_attention():
    torch.manual_seed(0)
    block = LlamaBlock(16, 4, num_kv_heads=2, d_ff=24)
    x = torch.randn(1, 5, 16)
    positions = torch.tensor([0, 3, 1, 7, 2])  # not a shift of 0..4: other relative distances
    with torch.no_grad():
        h = x + block.attn(block.attn_norm(x), token_positions=positions)
        expected = h + block.mlp(block.mlp_norm(h))
        out = block(x, token_positions=positions)
        torch.testing.assert_close(out, expected)
        assert not torch.allclose(out, block(x), atol=1e-4)


def test_rms_norm_rounds_the_normalised_x_to_xs_dtype_before_the_weight():
    # Llama's reference: norm(x.float()).type_as(x) * weight. With a unit weight every output is
    # therefore a float16 number, although the sum of squares is taken in float32.
    x = torch.tensor([[1.0, 2.0, 3.0, 5.0], [0.1, -0.7, 0.3, 0.9]], dtype=torch.float16)
    out = RMSNorm(4)(x)
    assert torch.equal(out, out.to(torch.float16).to(out.dtype))
    exact = x.double() / x.double().pow(2).mean(-1, keepdim=True).add(1e-5).sqrt()
    assert not torch.equal(exact.to(torch.float16).double(), exact)  # so the rounding is visible
    torch.testing.assert_close(out.double(), exact.to(torch.float16).double())


def test_bad_sizes_and_eps_are_named_in_the_message():
    with raises(ValueError, "d_model must be >= 1, got 0"):
        RMSNorm(0)
    with raises(ValueError, "eps must be a finite number >= 0, got eps=-1.0"):
        RMSNorm(4, -1.0)
    with raises(ValueError, "eps must be a finite number >= 0, got eps=inf"):
        RMSNorm(4, float("inf"))
    assert RMSNorm(4, 0.0).eps == 0.0  # no epsilon at all is allowed
    with raises(ValueError, "d_model must be >= 1, got 0"):
        SwiGLU(0, 4)
    with raises(ValueError, "d_ff must be >= 1, got 0"):
        SwiGLU(4, 0)
    with raises(TypeError, "d_ff must be an int, got float 8.0 (expected >= 1)"):
        SwiGLU(4, 8.0)
    with raises(ValueError, "d_ff must be >= 1, got 0"):
        LlamaBlock(16, 4, d_ff=0)
    with raises(ValueError, "eps must be a finite number >= 0, got eps=-1.0"):
        LlamaBlock(16, 4, d_ff=8, eps=-1.0)
