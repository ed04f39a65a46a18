"""The rules of the shared checker machinery (mhsa_helpers.teaching.checking) on tiny made-up exercises:
whole numbers, outputs, copies of the arguments, the time limit outside the main thread, several
fitting mistakes, probes, the checker's own failures, and the learner's signature."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import torch

import mhsa_helpers.teaching.checking as checking
from mhsa_helpers.teaching.checking import AnswerRejected, Case, Misconception, check_function

BYTES_CASES = [Case((100_000, 3), description="100000 tokens, 3 bytes each")]


def product(tokens, size):
    return tokens * size


# ------------------------------------------------------------------ whole numbers


@pytest.mark.parametrize(
    "answer",
    [
        lambda t, s: np.prod([t, s]),  # numpy.int64
        lambda t, s: np.int32(t) * np.int32(s),
        lambda t, s: float(t * s),  # a float that is a whole number
        lambda t, s: torch.tensor(t * s),  # a 0-d integer tensor
        lambda t, s: t * s,
    ],
    ids=["np.prod", "np.int32", "float", "0-d tensor", "int"],
)
def test_a_whole_number_in_any_form_is_accepted(answer):
    assert check_function("bytes", answer, product, BYTES_CASES, verbose=False).correct


def test_whole_numbers_are_compared_exactly_even_when_large():
    # one token too many: a relative tolerance of 1e-4 would accept it at 100,000 tokens
    result = check_function("bytes", lambda t, s: (t + 1) * s, product, BYTES_CASES, verbose=False)
    assert result.status == "incorrect"
    assert "returned 300003, expected 300000 (off by 3)" in result.message
    half = check_function("bytes", lambda t, s: t * s + 0.5, product, BYTES_CASES, verbose=False)
    assert "returned 300000.5, expected the whole number 300000" in half.message
    listed = check_function("bytes", lambda t, s: [t * s], product, BYTES_CASES, verbose=False)
    assert "returned a list of 1 item, expected a number" in listed.message


def test_integer_tensors_are_compared_exactly():
    cases = [Case((torch.tensor([20_000, 30_000]),))]
    off = check_function("tokens", lambda x: x + 1, lambda x: x.clone(), cases, verbose=False)
    assert off.status == "incorrect" and "largest difference 1" in off.message


# ------------------------------------------------------------------ arguments


def test_the_reference_gets_its_own_copy_of_an_object_argument():
    class Scale:
        def __init__(self):
            self.factor = torch.tensor(2.0)

    def reference(x, scale):
        return x * scale.factor

    def learner(x, scale):
        scale.factor = torch.tensor(3.0)  # replaces the object's tensor, then uses it
        return x * scale.factor

    cases = [Case((torch.ones(2), Scale()))]
    result = check_function("scale", learner, reference, cases, verbose=False)
    assert result.status == "misconception" and result.misconception == checking.IN_PLACE
    assert "`scale.factor` is not what it was" in result.message
    assert cases[0].args[1].factor.item() == 2.0  # the case itself is untouched


def test_a_call_that_does_not_fit_the_learners_parameters_is_said_so():
    result = check_function("demo", lambda x, y: x + y, lambda x: 2 * x, [Case((torch.ones(2),))], verbose=False)
    assert result.status == "error"
    assert "your function takes (x, y), but the exercise calls it with 1 argument(s)" in result.message


# ------------------------------------------------------------------ who failed


def test_the_checkers_own_failure_is_not_blamed_on_the_learner():
    def buggy_wrapper(function):
        def wrapped(*args):
            return function(*args).no_such_method()  # a bug in the checker's own code

        wrapped.__wrapped__ = function
        return wrapped

    learner = buggy_wrapper(lambda x: 2 * x)
    result = check_function("demo", learner, lambda x: 2 * x, [Case((torch.ones(2),))], verbose=False)
    assert result.status == "error"
    assert "the checker itself failed (AttributeError" in result.message and "not in your code" in result.message
    assert "your function raised" not in result.message


def test_answer_rejected_is_a_plain_not_yet():
    def wrapper(function):
        def wrapped(*args):
            value = function(*args)
            if value.dtype != torch.bool:
                raise AnswerRejected("return a boolean mask")
            return value

        wrapped.__wrapped__ = function
        return wrapped

    result = check_function(
        "mask", wrapper(lambda n: torch.ones(n, n)), lambda n: torch.ones(n, n, dtype=torch.bool), [Case((2,))]
    )
    assert result.status == "incorrect" and result.message.startswith("[mask] not yet: return a boolean mask.")


# ------------------------------------------------------------------ naming mistakes


def test_a_probe_tells_apart_two_mistakes_with_the_same_numbers():
    cases = [Case((torch.tensor([1.0, 2.0]),))]

    def doubled(x):
        return 2 * x

    # Both give 2x on the cases; only a probe at x = -1 tells a doubling from an abs-then-double.
    misconceptions = [
        Misconception(
            "abs then doubled", lambda x: 2 * x.abs(), "h1", detect=lambda run: run(torch.tensor([-1.0])) > 0
        ),
        Misconception("doubled", lambda x: 2 * x, "h2", detect=lambda run: run(torch.tensor([-1.0])) < 0),
    ]
    result = check_function("demo", doubled, lambda x: x + 1, cases, misconceptions, verbose=False)
    assert result.misconception == "doubled" and "several" not in result.message


def test_a_symptom_names_a_close_variant_only_when_nothing_fits_exactly():
    cases = [Case((torch.tensor([1.0, 2.0]),))]
    misconceptions = [
        Misconception("tripled", lambda x: 3 * x, "exactly 3x"),
        Misconception("grew too much", None, "more than x + 1", detect=lambda run: bool(run(torch.tensor([5.0])) > 6)),
    ]
    assert check_function(
        "demo", lambda x: 3 * x, lambda x: x + 1, cases, misconceptions, verbose=False
    ).misconception == ("tripled")
    variant = check_function("demo", lambda x: 3.5 * x, lambda x: x + 1, cases, misconceptions, verbose=False)
    assert variant.misconception == "grew too much" and "more than x + 1" in variant.diagnosis
    unrelated = check_function("demo", lambda x: x - 1, lambda x: x + 1, cases, misconceptions, verbose=False)
    assert unrelated.status == "incorrect"


# ------------------------------------------------------------------ the time limit without a signal


def test_the_time_limit_also_holds_outside_the_main_thread(monkeypatch):
    monkeypatch.setattr(checking, "TIME_LIMIT_SECONDS", 0.2)
    results = []

    def slow(x):
        deadline = time.monotonic() + 1.5  # ends by itself, so the test leaves no thread spinning
        while time.monotonic() < deadline:
            time.sleep(0.01)
        return x

    worker = threading.Thread(target=lambda: results.append(check_function("demo", slow, lambda x: x, [Case((1,))])))
    start = time.monotonic()
    worker.start()
    worker.join(5)
    assert time.monotonic() - start < 1.4  # stopped waiting at the limit, not when the loop ended
    assert results and results[0].status == "error"
    assert "did not return within 0.2 s" in results[0].message and "(in slow, line" in results[0].message


def test_a_right_answer_runs_once_per_case_so_its_prints_are_not_doubled(capsys):
    def softmax_that_prints(x):
        print("shape", tuple(x.shape))
        return torch.softmax(x, dim=-1)

    cases = [Case((torch.ones(2, 3),)), Case((torch.ones(4, 3),))]
    result = check_function(
        "demo", softmax_that_prints, lambda x: torch.softmax(x, -1), cases, shortcuts=("softmax",), verbose=False
    )
    assert result.correct and result.shortcuts == ("torch.softmax",)
    assert capsys.readouterr().out == "shape (2, 3)\nshape (4, 3)\n"


def test_an_outer_alarm_is_given_back_after_the_check():
    import signal

    fired = []
    previous = signal.signal(signal.SIGALRM, lambda *_: fired.append(True))
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        assert check_function("demo", lambda x: x, lambda x: x, [Case((torch.ones(2),))], verbose=False).correct
        remaining, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 0 < remaining <= 0.3
        time.sleep(0.5)
        assert fired == [True]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_noted_appends_the_note_to_every_text_said_and_records_the_shortcuts():
    told = checking.CheckResult("x", "misconception", "not yet.", symptom="differs.", diagnosis="", fix="do this.")
    result = checking.noted(told, " Note: n.", ("a.b", "c.d"))
    assert (result.message, result.symptom, result.diagnosis) == ("not yet. Note: n.", "differs. Note: n.", "")
    assert result.shortcuts == ("a.b", "c.d") and result.fix == "do this." and result.status == "misconception"
