"""Notebook 01 lets the learner build one attention head and checks it like a test suite: right answers
written in other ways pass (in float32 too), the buggy code the notebook hands out is told it is still the
original and nothing more, a fixed bug leaves the other told by its symptom and then named, the prediction's
truth is what the notebook then shows, gradients are compared as well as values, cases are drawn for each
answer, and the notebook has the exercises the series promises (a prediction, a debugging exercise, a last
exercise with hints that unfold in three steps).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from notebook_cells import defined_in_notebook, exercise_structure_problems

import mhsa_helpers as mh
from mhsa_helpers.lessons.qkv_by_hand import check_attention_head, check_uniform_prediction, check_weights_debug
from mhsa_helpers.lessons.qkv_by_hand.exercises import uniform_weight
from mhsa_helpers.teaching.checking import STATE_CHANGED
from mhsa_helpers.teaching.gradients import with_gradients

ROOT = Path(__file__).resolve().parents[3]


NOTEBOOK = ROOT / "notebooks" / "01_qkv_by_hand.ipynb"
NOTEBOOKS = {1: NOTEBOOK}


def right_head(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
    return weights @ v, weights


def test_a_head_written_with_einsum_and_the_package_is_accepted():
    def my_attention_head(x, w_q, w_k, w_v):
        q, k, v = (torch.einsum("...si,io->...so", x, w) for w in (w_q, w_k, w_v))
        scores = torch.einsum("...id,...jd->...ij", q, k) / q.shape[-1] ** 0.5
        weights = mh.softmax(scores, dim=-1)
        return torch.einsum("...ij,...jd->...id", weights, v), weights

    assert check_attention_head(my_attention_head, verbose=False).correct


def test_a_head_through_the_package_is_accepted_with_a_note():
    def my_attention_head(x, w_q, w_k, w_v):
        return mh.scaled_dot_product_attention(x @ w_q, x @ w_k, x @ w_v, need_weights=True)

    result = check_attention_head(my_attention_head, verbose=False)
    assert result.correct and "Note: your function calls" in result.message


def test_a_head_computed_in_float32_inside_is_accepted_and_told_it_is_a_precision_matter():
    def my_attention_head(x, w_q, w_k, w_v):
        return right_head(*(t.float() for t in (x, w_q, w_k, w_v)))

    result = check_attention_head(my_attention_head, verbose=False)
    assert result.correct, result.message
    assert "float32's rounding" in result.message and "fine here" in result.message


def test_every_answer_meets_cases_drawn_for_it_in_float32_and_under_no_grad():
    result = check_attention_head(right_head, verbose=False)
    assert result.message == "[one attention head] correct on all 9 cases (5 given, 4 drawn at random for your code)."

    def keeps_the_weights_gradient(x, w_q, w_k, w_v):
        output, weights = right_head(x, w_q, w_k, w_v)
        weights.retain_grad()  # fitted to inputs that require grad
        return output, weights

    refused = check_attention_head(keeps_the_weights_gradient, verbose=False)
    assert refused.status == "error" and "under torch.no_grad()" in refused.message
    assert "`weights.retain_grad()  # fitted to inputs that require grad`" in refused.message


def test_the_notebooks_buggy_code_is_still_the_original_and_its_message_names_no_bug():
    result = check_weights_debug(defined_in_notebook(NOTEBOOK, "attention_weights"), verbose=False)
    assert result.status == "original" and result.misconception is None, result.message
    assert "still the original" in result.message
    assert not any(word in result.message for word in ("d_k", "dim", "looks like", "fix"))


def test_fixing_one_bug_of_notebook_01_is_told_the_symptom_then_the_name_then_the_fix(capsys):
    buggy = defined_in_notebook(NOTEBOOK, "attention_weights")
    q, k = torch.randn(2, 3, 4, dtype=torch.float64), torch.randn(2, 5, 4, dtype=torch.float64)
    assert buggy(q, k).shape == (2, 3, 5)  # it runs and has the right shape: only the numbers are wrong

    def axis_fixed(q, k):
        return torch.softmax(q @ k.transpose(-2, -1) / k.shape[-1], dim=-1)

    first = check_weights_debug(axis_fixed, verbose=False)
    assert first.misconception == "one bug left: the scale"
    assert "flatter" in first.message and "one bug left" not in first.message and "sqrt" not in first.message
    again = check_weights_debug(axis_fixed, verbose=False)
    assert "'one bug left: the scale'" in again.message and "√d_k" in again.message
    assert "math.sqrt" not in again.message and "math.sqrt(q.shape[-1])" in again.fix
    again.reveal()
    assert "math.sqrt(q.shape[-1])" in capsys.readouterr().out


def test_fixing_the_axis_by_dropping_the_scale_is_named_the_scale():
    def scale_dropped(q, k):
        return torch.softmax(q @ k.transpose(-2, -1), dim=-1)

    result = check_weights_debug(scale_dropped, verbose=False)
    assert result.misconception == "one bug left: the scale" and "sharper" in result.message
    assert "Do not drop the scale" in result.fix


def test_the_uniform_weight_is_one_third_computed_by_hand():
    ex = mh.examples.money_bank_grows()
    scores = (ex.embeddings @ ex.w_q[0]) @ torch.zeros(3, 3, dtype=torch.float64)  # every key is zero
    weights = torch.exp(scores) / torch.exp(scores).sum(dim=-1, keepdim=True)
    assert uniform_weight() == pytest.approx(float(weights[1, 0])) == pytest.approx(1 / 3)
    assert check_uniform_prediction(lambda: 0.333, verbose=False).correct  # within the stated 0.005
    assert not check_uniform_prediction(lambda: 0.32, verbose=False).correct


def test_a_wrong_prediction_is_told_too_low_and_why_then_named_and_the_value_only_later():
    first = check_uniform_prediction(lambda: 0.0, verbose=False)
    assert "too low" in first.message and "Can e to some power be exactly 0?" in first.message
    assert "0.3333" not in first.message and "a score of 0 gives" not in first.message
    second = check_uniform_prediction(lambda: 0.0, verbose=False)
    assert "'a score of 0 gives a weight of 0'" in second.message and "0.3333" not in second.message
    third = check_uniform_prediction(lambda: 0.5, verbose=False)
    assert "too high" in third.message and "The value is 0.3333" in third.message


def test_with_gradients_returns_the_autograd_gradients_of_a_weighted_sum():
    x = torch.randn(3, 4, dtype=torch.float64)
    w = torch.randn(4, 2, dtype=torch.float64)
    out, grad_x, grad_w = with_gradients(lambda x, w: (x @ w).tanh(), ("output",), ("x", "w"))(x, w)
    xs, ws = x.clone().requires_grad_(), w.clone().requires_grad_()
    expected = (xs @ ws).tanh()
    probe = torch.cos(torch.arange(6, dtype=torch.float64)).reshape(3, 2) + 1.5
    (expected * probe).sum().backward()
    assert (
        torch.allclose(out, expected.detach()) and torch.allclose(grad_x, xs.grad) and torch.allclose(grad_w, ws.grad)
    )


def test_right_values_with_wrong_gradients_are_refused():
    def right_values_wrong_gradients(x, w_q, w_k, w_v):
        q, k, v = x @ w_q, x @ w_k, x @ w_v
        weights = torch.softmax(q @ k.mT / math.sqrt(q.shape[-1]), dim=-1)
        # the values of weights @ v, but the gradient of v flows as if the weights were uniform
        uniform = torch.full_like(weights, 1 / weights.shape[-1])
        output = (weights - uniform).detach() @ v + uniform @ v
        return output, weights

    result = check_attention_head(right_values_wrong_gradients, verbose=False)
    assert not result.correct
    assert "gradient reaching x" in result.message and "output 1 (output)" not in result.message


@pytest.mark.filterwarnings("ignore:The use of `x.T`")
def test_an_error_inside_the_learners_head_points_at_the_learners_line():
    def my_attention_head(x, w_q, w_k, w_v):
        q, k, v = x @ w_q, x @ w_k, x @ w_v
        weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
        return weights @ v.T, weights  # a slip

    result = check_attention_head(my_attention_head, verbose=False)
    assert result.status == "error"
    assert "(in my_attention_head, line" in result.message and "`return weights @ v.T, weights  # a slip`" in (
        result.message
    )


def test_an_answer_that_reseeds_the_global_generator_with_0_is_named():
    def my_attention_head(x, w_q, w_k, w_v):
        torch.manual_seed(0)  # copied from the notebook's first cell
        return right_head(x, w_q, w_k, w_v)

    assert check_attention_head(my_attention_head, verbose=False).misconception == STATE_CHANGED


@pytest.mark.parametrize("number", sorted(NOTEBOOKS))
def test_each_notebook_has_a_prediction_a_debugging_exercise_and_a_last_exercise_with_three_hints(number):
    assert exercise_structure_problems(NOTEBOOKS[number]) == []
