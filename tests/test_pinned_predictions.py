"""Checking a prediction (mhsa_helpers.teaching.predictions): what the learner reads for a missing, a stub, a
failing, a wrong-form, a wrong and a right prediction, try after try; the tolerance; and numbers given as
0-d tensors. Pinned exactly, found unpinned by mutation testing (``make mutate``).

Written against the public API: ``check_prediction``, ``prediction_tolerance``, the result's fields and its
``hint()`` and ``reveal()``.
"""

from __future__ import annotations

import math

import torch
from pinning import raises

from mhsa_helpers.teaching.checking import Misconception
from mhsa_helpers.teaching.predictions import check_prediction, prediction_tolerance

ZERO = Misconception("weights of zero", lambda: 0.0, "e^0 is 1.", fix="Work out e^0 first.", symptom="What is e^0?")


def predict(answer, *, truth=0.25, mistakes=(), **options):
    return check_prediction("p", answer, lambda: truth, "a weight", mistakes, verbose=False, **options)


# ------------------------------------------------------------------ before any value is compared


def test_a_missing_prediction_is_not_attempted_and_printed_by_default(capsys):
    result = check_prediction("p", None, lambda: 0.25, "a weight")
    assert (result.exercise, result.status) == ("p", "not_attempted")
    assert capsys.readouterr().out == "[p] not attempted yet: replace None by your prediction.\n"


def test_a_stub_is_told_to_be_replaced():
    def stub():
        raise NotImplementedError

    result = predict(stub)
    assert (result.exercise, result.status) == ("p", "not_attempted")
    assert result.message == (
        "[p] not attempted yet: replace the `raise NotImplementedError` line "
        "(or a function it calls still raises NotImplementedError)."
    )


def test_a_prediction_that_fails_is_told_its_error_without_measuring_the_truth():
    measured = []

    def truth():
        measured.append(1)
        return 0.25

    def fails():
        return 1 / 0

    result = check_prediction("p", fails, truth, "a weight", verbose=False)
    assert result.status == "error" and result.message.startswith("[p] your function raised ZeroDivisionError")
    assert measured == []


def test_a_prediction_that_is_neither_a_value_nor_a_function_is_refused():
    with raises(TypeError, "learner must be a function returning your prediction, or the value itself, got str"):
        predict("0.25")


def test_a_value_of_another_kind_is_told_what_it_is_in_the_exercises_words():
    # Not a number: neither higher nor lower, the checker's own message, naming the case by what is predicted.
    assert predict(lambda: "0.25").message == (
        "[p] not yet: case 'a weight' differs from the reference (returned a str, expected a number)."
    )


# ------------------------------------------------------------------ right


def test_a_right_prediction_is_printed_by_default_with_its_value(capsys):
    check_prediction("p", 0.25, lambda: 0.25, "a weight")
    check_prediction("p", 0.3333, lambda: 1 / 3, "a weight")
    check_prediction("p", 123456, lambda: 123456, "a count")
    assert capsys.readouterr().out == "[p] correct: 0.25.\n[p] correct: 0.3333.\n[p] correct: 123456.\n"


# ------------------------------------------------------------------ the tolerance


def test_the_relative_bound_applies_to_every_truth_but_zero():
    assert prediction_tolerance(1.0, [], math.inf) == 0.02
    assert prediction_tolerance(0.0, [], 0.1) == 0.1


def test_a_mistake_with_the_truths_value_does_not_shrink_the_tolerance():
    assert prediction_tolerance(0.25, [0.25], 0.1) == 0.005


def test_a_listed_mistake_near_a_large_truth_is_told_apart_with_no_relative_tolerance():
    # 1000.01 is within a relative 1e-4 of 1000, but it is the listed mistake: the tolerance is absolute only.
    rounded = Misconception("rounded", lambda: 1000.01, "Do not round.")
    assert predict(1000.01, truth=1000.0, mistakes=(rounded,)).misconception == "rounded"


