"""MultiHeadSelfAttention's argument checks (mhsa_helpers/mha.py): edges that mutation testing
(``make mutate``) showed unpinned. Messages are compared whole, since they are what a learner reads."""

from __future__ import annotations

import re

import pytest
import torch

from mhsa_helpers import MultiHeadSelfAttention
from mhsa_helpers.kv_cache import SlidingWindowCache


def raises(kind: type[Exception], message: str):
    return pytest.raises(kind, match=f"^{re.escape(message)}$")


def test_extra_repr_names_kv_heads_only_when_they_differ():
    assert MultiHeadSelfAttention(8, 2).extra_repr() == "d_model=8, num_heads=2, d_head=4, causal=False, dropout=0.0"
    assert MultiHeadSelfAttention(8, 2, num_kv_heads=1, causal=True, dropout=0.25).extra_repr() == (
        "d_model=8, num_heads=2, num_kv_heads=1, d_head=4, causal=True, dropout=0.25"
    )


def test_rope_needs_an_even_d_head_and_says_where_it_comes_from():
    with raises(
        ValueError,
        "d_head = d_model // num_heads must be even for RoPE (dimensions are rotated in pairs), "
        "got d_head=3 from d_model=6, num_heads=2",
    ):
        MultiHeadSelfAttention(6, 2, rope=True)


def test_token_positions_messages():
    x = torch.zeros(2, 4, 8)
    with raises(TypeError, "token_positions must be a torch.Tensor, got list"):
        MultiHeadSelfAttention(8, 2, rope=True)(x, token_positions=[0, 1, 2, 3])
    with raises(
        ValueError,
        "token_positions are RoPE positions, but RoPE is off: enable it (rope=True / rope_base=...) "
        "or drop them; got token_positions of shape (4,)",
    ):
        MultiHeadSelfAttention(8, 2)(x, token_positions=torch.arange(4))
    with raises(
        ValueError,
        "token_positions must be None with a SlidingWindowCache(rope_positions='cache'): it gives each key and "
        "query its slot in the cache; got token_positions of shape (4,); use rope_positions='original' to rotate "
        "by positions you choose",
    ):
        MultiHeadSelfAttention(8, 2, rope=True)(
            x, token_positions=torch.arange(4), cache=SlidingWindowCache(8, rope_positions="cache")
        )
    with raises(ValueError, "token_positions must be broadcastable to x.shape[:-1] = (2, 4), got shape (3, 4)"):
        MultiHeadSelfAttention(8, 2, rope=True)(x, token_positions=torch.zeros(3, 4, dtype=torch.int64))
    with raises(TypeError, "token_positions must be an integer tensor, got dtype torch.float32"):
        MultiHeadSelfAttention(8, 2, rope=True)(x, token_positions=torch.arange(4.0))


@pytest.mark.parametrize(
    ("kwargs", "kind", "message"),
    [
        ({"d_model": 0}, ValueError, "d_model must be >= 1, got 0"),
        ({"num_heads": 0}, ValueError, "num_heads must be >= 1, got 0"),
        ({"d_in": 0}, ValueError, "d_in must be >= 1, got 0"),
        ({"d_out": 0}, ValueError, "d_out must be >= 1, got 0"),
        ({"dropout": 1.0}, ValueError, "dropout must be in [0, 1), got dropout=1.0"),
        (
            {"rope_convention": "neox"},
            ValueError,
            "rope_convention must be one of 'interleaved', 'half_split', got 'neox'",
        ),
    ],
)
def test_constructor_messages_name_the_argument(kwargs, kind, message):
    settings = {"d_model": 8, "num_heads": 2, **kwargs}
    with raises(kind, message):
        MultiHeadSelfAttention(**settings)


def test_rope_caches_2048_positions_by_default():
    module = MultiHeadSelfAttention(8, 2, rope=True)
    assert module.rope is not None and module.rope.max_seq_len == 2048
    x = torch.zeros(1, 1, 8)
    module(x, token_positions=torch.tensor([2047]))
    with pytest.raises(ValueError, match=r"^token_positions must lie in \[0, max_seq_len - 1\] = \[0, 2047\]"):
        module(x, token_positions=torch.tensor([2048]))


def test_input_messages():
    module = MultiHeadSelfAttention(8, 2)
    with raises(TypeError, "x must be a torch.Tensor, got list"):
        module([[0.0] * 8])
    with raises(ValueError, "x must have at least 2 dimensions (..., seq, d_in), got shape (8,)"):
        module(torch.zeros(8))
