"""The machinery behind the notebooks' exercise checkers.

A checker runs the learner's function on cases it generates, compares the results
with the package's reference, and — when they differ — with a list of known wrong
implementations, so it can *name* the misconception ("scaled by d_k instead of
sqrt(d_k)") instead of only saying "wrong".

How a check runs (:func:`check_function`):

* **in a fixed state**: gradients on, the default dtype float32, a private random generator and one
  thread, whatever the notebook set; the notebook's own settings are back when the check ends;
* **the reference first**, then the learner, each call on its own copies of the case. Any change the
  learner's code makes to PyTorch's global settings (grad mode, default dtype, random generator, threads)
  is undone after the call and *named*: the answer is not yet right;
* **on the teaching cases and on cases drawn at random** (``draw``) from a generator seeded by the
  answer's own code, so the same answer always meets the same cases (a committed notebook stays
  exact) and a changed answer meets new ones: other sizes, a batch, float32 as well as float64,
  inputs that require grad and calls under ``torch.no_grad()``. An answer fitted to the teaching cases
  meets cases it was not fitted to; the message describes the case, and ``result.case`` holds it;
* **every property probe** (a :class:`Misconception` with ``always=True``) runs on every answer, even one
  that matches on every case, and rejects it when it shows the symptom.

How outputs are compared:

* values within ``atol``/``rtol``; the tolerance follows the precision the answer computed in: a float32
  result (or a float64 one carrying float32 rounding) is compared at float32's precision, and said so;
  for float32 inputs the result must be float32 too;
* whole numbers (a Python ``int`` reference, or an integer tensor) are compared exactly, and an integer
  tensor only matches an integer tensor: tokens returned as floats are not tokens. A numpy or 0-d
  tensor whole number is as good as a Python ``int``;
* NaN is an ordinary value: NaN must sit exactly where the other side has NaN. A
  misconception that produces NaN (softmax over a row of ``-inf``, ``exp``
  overflowing) can therefore be named;
* a boolean tensor only matches a boolean tensor: a 0/1 number mask is not a mask;
* the structure must match: a bare tensor where the reference returns one (a one-tuple
  ``(x,)`` or ``[x]`` is not a tensor), the same number of outputs where it returns several,
  and every output is compared (the message names each one that differs).

What the learner is told (:mod:`~mhsa_helpers.teaching.feedback`): the symptom of a mistake first (which
case, what differs, where to look), its name and idea when the same mistake comes again, and its fix only
on request (``result.hint()``, ``result.reveal()``). A debugging exercise handed back unchanged (``original``)
is told so, and nothing more.

What the learner's function may not do:

* change its arguments: every call gets its own deep copy of the case (tensors, and objects
  such as a ``RotaryEmbedding``), and after the learner's call each argument is compared with
  the case; an answer that wrote into an argument (``q /= ...``, ``masked_fill_``, ``x[...] = 0``)
  is rejected, naming the argument. The reference and the misconceptions get fresh copies too,
  so nothing the learner does can make them repeat a mistake;
* run forever: each call has a time limit (:data:`TIME_LIMIT_SECONDS`); a function that does not
  return is stopped and the message points at the line it was running.

Errors are reported at the learner's own line (through any wrapper a checker puts around the
learner); an error raised by a checker's own code is reported as the checker's, and
:class:`AnswerRejected` lets a wrapper turn the form of an answer ("return a boolean mask")
into a plain "not yet".

A stub that still raises ``NotImplementedError`` is reported as not attempted,
without raising, so committed notebooks with unsolved stubs run top to bottom.

A checker of a learner's *class* (``MyBlock``) runs, as the learner's function, a :func:`class_driver`: it builds
the class at a case's size, copies the package's weights in and drives it, and tells a stub of the learner's own
class (not attempted yet) from code outside it that still raises ``NotImplementedError`` (the class it builds on).
"""

from __future__ import annotations

import ast
import copy
import difflib
import hashlib
import inspect
import linecache
import math
import numbers
import os
import signal
import sys
import textwrap
import threading
import time
import traceback
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from types import CodeType, FrameType, FunctionType, TracebackType
from typing import Any

import torch

from . import feedback

__all__ = [
    "IN_PLACE",
    "STATE_CHANGED",
    "AnswerRejected",
    "Case",
    "CheckResult",
    "Misconception",
    "Remembered",
    "check_function",
    "class_driver",
    "escalate",
    "judge",
    "judge_class",
    "learner_line",
    "noted",
    "output_tensor",
    "own_code",
    "raised_outside",
    "random_tensor",
    "random_tensors",
    "roughly_equal",
    "state_changed",
]

#: Seconds one call of the learner's function may take before it is stopped (read at each call,
#: so a test may lower it).
TIME_LIMIT_SECONDS = 10.0

#: The misconception name of an answer that changed one of its arguments.
IN_PLACE = "changed an argument in place"


class AnswerRejected(Exception):
    """Raised by a checker's wrapper around the learner when the *form* of an answer is wrong
    (e.g. "return a boolean mask"); the message is shown to the learner as is."""


class _TimeLimitReached(BaseException):
    # A BaseException, so that a learner's `except Exception:` cannot swallow it.
    pass


@dataclass(frozen=True)
class Case:
    """One set of arguments for the learner's function, with a short description.

    A case drawn at random may also say how it is called: ``dtype`` (float32, say) converts every
    floating tensor argument before the learner's call, while the reference computes in float64 on the
    same rounded numbers and its result is converted back; ``requires_grad`` makes those arguments
    require grad; ``no_grad`` makes the call under ``torch.no_grad()``."""

    args: tuple
    kwargs: dict = field(default_factory=dict)
    description: str = ""
    dtype: torch.dtype | None = None
    requires_grad: bool = False
    no_grad: bool = False


@dataclass(frozen=True)
class Misconception:
    """A known wrong implementation and what to tell a learner whose code matches it.

    ``implementation`` reproduces the mistake: it is named when it gives the learner's outputs on
    every case. ``detect``, when given, tests a *property* of the learner's answer: it receives a
    function that runs the learner (on fresh copies, with the time limit) and returns True when
    the answer shows the mistake's symptom. With both, both must agree (a probe then tells apart
    two mistakes that give the same numbers on the cases); with ``implementation=None`` the
    symptom alone names it, after no exact match was found (so close variants of a mistake, e.g.
    filling with -1e4 instead of adding -10000, are named too).

    What the learner is told, attempt by attempt: ``symptom`` first (what the answer does, without
    naming the mistake), then ``name`` with ``hint`` (the idea behind it), and ``fix`` only on request.

    ``always=True`` makes ``detect`` a property every right answer has: it runs on every answer, even
    one that gives the reference's numbers on every case, and rejects the answer when it finds the
    symptom (a finite fill that works on ordinary scores, a mask that lets the future in only when
    a later token changes)."""

    name: str
    implementation: Callable[..., Any] | None
    hint: str
    detect: Callable[[Callable[..., Any]], bool] | None = None
    fix: str = ""
    symptom: str = ""
    always: bool = False


@dataclass(frozen=True)
class CheckResult:
    """What a checker found. ``status`` is ``"correct"``, ``"not_attempted"``, ``"original"`` (a debugging
    exercise handed back unchanged), ``"misconception"`` (then ``misconception`` names it),
    ``"incorrect"`` or ``"error"``. ``shortcuts`` lists the functions the learner called that do what the
    exercise asks them to write (noted in the message, never a failure).

    ``message`` is what was printed. A wrong answer also carries the next rungs of feedback:
    ``symptom`` (what differs and where), ``diagnosis`` (the mistake named, with its idea) and ``fix``,
    printed by :meth:`hint` (one rung at a time) and :meth:`reveal` (the fix at once); ``case`` is the
    case that showed it (call your function on ``result.case.args``), ``got`` what the answer gave there and
    ``expected`` what the reference gives."""

    exercise: str
    status: str
    message: str
    misconception: str | None = None
    shortcuts: tuple[str, ...] = ()
    symptom: str = ""
    diagnosis: str = ""
    fix: str = ""
    case: Case | None = None
    expected: Any = None
    got: Any = None
    key: str = ""

    @property
    def correct(self) -> bool:
        return self.status == "correct"

    def __str__(self) -> str:
        return self.message

    def hint(self) -> None:
        """Print the next rung of feedback not yet shown for this mistake (its symptom was the check's message):
        its name and the idea behind it, then the fix."""
        if self.status in ("correct", "not_attempted", "error") or not self.key:
            print(
                {
                    "correct": f"[{self.exercise}] nothing to hint: your answer is correct.",
                    "not_attempted": f"[{self.exercise}] nothing to hint yet: write your answer where it says "
                    "`raise NotImplementedError` (or replace the `None`), then run the check.",
                }.get(self.status, f"[{self.exercise}] {self.message.split('] ', 1)[-1]}")
            )
            return
        if self.diagnosis and not feedback.named_before(self.exercise, self.key):
            feedback.mark_named(self.exercise, self.key)
            feedback.asked(self.exercise, "hint")
            print(self.diagnosis)
        else:
            self.reveal()

    def reveal(self) -> None:
        """Print the fix of this answer's mistake (or the value of a prediction)."""
        if self.status in ("correct", "not_attempted") or not self.key:
            self.hint()
            return
        feedback.mark_named(self.exercise, self.key)
        feedback.asked(self.exercise, "reveal")
        print(self.fix or f"[{self.exercise}] {self.diagnosis.split('] ', 1)[-1] or self.symptom.split('] ', 1)[-1]}")


