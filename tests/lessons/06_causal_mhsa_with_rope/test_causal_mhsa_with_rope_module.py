"""The learner's own module of notebook 06, MyCausalSelfAttention, its checker, the mask prediction and
``copy_package_weights``.

The learner's modules here are written out as a learner would write them, with one switch per slip;
``MIDDLE_WRONG`` lists the wrong ones with the misconception each checker must name.
"""

from __future__ import annotations

import pytest
import torch
from checker_table import selectable
from learner_modules import causal_module, multi_head_module
from test_wrong_answers import Wrong
from torch import nn

import mhsa_helpers as mh
from mhsa_helpers.lessons.causal_mhsa_with_rope import check_mask_prediction, check_my_causal_self_attention
from mhsa_helpers.teaching.modules import copy_package_weights

MIDDLE_WRONG = [
    # ----------------------------------------------------------- 06 the learner's causal module
    Wrong(
        check_my_causal_self_attention,
        "positions restart at 0",
        causal_module(positions="zero"),
        named="positions not offset by the cache",
    ),
    Wrong(
        check_my_causal_self_attention,
        "mask not offset",
        causal_module(mask_top_left=True),
        named="mask not offset by the cache",
    ),
    Wrong(check_my_causal_self_attention, "no mask", causal_module(no_mask=True), named="no causal mask"),
    *(
        Wrong(
            check_my_causal_self_attention,
            f"a finite fill {fill:g}",
            causal_module(fill=fill),
            named="blocked scores pushed down by a finite number instead of -inf",
        )
        for fill in (-1e9, -1e4)
    ),
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
    Wrong(
        check_my_causal_self_attention, "a flipped RoPE sign", causal_module(sign=-1), named="RoPE turns the wrong way"
    ),
    Wrong(
        check_my_causal_self_attention,
        "frequencies base^(-i/d)",
        causal_module(exponent="i/d"),
        named="RoPE frequencies base^(-i/d_head) instead of base^(-2i/d_head)",
    ),
    Wrong(
        check_my_causal_self_attention,
        "exponent by integer division",
        causal_module(exponent="2i//d"),
        named="RoPE exponent computed with integer division",
    ),
    Wrong(
        check_my_causal_self_attention,
        "cached keys stored unrotated",
        causal_module(cache_unrotated=True),
        named="cached keys left unrotated",
    ),
    Wrong(
        check_my_causal_self_attention,
        "cached keys rotated again",
        causal_module(cache_rotated_twice=True),
        named="cached keys rotated twice",
    ),
    Wrong(
        check_my_causal_self_attention,
        "a fast path without the mask",
        causal_module(fast_path_without_mask=True),
        named="need_weights=True takes another path",
    ),
    Wrong(
        check_my_causal_self_attention,
        "always (out, weights)",
        causal_module(always_weights=True),
        named="returns (output, weights) without need_weights=True",
    ),
    Wrong(
        check_my_causal_self_attention,
        "positions kept on self",
        causal_module(counts_calls=True),
        named="something kept from one call to the next",
    ),
    Wrong(
        check_my_causal_self_attention,
        "the sequences of a batch mixed",
        causal_module(batch_mixed=True),
        named="the sequences of a batch are mixed",
    ),
    Wrong(check_my_causal_self_attention, "appends unrotated keys", causal_module(append_first=True)),
    Wrong(check_my_causal_self_attention, "a (16, 16) mask buffer", causal_module(buffer_16=True), says=("line",)),
    Wrong(
        check_my_causal_self_attention,
        "need_weights ignored",
        causal_module(weights_dropped=True),
        named="need_weights=True ignored",
    ),
    Wrong(check_mask_prediction, "a plain triangle", lambda: 6, named="mask aligned to the first key"),
    Wrong(check_mask_prediction, "no mask", lambda: 21, named="no mask among the new tokens"),
    Wrong(check_mask_prediction, "the whole square", lambda: 28, named="the whole (7, 7) triangle"),
    Wrong(check_mask_prediction, "one too few", lambda: 17),
]


@pytest.mark.parametrize("wrong", MIDDLE_WRONG, ids=lambda w: selectable(f"{w.checker.__name__}: {w.name}"))
def test_the_learners_slips_are_rejected_and_named(wrong):
    result = wrong.checker(wrong.function, verbose=False)
    assert result.status not in ("correct", "not_attempted"), result.message
    if wrong.named is not None:
        assert result.misconception == wrong.named, result.message
    for words in wrong.says:
        assert words in (result.diagnosis or result.message), result.diagnosis or result.message


def test_the_right_module_and_prediction_are_accepted():
    result = check_my_causal_self_attention(causal_module(), verbose=False)
    assert result.correct and "gradients reach every weight" in result.message
    assert check_mask_prediction(18, verbose=False).correct


@pytest.mark.parametrize("checker", [check_mask_prediction])
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


def test_a_module_that_writes_into_its_input_is_named():
    class InPlace(causal_module()):
        def forward(self, x, cache=None, need_weights=False):
            out = super().forward(x, cache, need_weights)
            x.mul_(0)
            return out

    result = check_my_causal_self_attention(InPlace, verbose=False)
    assert result.misconception == "changed an argument in place" and "`x`" in result.message


