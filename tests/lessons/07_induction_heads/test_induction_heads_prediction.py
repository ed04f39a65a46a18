"""The prediction exercise of notebook 07 (the previous-token score of a head that has learned nothing):
the checker accepts the number worked out on paper, names the classic slips, and then reports what
the shipped run's 8 heads scored at step 0."""

from __future__ import annotations

import re

import pytest

from mhsa_helpers.lessons.induction_heads import PREDICTION_SEQ, check_untrained_prediction

EVEN = sum(1 / (t + 1) for t in range(1, PREDICTION_SEQ)) / (PREDICTION_SEQ - 1)  # 0.0987 for 32 tokens


def test_the_paper_answer_is_accepted_and_the_measurement_is_shown():
    result = check_untrained_prediction(lambda: EVEN, verbose=False)
    assert result.correct
    low, high = map(float, re.search(r"scored (\d\.\d+) to (\d\.\d+)", result.message).groups())
    assert 0.08 < low <= high < 0.12  # random heads at step 0 spread almost evenly
    assert check_untrained_prediction(lambda: 0.105, verbose=False).correct  # within 0.01
    assert not check_untrained_prediction(lambda: 0.115, verbose=False).correct


@pytest.mark.parametrize(
    ("answer", "named"),
    [
        (1 / 32, "spread over every key, the future ones too"),
        (1 / 17, "the share of the middle query"),
        (sum(1 / (t + 1) for t in range(32)) / 32, "counted query 0"),
        (0.0, "an untrained head looks nowhere"),
    ],
)
def test_each_classic_slip_is_named(answer, named):
    result = check_untrained_prediction(lambda: answer, verbose=False)
    assert not result.correct and result.misconception == named
    assert "Measured at step 0" in result.message


def test_a_wild_guess_is_rejected_without_a_name_and_a_placeholder_is_not_attempted():
    result = check_untrained_prediction(lambda: 0.5, verbose=False)
    assert result.status == "incorrect" and result.misconception is None

    def placeholder():
        raise NotImplementedError

    assert check_untrained_prediction(placeholder, verbose=False).status == "not_attempted"