def random_tensor(generator: torch.Generator, *shape: int, scale: float = 1.0) -> torch.Tensor:
    """Standard-normal float64 values of shape ``shape`` times ``scale``, drawn from ``generator``."""
    return torch.randn(*shape, generator=generator, dtype=torch.float64) * scale


def random_tensors(*shapes: Sequence[int], seed: int) -> tuple:
    """One standard-normal float64 tensor per shape in ``shapes``, drawn from a generator seeded
    with ``seed`` (handy for the all-axes-equal ``square_cases`` of :func:`check_function`)."""
    generator = torch.Generator().manual_seed(seed)
    return tuple(random_tensor(generator, *shape) for shape in shapes)


# ------------------------------------------------------------------ describing values


def _is_whole_number(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, numbers.Integral):  # int and numpy integers
        return True
    return (
        isinstance(value, torch.Tensor)
        and value.ndim == 0
        and not value.is_floating_point()
        and (value.dtype != torch.bool and not value.is_complex())
    )


def _is_number(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, numbers.Real):  # int, float and numpy scalars
        return True
    return isinstance(value, torch.Tensor) and value.ndim == 0 and value.dtype != torch.bool and not value.is_complex()


def _describe(value: Any) -> str:
    """What a value is, as a learner reads it: "a tuple of 1 tensor", "None", "a list"."""
    if value is None:
        return "None"
    if isinstance(value, torch.Tensor):
        kind = "bool " if value.dtype == torch.bool else ""
        return f"a {kind}tensor of shape {tuple(value.shape)}"
    if isinstance(value, (tuple, list)):
        kind = type(value).__name__
        if value and all(isinstance(v, torch.Tensor) for v in value):
            return f"a {kind} of {len(value)} tensor{'s' if len(value) != 1 else ''}"
        return f"a {kind} of {len(value)} item{'s' if len(value) != 1 else ''}"
    return f"a {type(value).__name__}"


# ------------------------------------------------------------------ comparing outputs


def _is_bool(t: torch.Tensor) -> bool:
    return t.dtype == torch.bool


def _is_integer_tensor(t: torch.Tensor) -> bool:
    return not (t.is_floating_point() or t.is_complex() or _is_bool(t))


def _as_numbers(t: torch.Tensor) -> torch.Tensor:
    # Bool tensors cannot be subtracted; every dtype can be measured in float64 (complex128).
    return t.detach().to(torch.complex128 if t.is_complex() else torch.float64)


#: Floating dtypes with less precision than float64: a result in one of them is compared at float32's
#: precision, ``LOW_PRECISION_RTOL`` and ``LOW_PRECISION_ATOL`` times the largest expected magnitude (at least 1).
_LOW_PRECISION = (torch.float32, torch.float16, torch.bfloat16)
LOW_PRECISION_RTOL = 1e-4
LOW_PRECISION_ATOL = 2e-5


def _low_precision_tolerance(expected: torch.Tensor, atol: float, rtol: float) -> tuple[float, float]:
    finite = expected.detach()[torch.isfinite(expected.detach())] if expected.numel() else expected.detach()
    scale = max(1.0, float(finite.abs().max())) if finite.numel() else 1.0
    return max(atol, LOW_PRECISION_ATOL * scale), max(rtol, LOW_PRECISION_RTOL)


def _tensor_difference(
    got: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float, low_precision: bool
) -> str | None:
    """None when ``got`` matches ``expected``; otherwise how they differ (never "differ by 0"). A result in
    a low-precision dtype (or any, with ``low_precision``) is compared at float32's precision."""
    if got.shape != expected.shape:
        # Shapes are shown only when they differ: "got shape (3, 4), expected shape (3, 4)" helps nobody.
        return f"got shape {tuple(got.shape)}, expected shape {tuple(expected.shape)}"
    details = []
    if _is_bool(got) != _is_bool(expected):
        # A 0/1 number tensor is not a mask, and a mask is not a tensor of weights.
        details.append(f"returned dtype {got.dtype}, expected {expected.dtype}")
    elif _is_bool(expected):
        if torch.equal(got, expected):
            return None
    elif _is_integer_tensor(expected) and not _is_integer_tensor(got):
        # Tokens, counts and indices are whole numbers: 3.0 in a float tensor is not an index.
        details.append(f"returned dtype {got.dtype}, expected whole numbers ({expected.dtype})")
    elif expected.dtype in _LOW_PRECISION and got.dtype == torch.float64:
        details.append(
            f"returned dtype {got.dtype} for {expected.dtype} inputs: compute in the dtype of the inputs "
            "(a tensor you make takes dtype=x.dtype)"
        )
    else:
        common = torch.promote_types(got.dtype, expected.dtype)
        exact = _is_integer_tensor(expected)  # whole numbers: no tolerance
        if not exact and (low_precision or got.dtype in _LOW_PRECISION or expected.dtype in _LOW_PRECISION):
            atol, rtol = _low_precision_tolerance(expected, atol, rtol)
        g, e = got.detach().to(common), expected.detach().to(common)
        same = torch.equal(g, e) if exact else torch.allclose(g, e, atol=atol, rtol=rtol, equal_nan=True)
        if same:
            return None
    if got.numel() == 0:
        return ", ".join(details) or "the values differ"
    g, e = _as_numbers(got), _as_numbers(expected)
    nan_mismatch = torch.isnan(g) != torch.isnan(e)
    if nan_mismatch.any():
        where = "your result has NaN" if bool(torch.isnan(g)[nan_mismatch].any()) else "the reference has NaN"
        details.append(f"{where} at {int(nan_mismatch.sum())} position(s) where the other has a number")
    # Equal entries (including equal infinities and NaN against NaN) differ by 0, not by inf - inf = NaN.
    equal = (g == e) | (torch.isnan(g) & torch.isnan(e))
    gaps = (g - e).abs().masked_fill(equal, 0.0)[~nan_mismatch]
    # Beside NaN where a number belongs, or a wrong dtype, a gap within the tolerance is no news: only a real one is.
    if gaps.numel() and float(gaps.max()) > (atol if nan_mismatch.any() or details else 0.0):
        details.append(f"largest difference {float(gaps.max()):.3g}")
    return ", ".join(details) or "the values differ"


def _number_difference(got: Any, expected: Any, atol: float, rtol: float) -> str | None:
    if not _is_number(got):
        return f"returned {_describe(got)}, expected a number"
    value = got.item() if isinstance(got, torch.Tensor) else got
    if _is_whole_number(expected):
        want = int(expected)
        if isinstance(value, numbers.Integral) or (math.isfinite(float(value)) and float(value).is_integer()):
            have = int(value)
            return None if have == want else f"returned {have}, expected {want} (off by {have - want})"
        return f"returned {value!r}, expected the whole number {want}"
    want_f, have_f = float(expected), float(value)
    if math.isclose(have_f, want_f, rel_tol=rtol, abs_tol=atol) or (math.isnan(have_f) and math.isnan(want_f)):
        return None
    return f"returned {have_f:.6g}, expected {want_f:.6g}"


def _one_difference(got: Any, expected: Any, atol: float, rtol: float, low_precision: bool) -> str | None:
    if isinstance(expected, torch.Tensor) and not (expected.ndim == 0 and _is_number(got)):
        if isinstance(got, (tuple, list)) and len(got) == 1 and isinstance(got[0], torch.Tensor):
            return f"returned {_describe(got)}; return the tensor itself"
        if not isinstance(got, torch.Tensor):
            return f"expected a tensor, got {_describe(got)}"
        return _tensor_difference(got, expected, atol, rtol, low_precision)
    if _is_number(expected):
        return _number_difference(got, expected, atol, rtol)
    try:
        same = bool(got == expected)
    except Exception:  # values that cannot be compared with == are not the same
        same = False
    return None if same else f"returned {_describe(got)}, expected {expected!r}"


