"""The checkers of notebook 09's exercises: the sliding-window mask, ALiBi's biases and NTK-aware RoPE
frequencies.

The right answers are written here by hand. A wrong answer is told its symptom first and its name on a
repeat, the fix only on request; answers fitted to the teaching sizes (a lookup, a fixed buffer, the slopes of
8 heads), and answers that change PyTorch's global settings, are refused; a right answer computed in float32 is
accepted. No exercise cell of the committed notebook names a mistake.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from checker_table import catalogue_tests, state_change_tests, table_tests
from test_wrong_answers import Wrong

from mhsa_helpers.lessons.long_context import check_alibi_bias, check_ntk_frequencies, check_window_mask, exercises

NOTEBOOK = Path(__file__).resolve().parents[3] / "notebooks" / "09_long_context.ipynb"


def window(n, w):
    behind = torch.arange(n)[:, None] - torch.arange(n)[None, :]
    return (behind >= 0) & (behind < w)


def alibi(h, n, future=0.0, dtype=torch.float32):
    slopes = torch.tensor([2.0 ** (-8 * (k + 1) / h) for k in range(h)], dtype=dtype)
    distance = (torch.arange(n)[:, None] - torch.arange(n)[None, :]).to(dtype)
    return (-slopes[:, None, None] * distance).masked_fill(distance < 0, future)


def frequencies(d, base, dtype=torch.float64):
    return base ** -(torch.arange(0, d, 2, dtype=dtype) / d)


def ntk(d, base, factor, dtype=torch.float64):
    return frequencies(d, base * factor ** (d / (d - 2)), dtype)


# ------------------------------------------------------------------ the checkers' table


def window_one_too_long(n, w):
    return window(n, w + 1)


def window_without_the_query(n, w):
    return window(n, w + 1) & ~torch.eye(n, dtype=torch.bool)


def window_both_ways(n, w):
    return window(n, w) | window(n, w).T


def alibi_per_position(h, n):
    slopes = torch.tensor([2.0 ** (-8 * (k + 1) / h) for k in range(h)])
    return -slopes * (torch.arange(n)[:, None] - torch.arange(n)[None, :]).abs().float()


CHECKERS = {
    # A misconception known by its symptom alone has no implementation to feed: it is in the catalogue below.
    "window_mask": (check_window_mask, window, [m for m in exercises.WINDOW_MISCONCEPTIONS if m.implementation]),
    "alibi_bias": (check_alibi_bias, alibi, exercises.ALIBI_MISCONCEPTIONS),
    "ntk_frequencies": (check_ntk_frequencies, ntk, exercises.NTK_MISCONCEPTIONS),
}

LISTED_MISTAKES = [
    ("window_mask", window_one_too_long, "off by one: the window holds window + 1 keys"),
    ("window_mask", window_without_the_query, "the query cannot see itself"),
    ("window_mask", window_both_ways, "forgot causality: the window reaches into the future"),
    ("window_mask", lambda n, w: ~window(n, w), "mask polarity inverted (True = blocked)"),
    ("alibi_bias", lambda h, n: -alibi(h, n), "wrong sign: distant keys are favoured"),
    ("alibi_bias", lambda h, n: alibi(h, n) * 2.0 ** (8 / h), "slopes start at 1 (2^(-8h/n) from h = 0)"),
    ("alibi_bias", lambda h, n: alibi(8, n)[:h], "the slopes of 8 heads, whatever the number of heads"),
    ("ntk_frequencies", lambda d, b, s: frequencies(d, b * s), "base scaled by the factor itself"),
    ("ntk_frequencies", lambda d, b, s: frequencies(d, b * s ** ((d - 2) / d)), exercises.NTK_MISCONCEPTIONS[2].name),
]  # fmt: skip

(
    test_independent_solution_is_correct,
    test_stub_is_not_attempted,
    test_listed_mistakes_are_named,
    test_every_misconception_is_told_apart,
    test_unknown_wrong_answer_is_incorrect,
    test_a_crash_is_reported_not_raised,
) = table_tests(CHECKERS, LISTED_MISTAKES)


def test_alibi_accepts_any_values_above_the_diagonal():
    assert check_alibi_bias(lambda h, n: alibi(h, n, float("-inf")), verbose=False).correct
    assert check_alibi_bias(lambda h, n: alibi(h, n, 123.0, dtype=torch.float64), verbose=False).correct


def test_slopes_per_position_crash_and_are_named_on_square_inputs():
    first = check_alibi_bias(alibi_per_position, verbose=False)
    assert first.misconception == "slopes per position instead of per head"
    assert "On square inputs" in first.message and "per position" not in first.message
    again = check_alibi_bias(alibi_per_position, verbose=False)
    assert "slopes per position instead of per head" in again.message and "RuntimeError" in again.message


def test_a_window_mask_of_numbers_is_not_a_mask():
    result = check_window_mask(lambda n, w: window(n, w).int(), verbose=False)
    assert result.status == "incorrect" and "expected torch.bool" in result.message


# ------------------------------------------------------------------ answers fitted to what the checker shows

MASK_16 = torch.tril(torch.ones(16, 16, dtype=torch.bool))
TEACHING_WINDOWS = {(6, 3): window(6, 3), (7, 1): window(7, 1), (5, 5): window(5, 5), (17, 2): window(17, 2)}
TEACHING_FREQUENCIES = {(16, 4.0), (8, 2.0), (64, 8.0)}


def window_looked_up(n, w):
    # The four masks of the message, and a guess (the causal triangle) for anything else.
    return TEACHING_WINDOWS[(n, w)].clone() if (n, w) in TEACHING_WINDOWS else MASK_16[:n, :n].clone()


def alibi_slopes_of_the_teaching_head_counts(h, n):
    # Right for the head counts the messages show (8, 4 and 2); 16 heads get 8 heads' slopes twice.
    return alibi(8, n).repeat(2, 1, 1)[:h] if h > 8 else alibi(h, n)


def ntk_fitted_to_the_teaching_factors(d, base, factor):
    # The exponent d / (d - 2) rounded to the teaching sizes' 1.1, whatever d is.
    return ntk(d, base, factor) if (d, factor) in TEACHING_FREQUENCIES else frequencies(d, base * factor**1.1)


@pytest.mark.parametrize(
    ("checker", "answer"),
    [
        (check_window_mask, window_looked_up),
        (check_alibi_bias, alibi_slopes_of_the_teaching_head_counts),
        (check_ntk_frequencies, ntk_fitted_to_the_teaching_factors),
    ],
    ids=lambda v: getattr(v, "__name__", None),
)
def test_an_answer_fitted_to_the_teaching_sizes_meets_a_case_drawn_for_it(checker, answer):
    result = checker(answer, verbose=False)
    assert result.status == "incorrect", result.message
    assert "drawn at random for your code" in result.message and result.case is not None


def test_a_right_answer_computed_in_float32_is_accepted():
    assert check_ntk_frequencies(lambda d, b, s: ntk(d, b, s, torch.float32), verbose=False).correct
    assert check_alibi_bias(alibi, verbose=False).correct  # float32, as torch.tensor makes it


# ------------------------------------------------------------------ the notebook's settings are not the answer's

test_a_right_answer_that_changes_a_global_setting_is_told_so_and_the_setting_is_back = state_change_tests(
    {name: (checker, right) for name, (checker, right, _) in CHECKERS.items()}
)


# ------------------------------------------------------------------ a catalogue of learner slips


def window_from_two_trils(n, w):
    ones = torch.ones(n, n, dtype=torch.bool)
    return ones.tril() & ~ones.tril(-w - 1)  # tril(-w - 1) keeps one key too many


def window_with_triu(n, w):
    ones = torch.ones(n, n, dtype=torch.bool)
    return ones.tril() & ones.triu(-(w - 1))


def alibi_distance_not_negated(h, n):
    slopes = torch.tensor([2.0 ** (-8 * (k + 1) / h) for k in range(h)])
    distance = (torch.arange(n)[None, :] - torch.arange(n)[:, None]).float()  # j - i: negative in the past
    return -slopes[:, None, None] * distance


def alibi_ratio_from_zero(h, n):
    slopes = torch.tensor([2.0 ** (-8 * k / h) for k in range(h)])
    return -slopes[:, None, None] * (torch.arange(n)[:, None] - torch.arange(n)[None, :]).float()


def alibi_halving_slopes(h, n):
    slopes = torch.tensor([0.5 ** (k + 1) for k in range(h)])
    return -slopes[:, None, None] * (torch.arange(n)[:, None] - torch.arange(n)[None, :]).float()


CATALOGUE = [
    Wrong(check_window_mask, "tril(-w - 1) for the window's edge", window_from_two_trils,
          "off by one: the window holds window + 1 keys", ("only itself",)),
    Wrong(check_window_mask, "a band with triu only", lambda n, w: torch.ones(n, n, dtype=torch.bool).triu(-(w - 1)),
          "forgot causality: the window reaches into the future"),
    Wrong(check_window_mask, "the allowed keys' complement", lambda n, w: ~window_with_triu(n, w),
          "mask polarity inverted (True = blocked)"),
    Wrong(check_window_mask, "a (16, 16) buffer", lambda n, w: MASK_16[:n, :n] & ~MASK_16[:n, :n].tril(-w)),
    Wrong(check_alibi_bias, "distance as j - i", alibi_distance_not_negated, "wrong sign: distant keys are favoured"),
    Wrong(check_alibi_bias, "exponent from h = 0", alibi_ratio_from_zero, "slopes start at 1 (2^(-8h/n) from h = 0)"),
    Wrong(check_alibi_bias, "1/2, 1/4, ... for any number of heads", alibi_halving_slopes,
          "the slopes of 8 heads, whatever the number of heads"),
    Wrong(check_ntk_frequencies, "base * factor", lambda d, b, s: frequencies(d, b * s),
          "base scaled by the factor itself", ("a little less",)),
    Wrong(check_ntk_frequencies, "linear scaling", lambda d, b, s: frequencies(d, b) / s,
          "every frequency divided by the factor (that is position interpolation)"),
    Wrong(check_ntk_frequencies, "(d - 2) / d", lambda d, b, s: frequencies(d, b * s ** ((d - 2) / d)),
          "exponent upside down: factor^((d-2)/d)"),
]  # fmt: skip

test_no_checker_accepts_a_wrong_answer_and_names_it, test_the_catalogue_is_counted = catalogue_tests(
    CATALOGUE, "notebook 09"
)


# ------------------------------------------------------------------ the committed notebook
