"""The checker machinery (mhsa_helpers.teaching.checking) on small made-up exercises.

Each exercise here is tiny and its right and wrong answers are written by hand, so
the expected status and message follow from the exercise, not from the checkers
built on top of core.
"""

from __future__ import annotations

import pytest
import torch

import mhsa_helpers.teaching.checking as checking
from mhsa_helpers.teaching.checking import (
    Case,
    CheckResult,
    Misconception,
    check_function,
    random_tensor,
    random_tensors,
)

NOT_ATTEMPTED = (
    "[demo] not attempted yet: replace the `raise NotImplementedError` line "
    "(or a function it calls still raises NotImplementedError)."
)


def stub(*args):
    raise NotImplementedError


# ------------------------------------------------------------ the basic outcomes


def test_module_exports_the_core_api():
    assert checking.check_function is check_function
    assert checking.Case is Case and checking.Misconception is Misconception
    assert checking.CheckResult is CheckResult
    assert checking.random_tensor is random_tensor and checking.random_tensors is random_tensors
    assert set(checking.__all__) == {
        "AnswerRejected",
        "IN_PLACE",
        "STATE_CHANGED",
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
    }


def test_correct(capsys):
    cases = [Case((torch.tensor([1.0, -2.0, 3.0]),), description="three numbers")]
    result = check_function("demo", lambda x: x + x, lambda x: 2 * x, cases)
    assert result.status == "correct" and result.correct
    assert result.message == "[demo] correct on its one case."
    assert capsys.readouterr().out == result.message + "\n"


def test_not_attempted_does_not_raise_and_prints(capsys):
    cases = [Case((torch.ones(2),))]
    result = check_function("demo", stub, lambda x: x, cases)
    assert result.status == "not_attempted" and not result.correct
    assert result.misconception is None
    assert result.message == NOT_ATTEMPTED
    assert capsys.readouterr().out == NOT_ATTEMPTED + "\n"


def test_not_attempted_even_with_square_cases():
    square = [Case((torch.ones(2, 2),))]
    result = check_function("demo", stub, lambda x: x, [Case((torch.ones(2, 3),))], square_cases=square, verbose=False)
    assert result.status == "not_attempted"


def test_error_is_reported_with_the_case_not_raised():
    def learner(x):
        raise ValueError("boom")

    cases = [Case((torch.ones(2),), description="two ones")]
    result = check_function("demo", learner, lambda x: x, cases, verbose=False)
    assert result.status == "error" and not result.correct
    # The learner's own line, the arguments the checker passed, and the case's description.
    line = learner.__code__.co_firstlineno + 1
    assert result.message == (
        f'[demo] your function raised ValueError: boom (in learner, line {line}: `raise ValueError("boom")`). '
        "It was called with a tensor of shape (2,) (two ones); check which shapes your code assumes."
    )


def test_non_function_is_a_type_error():
    with pytest.raises(TypeError, match="learner must be a function, got int"):
        check_function("demo", 3, lambda x: x, [Case((torch.ones(2),))], verbose=False)


def test_incorrect_names_the_first_differing_case_and_the_largest_difference():
    cases = [
        Case((torch.tensor([1.0, 2.0]),), description="agrees"),
        Case((torch.tensor([1.0, -2.0, 4.0]),), description="has a negative"),
    ]
    # |x| is right for non-negative inputs only; on the second case it is 4 away at -2.
    result = check_function("demo", torch.abs, lambda x: x.clone(), cases, verbose=False)
    assert result.status == "incorrect"
    assert result.misconception is None
    assert result.message == (
        "[demo] not yet: case 'has a negative' differs from the reference (largest difference 4); 1 of 2 cases "
        "differ, and it is right on 'agrees'."
    )


def test_shapes_are_shown_only_when_they_differ():
    cases = [Case((torch.ones(3),), description="three ones")]
    result = check_function("demo", lambda x: x[:2], lambda x: x.clone(), cases, verbose=False)
    assert result.message.endswith("(got shape (2,), expected shape (3,)).")