def _output_name(index: int, names: Sequence[str]) -> str:
    return f"output {index + 1} ({names[index]})" if index < len(names) else f"output {index + 1}"


def _difference(
    got: Any, expected: Any, atol: float, rtol: float, names: Sequence[str] = (), low_precision: bool = False
) -> str | None:
    """None when ``got`` matches ``expected``; otherwise what differs, naming each output that does. With
    ``low_precision`` tensors are compared at float32's precision."""
    if not isinstance(expected, (tuple, list)):
        return _one_difference(got, expected, atol, rtol, low_precision)
    listed = ", ".join(names[: len(expected)])
    wanted = f"{len(expected)} outputs" + (f" ({listed})" if listed else "")
    if not isinstance(got, (tuple, list)):
        return f"returned {_describe(got)}, expected {wanted}"
    if len(got) > len(expected):
        extra = ", ".join(f"output {i + 1}" for i in range(len(expected), len(got)))
        return f"returned {len(got)} outputs, expected {wanted}: {extra} extra"
    if len(got) < len(expected):
        missing = ", ".join(_output_name(i, names) for i in range(len(got), len(expected)))
        return f"returned {len(got)} output{'s' if len(got) != 1 else ''}, expected {wanted}: {missing} missing"
    parts = []
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        detail = _one_difference(g, e, atol, rtol, low_precision)
        if detail is not None:
            parts.append(f"{_output_name(i, names)}: {detail}")
    if not parts:
        return None
    matching = len(expected) - len(parts)
    others = {0: "", 1: " (the other output matches)"}.get(matching, f" (the other {matching} outputs match)")
    return "; ".join(parts) + others


def _same(got: Any, expected: Any, atol: float, rtol: float) -> bool:
    return _difference(got, expected, atol, rtol) is None


# ------------------------------------------------------------------ whose code is this


#: Where torch's own code lives: a NotImplementedError raised there is torch's, not a stub of the learner's.
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_LIBRARY_DIRS = (
    _TORCH_DIR,
    *(
        os.path.dirname(os.path.abspath(path)) + os.sep
        for path in (os.__file__, os.path.dirname(os.path.abspath(__file__)))
    ),
)


def _library_file(filename: str) -> bool:
    """True for torch, the standard library, installed packages and this package: code that is not
    the learner's (a notebook cell, a script or a test file is)."""
    if filename.startswith("<frozen"):
        return True
    path = os.path.abspath(filename)
    parts = path.split(os.sep)
    return any(path.startswith(d) for d in _LIBRARY_DIRS) or "site-packages" in parts or "dist-packages" in parts


def _learner_codes(learner: Callable[..., Any]) -> set[CodeType]:
    """The code objects where the learner's own function starts: under a checker's wrappers
    (``functools.wraps`` sets ``__wrapped__``) and ``functools.partial``, at most 20 deep (so a ``__wrapped__``
    that leads back to itself ends); for a module, its ``forward``; for an object, its class's ``__call__``."""
    function: Any = learner
    for _ in range(20):
        inner = getattr(function, "__wrapped__", None) or getattr(function, "func", None)
        if not callable(inner):
            break
        function = inner
    codes = set()
    call = vars(type(function)).get("__call__")  # a class of the learner's with its own __call__
    for candidate in (function, getattr(function, "forward", None), call):
        candidate = getattr(candidate, "__func__", candidate)
        code = getattr(candidate, "__code__", None)
        if isinstance(code, CodeType) and not _library_file(code.co_filename):
            codes.add(code)
    return codes


def _frame_line(frame: FrameType, lineno: int) -> str:
    summary = traceback.FrameSummary(frame.f_code.co_filename, lineno, frame.f_code.co_name)
    line = (summary.line or "").strip()
    shown = f": `{line}`" if line else ""
    return f"in {frame.f_code.co_name}, line {lineno}{shown}"


def _learner_frames(tb: TracebackType | None, learner: Callable[..., Any]) -> list[tuple[FrameType, int]] | None:
    """The frames of the traceback from the learner's function on, or None when the error never
    reached the learner's code (it was raised by a checker's wrapper)."""
    frames = list(traceback.walk_tb(tb))
    codes = _learner_codes(learner)
    if not codes:  # a builtin or an object we cannot see into: every frame is the learner's
        return [(f, n) for f, n in frames if not _library_file(f.f_code.co_filename)] or frames[-1:]
    start = next((i for i, (f, _) in enumerate(frames) if f.f_code in codes), None)
    return None if start is None else frames[start:]


def _learner_line(frames: Sequence[tuple[FrameType, int]]) -> str:
    """`` (in my_function, line 3: `e = x.t()`)``: the learner's own line where the error was
    raised -- the last frame of the learner's code, not of torch or this package."""
    own = [(f, n) for f, n in frames if not _library_file(f.f_code.co_filename)]
    if not own:
        return ""
    return f" ({_frame_line(*own[-1])})"


def learner_line(error: BaseException) -> str:
    """`` (in __init__, line 4: `self.w_q = ...`)``: the last line of the learner's own code in ``error``'s
    traceback (not torch's, nor this package's), or "" when the error never reached it."""
    own = [(f, n) for f, n in traceback.walk_tb(error.__traceback__) if not _library_file(f.f_code.co_filename)]
    return f" ({_frame_line(*own[-1])})" if own else ""


def _enclosing_loop(frame: FrameType, lineno: int, kinds: tuple[type[ast.stmt], ...]) -> str:
    """`` the loop at line 5: `while i < n:` ``, the innermost loop of ``kinds`` in the learner's code
    around ``lineno`` (read from the source, which Jupyter keeps for each cell), or ""."""
    try:
        lines, first_line = inspect.getsourcelines(frame.f_code)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError):
        return ""
    offset = max(first_line, 1) - 1
    loops = [
        node.lineno + offset
        for node in ast.walk(tree)
        if isinstance(node, kinds) and node.lineno + offset <= lineno <= (node.end_lineno or 0) + offset
    ]
    if not loops:
        return ""
    start = max(loops)
    if start == lineno:
        return ""  # the stopped line is the loop's own line, shown already
    text = linecache.getline(frame.f_code.co_filename, start).strip()
    return f", inside the loop at line {start}: `{text}`" if text else ""


def _stopped_where(frames: Sequence[tuple[FrameType, int]]) -> str:
    """Where a stopped function was: the line of the learner's function, the line deeper in the
    learner's code that was running at that moment (when it is another one), and the loop around it."""
    own = [(f, n) for f, n in frames if not _library_file(f.f_code.co_filename)]
    if not own:
        return ""
    outer, inner = _frame_line(*own[0]), _frame_line(*own[-1])
    where = f" ({outer})" if len(own) == 1 else f" ({outer}; deeper, {inner})"
    # A `while` loop is the likelier culprit than a `for` loop over a range, wherever it is.
    loop = next(
        (
            text
            for kinds in ((ast.While,), (ast.For,))
            for text in (_enclosing_loop(f, n, kinds) for f, n in reversed(own))
            if text
        ),
        "",
    )
    return where + loop


# ------------------------------------------------------------------ calling the learner


@contextmanager
def _alarm(seconds: float) -> Iterator[None]:
    def stop(signum: int, frame: Any) -> None:
        raise _TimeLimitReached

    previous = signal.signal(signal.SIGALRM, stop)
    outer_delay, _ = signal.setitimer(signal.ITIMER_REAL, seconds)
    started = time.monotonic()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer_delay:  # someone else's alarm was pending (a test runner's timeout): give back what is left
            signal.setitimer(signal.ITIMER_REAL, max(outer_delay - (time.monotonic() - started), 1e-3))


class _Stopped(Exception):
    """The learner's function ran out of time; ``where`` is the line it was running."""

    def __init__(self, where: str) -> None:
        super().__init__(where)
        self.where = where


