"""The learner's own modules of notebooks 04-06: MyMultiHeadAttention, my_apply_rope and
MyCausalSelfAttention, their checkers, the prediction exercises and ``copy_package_weights``.

The learners' modules here are written out as a learner would write them, with one switch per slip;
``MIDDLE_WRONG`` (also fed to the wrong-answer catalogue of ``test_wrong_answers``) lists the wrong ones
with the misconception each checker must name.
"""

from __future__ import annotations

import math

import pytest
import torch
from test_wrong_answers import Wrong
from torch import nn

import mhsa_helpers as mh
from mhsa_helpers.lessons.causal_mhsa_with_rope import (
    check_mask_prediction,
    check_my_causal_self_attention,
    copy_package_weights,
)
from mhsa_helpers.lessons.causal_mhsa_with_rope.exercises import CAUSAL_MODULE_MISTAKES
from mhsa_helpers.lessons.multi_head_attention import check_my_multi_head_attention, check_parameter_prediction
from mhsa_helpers.lessons.multi_head_attention.exercises import MHA_MODULE_MISTAKES
from mhsa_helpers.lessons.multi_head_attention.learner import attention_variant, package_parameters
from mhsa_helpers.lessons.rotary_position_embeddings import check_apply_rope, check_score_prediction

# ------------------------------------------------------------------ the learner's pieces


def split(x, num_heads, *, view_only=False):
    batch, seq, d_model = x.shape
    if view_only:
        return x.reshape(batch, num_heads, seq, d_model // num_heads)
    return x.view(batch, seq, num_heads, d_model // num_heads).transpose(1, 2)


def merge(x, *, reshape_only=False):
    batch, heads, seq, d_head = x.shape
    if reshape_only:
        return x.reshape(batch, seq, heads * d_head)
    return x.transpose(1, 2).reshape(batch, seq, heads * d_head)


def rotate(x, positions, base=10000.0, *, half_split=False):
    d = x.shape[-1]
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = positions.to(torch.float64)[:, None] * theta
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    if half_split:
        a, b = x[..., : d // 2], x[..., d // 2 :]
        return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)


def multi_head_module(**slip):
    """A MyMultiHeadAttention(d_in, d_model, num_heads) with at most one slip."""

    class MyMultiHeadAttention(nn.Module):
        def __init__(self, d_in, d_model, num_heads):
            super().__init__()
            bias = not slip.get("no_bias", False)
            self.w_q, self.w_k, self.w_v = (nn.Linear(d_in, d_model, bias=bias) for _ in range(3))
            self.w_o = nn.Linear(d_model, d_model, bias=bias)
            self.num_heads = num_heads

        def forward(self, x):
            view_only = slip.get("view_only", False)
            q, k, v = (split(w(x), self.num_heads, view_only=view_only) for w in (self.w_q, self.w_k, self.w_v))
            if slip.get("detach_v"):
                v = v.detach()
            d = x.shape[-1] if slip.get("scale_d_in") else q.shape[-1]
            weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d), dim=slip.get("softmax_dim", -1))
            merged = merge(weights @ v, reshape_only=slip.get("reshape_only", False) or view_only)
            return merged if slip.get("no_w_o") else self.w_o(merged)

    return MyMultiHeadAttention


def causal_module(**slip):
    """A MyCausalSelfAttention(d_model, num_heads, *, d_in=None, bias=True, rope_base=10000.0) with at most
    one slip."""

    class MyCausalSelfAttention(nn.Module):
        def __init__(self, d_model, num_heads, *, d_in=None, bias=True, rope_base=10000.0):
            super().__init__()
            d_in = d_model if d_in is None else d_in
            bias = True if slip.get("bias_ignored") else bias
            self.w_q, self.w_k, self.w_v = (nn.Linear(d_in, d_model, bias=bias) for _ in range(3))
            self.w_o = nn.Linear(d_model, d_model, bias=bias)
            self.num_heads, self.d_head = num_heads, d_model // num_heads
            self.rope_base = rope_base

        def forward(self, x, cache=None, need_weights=False):
            seq, base = x.shape[-2], 10000.0 if slip.get("base_ignored") else self.rope_base
            q, k, v = (split(w(x), self.num_heads) for w in (self.w_q, self.w_k, self.w_v))
            if slip.get("append_first") and cache is not None:
                k, v = cache.append(k, v)  # before reading past: the new keys go in unrotated
            past = 0 if cache is None else cache.length
            if slip.get("append_first") and cache is not None:
                past -= seq
            start = 0 if slip.get("positions_from_zero") else past
            positions = start + torch.arange(seq)
            half_split = slip.get("half_split", False)
            q = q if slip.get("keys_only") else rotate(q, positions, base, half_split=half_split)
            k = rotate(k, positions, base, half_split=half_split)
            if slip.get("rope_v"):
                v = rotate(v, positions, base)
            if cache is not None and not slip.get("append_first"):
                k, v = cache.append(k, v)
            total = k.shape[-2]
            scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
            if slip.get("buffer_16"):
                allowed = torch.ones(16, 16, dtype=torch.bool).tril()[past : past + seq, :total]
            else:
                allowed = torch.ones(seq, total, dtype=torch.bool).tril(
                    diagonal=0 if slip.get("mask_top_left") else past
                )
            if not slip.get("no_mask"):
                scores = scores.masked_fill(~allowed, float("-inf"))
            weights = torch.softmax(scores, dim=-1)
            out = self.w_o(merge(weights @ v))
            return (out, weights) if need_weights and not slip.get("weights_dropped") else out

    return MyCausalSelfAttention


