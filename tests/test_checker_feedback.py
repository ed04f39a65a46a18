"""What every checker tells a learner, attempt after attempt, and the state it checks in
(``mhsa_helpers.teaching.checking``, ``feedback`` and ``predictions``): the symptom first, the name on a repeat,
the fix only on request; cases drawn for each answer; the notebook's settings kept apart from the learner's; a
debugging exercise handed back unchanged; property probes that reject right-looking numbers; predictions told
higher or lower.
"""

from __future__ import annotations

import pytest
import torch

from mhsa_helpers.teaching import feedback
from mhsa_helpers.teaching.checking import (
    STATE_CHANGED,
    Case,
    Misconception,
    answer_seed,
    check_function,
    drawn_cases,
)
from mhsa_helpers.teaching.predictions import RELATIVE_TOLERANCE, check_prediction, prediction_tolerance

ONE = [Case((torch.tensor([1.0, 2.0], dtype=torch.float64),), description="two numbers")]
DOUBLED = Misconception(
    "doubled", lambda x: 2 * x, "The idea: add, do not multiply.", fix="return x + 1", symptom="Yours grow too fast."
)


def doubles(x):
    return 2 * x


def check(learner, *, mistakes=(DOUBLED,), **options):
    return check_function("ex", learner, lambda x: x + 1, ONE, mistakes, verbose=False, **options)


# ------------------------------------------------------------------ escalation


def test_the_symptom_first_then_the_name_and_idea_and_the_fix_only_on_request(capsys):
    first = check(doubles)
    assert (
        first.message
        == first.symptom
        == (
            "[ex] not yet: case 'two numbers' differs from the reference (largest difference 1). Yours grow too fast. "
            "This is a known mistake: `result.hint()` names it."
        )
    )
    second = check(doubles)
    assert (
        second.message
        == second.diagnosis
        == ("[ex] not yet: this looks like 'doubled'. The idea: add, do not multiply. `result.reveal()` shows the fix.")
    )
    assert "return x + 1" not in first.message + second.message
    second.reveal()
    assert capsys.readouterr().out == "[ex] the fix for 'doubled': return x + 1\n"
    assert feedback.requests("ex") == {"hint": 0, "reveal": 1}


def test_hint_climbs_one_rung_at_a_time_and_a_hint_names_the_next_attempt(capsys):
    result = check(doubles)
    result.hint()
    assert "this looks like 'doubled'" in capsys.readouterr().out
    assert check(doubles).message == result.diagnosis  # named at once now: the learner asked
    result.hint()
    assert capsys.readouterr().out.startswith("[ex] the fix for 'doubled'")
    assert feedback.requests("ex") == {"hint": 1, "reveal": 1}


def test_a_different_mistake_starts_again_from_its_symptom():
    assert check(doubles).message.endswith("names it.")
    tripled = Misconception("tripled", lambda x: 3 * x, "no", symptom="Much too fast.")
    other = check(lambda x: 3 * x, mistakes=(DOUBLED, tripled))
    assert other.misconception == "tripled" and "Much too fast." in other.message and "tripled" not in other.message


def test_an_unnamed_difference_gets_no_name_and_its_reveal_says_so(capsys):
    first, second = check(lambda x: x - 1), check(lambda x: x - 1)
    assert first.message == second.message == first.symptom and first.diagnosis == ""
    second.reveal()
    assert "no known mistake fits your numbers" in capsys.readouterr().out
    assert torch.equal(second.expected, torch.tensor([2.0, 3.0], dtype=torch.float64))
    assert torch.equal(second.got, torch.tensor([0.0, 1.0], dtype=torch.float64))


def test_feedback_forgets_what_a_fresh_kernel_never_saw():
    check(doubles)
    check(doubles).hint()
    feedback.forget()
    assert feedback.wrong_tries("ex") == 0 and not feedback.named_before("ex", "mistake: doubled")
    assert feedback.requests("ex") == {"hint": 0, "reveal": 0}
    assert check(doubles).message.endswith("`result.hint()` names it.")


def test_a_debugging_exercise_handed_back_unchanged_is_told_so_and_nothing_more():
    handed_out = doubles
    result = check(lambda x: x * 2, original=handed_out)
    assert result.status == "original" and result.message == (
        "[ex] still the original: your function gives what the code handed out gives, on every case. Run it, read "
        "it, find what is wrong, change it and run this cell again."
    )
    assert feedback.wrong_tries("ex") == 0  # not an attempt
    assert check(lambda x: x + 1, original=handed_out).correct


