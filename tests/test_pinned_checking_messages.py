"""The exercise checker's words (mhsa_helpers.teaching.checking), pinned exactly.

A learner reads these messages to find their mistake: what their function returned ("None", "a list
of 2 tensors"), how far a number is off, which call did not fit their parameters, and whose code
failed. Found unpinned by mutation testing (``make mutate``): the tests checked parts of the
messages, and the wording, a word's plural or a whole branch could change without a test noticing.

Written against the public API only: ``check_function`` with ``Case`` objects and the result's
``status``, ``exercise``, ``misconception`` and ``message``.
"""

from __future__ import annotations

import functools
import math

import torch

from mhsa_helpers.teaching.checking import AnswerRejected, Case, check_function

TWO_ZEROS = [Case((torch.zeros(2),), description="two zeros")]


def check(got, expected, cases=TWO_ZEROS, **options):
    """The result for a learner that returns ``got`` where the reference returns ``expected``."""
    return check_function("ex", lambda *a, **k: got, lambda *a, **k: expected, cases, verbose=False, **options)


def differs(detail: str) -> str:
    """The message of an answer that differs from the reference on the first case, as ``detail`` says."""
    return f"[ex] not yet: case 'two zeros' differs from the reference ({detail})."


# ------------------------------------------------------------------ what the learner returned


def test_a_missing_output_is_called_none():
    x = torch.ones(2)
    result = check((x, None), (x, x))
    assert result.message == differs("output 2: expected a tensor, got None (the other output matches)")


def test_several_tensors_where_one_is_expected_are_counted_in_the_plural():
    x = torch.ones(2)
    assert check([x, x], x).message == differs("expected a tensor, got a list of 2 tensors")
    # One tensor in a tuple: singular, and the learner is told to return the tensor itself.
    assert check((x,), x).message == differs("returned a tuple of 1 tensor; return the tensor itself")


def test_any_other_value_is_named_by_its_type():
    assert check("ones", torch.ones(2)).message == differs("expected a tensor, got a str")


# ------------------------------------------------------------------ numbers


def test_a_float_number_is_compared_with_the_relative_tolerance():
    # 1000.05 is within rtol=1e-4 of 1000 (0.1), 1000.2 is not: the relative tolerance is the one given.
    assert check(1000.05, 1000.0).correct
    assert check(1000.2, 1000.0).message == differs("returned 1000.2, expected 1000")
    assert check(1000.2, 1000.0, rtol=1e-3).correct


def test_nan_is_a_number_only_nan_matches():
    nan = float("nan")
    assert check(nan, nan).correct
    assert check(nan, 1.0).message == differs("returned nan, expected 1")
    assert check(1.0, nan).message == differs("returned 1, expected nan")


def test_a_0d_tensor_that_is_not_a_whole_number_is_shown_as_a_number():
    # A learner who returns torch.tensor(2.5) for a count reads the number, not "tensor(2.5000)".
    assert check(torch.tensor(2.5), 3).message == differs("returned 2.5, expected the whole number 3")


def test_a_0d_integer_tensor_reference_is_a_whole_number_compared_exactly():
    # 300001 is within the relative tolerance of 300000, but one token too many is a mistake.
    assert check(300_001, torch.tensor(300_000)).message == differs("returned 300001, expected 300000 (off by 1)")
    assert check(300_000, torch.tensor(300_000)).correct


def test_true_is_not_a_count():
    assert check(True, 1).message == differs("returned a bool, expected a number")


# ------------------------------------------------------------------ tensors


def test_a_float64_answer_to_float32_inputs_is_told_to_keep_their_dtype():
    values = [0.1, 0.2, 0.3]
    result = check(torch.tensor(values, dtype=torch.float64), torch.tensor(values, dtype=torch.float32))
    assert result.message == differs(
        "returned dtype torch.float64 for torch.float32 inputs: compute in the dtype of the inputs (a tensor you make "
        "takes dtype=x.dtype)"
    )


def test_a_float32_answer_to_float64_inputs_is_compared_at_float32s_precision():
    exact = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64) / 3
    assert check(exact.float(), exact).correct
    assert check((exact * (1 + 5e-5)).float(), exact).correct
    assert not check((exact * (1 + 5e-4)).float(), exact).correct


def test_complex_tensors_are_compared_with_the_tolerance():
    expected = torch.tensor([1.0 + 2.0j, -0.5j], dtype=torch.complex128)
    assert check(expected + 1e-9, expected).correct
    assert not check(expected + 1e-2, expected).correct


def test_an_empty_number_tensor_is_not_an_empty_mask():
    got, expected = torch.zeros(0), torch.zeros(0, dtype=torch.bool)
    assert check(got, expected).message == differs("returned dtype torch.float32, expected torch.bool")


# ------------------------------------------------------------------ who failed, and why


def test_an_error_without_a_line_of_the_learners_own_names_none():
    # A builtin passed as the answer has no line of its own: the message names no line.
    result = check_function("ex", math.sqrt, lambda v: 0.0, [Case((-1.0,))], verbose=False)
    assert result.message == (
        "[ex] your function raised ValueError: math domain error. It was called with -1.0; "
        "check which shapes your code assumes."
    )