def _call_with_time_limit(
    function: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], learner: Callable[..., Any]
) -> Any:
    seconds = TIME_LIMIT_SECONDS
    if seconds is None or seconds <= 0:
        return function(*args, **kwargs)
    if hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread():
        # Linux and macOS, a Jupyter kernel or Colab: the alarm interrupts the learner's loop where it is.
        grad = torch.is_grad_enabled()
        try:
            with _alarm(seconds):
                return function(*args, **kwargs)
        except _TimeLimitReached as stop:
            # The alarm can land inside a `torch.no_grad()` being entered (nn.Linear's initialisation has
            # one), which then never exits: the stop, not the learner, turned gradients off.
            torch.set_grad_enabled(grad)
            frames = _learner_frames(stop.__traceback__, learner) or []
            raise _Stopped(_stopped_where(frames)) from None
    # Elsewhere (Windows, a worker thread): run in a daemon thread and stop waiting for it. The thread
    # keeps the stack of the learner's frames it is in (calls and returns only), to say where it was.
    box: dict[str, Any] = {}
    stack: list[FrameType] = []

    def follow(frame: FrameType, event: str, arg: Any) -> None:
        if _library_file(frame.f_code.co_filename):
            return
        if event == "call":
            stack.append(frame)
        elif event == "return" and stack and stack[-1] is frame:
            stack.pop()

    grad = torch.is_grad_enabled()  # grad mode is per thread: the worker gets the caller's

    def run() -> None:
        sys.setprofile(follow)
        try:
            with torch.set_grad_enabled(grad):
                box["value"] = function(*args, **kwargs)
        except BaseException as exc:  # handed back to the caller's thread below
            box["error"] = exc
        finally:
            sys.setprofile(None)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        raise _Stopped(_stopped_where([(frame, frame.f_lineno) for frame in list(stack)]))
    if "error" in box:
        raise box["error"]
    return box.get("value")


def _fresh(value: Any) -> Any:
    # Every call gets its own copy, so that no call (the learner's, the reference's) sees another's edits.
    try:
        return copy.deepcopy(value)
    except Exception:  # an argument that cannot be copied is passed as it is
        return value


def _converted(value: Any, dtype: torch.dtype | None, requires_grad: bool) -> Any:
    """``value`` with its floating tensors (also inside a tuple or list) in ``dtype`` and requiring grad."""
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        tensor = value.detach().to(dtype or value.dtype)
        return tensor.requires_grad_() if requires_grad else tensor
    if isinstance(value, (tuple, list)):
        return type(value)(_converted(v, dtype, requires_grad) for v in value)
    return value


def _arguments(case: Case, *, reference: bool = False) -> tuple[tuple, dict]:
    """Fresh copies of the case's arguments, as the learner gets them (in the case's dtype, requiring grad
    when it says so) or, with ``reference``, as the reference gets them: the same numbers in float64."""
    args, kwargs = _fresh(case.args), _fresh(case.kwargs)
    if case.dtype is None and not case.requires_grad:
        return args, kwargs

    def convert(value: Any) -> Any:
        value = _converted(value, case.dtype, not reference and case.requires_grad)
        return _converted(value, torch.float64, False) if reference and case.dtype is not None else value

    return tuple(convert(a) for a in args), {k: convert(v) for k, v in kwargs.items()}


def _as_floats_of(value: Any, dtype: torch.dtype) -> Any:
    """``value``'s floating tensors (also inside a tuple or list) in ``dtype``."""
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.detach().to(dtype)
    if isinstance(value, (tuple, list)):
        return type(value)(_as_floats_of(v, dtype) for v in value)
    return value


def _expected(function: Callable[..., Any], case: Case) -> Any:
    """What the reference gives on ``case``: computed in float64 on the numbers the learner gets, then
    converted to the case's dtype."""
    args, kwargs = _arguments(case, reference=True)
    with torch.no_grad() if case.no_grad else nullcontext():
        value = function(*args, **kwargs)
    return value if case.dtype is None else _as_floats_of(value, case.dtype)


def _mistaken(function: Callable[..., Any], case: Case) -> Any:
    """What a known mistake gives on ``case``, computed as the learner computes, in the case's dtype: a
    mistake that overflows in float32 (exp of a large score) overflows here too."""
    args, kwargs = _arguments(case)
    with torch.no_grad() if case.no_grad else nullcontext():
        return function(*(_converted(a, None, False) for a in args), **kwargs)


# ------------------------------------------------------------------ the notebook's settings, kept apart


#: The misconception name of an answer that changed PyTorch's global settings.
STATE_CHANGED = "changed the notebook's global PyTorch settings"

#: What each global setting a learner's function may change is called, and what to do instead.
STATE_ADVICE = {
    "grad": (
        "turned gradients off for the rest of the notebook (`torch.set_grad_enabled(False)`)",
        "where no gradient is needed, put those lines under `with torch.no_grad():`, which ends with its block",
    ),
    "dtype": (
        "changed the default dtype for the rest of the notebook (`torch.set_default_dtype`)",
        "make new tensors in the dtype of the inputs (`dtype=x.dtype`) instead",
    ),
    "rng": (
        "used or reset PyTorch's global random generator (`torch.manual_seed`, a random draw, dropout)",
        "this function needs no random numbers: leave the notebook's generator alone",
    ),
    "threads": (
        "changed how many threads PyTorch uses (`torch.set_num_threads`)",
        "leave the number of threads to the notebook",
    ),
}


@dataclass(frozen=True)
class _Settings:
    """PyTorch's global settings that code can change behind a caller's back."""

    grad: bool
    dtype: torch.dtype
    threads: int
    rng: torch.Tensor

    @classmethod
    def now(cls) -> _Settings:
        return cls(torch.is_grad_enabled(), torch.get_default_dtype(), torch.get_num_threads(), torch.get_rng_state())

    def restore(self) -> list[str]:
        """Put these settings back; the names (keys of :data:`STATE_ADVICE`) of those that had changed."""
        changed = []
        if torch.is_grad_enabled() != self.grad:
            changed.append("grad")
            torch.set_grad_enabled(self.grad)
        if torch.get_default_dtype() != self.dtype:
            changed.append("dtype")
            torch.set_default_dtype(self.dtype)
        if torch.get_num_threads() != self.threads:
            changed.append("threads")
            torch.set_num_threads(self.threads)
        if not torch.equal(torch.get_rng_state(), self.rng):
            changed.append("rng")
            torch.set_rng_state(self.rng)
        return changed


@contextmanager
def checking_state() -> Iterator[None]:
    """The state every check runs in, whatever the notebook set: gradients on, the default dtype float32,
    one thread (hundreds of tiny tensors run faster so) and the global random generator seeded with 0 (and one
    number drawn).
    The notebook's own settings, random state included, are back when the block ends."""
    saved = _Settings.now()
    torch.set_grad_enabled(True)
    torch.set_default_dtype(torch.float32)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    torch.rand(1)  # a state no torch.manual_seed(n) gives: a learner's reset to seed 0 shows as a change too
    try:
        yield
    finally:
        saved.restore()


@contextmanager
def watching_settings(changes: list[str], *, ignore: Sequence[str] = ()) -> Iterator[None]:
    """Undo, when the block ends, any change the code in it made to PyTorch's global settings, and add the
    names of those settings (keys of :data:`STATE_ADVICE`, not in ``ignore``) to ``changes``."""
    settings = _Settings.now()
    try:
        yield
    finally:
        for name in settings.restore():
            if name not in changes and name not in ignore:
                changes.append(name)


def state_changed(exercise: str, changes: Sequence[str]) -> CheckResult:
    """The verdict on code that changed PyTorch's global settings ``changes`` (keys of :data:`STATE_ADVICE`,
    already put back): what it changed and what to write instead, at once (no symptom first: nothing to find)."""
    done = " and ".join(STATE_ADVICE[name][0] for name in changes)
    advice = "; ".join(STATE_ADVICE[name][1] for name in changes)
    return CheckResult(
        exercise,
        "misconception",
        f"[{exercise}] not yet: your code {done}. The checker put {'it' if len(changes) == 1 else 'them'} back; "
        f"{advice}.",
        misconception=STATE_CHANGED,
    )


# ------------------------------------------------------------------ cases drawn for the answer


def _code_text(code: CodeType) -> str:
    # A nested code object's own repr holds its address, which changes from run to run: its text instead.
    consts = [_code_text(c) if isinstance(c, CodeType) else repr(c) for c in code.co_consts]
    return repr((code.co_code, consts, code.co_names))


def answer_seed(learner: Callable[..., Any]) -> int:
    """A seed made from the learner's own code (its source, or its compiled code where there is no
    source): the same answer always draws the same cases, an answer changed in any way draws others."""
    function: Any = learner
    for _ in range(20):
        inner = getattr(function, "__wrapped__", None) or getattr(function, "func", None)
        if not callable(inner):
            break
        function = inner
    target = type(function) if isinstance(function, torch.nn.Module) else function
    try:
        text = inspect.getsource(target)
    except (OSError, TypeError):
        text = _compiled_text(target)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big")


def _compiled_text(target: Any) -> str:
    """The code of an answer whose source no file holds: a function's compiled code, a class's methods' (a class
    defined in a notebook cell, which inspect cannot find), or else its name."""
    if isinstance(target, type):
        methods = [value.__code__ for value in vars(target).values() if isinstance(value, FunctionType)]
        if methods:
            return target.__qualname__ + repr([_code_text(code) for code in methods])
    code = getattr(getattr(target, "__func__", target), "__code__", None)
    return _code_text(code) if isinstance(code, CodeType) else getattr(target, "__qualname__", repr(type(target)))


