"""Notebook 02 lets the learner build scaled dot-product attention and checks it like a test suite: right
answers written in other ways pass, the buggy code the notebook hands out is told it is still the original and
nothing more, a fixed bug leaves the other told by its symptom and then named, the prediction's truth is what
the notebook then shows, a cut gradient graph is named, a blocked key must get no weight at all whatever the
cases, and the notebook has the exercises the series promises (a prediction, a debugging exercise, a last
exercise that builds on notebook 01's, with hints that unfold in three steps).
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
from mhsa_helpers.teaching.misconceptions import attention_blocked_key_gets_weight

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


def right_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def test_the_notebooks_buggy_code_is_still_the_original_and_its_message_names_no_bug():
    result = check_softmax(defined_in_notebook(NOTEBOOK, "stable_softmax"), verbose=False)
    assert result.status == "original" and result.misconception is None, result.message
    assert "still the original" in result.message
    assert not any(word in result.message for word in ("amax", "keepdim", "dim=", "looks like", "the fix"))


def test_fixing_the_max_of_notebook_02_is_told_the_symptom_then_the_name_then_the_fix():
    def max_fixed(x):
        e = torch.exp(x - x.amax(dim=-1, keepdim=True))
        return e / e.sum()

    first = check_softmax(max_fixed, verbose=False)
    assert first.misconception == "summed over the whole tensor (forgot dim=-1 in the sum)"
    assert "Your rows do not sum to 1" in first.message and "forgot" not in first.message
    again = check_softmax(max_fixed, verbose=False)
    assert "forgot dim=-1 in the sum" in again.message and "keepdim" not in again.message
    assert "e.sum(dim=-1, keepdim=True)" in again.fix


def test_the_spread_grows_by_two_as_measured():
    g = torch.Generator().manual_seed(5)
    stds = [
        (torch.randn(40_000, d, generator=g) * torch.randn(40_000, d, generator=g)).sum(-1).std() for d in (64, 256)
    ]
    assert float(stds[1] / stds[0]) == pytest.approx(spread_growth(), abs=0.05)
    assert check_spread_prediction(lambda: 2.03, verbose=False).correct
    assert not check_spread_prediction(lambda: 2.1, verbose=False).correct  # 5% off is not right


def test_an_output_that_skips_the_value_weights_names_the_cut_graph():
    def v_detached(q, k, v, mask=None):
        scores = q @ k.mT / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(~mask, -math.inf)
        return torch.softmax(scores, dim=-1) @ v.detach()

    result = check_my_attention(v_detached, verbose=False)
    assert result.misconception == GRADIENT_NAME and ".detach()" in result.fix


def _additive(q, k, v, mask=None, *, blocked=-1e9):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores + (1 - mask.to(scores.dtype)) * blocked
    return torch.softmax(scores, dim=-1) @ v


def _below_everything(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, scores.min() - 1e4)
    return torch.softmax(scores, dim=-1) @ v


@pytest.mark.parametrize(
    "answer",
    [
        right_attention,
        lambda q, k, v, mask=None: F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
        lambda q, k, v, mask=None: right_attention(*(t.float() for t in (q, k, v)), mask),
        lambda q, k, v, mask=None: right_attention(*(t.float() for t in (q, k, v)), mask).to(q.dtype),
    ],
    ids=["masked_fill", "F.sdpa", "float32 inside", "float32 inside, back to the input's dtype"],
)
def test_the_blocked_key_probe_never_fires_on_a_right_answer(answer):
    assert not attention_blocked_key_gets_weight(answer)
    assert check_my_attention(answer, verbose=False).correct


@pytest.mark.parametrize("answer", [_additive, _below_everything], ids=["(1 - mask) * -1e9", "scores.min() - 1e4"])
def test_a_fill_right_on_every_case_but_finite_is_refused_by_the_probe(answer):
    assert attention_blocked_key_gets_weight(answer)
    result = check_my_attention(answer, verbose=False)
    assert result.status == "misconception", result.message
    assert "gives the reference's numbers on all 13 cases, but a blocked key still takes weight" in result.message


@pytest.mark.parametrize("number", sorted(NOTEBOOKS))
def test_each_notebook_has_a_prediction_a_debugging_exercise_and_a_last_exercise_with_three_hints(number):
    assert exercise_structure_problems(NOTEBOOKS[number]) == []


@pytest.mark.parametrize("number, earlier", [(2, "my_attention_head")])
def test_the_attention_exercise_builds_on_the_previous_notebooks_function_and_says_where_it_comes_from(number, earlier):
    # The exercise whose answer is saved for the next notebooks (the last one, cross-attention, builds on it).
    notebook = cells(NOTEBOOKS[number])
    saved = next(i for i, c in enumerate(notebook) if source(c).startswith("save_mine("))
    heading = next(source(c) for c in reversed(notebook[:saved]) if source(c).startswith("### Exercise"))
    assert earlier in heading and "paste" in heading and "Colab" in heading


def test_an_answer_wrong_for_another_reason_is_not_told_the_blocked_key_mistake():
    # Right on the teaching cases, a softmax over the queries elsewhere: the probe's query is one of those.
    def over_the_queries_on_other_shapes(q, k, v, mask=None):
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        return torch.softmax(scores, dim=-1 if q.shape[-2] > 1 else -2).nan_to_num() @ v

    result = check_my_attention(over_the_queries_on_other_shapes, verbose=False)
    assert result.status == "incorrect" and result.misconception is None, result.message
