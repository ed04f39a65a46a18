"""Bad input raises ValueError/TypeError whose message names the argument, what was
expected and what was given — one table, one test."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import pytest
import torch

import mhsa_helpers as mh
from mhsa_helpers import KVCache, MultiHeadSelfAttention, RotaryEmbedding
from mhsa_helpers.weight_layouts import from_fused_qkv, from_head_weights, from_projection_weights, from_torch_mha


class Case(NamedTuple):
    id: str
    call: Callable[[], object]
    error: type[Exception]
    fragments: Sequence[str]  # argument name, expected value, given value (all must appear)


def _qkv(seq_q=3, seq_k=3, d_k=4, d_v=4, batch=2):
    gen = torch.Generator().manual_seed(0)
    return (
        torch.randn(batch, seq_q, d_k, generator=gen),
        torch.randn(batch, seq_k, d_k, generator=gen),
        torch.randn(batch, seq_k, d_v, generator=gen),
    )


def _mhsa(*, rope=False, max_seq_len=2048, **options):
    torch.manual_seed(0)
    return MultiHeadSelfAttention(8, 2, rope=RotaryEmbedding(4, max_seq_len) if rope else None, **options)


def _weights(*shapes):
    return [torch.zeros(*shape) for shape in shapes]


CASES = [
    Case(
        "d_model-not-divisible-by-num_heads",
        lambda: MultiHeadSelfAttention(10, 3),
        ValueError,
        ["num_heads", "d_model", "% num_heads == 0", "d_model=10", "num_heads=3"],
    ),
    Case(
        "odd-d_head-with-rope",
        lambda: MultiHeadSelfAttention(6, 2, rope=RotaryEmbedding(2)),
        ValueError,
        ["d_head", "even", "d_head=3", "d_model=6", "num_heads=2"],
    ),
    Case(
        "rope-of-another-d_head-functional",
        lambda: mh.multi_head_self_attention(
            torch.zeros(1, 3, 6), mh.AttentionWeights(*_weights(*[(6, 6)] * 4)), num_heads=2, rope=RotaryEmbedding(4)
        ),
        ValueError,
        ["rope", "d_head = d_model // num_heads = 3", "d_head=4"],
    ),
    Case(
        "odd-d_head-rotary-embedding",
        lambda: RotaryEmbedding(5),
        ValueError,
        ["d_head", "even", "d_head=5"],
    ),
    Case(
        "mask-not-broadcastable",
        lambda: mh.scaled_dot_product_attention(*_qkv(), mask=torch.ones(3, 5, dtype=torch.bool)),
        ValueError,
        ["mask", "broadcastable", "(2, 3, 3)", "(3, 5)"],
    ),
    Case(
        "module-mask-not-broadcastable",
        lambda: _mhsa()(torch.randn(2, 4, 8), mask=torch.ones(3, 1, 1, 4, dtype=torch.bool)),
        ValueError,
        ["mask", "broadcastable", "(2, 2, 4, 4)", "(3, 1, 1, 4)"],
    ),
    Case(
        "mask-float-instead-of-bool",
        lambda: mh.scaled_dot_product_attention(*_qkv(), mask=torch.ones(3, 3)),
        TypeError,
        ["mask", "boolean", "torch.float32"],
    ),
    Case(
        "masked-softmax-int-mask",
        lambda: mh.masked_softmax_neg_inf(torch.zeros(2, 3), torch.ones(2, 3, dtype=torch.int64)),
        TypeError,
        ["mask", "boolean", "torch.int64"],
    ),
    Case(
        "q-k-last-dims-differ",
        lambda: mh.scaled_dot_product_attention(*_qkv(d_k=4)[:1], torch.zeros(2, 3, 5), torch.zeros(2, 3, 4)),
        ValueError,
        ["k", "d_k", "== 4", "(2, 3, 4)", "(2, 3, 5)"],
    ),
    Case(
        "v-wrong-seq-length",
        lambda: mh.scaled_dot_product_attention(*_qkv(seq_k=3)[:2], torch.zeros(2, 4, 4)),
        ValueError,
        ["v", "seq_k == 3", "(2, 4, 4)"],
    ),
    Case(
        "module-1d-input",
        lambda: _mhsa()(torch.zeros(8)),
        ValueError,
        ["x", "at least 2 dimensions", "(8,)"],
    ),
    Case(
        "attention-1d-query",
        lambda: mh.scaled_dot_product_attention(torch.zeros(4), torch.zeros(3, 4), torch.zeros(3, 4)),
        ValueError,
        ["q", "at least 2 dimensions", "(4,)"],
    ),
    Case(
        "module-empty-sequence",
        lambda: _mhsa()(torch.zeros(2, 0, 8)),
        ValueError,
        ["x", "seq >= 1", "(2, 0, 8)"],
    ),
    Case(
        "attention-empty-keys",
        lambda: mh.scaled_dot_product_attention(torch.zeros(1, 2, 4), torch.zeros(1, 0, 4), torch.zeros(1, 0, 4)),
        ValueError,
        ["k", "seq >= 1", "(1, 0, 4)"],
    ),
    Case(
        "token_positions-past-rope-cache",
        lambda: _mhsa(rope=True, max_seq_len=8)(torch.zeros(1, 4, 8), token_positions=torch.arange(6, 10)),
        ValueError,
        ["token_positions", "max_seq_len", "[0, 7]", "from 6 to 9"],
    ),
    Case(
        "cache-runs-past-rope-cache",
        lambda: _decode_past_cache(),
        ValueError,
        ["token_positions", "[0, 3]", "to 4"],
    ),
    Case(
        "negative-token_positions",
        lambda: RotaryEmbedding(4, max_seq_len=8)(torch.zeros(3, 4), torch.tensor([-1, 0, 1])),
        ValueError,
        ["token_positions", "[0, 7]", "from -1"],
    ),
    Case(
        "float-token_positions",
        lambda: RotaryEmbedding(4)(torch.zeros(3, 4), torch.tensor([0.0, 1.0, 2.0])),
        TypeError,
        ["token_positions", "integer", "torch.float32"],
    ),
    Case(
        "token_positions-wrong-length",
        lambda: _mhsa(rope=True)(torch.zeros(1, 4, 8), token_positions=torch.arange(5)),
        ValueError,
        ["token_positions", "seq=4", "(5,)"],
    ),
    Case(
        "token_positions-batch-mismatch",
        lambda: _mhsa(rope=True)(torch.zeros(2, 4, 8), token_positions=torch.zeros(3, 4, dtype=torch.int64)),
        ValueError,
        ["token_positions", "broadcastable", "(2, 4)", "(3, 4)"],
    ),
    Case(
        "token_positions-with-rope-off",
        lambda: _mhsa(rope=False)(torch.zeros(1, 4, 8), token_positions=torch.arange(4)),
        ValueError,
        ["token_positions", "RoPE is off", "rope=a RotaryEmbedding", "(4,)"],
    ),
    Case(
        "projection-weights-out_in-wrong-k",
        lambda: from_projection_weights(*_weights((8, 6), (8, 5), (8, 6), (8, 8)), num_heads=2, layout="out_in"),
        ValueError,
        ["k_weight", "(8, 6)", "(d_model, d_in)", "out_in", "(8, 5)"],
    ),
    Case(
        "projection-weights-in_out-wrong-v",
        lambda: from_projection_weights(*_weights((6, 8), (6, 8), (8, 6), (8, 8)), num_heads=2, layout="in_out"),
        ValueError,
        ["v_weight", "(6, 8)", "(d_in, d_model)", "in_out", "(8, 6)"],
    ),
    Case(
        "projection-weights-in_out-wrong-o",
        lambda: from_projection_weights(*_weights((6, 8), (6, 8), (6, 8), (6, 8)), num_heads=2, layout="in_out"),
        ValueError,
        ["o_weight", "d_model=8", "(8, d_out)", "in_out", "(6, 8)"],
    ),
    Case(
        "projection-weights-out_in-wrong-o",
        lambda: from_projection_weights(*_weights((8, 6), (8, 6), (8, 6), (8, 6)), num_heads=2, layout="out_in"),
        ValueError,
        ["o_weight", "d_model=8", "(d_out, 8)", "out_in", "(8, 6)"],
    ),
    Case(
        "unknown-layout",
        lambda: from_projection_weights(*_weights(*[(8, 8)] * 4), num_heads=2, layout="row_major"),
        ValueError,
        ["layout", "'out_in'", "'in_out'", "'row_major'"],
    ),
    Case(
        "unknown-fused-layout",
        lambda: from_fused_qkv(*_weights((24, 8), (8, 8)), num_heads=2, fused_layout="qkv"),
        ValueError,
        ["fused_layout", "'stacked'", "'per_head'", "'qkv'"],
    ),
    Case(
        "fused-qkv-bias-wrong-shape",
        lambda: from_fused_qkv(
            *_weights((24, 8), (8, 8)), num_heads=2, fused_layout="per_head", qkv_bias=torch.zeros(23)
        ),
        ValueError,
        ["qkv_bias", "(24,)", "(23,)"],
    ),
    Case(
        "unknown-rope-convention",
        lambda: RotaryEmbedding(4, convention="neox"),
        ValueError,
        ["convention", "'interleaved'", "'half_split'", "'neox'"],
    ),
    Case(
        "x-dtype-differs-from-module",
        lambda: _mhsa()(torch.zeros(1, 3, 8, dtype=torch.float64)),
        TypeError,
        ["x", "torch.float32", "torch.float64"],
    ),
    Case(
        "x-last-dim-wrong",
        lambda: _mhsa()(torch.zeros(1, 3, 6)),
        ValueError,
        ["x", "d_in=8", "(1, 3, 6)"],
    ),
    Case(
        "x-integer-dtype",
        lambda: _mhsa()(torch.zeros(1, 3, 8, dtype=torch.int64)),
        TypeError,
        ["x", "floating-point", "torch.int64"],
    ),
    Case(
        "non-tensor-input",
        lambda: _mhsa()([[0.0] * 8] * 3),
        TypeError,
        ["x", "torch.Tensor", "list"],
    ),
    Case(
        "non-tensor-softmax",
        lambda: mh.softmax([1.0, 2.0]),
        TypeError,
        ["x", "torch.Tensor", "list"],
    ),
    Case(
        "dropout-equal-to-one",
        lambda: MultiHeadSelfAttention(8, 2, dropout=1.0),
        ValueError,
        ["dropout", "[0, 1)", "1.0"],
    ),
    Case(
        "dropout_p-negative",
        lambda: mh.scaled_dot_product_attention(*_qkv(), dropout_p=-0.1),
        ValueError,
        ["dropout_p", "[0, 1)", "-0.1"],
    ),
    Case(
        "padding-lengths-exceed-seq_len",
        lambda: mh.padding_mask(torch.tensor([2, 6]), 4),
        ValueError,
        ["lengths", "seq_len=4", "to 6"],
    ),
    Case(
        "padding-float-lengths",
        lambda: mh.padding_mask(torch.tensor([2.0, 3.0]), 4),
        TypeError,
        ["lengths", "integer", "torch.float32"],
    ),
    Case(
        "causal_mask-seq_q-greater-than-seq_k",
        lambda: mh.causal_mask(5, 3),
        ValueError,
        ["seq_q", "<= seq_k", "seq_q=5", "seq_k=3"],
    ),
    Case(
        "is_causal-seq_q-greater-than-seq_k",
        lambda: mh.scaled_dot_product_attention(*_qkv(seq_q=4, seq_k=2)[:1], *_qkv(seq_k=2)[1:], is_causal=True),
        ValueError,
        ["is_causal", "seq_q <= seq_k", "seq_q=4", "seq_k=2"],
    ),
    Case(
        "num_heads-zero",
        lambda: MultiHeadSelfAttention(8, 0),
        ValueError,
        ["num_heads", ">= 1", "got 0"],
    ),
    Case(
        "num_heads-float",
        lambda: mh.split_heads(torch.zeros(2, 8), 2.0),
        TypeError,
        ["num_heads", "int", "float"],
    ),
    Case(
        "split_heads-not-divisible",
        lambda: mh.split_heads(torch.zeros(3, 10), 4),
        ValueError,
        ["num_heads", "d_model", "=10", "num_heads=4"],
    ),
    Case(
        "fused-qkv-rows-not-divisible",
        lambda: mh.fused_qkv_stacked_to_per_head(torch.zeros(20, 4), 2),
        ValueError,
        ["3 * num_heads", "weight.shape[0]", "=20", "=6"],
    ),
    Case(
        "permute-rope-weight-unknown-convention",
        lambda: mh.permute_rope_weight(torch.zeros(8, 8), 2, "interleaved", "gptj"),
        ValueError,
        ["target", "'half_split'", "'gptj'"],
    ),
    Case(
        "kv-cache-wrong-heads",
        lambda: _append_mismatched_heads(),
        ValueError,
        ["keys", "(1, 2)", "(1, 3, 1, 4)"],
    ),
    Case(
        "cache-not-a-kvcache",
        lambda: _mhsa()(torch.zeros(1, 3, 8), cache={}),
        TypeError,
        ["cache", "KVCache", "dict"],
    ),
    # ------------------------------------------------ attention_scores and masks
    Case(
        "attention_scores-d_k-mismatch",
        lambda: mh.attention_scores(torch.zeros(2, 3, 4), torch.zeros(2, 3, 5)),
        ValueError,
        ["k", "d_k", "== 4", "(2, 3, 5)"],
    ),
    Case(
        "attention_scores-batch-mismatch",
        lambda: mh.attention_scores(torch.zeros(2, 3, 4), torch.zeros(3, 3, 4)),
        ValueError,
        ["q and k", "broadcastable", "(2, 3, 4)", "(3, 3, 4)"],
    ),
    Case(
        "attention_scores-non-tensor",
        lambda: mh.attention_scores([[1.0, 2.0]], torch.zeros(1, 2)),
        TypeError,
        ["q", "torch.Tensor", "list"],
    ),
    Case(
        "mask-on-another-device",
        lambda: mh.scaled_dot_product_attention(*_qkv(), mask=torch.ones(3, 3, dtype=torch.bool, device="meta")),
        ValueError,
        ["mask", "device", "(cpu)", "meta"],
    ),
    Case(
        "module-mask-on-another-device",
        lambda: _mhsa()(torch.zeros(1, 3, 8), mask=torch.ones(3, 3, dtype=torch.bool, device="meta")),
        ValueError,
        ["mask", "device", "(cpu)", "meta"],
    ),
    Case(
        "padding-2d-lengths",
        lambda: mh.padding_mask(torch.tensor([[2, 3]]), 4),
        ValueError,
        ["lengths", "1-D", "(1, 2)"],
    ),
    # ------------------------------------------------ RoPE
    Case(
        "apply_rotary-odd-last-dim",
        lambda: mh.apply_rotary(torch.zeros(3, 5), torch.ones(3, 2), torch.zeros(3, 2)),
        ValueError,
        ["x", "even", "(3, 5)"],
    ),
    Case(
        "apply_rotary-non-tensor-x",
        lambda: mh.apply_rotary([[0.0] * 4] * 3, torch.ones(3, 2), torch.zeros(3, 2)),
        TypeError,
        ["x", "torch.Tensor", "list"],
    ),
    Case(
        "apply_rotary-non-tensor-cos",
        lambda: mh.apply_rotary(torch.zeros(3, 4), 1.0, torch.zeros(3, 2)),
        TypeError,
        ["cos", "torch.Tensor", "float"],
    ),
    Case(
        "apply_rotary-cos-one-per-feature",
        lambda: mh.apply_rotary(torch.zeros(3, 4), torch.ones(3, 4), torch.zeros(3, 4)),
        ValueError,
        ["cos", "broadcastable", "(3, 2)", "(3, 4)"],
    ),
    Case(
        "rope-base-not-a-number",
        lambda: RotaryEmbedding(4, base="10000"),
        TypeError,
        ["base", "number", "str", "'10000'"],
    ),
    Case(
        "rope-base-at-most-one",
        lambda: RotaryEmbedding(4, base=1.0),
        ValueError,
        ["base", "> 1", "1.0"],
    ),
    Case(
        "rope-token_positions-batch-seq-against-heads",
        lambda: RotaryEmbedding(4)(torch.zeros(2, 2, 3, 4), torch.zeros(2, 3, dtype=torch.int64)),
        ValueError,
        ["token_positions", "(batch, 1, seq)", "(2, 2, 3)", "(2, 3)"],
    ),
    Case(
        "rope-token_positions-grow-x",
        lambda: RotaryEmbedding(4)(torch.zeros(1, 3, 4), torch.zeros(2, 3, dtype=torch.int64)),
        ValueError,
        ["token_positions", "broadcastable", "(1, 3)", "(2, 3)"],
    ),
    Case(
        "functional-token_positions-not-a-tensor",
        lambda: mh.multi_head_self_attention(
            torch.zeros(1, 3, 8),
            mh.AttentionWeights(*_weights(*[(8, 8)] * 4)),
            num_heads=2,
            rope=RotaryEmbedding(4),
            token_positions=[0, 1, 2],
        ),
        TypeError,
        ["token_positions", "torch.Tensor", "list"],
    ),
    # ------------------------------------------------ biases
    Case(
        "projection-weights-q_bias-wrong-shape",
        lambda: from_projection_weights(*_weights(*[(8, 8)] * 4), num_heads=2, layout="out_in", q_bias=torch.zeros(7)),
        ValueError,
        ["q_bias", "(8,)", "(7,)"],
    ),
    Case(
        "projection-weights-k_bias-not-a-tensor",
        lambda: from_projection_weights(*_weights(*[(8, 8)] * 4), num_heads=2, layout="out_in", k_bias=[0.0] * 8),
        TypeError,
        ["k_bias", "torch.Tensor", "list"],
    ),
    Case(
        "projection-weights-o_bias-wrong-shape",
        lambda: from_projection_weights(
            *_weights((8, 6), (8, 6), (8, 6), (5, 8)), num_heads=2, layout="out_in", o_bias=torch.zeros(8)
        ),
        ValueError,
        ["o_bias", "(5,)", "(8,)"],
    ),
    Case(
        "functional-v_bias-wrong-shape",
        lambda: mh.multi_head_self_attention(
            torch.zeros(1, 3, 8), mh.AttentionWeights(*_weights(*[(8, 8)] * 4), v_bias=torch.zeros(6)), num_heads=2
        ),
        ValueError,
        ["v_bias", "(8,)", "(6,)"],
    ),
    Case(
        "functional-o_bias-not-a-tensor",
        lambda: mh.multi_head_self_attention(
            torch.zeros(1, 3, 8), mh.AttentionWeights(*_weights(*[(8, 8)] * 4), o_bias=[0.0] * 8), num_heads=2
        ),
        TypeError,
        ["o_bias", "torch.Tensor", "list"],
    ),
    Case(
        "functional-q_bias-dtype-differs-from-x",
        lambda: mh.multi_head_self_attention(
            torch.zeros(1, 3, 8),
            mh.AttentionWeights(*_weights(*[(8, 8)] * 4), q_bias=torch.zeros(8, dtype=torch.float64)),
            num_heads=2,
        ),
        TypeError,
        ["q_bias", "torch.float32", "torch.float64"],
    ),
    # ------------------------------------------------ loaders
    Case(
        "projection-weights-device-option",
        lambda: from_projection_weights(*_weights(*[(8, 8)] * 4), num_heads=2, layout="out_in", device="cpu"),
        TypeError,
        ["device", "weights", "causal", "module.to"],
    ),
    Case(
        "head-weights-dtype-option",
        lambda: from_head_weights(
            *[_weights((4, 3), (4, 3))] * 3, torch.zeros(8, 3), layout="in_out", dtype=torch.float64
        ),
        TypeError,
        ["dtype", "weights", "module.to"],
    ),
    Case(
        "fused-qkv-d_in-option",
        lambda: from_fused_qkv(*_weights((24, 8), (8, 8)), num_heads=2, fused_layout="stacked", d_in=8),
        TypeError,
        ["d_in", "weights"],
    ),
    Case(
        "torch-mha-num_heads-option",
        lambda: from_torch_mha(torch.nn.MultiheadAttention(8, 2), num_heads=4),
        TypeError,
        ["num_heads", "weights"],
    ),
    Case(
        "head-weights-k-head-wrong-shape",
        lambda: from_head_weights(
            _weights((3, 4), (3, 4)),
            _weights((3, 4), (3, 5)),
            _weights((3, 4), (3, 4)),
            torch.zeros(8, 3),
            layout="in_out",
        ),
        ValueError,
        ["k_heads[1]", "q_heads[0]", "(3, 4)", "(d_in, d_head)", "'in_out'", "(3, 5)"],
    ),
    Case(
        "head-weights-integer-v-head",
        lambda: from_head_weights(
            _weights((4, 3)),
            _weights((4, 3)),
            [torch.zeros(4, 3, dtype=torch.int64)],
            torch.zeros(3, 4),
            layout="out_in",
        ),
        TypeError,
        ["v_heads[0]", "floating-point", "torch.int64"],
    ),
    Case(
        "head-weights-in_out-wrong-o",
        lambda: from_head_weights(*[_weights((3, 4), (3, 4))] * 3, torch.zeros(6, 3), layout="in_out"),
        ValueError,
        ["o_weight", "(8, d_out)", "'in_out'", "(6, 3)"],
    ),
    # ------------------------------------------------ KV cache
    Case(
        "kv-cache-dtype-changes",
        lambda: _append_twice(torch.zeros(1, 2, 1, 4), torch.zeros(1, 2, 1, 4, dtype=torch.float64)),
        TypeError,
        ["keys have dtype torch.float64", "the cache holds torch.float32"],
    ),
    Case(
        "kv-cache-device-changes",
        lambda: _append_twice(torch.zeros(1, 2, 1, 4), torch.zeros(1, 2, 1, 4, device="meta")),
        ValueError,
        ["keys are on device meta", "the cache is on cpu"],
    ),
    Case(
        "kv-cache-values-d_v-changes",
        lambda: _append_twice(torch.zeros(1, 2, 1, 4), torch.zeros(1, 2, 1, 4), new_d_v=3),
        ValueError,
        ["values", "d_v = 4", "(1, 2, 1, 3)"],
    ),
    Case(
        "kv-cache-values-one-row-per-key",
        lambda: KVCache().append(torch.zeros(2, 3, 4), torch.zeros(2, 2, 4)),
        ValueError,
        ["values", "keys.shape[:-1] = (2, 3)", "(2, 2, 4)"],
    ),
    Case(
        "module-cache-other-batch",
        lambda: _decode_other_batch(),
        ValueError,
        ["x has batch shape (3,)", "the cache holds batch shape (2,)"],
    ),
]


def _decode_past_cache():
    module = _mhsa(rope=True, max_seq_len=4, causal=True)
    cache = KVCache()
    module(torch.zeros(1, 4, 8), cache=cache)
    return module(torch.zeros(1, 1, 8), cache=cache)  # position 4 does not exist


def _append_mismatched_heads():
    cache = KVCache()
    cache.append(torch.zeros(1, 2, 1, 4), torch.zeros(1, 2, 1, 4))
    return cache.append(torch.zeros(1, 3, 1, 4), torch.zeros(1, 3, 1, 4))


def _append_twice(first, second, new_d_v=None):
    cache = KVCache()
    cache.append(first, first)
    values = second if new_d_v is None else second[..., :new_d_v]
    return cache.append(second, values)


def _decode_other_batch():
    module = _mhsa(causal=True)
    cache = KVCache()
    module(torch.zeros(2, 4, 8), cache=cache)
    return module(torch.zeros(3, 1, 8), cache=cache)


def test_the_table_is_big_enough_and_ids_are_unique():
    assert len(CASES) >= 16
    assert len({case.id for case in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_bad_input_is_rejected_with_a_clear_message(case):
    with pytest.raises((ValueError, TypeError)) as info:
        case.call()
    assert type(info.value) is case.error, (
        f"expected {case.error.__name__}, got {type(info.value).__name__}: {info.value}"
    )
    message = str(info.value)
    missing = [fragment for fragment in case.fragments if fragment not in message]
    assert not missing, f"message {message!r} lacks {missing}"