#: How the cases drawn for an answer are called, in turn (those with floating tensors): as drawn; in float32
#: with inputs that require grad; under torch.no_grad(); in float32.
_VARIANTS: tuple[dict[str, Any], ...] = (
    {},
    {"dtype": torch.float32, "requires_grad": True},
    {"no_grad": True},
    {"dtype": torch.float32},
)


def _has_floats(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return value.is_floating_point()
    return isinstance(value, (tuple, list)) and any(_has_floats(v) for v in value)


def _variant(case: Case, index: int) -> Case:
    if not any(_has_floats(v) for v in (*case.args, *case.kwargs.values())):
        return case
    how = _VARIANTS[index % len(_VARIANTS)]
    said = [
        text
        for key, text in (
            ("dtype", "float32"),
            ("requires_grad", "inputs that require grad"),
            ("no_grad", "under torch.no_grad()"),
        )
        if how.get(key)
    ]
    described = case.description + (f", {', '.join(said)}" if said else "")
    return replace(case, description=described, **how)


def drawn_cases(draw: Callable[[torch.Generator], Sequence[Case]] | None, learner: Callable[..., Any]) -> list[Case]:
    """The cases ``draw`` makes from a generator seeded by :func:`answer_seed`, each called in one of the
    ways of :data:`_VARIANTS` in turn."""
    if draw is None:
        return []
    generator = torch.Generator().manual_seed(answer_seed(learner))
    return [_variant(case, i) for i, case in enumerate(draw(generator))]


def _tensors_of(value: Any, depth: int = 0) -> list[tuple[str, Any]]:
    """Tensors and plain values inside an argument, by path, to see whether a call changed them: looked for
    three containers (lists, tuples, dicts, objects' attributes) deep, so a large or self-referring argument
    is looked at quickly."""
    if isinstance(value, torch.Tensor):
        return [("", value)]
    if depth > 2:
        return []
    if isinstance(value, (int, float, str, bool, complex, type(None))):
        return [("", value)]
    if isinstance(value, (tuple, list)):
        return [(f"[{i}]{p}", t) for i, v in enumerate(value) for p, t in _tensors_of(v, depth + 1)]
    if isinstance(value, dict):
        return [(f"[{k!r}]{p}", t) for k, v in value.items() for p, t in _tensors_of(v, depth + 1)]
    found: list[tuple[str, Any]] = []
    if isinstance(value, torch.nn.Module):
        found += [(f".{n}", t) for n, t in value.named_parameters()] + [(f".{n}", t) for n, t in value.named_buffers()]
    attributes = getattr(value, "__dict__", {})
    for name, attribute in attributes.items():
        if name.startswith("_") and isinstance(value, torch.nn.Module):
            continue  # the module's own bookkeeping; its parameters and buffers are listed above
        found += [(f".{name}{p}", t) for p, t in _tensors_of(attribute, depth + 1)]
    return found


def _unchanged(before: Any, after: Any) -> bool:
    if isinstance(before, torch.Tensor):
        if not isinstance(after, torch.Tensor) or before.shape != after.shape or before.dtype != after.dtype:
            return False
        b, a = before.detach(), after.detach()
        if b.is_floating_point() or b.is_complex():
            return bool(((b == a) | (torch.isnan(b) & torch.isnan(a))).all())
        return torch.equal(b, a)
    try:
        return bool(before == after) or (before != before and after != after)  # NaN equals NaN here
    except Exception:  # a plain value replaced by one it cannot be compared with (a tensor, an array)
        return False


def _changed_part(before: Any, after: Any) -> str | None:
    """None when ``after`` still equals ``before``; otherwise the path of what changed ("" for the whole)."""
    old, new = _tensors_of(before), dict(_tensors_of(after))
    for path, value in old:
        if path not in new or not _unchanged(value, new[path]):
            return path
    return None


def _signature(learner: Callable[..., Any]) -> inspect.Signature:
    """The parameters of the learner's own function: under a checker's wrappers, or a module's ``forward``
    (a module's own signature is ``(*args, **kwargs)``, which every call fits)."""
    function = inspect.unwrap(learner)
    return inspect.signature(function.forward if isinstance(function, torch.nn.Module) else function)


def _parameter_names(learner: Callable[..., Any]) -> list[str]:
    try:
        parameters = _signature(learner).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


class _ChangedArgument(Exception):
    def __init__(self, name: str, part: str, before: Any, after: Any) -> None:
        super().__init__(name)
        self.name, self.part = name, part
        # A tensor whose shape changed was reshaped in place (t_, unsqueeze_, resize_), not written into.
        old = dict(_tensors_of(before)).get(part)
        new = dict(_tensors_of(after)).get(part)
        self.reshaped = (
            (tuple(old.shape), tuple(new.shape))
            if isinstance(old, torch.Tensor) and isinstance(new, torch.Tensor) and old.shape != new.shape
            else None
        )


@dataclass
class _Run:
    """Runs the learner on fresh copies of a case, with the time limit, and checks its arguments; the changes
    the learner's code made to PyTorch's global settings are undone after each call and listed in ``changes``."""

    learner: Callable[..., Any]
    changes: list[str] = field(default_factory=list)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.case(Case(args, kwargs))

    def case(self, case: Case) -> Any:
        before, before_kwargs = _arguments(case)
        args, kwargs = _arguments(case)
        with torch.no_grad() if case.no_grad else nullcontext(), watching_settings(self.changes):
            result = _call_with_time_limit(self.learner, args, kwargs, self.learner)
        names = _parameter_names(self.learner)
        for i, (old, new) in enumerate(zip(before, args, strict=True)):
            part = _changed_part(old, new)
            if part is not None:
                raise _ChangedArgument(names[i] if i < len(names) else f"number {i + 1}", part, old, new)
        for key, old in before_kwargs.items():
            part = _changed_part(old, kwargs[key])
            if part is not None:
                raise _ChangedArgument(key, part, old, kwargs[key])
        return result


def _missing_forward(learner: Callable[..., Any]) -> str | None:
    """For an ``nn.Module`` without ``forward``: what to tell the learner (a close name if there is one)."""
    if not isinstance(learner, torch.nn.Module) or type(learner).forward is not torch.nn.Module.forward:
        return None
    own = [
        name for klass in type(learner).__mro__ if klass.__module__ != "torch.nn.modules.module" for name in vars(klass)
    ]
    close = difflib.get_close_matches("forward", [n for n in own if not n.startswith("__")], n=1, cutoff=0.6)
    name = type(learner).__name__
    if close:
        return f"your module {name} has no `forward` method; did you spell it `{close[0]}`?"
    return f"your module {name} has no `forward` method: PyTorch calls `forward(self, ...)` when the module is called."


# ------------------------------------------------------------------ noticing shortcuts


def _watching(names: Sequence[str], found: list[str]) -> Callable[..., Any]:
    """A profile function that records calls, made directly from the learner's code, of a torch or
    package function with one of ``names`` (``torch.softmax``, ``x.softmax``, ``mh.split_heads``)."""
    wanted = set(names)

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "c_call":
            name = getattr(arg, "__name__", None)
            if name in wanted and not _library_file(frame.f_code.co_filename):
                owner = getattr(arg, "__self__", None)
                module = getattr(owner, "__name__", "")
                prefix = (
                    "Tensor."
                    if isinstance(owner, torch.Tensor)
                    else "torch.nn.functional."
                    if module.startswith("torch._C._nn")
                    else "torch."
                )
                found.append(prefix + name)
        elif event == "call":
            code, caller = frame.f_code, frame.f_back
            qualname = getattr(code, "co_qualname", code.co_name)
            owner_name = qualname.split(".")[0]
            name = code.co_name if code.co_name in wanted else owner_name if owner_name in wanted else None
            if not (name and _library_file(code.co_filename) and caller):
                return
            # Called by the learner's code, directly or through one decorator (the package checks arguments so).
            if not _library_file(caller.f_code.co_filename) or (
                caller.f_back is not None and not _library_file(caller.f_back.f_code.co_filename)
            ):
                found.append(f"{frame.f_globals.get('__name__', '')}.{name}".lstrip("."))

    return profile


@contextmanager
def _watching_calls(names: Sequence[str]) -> Iterator[list[str]]:
    """Records, while active, the calls of functions named ``names`` made by the learner's code."""
    found: list[str] = []
    if not names:
        yield found
        return
    previous = sys.getprofile()
    sys.setprofile(_watching(names, found))
    try:
        yield found
    finally:
        sys.setprofile(previous)


# ------------------------------------------------------------------ running a check


def _describe_args(case: Case) -> str:
    """The arguments a case passes, as a learner reads them: tensors by shape, the rest by value."""

    def describe(value: Any) -> str:
        if isinstance(value, torch.Tensor):
            return _describe(value)
        if isinstance(value, torch.nn.Module):
            return f"a {type(value).__name__}"
        if isinstance(value, list):  # a list of tensors (a cache's chunks) is told by their shapes too
            return "[" + ", ".join(describe(v) for v in value) + "]"
        if isinstance(value, tuple) and value:
            return "(" + ", ".join(describe(v) for v in value) + ("," if len(value) == 1 else "") + ")"
        return repr(value)

    parts = [describe(a) for a in case.args] + [f"{k}={describe(v)}" for k, v in case.kwargs.items()]
    return ", ".join(parts) if parts else "no arguments"


def _runs(learner: Callable[..., Any], case: Case) -> bool:
    try:
        _Run(learner).case(case)
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
    output_names: Sequence[str] = (),
    shortcuts: Sequence[str] = (),
    draw: Callable[[torch.Generator], Sequence[Case]] | None = None,
    original: Callable[..., Any] | None = None,
    verbose: bool = True,
) -> CheckResult:
    """Run ``learner`` on every case and compare with ``reference`` (:func:`judge`), then tell the learner
    what this attempt gets (:func:`escalate`): prints the result's message when ``verbose`` and returns the
    :class:`CheckResult`."""
    result = escalate(
        judge(
            exercise, learner, reference, cases, misconceptions, square_cases=square_cases, atol=atol, rtol=rtol,
            output_names=output_names, shortcuts=shortcuts, draw=draw, original=original,
        )
    )  # fmt: skip
    if verbose:
        print(result.message)
    return result