def test_a_prediction_of_several_numbers_is_compared_entry_by_entry_within_the_exercises_atol():
    truth = torch.tensor([0.25, 0.75])
    assert predict(torch.tensor([0.255, 0.75]), truth=truth, atol=0.01).message == "[p] correct: [0.25, 0.75]."
    assert predict(torch.tensor([0.3, 0.75]), truth=truth, atol=0.01).message == (
        "[p] not yet: 1 of your 2 answers is wrong. Think it through once more."
    )


# ------------------------------------------------------------------ wrong: higher or lower, then the value


def test_a_0d_tensor_truth_is_a_number():
    too_high = "[p] not yet: your prediction 0.5 is too high. Think it through once more."
    assert predict(0.5, truth=torch.tensor(0.25)).message == too_high
    assert predict(torch.tensor(0.5), truth=torch.tensor(0.25)).message == too_high


def test_a_prediction_of_booleans_is_told_how_many_are_wrong():
    assert predict(torch.tensor([True, True]), truth=torch.tensor([True, False])).message == (
        "[p] not yet: 1 of your 2 answers is wrong. Think it through once more."
    )
    assert predict(0, truth=torch.tensor(True)).message == (
        "[p] not yet: 1 of your 1 answers is wrong. Think it through once more."
    )


def test_a_prediction_just_below_a_huge_whole_number_is_too_low():
    # 2^53 and 2^53 + 1 are the same float: the prediction is still lower.
    assert predict(2**53, truth=2**53 + 1).message == (
        "[p] not yet: your prediction 9.0072e+15 is too low. Think it through once more."
    )


def test_a_prediction_just_above_a_huge_whole_number_is_too_high():
    # The same two numbers the other way round: compared as floats they are equal, and "too low" would be wrong.
    assert predict(2**53 + 1, truth=2**53).message == (
        "[p] not yet: your prediction 9.0072e+15 is too high. Think it through once more."
    )


def test_several_numbers_are_held_to_two_percent_of_the_largest_when_the_exercise_allows_any_error():
    truth = torch.tensor([0.25, 0.75])
    assert predict(torch.tensor([0.26, 0.75]), truth=truth).correct  # 0.01 off: within 2% of 0.75
    assert predict(torch.tensor([0.27, 0.75]), truth=truth).message == (
        "[p] not yet: 1 of your 2 answers is wrong. Think it through once more."
    )


def test_a_listed_mistake_of_several_numbers_narrows_the_tolerance_to_a_quarter_of_its_largest_gap():
    assert prediction_tolerance(torch.tensor([0.25, 0.75]), [torch.tensor([0.25, 0.70])], math.inf) == (
        prediction_tolerance(0.75, [0.70], math.inf)
    )
    assert prediction_tolerance(torch.tensor([0.0, 0.0]), [torch.tensor([0.0, 1.0])], 1.0) == 0.25
    # A mistake of another shape, or with an infinity, says nothing about how close the truth's neighbours are.
    assert (
        prediction_tolerance(torch.tensor([0.25, 0.75]), [torch.tensor([0.25]), torch.tensor([math.inf, 0.75])], 1.0)
        == 0.015
    )


def test_a_whole_number_is_exact_whatever_the_tolerance():
    assert predict(511, truth=512).message.startswith("[p] not yet: your prediction 511 is too low.")
    assert predict(512.0, truth=512).correct


def test_a_listed_reasoning_that_cannot_be_worked_out_is_left_out():
    broken = Misconception("broken", lambda: 1 / 0, "…")
    assert predict(0.25, mistakes=(broken,)).correct
    assert predict(0.5, mistakes=(broken,)).misconception is None


def test_a_wrong_reasoning_without_a_symptom_is_still_said_to_be_known():
    silent = Misconception("weights of zero", lambda: 0.0, "e^0 is 1.")
    assert predict(0.0, mistakes=(silent,)).message == (
        "[p] not yet: your prediction 0 is too low. A known wrong way to reason: `result.hint()` names it."
    )


def test_the_fix_of_the_reasoning_the_prediction_fits_comes_before_the_value(capsys):
    result = predict(0.0, mistakes=(ZERO,))
    assert result.fix == "[p] Work out e^0 first. The value is 0.25."
    result.reveal()
    assert capsys.readouterr().out == "[p] Work out e^0 first. The value is 0.25.\n"


