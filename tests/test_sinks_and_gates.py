"""Sink logits and output gates (notebook 13) against the recipe written out with plain PyTorch.

The reference of a sink is its definition: softmax over ``[scores, s]`` with the last column dropped
(``torch.softmax``, float64); the rescaling ``softmax(scores) * sigmoid(logsumexp(scores) - s)`` is checked
against it too. The reference of a gate multiplies each head's output, computed from the module's own
weight matrices with ``torch.softmax``, by ``torch.sigmoid`` of the token's input through the gate's weights.
"""

from __future__ import annotations

import math

import pytest
import torch

from mhsa_helpers import KVCache, MultiHeadSelfAttention, scaled_dot_product_attention
from mhsa_helpers.attention import attend
from mhsa_helpers.masking import causal_mask

F64 = torch.float64


def draw(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, dtype=F64, generator=torch.Generator().manual_seed(seed))


def sink_weights(scores: torch.Tensor, sink: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """The definition: one more column ``sink`` in each row's softmax, dropped afterwards."""
    scores = scores.masked_fill(~allowed, -math.inf)
    rows = torch.broadcast_shapes(scores.shape[:-1], sink.shape)
    scores, column = scores.expand(*rows, scores.shape[-1]), sink.expand(rows).unsqueeze(-1)
    return torch.softmax(torch.cat([scores, column], dim=-1), dim=-1)[..., :-1]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("need_weights", [False, True])
def test_a_sink_is_one_more_softmax_column_with_no_value(causal, masked, need_weights):
    q, k, v = draw(2, 3, 5, 4, seed=0), draw(2, 3, 7, 4, seed=1), draw(2, 3, 7, 6, seed=2)
    sink = draw(3, 1, seed=3) * 2  # one logit per head
    allowed = causal_mask(5, 7) if causal else torch.ones(5, 7, dtype=torch.bool)
    mask = None
    if masked:
        mask = torch.rand(2, 1, 5, 7, generator=torch.Generator().manual_seed(4)) > 0.3
        mask[1, 0, 2] = False  # a query that may see no key at all
        allowed = allowed & mask
    expected = sink_weights(q @ k.transpose(-2, -1) / 2, sink, allowed)
    out, weights = attend(q, k, v, mask, is_causal=causal, need_weights=need_weights, sink=sink)
    torch.testing.assert_close(out, expected @ v)
    if need_weights:
        torch.testing.assert_close(weights, expected)
        # The kept weights sum to less than 1, and a row that sees nothing gives everything to the sink.
        assert (weights.sum(-1) < 1).all()
        if masked:
            assert torch.equal(weights[1, :, 2], torch.zeros(3, 7, dtype=F64))
    # The same as rescaling ordinary attention by sigmoid(logsumexp(scores) - sink): not a sigmoid of the scores.
    scores = (q @ k.transpose(-2, -1) / 2).masked_fill(~allowed, -math.inf)
    rescale = torch.sigmoid(torch.logsumexp(scores, -1) - sink).unsqueeze(-1)
    torch.testing.assert_close(expected, torch.softmax(scores, -1).nan_to_num(0.0) * rescale)


def test_softmax_plus_one_is_a_sink_at_zero_and_a_very_low_sink_is_plain_softmax():
    q, k, v = draw(1, 2, 4, 8, seed=5), draw(1, 2, 4, 8, seed=6), draw(1, 2, 4, 8, seed=7)
    scores = q @ k.transpose(-2, -1) / math.sqrt(8)
    exps = scores.exp()
    _, plus_one = scaled_dot_product_attention(q, k, v, need_weights=True, sink=torch.zeros((), dtype=F64))
    torch.testing.assert_close(plus_one, exps / (1 + exps.sum(-1, keepdim=True)))  # Miller's softmax_1
    plain = scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(scaled_dot_product_attention(q, k, v, sink=torch.tensor(-1e4, dtype=F64)), plain)
    # A higher sink takes more from every key alike: the kept weights keep their ratios.
    _, high = scaled_dot_product_attention(q, k, v, need_weights=True, sink=torch.tensor(3.0, dtype=F64))
    torch.testing.assert_close(high / high.sum(-1, keepdim=True), plus_one / plus_one.sum(-1, keepdim=True))
    assert (high.sum(-1) < plus_one.sum(-1)).all()


def test_the_fused_path_takes_the_sink_as_a_key_with_a_zero_value(monkeypatch):
    calls = []
    original = torch.nn.functional.scaled_dot_product_attention

    def spy(q, k, v, **kwargs):
        calls.append((k.shape[-2], kwargs["attn_mask"]))
        return original(q, k, v, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    q, k, v = draw(2, 3, 4, 4, seed=8), draw(1, 3, 6, 4, seed=9), draw(1, 3, 6, 5, seed=10)
    sink = torch.tensor([[0.5], [-1.0], [2.0]], dtype=F64)
    out, _ = attend(q, k, v, is_causal=True, sink=sink)
    ((keys, extra),) = calls
    assert keys == 7 and torch.equal(extra[..., -1], sink.expand(2, 3, 4))
    expected = sink_weights(q @ k.transpose(-2, -1) / 2, sink, causal_mask(4, 6)) @ v
    torch.testing.assert_close(out, expected)
    # One query (a decoding step) is attended explicitly: no copy of every key for the sink's.
    last, _ = attend(q[..., -1:, :], k, v, is_causal=True, sink=sink)
    assert len(calls) == 1
    torch.testing.assert_close(last, expected[..., -1:, :])


@pytest.mark.parametrize(
    ("q_shape", "k_shape", "v_shape", "sink_shape"),
    [
        ((1, 3, 5, 4), (2, 3, 7, 4), (1, 3, 7, 6), (3, 1)),  # the keys hold the batch
        ((1, 3, 5, 4), (1, 3, 7, 4), (2, 1, 7, 6), (3, 1)),  # the values do
        ((2, 3, 5, 4), (1, 3, 7, 4), (2, 1, 7, 6), (2, 3, 1)),  # a sink per batch and head
        ((2, 5, 4), (2, 7, 4), (1, 7, 3), (5,)),  # no heads axis, a sink per query
    ],
)
def test_the_fused_sink_path_broadcasts_every_batch_and_takes_the_scale(q_shape, k_shape, v_shape, sink_shape):
    q, k, v, sink = (
        draw(*q_shape, seed=20),
        draw(*k_shape, seed=21),
        draw(*v_shape, seed=22),
        draw(*sink_shape, seed=23),
    )
    mask = torch.rand(5, 7, generator=torch.Generator().manual_seed(24)) > 0.4
    out, weights = attend(q, k, v, mask, scale=0.3, sink=sink)  # several queries, no weights: the fused path
    assert weights is None
    expected = sink_weights(q @ k.transpose(-2, -1) * 0.3, sink, mask) @ v
    torch.testing.assert_close(out, expected)


def test_a_sink_of_the_wrong_shape_or_kind_is_named():
    q = draw(2, 3, 4, 4, seed=11)
    with pytest.raises(
        ValueError, match=r"sink must be broadcastable to \(\.\.\., seq_q\) = \(2, 3, 4\), got shape \(3,\)"
    ):
        attend(q, q, q, sink=torch.zeros(3, dtype=F64))
    with pytest.raises(TypeError, match="sink must have a floating-point dtype"):
        attend(q, q, q, sink=torch.zeros(3, 1, dtype=torch.int64))


def reference_forward(module: MultiHeadSelfAttention, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The module's recipe with plain PyTorch, from its weight matrices: causal, no RoPE."""
    heads, d_head, seq = module.num_heads, module.d_head, x.shape[-2]

    def split(t: torch.Tensor) -> torch.Tensor:
        return t.reshape(*t.shape[:-1], heads, -1).transpose(-3, -2)

    q = split(x @ module.q_weight.T + module.qkv_proj.bias[: module.d_model])
    k = split(x @ module.k_weight.T + module.qkv_proj.bias[module.d_model : 2 * module.d_model])
    v = split(x @ module.v_weight.T + module.qkv_proj.bias[2 * module.d_model :])
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_head)
    allowed = torch.ones(seq, seq, dtype=torch.bool).tril()
    if module.sink is None:
        weights = torch.softmax(scores.masked_fill(~allowed, -math.inf), -1)
    else:
        weights = sink_weights(scores, module.sink.detach().reshape(heads, 1), allowed)
    out = weights @ v  # (batch, heads, seq, d_head)
    if module.gate_proj is not None:
        gate = torch.sigmoid(x @ module.gate_proj.weight.T + module.gate_proj.bias)  # (batch, seq, heads | d_model)
        out = out * split(gate)
    merged = out.transpose(-3, -2).reshape(*x.shape[:-1], module.d_model)
    return merged @ module.o_weight.T + module.out_proj.bias, weights


VARIANTS = [
    {"sink": "learned"},
    {"sink": "plus_one"},
    {"gate": "headwise"},
    {"gate": "elementwise"},
    {"sink": "learned", "gate": "headwise"},
]


@pytest.mark.parametrize("options", VARIANTS, ids=lambda o: "+".join(o.values()))
def test_each_variant_equals_its_recipe_and_decodes_token_by_token_as_its_full_pass(options):
    torch.manual_seed(0)
    module = MultiHeadSelfAttention(12, 3, causal=True, **options).double()
    if module.sink is not None and isinstance(module.sink, torch.nn.Parameter):
        with torch.no_grad():
            module.sink.copy_(torch.tensor([-1.0, 0.5, 3.0]))  # trained sinks differ per head
    x = draw(2, 6, 12, seed=12)
    out, weights = module(x, need_weights=True)
    want_out, want_weights = reference_forward(module, x)
    torch.testing.assert_close(out, want_out)
    torch.testing.assert_close(weights, want_weights)
    torch.testing.assert_close(module(x), want_out)  # the fused path, without weights
    cache, steps = KVCache(), []
    for t in range(6):
        steps.append(module(x[:, t : t + 1], cache=cache))
    torch.testing.assert_close(torch.cat(steps, dim=1), want_out)
    chunked = KVCache()
    torch.testing.assert_close(
        torch.cat([module(x[:, :4], cache=chunked), module(x[:, 4:], cache=chunked)], 1), want_out
    )


def test_the_options_make_their_parameters_and_nothing_else():
    plain = MultiHeadSelfAttention(12, 3)
    learned, plus_one = MultiHeadSelfAttention(12, 3, sink="learned"), MultiHeadSelfAttention(12, 3, sink="plus_one")
    headwise, elementwise = (
        MultiHeadSelfAttention(12, 3, gate="headwise"),
        MultiHeadSelfAttention(12, 3, gate="elementwise"),
    )
    count = sum(p.numel() for p in plain.parameters())
    assert plain.sink is None and plain.gate_proj is None
    assert sum(p.numel() for p in learned.parameters()) == count + 3  # one logit per head, learned from 0
    assert torch.equal(learned.sink, torch.zeros(3)) and learned.sink.requires_grad
    assert sum(p.numel() for p in plus_one.parameters()) == count  # a fixed 0: not learned, not saved
    assert torch.equal(plus_one.sink, torch.zeros(3)) and "sink" not in plus_one.state_dict()
    assert sum(p.numel() for p in headwise.parameters()) == count + 12 * 3 + 3
    assert sum(p.numel() for p in elementwise.parameters()) == count + 12 * 12 + 12
    assert set(learned.state_dict()) - set(plain.state_dict()) == {"sink"}
    # The sink logits and the gate take the module's dtype.
    wide = MultiHeadSelfAttention(12, 3, sink="learned", gate="headwise", dtype=F64)
    assert wide.sink.dtype == F64 and wide.gate_proj.weight.dtype == F64
    assert MultiHeadSelfAttention(12, 3, sink="plus_one", dtype=F64).sink.dtype == F64
    # A learned sink receives a gradient; it moves the output.
    x = draw(1, 4, 12, seed=13).float()
    learned(x).sum().backward()
    assert learned.sink.grad is not None and learned.sink.grad.abs().sum() > 0


def test_a_sink_or_gate_that_does_not_exist_is_named():
    with pytest.raises(ValueError, match="sink must be one of 'learned', 'plus_one', got 'sigmoid'"):
        MultiHeadSelfAttention(12, 3, sink="sigmoid")
    with pytest.raises(ValueError, match="gate must be one of 'headwise', 'elementwise', got 'after_out'"):
        MultiHeadSelfAttention(12, 3, gate="after_out")
