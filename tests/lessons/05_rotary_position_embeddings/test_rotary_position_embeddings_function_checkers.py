"""The function checkers of notebook 05 (apply_rope, rope_attention) name the mistakes
they are built to catch (the module and prediction checkers: ``test_rotary_position_embeddings_module.py``).

For each checker: an independent correct solution (written here from torch primitives,
not taken from the package) is "correct"; a stub is "not_attempted"; hand-written
versions of the mistakes the issue lists are named; and every misconception the
checker knows is told apart from the right answer *and* from the others.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from checker_table import table_tests
from learner_modules import attention_ok
from notebook_cells import defined_in_notebook, last_exercise_hints

from mhsa_helpers.lessons.rotary_position_embeddings import exercises as rope


def rotate_ok(x, positions, base=10000.0, pairs="interleaved"):
    """Rotate pair (a, b) of row j by positions[j] * theta_i, pairs chosen by ``pairs``."""
    d_head = x.shape[-1]
    out = x.clone()
    for j, m in enumerate(positions.tolist()):
        for i in range(d_head // 2):
            a, b = (2 * i, 2 * i + 1) if pairs == "interleaved" else (i, i + d_head // 2)
            angle = m * base ** (-2 * i / d_head)
            c, s = math.cos(angle), math.sin(angle)
            xa, xb = x[..., j, a], x[..., j, b]
            out[..., j, a] = xa * c - xb * s
            out[..., j, b] = xa * s + xb * c
    return out


def rope_attention_ok(q, k, v, positions, base):
    return attention_ok(rotate_ok(q, positions, base), rotate_ok(k, positions, base), v)


def rope_attention_rotating_v(q, k, v, positions, base):
    return attention_ok(rotate_ok(q, positions, base), rotate_ok(k, positions, base), rotate_ok(v, positions, base))


def rope_attention_keys_only(q, k, v, positions, base):
    return attention_ok(q, rotate_ok(k, positions, base), v)


def apply_rope_half_split(x, positions, base):
    return rotate_ok(x, positions, base, pairs="half_split")


def rope_attention_half_split(q, k, v, positions, base):
    return attention_ok(rotate_ok(q, positions, base, "half_split"), rotate_ok(k, positions, base, "half_split"), v)


CHECKERS = {
    "apply_rope": (rope.check_apply_rope, rotate_ok, rope.APPLY_MISCONCEPTIONS),
    "rope_attention": (rope.check_rope_attention, rope_attention_ok, rope.ROPE_ATTENTION_MISCONCEPTIONS),
}


# The mistakes the issue asks the checkers to name, written by hand above.
LISTED_MISTAKES = [
    ("rope_attention", rope_attention_keys_only, "RoPE on the keys only"),
    ("apply_rope", apply_rope_half_split, "wrong pairing convention (half-split)"),
    ("rope_attention", rope_attention_half_split, "wrong pairing convention (half-split)"),
]


(
    test_independent_solution_is_correct,
    test_stub_is_not_attempted,
    test_listed_mistakes_are_named,
    test_every_misconception_is_told_apart,
    test_unknown_wrong_answer_is_incorrect,
    test_a_crash_is_reported_not_raised,
) = table_tests(CHECKERS, LISTED_MISTAKES)


def test_the_handed_out_bug_rewritten_is_still_the_original_and_states_no_fix():
    """Exercise 2 hands out attention that rotates V: an answer that still does, however it is written, is told
    it gives what the handed-out code gives, and neither the mistake's name nor its fix."""
    result = rope.check_rope_attention(rope_attention_rotating_v, verbose=False)
    assert result.status == "original" and "still the original" in result.message
    assert "V" not in result.message.split("]", 1)[1] and "RoPE" not in result.message


def test_the_notebooks_buggy_code_is_handed_back_as_the_original_naming_no_bug():
    """The checker's copy of the handed-out code is the notebook's: the notebook's cell, run as it stands, is
    told it is still the original, and nothing of its bug."""
    notebook = Path(__file__).resolve().parents[3] / "notebooks" / "05_rotary_position_embeddings.ipynb"
    result = rope.check_rope_attention(defined_in_notebook(notebook, "buggy_rope_attention"), verbose=False)
    assert result.status == "original" and result.misconception is None, result.message
    assert not any(word in result.message for word in ("looks like", "fix", "hint", "transpose", "positions", " V"))


def test_the_last_exercise_climbs_three_labelled_hints_and_gives_no_line_of_code():
    """Its hints go from a nudge to the shapes to the idea, in words: a name in code type, never a statement or a
    call with its arguments (the code lives in the solutions notebook)."""
    notebook = Path(__file__).resolve().parents[3] / "notebooks" / "05_rotary_position_embeddings.ipynb"
    labels, code = last_exercise_hints(notebook)
    assert labels == ["Hint 1 · a nudge", "Hint 2 · the shapes", "Hint 3 · the idea"]
    assert code and not [c for c in code if "=" in c or re.search(r"\w\([^)]", c)], code
