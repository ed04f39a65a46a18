"""The function checkers of notebook 06 (attend_with_cache) name the mistakes
they are built to catch (the module and prediction checkers: ``test_causal_mhsa_with_rope_module.py``).

For each checker: an independent correct solution (written here from torch primitives,
not taken from the package) is "correct"; a stub is "not_attempted"; hand-written
versions of the mistakes the issue lists are named; and every misconception the
checker knows is told apart from the right answer *and* from the others.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import torch
from checker_table import table_tests
from learner_modules import attention_ok
from notebook_cells import defined_in_notebook, last_exercise_hints

from mhsa_helpers.lessons.causal_mhsa_with_rope import exercises as decoding
from mhsa_helpers.rope import RotaryEmbedding


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


def decoding_mask_ok(num_new, total):
    past = total - num_new
    return torch.tensor([[j <= past + i for j in range(total)] for i in range(num_new)])


def _base_of(rope_module):
    return rope_module.base


def _attend_with_cache(q_new, k_new, v_new, cached_k, cached_v, rope_module, *, first_position=None, mask=None):
    """One cached decoding step written from torch primitives; the keyword arguments inject a mistake."""
    past, new = cached_k.shape[-2], q_new.shape[-2]
    start = past if first_position is None else first_position
    positions = torch.arange(start, start + new)
    base = _base_of(rope_module)
    q = rotate_ok(q_new, positions, base)
    k = torch.cat((cached_k, rotate_ok(k_new, positions, base)), dim=-2)
    v = torch.cat((cached_v, v_new), dim=-2)
    return attention_ok(q, k, v, decoding_mask_ok(new, past + new) if mask is None else mask(past, new))


def attend_with_cache_ok(q_new, k_new, v_new, cached_k, cached_v, rope_module):
    return _attend_with_cache(q_new, k_new, v_new, cached_k, cached_v, rope_module)


def attend_with_cache_restarting_positions(q_new, k_new, v_new, cached_k, cached_v, rope_module):
    # the mistake: positions as if the sequence started again
    return _attend_with_cache(q_new, k_new, v_new, cached_k, cached_v, rope_module, first_position=0)


def attend_with_cache_mask_strict(q_new, k_new, v_new, cached_k, cached_v, rope_module):
    def strict(past, new):  # < instead of <=: a new token cannot see itself
        return torch.tensor([[j < past + i for j in range(past + new)] for i in range(new)])

    return _attend_with_cache(q_new, k_new, v_new, cached_k, cached_v, rope_module, mask=strict)


CHECKERS = {
    "attend_with_cache": (decoding.check_attend_with_cache, attend_with_cache_ok, decoding.STEP_MISCONCEPTIONS),
}


# The mistakes the issue asks the checkers to name, written by hand above.
LISTED_MISTAKES = [
    ("attend_with_cache", attend_with_cache_mask_strict, "the query cannot see itself"),
]


(
    test_independent_solution_is_correct,
    test_stub_is_not_attempted,
    test_listed_mistakes_are_named,
    test_every_misconception_is_told_apart,
    test_unknown_wrong_answer_is_incorrect,
    test_a_crash_is_reported_not_raised,
) = table_tests(CHECKERS, LISTED_MISTAKES)


def test_attend_with_cache_cases_have_a_cache():
    # The listed cache mistakes are invisible on an empty cache; every case must hold past keys.
    for case in decoding._step_cases():
        cached_k = case.args[3]
        assert cached_k.shape[-2] >= 1
    assert isinstance(decoding._step_cases()[0].args[5], RotaryEmbedding)


def test_the_handed_out_bug_rewritten_is_still_the_original_and_states_no_fix():
    """Exercise 2 hands out a step that rotates the new tokens from position 0: an answer that still does, however
    it is written, is told it gives what the handed-out code gives, and neither the mistake's name nor its fix."""
    result = CHECKERS["attend_with_cache"][0](attend_with_cache_restarting_positions, verbose=False)
    assert result.status == "original" and "still the original" in result.message
    assert "position" not in result.message and "past" not in result.message


def test_the_notebooks_buggy_code_is_handed_back_as_the_original_naming_no_bug():
    """The checker's copy of the handed-out code is the notebook's: the notebook's cell, run as it stands, is
    told it is still the original, and nothing of its bug."""
    notebook = Path(__file__).resolve().parents[3] / "notebooks" / "06_causal_mhsa_with_rope.ipynb"
    result = CHECKERS["attend_with_cache"][0](defined_in_notebook(notebook, "buggy_attend_with_cache"), verbose=False)
    assert result.status == "original" and result.misconception is None, result.message
    assert not any(word in result.message for word in ("looks like", "fix", "hint", "transpose", "positions", " V"))


def test_the_module_exercise_climbs_three_labelled_hints_and_gives_no_line_of_code():
    """Its hints go from a nudge to the shapes to the idea, in words: a name in code type, never a statement or a
    call with its arguments (the code lives in the solutions notebook)."""
    notebook = Path(__file__).resolve().parents[3] / "notebooks" / "06_causal_mhsa_with_rope.ipynb"
    labels, code = last_exercise_hints(notebook, "### Exercise 4 · Your own causal self-attention")
    assert labels == ["Hint 1 · a nudge", "Hint 2 · the shapes", "Hint 3 · the idea"]
    assert code and not [c for c in code if "=" in c or re.search(r"\w\([^)]", c)], code
