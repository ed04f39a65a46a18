"""The recall questions that open notebooks 02-11 (``mhsa_helpers.teaching.recall`` and each lesson's ``recall.py``).

Every question's answer is computed when asked, and it must be of a kind the learner can write (a number, a shape,
a letter, True or False); its listed slips must be wrong answers of the same kind; the notebook must show each
question word for word. The checker must accept the answers in any form a learner writes them, tell a wrong one
"too high"/"too low"/"not that one" first, the slip and where to look back only on a repeat, and the answers only
on ``result.reveal()``.
"""

from __future__ import annotations

import importlib
import json
import math
import re
from pathlib import Path

import pytest
import torch

from mhsa_helpers.lessons import LESSONS
from mhsa_helpers.teaching.recall import Question, check_recall

ROOT = Path(__file__).resolve().parents[1]
WITH_RECALL = [item for item in LESSONS if item.recall is not None]
IDS = [f"{item.number:02d}_{item.slug}" for item in WITH_RECALL]


def questions(item):
    return importlib.import_module(f"mhsa_helpers.lessons.{item.slug}.recall").RECALL


@pytest.mark.parametrize("item", WITH_RECALL, ids=IDS)
def test_three_to_five_questions_on_earlier_notebooks_each_with_its_reason(item):
    asked = questions(item)
    assert 3 <= len(asked) <= 5
    for question in asked:
        truth = question.truth()
        assert isinstance(truth, (bool, int, float, tuple, str)), question.prompt
        if isinstance(truth, str):
            assert re.fullmatch(r"[A-E]", truth) and f"({truth})" in question.prompt
        looked_back = int(re.match(r"notebook (\d\d)", question.where).group(1))
        assert looked_back < item.number, question.where
        assert question.reason and question.reason.rstrip().endswith("."), question.reason
        for slip in question.slips:
            assert type(slip) is type(truth) or {type(slip), type(truth)} <= {int, float}, (slip, truth)
            assert slip != truth and not (isinstance(truth, float) and math.isclose(slip, truth, rel_tol=0.02))


@pytest.mark.parametrize("item", WITH_RECALL, ids=IDS)
def test_the_notebook_shows_every_question_word_for_word_and_the_solutions_give_every_answer(item):
    notebook = json.loads((ROOT / item.notebook).read_text(encoding="utf-8"))
    shown = next(
        "".join(cell["source"])
        for cell in notebook["cells"]
        if "".join(cell["source"]).startswith("## Before you start: recall")
    )
    for number, question in enumerate(questions(item), start=1):
        assert f"\n{number}. {question.prompt}" in shown
    solutions = json.loads((ROOT / item.solutions).read_text(encoding="utf-8"))
    told = next("".join(c["source"]) for c in solutions["cells"] if "".join(c["source"]).startswith("## Recall"))
    for number, question in enumerate(questions(item), start=1):
        assert f"\n{number}. {question.prompt} **" in told


@pytest.mark.parametrize("item", WITH_RECALL, ids=IDS)
def test_the_right_answers_are_accepted_with_their_reasons(item, capsys):
    truths = [question.truth() for question in questions(item)]
    result = item.recall(truths)
    assert result.correct, result.message
    printed = capsys.readouterr().out
    assert printed.startswith(f"[recall_{item.number:02d}] correct: all {len(truths)} right.")
    for question in questions(item):
        assert question.reason[1:] in printed


# ------------------------------------------------------------------ the checker on questions of its own

QUESTIONS = (
    Question("a number?", lambda: 8.0, "it is eight.", "notebook 02, section 1", {64: "d_k were used"}),
    Question("a shape?", lambda: (3, 2), "three rows.", "notebook 01, step 1", {(2, 3): "it were transposed"}),
    Question("a letter? (A) or (B)", lambda: "B", "B is right.", "notebook 03"),
    Question("true?", lambda: True, "it is.", "notebook 04"),
    Question("a whole number?", lambda: 15, "fifteen.", "notebook 03"),
)


def test_answers_are_taken_in_the_forms_a_learner_writes_them():
    for answers in (
        [8, (3, 2), "B", True, 15],
        {1: 8.1, 2: [3, 2], 3: " b", 4: True, 5: 15},
        (7.9, torch.Size([3, 2]), "B", True, 15.0),
    ):
        assert check_recall("demo", QUESTIONS, answers, verbose=False).correct, answers


def test_a_near_number_is_right_and_a_farther_one_is_not():
    near = {1: 8.0 * 1.019, 2: (3, 2), 3: "B", 4: True, 5: 15}
    assert check_recall("demo", QUESTIONS, near, verbose=False).correct
    far = {**near, 1: 8.0 * 1.03}
    assert "1 · not yet: too high." in check_recall("demo", QUESTIONS, far, verbose=False).message
    whole = {**near, 5: 15.2}
    assert "5 · not yet: too high." in check_recall("demo", QUESTIONS, whole, verbose=False).message


