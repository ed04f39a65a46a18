"""Ordering exercises (Parsons problems): the learner puts given lines of code in order.

A puzzle's lines are real code. The checker runs them in the learner's order on a few inputs drawn for the check
and compares the result with the lines run in the solution's order, so any order that computes the same thing is
right: two lines that do not depend on each other may come either way. A wrong order is told what happened when it
ran, first (the line that used a name no line above it had made, the error a line raised, or where the result
differs), and the mis-ordering by name when the same order comes again: a :class:`MisOrder` is one line placed
before a line it must follow, read off the order itself, so naming it is no guess. The fix is shown on request.

:class:`~mhsa_helpers.teaching.order_widget.OrderExercise` shows the lines to arrange with a running kernel.

Parsons & Haden (2006) introduced the exercise; Ericson, Margulieux & Rick (2017) measured that solving one teaches
as much as writing the same code, in less time.
"""

from __future__ import annotations

import math
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from .checking import STATE_CHANGED, Case, CheckResult, escalate, judge

__all__ = ["MisOrder", "OrderPuzzle", "check_order"]


@dataclass(frozen=True)
class MisOrder:
    """A known mis-ordering: line ``then`` placed before line ``first``, which it must follow (labels).

    What the learner is told: ``symptom`` (what the run shows) first, then ``name`` with ``hint`` (the idea), and
    ``fix`` on request."""

    name: str
    first: str
    then: str
    hint: str
    fix: str
    symptom: str = ""


@dataclass(frozen=True)
class OrderPuzzle:
    """Lines to put in order: ``lines`` maps each label to its code, in the order shown (shuffled);
    ``solution`` is one right order of the labels. ``inputs(generator)`` makes the names the lines start from,
    and the lines leave the answer in ``result``. ``template`` is the code around the lines, with the line
    ``{lines}`` where they go (indented as that line is: inside a loop, say). ``misorders`` are the known wrong
    orders the checker names."""

    exercise: str
    lines: Mapping[str, str]
    solution: tuple[str, ...]
    inputs: Callable[[torch.Generator], dict[str, Any]]
    result: str
    misorders: tuple[MisOrder, ...] = ()
    template: str = "{lines}"
    seeds: tuple[int, ...] = field(default=(0, 1, 2))

    def source(self, order: Sequence[str]) -> tuple[str, dict[int, str]]:
        """The code that runs ``order``, and which label each of its lines (numbered from 1) holds."""
        code, labels = [], {}
        for text in self.template.splitlines():
            if text.strip() != "{lines}":
                code.append(text)
                continue
            indent = text[: len(text) - len(text.lstrip())]
            for label in order:
                code.append(indent + self.lines[label])
                labels[len(code)] = label
        return "\n".join(code) + "\n", labels

    def listing(self) -> str:
        """The lines with their labels, as shown."""
        return "\n".join(f"{label}  {code}" for label, code in self.lines.items())


class _Failed(Exception):
    """Running an order stopped: the message says at which line and why."""


def _run(puzzle: OrderPuzzle, order: Sequence[str], seed: int) -> torch.Tensor:
    source, labels = puzzle.source(order)
    filename = f"<{puzzle.exercise}: your order>"
    namespace: dict[str, Any] = {"torch": torch, "math": math, **puzzle.inputs(torch.Generator().manual_seed(seed))}
    try:
        exec(compile(source, filename, "exec"), namespace)
    except Exception as exc:
        # The innermost of the order's own lines that the error passed through; none when it came from the code
        # around them.
        label = next(
            (
                labels[line]
                for frame, line in reversed(list(traceback.walk_tb(exc.__traceback__)))
                if frame.f_code.co_filename == filename and line in labels
            ),
            None,
        )
        where = f"line {label} (`{puzzle.lines[label]}`)" if label else "the code around your lines"
        if isinstance(exc, NameError) and exc.name:
            raise _Failed(f"{where} uses `{exc.name}`, which no line before it has made yet") from None
        raise _Failed(f"{where} raised {type(exc).__name__}: {exc}") from None
    return namespace[puzzle.result]


