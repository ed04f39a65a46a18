"""Notebook 03 lets the learner build a causal mask and causal attention and checks them like a test suite:
right answers written in other ways pass (renormalising after the softmax, float32 inside), the buggy code the
notebook hands out is told it is still the original and nothing more, a fixed bug leaves the other told by its
symptom and then named, the probes of a finite fill catch what the cases miss and never fire on a right
answer, the prediction's truth is what the notebook then shows, and the notebook has the exercises the series
promises (a prediction, a debugging exercise, a last exercise that builds on notebook 02's, with hints that
unfold in three steps).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from notebook_cells import cells, defined_in_notebook, exercise_structure_problems, source

import mhsa_helpers as mh
from mhsa_helpers.lessons.causal_masking import (
    check_cache_prediction,
    check_cached_causal_mask,
    check_causal_attention,
    check_masked_softmax,
)
from mhsa_helpers.lessons.causal_masking.exercises import first_query_keys
from mhsa_helpers.teaching.misconceptions import FINITE_FILL_NAME, POLARITY_NAME, blocked_key_gets_weight

ROOT = Path(__file__).resolve().parents[3]


NOTEBOOK = ROOT / "notebooks" / "03_causal_masking.ipynb"
NOTEBOOKS = {3: NOTEBOOK}


def test_a_mask_built_by_comparing_positions_is_accepted():
    def my_causal_mask(seq_q, seq_k):
        positions = torch.arange(seq_k - seq_q, seq_k)  # where the queries sit
        return torch.arange(seq_k)[None, :] <= positions[:, None]

    assert check_cached_causal_mask(my_causal_mask, verbose=False).correct


def test_causal_attention_through_the_package_is_accepted():
    def my_causal_attention(q, k, v):
        return mh.scaled_dot_product_attention(q, k, v, mh.causal_mask(q.shape[-2], k.shape[-2]))

    assert check_causal_attention(my_causal_attention, verbose=False).correct


def test_causal_attention_renormalised_after_the_softmax_or_through_pytorch_is_accepted():
    def renormalised(q, k, v):
        allowed = mh.causal_mask(q.shape[-2], k.shape[-2])
        weights = torch.softmax(q @ k.mT / math.sqrt(q.shape[-1]), dim=-1) * allowed
        return weights / weights.sum(dim=-1, keepdim=True) @ v

    def pytorch(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mh.causal_mask(q.shape[-2], k.shape[-2]))

    assert check_causal_attention(renormalised, verbose=False).correct
    assert check_causal_attention(pytorch, verbose=False).correct


def safe_masked_softmax(scores, mask):
    scores = scores.masked_fill(~mask, float("-inf"))
    row_max = scores.amax(dim=-1, keepdim=True)
    row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
    exps = torch.exp(scores - row_max)
    sums = exps.sum(dim=-1, keepdim=True)
    return exps / torch.where(sums == 0, torch.ones_like(sums), sums)


def test_a_masked_softmax_computed_in_float32_inside_is_accepted():
    result = check_masked_softmax(lambda scores, mask: safe_masked_softmax(scores.float(), mask), verbose=False)
    assert result.correct and "Note" not in result.message, result.message


def test_the_notebooks_buggy_code_is_still_the_original_and_its_message_names_no_bug():
    result = check_masked_softmax(defined_in_notebook(NOTEBOOK, "safe_masked_softmax"), verbose=False)
    assert result.status == "original" and result.misconception is None, result.message
    assert "still the original" in result.message
    assert not any(word in result.message for word in ("~mask", "NaN", "polarity", "looks like", "the fix"))


def test_fixing_the_polarity_of_notebook_03_is_told_the_nan_then_named():
    def polarity_fixed(scores, mask):
        return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)

    first = check_masked_softmax(polarity_fixed, verbose=False)
    assert first.misconception == "a fully masked row gives NaN"
    assert "gets a row of NaN" in first.message and "looks like" not in first.message
    again = check_masked_softmax(polarity_fixed, verbose=False)
    assert "looks like 'a fully masked row gives NaN" in again.message and "torch.where" in again.fix


def test_guarding_the_nan_of_notebook_03_leaves_the_polarity_named():
    def guarded_but_inverted(scores, mask):
        return safe_masked_softmax(scores, ~mask)

    result = check_masked_softmax(guarded_but_inverted, verbose=False)
    assert result.misconception == POLARITY_NAME and "keys the mask blocks" in result.message


def additive_minus_1e9(scores, mask):
    return torch.softmax(scores + (1 - mask.to(scores.dtype)) * -1e9, dim=-1) * mask.any(-1, keepdim=True)


def below_everything(scores, mask):
    return torch.softmax(scores.masked_fill(~mask, scores.min() - 1e4), dim=-1) * mask.any(-1, keepdim=True)


@pytest.mark.parametrize(
    "answer",
    [
        safe_masked_softmax,
        mh.masked_softmax_neg_inf,
        lambda scores, mask: safe_masked_softmax(scores.float(), mask),
        lambda scores, mask: safe_masked_softmax(scores, mask.expand(scores.shape)),
    ],
    ids=["guarded", "the package", "float32 inside", "mask expanded"],
)
def test_the_blocked_key_probe_never_fires_on_a_right_answer(answer):
    assert not blocked_key_gets_weight(answer)
    assert check_masked_softmax(answer, verbose=False).correct


@pytest.mark.parametrize("answer", [additive_minus_1e9, below_everything], ids=["(1 - mask) * -1e9", "min - 1e4"])
def test_a_fill_right_on_every_case_but_finite_is_caught_by_the_probe(answer):
    assert blocked_key_gets_weight(answer)
    result = check_masked_softmax(answer, verbose=False)
    assert result.misconception == FINITE_FILL_NAME
    assert "gives the reference's numbers on all 8 cases, but a blocked key still takes weight" in result.message


def test_the_first_cached_query_sees_six_keys_counted_from_positions():
    cached, new = 5, 3
    position = cached  # the first new query
    assert first_query_keys() == sum(1 for key in range(cached + new) if key <= position) == 6
    assert check_cache_prediction(lambda: 6.0, verbose=False).correct  # a whole number as a float is fine


@pytest.mark.parametrize("number", sorted(NOTEBOOKS))
def test_each_notebook_has_a_prediction_a_debugging_exercise_and_a_last_exercise_with_three_hints(number):
    assert exercise_structure_problems(NOTEBOOKS[number]) == []


@pytest.mark.parametrize("number, earlier", [(3, "my_scaled_dot_product_attention")])
def test_the_attention_exercise_builds_on_the_previous_notebooks_function_and_says_where_it_comes_from(number, earlier):
    notebook = cells(NOTEBOOKS[number])
    text = "\n".join(source(c) for c in notebook)
    last = next(source(c) for c in notebook if source(c).startswith("### Exercise 4 · Causal attention through"))
    assert earlier in last and "my_attention.py" in last and "stands in" in last
    # the earlier piece is loaded from the learner's file (the package's stands in without it), after the cell
    # where Colab learners paste that file
    assert f'{earlier} = load_mine("{earlier}")' in text
    assert text.index("%%my_attention") < text.index(f'{earlier} = load_mine("{earlier}")')