# ------------------------------------------------------------------ cases drawn for the answer


def draw(generator):
    return [Case((torch.randn(int(torch.randint(1, 9, (1,), generator=generator)), generator=generator),), {}, "n")]


def test_the_same_answer_draws_the_same_cases_and_another_answer_others():
    def answer(x):
        return x + 1

    def other(x):
        return x + 1.0

    assert answer_seed(answer) == answer_seed(answer) and answer_seed(answer) != answer_seed(other)
    one, again, changed = drawn_cases(draw, answer), drawn_cases(draw, answer), drawn_cases(draw, other)
    assert torch.equal(one[0].args[0], again[0].args[0]) and not torch.equal(one[0].args[0], changed[0].args[0])


def test_the_drawn_cases_are_called_in_float32_with_grad_and_under_no_grad_in_turn():
    def four(generator):
        return [Case((torch.ones(2, dtype=torch.float64),), {}, f"case {i}") for i in range(4)]

    seen = []

    def spy(x):
        seen.append((x.dtype, x.requires_grad, torch.is_grad_enabled()))
        return x + 1

    assert check(spy, draw=four).correct
    assert seen[1:] == [
        (torch.float64, False, True),
        (torch.float32, True, True),
        (torch.float64, False, False),
        (torch.float32, False, True),
    ]
    descriptions = [c.description for c in drawn_cases(four, spy)]
    assert descriptions[1] == "case 1, float32, inputs that require grad" and descriptions[2].endswith("no_grad()")


def test_an_answer_fitted_to_the_teaching_case_fails_on_a_drawn_one_which_it_can_rerun():
    def fitted(x):
        return x + 1 if x.shape == (2,) else x

    result = check(fitted, draw=draw)
    assert "a case drawn at random for your code," in result.message and "`result.case` holds that case" in (
        result.message
    )
    assert torch.equal(fitted(*result.case.args), result.got)


def test_an_answer_fitted_to_inputs_without_grad_fails_on_those_that_require_it():
    def fitted(x):
        return x + 1 if not x.requires_grad else x.detach()

    assert not check(fitted, draw=lambda g: [Case((torch.ones(3, dtype=torch.float64),))] * 2).correct


# ------------------------------------------------------------------ the notebook's settings


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda: torch.set_grad_enabled(False), "turned gradients off for the rest of the notebook"),
        (lambda: torch.set_default_dtype(torch.float64), "changed the default dtype"),
        (lambda: torch.manual_seed(0), "used or reset PyTorch's global random generator"),
        (lambda: torch.set_num_threads(2), "changed how many threads PyTorch uses"),
    ],
    ids=["grad", "dtype", "seed", "threads"],
)
def test_a_change_to_the_global_settings_is_named_at_once_and_undone(change, words):
    before = (torch.is_grad_enabled(), torch.get_default_dtype(), torch.get_num_threads(), torch.get_rng_state())

    def learner(x):
        change()
        return x + 1

    result = check(learner)
    assert (
        result.misconception == STATE_CHANGED
        and words in result.message
        and "The checker put it back" in (result.message)
    )
    after = (torch.is_grad_enabled(), torch.get_default_dtype(), torch.get_num_threads(), torch.get_rng_state())
    assert after[:3] == before[:3] and torch.equal(after[3], before[3])


def test_the_check_runs_with_gradients_on_whatever_the_notebook_set_and_gives_its_settings_back():
    seen = []

    def learner(x):
        seen.append((torch.is_grad_enabled(), torch.get_default_dtype()))
        return x + 1

    torch.set_grad_enabled(False)
    try:
        assert check(learner).correct and seen == [(True, torch.float32)]
        assert not torch.is_grad_enabled()
    finally:
        torch.set_grad_enabled(True)


def test_the_reference_runs_before_the_learner():
    order = []

    def reference(x):
        order.append("reference")
        return x + 1

    def learner(x):
        order.append("learner")
        return x + 1

    check_function("ex", learner, reference, ONE, verbose=False)
    assert order == ["reference", "learner"]


