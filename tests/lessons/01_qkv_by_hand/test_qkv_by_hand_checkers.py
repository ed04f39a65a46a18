"""Notebook 01 lets the learner build one attention head and checks it like a test suite: right answers
written in other ways pass, the buggy code the notebook hands out is named, the prediction's truth is what
the notebook then shows, gradients are compared as well as values, and the notebook has the exercises the
series promises (a prediction, a debugging exercise, a last exercise with hints that unfold in three steps).
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
from mhsa_helpers.teaching.gradients import with_gradients

ROOT = Path(__file__).resolve().parents[3]


NOTEBOOK = ROOT / "notebooks" / "01_qkv_by_hand.ipynb"
NOTEBOOKS = {1: NOTEBOOK}


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


@pytest.mark.parametrize(
    "number, name, checker, named",
    [
        (1, "attention_weights", check_weights_debug, "both bugs are still there"),
    ],
)
def test_the_notebooks_buggy_code_is_named(number, name, checker, named):
    result = checker(defined_in_notebook(NOTEBOOKS[number], name), verbose=False)
    assert result.status == "misconception" and result.misconception == named, result.message


def test_fixing_one_bug_of_notebook_01_leaves_the_other_named():
    buggy = defined_in_notebook(NOTEBOOK, "attention_weights")
    q, k = torch.randn(2, 3, 4, dtype=torch.float64), torch.randn(2, 5, 4, dtype=torch.float64)
    assert buggy(q, k).shape == (2, 3, 5)  # it runs and has the right shape: only the numbers are wrong

    def axis_fixed(q, k):
        return torch.softmax(q @ k.transpose(-2, -1) / k.shape[-1], dim=-1)

    result = check_weights_debug(axis_fixed, verbose=False)
    assert result.misconception == "one bug left: the scale" and "d_k instead of √d_k" in result.message


def test_the_uniform_weight_is_one_third_computed_by_hand():
    ex = mh.examples.money_bank_grows()
    scores = (ex.embeddings @ ex.w_q[0]) @ torch.zeros(3, 3, dtype=torch.float64)  # every key is zero
    weights = torch.exp(scores) / torch.exp(scores).sum(dim=-1, keepdim=True)
    assert uniform_weight() == pytest.approx(float(weights[1, 0])) == pytest.approx(1 / 3)
    assert check_uniform_prediction(lambda: 0.333, verbose=False).correct  # within the stated 0.005
    assert not check_uniform_prediction(lambda: 0.32, verbose=False).correct


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


@pytest.mark.parametrize("number", sorted(NOTEBOOKS))
def test_each_notebook_has_a_prediction_a_debugging_exercise_and_a_last_exercise_with_three_hints(number):
    assert exercise_structure_problems(NOTEBOOKS[number]) == []
