"""MultiHeadSelfAttention's argument checks (mhsa_helpers/mha.py): edges that mutation testing
(``make mutate``) showed unpinned. Messages are compared whole, since they are what a learner reads."""

from __future__ import annotations

import pytest
import torch
from pinning import raises

from mhsa_helpers import AttentionWeights, MultiHeadSelfAttention, multi_head_self_attention
from mhsa_helpers.kv_cache import SlidingWindowCache
from mhsa_helpers.rope import RotaryEmbedding


def test_extra_repr_names_kv_heads_only_when_they_differ():
    assert MultiHeadSelfAttention(8, 2).extra_repr() == "d_model=8, num_heads=2, d_head=4, causal=False, dropout=0.0"
    assert MultiHeadSelfAttention(8, 2, num_kv_heads=1, causal=True, dropout=0.25).extra_repr() == (
        "d_model=8, num_heads=2, num_kv_heads=1, d_head=4, causal=True, dropout=0.25"
    )


def test_extra_repr_names_a_sink_and_a_gate_when_there_is_one():
    base = "d_model=8, num_heads=2, d_head=4, causal=False, dropout=0.0"
    assert MultiHeadSelfAttention(8, 2, sink="learned").extra_repr() == base + ", sink=learned"
    assert MultiHeadSelfAttention(8, 2, sink="plus_one").extra_repr() == base + ", sink=plus_one"
    assert MultiHeadSelfAttention(8, 2, gate="headwise").extra_repr() == base + ", gate=headwise"
    both = MultiHeadSelfAttention(8, 2, sink="learned", gate="elementwise")
    assert both.extra_repr() == base + ", sink=learned, gate=elementwise"
    assert "sink=learned" in repr(both) and "(gate_proj): Linear(in_features=8, out_features=8" in repr(both)


def test_rope_needs_an_even_d_head_and_says_where_it_comes_from():
    with raises(
        ValueError,
        "d_head = d_model // num_heads must be even for RoPE (dimensions are rotated in pairs), "
        "got d_head=3 from d_model=6, num_heads=2",
    ):
        MultiHeadSelfAttention(6, 2, rope=RotaryEmbedding(2))  # no RotaryEmbedding fits: 3 is odd


def test_token_positions_messages():
    x = torch.zeros(2, 4, 8)
    with raises(TypeError, "token_positions must be a torch.Tensor, got list"):
        MultiHeadSelfAttention(8, 2, rope=RotaryEmbedding(4))(x, token_positions=[0, 1, 2, 3])
    with raises(
        ValueError,
        "token_positions are RoPE positions, but RoPE is off: enable it (rope=a RotaryEmbedding) "
        "or drop them; got token_positions of shape (4,)",
    ):
        MultiHeadSelfAttention(8, 2)(x, token_positions=torch.arange(4))
    with raises(
        ValueError,
        "token_positions must be None with a SlidingWindowCache(rope_positions='cache'): it gives each key and "
        "query its slot in the cache; got token_positions of shape (4,); use rope_positions='original' to rotate "
        "by positions you choose",
    ):
        MultiHeadSelfAttention(8, 2, rope=RotaryEmbedding(4))(
            x, token_positions=torch.arange(4), cache=SlidingWindowCache(8, rope_positions="cache")
        )
    with raises(ValueError, "token_positions must be broadcastable to x.shape[:-1] = (2, 4), got shape (3, 4)"):
        MultiHeadSelfAttention(8, 2, rope=RotaryEmbedding(4))(x, token_positions=torch.zeros(3, 4, dtype=torch.int64))
    with raises(TypeError, "token_positions must be an integer tensor, got dtype torch.float32"):
        MultiHeadSelfAttention(8, 2, rope=RotaryEmbedding(4))(x, token_positions=torch.arange(4.0))


@pytest.mark.parametrize(
    ("kwargs", "kind", "message"),
    [
        ({"d_model": 0}, ValueError, "d_model must be >= 1, got 0"),
        ({"num_heads": 0}, ValueError, "num_heads must be >= 1, got 0"),
        ({"d_in": 0}, ValueError, "d_in must be >= 1, got 0"),
        ({"d_out": 0}, ValueError, "d_out must be >= 1, got 0"),
        ({"dropout": 1.0}, ValueError, "dropout must be in [0, 1), got dropout=1.0"),
    ],
)
def test_constructor_messages_name_the_argument(kwargs, kind, message):
    settings = {"d_model": 8, "num_heads": 2, **kwargs}
    with raises(kind, message):
        MultiHeadSelfAttention(**settings)


