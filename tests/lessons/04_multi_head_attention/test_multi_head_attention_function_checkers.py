"""The function checkers of notebook 04 (split_heads, multi_head_attention) name the mistakes
they are built to catch (the module and prediction checkers: ``test_multi_head_attention_module.py``).

For each checker: an independent correct solution (written here from torch primitives,
not taken from the package) is "correct"; a stub is "not_attempted"; hand-written
versions of the mistakes the issue lists are named; and every misconception the
checker knows is told apart from the right answer *and* from the others.
"""

from __future__ import annotations

import re
from pathlib import Path

from checker_table import table_tests
from learner_modules import attention_ok
from notebook_cells import defined_in_notebook, last_exercise_hints

from mhsa_helpers.lessons.multi_head_attention import exercises as heads


def split_ok(x, num_heads):
    *batch, seq, d_model = x.shape
    return x.reshape(*batch, seq, num_heads, d_model // num_heads).transpose(-3, -2)


def merge_ok(x):
    *batch, heads_, seq, d_head = x.shape
    return x.transpose(-3, -2).reshape(*batch, seq, heads_ * d_head)


def mha_ok(x, q_weight, k_weight, v_weight, o_weight, num_heads):
    q, k, v = (split_ok(x @ w.T, num_heads) for w in (q_weight, k_weight, v_weight))
    return merge_ok(attention_ok(q, k, v)) @ o_weight.T


def split_view_without_transpose(x, num_heads):
    *batch, seq, d_model = x.shape
    return x.view(*batch, num_heads, seq, d_model // num_heads)


def split_as_d_head_by_heads(x, num_heads):
    # The feature axis cut as (d_head, heads), then only seq and the d_head axis swapped: no torch.split in sight.
    *batch, seq, d_model = x.shape
    return x.view(*batch, seq, d_model // num_heads, num_heads).transpose(-3, -2)


def mha_without_w_o(x, q_weight, k_weight, v_weight, o_weight, num_heads):
    q, k, v = (split_ok(x @ w.T, num_heads) for w in (q_weight, k_weight, v_weight))
    return merge_ok(attention_ok(q, k, v))


def mha_view_without_transpose(x, q_weight, k_weight, v_weight, o_weight, num_heads):
    *batch, seq, d_model = x.shape
    q, k, v = (split_view_without_transpose(x @ w.T, num_heads) for w in (q_weight, k_weight, v_weight))
    return attention_ok(q, k, v).reshape(*batch, seq, d_model) @ o_weight.T


def mha_split_view_merge_ok(x, q_weight, k_weight, v_weight, o_weight, num_heads):
    # Split with a plain view (no transpose) but merge correctly: positions mix inside each head.
    q, k, v = (split_view_without_transpose(x @ w.T, num_heads) for w in (q_weight, k_weight, v_weight))
    return merge_ok(attention_ok(q, k, v)) @ o_weight.T


CHECKERS = {
    "split_heads": (heads.check_split_heads, split_ok, heads.SPLIT_HEADS_MISCONCEPTIONS),
    "multi_head_attention": (heads.check_multi_head_attention, mha_ok, heads.MHA_MISCONCEPTIONS),
}


# The mistakes the issue asks the checkers to name, written by hand above.
LISTED_MISTAKES = [
    ("split_heads", split_view_without_transpose, "view without transpose"),
    ("split_heads", split_as_d_head_by_heads, "heads take every h-th feature"),
    ("multi_head_attention", mha_view_without_transpose, "view without transpose"),
    ("multi_head_attention", mha_split_view_merge_ok, "view without transpose when splitting (merge correct)"),
    ("multi_head_attention", mha_without_w_o, "forgot W_O"),
]


(
    test_independent_solution_is_correct,
    test_stub_is_not_attempted,
    test_listed_mistakes_are_named,
    test_every_misconception_is_told_apart,
    test_unknown_wrong_answer_is_incorrect,
    test_a_crash_is_reported_not_raised,
) = table_tests(CHECKERS, LISTED_MISTAKES)


def test_scaled_answer_is_incorrect_with_its_case_named():
    result = heads.check_multi_head_attention(lambda *a: 1.5 * mha_ok(*a), verbose=False)
    assert result.status == "incorrect"
    assert "x (2, 4, 8), 2 heads" in result.message


def test_the_notebooks_buggy_code_is_handed_back_as_the_original_naming_no_bug():
    """The checker's copy of the handed-out code is the notebook's: the notebook's cell, run as it stands, is
    told it is still the original, and nothing of its bug."""
    notebook = Path(__file__).resolve().parents[3] / "notebooks" / "04_multi_head_attention.ipynb"
    result = heads.check_multi_head_attention(
        defined_in_notebook(notebook, "buggy_multi_head_attention"), verbose=False
    )
    assert result.status == "original" and result.misconception is None, result.message
    assert not any(word in result.message for word in ("looks like", "fix", "hint", "transpose", "positions", " V"))


def test_the_last_exercise_climbs_three_labelled_hints_and_gives_no_line_of_code():
    """Its hints go from a nudge to the shapes to the idea, in words: a name in code type, never a statement or a
    call with its arguments (the code lives in the solutions notebook)."""
    notebook = Path(__file__).resolve().parents[3] / "notebooks" / "04_multi_head_attention.ipynb"
    labels, code = last_exercise_hints(notebook)
    assert labels == ["Hint 1 · a nudge", "Hint 2 · the shapes", "Hint 3 · the idea"]
    assert code and not [c for c in code if "=" in c or re.search(r"\w\([^)]", c)], code
