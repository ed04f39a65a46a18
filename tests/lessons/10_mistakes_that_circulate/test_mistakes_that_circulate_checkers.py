"""Notebook 10's checkers: they accept the right answers however written (float32 inside, torch's softmax, the
dtype's minimum), tell a wrong one first what differs and then, on a repeat, its name; the fix only on request.
What the notebook's text calls right, they accept; what they reject, they name by what it is. Answers fitted to
the teaching cases meet drawn ones, and an answer that changes PyTorch's global settings is told so."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from checker_table import selectable

from mhsa_helpers import causal_mask, softmax
from mhsa_helpers.lessons.mistakes_that_circulate import check_decode_mask, check_masked_weights
from mhsa_helpers.lessons.mistakes_that_circulate.exercises import (
    DECODE_MASK_MISCONCEPTIONS,
    MASKED_WEIGHTS_MISCONCEPTIONS,
)
from mhsa_helpers.teaching.checking import STATE_CHANGED

NOTEBOOK = Path(__file__).resolve().parents[3] / "notebooks" / "10_mistakes_that_circulate.ipynb"
INF = math.inf
FINITE_FILL = "blocked scores pushed down by a finite number instead of -inf"
POLARITY = "inverted mask polarity (True = blocked)"
RENORMALISED = "weights zeroed after the softmax, then renormalised"


def told_then_named(checker, answer, name, misconceptions):
    """The first attempt gets the symptom (no name, no idea, no fix), the same answer again the name and the
    idea; the fix only in ``result.fix``. Returns the first result."""
    first = checker(answer, verbose=False)
    assert first.status == "misconception" and first.misconception == name, first.message
    assert first.message == first.symptom and name not in first.message
    again = checker(answer, verbose=False)
    assert again.message == again.diagnosis and name in again.message
    for m in (m for m in misconceptions if m.name == name):
        assert m.hint not in first.message and m.fix not in first.message + again.message
    assert any(m.hint in again.diagnosis and m.fix in again.fix for m in misconceptions if m.name == name)
    return first


# ---------------------------------------------------------------- masked weights


def right_weights(scores, allowed):
    return softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)


RIGHT_WEIGHTS = {
    "package softmax": right_weights,
    "torch.softmax": lambda s, a: torch.softmax(s.masked_fill(~a, -INF), dim=-1),
    "torch.where": lambda s, a: torch.softmax(torch.where(a, s, -INF), dim=-1),
    "the dtype's minimum, filled": lambda s, a: torch.softmax(s.masked_fill(~a, torch.finfo(s.dtype).min), dim=-1),
    "the dtype's minimum, added": lambda s, a: torch.softmax(
        s + torch.zeros_like(s).masked_fill(~a, torch.finfo(s.dtype).min), dim=-1
    ),
    "computed in float32": lambda s, a: torch.softmax(s.float().masked_fill(~a, -INF), dim=-1),
}


@pytest.mark.parametrize("answer", RIGHT_WEIGHTS.values(), ids=RIGHT_WEIGHTS)
def test_masked_weights_accepts_right_answers_written_differently(answer):
    result = check_masked_weights(answer, verbose=False)
    assert result.correct, result.message
    assert "Note" not in result.message and "drawn at random" in result.message


@pytest.mark.parametrize("answer", RIGHT_WEIGHTS.values(), ids=RIGHT_WEIGHTS)
def test_no_right_answer_shows_a_property_the_probes_reject(answer):
    for probe in (m.detect for m in MASKED_WEIGHTS_MISCONCEPTIONS if m.detect is not None):
        assert not probe(answer)


def renormalised(scores, allowed):
    kept = torch.softmax(scores, dim=-1) * allowed
    return kept / kept.sum(-1, keepdim=True)


def max_over_every_key(scores, allowed):
    e = torch.exp(scores - scores.amax(-1, keepdim=True)) * allowed
    return e / e.sum(-1, keepdim=True)


def exp_of_raw_scores(scores, allowed):
    e = torch.exp(scores) * allowed
    return e / e.sum(-1, keepdim=True)


MASKED_WEIGHTS_MISTAKES = [
    ("added to the weights", lambda s, a: softmax(s) + torch.zeros_like(s).masked_fill(~a, -INF), None),
    ("no mask", lambda s, a: torch.softmax(s, dim=-1), "the mask was not used"),
    ("zeroed", lambda s, a: softmax(s, dim=-1) * a, "weights zeroed after the softmax, not renormalised"),
    ("zeroed, renormalised", renormalised, RENORMALISED),
    ("max over every key", max_over_every_key, RENORMALISED),
    ("exp of the raw scores", exp_of_raw_scores, "did not subtract the row's max"),
    ("polarity, package softmax", lambda s, a: softmax(s.masked_fill(a, -INF), dim=-1), POLARITY),
    ("polarity, torch.softmax", lambda s, a: torch.softmax(s.masked_fill(a, -INF), dim=-1), POLARITY),
    ("polarity, filled with -1e9", lambda s, a: torch.softmax(s.masked_fill(a, -1e9), dim=-1), POLARITY),
    ("filled with 0", lambda s, a: softmax(s.masked_fill(~a, 0.0), dim=-1), "blocked scores set to 0 instead of -inf"),
    ("scores times the mask", lambda s, a: softmax(s * a, dim=-1), "blocked scores set to 0 instead of -inf"),
    ("(1 - mask) * -inf", lambda s, a: torch.softmax(s + (1 - a.to(s.dtype)) * -INF, -1), None),
    ("adds -10000", lambda s, a: softmax(s - 10_000.0 * (~a), dim=-1), FINITE_FILL),
    ("adds -1000", lambda s, a: softmax(s - 1_000.0 * (~a), dim=-1), FINITE_FILL),
    ("filled with -1e4", lambda s, a: torch.softmax(s.masked_fill(~a, -1e4), -1), FINITE_FILL),
    ("filled with -10", lambda s, a: torch.softmax(s.masked_fill(~a, -10.0), -1), FINITE_FILL),
    ("softmax down the columns", lambda s, a: torch.softmax(s.masked_fill(~a, -INF), dim=-2), None),
    ("package softmax down the columns", lambda s, a: softmax(s.masked_fill(~a, -INF), dim=-2), None),
]
NAMES = {
    "added to the weights": "mask added after the softmax",
    "(1 - mask) * -inf": "mask built by multiplying with -inf",
    "softmax down the columns": "softmax over the wrong dimension",
    "package softmax down the columns": "softmax over the wrong dimension",
}


@pytest.mark.parametrize(
    ("label", "answer", "name"), MASKED_WEIGHTS_MISTAKES, ids=[m[0] for m in MASKED_WEIGHTS_MISTAKES]
)
def test_masked_weights_tells_then_names_each_mistake(label, answer, name):
    told_then_named(check_masked_weights, answer, name or NAMES[label], MASKED_WEIGHTS_MISCONCEPTIONS)


def test_every_misconception_of_masked_weights_is_met_by_a_mistake_above():
    named = {name or NAMES[label] for label, _, name in MASKED_WEIGHTS_MISTAKES}
    assert named == {m.name for m in MASKED_WEIGHTS_MISCONCEPTIONS}


@pytest.mark.parametrize(
    "answer",
    [
        lambda s, a: torch.softmax(s.masked_fill(~a, -1e9), dim=-1),
        lambda s, a: torch.softmax(s.masked_fill(~a, -1e30), dim=-1),
        lambda s, a: torch.softmax(s + (1 - a.to(s.dtype)) * -1e9, dim=-1),  # the copied additive form
    ],
    ids=["-1e9", "-1e30", "(1 - mask) * -1e9"],
)
def test_a_finite_fill_right_on_every_case_is_rejected_by_the_property_every_right_answer_has(answer):
    result = check_masked_weights(answer, verbose=False)
    assert result.misconception == FINITE_FILL
    assert "gives the reference's numbers on all 9 cases, but given a query whose visible keys" in result.message
    # What the message says is true: there, the blocked key takes weight.
    weights = answer(torch.tensor([[-1e35, -1e35, 0.0]], dtype=torch.float64), torch.tensor([[True, True, False]]))
    assert weights[0, 2] > 0
    # And the idea, shown on a repeat, says that -1e9 and -1e30 fail: the checker agrees.
    assert "-1e9" in result.diagnosis and "-1e30" in result.diagnosis


def test_zeroing_then_renormalising_is_named_where_floating_point_breaks_it():
    # Section 3 shows it equal to masking on ordinary scores; the checker agrees there and says where it is not.
    result = check_masked_weights(renormalised, verbose=False)
    assert "scores (4, 4) with a row near -24000" in result.message and "NaN" in result.message
    assert "right on 'scores (2, 4, 4), causal mask'" in result.message
    row = result.got[1]
    assert torch.isnan(row).all() and not torch.isnan(result.got[[0, 2, 3]]).any()


def test_polarity_through_torch_softmax_is_not_blamed_on_a_finite_fill():
    # It uses -inf; only the mask is read the wrong way round (a row it blocks entirely is NaN there).
    answer = MASKED_WEIGHTS_MISTAKES[7][1]
    check_masked_weights(answer, verbose=False)
    again = check_masked_weights(answer, verbose=False)
    assert again.misconception == POLARITY and "finite" not in again.message


def test_masked_weights_rejects_other_wrong_answers_without_a_name():
    for answer in (
        lambda s, a: a.to(s.dtype) / a.sum(-1, keepdim=True),  # uniform over the allowed keys
        lambda s, a: torch.exp(s.masked_fill(~a, -INF)) / torch.exp(s).sum(-1, keepdim=True),
    ):
        result = check_masked_weights(answer, verbose=False)
        assert result.status == "incorrect" and "differs from the reference" in result.message


def test_an_answer_fitted_to_the_teaching_lengths_meets_drawn_cases():
    def fitted(scores, allowed):
        if scores.shape[-1] in (4, 5):
            return right_weights(scores, allowed)
        return torch.softmax(scores, dim=-1)

    result = check_masked_weights(fitted, verbose=False)
    assert not result.correct
    assert "a case drawn at random for your code" in result.message and result.case is not None
    assert result.case.args[0].shape[-1] not in (4, 5)


def test_an_answer_fitted_to_float64_is_told_to_compute_in_the_inputs_dtype():
    def fitted(scores, allowed):
        blocked = torch.zeros(allowed.shape, dtype=torch.float64).masked_fill(~allowed, -INF)
        return torch.softmax(scores + blocked, dim=-1)

    result = check_masked_weights(fitted, verbose=False)
    assert result.status == "incorrect"
    assert "returned dtype torch.float64 for torch.float32 inputs" in result.message


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda: torch.set_grad_enabled(False), "turned gradients off"),
        (lambda: torch.set_default_dtype(torch.float64), "changed the default dtype"),
        (lambda: torch.manual_seed(1234), "global random generator"),
    ],
    ids=["grad", "dtype", "seed"],
)
def test_an_answer_that_changes_global_settings_is_told_and_the_settings_come_back(change, said):
    def answer(scores, allowed):
        change()
        return right_weights(scores, allowed)

    result = check_masked_weights(answer, verbose=False)
    assert result.misconception == STATE_CHANGED and said in result.message
    assert torch.is_grad_enabled() and torch.get_default_dtype() == torch.float32


def test_the_cases_have_batches_odd_sizes_cached_queries_and_a_key_for_every_row():
    seen = []

    def spy(scores, allowed):
        seen.append((scores.shape, scores.dtype, allowed.clone()))
        return right_weights(scores, allowed)

    assert check_masked_weights(spy, verbose=False).correct
    drawn = seen[5:9]  # after them, the property probes' own one-row inputs
    assert any(len(shape) == 4 and shape[0] > 1 for shape, _, _ in drawn)
    assert all(shape[-1] not in (4, 5) for shape, _, _ in drawn)
    assert any(allowed.shape[0] < allowed.shape[1] for _, _, allowed in drawn)  # queries after a cache
    assert torch.float32 in {dtype for _, dtype, _ in drawn}
    assert all(bool(allowed.any(-1).all()) for _, _, allowed in seen)  # no row without a key to see
    # The same answer meets the same cases: a committed notebook stays exact.
    again = []
    check_masked_weights(lambda s, a: again.append(s.shape) or right_weights(s, a), verbose=False)
    assert len(again) == len(seen)


# ---------------------------------------------------------------- decode mask


def right_decode_mask(past_len, new_len):
    return torch.ones(new_len, past_len + new_len, dtype=torch.bool).tril(diagonal=past_len)


DECODE_MASK_MISTAKES = {
    "causal mask aligned top-left": lambda p, n: torch.ones(n, p + n, dtype=torch.bool).tril(),
    POLARITY: lambda p, n: torch.ones(n, p + n, dtype=torch.bool).triu(p + 1),
    "the query cannot see itself": lambda p, n: torch.ones(n, p + n, dtype=torch.bool).tril(p - 1),
    "off by one: the query sees the next token": lambda p, n: torch.ones(n, p + n, dtype=torch.bool).tril(p + 1),
    "no mask at all (everything may attend)": lambda p, n: torch.ones(n, p + n, dtype=torch.bool),
    "a mask over the new tokens only": lambda p, n: torch.ones(n, n, dtype=torch.bool).tril(),
    "0/1 numbers instead of booleans": lambda p, n: torch.ones(n, p + n).tril(p),
}


def test_decode_mask_accepts_the_right_mask():
    result = check_decode_mask(right_decode_mask, verbose=False)
    assert result.correct and "Note" not in result.message
    # The package's own mask is right too, with a note: the exercise asks to write it.
    result = check_decode_mask(lambda p, n: causal_mask(n, p + n), verbose=False)
    assert result.correct and "Note" in result.message


@pytest.mark.parametrize("name", list(DECODE_MASK_MISTAKES), ids=[selectable(n) for n in DECODE_MASK_MISTAKES])
def test_decode_mask_tells_then_names_each_mistake(name):
    told_then_named(check_decode_mask, DECODE_MASK_MISTAKES[name], name, DECODE_MASK_MISCONCEPTIONS)


def test_every_misconception_of_decode_mask_is_met_by_a_mistake_above():
    assert set(DECODE_MASK_MISTAKES) == {m.name for m in DECODE_MASK_MISCONCEPTIONS}


def test_an_int_mask_is_named_as_numbers_too():
    result = check_decode_mask(lambda p, n: right_decode_mask(p, n).long(), verbose=False)
    assert result.misconception == "0/1 numbers instead of booleans"


def test_a_decode_mask_fitted_to_the_teaching_steps_meets_drawn_ones():
    table = {(p, n): right_decode_mask(p, n) for p, n in ((0, 4), (3, 1), (3, 3), (15, 2))}
    result = check_decode_mask(lambda p, n: table.get((p, n), torch.ones(n, p + n, dtype=torch.bool)), verbose=False)
    assert not result.correct and "a case drawn at random for your code" in result.message


def test_the_drawn_steps_outgrow_a_16_token_buffer_and_include_a_prompt():
    seen = []
    check_decode_mask(lambda p, n: seen.append((p, n)) or right_decode_mask(p, n), verbose=False)
    drawn = seen[4:]
    assert len(drawn) == 4 and any(p + n > 16 for p, n in drawn) and any(p == 0 for p, _ in drawn)
    assert any(n > p > 0 for p, n in drawn)


# ---------------------------------------------------------------- what the notebook shows


def test_what_the_symptoms_say_is_true_of_the_numbers():
    zeroed = check_masked_weights(lambda s, a: softmax(s, dim=-1) * a, verbose=False)
    allowed = zeroed.case.args[1]
    blocked_rows = ~allowed.all(-1)
    assert bool((zeroed.got[..., blocked_rows, :].sum(-1) < 1 - 1e-6).all()) and bool(
        (zeroed.got[..., ~allowed] == 0).all()
    )
    added = check_masked_weights(MASKED_WEIGHTS_MISTAKES[0][1], verbose=False)
    assert bool((added.got[..., ~added.case.args[1]] == -INF).all())
    multiplied = check_masked_weights(MASKED_WEIGHTS_MISTAKES[11][1], verbose=False)
    assert bool(torch.isnan(multiplied.got).all())
    raw = check_masked_weights(exp_of_raw_scores, verbose=False)
    assert "near +800" in raw.case.description
    visible = raw.case.args[1]
    nan_rows = [bool(torch.isnan(row[seen]).all()) for row, seen in zip(raw.got, visible, strict=True)]
    assert nan_rows == [False, True, True, False]
    columns = check_masked_weights(MASKED_WEIGHTS_MISTAKES[17][1], verbose=False)
    seen = columns.case.args[1].any(-2)
    torch.testing.assert_close(columns.got.sum(-2)[..., seen], torch.ones_like(columns.got.sum(-2)[..., seen]))
