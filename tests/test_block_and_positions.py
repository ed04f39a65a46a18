"""The Transformer block (notebook 06) and absolute position embeddings (notebook 05)."""

import math

import pytest
import torch

import mhsa_helpers as mh


def test_sinusoidal_table_matches_the_papers_formula_entry_by_entry():
    table = mh.sinusoidal_positions(7, 6, base=100.0)
    assert table.shape == (7, 6) and table.dtype == torch.float32
    for pos in range(7):
        for i in range(3):
            angle = pos / 100.0 ** (2 * i / 6)
            assert math.isclose(table[pos, 2 * i].item(), math.sin(angle), abs_tol=1e-6)
            assert math.isclose(table[pos, 2 * i + 1].item(), math.cos(angle), abs_tol=1e-6)


def test_sinusoidal_dot_products_depend_on_the_distance_only():
    table = mh.sinusoidal_positions(40, 16).double()
    gram = table @ table.T
    for offset in range(-39, 40):
        diagonal = gram.diagonal(offset)
        assert (diagonal.max() - diagonal.min()).item() < 1e-5
    # ... and every row is distinct, so the table does tell positions apart.
    assert torch.cdist(table, table).add(torch.eye(40)).min() > 0.1


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        ((0, 8), ValueError, "seq_len"),
        ((4, 7), ValueError, "d_model must be even"),
        ((4, 8, 0.5), ValueError, "base"),
        ((4.0, 8), TypeError, "seq_len"),
    ],
)
def test_sinusoidal_positions_refuse_bad_arguments(args, error, message):
    with pytest.raises(error, match=message):
        mh.sinusoidal_positions(*args)


@pytest.fixture
def block():
    torch.manual_seed(0)
    return mh.TransformerBlock(16, 4).eval()


def test_block_is_two_residual_steps(block):
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        middle = x + block.attn(block.ln_1(x))
        expected = middle + block.mlp(block.ln_2(middle))
        torch.testing.assert_close(block(x), expected)
        # With both sub-layers' output projections at zero, the block is the identity: the residual path.
        for linear in (block.attn.out_proj, block.mlp[2]):
            linear.weight.zero_()
            linear.bias.zero_()
        torch.testing.assert_close(block(x), x)


def test_block_is_causal_and_decodes_like_the_full_pass(block):
    x = torch.randn(1, 6, 16)
    changed = x.clone()
    changed[0, 4] = torch.randn(16)
    with torch.no_grad():
        full = block(x)
        assert torch.equal(block(changed)[0, :4], full[0, :4])
        assert not torch.allclose(block(changed)[0, 4:], full[0, 4:])
        cache = mh.KVCache()
        steps = torch.cat([block(x[:, t : t + 1], cache=cache) for t in range(6)], dim=1)
    torch.testing.assert_close(steps, full, atol=1e-5, rtol=1e-5)


def test_block_mlp_acts_on_each_token_alone(block):
    x = torch.randn(1, 4, 16)
    with torch.no_grad():
        whole = block.mlp(block.ln_2(x))
        one = block.mlp(block.ln_2(x[:, 2:3]))
    torch.testing.assert_close(whole[:, 2:3], one)
    assert block.mlp[0].out_features == 64  # d_ff defaults to 4 * d_model


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"d_ff": 0}, ValueError, "d_ff"),
        ({"dropout": 1.0}, ValueError, "dropout"),
        ({"dropout": "0.1"}, TypeError, "dropout"),
    ],
)
def test_block_refuses_bad_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        mh.TransformerBlock(16, 4, **kwargs)


def test_block_refuses_a_head_count_that_does_not_divide_d_model():
    with pytest.raises(ValueError, match="num_heads"):
        mh.TransformerBlock(16, 3)
