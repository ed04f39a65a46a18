"""How the exercise checker (mhsa_helpers.teaching.checking) calls the learner's function: with the
case's keyword arguments, under the time limit outside the main thread too (a worker thread that
gives back the value or the error, and says where a stopped function was), through a checker's
wrapper, watching the arguments a learner reshapes in place; a module without ``forward``; and
``check_function``'s own defaults. Pinned exactly, found unpinned by mutation testing (``make mutate``).

Written against the public API only: ``check_function`` with ``Case`` and ``Misconception`` objects.
"""

from __future__ import annotations

import functools
import itertools
import linecache
import textwrap
import threading
import time

import pytest
import torch
from pinning import raises

import mhsa_helpers.teaching.checking as checking
from mhsa_helpers.teaching.checking import Case, Misconception, check_function

ONE = [Case((torch.ones(2),))]
_cell_numbers = itertools.count(1)


def cell(source: str, **names):
    """The namespace of the notebook cell ``source`` (its source kept in linecache, as Jupyter does)."""
    filename = f"<calls-cell-{next(_cell_numbers)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    namespace = {"time": time, **names}
    exec(compile(source, filename, "exec"), namespace)
    return namespace


def in_a_thread(function):
    """What ``function()`` returns when run in a worker thread (where no alarm signal can be used)."""
    results = []
    worker = threading.Thread(target=lambda: results.append(function()))
    worker.start()
    worker.join(10)
    return results[0]


# ------------------------------------------------------------------ the time limit outside the main thread


def test_in_a_thread_the_value_and_the_keywords_get_through(monkeypatch):
    monkeypatch.setattr(checking, "TIME_LIMIT_SECONDS", 5.0)
    case = [Case((torch.ones(2),), {"scale": 3.0})]

    def scaled(x, scale):
        return x * scale

    result = in_a_thread(lambda: check_function("ex", scaled, scaled, case, verbose=False))
    assert result.correct, result.message


def test_in_a_thread_an_error_is_the_learners(monkeypatch):
    monkeypatch.setattr(checking, "TIME_LIMIT_SECONDS", 5.0)

    def learner(x):
        raise ValueError("boom")

    result = in_a_thread(lambda: check_function("ex", learner, lambda x: x, ONE, verbose=False))
    assert result.status == "error"
    assert result.message.startswith("[ex] your function raised ValueError: boom (in learner, line ")


def test_in_a_thread_a_stop_names_where_the_learner_was_not_where_it_had_been(monkeypatch):
    """The worker follows the learner's calls and returns: the helper that returned is not named, the
    one it is in is. The stopped thread is a daemon, so it cannot keep Python from exiting."""
    monkeypatch.setattr(checking, "TIME_LIMIT_SECONDS", 0.2)
    code = cell(
        """\
def setup(x):
    return x

def wait(x):
    time.sleep(1.5)

def learner(x):
    x = setup(x)
    wait(x)
    return x
"""
    )
    before = set(threading.enumerate())
    result = in_a_thread(lambda: check_function("ex", code["learner"], lambda x: x, ONE, verbose=False))
    assert result.message.startswith(
        "[ex] not yet: your function did not return within 0.2 s and was stopped "
        "(in learner, line 9: `wait(x)`; deeper, in wait, line 5: `time.sleep(1.5)`). A loop that never ends?"
    ), result.message
    stopped = [t for t in set(threading.enumerate()) - before if t.is_alive()]
    assert stopped and all(t.daemon for t in stopped)


def test_in_a_thread_a_helper_that_returned_is_not_where_the_learner_is(monkeypatch):
    monkeypatch.setattr(checking, "TIME_LIMIT_SECONDS", 0.2)
    code = cell(
        """\
def setup(x):
    return x

def learner(x):
    x = setup(x)
    time.sleep(1.5)
    return x
"""
    )
    result = in_a_thread(lambda: check_function("ex", code["learner"], lambda x: x, ONE, verbose=False))
    assert " and was stopped (in learner, line 6: `time.sleep(1.5)`). A loop" in result.message, result.message


def test_a_stop_that_lands_in_a_half_entered_no_grad_is_the_time_limit_not_a_settings_change(monkeypatch):
    """The alarm can interrupt `torch.no_grad()` between turning gradients off and entering its block, whose
    exit then never runs (building an nn.Linear in a loop hits it now and then): the learner is told about the
    time limit, and the notebook gets its gradients back."""
    monkeypatch.setattr(checking, "TIME_LIMIT_SECONDS", 0.2)

    def learner(x):
        torch.set_grad_enabled(False)  # where a half-entered no_grad() leaves the mode when the alarm lands
        while True:
            pass

    result = check_function("ex", learner, lambda x: x, ONE, verbose=False)
    assert result.status == "error" and "did not return within 0.2 s" in result.message, result.message
    assert torch.is_grad_enabled()


