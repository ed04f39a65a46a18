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


def prediction_tolerance(truth: float | torch.Tensor, mistakes: Sequence[float | torch.Tensor], atol: float) -> float:
    """How far from ``truth`` a right prediction may be: ``atol``, at most :data:`RELATIVE_TOLERANCE` of the
    truth (of its largest entry, for several numbers; not when it is 0) and at most a quarter of the gap to the
    nearest of the ``mistakes``' values (their largest difference, entry by entry)."""
    expected = torch.as_tensor(truth).detach().to(torch.float64)
    scale = float(expected.abs().max()) if expected.numel() else 0.0
    bound = min(atol, RELATIVE_TOLERANCE * scale) if scale else atol
    gaps = []
    for mistake in mistakes:
        wrong = torch.as_tensor(mistake).detach().to(torch.float64)
        if wrong.numel() and wrong.shape == expected.shape and bool(torch.isfinite(wrong).all()):
            gaps.append(float((wrong - expected).abs().max()))
    return min([bound, *(gap / 4 for gap in gaps if gap > 0)])


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

    Numbers, one or a tensor of them, must be within :func:`prediction_tolerance` of the truth (whole numbers
    exactly); a tensor of booleans must be equal. ``explain`` (or a function of no arguments giving it, called
    only for an answer that is a value: not for a stub) says why the value is what it is.
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
    if _number(value) is not None or (isinstance(value, torch.Tensor) and value.is_floating_point()):
        # (whole numbers and booleans are compared exactly, whatever atol says)
        atol = prediction_tolerance(
            value, [w for w in _values(mistakes) if _number(w) is not None or isinstance(w, torch.Tensor)], atol
        )
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


def _values(mistakes: Sequence[Misconception]) -> list[Any]:
    """What the listed wrong reasonings predict; one that cannot be worked out here is left out, as
    :func:`~mhsa_helpers.teaching.checking.check_function` leaves out a mistake that fails on a case."""
    values = []
    for mistake in mistakes:
        if mistake.implementation is None:
            continue
        try:
            values.append(mistake.implementation())
        except Exception:
            continue
    return values


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
    shape and dtype for a tensor. A number equal to the truth but rejected (``tensor([3.])`` for ``tensor(3.)``)
    is not: its form is what is wrong, and "too low" would blame the number."""
    if isinstance(value, torch.Tensor) and value.numel() > 1:
        return isinstance(got, torch.Tensor) and got.shape == value.shape and got.dtype == value.dtype
    return _number(got) is not None and _as_given(got) != _as_given(value)


def _as_given(number: Any) -> Any:
    """A number as a Python number of its own kind: ints exactly (2**53 + 1 and 2**53 are one float, but not one
    number), and a one-element tensor read out rather than compared in a dtype the other side is rounded to."""
    return number.item() if isinstance(number, torch.Tensor) else number


def _shown(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return str(value.tolist())
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _direction(got: Any, value: Any) -> str:
    """Whether the prediction is too high or too low; for a few booleans, how many of them are wrong."""
    if _number(got) is not None and _number(value) is not None:
        mine, truth = _as_given(got), _as_given(value)
        return f"your prediction {float(mine):g} is too {'high' if mine > truth else 'low'}"
    wrong = int((got != value).sum())
    return f"{wrong} of your {value.numel()} answers {'is' if wrong == 1 else 'are'} wrong"
