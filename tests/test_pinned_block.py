"""TransformerBlock: every constructor and call argument changes the result.

Found unpinned by mutation testing (``make mutate``): the MLP could read ``ln_1``, ``d_ff`` be
ignored, ``dropout`` stay unpassed to the attention or the MLP, ``causal``/``rope``/``rope_base``
be ignored. The reference is the docstring's recipe, x + attention(LN_1(x)) then
+ MLP(LN_2(x)), with an attention module built independently from the stated arguments.
"""

from __future__ import annotations

import pytest
import torch
from pinning import raises

import mhsa_helpers as mh


def _block(**kwargs):
    torch.manual_seed(0)
    block = mh.TransformerBlock(16, 2, **kwargs).eval()
    with torch.no_grad():  # two different LayerNorms, so that reading the wrong one shows
        for norm in (block.ln_1, block.ln_2):
            norm.weight.uniform_(0.5, 1.5)
            norm.bias.uniform_(-0.5, 0.5)
    return block


def _recipe(block, attention, x, **call):
    """The docstring's two residual steps, with `attention` in place of the block's own."""
    attention.load_state_dict(block.attn.state_dict())
    attention.eval()
    middle = x + attention(block.ln_1(x), **call)
    return middle + block.mlp(block.ln_2(middle))


SETTINGS = [
    ({}, {"causal": True, "rope_base": 10000.0}),
    ({"causal": False}, {"causal": False, "rope_base": 10000.0}),
    ({"rope": False}, {"causal": True, "rope_base": None}),
    ({"rope_base": 50.0}, {"causal": True, "rope_base": 50.0}),
    ({"causal": False, "rope": False}, {"causal": False, "rope_base": None}),
]


@pytest.mark.parametrize(("block_kwargs", "attention_kwargs"), SETTINGS, ids=lambda s: str(s))
def test_block_is_the_recipe_around_an_attention_with_its_settings(block_kwargs, attention_kwargs):
    block = _block(**block_kwargs)
    causal, base = attention_kwargs["causal"], attention_kwargs["rope_base"]
    rope = None if base is None else mh.RotaryEmbedding(8, base=base)
    attention = mh.MultiHeadSelfAttention(16, 2, causal=causal, rope=rope)
    x = torch.randn(2, 7, 16)
    positions = torch.tensor([0, 3, 4, 9, 30, 31, 200])
    with torch.no_grad():
        assert torch.equal(block(x), _recipe(block, attention, x))
        if attention.rope is not None:  # token_positions are RoPE positions, refused without RoPE
            got = block(x, token_positions=positions)
            assert torch.equal(got, _recipe(block, attention, x, token_positions=positions))


def test_each_setting_changes_the_output():
    x = torch.randn(1, 7, 16)
    with torch.no_grad():
        default = _block()(x)
        for kwargs in ({"causal": False}, {"rope": False}, {"rope_base": 50.0}):
            assert not torch.allclose(_block(**kwargs)(x), default, atol=1e-4), kwargs
        # Token positions matter with RoPE: a gap between tokens changes what they attend to.
        spread = _block()(x, token_positions=torch.tensor([0, 3, 4, 9, 30, 31, 200]))
        assert not torch.allclose(spread, default, atol=1e-4)


def test_a_non_causal_block_lets_early_tokens_see_later_ones():
    x = torch.randn(1, 5, 16)
    changed = x.clone()
    changed[0, 4] += 1.0
    with torch.no_grad():
        for causal in (True, False):
            block = _block(causal=causal)
            same_prefix = torch.equal(block(x)[0, :4], block(changed)[0, :4])
            assert same_prefix == causal


@pytest.mark.parametrize(("d_ff", "hidden"), [(None, 64), (24, 24), (5, 5)])
def test_d_ff_is_the_mlps_hidden_width(d_ff, hidden):
    block = mh.TransformerBlock(16, 2, d_ff=d_ff)
    # Parameters, counted from the architecture: two LayerNorms (weight + bias), the attention's
    # fused QKV and output projections (with biases), the MLP's two linear layers (with biases).
    d = 16
    expected = 2 * (2 * d) + (d * 3 * d + 3 * d) + (d * d + d) + (d * hidden + hidden) + (hidden * d + d)
    assert sum(p.numel() for p in block.parameters()) == expected
    assert block(torch.randn(1, 3, d)).shape == (1, 3, d)


def _two_training_calls(block, x):
    block.train()
    torch.manual_seed(1)
    first = block(x)
    torch.manual_seed(2)
    return first, block(x)


def test_dropout_reaches_the_attention():
    block = _block(dropout=0.5)
    with torch.no_grad():  # the MLP's output is zero: only the attention can make two calls differ
        block.mlp[2].weight.zero_()
        block.mlp[2].bias.zero_()
    x = torch.randn(1, 6, 16)
    with torch.no_grad():
        first, second = _two_training_calls(block, x)
        assert not torch.allclose(first, second)
        block.eval()
        assert torch.equal(block(x), block(x))


def test_dropout_reaches_the_mlp():
    block = _block(dropout=0.5)
    with torch.no_grad():  # the attention's output is zero: only the MLP can make two calls differ
        block.attn.out_proj.weight.zero_()
        block.attn.out_proj.bias.zero_()
    x = torch.randn(1, 6, 16)
    with torch.no_grad():
        first, second = _two_training_calls(block, x)
    assert not torch.allclose(first, second)


def test_no_dropout_by_default():
    block = _block()
    x = torch.randn(1, 6, 16)
    with torch.no_grad():
        first, second = _two_training_calls(block, x)
    assert torch.equal(first, second)


def test_bad_settings_are_named_in_the_message():
    with raises(ValueError, "d_model must be >= 1, got 0"):
        mh.TransformerBlock(0, 2)
    with raises(ValueError, "num_heads must be >= 1, got 0"):
        mh.TransformerBlock(16, 0)
    # The block checks the division itself (it needs d_head for its RotaryEmbedding), naming both settings.
    with raises(
        ValueError, "num_heads must divide d_model: expected d_model % num_heads == 0, got d_model=10, num_heads=3"
    ):
        mh.TransformerBlock(10, 3)
    with raises(ValueError, "d_ff must be >= 1, got 0"):
        mh.TransformerBlock(16, 2, d_ff=0)
    with raises(TypeError, "d_ff must be an int, got float 32.0 (expected >= 1)"):
        mh.TransformerBlock(16, 2, d_ff=32.0)
    with raises(ValueError, "dropout must be in [0, 1), got dropout=1.0"):
        mh.TransformerBlock(16, 2, dropout=1.0)
    with raises(TypeError, "dropout must be a number in [0, 1), got str '0.1'"):
        mh.TransformerBlock(16, 2, dropout="0.1")
    assert mh.TransformerBlock(16, 2, d_ff=1, dropout=0.0).mlp[0].out_features == 1  # the smallest accepted
