"""Where the exercise checker (mhsa_helpers.teaching.checking) says the learner's code was: the line a
function that ran out of time was stopped at, the helper it was in deeper down, the loop around it;
and the learner's own line of an error raised inside torch. Found unpinned by mutation testing
(``make mutate``).

A learner whose function never returns needs the line and the loop that did not end; a learner whose
code failed inside torch needs their own line, not torch's.

The learner's code is written as a notebook cell: compiled under a cell's name and kept in
``linecache``, as Jupyter does, so the line numbers below are the cell's own. The time limit is
lowered to 0.1 s and the learner sleeps far longer, so every stop happens on the sleeping line.
"""

from __future__ import annotations

import functools
import itertools
import linecache
import threading
import time

import pytest
import torch

import mhsa_helpers.teaching.checking as checking
from mhsa_helpers.teaching.checking import Case, check_function

_cell_numbers = itertools.count(1)


def cell(source: str, name: str = "learner", keep_source: bool = True):
    """The function ``name`` defined by the notebook cell ``source`` (its source kept, like Jupyter's)."""
    filename = f"<cell-{next(_cell_numbers)}>"
    if keep_source:
        linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    namespace = {"time": time, "torch": torch}
    exec(compile(source, filename, "exec"), namespace)
    return namespace[name]


@pytest.fixture
def short_limit(monkeypatch):
    monkeypatch.setattr(checking, "TIME_LIMIT_SECONDS", 0.1)


ONE = [Case((torch.ones(2),))]


def stopped(where: str, called_with: str = "a tensor of shape (2,)") -> str:
    """The message of a function stopped at the time limit, ``where`` naming the line (and loop)."""
    return (
        f"[ex] not yet: your function did not return within 0.1 s and was stopped{where}. A loop that never "
        "ends? Check that the loop's variable moves towards its end (e.g. `i += 1`, or a `for` loop over a "
        f"range). It was called with {called_with}."
    )


def run(learner, cases=ONE):
    return check_function("ex", learner, lambda *a: None, cases, verbose=False)


# ------------------------------------------------------------------ the time limit


def test_a_stop_inside_a_loop_names_the_line_and_the_loop(short_limit):
    learner = cell("""\
def learner(x):
    i = 0
    while i < 3:
        time.sleep(5)
    return x
""")
    result = run(learner)
    assert (result.exercise, result.status) == ("ex", "error")
    where = " (in learner, line 4: `time.sleep(5)`), inside the loop at line 3: `while i < 3:`"
    assert result.message == stopped(where)


def test_lines_are_the_cells_even_when_the_function_starts_lower(short_limit):
    # The loop after the stopped line is not around it: no loop is named.
    learner = cell("""\
# the exercise

def learner(x):
    time.sleep(5)
    for i in range(2):
        x = x + i
    return x
""")
    assert run(learner).message == stopped(" (in learner, line 4: `time.sleep(5)`)")
    learner = cell("""\
# the exercise
def learner(x):
    for i in range(2):
        time.sleep(5)
    return x
""")
    where = " (in learner, line 4: `time.sleep(5)`), inside the loop at line 3: `for i in range(2):`"
    assert run(learner).message == stopped(where)


def test_a_stop_on_a_loops_own_line_is_not_told_twice(short_limit):
    # The stopped line is the inner loop's: shown once, and the outer loop is not the one to look at.
    learner = cell("""\
def learner(x):
    while True:
        while not time.sleep(5):
            pass
""")
    assert run(learner).message == stopped(" (in learner, line 3: `while not time.sleep(5):`)")


def test_a_stop_in_a_helper_names_the_learners_line_and_the_helpers(short_limit):
    learner = cell("""\
def helper(x):
    time.sleep(5)
    return x

def learner(x):
    return helper(x)
""")
    where = " (in learner, line 6: `return helper(x)`; deeper, in helper, line 2: `time.sleep(5)`)"
    assert run(learner).message == stopped(where)


def test_a_stop_without_source_names_the_line_only(short_limit):
    learner = cell("def learner(x):\n    while True:\n        time.sleep(5)\n", keep_source=False)
    assert run(learner).message == stopped(" (in learner, line 3)")


def test_a_stop_outside_the_learners_code_names_no_line(short_limit):
    assert run(time.sleep, [Case((5,))]).message == stopped("", called_with="5")


# ------------------------------------------------------------------ errors raised inside torch


def test_an_error_inside_torch_names_the_learners_line():
    # A callable object whose `__call__` is inherited: the checker cannot tell where the learner's code
    # starts, and names the learner's last line before torch's.
    source = """\
class Base:
    def __call__(self, x):
        return torch.nn.functional.softmax(x, dim=5)
"""
    base = cell(source, name="Base")

    class Softmax(base):
        pass

    message = run(Softmax()).message
    assert message.startswith("[ex] your function raised IndexError: Dimension out of range")
    assert message.endswith(
        " (in __call__, line 3: `return torch.nn.functional.softmax(x, dim=5)`). "
        "It was called with a tensor of shape (2,); check which shapes your code assumes."
    )


# ------------------------------------------------------------------ wrappers


def _wrapped(function, depth: int):
    """``function`` under ``depth`` layers that a checker's wrapper would add (each with ``__wrapped__``),
    the outermost failing after ``function`` returned."""

    def call(inner, *args):
        return inner(*args)

    layer = function
    for _ in range(depth - 1):
        outer = functools.partial(call, layer)
        outer.__wrapped__ = layer
        layer = outer

    def failing(*args):
        layer(*args)
        raise RuntimeError("the wrapper broke")

    failing.__wrapped__ = layer
    return failing


def test_wrappers_are_seen_through_twenty_deep():
    """The documented bound (``_learner_codes``): the learner's function is found under at most 20
    wrappers (a ``__wrapped__`` that leads back to itself ends there). Found, an error after it returned
    is the checker's; not found, every frame is taken for the learner's."""

    def learner(x):
        return x

    assert "the checker itself failed (RuntimeError: the wrapper broke)" in run(_wrapped(learner, 20)).message
    assert "your function raised RuntimeError: the wrapper broke" in run(_wrapped(learner, 21)).message
    looped = functools.partial(learner)
    looped.__wrapped__ = looped
    assert check_function("ex", looped, lambda x: x, ONE, verbose=False).correct


@pytest.mark.parametrize("limit", [None, 0])
def test_no_time_limit_when_it_is_none_or_0(monkeypatch, limit):
    """``TIME_LIMIT_SECONDS = None`` (or 0) turns the limit off, also outside the main thread (where a
    limit of 0 would stop every call at once)."""
    monkeypatch.setattr(checking, "TIME_LIMIT_SECONDS", limit)
    results = []

    def takes_a_moment(x):
        time.sleep(0.05)  # still running when a limit of 0 would stop waiting for it
        return x

    def check_in_a_thread():
        results.append(check_function("ex", takes_a_moment, lambda x: x, ONE, verbose=False))

    assert check_function("ex", lambda x: x, lambda x: x, ONE, verbose=False).correct
    worker = threading.Thread(target=check_in_a_thread)
    worker.start()
    worker.join(5)
    assert results[0].correct, results[0].message