@pytest.mark.parametrize("limit", [None, 0])
def test_without_a_time_limit_the_keywords_get_through(monkeypatch, limit):
    monkeypatch.setattr(checking, "TIME_LIMIT_SECONDS", limit)

    def scaled(x, scale):
        return x * scale

    assert check_function("ex", scaled, scaled, [Case((torch.ones(2),), {"scale": 3.0})], verbose=False).correct


def test_a_stop_under_a_checkers_wrapper_names_the_learners_line_first(monkeypatch):
    # The wrapper (here in a cell, like a notebook's) is not where the learner's function starts.
    monkeypatch.setattr(checking, "TIME_LIMIT_SECONDS", 0.1)
    code = cell(
        """\
def learner(x):
    time.sleep(5)
    return x

@functools.wraps(learner)
def wrapper(x):
    return learner(x)
""",
        functools=functools,
    )
    message = check_function("ex", code["wrapper"], lambda x: x, ONE, verbose=False).message
    assert " and was stopped (in learner, line 2: `time.sleep(5)`). A loop" in message, message


# ------------------------------------------------------------------ arguments changed in place


def _reshaped(name: str, old: tuple, new: tuple) -> str:
    return (
        f"[ex] not yet: your function changed its argument `{name}` in place: its shape went from {old} to "
        f"{new} (e.g. `{name}.t_()`, `{name}.unsqueeze_(…)`, `{name}.transpose_(…)`), so the caller's "
        f"tensor changed too. Use the versions without the underscore, which return a new view: "
        f"`{name}.t()`, `{name}.unsqueeze(…)`."
    )


def test_a_reshaped_argument_is_named_with_both_shapes_positional_or_keyword():
    def transposes(x, y):
        return x.t_()

    def unsqueezes(x, y):
        return y.unsqueeze_(0)

    case = Case((torch.ones(2, 3),), {"y": torch.ones(2)})
    assert check_function("ex", transposes, lambda x, y: x, [case], verbose=False).message == _reshaped(
        "x", (2, 3), (3, 2)
    )
    assert check_function("ex", unsqueezes, lambda x, y: x, [case], verbose=False).message == _reshaped(
        "y", (2,), (1, 2)
    )


def test_a_keyword_argument_written_into_is_named():
    def learner(x, mask):
        mask.fill_(0)
        return x

    case = Case((torch.ones(2),), {"mask": torch.ones(2)})
    result = check_function("ex", learner, lambda x, mask: x, [case], verbose=False)
    assert result.message == (
        "[ex] not yet: your function changed its argument `mask` in place (e.g. `mask /= …`, "
        "`mask.masked_fill_(…)`, `mask[…] = …`), so the caller's tensor changed too. Work on a copy: "
        "`mask = mask / …`, `masked_fill` without the underscore, or `mask.clone()` first."
    )


def test_an_argument_without_a_parameter_name_is_named_by_its_position():
    def learner(*tensors):
        tensors[1].zero_()
        return tensors[0]

    case = Case((torch.ones(2), torch.ones(2)))
    message = check_function("ex", learner, lambda *t: t[0], [case], verbose=False).message
    assert message.startswith("[ex] not yet: your function changed its argument `number 2` in place (e.g. ")


def test_an_extra_positional_argument_is_named_by_its_position():
    def learner(x, *rest):
        rest[0].zero_()
        return x

    case = Case((torch.ones(2), torch.ones(2)))
    message = check_function("ex", learner, lambda x, *rest: x, [case], verbose=False).message
    assert message.startswith("[ex] not yet: your function changed its argument `number 2` in place (e.g. ")


# ------------------------------------------------------------------ a module without forward


def test_a_misspelled_forward_is_named():
    class Net(torch.nn.Module):
        def forwrad(self, x):
            return x

    class Short(torch.nn.Module):
        def fwd(self, x):
            return x

    result = check_function("ex", Net(), lambda x: x, ONE, verbose=False)
    assert (result.exercise, result.status) == ("ex", "error")
    assert result.message == "[ex] not yet: your module Net has no `forward` method; did you spell it `forwrad`?"
    message = check_function("ex", Short(), lambda x: x, ONE, verbose=False).message
    assert message == "[ex] not yet: your module Short has no `forward` method; did you spell it `fwd`?"


def test_a_module_without_anything_like_forward_is_told_what_pytorch_calls():
    # Special names (`__forward__`) are not offered as the misspelling: PyTorch's rule is what helps.
    class Net(torch.nn.Module):
        def __forward__(self, x):
            return x

        def backward(self, x):
            return x

    result = check_function("ex", Net(), lambda x: x, ONE, verbose=False)
    assert result.message == (
        "[ex] not yet: your module Net has no `forward` method: PyTorch calls `forward(self, ...)` when the "
        "module is called."
    )


# ------------------------------------------------------------------ check_function itself


def test_the_message_is_printed_unless_asked_not_to(capsys):
    check_function("ex", lambda x: x, lambda x: x, ONE)
    assert capsys.readouterr().out == "[ex] correct on its one case.\n"
    check_function("ex", lambda x: x, lambda x: x, ONE, verbose=False)
    assert capsys.readouterr().out == ""