def test_a_module_argument_is_described_by_its_class():
    def raising(layer, x):
        raise ValueError("boom")

    case = Case((torch.nn.Linear(2, 2), torch.zeros(2)))
    message = check_function("ex", raising, lambda layer, x: x, [case], verbose=False).message
    assert "It was called with a Linear, a tensor of shape (2,); " in message


def test_a_keyword_the_learner_does_not_take_is_said_so():
    def learner(x):
        return x

    case = Case((torch.zeros(2),), {"dim": 0})
    result = check_function("ex", learner, lambda x, dim: x, [case], verbose=False)
    assert result.exercise == "ex" and result.status == "error"
    assert result.message == (
        "[ex] not yet: your function takes (x), but the exercise calls it with 1 argument(s) "
        "(got an unexpected keyword argument 'dim'). It was called with a tensor of shape (2,), dim=0."
    )


def test_a_partial_a_callable_object_and_a_module_are_measured_by_their_own_parameters():
    """The call did not reach the learner's code: the message compares the call with the parameters of
    what the learner passed, seen through ``functools.partial``, a class's ``__call__`` (also a static
    one) and a module's ``forward``."""

    def scaled(x, scale):
        return x * scale

    class Doubler:
        def __call__(self, x):
            return 2 * x

    class StaticDoubler:
        @staticmethod
        def __call__(x):
            return 2 * x

    class Layer(torch.nn.Module):
        def forward(self, x):
            return 2 * x

    two = Case((torch.zeros(2), torch.ones(2)))
    learners = [("(x, *, scale=2.0)", functools.partial(scaled, scale=2.0)), ("(x)", Doubler()), ("(x)", Layer())]
    for parameters, learner in learners:
        result = check_function("ex", learner, lambda x, y: x, [two], verbose=False)
        assert (result.exercise, result.status) == ("ex", "error")
        assert result.message == (
            f"[ex] not yet: your function takes {parameters}, but the exercise calls it with 2 argument(s) "
            "(too many positional arguments). It was called with a tensor of shape (2,), a tensor of shape (2,)."
        )
    # A static `__call__`: inspect shows its parameters without the first one, but the call is still
    # the learner's to fix, not the checker's bug.
    message = check_function("ex", StaticDoubler(), lambda x, y: x, [two], verbose=False).message
    assert message.startswith("[ex] not yet: your function takes (")
    assert "but the exercise calls it with 2 argument(s) (too many positional arguments)" in message


def test_a_module_called_with_the_wrong_arguments_is_not_the_checkers_bug():
    """Was a bug: a module's own signature is ``(*args, **kwargs)``, so a call its ``forward`` does not
    take was reported as "the checker itself failed". The learner's ``forward`` is what the call must fit."""

    class Scale(torch.nn.Module):
        def forward(self, x, factor):
            return x * factor

    result = check_function("ex", Scale(), lambda x: x, TWO_ZEROS, verbose=False)
    assert result.message == (
        "[ex] not yet: your function takes (x, factor), but the exercise calls it with 1 argument(s) "
        "(missing a required argument: 'factor'). It was called with a tensor of shape (2,) (two zeros)."
    )


def test_a_partial_whose_keywords_do_not_fit_is_an_error_not_a_crash():
    def learner(x):
        return x

    result = check_function("ex", functools.partial(learner, bogus=1), lambda x: x, TWO_ZEROS, verbose=False)
    assert result.status == "error"
    assert "(TypeError: " in result.message and "unexpected keyword argument 'bogus'" in result.message


def test_the_checkers_own_failure_is_told_whole():
    def learner(x):
        return x

    @functools.wraps(learner)
    def broken_wrapper(x):
        learner(x)
        raise RuntimeError("the wrapper broke")  # after the learner returned: the checker's bug

    result = check_function("ex", broken_wrapper, lambda x: x, TWO_ZEROS, verbose=False)
    assert result.exercise == "ex" and result.status == "error"
    assert result.message == (
        "[ex] the checker itself failed (RuntimeError: the wrapper broke) after your function returned: "
        "this is a bug in the checker, not in your code."
    )


def test_a_module_calling_a_part_without_forward_is_an_error_not_a_stub():
    # PyTorch's own NotImplementedError for a module without `forward` is not an unsolved stub.
    class Outer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = torch.nn.Module()

        def forward(self, x):
            return self.inner(x)

    result = check_function("ex", Outer(), lambda x: x, TWO_ZEROS, verbose=False)
    assert result.status == "error", result.message
    assert result.message.startswith(
        '[ex] your function raised NotImplementedError: Module [Module] is missing the required "forward" function'
    )


def test_a_rejected_answer_names_its_exercise():
    def learner(x):
        raise AnswerRejected("return a boolean mask")

    result = check_function("ex", learner, lambda x: x, TWO_ZEROS, verbose=False)
    assert (result.exercise, result.status) == ("ex", "incorrect")
    assert result.message == (
        "[ex] not yet: return a boolean mask. It was called with a tensor of shape (2,) (two zeros)."
    )


def test_a_rejection_that_asks_a_question_keeps_its_question_mark():
    def learner(x):
        raise AnswerRejected("is this a mask?")

    result = check_function("ex", learner, lambda x: x, TWO_ZEROS, verbose=False)
    assert result.message == "[ex] not yet: is this a mask? It was called with a tensor of shape (2,) (two zeros)."
