"""What ``CheckResult.hint()`` and ``reveal()`` print for every kind of result (mhsa_helpers.teaching.checking),
and what they record (mhsa_helpers.teaching.feedback). Pinned exactly, found unpinned by mutation testing
(``make mutate``): a result is made by hand, so that each status and each missing rung is tried alone.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from mhsa_helpers.teaching import feedback
from mhsa_helpers.teaching.checking import CheckResult, escalate

WRONG = CheckResult(
    "ex",
    "misconception",
    "[ex] not yet: your output is twice the reference's.",
    misconception="doubled",
    symptom="[ex] not yet: your output is twice the reference's.",
    diagnosis="[ex] not yet: this looks like 'doubled'.",
    fix="[ex] the fix for 'doubled': add, do not multiply.",
    key="mistake: doubled",
)


def printed(capsys, result: CheckResult, *requests: str) -> list[str]:
    for request in requests:
        getattr(result, request)()
    return capsys.readouterr().out.splitlines()


@pytest.mark.parametrize("request_", ["hint", "reveal"])
def test_a_correct_answer_has_nothing_to_hint_or_reveal(capsys, request_):
    right = CheckResult("ex", "correct", "[ex] correct.", key="mistake: doubled", fix="[ex] a fix")
    assert printed(capsys, right, request_) == ["[ex] nothing to hint: your answer is correct."]
    assert feedback.requests("ex") == {"hint": 0, "reveal": 0}


@pytest.mark.parametrize("request_", ["hint", "reveal"])
def test_an_answer_not_attempted_is_sent_to_the_exercises_hints(capsys, request_):
    stub = CheckResult("ex", "not_attempted", "[ex] not attempted yet.", key="mistake: doubled", fix="[ex] a fix")
    assert printed(capsys, stub, request_) == [
        "[ex] nothing to hint yet: write your answer where it says `raise NotImplementedError` (or replace the "
        "`None`), then run the check."
    ]


def test_an_error_is_hinted_by_its_own_message_even_with_a_key(capsys):
    error = CheckResult("ex", "error", "[ex] your function raised KeyError: 'q'.", key="mistake: doubled")
    assert printed(capsys, error, "hint") == ["[ex] your function raised KeyError: 'q'."]
    assert feedback.requests("ex") == {"hint": 0, "reveal": 0}


def test_an_error_with_a_key_reveals_its_fix(capsys):
    error = CheckResult("ex", "error", "[ex] raised.", fix="[ex] the fix.", key="mistake: doubled")
    assert printed(capsys, error, "reveal") == ["[ex] the fix."]


@pytest.mark.parametrize("request_", ["hint", "reveal"])
def test_a_wrong_answer_without_a_key_repeats_its_message(capsys, request_):
    wrong = CheckResult("ex", "incorrect", "[ex] not yet: the values differ.", fix="[ex] never shown")
    assert printed(capsys, wrong, request_) == ["[ex] not yet: the values differ."]
    assert feedback.requests("ex") == {"hint": 0, "reveal": 0}
    assert not feedback.named_before("ex", "")


def test_hints_climb_from_the_name_to_the_fix_and_are_counted(capsys):
    assert printed(capsys, WRONG, "hint") == ["[ex] not yet: this looks like 'doubled'."]
    assert feedback.named_before("ex", "mistake: doubled")
    assert feedback.requests("ex") == {"hint": 1, "reveal": 0}
    assert printed(capsys, WRONG, "hint", "hint") == ["[ex] the fix for 'doubled': add, do not multiply."] * 2
    assert feedback.requests("ex") == {"hint": 1, "reveal": 2}


def test_a_hint_on_a_mistake_named_in_another_exercise_starts_from_its_name(capsys):
    feedback.mark_named("other", "mistake: doubled")
    assert printed(capsys, WRONG, "hint") == ["[ex] not yet: this looks like 'doubled'."]


def test_reveal_gives_the_fix_at_once_and_names_the_mistake(capsys):
    assert printed(capsys, WRONG, "reveal") == ["[ex] the fix for 'doubled': add, do not multiply."]
    assert feedback.named_before("ex", "mistake: doubled")
    assert feedback.requests("ex") == {"hint": 0, "reveal": 1}


def test_without_a_diagnosis_a_hint_goes_to_the_fix(capsys):
    unnamed = CheckResult("ex", "incorrect", "[ex] not yet.", symptom="[ex] not yet.", fix="[ex] fix.", key="differs")
    assert printed(capsys, unnamed, "hint") == ["[ex] fix."]


def test_without_a_fix_reveal_gives_the_diagnosis_then_the_symptom(capsys):
    named = CheckResult("ex", "misconception", "[ex] m", symptom="[ex] not yet: s.", diagnosis="[ex] d.", key="k")
    assert printed(capsys, named, "reveal") == ["[ex] d."]
    unnamed = CheckResult("ex", "incorrect", "[ex] m", symptom="[ex] not yet: look at the scores.", key="differs")
    assert printed(capsys, unnamed, "reveal") == ["[ex] not yet: look at the scores."]


def test_a_mistake_a_hint_has_named_is_named_at_its_first_check(capsys):
    judged = replace(WRONG, message="")  # as judge() leaves it, before escalate() chooses the words
    assert printed(capsys, WRONG, "hint") == [WRONG.diagnosis]
    assert escalate(judged).message == WRONG.diagnosis


def test_a_mistake_named_on_its_repeat_hints_its_fix_next(capsys):
    judged = replace(WRONG, message="")
    assert [escalate(judged).message, escalate(judged).message] == [WRONG.symptom, WRONG.diagnosis]
    assert printed(capsys, judged, "hint") == [WRONG.fix]


def test_only_the_exercises_own_tag_is_taken_off_what_is_repeated(capsys):
    # The exercise's name may hold a space, and the text after its tag a "] " of its own (an index, say).
    error = CheckResult("my ex", "error", "[my ex] your function raised at x[0] here.", key="k")
    assert printed(capsys, error, "hint") == ["[my ex] your function raised at x[0] here."]
    named = CheckResult("my ex", "misconception", "[my ex] m", diagnosis="[my ex] look at x[0] first.", key="k")
    assert printed(capsys, named, "reveal") == ["[my ex] look at x[0] first."]
    unnamed = CheckResult("my ex", "incorrect", "[my ex] m", symptom="[my ex] x[0] differs, x[1] too.", key="k")
    assert printed(capsys, unnamed, "reveal") == ["[my ex] x[0] differs, x[1] too."]
