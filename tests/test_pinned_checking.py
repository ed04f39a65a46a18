"""The exercise checker (mhsa_helpers.teaching.checking): a learner's in-place edits stay in the
learner's call. Found unpinned by mutation testing (``make mutate``): the checker could pass the
cases' own tensors to the learner, and no test noticed.

Written against public behaviour only: ``check_function`` with ``Case`` objects.
"""

from __future__ import annotations

import torch

from mhsa_helpers.teaching.checking import Case, Misconception, check_function


def _cases():
    return [
        Case((torch.tensor([1.0, 2.0, 3.0]),), description="three numbers"),
        Case((torch.tensor([[0.5, -1.0], [4.0, 2.0]]),), description="a 2x2 matrix"),
    ]


def test_a_learner_that_works_in_place_is_told_so_and_the_cases_are_unchanged():
    cases = _cases()
    before = [case.args[0].clone() for case in cases]

    def doubled_in_place(x):
        return x.mul_(2)

    # Right numbers, but the caller's tensor changed: a real bug, named as such.
    result = check_function("double", doubled_in_place, lambda x: 2 * x, cases, verbose=False)
    assert not result.correct and result.misconception == "changed an argument in place", result.message
    assert "changed its argument `x` in place" in result.message
    for case, original in zip(cases, before, strict=True):
        assert torch.equal(case.args[0], original)


def test_a_wrong_in_place_learner_does_not_corrupt_the_cases():
    cases = _cases()

    def zeroed_in_place(x):
        return x.zero_()

    mistakes = [Misconception("returned zeros", lambda x: 0 * x, "hint")]
    result = check_function("plus one", zeroed_in_place, lambda x: x + 1, cases, mistakes, verbose=False)
    assert result.misconception == "changed an argument in place", result.message
    assert torch.equal(cases[0].args[0], torch.tensor([1.0, 2.0, 3.0]))


def test_a_reference_that_works_in_place_does_not_change_what_the_learner_is_compared_on():
    cases = _cases()
    expected_sum = [float(case.args[0].sum()) for case in cases]

    def learner_sum(x):
        return x.sum()

    def reference_sum(x):
        total = x.sum()
        x.fill_(100.0)  # an untidy reference must not reach the next case or the learner
        return total

    result = check_function("sum", learner_sum, reference_sum, cases, verbose=False)
    assert result.correct, result.message
    assert [float(case.args[0].sum()) for case in cases] == expected_sum


# ---------------------------------------------------------------- what the checker tells the learner


def _raises(message):
    def learner(*args, **kwargs):
        raise ValueError(message)

    return learner


def test_keyword_arguments_of_a_case_reach_the_learner_and_the_reference():
    case = Case((torch.tensor([[1.0, 2.0], [3.0, 4.0]]),), {"dim": 0})
    result = check_function("sum", lambda x, dim: x.sum(dim), lambda x, dim: x.sum(dim), [case], verbose=False)
    assert result.correct, result.message
    wrong = check_function("sum", lambda x, dim: x.sum(1 - dim), lambda x, dim: x.sum(dim), [case], verbose=False)
    assert wrong.status == "incorrect"


def test_every_result_names_its_exercise():
    case = Case((torch.tensor([1.0, 2.0]),))

    def stub(x):
        raise NotImplementedError

    results = [
        check_function("ex", lambda x: 2 * x, lambda x: 2 * x, [case], verbose=False),
        check_function("ex", stub, lambda x: 2 * x, [case], verbose=False),
        check_function("ex", _raises("boom"), lambda x: 2 * x, [case], verbose=False),
        check_function(
            "ex", lambda x: 3 * x, lambda x: 2 * x, [case], [Misconception("m", lambda x: 3 * x, "h")], verbose=False
        ),
        check_function("ex", lambda x: 4 * x, lambda x: 2 * x, [case], verbose=False),
    ]
    assert [r.status for r in results] == ["correct", "not_attempted", "error", "misconception", "incorrect"]
    assert all(r.exercise == "ex" and r.message.startswith("[ex] ") for r in results)


def test_a_learner_returning_fewer_outputs_is_not_correct():
    case = Case((torch.tensor([1.0, 2.0]),))
    result = check_function("pair", lambda x: (x,), lambda x: (x, 2 * x), [case], verbose=False)
    assert result.status == "incorrect"


def test_tolerances_are_the_ones_given():
    case = Case((torch.tensor([1000.0, 2000.0]),))
    close = lambda x: x * (1 + 5e-4)  # noqa: E731  # a relative error of 5e-4, no absolute slack
    assert check_function("t", close, lambda x: x, [case], atol=0.0, rtol=1e-3, verbose=False).correct
    assert not check_function("t", close, lambda x: x, [case], atol=0.0, rtol=1e-4, verbose=False).correct