def test_incorrect_shape_is_reported():
    cases = [Case((torch.ones(2, 3),), description="2 by 3")]
    result = check_function("demo", lambda x: x.T, lambda x: x.clone(), cases, verbose=False)
    assert result.status == "incorrect"
    assert "got shape (3, 2), expected shape (2, 3)" in result.message


def test_non_tensor_answer_is_incorrect_with_a_clear_reason():
    cases = [Case((torch.ones(2),), description="two ones")]
    result = check_function("demo", lambda x: x.tolist(), lambda x: x.clone(), cases, verbose=False)
    assert result.status == "incorrect"
    assert "expected a tensor, got a list of 2 items" in result.message


def test_float32_answer_matches_a_float64_reference_and_int_answers_compare_by_value():
    cases = [Case((torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64),))]
    assert check_function("demo", lambda x: (2 * x).float(), lambda x: 2 * x, cases, verbose=False).correct
    assert check_function("demo", lambda x: (2 * x).long(), lambda x: 2 * x, cases, verbose=False).correct
    # an int reference is not matched by a float answer that merely truncates to it
    off = check_function("demo", lambda x: 2 * x + 0.5, lambda x: (2 * x).long(), cases, verbose=False)
    assert off.status == "incorrect" and "largest difference 0.5" in off.message


def test_tuple_outputs_are_compared_element_by_element():
    cases = [Case((torch.tensor([3.0, 4.0]),))]

    def reference(x):
        return x + 1, x * 2

    assert check_function("demo", lambda x: (x + 1, x + x), reference, cases, verbose=False).correct
    result = check_function("demo", lambda x: (x + 1, x * 3), reference, cases, verbose=False)
    assert result.status == "incorrect"


# ------------------------------------------------------------ misconceptions


def test_every_fitting_misconception_is_named_and_a_crashing_one_is_skipped():
    cases = [Case((torch.tensor([1.0, 2.0, 3.0]),)), Case((torch.tensor([[1.0, 2.0], [3.0, 4.0]]),))]

    def crashes(x):
        raise RuntimeError("this misconception cannot run here")

    misconceptions = [
        Misconception("crashes", crashes, "never named"),
        Misconception("subtracted one", lambda x: x - 1, "add, don't subtract"),
        Misconception("doubled", lambda x: 2 * x, "add one"),
        Misconception("doubled again", lambda x: x + x, "or added x"),
    ]
    result = check_function("demo", lambda x: x * 2.0, lambda x: x + 1, cases, misconceptions, verbose=False)
    assert result.status == "misconception" and not result.correct
    # Two named mistakes give the same numbers: both are said, the first is the result's name.
    assert result.misconception == "doubled"
    assert result.diagnosis == (
        "[demo] not yet: your numbers fit 2 known mistakes, which give the same results on these cases; "
        "look for either. 'doubled': add one Or 'doubled again': or added x"
    )
    alone = check_function("demo", lambda x: x * 2.0, lambda x: x + 1, cases, misconceptions[:3], verbose=False)
    assert alone.diagnosis == "[demo] not yet: this looks like 'doubled'. add one"


def test_a_misconception_must_match_on_every_case():
    cases = [Case((torch.tensor([0.0]),)), Case((torch.tensor([2.0]),))]
    # x**2 agrees with the misconception 2x on x=0 and x=2, x**3 only on x=0
    misconceptions = [Misconception("doubled", lambda x: 2 * x, "hint")]
    assert check_function("demo", lambda x: x**2, lambda x: x, cases, misconceptions, verbose=False).misconception == (
        "doubled"
    )
    assert check_function("demo", lambda x: x**3, lambda x: x, cases, misconceptions, verbose=False).status == (
        "incorrect"
    )


# ------------------------------------------------------------ NaN is a value