def test_a_learner_that_is_not_a_function_is_refused():
    with raises(TypeError, "learner must be a function, got int"):
        check_function("ex", 3, lambda x: x, ONE)


def test_square_cases_are_tried_only_after_a_crash():
    # The learner's mistake shows on the rectangular case already: the square cases change nothing.
    mistakes = [Misconception("transposed", lambda x: x.T, "Transpose back.")]
    result = check_function(
        "sq",
        lambda x: x.T,
        lambda x: x,
        [Case((torch.arange(6.0).reshape(2, 3),))],
        mistakes,
        square_cases=[Case((torch.arange(9.0).reshape(3, 3),))],
        verbose=False,
    )
    assert result.diagnosis == "[sq] not yet: this looks like 'transposed'. Transpose back."
    assert result.message == result.symptom and "On other inputs" not in result.diagnosis


def test_a_square_mistake_behind_a_crash_is_told_under_the_exercises_name():
    def learner(x):
        if x.shape[0] != x.shape[1]:
            raise ValueError("not square")
        return x.T, x

    result = check_function(
        "square mistake",
        learner,
        lambda x: (x, x),
        [Case((torch.arange(6.0).reshape(2, 3),))],
        [Misconception("transposed", lambda x: (x.T, x), "Transpose back.")],
        square_cases=[Case((torch.arange(9.0).reshape(3, 3),))],
        output_names=("weights", "values"),
        verbose=False,
    )
    assert (result.exercise, result.status, result.misconception) == ("square mistake", "misconception", "transposed")
    assert result.message.startswith(
        "[square mistake] your function raised ValueError: not square (in learner, line "
    ) and result.message.endswith(
        "On square inputs, where every axis has the same length, it runs without an error and gives the numbers of "
        "a known mistake: `result.hint()` names it."
    ), result.message
    assert result.diagnosis.startswith(
        "[square mistake] not yet: this looks like 'transposed'. Transpose back. (On other inputs your "
        "function raised ValueError: not square (in learner, line "
    ), result.diagnosis


# ------------------------------------------------------------------ the shortcut note

NOTE = (
    " Note: your function calls {}, which does what this exercise asks you to write yourself; that is fine in "
    "later notebooks, but here write it from the steps above to see how it works."
)


def _dedents(x):
    return textwrap.dedent("  a") and 2 * x


def test_the_note_follows_every_verdict_on_the_answer():
    mistakes = [Misconception("doubled", lambda x: 2 * x, "Do not double.")]
    right = check_function("ex", _dedents, lambda x: 2 * x, ONE, shortcuts=("dedent",), verbose=False)
    named = check_function("ex", _dedents, lambda x: x, ONE, mistakes, shortcuts=("dedent",), verbose=False)
    wrong = check_function("ex", _dedents, lambda x: x, ONE, shortcuts=("dedent",), verbose=False)
    note = NOTE.format("`textwrap.dedent`")
    assert (right.exercise, right.status, right.message) == ("ex", "correct", "[ex] correct on its one case." + note)
    assert (named.status, named.misconception) == ("misconception", "doubled")
    assert named.diagnosis == "[ex] not yet: this looks like 'doubled'. Do not double." + note
    assert named.message == named.symptom and named.symptom.endswith(note)
    assert wrong.status == "incorrect" and wrong.message.endswith(note)
    assert right.shortcuts == named.shortcuts == wrong.shortcuts == ("textwrap.dedent",)


def test_several_shortcuts_are_listed_and_a_crash_gets_no_note():
    def learner(x):
        text = textwrap.fill("one two", width=3)
        if len(x) == 3:
            raise ValueError("three")
        return text

    cases = [Case((torch.ones(2),)), Case((torch.ones(3),))]
    names = ("fill", "TextWrapper")
    message = check_function("ex", learner, lambda x: "one\ntwo", cases[:1], shortcuts=names, verbose=False).message
    assert message.endswith(NOTE.format("`textwrap.fill`, `textwrap.TextWrapper`"))
    crashed = check_function("ex", learner, lambda x: "one\ntwo", cases, shortcuts=names, verbose=False)
    assert crashed.status == "error" and "Note:" not in crashed.message


def test_shortcuts_are_looked_for_in_the_first_cases_call_only():
    # The learner's code runs once per case; the first call is the one watched.
    def learner(x):
        return textwrap.dedent("  a") if len(x) == 3 else "a"

    cases = [Case((torch.ones(2),)), Case((torch.ones(3),))]
    result = check_function("ex", learner, lambda x: "a", cases, shortcuts=("dedent",), verbose=False)
    assert result.correct and result.shortcuts == ()


# ------------------------------------------------------------------ a class where a module is expected


def test_a_module_class_passed_instead_of_a_module_is_said_so():
    class Net(torch.nn.Module):
        def forward(self, x):
            return x

    result = check_function("ex", Net, lambda x: x, ONE, verbose=False)
    assert (result.exercise, result.status) == ("ex", "error")
    assert result.message == "[ex] not yet: you passed the class Net itself; pass a module made from it, Net(...)."