def _difference(got: torch.Tensor, expected: torch.Tensor) -> str | None:
    if got.shape != expected.shape:
        return f"the result has shape {tuple(got.shape)}, where the recipe's has {tuple(expected.shape)}"
    if torch.allclose(got, expected, rtol=1e-9, atol=1e-12):
        return None
    gap = (got - expected).abs().nan_to_num(nan=math.inf)
    return f"the result differs from the recipe's by up to {float(gap.max()):.3g}"


def _outcome(puzzle: OrderPuzzle, order: Sequence[str], expected: Sequence[torch.Tensor]) -> tuple[str, bool] | None:
    """None when ``order`` gives the ``expected`` results (the solution's, one per seed), else what went wrong (on
    the first input where something did) and whether the run stopped there."""
    for seed, result in zip(puzzle.seeds, expected, strict=True):
        try:
            got = _run(puzzle, order, seed)
        except _Failed as failed:
            return f"run in your order, {failed}", True
        difference = _difference(got, result)
        if difference is not None:
            return f"run in your order, {difference}", False
    return None


def _form(puzzle: OrderPuzzle, order: Sequence[str]) -> str | None:
    """What is wrong with ``order`` as a list of the labels, each once; None when nothing is."""
    labels = list(puzzle.lines)
    unknown = [label for label in dict.fromkeys(order) if label not in puzzle.lines]
    if unknown:
        be = "is" if len(unknown) == 1 else "are"
        return f"{', '.join(repr(u) for u in unknown)} {be} not a label of these lines ({labels[0]} to {labels[-1]})."
    twice = [label for label in dict.fromkeys(order) if order.count(label) > 1]
    missing = [label for label in labels if label not in order]
    parts = []
    if twice:
        parts.append(f"uses {', '.join(repr(t) for t in twice)} more than once")
    if missing:
        parts.append(f"leaves out {', '.join(repr(m) for m in missing)}")
    return f"your order {' and '.join(parts)}: every line is used exactly once." if parts else None


def _one_move(puzzle: OrderPuzzle, order: list[str], expected: Sequence[torch.Tensor]) -> str | None:
    """The one move of one line that makes ``order`` right, in words; None when no single move does."""
    for label in order:
        rest = [other for other in order if other != label]
        for place in range(len(order)):
            moved = [*rest[:place], label, *rest[place:]]
            if moved != order and _outcome(puzzle, moved, expected) is None:
                after = f"right after line {rest[place - 1]}" if place else "first"
                return f"move line {label} (`{puzzle.lines[label]}`) to come {after}."
    return None