def test_a_wrong_answer_is_told_its_direction_first_and_its_slip_and_where_to_look_on_a_repeat(capsys):
    answers = {1: 64, 2: (2, 3), 3: "a", 4: False, 5: None}
    first = check_recall("demo", QUESTIONS, answers)
    assert first.status == "incorrect" and first.message == first.symptom
    assert first.message.splitlines() == [
        "[demo] 0 of 5 right:",
        "  1 · not yet: too high. A known slip: `result.hint()` names it.",
        "  2 · not yet: not that shape. A known slip: `result.hint()` names it.",
        "  3 · not yet: not that one.",
        "  4 · not yet: not so.",
        "  5 · not answered yet.",
    ]
    assert "d_k were used" not in capsys.readouterr().out
    assert (first.exercise, first.key) == ("demo", "recall: 1=64 2=(2, 3) 3='a' 4=False")
    again = check_recall("demo", QUESTIONS, answers, verbose=False)
    assert again.message == again.diagnosis
    assert again.message.splitlines() == [
        "[demo] 0 of 5 right:",
        "  1 · not yet: too high. That is the answer if d_k were used. Look back at notebook 02, section 1.",
        "  2 · not yet: not that shape. That is the answer if it were transposed. Look back at notebook 01, step 1.",
        "  3 · not yet: not that one. Look back at notebook 03.",
        "  4 · not yet: not so. Look back at notebook 04.",
        "  5 · not answered yet.",
    ]
    again.reveal()
    assert capsys.readouterr().out.splitlines() == [
        "[demo] the answers:",
        "  1: 8. It is eight.",
        "  2: (3, 2). Three rows.",
        "  3: 'B'. B is right.",
        "  4: True. It is.",
        "  5: 15. Fifteen.",
    ]


def test_a_right_answer_is_shown_with_its_reason_beside_the_wrong_ones():
    result = check_recall("demo", QUESTIONS, {1: 8, 2: None, 3: None, 4: None, 5: 14}, verbose=False)
    assert result.message.splitlines()[:2] == ["[demo] 1 of 5 right:", "  1 · right: 8. It is eight."]
    assert "  5 · not yet: too low." in result.message
    assert (result.exercise, result.key) == ("demo", "recall: 5=14")
    other = check_recall("demo", QUESTIONS, {1: 7, 2: "x", 3: None, 4: True, 5: 15}, verbose=False)
    assert other.message.splitlines()[1:3] == [
        "  1 · not yet: too low.",
        "  2 · not yet: the answer is a shape such as (2, 3), not str 'x'.",
    ]
    again = check_recall("demo", QUESTIONS, {1: 7, 2: "x", 3: None, 4: True, 5: 15}, verbose=False)
    assert again.message.splitlines() == [
        "[demo] 2 of 5 right:",
        "  1 · not yet: too low. Look back at notebook 02, section 1.",
        "  2 · not yet: the answer is a shape such as (2, 3), not str 'x'.",
        "  3 · not answered yet.",
        "  4 · right: True. It is.",
        "  5 · right: 15. Fifteen.",
    ]


def test_only_unanswered_questions_left_and_every_answer_right_word_for_word():
    some = check_recall("demo", QUESTIONS, {1: 8, 2: (3, 2), 3: "B", 4: True, 5: None}, verbose=False)
    assert (some.exercise, some.status, some.key) == ("demo", "incorrect", "recall: unanswered")
    assert some.message.splitlines()[0] == "[demo] 4 of 5 right:"
    right = check_recall("demo", QUESTIONS, [8, (3, 2), "B", True, 15], verbose=False)
    assert (right.exercise, right.status) == ("demo", "correct")
    assert right.message.splitlines() == [
        "[demo] correct: all 5 right.",
        "  1 · right: 8. It is eight.",
        "  2 · right: (3, 2). Three rows.",
        "  3 · right: 'B'. B is right.",
        "  4 · right: True. It is.",
        "  5 · right: 15. Fifteen.",
    ]


def test_an_answer_of_the_wrong_kind_says_what_kind_is_wanted():
    answers = {1: "8", 2: 3, 3: 1, 4: 1, 5: True}
    lines = check_recall("demo", QUESTIONS, answers, verbose=False).message.splitlines()
    assert lines[1:] == [
        "  1 · not yet: the answer is a number, not str '8'.",
        "  2 · not yet: the answer is a shape such as (2, 3), not int 3.",
        "  3 · not yet: the answer is a letter, not int 1.",
        "  4 · not yet: the answer is True or False, not int 1.",
        "  5 · not yet: the answer is a number, not bool True.",
    ]


def test_no_answer_yet_is_not_attempted_and_a_wrong_container_is_an_error(capsys):
    result = check_recall("demo", QUESTIONS, dict.fromkeys(range(1, 6)))
    assert (result.exercise, result.status) == ("demo", "not_attempted")
    assert capsys.readouterr().out == "[demo] not attempted yet: replace each None by your answer.\n"
    with pytest.raises(TypeError, match=r"answers must be a dict such as \{1: \.\.\., 2: \.\.\.\}, got str"):
        check_recall("demo", QUESTIONS, "8", verbose=False)
    with pytest.raises(ValueError, match=r"numbered \[1, 2, 3, 4, 5\], got \[1, 2\]"):
        check_recall("demo", QUESTIONS, {1: 8, 2: (3, 2)}, verbose=False)
    with pytest.raises(ValueError, match=r"got \['1', 2, 3, 4, 5\]"):  # numbers written as text, and as numbers
        check_recall("demo", QUESTIONS, {"1": 8, 2: (3, 2), 3: "B", 4: True, 5: 15}, verbose=False)
