"""Notebook 03 lets the learner build a causal mask and causal attention and checks them like a test suite:
right answers written in other ways pass, the buggy code the notebook hands out is named, the prediction's
truth is what the notebook then shows, and the notebook has the exercises the series promises (a prediction,
a debugging exercise, a last exercise that builds on notebook 02's, with hints that unfold in three steps).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from notebook_cells import cells, defined_in_notebook, exercise_structure_problems, source

import mhsa_helpers as mh
from mhsa_helpers.lessons.causal_masking import (
    check_cache_prediction,
    check_cached_causal_mask,
    check_causal_attention,
    check_masked_softmax,
)
from mhsa_helpers.lessons.causal_masking.exercises import first_query_keys
from mhsa_helpers.teaching.misconceptions import POLARITY_NAME

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


@pytest.mark.parametrize(
    "number, name, checker, named",
    [
        (3, "safe_masked_softmax", check_masked_softmax, POLARITY_NAME),
    ],
)
def test_the_notebooks_buggy_code_is_named(number, name, checker, named):
    result = checker(defined_in_notebook(NOTEBOOKS[number], name), verbose=False)
    assert result.status == "misconception" and result.misconception == named, result.message


def test_fixing_the_polarity_of_notebook_03_leaves_the_nan_named():
    def polarity_fixed(scores, mask):
        return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)

    result = check_masked_softmax(polarity_fixed, verbose=False)
    assert result.misconception == "a fully masked row gives NaN (softmax of a row of -inf)"


def test_the_first_cached_query_sees_six_keys_counted_from_positions():
    cached, new = 5, 3
    position = cached  # the first new query
    assert first_query_keys() == sum(1 for key in range(cached + new) if key <= position) == 6
    assert check_cache_prediction(lambda: 6.0, verbose=False).correct  # a whole number as a float is fine


@pytest.mark.parametrize("number", sorted(NOTEBOOKS))
def test_each_notebook_has_a_prediction_a_debugging_exercise_and_a_last_exercise_with_three_hints(number):
    assert exercise_structure_problems(NOTEBOOKS[number]) == []


@pytest.mark.parametrize("number, earlier", [(3, "my_scaled_dot_product_attention")])
def test_the_last_exercise_builds_on_the_previous_notebooks_function_and_says_where_it_comes_from(number, earlier):
    notebook = cells(NOTEBOOKS[number])
    text = "\n".join(source(c) for c in notebook)
    last = next(source(c) for c in reversed(notebook) if source(c).startswith("### Exercise"))
    assert earlier in last and "paste" in last and "Colab" in last
    # the package's checked stand-in is named, and the cell runs without the learner's function
    assert "my_scaled_dot_product_attention = mh.scaled_dot_product_attention" in text