def test_copied_weights_give_the_package_output_full_and_cached():
    torch.manual_seed(1)
    theirs = mh.MultiHeadSelfAttention(16, 4, d_in=8, causal=True, rope=mh.RotaryEmbedding(4, base=500.0))
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
    theirs = mh.MultiHeadSelfAttention(8, 2, causal=True, rope=mh.RotaryEmbedding(4), qkv_bias=False, out_bias=False)
    mine = copy_package_weights(causal_module()(8, 2), theirs)
    assert all(float(getattr(mine, name).bias.detach().abs().sum()) == 0 for name in ("w_q", "w_k", "w_v", "w_o"))
    x = torch.randn(1, 5, 8)
    torch.testing.assert_close(mine(x), theirs(x))


@pytest.mark.parametrize(
    ("theirs", "mine", "words"),
    [
        (
            lambda: mh.MultiHeadSelfAttention(8, 4, num_kv_heads=2, rope=mh.RotaryEmbedding(2)),
            lambda: causal_module()(8, 4),
            "theirs uses grouped-query attention (num_heads=4, num_kv_heads=2): its W_K and W_V have fewer rows than "
            "MyCausalSelfAttention's, one key/value head per query head. Notebook 11 loads such a model.",
        ),
        (
            lambda: mh.MultiHeadSelfAttention(8, 2),
            lambda: causal_module()(8, 2),
            "theirs has no RoPE (rope=None); MyCausalSelfAttention rotates q and k: "
            "build it with rope=mh.RotaryEmbedding(d_head)",
        ),
        (
            lambda: mh.MultiHeadSelfAttention(8, 2, rope=mh.RotaryEmbedding(4, convention="half_split")),
            lambda: causal_module()(8, 2),
            "theirs rotates 'half_split' pairs; MyCausalSelfAttention rotates interleaved pairs (2i, 2i+1): convert "
            "the rows of W_Q and W_K with mh.permute_rope_weight first",
        ),
        (
            lambda: mh.MultiHeadSelfAttention(8, 2, rope=mh.RotaryEmbedding(4)),
            lambda: causal_module()(8, 4),
            "mine.num_heads is 4, theirs.num_heads is 2",
        ),
        (
            lambda: mh.MultiHeadSelfAttention(8, 2, rope=mh.RotaryEmbedding(4, base=100.0)),
            lambda: causal_module()(8, 2),
            "mine.rope_base is 10000.0, theirs rotates with base 100.0",
        ),
        (
            lambda: mh.MultiHeadSelfAttention(8, 2, rope=mh.RotaryEmbedding(4)),
            lambda: causal_module()(8, 2, d_in=4),
            "mine.w_q.weight has shape (8, 4), the package's has (8, 8) (nn.Linear(in_features=8, out_features=8))",
        ),
        (
            lambda: mh.MultiHeadSelfAttention(8, 2, rope=mh.RotaryEmbedding(4)),
            lambda: causal_module()(8, 2, bias=False),
            "mine.w_q has no bias but the package's module has one: build it with bias=True",
        ),
    ],
    ids=["grouped", "no-rope", "half-split", "heads", "base", "shape", "bias"],  # no "/": mutmut selects by id
)
def test_copy_package_weights_refuses_what_it_cannot_copy(theirs, mine, words):
    target = mine()
    before = [p.clone() for p in target.parameters()]
    with pytest.raises(ValueError) as raised:
        copy_package_weights(target, theirs())
    assert str(raised.value) == words
    assert all(torch.equal(a, b) for a, b in zip(before, target.parameters(), strict=True))


def test_copy_package_weights_names_the_wrong_argument_types():
    with pytest.raises(TypeError) as raised:
        copy_package_weights(causal_module()(8, 2), nn.MultiheadAttention(8, 2))
    assert str(raised.value) == "theirs must be a mhsa_helpers.MultiHeadSelfAttention, got MultiheadAttention"


def test_copy_package_weights_takes_the_packages_heads_and_base_for_a_module_that_does_not_keep_them():
    class Forgetful(causal_module()):
        def __init__(self, d_model, num_heads, **kwargs):
            super().__init__(d_model, num_heads, **kwargs)
            del self.num_heads, self.rope_base  # the weights' shapes are all copy_package_weights reads then

    theirs = mh.MultiHeadSelfAttention(8, 2, causal=True, rope=mh.RotaryEmbedding(4, base=100.0))
    mine = copy_package_weights(Forgetful(8, 2), theirs)
    torch.testing.assert_close(mine.w_q.weight, theirs.q_weight)


def test_a_forward_without_the_cache_is_told_the_signature():
    result = check_my_causal_self_attention(
        lambda d_model, num_heads, rope_base=10000.0, **kwargs: multi_head_module()(d_model, num_heads, **kwargs),
        verbose=False,
    )
    assert result.status == "incorrect"
    assert "forward(self, x, cache=None, need_weights=False)" in result.message


def test_a_module_that_needs_more_of_the_cache_than_the_contract_is_told_at_its_line():
    class ReadsKeys(causal_module()):
        def forward(self, x, cache=None, need_weights=False):
            if cache is not None and cache.length:
                assert cache.keys is not None  # the package's KVCache has .keys; the contract does not
            return super().forward(x, cache, need_weights)

    result = check_my_causal_self_attention(ReadsKeys, verbose=False)
    assert result.status == "error" and "CacheWithLengthAndAppend" in result.message  # the cache's own type
    assert "`assert cache.keys is not None" in result.message
