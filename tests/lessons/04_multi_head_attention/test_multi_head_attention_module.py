"""The learner's own module of notebook 04, MyMultiHeadAttention, its checker and the parameter-count
prediction.

The learner's modules here are written out as a learner would write them, with one switch per slip;
``MIDDLE_WRONG`` lists the wrong ones with the misconception each checker must name.
"""

from __future__ import annotations

import pytest
import torch
from checker_table import selectable
from learner_modules import multi_head_module
from test_wrong_answers import Wrong
from torch import nn

from mhsa_helpers.lessons.multi_head_attention import check_my_multi_head_attention, check_parameter_prediction

MIDDLE_WRONG = [
    # ----------------------------------------------------------- 04 the learner's module
    Wrong(
        check_my_multi_head_attention,
        "merge without transpose",
        multi_head_module(reshape_only=True),
        named="merge without transposing back",
    ),
    Wrong(
        check_my_multi_head_attention,
        "split (and merge) with a view only",
        multi_head_module(view_only=True),
        named="view without transpose when splitting",
        says=("'merge without transposing back'",),
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
        "softmax over the queries",
        multi_head_module(softmax_dim=-2),
        named="softmax over the queries axis",
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
    Wrong(
        check_my_multi_head_attention,
        "scaled by sqrt(d_in)",
        multi_head_module(scale="d_in"),
        named="scaled by √d_model instead of √d_head",
    ),
    Wrong(
        check_my_multi_head_attention,
        "divided by d_head",
        multi_head_module(scale="d_head no sqrt"),
        named="divided by d_head without the square root",
    ),
    Wrong(
        check_my_multi_head_attention,
        "K·Qᵀ",
        multi_head_module(kq=True),
        named="scores as K·Qᵀ (keys and queries swapped)",
    ),
    Wrong(
        check_my_multi_head_attention,
        "a causal mask",
        multi_head_module(causal=True),
        named="a causal mask in a module without one",
    ),
    Wrong(
        check_my_multi_head_attention,
        "dropout in train mode",
        multi_head_module(dropout=True),
        named="random numbers drawn in forward",
    ),
    Wrong(
        check_my_multi_head_attention,
        "weights changed in forward",
        multi_head_module(weights_changed=True),
        named="forward changes the module's weights",
    ),
    Wrong(
        check_my_multi_head_attention,
        "the sequences of a batch mixed",
        multi_head_module(batch_mixed=True),
        named="the sequences of a batch are mixed",
    ),
    Wrong(
        check_my_multi_head_attention,
        "strided heads",
        multi_head_module(strided=True),
        named="heads take every h-th feature",
    ),
    Wrong(
        check_my_multi_head_attention,
        "bias=False ignored",
        multi_head_module(bias_ignored=True),
        named="bias=False ignored",
        says=("MyMultiHeadAttention(16, 4, bias=False) still has biases in w_q, w_k, w_v, w_o",),
    ),
    Wrong(
        check_my_multi_head_attention,
        "d_in ignored",
        multi_head_module(d_in_ignored=True),
        says=(
            "MyMultiHeadAttention(12, 3, d_in=6): mine.w_q.weight has shape (12, 12)",
            "nn.Linear(in_features=6, out_features=12)",
        ),
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
    Wrong(check_parameter_prediction, "one too many", lambda: 3 * (32 * 64 + 64) + 64 * 64 + 65),
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
    result = check_my_multi_head_attention(multi_head_module(), verbose=False)
    assert result.correct and "6 module sizes (4 given, 2 drawn for your code)" in result.message
    assert check_parameter_prediction(3 * (32 * 64 + 64) + (64 * 64 + 64), verbose=False).correct


@pytest.mark.parametrize("checker", [check_parameter_prediction])
def test_an_empty_prediction_is_not_attempted(checker):
    assert checker(None, verbose=False).status == "not_attempted"
    assert "replace None" in checker(None, verbose=False).message


def test_an_error_in_the_constructor_points_at_the_learners_line():
    class Broken(nn.Module):
        def __init__(self, d_model, num_heads, *, d_in=None, bias=True):
            super().__init__()
            self.w_q = nn.Linear(d_in or d_model, d_model, bias=maybe)  # noqa: F821  # the learner's NameError

    result = check_my_multi_head_attention(Broken, verbose=False)
    assert result.status == "error" and "NameError" in result.message and "bias=maybe" in result.message


def test_an_error_deep_in_the_learners_code_points_at_the_line_that_raised():
    def projection(d_in, d_out):
        return nn.Linear(d_in, d_out, bias=maybe)  # noqa: F821  # the learner's NameError, one call down

    class Helped(nn.Module):
        def __init__(self, d_model, num_heads, *, d_in=None, bias=True):
            super().__init__()
            self.w_q = projection(d_in or d_model, d_model)

    result = check_my_multi_head_attention(Helped, verbose=False)
    assert "(in projection, line" in result.message and "bias=maybe" in result.message, result.message


def test_a_layer_that_keeps_its_bias_under_bias_false_is_named():
    class OutputKeepsItsBias(multi_head_module()):
        def __init__(self, d_model, num_heads, *, d_in=None, bias=True):
            super().__init__(d_model, num_heads, d_in=d_in, bias=bias)
            self.w_o = nn.Linear(d_model, d_model)  # bias=bias forgotten on the last layer

    result = check_my_multi_head_attention(OutputKeepsItsBias, verbose=False)
    assert (result.status, result.misconception) == ("misconception", "bias=False ignored")
    assert result.message == (
        "[my_multi_head_attention] not yet: OutputKeepsItsBias(16, 4, bias=False) still has biases in w_o: pass "
        "bias=bias to each nn.Linear (real models such as Llama have none)."
    )


def test_a_module_without_the_four_named_layers_is_told_their_names():
    class Fused(nn.Module):
        def __init__(self, d_model, num_heads, *, d_in=None, bias=True):
            super().__init__()
            self.qkv = nn.Linear(d_in or d_model, 3 * d_model, bias=bias)

        def forward(self, x):
            return x

    result = check_my_multi_head_attention(Fused, verbose=False)
    assert not result.correct and "w_q, w_k, w_v, w_o" in result.message


def test_the_module_checker_gives_back_the_number_of_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        check_my_multi_head_attention(multi_head_module(), verbose=False)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