def test_a_prediction_that_fits_no_reasoning_is_shown_no_ones_fix():
    assert predict(0.5, mistakes=(ZERO,)).fix == "[p] The value is 0.25."


def test_from_the_third_wrong_try_on_the_named_reasoning_comes_with_the_value(capsys):
    predict(0.5)
    predict(0.4)
    third = predict(0.0, mistakes=(ZERO,))
    named = "[p] not yet: this looks like 'weights of zero'. e^0 is 1. `result.reveal()` shows the fix."
    assert third.message == (
        "[p] not yet: your prediction 0 is too low. What is e^0? A known wrong way to reason: `result.hint()` "
        "names it. The value is 0.25."
    )
    assert third.diagnosis == f"{named} The value is 0.25."
    third.hint()
    assert capsys.readouterr().out == f"{named} The value is 0.25.\n"
    assert predict(0.0, mistakes=(ZERO,)).message == f"{named} The value is 0.25."


def test_from_the_third_wrong_try_on_a_prediction_that_fits_no_reasoning_is_hinted_the_value(capsys):
    predict(0.5)
    predict(0.4)
    third = predict(0.5)
    assert (
        third.message == "[p] not yet: your prediction 0.5 is too high. Think it through once more. The value is 0.25."
    )
    assert third.diagnosis == ""
    third.hint()
    assert capsys.readouterr().out == "[p] The value is 0.25.\n"


# ------------------------------------------------------------------ the right number in the wrong form; the order


def test_the_right_number_in_another_shape_is_told_its_shape_not_too_low():
    assert predict(torch.tensor([3.0]), truth=torch.tensor(3.0)).message == (
        "[p] not yet: case 'a weight' differs from the reference (got shape (1,), expected shape ())."
    )
    assert predict(torch.tensor([3.0]), truth=3.0).message == (
        "[p] not yet: case 'a weight' differs from the reference (returned a tensor of shape (1,), expected a number)."
    )


def test_higher_or_lower_compares_the_numbers_as_given_not_after_rounding_to_the_truths_dtype():
    # 16777217 rounds to 16777216 in float32: compared as tensors, the two would be equal ("too low").
    result = predict(torch.tensor(16777217), truth=torch.tensor(16777216.0), atol=0.0)
    assert result.message == "[p] not yet: your prediction 1.67772e+07 is too high. Think it through once more."


# ------------------------------------------------------------------ which listed mistakes bound the tolerance


def test_a_mistake_without_a_value_or_failing_leaves_the_next_ones_bounding_the_tolerance():
    near = Misconception("near", lambda: 10.4, "close")
    unknown = Misconception("unknown", None, "no value")

    def fails():
        raise ValueError("cannot be worked out here")

    failing = Misconception("failing", fails, "raises")
    for first in (unknown, failing):
        # a quarter of the gap to 10.4 is 0.1, tighter than 2% of 10 (0.2)
        assert predict(10.15, truth=10.0, mistakes=(first, near)).status == "incorrect"
        assert predict(10.05, truth=10.0, mistakes=(first, near)).correct


def test_the_tolerance_ignores_a_mistake_of_another_shape_and_takes_any_tensor():
    assert prediction_tolerance(10.0, [torch.tensor([10.2, 10.2])], math.inf) == 0.2
    assert prediction_tolerance(torch.tensor([0.5, 0.5]), [torch.tensor([True, False])], math.inf) == 0.01
    assert prediction_tolerance(torch.tensor([True, True]), [torch.tensor([0.0, 1.0])], math.inf) == 0.02
    assert prediction_tolerance(torch.empty(0), [], math.inf) == math.inf
    assert prediction_tolerance(torch.empty(0), [], 0.5) == 0.5


def test_a_prediction_of_several_values_that_are_not_numbers_is_compared_as_given():
    result = predict(lambda: (True, False), truth=(True, True))
    assert (result.status, result.correct) == ("incorrect", False)
    assert predict(lambda: (True, True), truth=(True, True)).correct
