"""The machinery behind the notebooks' exercise checkers.

A checker runs the learner's function on cases it generates, compares the results
with the package's reference, and — when they differ — with a list of known wrong
implementations, so it can *name* the misconception ("scaled by d_k instead of
sqrt(d_k)") instead of only saying "wrong".

A stub that still raises ``NotImplementedError`` is reported as not attempted,
without raising, so committed notebooks with unsolved stubs run top to bottom.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, List, Optional, Sequence

import torch

__all__ = ["Case", "Misconception", "CheckResult", "check_function"]


@dataclass(frozen=True)
class Case:
    """One set of arguments for the learner's function, with a short description."""

    args: tuple
    kwargs: dict = field(default_factory=dict)
    description: str = ""


@dataclass(frozen=True)
class Misconception:
    """A known wrong implementation and what to tell a learner whose code matches it."""

    name: str
    implementation: Callable[..., Any]
    hint: str


@dataclass(frozen=True)
class CheckResult:
    """What a checker found. ``status`` is ``"correct"``, ``"not_attempted"``,
    ``"misconception"`` (then ``misconception`` names it), ``"incorrect"`` or ``"error"``."""

    exercise: str
    status: str
    message: str
    misconception: Optional[str] = None

    @property
    def correct(self) -> bool:
        return self.status == "correct"

    def __str__(self) -> str:
        return self.message


def _as_tensors(value: Any) -> List[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)) and all(isinstance(v, torch.Tensor) for v in value):
        return list(value)
    raise TypeError(f"expected a tensor (or a tuple of tensors), got {type(value).__name__}")


def _same(got: Any, expected: Any, atol: float, rtol: float) -> bool:
    try:
        got_tensors, expected_tensors = _as_tensors(got), _as_tensors(expected)
    except TypeError:
        return False
    if len(got_tensors) != len(expected_tensors):
        return False
    for g, e in zip(got_tensors, expected_tensors):
        if g.shape != e.shape:
            return False
        if not torch.allclose(g.detach().to(e.dtype), e, atol=atol, rtol=rtol, equal_nan=False):
            return False
    return True


def _call(function: Callable[..., Any], case: Case) -> Any:
    # Clone so an in-place mistake in one implementation cannot corrupt the next call.
    args = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in case.args)
    return function(*args, **case.kwargs)


def check_function(
    exercise: str,
    learner: Callable[..., Any],
    reference: Callable[..., Any],
    cases: Sequence[Case],
    misconceptions: Sequence[Misconception] = (),
    *,
    atol: float = 1e-5,
    rtol: float = 1e-4,
    verbose: bool = True,
) -> CheckResult:
    """Run ``learner`` on every case and compare with ``reference``.

    The first case that differs is compared with each misconception in order; the
    first one that reproduces the learner's output *on every case* is named.
    Prints the result's message when ``verbose`` and returns the :class:`CheckResult`.
    """
    result = _check(exercise, learner, reference, cases, misconceptions, atol, rtol)
    if verbose:
        print(result.message)
    return result


def _check(exercise, learner, reference, cases, misconceptions, atol, rtol) -> CheckResult:
    if not callable(learner):
        raise TypeError(f"learner must be a function, got {type(learner).__name__}")
    learner_outputs = []
    for case in cases:
        try:
            learner_outputs.append(_call(learner, case))
        except NotImplementedError:
            return CheckResult(
                exercise, "not_attempted", f"[{exercise}] not attempted yet: replace the `raise NotImplementedError` line."
            )
        except Exception as exc:  # the learner's code may fail in any way; report, don't crash the notebook
            return CheckResult(
                exercise,
                "error",
                f"[{exercise}] your function raised {type(exc).__name__}: {exc} (case: {case.description or case.args})",
            )
    expected_outputs = [_call(reference, case) for case in cases]
    first_wrong = next(
        (i for i, (g, e) in enumerate(zip(learner_outputs, expected_outputs)) if not _same(g, e, atol, rtol)),
        None,
    )
    if first_wrong is None:
        return CheckResult(exercise, "correct", f"[{exercise}] correct on all {len(cases)} cases.")
    for mistake in misconceptions:
        try:
            mistaken = [_call(mistake.implementation, case) for case in cases]
        except Exception:
            continue
        if all(_same(g, m, atol, rtol) for g, m in zip(learner_outputs, mistaken)):
            return CheckResult(
                exercise,
                "misconception",
                f"[{exercise}] not yet: this looks like '{mistake.name}'. {mistake.hint}",
                misconception=mistake.name,
            )
    case = cases[first_wrong]
    got, expected = learner_outputs[first_wrong], expected_outputs[first_wrong]
    detail = ""
    try:
        got_t, exp_t = _as_tensors(got)[0], _as_tensors(expected)[0]
        detail = f"got shape {tuple(got_t.shape)}, expected shape {tuple(exp_t.shape)}"
        if got_t.shape == exp_t.shape:
            detail += f", largest difference {float((got_t.detach().to(exp_t.dtype) - exp_t).abs().max()):.3g}"
    except TypeError as exc:
        detail = str(exc)
    return CheckResult(
        exercise,
        "incorrect",
        f"[{exercise}] not yet: case '{case.description or first_wrong}' differs from the reference ({detail}).",
    )