def test_rope_caches_2048_positions_by_default():
    module = MultiHeadSelfAttention(8, 2, rope=RotaryEmbedding(4))
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


# multi_head_self_attention (the functional form): its argument messages --------------------------

X, W = torch.zeros(1, 3, 8), torch.zeros(8, 8)


def _functional(*matrices, **options):
    biases = {name: options.pop(name) for name in ("q_bias", "k_bias", "v_bias", "o_bias") if name in options}
    weights = AttentionWeights(*(matrices or (W, W, W, W)), **biases)
    return multi_head_self_attention(X, weights, **{"num_heads": 2, **options})


def test_functional_weights_must_be_one_value():
    with raises(TypeError, "weights must be an AttentionWeights(q, k, v, o, ...), got tuple"):
        multi_head_self_attention(X, (W, W, W, W), num_heads=2)  # type: ignore[arg-type]  # the mistake tested


@pytest.mark.parametrize("index", range(4))
def test_functional_weights_must_have_the_dtype_of_x(index):
    name = ("q", "k", "v", "o")[index]
    weights = [W, W, W, W]
    weights[index] = W.double()
    with raises(TypeError, f"weights.{name} must have the dtype of x (torch.float32), got torch.float64"):
        _functional(*weights)


def test_functional_weight_shape_messages():
    with raises(ValueError, "weights.q must have shape (d_model, d_in) with d_in = x.shape[-1] = 8, got shape (8, 6)"):
        _functional(torch.zeros(8, 6), W, W, W)
    for index, name in ((1, "k"), (2, "v")):
        weights = [W, W, W, W]
        weights[index] = torch.zeros(6, 8)
        with raises(
            ValueError,
            f"weights.{name} must have shape (num_kv_heads * d_head, d_in) = (8, 8) to match weights.q, x and "
            "num_kv_heads=2, got shape (6, 8)",
        ):
            _functional(*weights)
    with raises(ValueError, "weights.o must have shape (d_out, d_model=8), got shape (8, 6)"):
        _functional(W, W, W, torch.zeros(8, 6))
    with raises(ValueError, "weights.o must be a 2-D (d_out, d_in) matrix, got shape (8, 8, 1)"):
        _functional(W, W, W, torch.zeros(8, 8, 1))


def test_functional_a_d_out_other_than_d_model_is_allowed():
    out = _functional(W, W, W, torch.zeros(5, 8), o_bias=torch.ones(5))
    assert torch.equal(out, torch.ones(1, 3, 5))


@pytest.mark.parametrize(("name", "size"), [("q_bias", 8), ("k_bias", 4), ("v_bias", 4), ("o_bias", 6)])
def test_functional_bias_sizes(name, size):
    # Two query heads of 4 on one key/value head (4 rows), and d_out = 6: every bias has its own size.
    weights = (W, torch.zeros(4, 8), torch.zeros(4, 8), torch.zeros(6, 8))
    with raises(ValueError, f"weights.{name} must have shape ({size},), got shape (5,)"):
        _functional(*weights, num_kv_heads=1, **{name: torch.zeros(5)})
    _functional(*weights, num_kv_heads=1, **{name: torch.zeros(size)})


def test_functional_rope_argument_messages():
    with raises(
        TypeError, "rope must be a RotaryEmbedding, e.g. rope=RotaryEmbedding(4) for heads of d_head=4, got float"
    ):
        _functional(rope=10000.0)
    with raises(
        ValueError, "rope must rotate heads of d_head = d_model // num_heads = 4, got a RotaryEmbedding of d_head=8"
    ):
        _functional(rope=RotaryEmbedding(8))


