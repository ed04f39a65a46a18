"""The machinery behind the notebooks' exercise checkers.

A checker runs the learner's function on cases it generates, compares the results
with the package's reference, and — when they differ — with a list of known wrong
implementations, so it can *name* the misconception ("scaled by d_k instead of
sqrt(d_k)") instead of only saying "wrong".

How outputs are compared (:func:`check_function`):

* values within ``atol``/``rtol``, after promoting both sides to a common dtype, so a
  float32 answer may match a float64 reference;
* NaN is an ordinary value: NaN must sit exactly where the other side has NaN. A
  misconception that produces NaN (softmax over a row of ``-inf``, ``exp``
  overflowing) can therefore be named;
* a boolean tensor only matches a boolean tensor: a 0/1 number mask is not a mask.

A stub that still raises ``NotImplementedError`` is reported as not attempted,
without raising, so committed notebooks with unsolved stubs run top to bottom.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = ["Case", "CheckResult", "Misconception", "check_function", "random_tensor", "random_tensors"]


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
    misconception: str | None = None

    @property
    def correct(self) -> bool:
        return self.status == "correct"

    def __str__(self) -> str:
        return self.message


def random_tensor(generator: torch.Generator, *shape: int, scale: float = 1.0) -> torch.Tensor:
    """Standard-normal float64 values of shape ``shape`` times ``scale``, drawn from ``generator``."""
    return torch.randn(*shape, generator=generator, dtype=torch.float64) * scale


def random_tensors(*shapes: Sequence[int], seed: int) -> tuple:
    """One standard-normal float64 tensor per shape in ``shapes``, drawn from a generator seeded
    with ``seed`` (handy for the all-axes-equal ``square_cases`` of :func:`check_function`)."""
    generator = torch.Generator().manual_seed(seed)
    return tuple(random_tensor(generator, *shape) for shape in shapes)


# ------------------------------------------------------------------ comparing outputs


def _as_tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)) and all(isinstance(v, torch.Tensor) for v in value):
        return list(value)
    raise TypeError(f"expected a tensor (or a tuple of tensors), got {type(value).__name__}")


def _is_bool(t: torch.Tensor) -> bool:
    return t.dtype == torch.bool


def _same_tensor(got: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float) -> bool:
    if got.shape != expected.shape:
        return False
    if _is_bool(got) != _is_bool(expected):
        return False  # a 0/1 number tensor is not a mask, and a mask is not a tensor of weights
    got = got.detach()
    if _is_bool(expected):
        return torch.equal(got, expected)
    common = torch.promote_types(got.dtype, expected.dtype)
    return torch.allclose(got.to(common), expected.to(common), atol=atol, rtol=rtol, equal_nan=True)


def _same(got: Any, expected: Any, atol: float, rtol: float) -> bool:
    try:
        got_tensors, expected_tensors = _as_tensors(got), _as_tensors(expected)
    except TypeError:
        return False
    if len(got_tensors) != len(expected_tensors):
        return False
    return all(_same_tensor(g, e, atol, rtol) for g, e in zip(got_tensors, expected_tensors, strict=True))


def _as_numbers(t: torch.Tensor) -> torch.Tensor:
    # Bool tensors cannot be subtracted; every dtype can be measured in float64 (complex128).
    return t.detach().to(torch.complex128 if t.is_complex() else torch.float64)


def _difference(got: Any, expected: Any) -> str:
    """How the first output tensors differ: shapes, dtype kind, NaN positions, largest difference."""
    try:
        got_t, exp_t = _as_tensors(got)[0], _as_tensors(expected)[0]
    except TypeError as exc:
        return str(exc)
    if got_t.shape != exp_t.shape:
        # Shapes are shown only when they differ: "got shape (3, 4), expected shape (3, 4)" helps nobody.
        return f"got shape {tuple(got_t.shape)}, expected shape {tuple(exp_t.shape)}"
    details = []
    if _is_bool(got_t) != _is_bool(exp_t):
        details.append(f"returned dtype {got_t.dtype}, expected {exp_t.dtype}")
    if got_t.numel() == 0:
        return ", ".join(details) or "the shapes match"
    g, e = _as_numbers(got_t), _as_numbers(exp_t)
    nan_mismatch = torch.isnan(g) != torch.isnan(e)
    if nan_mismatch.any():
        where = "your result has NaN" if bool(torch.isnan(g)[nan_mismatch].any()) else "the reference has NaN"
        details.append(f"{where} at {int(nan_mismatch.sum())} position(s) where the other has a number")
    # Equal entries (including equal infinities and NaN against NaN) differ by 0, not by inf - inf = NaN.
    equal = (g == e) | (torch.isnan(g) & torch.isnan(e))
    gaps = (g - e).abs().masked_fill(equal, 0.0)[~nan_mismatch]
    if gaps.numel():
        details.append(f"largest difference {float(gaps.max()):.3g}")
    return ", ".join(details)


# ------------------------------------------------------------------ running a check


def _call(function: Callable[..., Any], case: Case) -> Any:
    # Clone so an in-place mistake in one implementation cannot corrupt the next call.
    args = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in case.args)
    return function(*args, **case.kwargs)


def _describe_args(case: Case) -> str:
    """The arguments a case passes, as a learner reads them: tensors by shape, the rest by value."""

    def describe(value: Any) -> str:
        if isinstance(value, torch.Tensor):
            kind = "bool " if value.dtype == torch.bool else ""
            return f"a {kind}tensor of shape {tuple(value.shape)}"
        return repr(value)

    parts = [describe(a) for a in case.args] + [f"{k}={describe(v)}" for k, v in case.kwargs.items()]
    return ", ".join(parts) if parts else "no arguments"


def _learner_line(exc: BaseException, learner: Callable[..., Any]) -> str:
    """`` in my_function, line 3: `e = x.t()` ``: the learner's own frame where the error was raised
    (the last frame of the traceback in the learner's code, not in torch or this package)."""
    code = getattr(learner, "__code__", None)
    frames = traceback.extract_tb(exc.__traceback__)
    own = [f for f in frames if code is not None and f.filename == code.co_filename]
    if not own:
        return ""
    frame = own[-1]
    line = (frame.line or "").strip()
    shown = f": `{line}`" if line else ""
    return f" (in {frame.name}, line {frame.lineno}{shown})"


def _runs(function: Callable[..., Any], case: Case) -> bool:
    try:
        _call(function, case)
    except Exception:  # any failure means "this case cannot diagnose it"
        return False
    return True


def check_function(
    exercise: str,
    learner: Callable[..., Any],
    reference: Callable[..., Any],
    cases: Sequence[Case],
    misconceptions: Sequence[Misconception] = (),
    *,
    square_cases: Sequence[Case] = (),
    atol: float = 1e-5,
    rtol: float = 1e-4,
    verbose: bool = True,
) -> CheckResult:
    """Run ``learner`` on every case and compare with ``reference``.

    The first case that differs is compared with each misconception in order; the
    first one that reproduces the learner's output *on every case* is named.

    When the learner's function *raises* on some case, it is run again on
    ``square_cases`` — inputs whose axes all have the same length. A layout or
    transposition mistake crashes on rectangular shapes but runs silently on square
    ones; if the outputs there match a misconception, that misconception is named
    together with the crash.

    Prints the result's message when ``verbose`` and returns the :class:`CheckResult`.
    """
    if not callable(learner):
        raise TypeError(f"learner must be a function, got {type(learner).__name__}")
    result = _check(exercise, learner, reference, cases, misconceptions, atol, rtol)
    if result.status == "error" and square_cases:
        runnable = [case for case in square_cases if _runs(learner, case)]
        if runnable:
            square = _check(exercise, learner, reference, runnable, misconceptions, atol, rtol)
            if square.status == "misconception":
                crash = result.message.split("] ", 1)[-1]
                result = CheckResult(
                    exercise,
                    "misconception",
                    f"{square.message} (On rectangular inputs {crash}; on square inputs, where every "
                    f"axis has the same length, the same mistake runs without an error and gives wrong numbers.)",
                    misconception=square.misconception,
                )
    if verbose:
        print(result.message)
    return result


def _check(exercise, learner, reference, cases, misconceptions, atol, rtol) -> CheckResult:
    learner_outputs = []
    for case in cases:
        try:
            learner_outputs.append(_call(learner, case))
        except NotImplementedError:
            return CheckResult(
                exercise,
                "not_attempted",
                f"[{exercise}] not attempted yet: replace the `raise NotImplementedError` line "
                "(or a function it calls still raises NotImplementedError).",
            )
        except Exception as exc:  # the learner's code may fail in any way; report, don't crash the notebook
            return CheckResult(
                exercise,
                "error",
                f"[{exercise}] your function raised {type(exc).__name__}: {exc}{_learner_line(exc, learner)}. "
                f"It was called with {_describe_args(case)}"
                f"{' (' + case.description + ')' if case.description else ''}; "
                "check which shapes your code assumes.",
            )
    expected_outputs = [_call(reference, case) for case in cases]
    first_wrong = next(
        (
            i
            for i, (g, e) in enumerate(zip(learner_outputs, expected_outputs, strict=True))
            if not _same(g, e, atol, rtol)
        ),
        None,
    )
    if first_wrong is None:
        return CheckResult(exercise, "correct", f"[{exercise}] correct on all {len(cases)} cases.")
    for mistake in misconceptions:
        try:
            mistaken = [_call(mistake.implementation, case) for case in cases]
        except Exception:
            continue
        if all(_same(g, m, atol, rtol) for g, m in zip(learner_outputs, mistaken, strict=True)):
            return CheckResult(
                exercise,
                "misconception",
                f"[{exercise}] not yet: this looks like '{mistake.name}'. {mistake.hint}",
                misconception=mistake.name,
            )
    case = cases[first_wrong]
    detail = _difference(learner_outputs[first_wrong], expected_outputs[first_wrong])
    return CheckResult(
        exercise,
        "incorrect",
        f"[{exercise}] not yet: case '{case.description or first_wrong}' differs from the reference ({detail}).",
    )