def _judge(puzzle: OrderPuzzle, order: list[str]) -> CheckResult:
    exercise = puzzle.exercise
    # The solution's results, run once: every order tried below (the learner's, each one-line move) is compared
    # with them.
    expected = [_run(puzzle, puzzle.solution, seed) for seed in puzzle.seeds]
    outcome = _outcome(puzzle, order, expected)
    if outcome is None:
        note = ""
        if order != list(puzzle.solution):
            note = " It differs from the solution's order where two lines do not depend on each other: both are right."
        counted = f"all {len(puzzle.seeds)} inputs" if len(puzzle.seeds) > 1 else "its input"
        message = f"[{exercise}] correct: run in your order, the lines give the recipe's result on {counted}.{note}"
        return CheckResult(exercise, "correct", message)
    what, stopped = outcome
    position = {label: i for i, label in enumerate(order)}
    misplaced = [m for m in puzzle.misorders if position[m.then] < position[m.first]]
    move = _one_move(puzzle, order, expected)
    if not misplaced:
        if move:
            fix = f"[{exercise}] {move[0].upper()}{move[1:]}"
        else:
            fix = f"[{exercise}] more than one line is out of place. One right order: {list(puzzle.solution)}."
        return CheckResult(
            exercise,
            "incorrect",
            "",
            symptom=f"[{exercise}] not yet: {what}. Follow each name back to the line that makes it.",
            fix=fix,
            key="differs: " + "".join(order),
        )

    def placed(m: MisOrder) -> str:
        return f"line {m.then} (`{puzzle.lines[m.then]}`) comes before line {m.first} (`{puzzle.lines[m.first]}`)"

    # A misordering's symptom describes its result: none when the run stopped before making one.
    symptoms = "" if stopped else " ".join(dict.fromkeys(m.symptom for m in misplaced if m.symptom))
    if len(misplaced) == 1:
        m = misplaced[0]
        diagnosis = f"[{exercise}] not yet: this is '{m.name}': {placed(m)}. {m.hint} `result.reveal()` shows the fix."
        told = "This is a known mis-ordering: `result.hint()` names it."
    else:
        named = " And ".join(f"'{m.name}': {placed(m)}. {m.hint}" for m in misplaced)
        diagnosis = (
            f"[{exercise}] not yet: your order has {len(misplaced)} known mis-orderings. {named} "
            "`result.reveal()` shows the fixes."
        )
        told = f"It has {len(misplaced)} known mis-orderings: `result.hint()` names them."
    return CheckResult(
        exercise,
        "misconception",
        "",
        misconception=misplaced[0].name,
        symptom=f"[{exercise}] not yet: {what}.{' ' + symptoms if symptoms else ''} {told}",
        diagnosis=diagnosis,
        fix="\n".join(f"[{exercise}] the fix for '{m.name}': {m.fix}" for m in misplaced),
        key="order: " + " | ".join(m.name for m in misplaced),
    )


def _checked(puzzle: OrderPuzzle, given: Sequence[object]) -> CheckResult:
    order = [str(label).strip().upper() for label in given]
    wrong_form = _form(puzzle, order)
    if wrong_form is not None:
        return CheckResult(puzzle.exercise, "incorrect", f"[{puzzle.exercise}] not yet: {wrong_form}")
    return escalate(_judge(puzzle, order))


def check_order(puzzle: OrderPuzzle, answer: object, *, verbose: bool = True) -> CheckResult:
    """Check ``answer``, the learner's order of ``puzzle``'s lines: a list (or tuple) of their labels, first line
    first, or a function of no arguments returning one (``None`` or ``...`` until filled in). Prints the message
    when ``verbose`` and returns the :class:`CheckResult`; an answer of another type is a ``TypeError``."""
    exercise = puzzle.exercise
    if answer is None or answer is Ellipsis:
        result = CheckResult(
            exercise,
            "not_attempted",
            f"[{exercise}] not attempted yet: replace None by your order, the lines' labels first line first, or "
            "arrange the lines above and press Check.",
        )
    elif isinstance(answer, (list, tuple)):
        result = _checked(puzzle, answer)
    elif not callable(answer):
        raise TypeError(
            "learner must be a function returning your order, or the order itself: a list of the lines' labels "
            f"such as {list(puzzle.lines)[:2]!r} and the rest, got {type(answer).__name__}"
        )
    else:
        # A stub, an error, a loop or a forgotten `return` is told as every checker tells it.
        ran = judge(exercise, answer, lambda: list(puzzle.solution), [Case(())])
        told = ran.status in ("not_attempted", "error") or ran.misconception == STATE_CHANGED
        if told or (ran.status == "incorrect" and ran.message):
            result = escalate(ran)
        elif isinstance(given := answer(), (list, tuple)):
            result = _checked(puzzle, given)
        else:
            result = CheckResult(
                exercise,
                "incorrect",
                f"[{exercise}] not yet: your function returned a {type(given).__name__}; return the list of the "
                "lines' labels, first line first.",
            )
    if verbose:
        print(result.message)
    return result