def test_functional_door_messages_name_the_argument():
    with raises(TypeError, "num_heads must be an int, got float 2.0 (expected >= 1)"):
        _functional(num_heads=2.0)
    with raises(ValueError, "mask must be broadcastable to (..., heads, seq, seq_k) = (1, 2, 3, 3), got shape (2, 4)"):
        _functional(mask=torch.ones(2, 4, dtype=torch.bool))
    with raises(
        ValueError,
        "mask must be on the device of the tensors it masks (cpu), got device meta; move it with .to('cpu')",
    ):
        _functional(mask=torch.ones(3, 3, dtype=torch.bool, device="meta"))


def test_functional_positions_must_lie_below_the_tables_length():
    message = (
        "token_positions must lie in [0, max_seq_len - 1] = [0, 1], got values from 0 to 2; "
        "build RotaryEmbedding with a larger max_seq_len"
    )
    rope = RotaryEmbedding(4, 2)
    with raises(ValueError, message):  # the default positions 0 .. seq - 1
        _functional(rope=rope)
    with raises(ValueError, message):
        _functional(rope=rope, token_positions=torch.tensor([0, 1, 2]))
    with raises(ValueError, message.replace("from 0 to 2", "from -1 to 1")):
        _functional(rope=rope, token_positions=torch.tensor([-1, 0, 1]))
    _functional(rope=rope, token_positions=torch.tensor([0, 1, 1]))
    _functional(rope=RotaryEmbedding(4, 3))


def test_functional_mask_message_names_the_heads():
    with raises(
        ValueError,
        "num_heads must divide d_model: expected d_model % num_heads == 0, got d_model=8, num_heads=3",
    ):
        _functional(num_heads=3)


def test_functional_uses_its_mask_and_rope_like_the_module():
    x = torch.randn(2, 4, 8)
    mask = torch.tensor([True, False, True, True])
    torch.manual_seed(0)
    module = MultiHeadSelfAttention(8, 2)
    masked = multi_head_self_attention(x, AttentionWeights.of(module), num_heads=2, mask=mask)
    torch.testing.assert_close(masked, module(x, mask=mask))
    assert not torch.allclose(masked, module(x))
    for convention in ("interleaved", "half_split"):
        module = MultiHeadSelfAttention(8, 2, rope=RotaryEmbedding(4, convention=convention))
        got = multi_head_self_attention(x, AttentionWeights.of(module), num_heads=2, rope=module.rope)
        torch.testing.assert_close(got, module(x))


def test_functional_with_rope_and_another_input_width_returns_the_weights_when_asked():
    # d_in 12 against d_model 8: d_head is read from the query's rows (8 // 2), not its columns (12 // 2).
    torch.manual_seed(1)
    module = MultiHeadSelfAttention(8, 2, d_in=12, rope=RotaryEmbedding(4))
    x = torch.randn(2, 3, 12)
    weights = AttentionWeights.of(module)
    out, attention = multi_head_self_attention(x, weights, num_heads=2, rope=module.rope, need_weights=True)
    want_out, want_attention = module(x, need_weights=True)
    torch.testing.assert_close(out, want_out)
    torch.testing.assert_close(attention, want_attention)
    assert attention.shape == (2, 2, 3, 3) and torch.allclose(attention.sum(-1), torch.ones(2, 2, 3))
    alone = multi_head_self_attention(x, weights, num_heads=2, rope=module.rope)
    assert isinstance(alone, torch.Tensor)  # the output alone without need_weights
    torch.testing.assert_close(alone, out)


def test_functional_rotates_each_row_of_a_batch_at_its_own_positions():
    # batch 2 and 3 heads: positions (batch, seq) must meet the heads axis as (batch, 1, seq)
    torch.manual_seed(2)
    module = MultiHeadSelfAttention(12, 3, rope=RotaryEmbedding(4))
    x = torch.randn(2, 4, 12)
    positions = torch.tensor([[0, 1, 2, 3], [0, 2, 4, 6]])
    weights = AttentionWeights.of(module)
    got = multi_head_self_attention(x, weights, num_heads=3, rope=module.rope, token_positions=positions)
    for row in range(2):
        alone = multi_head_self_attention(
            x[row : row + 1], weights, num_heads=3, rope=module.rope, token_positions=positions[row]
        )
        torch.testing.assert_close(got[row : row + 1], alone)
    spaced = multi_head_self_attention(x[1:], weights, num_heads=3, rope=module.rope)
    assert not torch.allclose(got[1:], spaced, atol=1e-4)  # the second row's positions are not 0 1 2 3