def my_apply_rope(x, positions, base=10000.0):
    return rotate(x, positions, base)


MIDDLE_WRONG = [
    # ----------------------------------------------------------- 04 the learner's module
    Wrong(
        check_my_multi_head_attention,
        "merge without transpose",
        multi_head_module(reshape_only=True),
        named="merge in the wrong order: no transpose back",
    ),
    Wrong(
        check_my_multi_head_attention,
        "split with a view only",
        multi_head_module(view_only=True),
        named="view without transpose",
    ),
    Wrong(check_my_multi_head_attention, "no w_o", multi_head_module(no_w_o=True), named="forgot W_O"),
    Wrong(
        check_my_multi_head_attention,
        "softmax over heads",
        multi_head_module(softmax_dim=-3),
        named="softmax over the heads axis",
    ),
    Wrong(
        check_my_multi_head_attention,
        "values detached",
        multi_head_module(detach_v=True),
        named="gradients do not reach every weight",
        says=("self.w_v.weight",),
    ),
    Wrong(
        check_my_multi_head_attention,
        "linear layers without bias",
        multi_head_module(no_bias=True),
        says=("has no bias",),
    ),
    Wrong(check_my_multi_head_attention, "scaled by sqrt(d_in)", multi_head_module(scale_d_in=True)),
    # ----------------------------------------------------------- 06 the learner's causal module
    Wrong(
        check_my_causal_self_attention,
        "positions restart at 0",
        causal_module(positions_from_zero=True),
        named="positions not offset by the cache",
    ),
    Wrong(
        check_my_causal_self_attention,
        "mask not offset",
        causal_module(mask_top_left=True),
        named="mask not offset by the cache",
    ),
    Wrong(check_my_causal_self_attention, "no mask", causal_module(no_mask=True), named="no causal mask"),
    Wrong(check_my_causal_self_attention, "RoPE on v", causal_module(rope_v=True), named="RoPE applied to V"),
    Wrong(
        check_my_causal_self_attention,
        "half-split pairs",
        causal_module(half_split=True),
        named="rotating pairs half-split instead of interleaved",
    ),
    Wrong(check_my_causal_self_attention, "keys only", causal_module(keys_only=True), named="RoPE on the keys only"),
    Wrong(
        check_my_causal_self_attention, "rope_base ignored", causal_module(base_ignored=True), named="rope_base ignored"
    ),
    Wrong(
        check_my_causal_self_attention,
        "bias=False ignored",
        causal_module(bias_ignored=True),
        named="bias=False ignored",
    ),
    Wrong(check_my_causal_self_attention, "appends unrotated keys", causal_module(append_first=True)),
    Wrong(check_my_causal_self_attention, "a (16, 16) mask buffer", causal_module(buffer_16=True), says=("line",)),
    Wrong(
        check_my_causal_self_attention,
        "need_weights ignored",
        causal_module(weights_dropped=True),
        says=("attention weights",),
    ),
    # ----------------------------------------------------------- predictions
    Wrong(
        check_parameter_prediction,
        "every layer d_model x d_model",
        lambda: 4 * 64 * 64 + 4 * 64,
        named="every projection counted as d_model x d_model",
    ),
    Wrong(check_parameter_prediction, "no biases", lambda: 3 * 32 * 64 + 64 * 64, named="biases forgotten"),
    Wrong(
        check_parameter_prediction,
        "times the heads",
        lambda: 4 * (3 * (32 * 64 + 64) + 64 * 64 + 64),
        named="the count multiplied by the number of heads",
    ),
    Wrong(check_score_prediction, "the score moves", lambda: 0.0, named="moving the tokens changes the score"),
    Wrong(check_mask_prediction, "a plain triangle", lambda: 6, named="mask aligned to the first key"),
    Wrong(check_mask_prediction, "no mask", lambda: 21, named="no mask among the new tokens"),
    Wrong(check_mask_prediction, "the whole square", lambda: 28, named="the whole (7, 7) triangle"),
]