def test_nan_producing_misconception_is_named_when_the_nan_positions_match():
    cases = [Case((torch.tensor([4.0, -1.0, 9.0, -4.0]),), description="mixed signs")]

    def reference(x):
        return x.abs().sqrt() * x.sign()  # the signed square root: never NaN

    misconceptions = [
        # NaN in the other places (where x > 0): must not be named
        Misconception("rooted the negated input", lambda x: (-x).sqrt(), "wrong one"),
        Misconception("took the root of a negative number", torch.sqrt, "keep the sign apart"),
    ]
    result = check_function("demo", lambda x: x**0.5, reference, cases, misconceptions, verbose=False)
    assert result.status == "misconception"
    assert result.misconception == "took the root of a negative number"


def test_nan_where_the_reference_has_nan_is_correct():
    cases = [Case((torch.tensor([1.0, float("nan"), 3.0]),))]
    assert check_function("demo", lambda x: x * 1.0, lambda x: x.clone(), cases, verbose=False).correct


def test_nan_where_the_reference_has_a_number_is_incorrect_and_said_so():
    cases = [Case((torch.tensor([1.0, -1.0, 9.0]),), description="one negative")]
    result = check_function("demo", torch.sqrt, lambda x: x.abs().sqrt(), cases, verbose=False)
    assert result.status == "incorrect"
    # sqrt(-1) is NaN where the reference has 1; the other entries agree exactly
    assert "NaN at 1 position(s) where the other has a number)." in result.message  # never "differs by 0"


def test_equal_infinities_are_not_a_difference():
    cases = [Case((torch.tensor([float("inf"), 1.0]),), description="with inf")]
    result = check_function("demo", lambda x: x + 1.0, lambda x: x.clone(), cases, verbose=False)
    assert result.status == "incorrect"
    assert "largest difference 1" in result.message  # inf vs inf counts 0, not NaN


# ------------------------------------------------------------ square-case retry


def _rectangular_and_square():
    g = torch.Generator().manual_seed(0)
    # the exercise: x (seq, d_in) times w (d_out, d_in) in nn.Linear layout -> x @ w.T
    rectangular = [
        Case((random_tensor(g, 3, 4), random_tensor(g, 2, 4)), description="x (3, 4), w (2, 4)"),
        Case((random_tensor(g, 5, 2), random_tensor(g, 3, 2)), description="x (5, 2), w (3, 2)"),
    ]
    square = [Case(random_tensors((3, 3), (3, 3), seed=1), description="x (3, 3), w (3, 3)")]
    return rectangular, square


FORGOT_TRANSPOSE = Misconception("forgot to transpose W", lambda x, w: x @ w, "use x @ w.T")


def test_square_retry_names_a_transposition_mistake_that_crashes_on_rectangular_inputs():
    rectangular, square = _rectangular_and_square()

    def learner(x, w):
        return torch.matmul(x, w)  # (3, 4) @ (2, 4) cannot be multiplied

    result = check_function(
        "demo", learner, lambda x, w: x @ w.T, rectangular, [FORGOT_TRANSPOSE], square_cases=square, verbose=False
    )
    assert result.status == "misconception"
    assert result.misconception == "forgot to transpose W"
    assert result.diagnosis.startswith("[demo] not yet: this looks like 'forgot to transpose W'. use x @ w.T")
    assert "On other inputs your function raised RuntimeError" in result.diagnosis
    assert "(x (3, 4), w (2, 4))" in result.diagnosis
    assert "on square inputs, where every axis has the same length" in result.diagnosis
    assert result.message.startswith("[demo] your function raised RuntimeError") and "known mistake" in result.message


def test_without_square_cases_the_same_mistake_is_an_error():
    rectangular, _ = _rectangular_and_square()
    result = check_function(
        "demo", lambda x, w: x @ w, lambda x, w: x @ w.T, rectangular, [FORGOT_TRANSPOSE], verbose=False
    )
    assert result.status == "error"
    assert "RuntimeError" in result.message


