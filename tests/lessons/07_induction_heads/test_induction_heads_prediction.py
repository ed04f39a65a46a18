"""The prediction exercise of notebook 07 (the previous-token score of a head that has learned nothing):
the checker accepts the number worked out on paper and shows what the shipped run's 8 heads scored at
step 0; a wrong number is told too high or too low (and why-so for a known slip, named on a repeat); the
value comes only after a few tries or on ``reveal()``. Near misses are told apart: dividing by 32
instead of 31 (3% low) and a number 10% off are not right.
"""

from __future__ import annotations

import re

import pytest

from mhsa_helpers.lessons.induction_heads import PREDICTION_SEQ, check_untrained_prediction
from mhsa_helpers.teaching import feedback

EVEN = sum(1 / (t + 1) for t in range(1, PREDICTION_SEQ)) / (PREDICTION_SEQ - 1)  # 0.0987 for 32 tokens


def test_the_paper_answer_is_accepted_and_the_measurement_is_shown():
    result = check_untrained_prediction(lambda: EVEN, verbose=False)
    assert result.correct
    low, high = map(float, re.search(r"scored (\d\.\d+) to (\d\.\d+)", result.message).groups())
    assert 0.08 < low <= high < 0.12  # random heads at step 0 spread almost evenly
    assert f"{EVEN:.4g}" in result.message and "Measured at step 0" in result.message


@pytest.mark.parametrize("answer", [0.0987, 0.099, round(EVEN, 4)])
def test_the_value_to_three_digits_is_accepted(answer):
    assert check_untrained_prediction(lambda: answer, verbose=False).correct
    assert check_untrained_prediction(answer, verbose=False).correct  # the number itself will do too


@pytest.mark.parametrize(
    ("answer", "direction"),
    [(EVEN * 1.1, "too high"), (EVEN * 0.9, "too low"), (0.105, "too high"), (0.1, "too high")],
)
def test_a_near_miss_is_rejected_with_its_direction_and_without_the_value(answer, direction):
    result = check_untrained_prediction(lambda: answer, verbose=False)
    assert result.status == "incorrect" and result.misconception is None
    assert direction in result.message
    assert f"{EVEN:.4g}" not in result.message and "Measured" not in result.message


def test_dividing_by_the_32_tokens_instead_of_the_31_queries_is_told_apart():
    thirty_two = sum(1 / (t + 1) for t in range(1, 32)) / 32  # 3% below the truth
    result = check_untrained_prediction(lambda: thirty_two, verbose=False)
    assert result.misconception == "divided by 32 queries, not 31"
    assert "too low" in result.message and "divided by 32" not in result.message


@pytest.mark.parametrize(
    ("answer", "named", "direction"),
    [
        (1 / 32, "spread over every key, the future ones too", "too low"),
        (1 / 17, "the share of the middle query", "too low"),
        (sum(1 / (t + 1) for t in range(32)) / 32, "counted query 0", "too high"),
        (sum(1 / t for t in range(1, 32)) / 31, "forgot that a query sees itself", "too high"),
        (0.0, "an untrained head looks nowhere", "too low"),
    ],
)
def test_each_classic_slip_is_told_its_direction_then_named(answer, named, direction):
    first = check_untrained_prediction(lambda: answer, verbose=False)
    assert first.misconception == named
    assert direction in first.message and named not in first.message and "result.hint()" in first.message
    assert f"{EVEN:.4g}" not in first.message
    again = check_untrained_prediction(lambda: answer, verbose=False)
    assert named in again.message and f"{EVEN:.4g}" not in again.message


def test_the_value_and_the_measurement_come_after_three_wrong_tries_or_on_reveal(capsys):
    for answer in (0.5, 0.2):
        assert f"{EVEN:.4g}" not in check_untrained_prediction(lambda a=answer: a, verbose=False).message
    third = check_untrained_prediction(lambda: 0.3, verbose=False)
    assert feedback.wrong_tries("untrained_prediction") == 3
    assert f"The value is {EVEN:.4g}" in third.message and "Measured at step 0" in third.message
    feedback.forget()
    first = check_untrained_prediction(lambda: 0.5, verbose=False)
    first.reveal()
    assert f"The value is {EVEN:.4g}" in capsys.readouterr().out


def test_a_placeholder_is_not_attempted():
    def placeholder():
        raise NotImplementedError

    assert check_untrained_prediction(placeholder, verbose=False).status == "not_attempted"
    assert check_untrained_prediction(None, verbose=False).status == "not_attempted"
