"""Checking a prediction: a number (or a few booleans) the learner writes down before running anything.

A prediction is told whether it is too high or too low, and why-so when it matches a known wrong way of
reasoning (its symptom first, its name when the same reasoning comes again); the value itself is shown only
from the :data:`~mhsa_helpers.teaching.feedback.TRIES_BEFORE_VALUE`-th wrong try on, or by ``result.reveal()``.

The tolerance is tight enough to tell every listed wrong reasoning, and near misses, apart from the truth:
at most a quarter of the smallest gap between the truth and a listed mistake, and at most 2% of the value
(a prediction 10% off is not right), whatever the exercise allows.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import torch

from . import feedback
from .checking import STATE_CHANGED, Case, CheckResult, Misconception, check_function, escalate, judge

__all__ = ["RELATIVE_TOLERANCE", "check_prediction", "prediction_tolerance"]

#: The largest relative error a right prediction may have.
RELATIVE_TOLERANCE = 0.02


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, torch.Tensor) and value.numel() == 1 and value.dtype != torch.bool:
        return float(value.item())
    return None


def prediction_tolerance(truth: float, mistakes: Sequence[float], atol: float) -> float:
    """How far from ``truth`` a right prediction may be: ``atol``, at most :data:`RELATIVE_TOLERANCE` of the
    truth (when it is not 0) and at most a quarter of the gap to the nearest of the ``mistakes``' values."""
    bound = atol
    if truth != 0:
        bound = min(bound, RELATIVE_TOLERANCE * abs(truth))
    gaps = [abs(m - truth) for m in mistakes if math.isfinite(m) and m != truth]
    return min([bound, *(gap / 4 for gap in gaps)])


def check_prediction(
    exercise: str,
    answer: object,
    truth: Callable[[], Any],
    what: str,
    mistakes: Sequence[Misconception] = (),
    *,
    atol: float = math.inf,
    explain: str | Callable[[], str] = "",
    verbose: bool = True,
) -> CheckResult:
    """Check a prediction: ``answer`` is the value (``None`` or ``...`` until filled in) or a function of no
    arguments returning it; ``truth()`` is measured or computed by the package; ``mistakes`` are wrong
    predictions (their ``implementation`` a function of no arguments) with the reasoning that leads to them.

    Numbers must be within :func:`prediction_tolerance` of the truth (whole numbers exactly); a tensor of
    booleans must be equal. ``explain`` (or a function of no arguments giving it, called only for an answer that
    is a value: not for a stub) says why the value is what it is.
    """
    if answer is None or answer is Ellipsis:
        result = CheckResult(
            exercise, "not_attempted", f"[{exercise}] not attempted yet: replace None by your prediction."
        )
        if verbose:
            print(result.message)
        return result
    if not callable(answer) and not isinstance(answer, numbers.Number | torch.Tensor):
        raise TypeError(
            f"learner must be a function returning your prediction, or the value itself, got {type(answer).__name__}"
        )
    learner = answer if callable(answer) else (lambda: answer)
    # A stub, an error or a loop is told without measuring the truth (notebook 11's runs a real model).
    ran = judge(exercise, learner, lambda: None, [Case(())])
    if ran.status in ("not_attempted", "error") or ran.misconception == STATE_CHANGED:
        result = escalate(ran)
        if verbose:
            print(result.message)
        return result
    value = truth()
    exact = _number(value)
    whole = isinstance(value, numbers.Integral) or (isinstance(value, torch.Tensor) and not value.is_floating_point())
    if exact is not None and not whole:  # whole numbers are compared exactly, whatever atol says
        wrong = [_number(m.implementation()) for m in mistakes if m.implementation is not None]
        atol = prediction_tolerance(exact, [w for w in wrong if w is not None], atol)
    result = check_function(
        exercise, learner, lambda: value, [Case((), description=what)], mistakes, atol=atol, rtol=0.0, verbose=False
    )
    if not isinstance(explain, str):
        explain = explain()
    if result.status in ("misconception", "incorrect") and result.key and _comparable(result.got, value):
        result = _told(result, value, explain, mistakes)  # a wrong value, not a wrong form
    elif result.correct:
        told = f". {explain[0].upper()}{explain[1:]}." if explain else "."
        result = replace(result, message=f"[{exercise}] correct: {_shown(value)}{told}")
    if verbose:
        print(result.message)
    return result


def _told(result: CheckResult, value: Any, explain: str, mistakes: Sequence[Misconception]) -> CheckResult:
    """A wrong prediction's messages: higher or lower (and why-so) first, the value only after a few tries."""
    the_value = f"The value is {_shown(value)}{': ' + explain + '.' if explain else '.'}"
    why = next((m.symptom for m in mistakes if m.name == result.misconception and m.symptom), "")
    symptom = f"[{result.exercise}] not yet: {_direction(result.got, value)}."
    if result.misconception:
        symptom += f"{' ' + why if why else ''} A known wrong way to reason: `result.hint()` names it."
    else:
        symptom += " Think it through once more."
    diagnosis = result.diagnosis
    if feedback.wrong_tries(result.exercise) >= feedback.TRIES_BEFORE_VALUE:
        symptom = f"{symptom} {the_value}"
        diagnosis = f"{diagnosis} {the_value}" if diagnosis else ""
    message = diagnosis if diagnosis and result.message == result.diagnosis else symptom
    fix = next((m.fix for m in mistakes if m.name == result.misconception and m.fix), "")
    return replace(
        result,
        message=message,
        symptom=symptom,
        diagnosis=diagnosis,
        fix=f"[{result.exercise}] {fix + ' ' if fix else ''}{the_value}",
    )


def _comparable(got: Any, value: Any) -> bool:
    """True when the learner's answer is a value of the truth's kind: a number for a number, a tensor of the same
    shape and dtype for a tensor."""
    if isinstance(value, torch.Tensor) and value.numel() > 1:
        return isinstance(got, torch.Tensor) and got.shape == value.shape and got.dtype == value.dtype
    return _number(got) is not None


def _shown(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return str(value.tolist())
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _direction(got: Any, value: Any) -> str:
    """Whether the prediction is too high or too low; for a few booleans, how many of them are wrong."""
    mine, truth = _number(got), _number(value)
    if mine is not None and truth is not None:
        return f"your prediction {mine:g} is too {'high' if mine > truth else 'low'}"
    wrong = int((got != value).sum())
    return f"{wrong} of your {value.numel()} answers {'is' if wrong == 1 else 'are'} wrong"