def judge(
    exercise: str,
    learner: Callable[..., Any],
    reference: Callable[..., Any],
    cases: Sequence[Case],
    misconceptions: Sequence[Misconception] = (),
    *,
    square_cases: Sequence[Case] = (),
    atol: float = 1e-5,
    rtol: float = 1e-4,
    output_names: Sequence[str] = (),
    shortcuts: Sequence[str] = (),
    draw: Callable[[torch.Generator], Sequence[Case]] | None = None,
    original: Callable[..., Any] | None = None,
) -> CheckResult:
    """Run ``learner`` on every case and compare with ``reference``; the verdict, not yet told: a wrong
    answer's ``message`` is empty until :func:`escalate` chooses between its symptom and its diagnosis.

    ``cases`` are the teaching cases the messages name; ``draw(generator)``, when given, makes further
    cases from a generator seeded by the answer's own code (:func:`answer_seed`), each called as drawn, in
    float32 with inputs that require grad, under ``torch.no_grad()`` or in float32, in turn. The check runs
    in :func:`checking_state`; the reference runs first.

    A wrong answer is compared with each misconception; those that reproduce the learner's output *on
    every case* (and whose ``detect`` probe, if any, agrees) fit -- all of them are named, when several
    fit. Misconceptions known only by a symptom (``implementation=None``) are tried when none fits
    exactly. An answer right on every case must still pass every ``always`` probe.

    When the learner's function *raises* on some case, it is run again on
    ``square_cases`` — inputs whose axes all have the same length. A layout or
    transposition mistake crashes on rectangular shapes but runs silently on square
    ones; if the outputs there match a misconception, that misconception is named
    together with the crash.

    ``original`` is the code a debugging exercise hands out: an answer giving its outputs on every case
    is told it is still the original, and nothing more. ``output_names`` names the outputs of a function
    that returns several (the message says which differs); ``shortcuts`` are names of torch or package
    functions that do what the exercise asks the learner to write: a call of one is noted in the
    message, without failing the answer.
    """
    if not callable(learner):
        raise TypeError(f"learner must be a function, got {type(learner).__name__}")
    used: list[str] = []
    with checking_state():
        every = [*cases, *drawn_cases(draw, learner)]
        result = _check(
            exercise, learner, reference, every, misconceptions, atol, rtol, output_names, shortcuts, used, original,
            len(cases),
        )  # fmt: skip
        if result.status == "error" and square_cases:
            runnable = [case for case in square_cases if _runs(learner, case)]
            if runnable:
                square = _check(exercise, learner, reference, runnable, misconceptions, atol, rtol, output_names)
                if square.status == "misconception":
                    crash = result.message.split("] ", 1)[-1].rstrip(".")
                    also = (
                        f"On other inputs {crash}; on square inputs, where every axis has the same length, the same "
                        "code runs without an error and gives wrong numbers"
                    )
                    result = replace(
                        square,
                        symptom=f"{result.message} On square inputs, where every axis has the same length, it runs "
                        "without an error and gives the numbers of a known mistake: `result.hint()` names it.",
                        diagnosis=f"{square.diagnosis} ({also}.)",
                    )
    if used and result.status in ("correct", "misconception", "incorrect"):
        called = ", ".join(f"`{name}`" for name in dict.fromkeys(used))
        note = (
            f" Note: your function calls {called}, which does what this exercise asks you to write yourself; "
            "that is fine in later notebooks, but here write it from the steps above to see how it works."
        )
        result = noted(result, note, tuple(dict.fromkeys(used)))
    return result


def noted(result: CheckResult, note: str, shortcuts: tuple[str, ...]) -> CheckResult:
    """``result`` with ``note`` appended to each of its texts that is not empty and ``shortcuts`` as the package
    pieces it noticed: how a checker says that the answer used what the exercise asks the learner to write."""
    return replace(
        result,
        message=result.message and result.message + note,
        symptom=result.symptom and result.symptom + note,
        diagnosis=result.diagnosis and result.diagnosis + note,
        shortcuts=shortcuts,
    )


def escalate(result: CheckResult) -> CheckResult:
    """The result with the message this attempt gets: a mistake's symptom the first time, its name (and
    the idea behind it) when the same mistake comes again or was already named by a hint. A result whose
    message is already set (correct, an error, an observed change) is told as it is."""
    if result.message or not result.key:
        return result
    count = feedback.seen(result.exercise, result.key)
    named = result.diagnosis and (count > 1 or feedback.named_before(result.exercise, result.key))
    if named:
        feedback.mark_named(result.exercise, result.key)
    return replace(result, message=result.diagnosis if named else result.symptom)


def _with_case(case: Case) -> str:
    return f"It was called with {_describe_args(case)}{' (' + case.description + ')' if case.description else ''}"


def _failure(exercise: str, exc: Exception, learner: Callable[..., Any], case: Case) -> CheckResult:
    """What to tell the learner when running their function on ``case`` raised ``exc``."""
    if isinstance(exc, _Stopped):
        return CheckResult(
            exercise,
            "error",
            f"[{exercise}] not yet: your function did not return within {TIME_LIMIT_SECONDS:g} s and was stopped"
            f"{exc.where}. A loop that never ends? Check that the loop's variable moves towards its end "
            f"(e.g. `i += 1`, or a `for` loop over a range). {_with_case(case)}.",
        )
    if isinstance(exc, _ChangedArgument):
        name = exc.name
        if exc.part and not exc.part.startswith("["):
            # An object (a RotaryEmbedding, a module): one of its tensors or settings was changed.
            part = f"{name}.{exc.part.lstrip('.')}"
            message = (
                f"your function changed its argument `{name}` in place: `{part}` is not what it was (e.g. "
                f"`{part}.neg_()`, `{part} = …`), and the caller's object changed too. Leave `{name}` as it is; "
                "make new tensors from what it gives you."
            )
        elif exc.reshaped is not None and not exc.part:
            old_shape, new_shape = exc.reshaped
            message = (
                f"your function changed its argument `{name}` in place: its shape went from {old_shape} to "
                f"{new_shape} (e.g. `{name}.t_()`, `{name}.unsqueeze_(…)`, `{name}.transpose_(…)`), so the caller's "
                f"tensor changed too. Use the versions without the underscore, which return a new view: "
                f"`{name}.t()`, `{name}.unsqueeze(…)`."
            )
        else:
            what = f"`{name}`" + (f" (at `{name}{exc.part}`)" if exc.part else "")
            message = (
                f"your function changed its argument {what} in place (e.g. `{name} /= …`, "
                f"`{name}.masked_fill_(…)`, `{name}[…] = …`), so the caller's tensor changed too. Work on a copy: "
                f"`{name} = {name} / …`, `masked_fill` without the underscore, or `{name}.clone()` first."
            )
        return CheckResult(exercise, "misconception", f"[{exercise}] not yet: {message}", misconception=IN_PLACE)
    if isinstance(exc, AnswerRejected):
        said = str(exc) if str(exc).endswith(("?", ".", "!")) else f"{exc}."
        return CheckResult(exercise, "incorrect", f"[{exercise}] not yet: {said} {_with_case(case)}.")
    frames = _learner_frames(exc.__traceback__, learner)
    if frames is None:
        # The error never reached the learner's code: either the call itself did not fit the
        # learner's parameters, or a checker's own code failed after the learner returned.
        try:
            signature = _signature(learner)
        except (TypeError, ValueError):
            signature = None
        if signature is not None:
            try:
                signature.bind(*case.args, **case.kwargs)
            except TypeError as mismatch:
                return CheckResult(
                    exercise,
                    "error",
                    f"[{exercise}] not yet: your function takes {signature}, but the exercise calls it with "
                    f"{len(case.args)} argument(s) ({mismatch}). {_with_case(case)}.",
                )
        return CheckResult(
            exercise,
            "error",
            f"[{exercise}] the checker itself failed ({type(exc).__name__}: {exc}) after your function "
            "returned: this is a bug in the checker, not in your code.",
        )
    if isinstance(exc, NotImplementedError) and "forward" not in str(exc):
        return CheckResult(
            exercise,
            "not_attempted",
            f"[{exercise}] not attempted yet: replace the `raise NotImplementedError` line "
            "(or a function it calls still raises NotImplementedError).",
        )
    about = "dtypes" if "dtype" in str(exc) or "scalar type" in str(exc) else "shapes"
    return CheckResult(
        exercise,
        "error",
        f"[{exercise}] your function raised {type(exc).__name__}: {exc}{_learner_line(frames or [])}. "
        f"{_with_case(case)}; check which {about} your code assumes.",
    )