def test_square_retry_that_matches_nothing_keeps_the_error():
    rectangular, square = _rectangular_and_square()
    result = check_function(
        "demo",
        lambda x, w: x @ w + 1.0,
        lambda x, w: x @ w.T,
        rectangular,
        [FORGOT_TRANSPOSE],
        square_cases=square,
        verbose=False,
    )
    assert result.status == "error"
    assert result.misconception is None


def test_square_cases_are_not_used_when_nothing_crashed():
    rectangular, square = _rectangular_and_square()
    result = check_function(
        "demo",
        lambda x, w: x @ w.T,
        lambda x, w: x @ w.T,
        rectangular,
        [FORGOT_TRANSPOSE],
        square_cases=square,
        verbose=False,
    )
    assert result.message == "[demo] correct on all 2 cases."  # 2 rectangular cases, not 3


# ------------------------------------------------------------ bool masks


def _lower_triangle(n):
    return torch.ones(n, n, dtype=torch.bool).tril()


MASK_CASES = [Case((3,), description="n=3")]


def test_float_mask_where_bool_is_expected_is_a_difference_with_a_clear_message():
    result = check_function("demo", lambda n: torch.ones(n, n).tril(), _lower_triangle, MASK_CASES, verbose=False)
    assert result.status == "incorrect"
    # the values agree, only the dtype is wrong
    assert result.message == (
        "[demo] not yet: case 'n=3' differs from the reference (returned dtype torch.float32, expected torch.bool)."
    )


def test_int_mask_where_bool_is_expected_is_a_difference():
    result = check_function(
        "demo", lambda n: torch.ones(n, n, dtype=torch.long).tril(), _lower_triangle, MASK_CASES, verbose=False
    )
    assert result.status == "incorrect"
    assert "returned dtype torch.int64, expected torch.bool" in result.message


def test_bool_answer_where_numbers_are_expected_is_a_difference():
    result = check_function("demo", _lower_triangle, lambda n: torch.ones(n, n).tril(), MASK_CASES, verbose=False)
    assert result.status == "incorrect"
    assert "returned dtype torch.bool, expected torch.float32" in result.message


def test_wrong_bool_mask_reports_its_difference_without_crashing():
    # upper instead of lower triangle: the off-diagonal entries differ by 1 (True vs False)
    result = check_function(
        "demo", lambda n: torch.ones(n, n, dtype=torch.bool).triu(), _lower_triangle, MASK_CASES, verbose=False
    )
    assert result.status == "incorrect"
    assert "largest difference 1" in result.message
    assert "dtype" not in result.message


def test_a_bool_misconception_does_not_match_a_number_answer():
    inverted = Misconception("inverted", lambda n: ~_lower_triangle(n), "hint")

    def bool_learner(n):
        return ~_lower_triangle(n)

    def number_learner(n):
        return (~_lower_triangle(n)).float()

    assert check_function(
        "demo", bool_learner, _lower_triangle, MASK_CASES, [inverted], verbose=False
    ).misconception == ("inverted")
    assert check_function("demo", number_learner, _lower_triangle, MASK_CASES, [inverted], verbose=False).status == (
        "incorrect"
    )


# ------------------------------------------------------------ case helpers


def test_random_tensor_and_random_tensors_are_seeded_float64():
    a = random_tensor(torch.Generator().manual_seed(3), 2, 5, scale=3.0)
    b = random_tensor(torch.Generator().manual_seed(3), 2, 5)
    assert a.dtype == torch.float64 and a.shape == (2, 5)
    torch.testing.assert_close(a, 3.0 * b)
    x, w = random_tensors((3, 3), (2, 3, 3), seed=7)
    assert x.shape == (3, 3) and w.shape == (2, 3, 3) and w.dtype == torch.float64
    x_again, _ = random_tensors((3, 3), (2, 3, 3), seed=7)
    assert torch.equal(x, x_again)
    assert not torch.equal(x, random_tensors((3, 3), seed=8)[0])