@pytest.mark.parametrize("wrong", MIDDLE_WRONG, ids=lambda w: f"{w.checker.__name__}: {w.name}")
def test_the_learners_slips_are_rejected_and_named(wrong):
    result = wrong.checker(wrong.function, verbose=False)
    assert result.status not in ("correct", "not_attempted"), result.message
    if wrong.named is not None:
        assert result.misconception == wrong.named, result.message
    for words in wrong.says:
        assert words in result.message, result.message


# ------------------------------------------------------------------ right answers, and the forms around them


def test_the_right_modules_and_predictions_are_accepted():
    assert check_my_multi_head_attention(multi_head_module(), verbose=False).correct
    result = check_my_causal_self_attention(causal_module(), verbose=False)
    assert result.correct and "gradients reach every weight" in result.message
    assert check_parameter_prediction(3 * (32 * 64 + 64) + (64 * 64 + 64), verbose=False).correct
    assert check_mask_prediction(18, verbose=False).correct
    assert check_score_prediction(1.25, verbose=False).correct


@pytest.mark.parametrize("checker", [check_parameter_prediction, check_mask_prediction, check_score_prediction])
def test_an_empty_prediction_is_not_attempted(checker):
    assert checker(None, verbose=False).status == "not_attempted"
    assert "replace None" in checker(None, verbose=False).message


def test_a_module_stub_is_not_attempted_and_an_instance_is_refused():
    class Stub(nn.Module):
        def __init__(self, d_model, num_heads, *, d_in=None, bias=True, rope_base=10000.0):
            super().__init__()
            raise NotImplementedError

    assert check_my_causal_self_attention(Stub, verbose=False).status == "not_attempted"
    made = causal_module()(8, 2)
    result = check_my_causal_self_attention(made, verbose=False)
    assert result.status == "error" and "pass your nn.Module class itself" in result.message


def test_an_error_in_forward_points_at_the_learners_line():
    class Typo(causal_module()):
        def forward(self, x, cache=None, need_weights=False):
            out = super().forward(x, cache, need_weights)
            return out.tranpose(1, 2)  # a typo

    result = check_my_causal_self_attention(Typo, verbose=False)
    assert result.status == "error" and "`return out.tranpose(1, 2)  # a typo`" in result.message


def test_an_error_in_the_constructor_points_at_the_learners_line():
    class Broken(nn.Module):
        def __init__(self, d_in, d_model, num_heads):
            super().__init__()
            self.w_q = nn.Linear(d_in, d_model, bias=maybe)  # noqa: F821  # the learner's NameError

    result = check_my_multi_head_attention(Broken, verbose=False)
    assert result.status == "error" and "NameError" in result.message and "bias=maybe" in result.message


def test_a_module_without_the_four_named_layers_is_told_their_names():
    class Fused(nn.Module):
        def __init__(self, d_in, d_model, num_heads):
            super().__init__()
            self.qkv = nn.Linear(d_in, 3 * d_model)

        def forward(self, x):
            return x

    result = check_my_multi_head_attention(Fused, verbose=False)
    assert not result.correct and "w_q, w_k, w_v, w_o" in result.message


def test_a_module_that_writes_into_its_input_is_named():
    class InPlace(causal_module()):
        def forward(self, x, cache=None, need_weights=False):
            out = super().forward(x, cache, need_weights)
            x.mul_(0)
            return out

    result = check_my_causal_self_attention(InPlace, verbose=False)
    assert result.misconception == "changed an argument in place" and "`x`" in result.message


def test_apply_rope_must_default_to_base_10000():
    def without_default(x, positions, base):
        return rotate(x, positions, base)

    def other_default(x, positions, base=500.0):
        return rotate(x, positions, base)

    assert check_apply_rope(my_apply_rope, verbose=False).correct
    for answer in (without_default, other_default):
        result = check_apply_rope(answer, verbose=False)
        assert not result.correct and "base=10000.0" in result.message


# ------------------------------------------------------------------ the reproduced mistakes are faithful