def _returns_nothing(outputs: Sequence[Any], expected: Sequence[Any]) -> int | None:
    return next(
        (i for i, (g, e) in enumerate(zip(outputs, expected, strict=True)) if g is None and e is not None), None
    )


def _detects(mistake: Misconception, run: _Run) -> bool:
    if mistake.detect is None:
        return True
    try:
        return bool(mistake.detect(run))
    except Exception:  # the probe could not run the learner's code: no evidence either way
        return False


def _some(descriptions: Sequence[str]) -> str:
    quoted = [f"'{d}'" for d in descriptions]
    if len(quoted) <= 2:
        return " and ".join(quoted)
    return f"{', '.join(quoted[:2])} and {len(quoted) - 2} more"


def _where(cases: Sequence[Case], differences: Sequence[str | None], taught: int) -> str:
    """Which case differs and how, and on which it is right: the symptom's "where"."""
    first = next(i for i, d in enumerate(differences) if d is not None)
    case = cases[first]
    kind = "case" if first < taught else "a case drawn at random for your code,"
    text = f"{kind} '{case.description or first}' differs from the reference ({differences[first]})"
    right = [c.description or str(i) for i, (c, d) in enumerate(zip(cases, differences, strict=True)) if d is None]
    if right:
        wrong = sum(d is not None for d in differences)
        text += f"; {wrong} of {len(cases)} cases differ, and it is right on {_some(right)}"
    if first >= taught:
        text += " (`result.case` holds that case)"
    return text


def _diagnosed(
    exercise: str, mistakes: Sequence[Misconception], where: str, case: Case | None, expected: Any, got: Any = None
) -> CheckResult:
    """A wrong answer that fits ``mistakes``: its symptom, its name with the idea behind it, and its fix."""
    by_name = list({m.name: m for m in reversed(mistakes)}.values())[::-1]  # the first of each name
    symptom = " ".join(dict.fromkeys(m.symptom for m in by_name if m.symptom))
    reveal = " `result.reveal()` shows the fix." if any(m.fix for m in by_name) else ""
    if len(by_name) == 1:
        mistake = by_name[0]
        diagnosis = f"[{exercise}] not yet: this looks like '{mistake.name}'. {mistake.hint}{reveal}"
        fix = f"[{exercise}] the fix for '{mistake.name}': {mistake.fix}" if mistake.fix else ""
    else:
        options = " Or ".join(f"'{m.name}': {m.hint}" for m in by_name)
        diagnosis = (
            f"[{exercise}] not yet: your numbers fit {len(by_name)} known mistakes, which give the same results on "
            f"these cases; look for {'either' if len(by_name) == 2 else 'one of them'}. {options}{reveal}"
        )
        fix = " ".join(f"[{exercise}] the fix for '{m.name}': {m.fix}" for m in by_name if m.fix)
    return CheckResult(
        exercise,
        "misconception",
        "",
        misconception=by_name[0].name,
        symptom=f"[{exercise}] not yet: {where}.{' ' + symptom if symptom else ''} "
        + (
            "This is a known mistake: `result.hint()` names it."
            if len(by_name) == 1
            else "Known mistakes fit it: `result.hint()` names them."
        ),
        diagnosis=diagnosis,
        fix=fix,
        case=case,
        expected=expected,
        got=got,
        key="mistake: " + " | ".join(m.name for m in by_name),
    )


def _failing_property(misconceptions: Sequence[Misconception], run: _Run) -> Misconception | None:
    return next((m for m in misconceptions if m.always and m.detect and _detects(m, run)), None)


def _check(
    exercise, learner, reference, cases, misconceptions, atol, rtol, output_names, shortcuts=(), used=None,
    original=None, taught=None,
) -> CheckResult:  # fmt: skip
    taught = len(cases) if taught is None else taught
    missing_forward = _missing_forward(learner)
    if missing_forward:
        return CheckResult(exercise, "error", f"[{exercise}] not yet: {missing_forward}")
    if isinstance(learner, type) and issubclass(learner, torch.nn.Module):
        name = learner.__name__
        return CheckResult(
            exercise,
            "error",
            f"[{exercise}] not yet: you passed the class {name} itself; pass a module made from it, {name}(...).",
        )
    # The reference first: nothing the learner's code does to PyTorch's settings can reach it.
    expected_outputs = [_expected(reference, case) for case in cases]
    run = _Run(learner)
    learner_outputs = []
    for case in cases:
        try:
            # The first call is watched for shortcuts: the learner's code runs once per case, so that
            # whatever it prints is printed once.
            with _watching_calls(shortcuts if case is cases[0] and used is not None else ()) as found:
                learner_outputs.append(run.case(case))
            if used is not None:
                used += found
        except Exception as exc:  # the learner's code may fail in any way; report, don't crash the notebook
            return state_changed(exercise, run.changes) if run.changes else _failure(exercise, exc, learner, case)
        if run.changes:  # seen on this case already: the other cases cannot change what the learner is told
            return state_changed(exercise, run.changes)
    nothing = _returns_nothing(learner_outputs, expected_outputs)
    if nothing is not None:
        return CheckResult(
            exercise,
            "incorrect",
            f"[{exercise}] not yet: your function returned None — did you forget `return`? "
            f"{_with_case(cases[nothing])}.",
        )
    if original is not None and _gives(original, learner_outputs, cases, atol, rtol):
        return CheckResult(
            exercise,
            "original",
            f"[{exercise}] still the original: your function gives what the code handed out gives, on every case. "
            "Run it, read it, find what is wrong, change it and run this cell again.",
        )
    differences = [
        _difference(g, e, atol, rtol, output_names) for g, e in zip(learner_outputs, expected_outputs, strict=True)
    ]
    first_wrong = next((i for i, d in enumerate(differences) if d is not None), None)
    rounded = first_wrong is not None and all(
        _difference(g, e, atol, rtol, output_names, low_precision=True) is None
        for g, e in zip(learner_outputs, expected_outputs, strict=True)
    )
    if first_wrong is None or rounded:
        failing = _failing_property(misconceptions, run)
        if failing is not None:
            what = failing.symptom or "it fails a test of a property every right answer has."
            result = _diagnosed(exercise, [failing], "", None, None)
            counted = "its one case" if len(cases) == 1 else f"all {len(cases)} cases"
            return replace(
                result,
                symptom=f"[{exercise}] not yet: your function gives the reference's numbers on {counted}, but "
                f"{what[0].lower() + what[1:]} This is a known mistake: `result.hint()` names it.",
            )
        counted = "on its one case" if len(cases) == 1 else f"on all {len(cases)} cases"
        if len(cases) > taught:
            counted += f" ({taught} given, {len(cases) - taught} drawn at random for your code)"
        message = f"[{exercise}] correct {counted}."
        if rounded:
            message += (
                " Your results carry float32's rounding, though the inputs are float64: somewhere your code computes "
                "in float32 (a tensor made with torch.tensor(...) or .float(), say). That is fine here."
            )
        return CheckResult(exercise, "correct", message)
    fitting: list[Misconception] = []
    for mistake in misconceptions:
        if mistake.implementation is None:
            continue
        try:
            mistaken = [_mistaken(mistake.implementation, case) for case in cases]
        except Exception:
            continue
        if all(_same(g, m, atol, rtol) for g, m in zip(learner_outputs, mistaken, strict=True)) and _detects(
            mistake, run
        ):
            fitting.append(mistake)
    if not fitting:
        fitting = [m for m in misconceptions if m.implementation is None and m.detect and _detects(m, run)]
    where = _where(cases, differences, taught)
    case, expected, got = cases[first_wrong], expected_outputs[first_wrong], learner_outputs[first_wrong]
    if fitting:
        return _diagnosed(exercise, fitting, where, case, expected, got)
    return CheckResult(
        exercise,
        "incorrect",
        "",
        symptom=f"[{exercise}] not yet: {where}.",
        fix=f"[{exercise}] no known mistake fits your numbers, so there is no fix to show: call your function on "
        "`result.case.args` and compare what it gives, step by step, with the reference's `result.expected`.",
        case=case,
        expected=expected,
        got=got,
        key="differs",
    )