def test_a_crash_message_describes_the_arguments_passed():
    mask = torch.ones(2, 2, dtype=torch.bool)
    case = Case((torch.zeros(2, 3), mask, 3), {"scale": 0.5})
    message = check_function("ex", _raises("boom"), lambda *a, **k: a[0], [case], verbose=False).message
    assert "It was called with a tensor of shape (2, 3), a bool tensor of shape (2, 2), 3, scale=0.5; " in message
    described = Case((torch.zeros(4),), description="four zeros")
    message = check_function("ex", _raises("boom"), lambda x: x, [described], verbose=False).message
    assert "It was called with a tensor of shape (4,) (four zeros); " in message
    message = check_function("ex", _raises("boom"), lambda: torch.zeros(1), [Case(())], verbose=False).message
    assert "It was called with no arguments; " in message
    # a list of chunks (notebook 06's cache) is told by the shapes inside it, at any depth; other values as they are
    chunks = [(torch.zeros(1, 2), torch.zeros(3)), (torch.zeros(2),), (), [1, "a"]]
    message = check_function("ex", _raises("boom"), lambda c: c, [Case((chunks,))], verbose=False).message
    assert (
        "It was called with [(a tensor of shape (1, 2), a tensor of shape (3,)), (a tensor of shape (2,),), (), "
        "[1, 'a']]; " in message
    )


def test_a_crash_names_the_learners_own_line_only_when_there_is_one():
    import functools

    def raising(x):
        raise ValueError("boom")

    case = Case((torch.zeros(2),))
    # A callable without code of its own (a partial): no line can be named, and none is invented.
    message = check_function("ex", functools.partial(raising), lambda x: x, [case], verbose=False).message
    assert "your function raised ValueError: boom" in message and "It was called with" in message
    # Code without a source file: the line number, and no empty quote.
    namespace: dict = {}
    exec(compile("def learner(x):\n    raise ValueError('boom')\n", "<learner>", "exec"), namespace)
    message = check_function("ex", namespace["learner"], lambda x: x, [case], verbose=False).message
    assert "your function raised ValueError: boom (in learner, line 2). It was called with" in message


def test_the_difference_is_described():
    def message(got, expected):
        case = Case((torch.zeros(1),))
        return check_function("d", lambda x: got, lambda x: expected, [case], verbose=False).message

    assert "(largest difference 1)" in message(torch.tensor([2.0]), torch.tensor([1.0]))
    nan = float("nan")
    assert "your result has NaN at 1 position(s)" in message(torch.tensor([nan, 1.0]), torch.tensor([0.0, 1.0]))
    assert "the reference has NaN at 1 position(s)" in message(torch.tensor([0.0, 1.0]), torch.tensor([nan, 1.0]))
    # A mask returned as numbers: both the dtype and the gap are told, one after the other.
    got, expected = torch.tensor([1.0, 1.0]), torch.tensor([True, False])
    assert "(returned dtype torch.float32, expected torch.bool, largest difference 1)" in message(got, expected)
    # The first outputs are empty and alike, the second ones differ: the message names the second.
    empty = torch.zeros(0)
    assert "output 2: largest difference 1 (the other output matches)" in message(
        (empty, torch.ones(2)), (empty, torch.zeros(2))
    )


def test_a_crash_on_rectangular_inputs_is_quoted_whole_next_to_the_square_mistake():
    def learner(x):
        if x.shape[0] != x.shape[1]:
            raise ValueError("rows [0] and [1] do not match")
        return x.T

    result = check_function(
        "square",
        learner,
        lambda x: x,
        [Case((torch.arange(6.0).reshape(2, 3),))],
        [Misconception("transposed", lambda x: x.T, "hint")],
        square_cases=[Case((torch.arange(9.0).reshape(3, 3),))],
        verbose=False,
    )
    assert result.misconception == "transposed" and result.exercise == "square"
    assert "On other inputs your function raised ValueError: rows [0] and [1] do not match" in result.diagnosis
    assert result.message.startswith("[square] your function raised ValueError: rows [0] and [1] do not match")


def test_a_complex_difference_is_measured_in_both_parts():
    case = Case((torch.zeros(1),))
    got, expected = torch.tensor([1.0 + 2.0j]), torch.tensor([1.0 + 0.0j])
    message = check_function("c", lambda x: got, lambda x: expected, [case], verbose=False).message
    assert "(largest difference 2)" in message