# ------------------------------------------------------------------ tolerances and dtypes


def test_float32_rounding_is_accepted_and_said_and_a_real_difference_is_not():
    hundredth = [Case((torch.zeros(1, dtype=torch.float64),))]

    def within(gap):
        return check_function("ex", lambda x: x + 0.01 + gap, lambda x: x + 0.01, hundredth, verbose=False)

    rounded = within(1.5e-5)  # beyond float64's tolerance here, within float32's
    assert rounded.correct and "carry float32's rounding" in rounded.message
    assert within(1e-6).message == "[ex] correct on its one case."
    assert not within(5e-5).correct and not check(lambda x: (x + 1) * (1 + 1e-3)).correct


def test_whole_numbers_must_come_as_whole_numbers():
    tokens = [Case((torch.tensor([3, 1, 4]),), description="tokens")]
    result = check_function("ex", lambda t: t.float(), lambda t: t.clone(), tokens, verbose=False)
    assert "expected whole numbers (torch.int64)" in result.message


# ------------------------------------------------------------------ property probes


def test_a_property_probe_rejects_an_answer_right_on_every_case():
    extreme = Misconception(
        "breaks on large inputs",
        None,
        "idea",
        detect=lambda run: bool(run(torch.tensor([1e30], dtype=torch.float64)) != 1e30 + 1),
        symptom="Your function breaks on inputs near 1e30.",
        always=True,
    )

    def clipped(x):
        return x.clamp(max=1e6) + 1

    result = check(clipped, mistakes=(extreme,))
    assert result.status == "misconception" and result.misconception == "breaks on large inputs"
    assert result.message == (
        "[ex] not yet: your function gives the reference's numbers on its one case, but your function breaks on "
        "inputs near 1e30. This is a known mistake: `result.hint()` names it."
    )
    assert check(lambda x: x + 1, mistakes=(extreme,)).correct


def test_an_exact_fit_is_named_without_consulting_the_symptom_probes():
    probe = Misconception("grows", None, "a probe", detect=lambda run: True)
    result = check(doubles, mistakes=(DOUBLED, probe))
    assert result.key == "mistake: doubled"


# ------------------------------------------------------------------ predictions


def predict(answer, *, truth=0.25, mistakes=(), **options):
    return check_prediction("p", answer, lambda: truth, "a weight", mistakes, verbose=False, **options)


def test_a_prediction_is_told_higher_or_lower_and_its_value_from_the_third_wrong_try_on(capsys):
    first = predict(0.5)
    assert first.message == "[p] not yet: your prediction 0.5 is too high. Think it through once more."
    assert predict(0.1).message.startswith("[p] not yet: your prediction 0.1 is too low.")
    assert "The value" not in first.message
    assert predict(0.35, explain="one key in four").message.endswith("The value is 0.25: one key in four.")
    first.reveal()
    assert capsys.readouterr().out == "[p] The value is 0.25.\n"


def test_a_prediction_matching_a_wrong_reasoning_gets_its_why_so_then_its_name():
    zero = Misconception("weights of zero", lambda: 0.0, "e^0 is 1.", symptom="What is e^0?")
    assert predict(0.0, mistakes=(zero,)).message == (
        "[p] not yet: your prediction 0 is too low. What is e^0? A known wrong way to reason: `result.hint()` names it."
    )
    assert predict(0.0, mistakes=(zero,)).message.startswith("[p] not yet: this looks like 'weights of zero'.")


def test_the_tolerance_tells_near_misses_and_every_listed_reasoning_apart():
    assert predict(0.25 * (1 + RELATIVE_TOLERANCE / 2)).correct and not predict(0.25 * 1.1).correct
    assert prediction_tolerance(1 / 31, [1 / 32], 0.01) == pytest.approx((1 / 31 - 1 / 32) / 4)
    assert not check_prediction("p", 17.0, lambda: 18, "keys", verbose=False).correct  # whole numbers: exact


def test_a_stub_prediction_is_not_measured():
    measured = []

    def truth():
        measured.append(1)
        return 0.25

    def stub():
        raise NotImplementedError

    assert check_prediction("p", stub, truth, "x", verbose=False).status == "not_attempted" and measured == []
    assert check_prediction("p", None, truth, "x", verbose=False).status == "not_attempted" and measured == []