def test_attention_variant_without_a_mistake_is_the_package_module():
    torch.manual_seed(0)
    theirs = mh.MultiHeadSelfAttention(12, 3, d_in=6, causal=True, rope=True, rope_base=100.0)
    x = torch.randn(2, 7, 6)
    params = package_parameters(theirs)
    out, weights, _, _ = attention_variant(params, x, 3, causal=True, rope_base=100.0)
    expected, expected_weights = theirs(x, need_weights=True)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(weights, expected_weights)
    cache = mh.KVCache()
    theirs(x[:, :4], cache=cache)
    _, _, k, v = attention_variant(params, x[:, :4], 3, causal=True, rope_base=100.0)
    new, _, _, _ = attention_variant(params, x[:, 4:], 3, past_kv=(k, v), causal=True, rope_base=100.0)
    torch.testing.assert_close(new, theirs(x[:, 4:], cache=cache))


# ------------------------------------------------------------------ copy_package_weights


def test_copied_weights_give_the_package_output_full_and_cached():
    torch.manual_seed(1)
    theirs = mh.MultiHeadSelfAttention(16, 4, d_in=8, causal=True, rope=True, rope_base=500.0)
    mine = causal_module()(16, 4, d_in=8, rope_base=500.0)
    assert copy_package_weights(mine, theirs) is mine
    torch.testing.assert_close(mine.w_k.weight, theirs.k_weight)
    torch.testing.assert_close(mine.w_v.bias, theirs.qkv_proj.bias[32:])
    x = torch.randn(2, 9, 8)
    torch.testing.assert_close(mine(x), theirs(x))
    mine_cache, their_cache = mh.KVCache(), mh.KVCache()
    mine(x[:, :5], cache=mine_cache)
    theirs(x[:, :5], cache=their_cache)
    torch.testing.assert_close(mine(x[:, 5:], cache=mine_cache), theirs(x[:, 5:], cache=their_cache))


def test_a_package_module_without_biases_zeroes_the_learners():
    theirs = mh.MultiHeadSelfAttention(8, 2, causal=True, rope=True, qkv_bias=False, out_bias=False)
    mine = copy_package_weights(causal_module()(8, 2), theirs)
    assert all(float(getattr(mine, name).bias.detach().abs().sum()) == 0 for name in ("w_q", "w_k", "w_v", "w_o"))
    x = torch.randn(1, 5, 8)
    torch.testing.assert_close(mine(x), theirs(x))


@pytest.mark.parametrize(
    ("theirs", "mine", "words"),
    [
        (
            lambda: mh.MultiHeadSelfAttention(8, 4, num_kv_heads=2, rope=True),
            lambda: causal_module()(8, 4),
            "grouped-query attention",
        ),
        (lambda: mh.MultiHeadSelfAttention(8, 2, rope=False), lambda: causal_module()(8, 2), "no RoPE"),
        (
            lambda: mh.MultiHeadSelfAttention(8, 2, rope=True, rope_convention="half_split"),
            lambda: causal_module()(8, 2),
            "'half_split' pairs",
        ),
        (lambda: mh.MultiHeadSelfAttention(8, 2, rope=True), lambda: causal_module()(8, 4), "num_heads is 4"),
        (
            lambda: mh.MultiHeadSelfAttention(8, 2, rope=True, rope_base=100.0),
            lambda: causal_module()(8, 2),
            "rope_base",
        ),
        (
            lambda: mh.MultiHeadSelfAttention(8, 2, rope=True),
            lambda: causal_module()(8, 2, d_in=4),
            "mine.w_q.weight has shape (8, 4)",
        ),
        (lambda: mh.MultiHeadSelfAttention(8, 2, rope=True), lambda: causal_module()(8, 2, bias=False), "has no bias"),
    ],
)
def test_copy_package_weights_refuses_what_it_cannot_copy(theirs, mine, words):
    target = mine()
    before = [p.clone() for p in target.parameters()]
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
        copy_package_weights(target, theirs())
    assert all(torch.equal(a, b) for a, b in zip(before, target.parameters(), strict=True))


def test_copy_package_weights_names_the_wrong_argument_types():
    with pytest.raises(TypeError, match=r"theirs must be a mhsa_helpers\.MultiHeadSelfAttention"):
        copy_package_weights(causal_module()(8, 2), nn.MultiheadAttention(8, 2))


# ------------------------------------------------------------------ every known module mistake is told apart


