"""Tests every lesson's checker tables share, written once: the six tests of a table of function
checkers (notebooks 04-06) and the two of a catalogue of wrong answers (notebooks 01-03).

A lesson's test file defines ``CHECKERS`` (``name -> (checker, an independent right answer, the
checker's misconceptions)``) and ``LISTED_MISTAKES`` (``(name, a hand-written wrong answer, the name
the checker must give it)``), then binds the tests by name so that pytest collects them there::

    (test_independent_solution_is_correct, ...) = table_tests(CHECKERS, LISTED_MISTAKES)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch


def selectable(test_id: str) -> str:
    """``test_id`` in ASCII without "/" or "\\": mutmut selects a test by its id, and cannot select one holding
    either (pytest escapes other characters, √ say, with a backslash)."""
    return test_id.encode("ascii", "replace").decode().replace("/", " over ").replace("\\", "_")


def stub(*args: Any, **kwargs: Any) -> Any:
    raise NotImplementedError


def table_tests(checkers: dict[str, tuple[Any, Any, Any]], listed: list[tuple[str, Any, str]]) -> tuple[Callable, ...]:
    names = sorted(checkers)
    misconceptions = [(name, m) for name, (_, _, ms) in sorted(checkers.items()) for m in ms]

    @pytest.mark.parametrize("name", names)
    def test_independent_solution_is_correct(name):
        checker, solution, _ = checkers[name]
        result = checker(solution, verbose=False)
        assert result.status == "correct", result.message
        assert result.correct

    @pytest.mark.parametrize("name", names)
    def test_stub_is_not_attempted(name, capsys):
        checker, _, _ = checkers[name]
        result = checker(stub)
        assert result.status == "not_attempted"
        assert not result.correct
        assert "not attempted yet" in capsys.readouterr().out

    @pytest.mark.parametrize(
        ("name", "mistake", "expected"), listed, ids=[selectable(f"{n}-{e}") for n, _, e in listed]
    )
    def test_listed_mistakes_are_named(name, mistake, expected):
        """The first attempt is told the symptom, without the mistake's name; the same answer again is named."""
        checker, _, _ = checkers[name]
        result = checker(mistake, verbose=False)
        assert result.status == "misconception", result.message
        assert result.misconception == expected
        assert result.message == result.symptom and expected not in result.message
        again = checker(mistake, verbose=False)
        assert again.message == again.diagnosis and expected in again.message

    @pytest.mark.parametrize(
        ("name", "misconception"), misconceptions, ids=[selectable(f"{n}-{m.name}") for n, m in misconceptions]
    )
    def test_every_misconception_is_told_apart(name, misconception):
        """Fed as the learner's answer, each known mistake is named as itself: it differs from the
        right answer on some case, and from every misconception listed before it."""
        checker, _, _ = checkers[name]
        result = checker(misconception.implementation, verbose=False)
        if result.status == "original":  # the mistake a debugging exercise hands out: told so, and nothing more
            assert misconception.name not in result.message and misconception.hint not in result.message
            return
        assert result.status == "misconception", result.message
        assert result.misconception == misconception.name
        assert misconception.hint in result.diagnosis and misconception.hint not in result.message
        if misconception.fix:  # the fix only on request
            assert misconception.fix in result.fix and misconception.fix not in result.message + result.diagnosis

    @pytest.mark.parametrize("name", names)
    def test_unknown_wrong_answer_is_incorrect(name):
        checker, solution, _ = checkers[name]

        def off_a_little(*args):
            out = solution(*args)
            return torch.zeros_like(out) if out.dtype == torch.bool else 1.5 * out

        result = checker(off_a_little, verbose=False)
        assert result.status == "incorrect", result.message
        assert "differs from the reference" in result.message

    @pytest.mark.parametrize("name", names)
    def test_a_crash_is_reported_not_raised(name):
        checker, _, _ = checkers[name]

        def crashes(*args):
            raise ValueError("boom")

        result = checker(crashes, verbose=False)
        assert result.status == "error"
        assert "ValueError: boom" in result.message

    return (
        test_independent_solution_is_correct,
        test_stub_is_not_attempted,
        test_listed_mistakes_are_named,
        test_every_misconception_is_told_apart,
        test_unknown_wrong_answer_is_incorrect,
        test_a_crash_is_reported_not_raised,
    )


def catalogue_tests(catalogue: list[Any], label: str) -> tuple[Callable, ...]:
    """The two tests of a lesson's catalogue of learner-style wrong answers (``test_wrong_answers.Wrong``):
    no checker accepts one, each is named as listed and its message says the listed words; and the
    catalogue's verdicts, printed, have none accepted and at least 80% named."""
    from test_wrong_answers import verdict_counts

    @pytest.mark.filterwarnings("ignore:The use of `x.T`")
    @pytest.mark.parametrize("wrong", catalogue, ids=lambda w: selectable(f"{w.checker.__name__}: {w.name}"))
    def test_no_checker_accepts_a_wrong_answer_and_names_it(wrong):
        result = wrong.checker(wrong.function, verbose=False)
        assert result.status not in ("correct", "not_attempted"), f"accepted although wrong: {wrong.name}"
        if wrong.named is not None:
            assert result.status == "misconception" and result.misconception == wrong.named, result.message
        if result.diagnosis:  # a diagnosed mistake is named on a repeat, never on the first attempt
            assert result.message == result.symptom and result.misconception not in result.message
        for words in wrong.says:
            assert words in (result.diagnosis or result.message), result.diagnosis or result.message

    @pytest.mark.filterwarnings("ignore:The use of `x.T`")
    def test_the_catalogue_is_counted(capsys):
        counts = verdict_counts(catalogue)
        with capsys.disabled():
            print(f"\n{label}: catalogue of {len(catalogue)} wrong answers: {counts}")
        assert counts["accepted"] == 0
        assert counts["named"] >= 0.8 * len(catalogue)

    return test_no_checker_accepts_a_wrong_answer_and_names_it, test_the_catalogue_is_counted


#: Changes to PyTorch's global settings a right answer may make (a line copied from a set-up cell), with the words
#: that name each.
STATE_CHANGES = {
    "grad off": (lambda: torch.set_grad_enabled(False), "turned gradients off"),
    "default dtype": (lambda: torch.set_default_dtype(torch.float64), "changed the default dtype"),
    "seed": (lambda: torch.manual_seed(1234), "reset PyTorch's global random generator"),
}


def state_change_tests(right: dict[str, tuple[Any, Any]]) -> Callable:
    """The test that each right answer (``name -> (checker, answer)``) changing one of :data:`STATE_CHANGES` is
    named as such, and the notebook's settings are back after the check."""
    from mhsa_helpers.teaching.checking import STATE_CHANGED

    @pytest.mark.parametrize("change", sorted(STATE_CHANGES))
    @pytest.mark.parametrize("name", sorted(right))
    def test_a_right_answer_that_changes_a_global_setting_is_told_so_and_the_setting_is_back(name, change):
        checker, answer = right[name]
        make_change, words = STATE_CHANGES[change]

        def changing(*args):
            make_change()
            return answer(*args)

        result = checker(changing, verbose=False)
        assert result.status == "misconception" and result.misconception == STATE_CHANGED, result.message
        assert words in result.message
        assert torch.is_grad_enabled() and torch.get_default_dtype() == torch.float32

    return test_a_right_answer_that_changes_a_global_setting_is_told_so_and_the_setting_is_back