def _gives(
    original: Callable[..., Any], outputs: Sequence[Any], cases: Sequence[Case], atol: float, rtol: float
) -> bool:
    """True when the handed-out code ``original`` gives ``outputs`` on every case."""
    try:
        theirs = [_mistaken(original, case) for case in cases]
    except Exception:  # the original fails where the answer does not: it was changed
        return False
    return all(_same(g, o, atol, rtol) for g, o in zip(outputs, theirs, strict=True))


# ------------------------------------------------------------------ driving a learner's class


def own_code(learner: Any, *, inherited: bool = False) -> set[CodeType]:
    """The code of the learner's class itself: its own methods (properties' getters too), and with ``inherited`` those
    of every class it extends that is neither torch's nor this package's; for a function, its code."""
    if not isinstance(learner, type):
        return {learner.__code__} if hasattr(learner, "__code__") else set()
    classes = (
        [
            klass
            for klass in learner.__mro__
            if klass is not object and not klass.__module__.startswith(("torch", "mhsa_helpers"))
        ]
        if inherited
        else [learner]
    )
    codes = set()
    for klass in classes:
        for member in vars(klass).values():
            function = getattr(member, "__func__", getattr(member, "fget", member))
            if isinstance(getattr(function, "__code__", None), CodeType):
                codes.add(function.__code__)
    return codes


def raised_outside(error: NotImplementedError, own: set[CodeType]) -> str | None:
    """The qualified name of the code that raised ``error`` (the last frame of its traceback) when that code is
    neither in ``own`` (:func:`own_code`) nor torch's: code of the learner's outside the class checked that still
    raises NotImplementedError (the class it builds on, as a rule). None when the learner's own stub raised it."""
    frames = list(traceback.walk_tb(error.__traceback__))
    code = frames[-1][0].f_code if frames else None
    if code is None or code in own or code.co_filename.startswith(_TORCH_DIR):
        return None
    return getattr(code, "co_qualname", code.co_name)


def output_tensor(value: Any, what: str) -> torch.Tensor:
    """``value`` when it is a tensor; otherwise :class:`AnswerRejected`, saying that ``what`` (``"your forward"``)
    returned something else."""
    if isinstance(value, torch.Tensor):
        return value
    raise AnswerRejected(f"{what} returned {type(value).__name__}, not the output tensor alone")


def roughly_equal(got: torch.Tensor, want: torch.Tensor) -> bool:
    """Whether ``got`` has ``want``'s shape and values, loosely: to 1e-3 relative, and 1e-4 of ``want``'s largest
    magnitude (at least 1)."""
    # Loose on purpose: this only tells a wrong part (an attention, a parent class) from a right one before the
    # learner's own lines run; the learner's numbers are compared tightly.
    scale = max(1.0, float(want.abs().max()))
    return got.shape == want.shape and torch.allclose(got.to(want.dtype), want, rtol=1e-3, atol=1e-4 * scale)


class Remembered:
    """What ``compute()`` gave, by key and input: a checker's references and known mistakes are computed once per
    case (the given cases are the same at every check, and an answer checked again meets the same drawn ones).
    At most ``limit`` results are kept; the oldest goes first."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._kept: OrderedDict[tuple, tuple[torch.Tensor, ...]] = OrderedDict()

    def __call__(
        self, key: tuple, x: torch.Tensor, compute: Callable[[], tuple[torch.Tensor, ...]]
    ) -> tuple[torch.Tensor, ...]:
        """``compute()``, or what it gave before for ``key`` and the same ``x`` (its dtype, shape and values); copies,
        so that nothing a caller does to them reaches a later check."""
        key = (*key, x.dtype, tuple(x.shape), x.detach().cpu().numpy().tobytes())
        if key not in self._kept:
            self._kept[key] = tuple(t.detach() for t in compute())
            if len(self._kept) > self.limit:
                self._kept.popitem(last=False)
        return tuple(t.clone() for t in self._kept[key])


def class_driver(
    learner: Any,
    told: dict[str, str],
    drive_once: Callable[[Any, torch.Tensor, Any, Any, dict[str, str]], Any],
    not_written: Callable[[str, NotImplementedError], str],
    *,
    inherited: bool = False,
) -> Callable[..., Any]:
    """What a checker of the learner's *class* runs as the learner: ``drive(x, size, probe=None)`` calls
    ``drive_once(learner, x, size, probe, told)`` (which builds the class at ``size``, copies the package's weights
    in and runs it on ``x``) with the global random generator left as it was (building draws initial weights).

    ``probe`` is None (or False) when the judge runs a case, and what a misconception's probe asks for otherwise.
    A NotImplementedError from the learner's own class (:func:`own_code`, with ``inherited``) or from torch goes
    on as it is (the answer is not attempted yet); one from code outside it (:func:`raised_outside`) becomes
    :class:`AnswerRejected` saying ``not_written(name, error)``, also kept in ``told["not written"]`` when no
    probe is running, so the checker can tell the learner where to write the missing code."""
    own = own_code(learner, inherited=inherited)

    def drive(x: torch.Tensor, size: Any, probe: Any = None) -> Any:
        # Building draws the layers' initial weights from the global generator: expected, so it is left unchanged.
        with torch.random.fork_rng(devices=[]):
            try:
                return drive_once(learner, x, size, probe, told)
            except NotImplementedError as error:
                where = raised_outside(error, own)
                if where is None:
                    raise
                said = not_written(where, error)
                if not probe:
                    told["not written"] = said
                raise AnswerRejected(said) from error

    return drive


def judge_class(
    exercise: str,
    learner: Any,
    class_name: str,
    drive_once: Callable[[Any, torch.Tensor, Any, Any, dict[str, str]], Any],
    not_written: Callable[[str, NotImplementedError], str],
    reference: Callable[..., Any],
    cases: Sequence[Case],
    misconceptions: Sequence[Misconception] = (),
    *,
    inherited: bool = False,
    made: str = "module",
    square_cases: Sequence[Case] = (),
    output_names: Sequence[str] = (),
    shortcuts: Sequence[str] = (),
    draw: Callable[[int], Sequence[Case]] | None = None,
) -> tuple[CheckResult, dict[str, str]]:
    """:func:`judge` of a learner's *class* (``class_name``, e.g. ``"MyBlock"``), run through :func:`class_driver`;
    the verdict, not yet told, and what the drive noticed (``told``: e.g. ``"shortcut"``, the package's class used).

    A ``made`` (a module, a block) built from the class is sent back with an error asking for the class itself;
    what is not callable is a TypeError. ``draw(seed)`` makes the drawn cases from the answer's own seed
    (:func:`answer_seed`). An answer whose numbers differ only because code outside the learner's class is not
    written yet is not attempted, and the message says where to write it."""
    if isinstance(learner, torch.nn.Module):
        message = f"[{exercise}] not yet: pass your class itself, {type(learner).__name__}, not a {made} made from it."
        return CheckResult(exercise, "error", message), {}
    if not callable(learner):
        raise TypeError(f"learner must be a function or a class (your {class_name}), got {type(learner).__name__}")
    told: dict[str, str] = {}
    seed = answer_seed(learner)
    result = judge(
        exercise,
        class_driver(learner, told, drive_once, not_written, inherited=inherited),
        reference,
        cases,
        misconceptions,
        square_cases=square_cases,
        output_names=output_names,
        shortcuts=shortcuts,
        draw=None if draw is None else lambda _: draw(seed),
    )
    if "not written" in told and result.status == "incorrect":
        result = CheckResult(exercise, "not_attempted", f"[{exercise}] not attempted yet: {told['not written']}")
    return result, told