def variant_module(decoder, **switches):
    """A module that computes attention_variant with ``switches`` from its own layers, with any cache
    of the contract (``length`` and ``append``)."""

    class Variant(nn.Module):
        def __init__(self, *args, d_in=None, bias=True, rope_base=10000.0):
            super().__init__()
            d_in, d_model, num_heads = args if len(args) == 3 else (d_in or args[0], *args)
            self.w_q, self.w_k, self.w_v = (nn.Linear(d_in, d_model, bias=bias) for _ in range(3))
            self.w_o = nn.Linear(d_model, d_model, bias=bias)
            self.num_heads, self.rope_base = num_heads, rope_base

        def forward(self, x, cache=None, need_weights=False):
            params = {}
            for name in ("q", "k", "v", "o"):
                params[f"w_{name}"], params[f"b_{name}"] = (
                    getattr(self, f"w_{name}").weight,
                    getattr(self, f"w_{name}").bias,
                )
            past = None
            if cache is not None and cache.length:  # all keys and values so far, through the contract's append
                empty = torch.zeros(x.shape[0], self.num_heads, 0, self.w_q.out_features // self.num_heads)
                past = cache.append(empty, empty)
            options = {"causal": True, "rope_base": self.rope_base} if decoder else {}
            out, weights, k, v = attention_variant(params, x, self.num_heads, past_kv=past, **{**options, **switches})
            if cache is not None:
                start = cache.length
                cache.append(k[..., start:, :], v[..., start:, :])
            return (out, weights) if need_weights else out

    return Variant


def test_the_variant_module_without_a_mistake_is_right():
    assert check_my_multi_head_attention(variant_module(False), verbose=False).correct
    assert check_my_causal_self_attention(variant_module(True), verbose=False).correct


@pytest.mark.parametrize(("name", "switches"), [(m[0], m[1]) for m in MHA_MODULE_MISTAKES])
def test_every_multi_head_module_mistake_is_named_as_itself(name, switches):
    result = check_my_multi_head_attention(variant_module(False, **switches), verbose=False)
    assert result.misconception == name, result.message


@pytest.mark.parametrize(("name", "switches"), [(m[0], m[1]) for m in CAUSAL_MODULE_MISTAKES])
def test_every_causal_module_mistake_is_named_as_itself(name, switches):
    result = check_my_causal_self_attention(variant_module(True, **switches), verbose=False)
    assert result.misconception == name, result.message


def test_a_forward_without_the_cache_is_told_the_signature():
    result = check_my_causal_self_attention(
        lambda d_model, num_heads, **kwargs: multi_head_module()(d_model, d_model, num_heads), verbose=False
    )
    assert result.status == "incorrect"
    assert "forward(self, x, cache=None, need_weights=False)" in result.message


def test_positions_mixed_in_an_unlisted_way_are_named_by_their_symptom():
    class QueriesViewedOnly(multi_head_module()):
        def forward(self, x):
            q = split(self.w_q(x), self.num_heads, view_only=True)  # only the queries mixed
            k, v = split(self.w_k(x), self.num_heads), split(self.w_v(x), self.num_heads)
            weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
            return self.w_o(merge(weights @ v))

    result = check_my_multi_head_attention(QueriesViewedOnly, verbose=False)
    assert result.misconception == "positions mixed: reversing the tokens does not reverse the outputs", result.message


def test_a_leak_from_the_future_in_an_unlisted_way_is_named_by_its_symptom():
    class LastTokenSeesAll(causal_module()):
        def forward(self, x, cache=None, need_weights=False):
            out = super().forward(x, cache, need_weights)
            if cache is None and not need_weights:
                out = out + 0.1 * x[:, -1:, :1].sum()  # every output peeks at the last token
            return out

    result = check_my_causal_self_attention(LastTokenSeesAll, verbose=False)
    assert result.misconception == "not causal: changing a later token changes an earlier output", result.message


def test_a_module_that_needs_more_of_the_cache_than_the_contract_is_told_at_its_line():
    class ReadsKeys(causal_module()):
        def forward(self, x, cache=None, need_weights=False):
            if cache is not None and cache.length:
                assert cache.keys is not None  # the package's KVCache has .keys; the contract does not
            return super().forward(x, cache, need_weights)

    result = check_my_causal_self_attention(ReadsKeys, verbose=False)
    assert result.status == "error" and "CacheWithLengthAndAppend" in result.message
    assert "`assert cache.keys is not None" in result.message


def test_the_module_checker_gives_back_the_number_of_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        check_my_multi_head_attention(multi_head_module(), verbose=False)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
