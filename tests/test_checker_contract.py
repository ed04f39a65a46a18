"""Every lesson's checkers keep the contract of the checker machinery (a stub is "not attempted", a
learner's exception is reported, not raised, a non-function is a TypeError), and ``check_function`` names
a misconception that produces NaN and uses the square cases only after a crash.

The lesson-specific checker tests live in ``tests/lessons/NN_<name>/``.
"""

from __future__ import annotations

import pytest
import torch

from mhsa_helpers.lessons import LESSONS
from mhsa_helpers.teaching.checking import Case, Misconception, check_function

# Every registered checker (notebooks 04-06 too) treats a stub, a crash and a non-function alike.
ALL_CHECKERS = [checker for lesson in LESSONS for checker in lesson.checkers]


def stub(*args):
    raise NotImplementedError


def crashes(*args):
    raise ZeroDivisionError("learner bug")


@pytest.mark.parametrize("checker", ALL_CHECKERS, ids=lambda c: c.__name__)
def test_stub_is_not_attempted_and_does_not_raise(checker, capsys):
    result = checker(stub)
    assert result.status == "not_attempted"
    assert not result.correct
    assert "not attempted yet" in capsys.readouterr().out


@pytest.mark.parametrize("checker", ALL_CHECKERS, ids=lambda c: c.__name__)
def test_learner_exception_is_reported_not_raised(checker):
    result = checker(crashes, verbose=False)
    assert result.status == "error"
    assert "ZeroDivisionError" in result.message and "learner bug" in result.message


@pytest.mark.parametrize("checker", ALL_CHECKERS, ids=lambda c: c.__name__)
def test_non_function_is_a_type_error(checker):
    with pytest.raises(TypeError, match="learner must be a function"):
        checker("not a function", verbose=False)


def test_check_function_names_a_misconception_that_produces_nan():
    cases = [Case((torch.tensor([0.0, 1.0]),))]
    nan_mistake = Misconception("divides by zero", lambda x: x / 0.0 * 0.0, "hint")
    result = check_function("demo", lambda x: x / 0.0 * 0.0, lambda x: x.clone(), cases, [nan_mistake], verbose=False)
    # 0/0 * 0 is NaN, inf * 0 is NaN: without NaN-aware comparison nothing would match.
    assert result.misconception == "divides by zero"


def test_check_function_square_cases_are_only_used_after_a_crash():
    rectangular = [Case((torch.ones(2, 3),))]
    square = [Case((torch.ones(2, 2) * 2,))]
    mistake = Misconception("transposed", lambda x: x.T, "hint")

    def learner(x):
        return x.T  # the shape differs on the rectangular case: wrong, but no crash

    result = check_function(
        "demo", learner, lambda x: x.clone(), rectangular, [mistake], square_cases=square, verbose=False
    )
    assert result.misconception == "transposed"  # named on the ordinary cases
    assert "rectangular" not in result.message
