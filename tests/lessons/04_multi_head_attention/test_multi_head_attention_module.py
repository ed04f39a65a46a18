"""The learner's own module of notebook 04, MyMultiHeadAttention, its checker and the parameter-count
prediction.

The learner's modules here are written out as a learner would write them, with one switch per slip;
``MIDDLE_WRONG`` lists the wrong ones with the misconception each checker must name.
"""

from __future__ import annotations

import math

import pytest
import torch
from learner_modules import merge, multi_head_module, split, variant_module
from test_wrong_answers import Wrong
from torch import nn

import mhsa_helpers as mh
from mhsa_helpers.lessons.multi_head_attention import check_my_multi_head_attention, check_parameter_prediction
from mhsa_helpers.lessons.multi_head_attention.exercises import MHA_MODULE_MISTAKES
from mhsa_helpers.lessons.multi_head_attention.learner import attention_variant, package_parameters

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
]


@pytest.mark.parametrize("wrong", MIDDLE_WRONG, ids=lambda w: f"{w.checker.__name__}: {w.name}")
def test_the_learners_slips_are_rejected_and_named(wrong):
    result = wrong.checker(wrong.function, verbose=False)
    assert result.status not in ("correct", "not_attempted"), result.message
    if wrong.named is not None:
        assert result.misconception == wrong.named, result.message
    for words in wrong.says:
        assert words in result.message, result.message


def test_the_right_module_and_prediction_are_accepted():
    assert check_my_multi_head_attention(multi_head_module(), verbose=False).correct
    assert check_parameter_prediction(3 * (32 * 64 + 64) + (64 * 64 + 64), verbose=False).correct


@pytest.mark.parametrize("checker", [check_parameter_prediction])
def test_an_empty_prediction_is_not_attempted(checker):
    assert checker(None, verbose=False).status == "not_attempted"
    assert "replace None" in checker(None, verbose=False).message


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


def test_the_variant_module_without_a_mistake_is_right():
    assert check_my_multi_head_attention(variant_module(False), verbose=False).correct


@pytest.mark.parametrize(("name", "switches"), [(m[0], m[1]) for m in MHA_MODULE_MISTAKES])
def test_every_multi_head_module_mistake_is_named_as_itself(name, switches):
    result = check_my_multi_head_attention(variant_module(False, **switches), verbose=False)
    assert result.misconception == name, result.message


def test_positions_mixed_in_an_unlisted_way_are_named_by_their_symptom():
    class QueriesViewedOnly(multi_head_module()):
        def forward(self, x):
            q = split(self.w_q(x), self.num_heads, view_only=True)  # only the queries mixed
            k, v = split(self.w_k(x), self.num_heads), split(self.w_v(x), self.num_heads)
            weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
            return self.w_o(merge(weights @ v))

    result = check_my_multi_head_attention(QueriesViewedOnly, verbose=False)
    assert result.misconception == "positions mixed: reversing the tokens does not reverse the outputs", result.message


def test_the_module_checker_gives_back_the_number_of_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        check_my_multi_head_attention(multi_head_module(), verbose=False)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
