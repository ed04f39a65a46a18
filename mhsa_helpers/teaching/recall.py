"""Recall before new material: a few short questions on the earlier notebooks at the start of each notebook.

Retrieving what was learned, before it is needed again, strengthens it more than reading it again (Roediger &
Karpicke, 2006). Each notebook from 02 on opens with three to five :class:`Question` s: predict a shape, a number,
or which line is wrong. Every answer is computed by the package (``truth``), so a question cannot drift from the
code it is about, and each comes with its reason.

:func:`check_recall` tells each answer apart: a right one gets its reason at once; a wrong one is told "too high",
"too low" or "not that one" first, and, when the same answer comes again, the wrong reasoning that gives it (when
it is a known one) and where to look back; ``result.reveal()`` shows the answers with their reasons.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from .checking import CheckResult, escalate

__all__ = ["Question", "check_recall"]

#: The largest relative error a right number may have (a recall answer is worked out, not measured).
RELATIVE_TOLERANCE = 0.02


@dataclass(frozen=True)
class Question:
    """One recall question: ``prompt`` as the notebook shows it, ``truth()`` its answer computed by the package (a
    whole number, a number, a shape as a tuple, a letter or a boolean), ``reason`` why it is so, ``where`` the
    notebook and section to look back at, and ``slips``, wrong answers with the wrong reasoning that gives each."""

    prompt: str
    truth: Callable[[], Any]
    reason: str
    where: str
    slips: Mapping[Any, str] = field(default_factory=dict)


def _kind(truth: Any) -> str:
    if isinstance(truth, bool):
        return "True or False"
    if isinstance(truth, tuple):
        return "a shape such as (2, 3)"
    if isinstance(truth, str):
        return "a letter"
    return "a number"


def _given(answer: Any, truth: Any) -> Any:
    """``answer`` in the form of ``truth`` (a tuple for a shape, an upper-case letter), or None when it is not
    of that form."""
    if isinstance(truth, bool):
        return answer if isinstance(answer, bool) else None
    if isinstance(truth, tuple):
        if isinstance(answer, (tuple, list, torch.Size)) and all(isinstance(a, int) for a in answer):
            return tuple(answer)
        return None
    if isinstance(truth, str):
        return answer.strip().upper() if isinstance(answer, str) else None
    if isinstance(answer, bool) or not isinstance(answer, numbers.Real):
        return None
    return answer


def _right(given: Any, truth: Any) -> bool:
    if isinstance(truth, float):
        return math.isclose(given, truth, rel_tol=RELATIVE_TOLERANCE)
    return bool(given == truth)


def _slip(question: Question, given: Any, truth: Any) -> str | None:
    """The wrong reasoning that gives ``given``, when it is a listed one."""
    for value, reasoning in question.slips.items():
        slip = _given(value, truth)
        if slip is not None and _right(given, slip):
            return reasoning
    return None


def _not_right(given: Any, truth: Any) -> str:
    if isinstance(truth, numbers.Real) and not isinstance(truth, bool):
        return "too high" if given > truth else "too low"
    if isinstance(truth, tuple):
        return "not that shape"
    return "not that one" if isinstance(truth, str) else "not so"


def _shown(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else repr(value)


def check_recall(exercise: str, questions: Sequence[Question], answers: object, *, verbose: bool = True) -> CheckResult:
    """Check ``answers`` to ``questions``: a dict from question number (1, 2, ...) to an answer (``None`` until
    given), or a list in question order. Prints the message when ``verbose`` and returns the :class:`CheckResult`:
    correct when every answer is right. An ``answers`` of another type, or of other numbers, is a ``TypeError``
    or ``ValueError``."""
    if isinstance(answers, (list, tuple)):
        answers = dict(enumerate(answers, start=1))
    if not isinstance(answers, Mapping):
        raise TypeError(f"answers must be a dict such as {{1: ..., 2: ...}}, got {type(answers).__name__}")
    numbers_given = sorted(answers, key=str)
    expected = list(range(1, len(questions) + 1))
    if set(answers) != set(expected):
        raise ValueError(f"answers must have one entry per question, numbered {expected}, got {numbers_given}")
    if all(answers[n] is None for n in expected):
        result = CheckResult(
            exercise, "not_attempted", f"[{exercise}] not attempted yet: replace each None by your answer."
        )
        if verbose:
            print(result.message)
        return result
    told, named, fixes, wrong = [], [], [], []
    for n, question in enumerate(questions, start=1):
        truth, answer = question.truth(), answers[n]
        because = question.reason[0].upper() + question.reason[1:]
        right_answer = f"{n}: {_shown(truth)}. {because}"
        if answer is None:
            told.append(f"  {n} · not answered yet.")
            named.append(told[-1])
            fixes.append(right_answer)
            continue
        given = _given(answer, truth)
        if given is None:
            told.append(f"  {n} · not yet: the answer is {_kind(truth)}, not {type(answer).__name__} {answer!r}.")
            named.append(told[-1])
        elif _right(given, truth):
            told.append(f"  {n} · right: {_shown(truth)}. {because}")
            named.append(told[-1])
            continue
        else:
            slip = _slip(question, given, truth)
            told.append(
                f"  {n} · not yet: {_not_right(given, truth)}."
                + (" A known slip: `result.hint()` names it." if slip else "")
            )
            named.append(
                f"  {n} · not yet: {_not_right(given, truth)}. "
                + (f"That is the answer if {slip}. " if slip else "")
                + f"Look back at {question.where}."
            )
        wrong.append(f"{n}={answer!r}")
        fixes.append(right_answer)
    right = len(questions) - len(fixes)
    head = f"[{exercise}] {right} of {len(questions)} right"
    if not fixes:
        message = "\n".join([f"[{exercise}] correct: all {len(questions)} right.", *told])
        result = CheckResult(exercise, "correct", message)
    else:
        result = escalate(
            CheckResult(
                exercise,
                "incorrect",
                "",
                symptom="\n".join([f"{head}:", *told]),
                diagnosis="\n".join([f"{head}:", *named]),
                fix="\n".join([f"[{exercise}] the answers:", *(f"  {fix}" for fix in fixes)]),
                key="recall: " + " ".join(wrong) if wrong else "recall: unanswered",
            )
        )
    if verbose:
        print(result.message)
    return result