def test_attention_weights_of_a_module_are_views_of_its_parameters():
    module = MultiHeadSelfAttention(8, 2, num_kv_heads=1, d_out=6)
    weights = AttentionWeights.of(module)
    bias = module.qkv_proj.bias
    assert weights.q.shape == (8, 8) and weights.k.shape == weights.v.shape == (4, 8) and weights.o.shape == (6, 8)
    assert torch.equal(torch.cat((weights.q_bias, weights.k_bias, weights.v_bias)), bias)
    assert weights.k_bias.shape == (4,) and weights.o_bias is module.out_proj.bias
    assert weights.q.data_ptr() == module.qkv_proj.weight.data_ptr()  # a view: nothing copied
    no_bias = AttentionWeights.of(MultiHeadSelfAttention(8, 2, qkv_bias=False, out_bias=False))
    assert no_bias.q_bias is no_bias.k_bias is no_bias.v_bias is no_bias.o_bias is None


def test_an_unbatched_input_streams_through_a_cache_of_slots_like_a_batch_of_one():
    # With rope_positions="cache" the keys are rotated by their slot, counted along the keys' sequence axis,
    # which is axis -2 whether or not there is a batch axis.
    torch.manual_seed(0)
    attn = MultiHeadSelfAttention(8, 2, causal=True, rope=RotaryEmbedding(4)).eval()
    x = torch.randn(6, 8)
    batched, unbatched = (SlidingWindowCache(window=3, sinks=1, rope_positions="cache") for _ in range(2))
    for t in range(6):  # one token at a time, past the window: 1, 2, 3, 3, 3, 3 keys held
        torch.testing.assert_close(attn(x[t : t + 1], cache=unbatched), attn(x[None, t : t + 1], cache=batched)[0])
    assert unbatched.keys.shape == batched.keys.shape[1:] == (2, 3, 4)  # (kv_heads, window, d_head)


def test_rope_may_be_a_rotary_embedding_the_module_shares():
    torch.manual_seed(0)
    shared = RotaryEmbedding(4, 16, 500.0, "half_split")
    given = MultiHeadSelfAttention(8, 2, causal=True, rope=shared)
    built = MultiHeadSelfAttention(8, 2, causal=True, rope=RotaryEmbedding(4, base=500.0, convention="half_split"))
    built.load_state_dict(given.state_dict())
    assert given.rope is shared and MultiHeadSelfAttention(8, 2).rope is None
    x = torch.randn(2, 5, 8)
    torch.testing.assert_close(given(x), built(x))
    with raises(
        ValueError, "rope must rotate heads of d_head = d_model // num_heads = 4, got a RotaryEmbedding of d_head=8"
    ):
        MultiHeadSelfAttention(8, 2, rope=RotaryEmbedding(8))
    with raises(
        TypeError, "rope must be None or a RotaryEmbedding, e.g. rope=RotaryEmbedding(4) for heads of d_head=4, got str"
    ):
        MultiHeadSelfAttention(8, 2, rope="yes")
    with raises(
        TypeError,
        "rope must be None or a RotaryEmbedding, e.g. rope=RotaryEmbedding(4) for heads of d_head=4, got bool",
    ):
        MultiHeadSelfAttention(8, 2, rope=True)  # the settings live in the RotaryEmbedding, not in the module


def test_the_module_rotates_each_row_of_a_batch_at_its_own_positions():
    # batch 2 and 3 heads: positions (batch, seq) must meet the heads axis as (batch, 1, seq)
    torch.manual_seed(3)
    module = MultiHeadSelfAttention(12, 3, rope=RotaryEmbedding(4))
    x = torch.randn(2, 4, 12)
    positions = torch.tensor([[0, 1, 2, 3], [0, 2, 4, 6]])
    got = module(x, token_positions=positions)
    for row in range(2):
        torch.testing.assert_close(got[row : row + 1], module(x[row : row + 1], token_positions=positions[row]))
    assert not torch.allclose(got[1:], module(x[1:]), atol=1e-4)  # the second row's positions are not 0 1 2 3
