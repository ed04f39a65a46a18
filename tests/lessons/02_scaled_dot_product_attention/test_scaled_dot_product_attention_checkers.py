"""Notebook 02 lets the learner build scaled dot-product attention and checks it like a test suite: right
answers written in other ways pass, the buggy code the notebook hands out is named, the prediction's truth is
what the notebook then shows, a cut gradient graph is named, and the notebook has the exercises the series
promises (a prediction, a debugging exercise, a last exercise that builds on notebook 01's, with hints that
unfold in three steps).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from notebook_cells import cells, defined_in_notebook, exercise_structure_problems, source

from mhsa_helpers.lessons.scaled_dot_product_attention import check_my_attention, check_softmax, check_spread_prediction
from mhsa_helpers.lessons.scaled_dot_product_attention.exercises import spread_growth
from mhsa_helpers.teaching.gradients import GRADIENT_NAME

ROOT = Path(__file__).resolve().parents[3]


NOTEBOOK = ROOT / "notebooks" / "02_scaled_dot_product_attention.ipynb"
NOTEBOOKS = {2: NOTEBOOK}


def test_attention_with_an_additive_mask_and_pytorch_are_accepted():
    def additive(q, k, v, mask=None):
        scores = q @ k.mT / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores + torch.zeros(mask.shape, dtype=q.dtype).masked_fill(~mask, -math.inf)
        return torch.softmax(scores, dim=-1) @ v

    assert check_my_attention(additive, verbose=False).correct
    pytorch = check_my_attention(
        lambda q, k, v, mask=None: F.scaled_dot_product_attention(q, k, v, attn_mask=mask), verbose=False
    )
    assert pytorch.correct and pytorch.shortcuts == ("torch.nn.functional.scaled_dot_product_attention",)


@pytest.mark.parametrize(
    "number, name, checker, named",
    [
        (2, "stable_softmax", check_softmax, "both bugs: one global max, and a sum over the whole tensor"),
    ],
)
def test_the_notebooks_buggy_code_is_named(number, name, checker, named):
    result = checker(defined_in_notebook(NOTEBOOKS[number], name), verbose=False)
    assert result.status == "misconception" and result.misconception == named, result.message


def test_the_spread_grows_by_two_as_measured():
    g = torch.Generator().manual_seed(5)
    stds = [
        (torch.randn(40_000, d, generator=g) * torch.randn(40_000, d, generator=g)).sum(-1).std() for d in (64, 256)
    ]
    assert float(stds[1] / stds[0]) == pytest.approx(spread_growth(), abs=0.05)
    assert check_spread_prediction(lambda: 2.04, verbose=False).correct
    assert not check_spread_prediction(lambda: 2.1, verbose=False).correct


def test_an_output_that_skips_the_value_weights_names_the_cut_graph():
    def v_detached(q, k, v, mask=None):
        scores = q @ k.mT / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(~mask, -math.inf)
        return torch.softmax(scores, dim=-1) @ v.detach()

    result = check_my_attention(v_detached, verbose=False)
    assert result.misconception == GRADIENT_NAME and ".detach()" in result.message


@pytest.mark.parametrize("number", sorted(NOTEBOOKS))
def test_each_notebook_has_a_prediction_a_debugging_exercise_and_a_last_exercise_with_three_hints(number):
    assert exercise_structure_problems(NOTEBOOKS[number]) == []


@pytest.mark.parametrize("number, earlier", [(2, "my_attention_head")])
def test_the_last_exercise_builds_on_the_previous_notebooks_function_and_says_where_it_comes_from(number, earlier):
    notebook = cells(NOTEBOOKS[number])
    last = next(source(c) for c in reversed(notebook) if source(c).startswith("### Exercise"))
    assert earlier in last and "paste" in last and "Colab" in last
