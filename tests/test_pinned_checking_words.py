"""The exercise checker's words when there are several of something (mhsa_helpers.teaching.checking): several
known mistakes fit, several cases are right, several settings changed; and what decides a drawn case, a
float32 tolerance and an error's wording. Pinned exactly, found unpinned by mutation testing (``make mutate``).

Written against the public API only: ``check_function``, ``drawn_cases``, ``answer_seed``, ``state_changed``
with ``Case``, ``Misconception`` and ``AnswerRejected``.
"""

from __future__ import annotations

import functools
import importlib.util

import torch

from mhsa_helpers.teaching.checking import (
    STATE_CHANGED,
    AnswerRejected,
    Case,
    Misconception,
    answer_seed,
    check_function,
    drawn_cases,
    judge,
    learner_line,
)

TWO_NUMBERS = [Case((torch.tensor([1.0, 2.0], dtype=torch.float64),), description="two numbers")]
DIFFERS = "[ex] not yet: case 'two numbers' differs from the reference (largest difference 1)."


def doubles(x):
    return 2 * x


def check(learner, mistakes=(), cases=TWO_NUMBERS, **options):
    return check_function("ex", learner, lambda x: x + 1, cases, mistakes, verbose=False, **options)


# ------------------------------------------------------------------ one or several known mistakes


def test_three_fitting_mistakes_are_offered_as_one_of_them_with_each_symptom_once_and_every_fix():
    mistakes = [
        Misconception("A", doubles, "Idea A.", fix="fix A", symptom="Too big."),
        Misconception("B", lambda x: x + x, "Idea B.", symptom="Too big."),
        Misconception("C", lambda x: x * 2.0, "Idea C.", fix="fix C", symptom="Grows."),
    ]
    result = check(doubles, mistakes)
    assert result.symptom == f"{DIFFERS} Too big. Grows. Known mistakes fit it: `result.hint()` names them."
    assert result.diagnosis == (
        "[ex] not yet: your numbers fit 3 known mistakes, which give the same results on these cases; look for "
        "one of them. 'A': Idea A. Or 'B': Idea B. Or 'C': Idea C. `result.reveal()` shows the fix."
    )
    assert result.fix == "[ex] the fix for 'A': fix A [ex] the fix for 'C': fix C"


def test_one_mistake_without_a_symptom_or_a_fix_is_offered_without_them():
    result = check(doubles, [Misconception("A", doubles, "Idea A.")])
    assert result.message == result.symptom == f"{DIFFERS} This is a known mistake: `result.hint()` names it."
    assert result.diagnosis == "[ex] not yet: this looks like 'A'. Idea A."
    assert result.fix == ""


def test_a_judged_mistake_waits_for_its_words():
    # judge() gives the verdict; which words this attempt gets (symptom or name) is escalate()'s to choose.
    result = judge("ex", doubles, lambda x: x + 1, TWO_NUMBERS, [Misconception("A", doubles, "Idea A.")])
    assert (result.status, result.message) == ("misconception", "")


def test_a_mistake_written_in_place_is_still_worked_out_on_a_copy():
    def doubles_in_place(x):
        return x.mul_(2)

    result = check(doubles, [Misconception("A", doubles_in_place, "Idea A.")])
    assert result.misconception == "A", result.message


def test_a_mistake_is_worked_out_with_the_cases_keyword_arguments():
    cases = [Case((torch.tensor([1.0, 2.0], dtype=torch.float64),), {"by": 3.0}, "two numbers")]
    result = check_function(
        "ex", lambda x, by: x * by, lambda x, by: x + by, cases, [Misconception("times", lambda x, by: x * by, "-")],
        verbose=False,
    )  # fmt: skip
    assert result.misconception == "times", result.message


def test_a_property_without_a_symptom_is_told_in_general_words_then_named():
    finite = Misconception(
        "not finite", None, "Idea.", detect=lambda run: bool(run(torch.tensor([-5.0])).isnan().any()), always=True
    )

    def nan_at_minus_five(x):
        return x + 1 + 0 * (1 / (x + 5))

    first, second = (check(nan_at_minus_five, [finite]) for _ in range(2))
    assert first.message == (
        "[ex] not yet: your function gives the reference's numbers on its one case, but it fails a test of a "
        "property every right answer has. This is a known mistake: `result.hint()` names it."
    )
    assert second.message == "[ex] not yet: this looks like 'not finite'. Idea."


def test_a_handed_out_original_is_told_so_under_its_exercise():
    result = check(doubles, original=doubles)
    assert (result.exercise, result.status) == ("ex", "original")


def test_an_unnamed_difference_waits_for_its_words_and_its_reveal_sends_the_learner_to_the_case(capsys):
    judged = judge("ex", doubles, lambda x: x + 1, TWO_NUMBERS)
    assert (judged.status, judged.message, judged.key) == ("incorrect", "", "differs")
    check(doubles).reveal()
    assert capsys.readouterr().out == (
        "[ex] no known mistake fits your numbers, so there is no fix to show: call your function on "
        "`result.case.args` and compare what it gives, step by step, with the reference's `result.expected`.\n"
    )


def test_code_that_fails_except_on_square_inputs_is_named_by_what_it_gives_there():
    def learner(x):
        return x + x.T

    mistakes = [Misconception("added its transpose", lambda x: x + x.T, "Idea.")]
    cases = [Case((torch.ones(2, 3),), description="2 by 3")]
    square = [Case((torch.arange(4.0).reshape(2, 2),), description="2 by 2")]
    result = check(learner, mistakes, cases=cases, square_cases=square)
    assert result.misconception == "added its transpose"
    assert result.diagnosis.startswith(
        "[ex] not yet: this looks like 'added its transpose'. Idea. (On other inputs your function raised "
        "RuntimeError: "
    )
    assert result.diagnosis.endswith(
        "check which shapes your code assumes; on square inputs, where every axis has the same length, the same code "
        "runs without an error and gives wrong numbers.)"
    )


# ------------------------------------------------------------------ where it is right


def right_except_on_four_numbers(x):
    return x + 2 if x.shape == (4,) else x + 1


def test_right_on_two_cases_names_both_and_an_unnamed_case_by_its_number():
    cases = [
        Case((torch.zeros(4),), description="four"),
        Case((torch.zeros(2),), description="two"),
        Case((torch.zeros(3),)),  # no description: named by its number
    ]
    assert check(right_except_on_four_numbers, cases=cases).message == (
        "[ex] not yet: case 'four' differs from the reference (largest difference 1); 1 of 3 cases differ, and it "
        "is right on 'two' and '2'."
    )


def test_right_on_three_cases_names_two_and_counts_the_rest():
    cases = [Case((torch.zeros(4),), description="four")] + [
        Case((torch.zeros(n),), description=f"{n} zeros") for n in (1, 2, 3)
    ]
    assert check(right_except_on_four_numbers, cases=cases).message == (
        "[ex] not yet: case 'four' differs from the reference (largest difference 1); 1 of 4 cases differ, and it "
        "is right on '1 zeros', '2 zeros' and 1 more."
    )


def test_a_drawn_case_that_differs_is_said_to_be_drawn_and_kept():
    def draw(generator):
        return [Case((torch.zeros(4, dtype=torch.float64),), description="drawn")]

    result = check(right_except_on_four_numbers, draw=draw)
    assert result.message == (
        "[ex] not yet: a case drawn at random for your code, 'drawn' differs from the reference (largest difference "
        "1); 1 of 2 cases differ, and it is right on 'two numbers' (`result.case` holds that case)."
    )


def test_an_answer_that_runs_where_the_handed_out_code_fails_is_no_longer_the_original():
    def original(x):
        raise RuntimeError("the bug")

    assert check(lambda x: x + 2, original=original).status == "incorrect"


# ------------------------------------------------------------------ drawn cases


def test_drawn_cases_say_how_they_are_called_and_convert_tensors_inside_a_tuple():
    def four(generator):
        pair = (torch.ones(2, dtype=torch.float64), torch.zeros(2, dtype=torch.float64))
        return [Case((pair,), {}, f"case {i}") for i in range(4)]

    def first_plus_second(pair):
        return pair[0] + pair[1]

    cases = drawn_cases(four, first_plus_second)
    assert [c.description for c in cases] == [
        "case 0",
        "case 1, float32, inputs that require grad",
        "case 2, under torch.no_grad()",
        "case 3, float32",
    ]
    seen = []

    def spy(pair):
        seen.append(tuple((t.dtype, t.requires_grad) for t in pair))
        return type(pair)(t + 0 for t in pair)

    check_function("ex", spy, lambda pair: tuple(t + 0 for t in pair), [], draw=four, verbose=False)
    f64, f32 = torch.float64, torch.float32
    assert seen == [((f64, False),) * 2, ((f32, True),) * 2, ((f64, False),) * 2, ((f32, False),) * 2]


def test_the_reference_gets_each_drawn_case_in_float64_without_grad_and_the_learner_as_drawn():
    def four(generator):
        return [
            Case((torch.ones(2, dtype=torch.float64),), {"shift": torch.ones(2, dtype=torch.float64)}, f"{i}")
            for i in range(4)
        ]

    def spy(seen):
        def function(x, shift):
            seen.append((x.dtype, x.requires_grad, shift.dtype, shift.requires_grad))
            return x + shift

        return function

    learner_saw, reference_saw = [], []
    check_function("ex", spy(learner_saw), spy(reference_saw), [], draw=four, verbose=False)
    f64, f32 = torch.float64, torch.float32
    assert reference_saw == [(f64, False, f64, False)] * 4
    assert learner_saw == [(f64, False) * 2, (f32, True) * 2, (f64, False) * 2, (f32, False) * 2]


def test_a_case_that_requires_grad_gives_the_learner_such_inputs_in_its_own_dtype():
    seen = []

    def learner(x):
        seen.append((x.dtype, x.requires_grad))
        return x + 1

    case = Case((torch.ones(2, dtype=torch.float64),), requires_grad=True)
    check_function("ex", learner, lambda x: x + 1, [case], verbose=False)
    assert seen[0] == (torch.float64, True)


def compiled(source: str):
    """A function no file holds the source of (made by ``exec``): its seed comes from its compiled code."""
    namespace: dict = {}
    exec(compile(source, "<no file>", "exec"), namespace)
    return namespace["answer"]


def test_a_function_without_source_draws_by_its_code_constants_and_names_and_the_same_code_again_alike():
    def seed(source):
        return answer_seed(compiled(source))

    nested = "def answer(x):\n    return (lambda y: y + 1)(x)\n"
    assert seed(nested) == seed(nested)  # two compilations: the inner code objects live at other addresses
    assert seed("def answer(x):\n    return x + 1\n") != seed("def answer(x):\n    return x + 2\n")
    assert seed("def answer(x):\n    return x.sum()\n") != seed("def answer(x):\n    return x.mean()\n")


def test_a_function_with_source_is_seeded_by_its_text_so_a_changed_comment_draws_anew(tmp_path):
    def loaded(text, name):
        path = tmp_path / f"{name}.py"
        path.write_text(text)
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.answer

    one = loaded("def answer(x):\n    return x + 1  # one\n", "answer_one")
    two = loaded("def answer(x):\n    return x + 1  # two\n", "answer_two")
    assert answer_seed(one) != answer_seed(two)  # the same compiled code: only the text tells them apart


def test_a_class_without_source_draws_by_its_methods_code():
    """A class defined in a notebook cell: inspect cannot read it, its methods' compiled code tells answers apart."""

    def made(body):
        namespace: dict = {}
        exec(
            compile(f"class Answer:\n    def append(self, k):\n        return {body}\n", "<no file>", "exec"), namespace
        )
        return namespace["Answer"]

    assert answer_seed(made("k + 1")) == answer_seed(made("k + 1")) != answer_seed(made("k + 2"))
    empty: dict = {}
    exec(compile("class Answer:\n    pass\n", "<no file>", "exec"), empty)
    assert answer_seed(empty["Answer"]) == answer_seed(type("Answer", (), {}))  # no method: its name


class Wrapper:
    """A callable that holds the learner's function as ``func``, as ``functools.partial`` does."""

    def __init__(self, func):
        self.func = func

    def __call__(self, *args):
        return self.func(*args)


def wrapped(function, levels):
    for _ in range(levels):
        function = Wrapper(function)
    return function


def plus_one(x):
    return x + 1


def plus_two(x):
    return x + 2


def test_the_seed_is_the_learners_own_function_under_at_most_20_wrappers():
    assert answer_seed(functools.partial(plus_one)) == answer_seed(plus_one) != answer_seed(functools.partial(plus_two))
    assert answer_seed(wrapped(plus_one, 20)) == answer_seed(plus_one) != answer_seed(wrapped(plus_one, 21))

    # A decorator's wrapper (``__wrapped__``) around a partial: followed through both.
    def decorated(x):
        return functools.partial(plus_one)(x)

    decorated.__wrapped__ = functools.partial(plus_one)
    assert answer_seed(decorated) == answer_seed(plus_one)


def test_past_its_wrappers_an_object_without_source_or_name_is_seeded_by_its_type():
    class OtherWrapper(Wrapper):
        pass

    deep, other = wrapped(plus_one, 21), wrapped(OtherWrapper(plus_one), 20)
    assert answer_seed(deep) != answer_seed(other)


def test_a_modules_seed_is_its_class_source_and_a_builtins_its_name():
    class Mine(torch.nn.Module):
        def forward(self, x):
            return x

    assert answer_seed(Mine()) == answer_seed(Mine)
    assert answer_seed(torch.relu) != answer_seed(torch.sigmoid)


# ------------------------------------------------------------------ float32's tolerance


def test_a_float64_result_with_float32s_rounding_is_right_and_said_so():
    hundredth = [Case((torch.zeros(1, dtype=torch.float64),))]
    result = check_function("ex", lambda x: x + 0.01 + 1.5e-5, lambda x: x + 0.01, hundredth, verbose=False)
    assert result.message == (
        "[ex] correct on its one case. Your results carry float32's rounding, though the inputs are float64: "
        "somewhere your code computes in float32 (a tensor made with torch.tensor(...) or .float(), say). That is "
        "fine here."
    )


def float32_result(values):
    return check_function(
        "ex", lambda x: torch.tensor(values, dtype=torch.float32), lambda x: torch.tensor([values[0], 0.0],
        dtype=torch.float64), TWO_NUMBERS, verbose=False,
    )  # fmt: skip


def test_float32s_tolerance_grows_with_the_largest_expected_value_and_never_below_one():
    # 0.1 is float32's rounding beside 10000; a float32 result is held to float32's precision, nothing to note.
    assert float32_result([10000.0, 0.1]).message == "[ex] correct on its one case."
    assert not float32_result([0.5, 3e-5]).correct  # beside 0.5 it is not: the scale is at least 1, not 2


# ------------------------------------------------------------------ dtypes and whole numbers


def returned(got, expected, **options):
    tokens = [Case((torch.zeros(3),), description="tokens")]
    return check_function("ex", lambda x: got, lambda x: expected, tokens, verbose=False, **options)


def test_a_wider_dtype_than_the_references_is_compared_in_the_wider_one():
    assert returned(torch.tensor([0.5, 1.0]), torch.tensor([0.5, 1.0], dtype=torch.float16)).correct


def test_whole_numbers_are_compared_exactly_and_their_gap_told_whatever_the_tolerance():
    result = returned(torch.tensor([3, 1, 5]), torch.tensor([3, 1, 4]), atol=5.0)
    assert result.message == "[ex] not yet: case 'tokens' differs from the reference (largest difference 1)."


# ------------------------------------------------------------------ several settings changed, an error's words


def test_two_changed_settings_are_both_named_and_put_back():
    def learner(x):
        torch.set_grad_enabled(False)
        torch.set_default_dtype(torch.float64)
        return x + 1

    result = check(learner)
    assert (result.exercise, result.misconception) == ("ex", STATE_CHANGED)
    assert result.message == (
        "[ex] not yet: your code turned gradients off for the rest of the notebook (`torch.set_grad_enabled(False)`) "
        "and changed the default dtype for the rest of the notebook (`torch.set_default_dtype`). The checker put "
        "them back; where no gradient is needed, put those lines under `with torch.no_grad():`, which ends with its "
        "block; make new tensors in the dtype of the inputs (`dtype=x.dtype`) instead."
    )


def test_a_setting_changed_before_an_error_is_named_before_the_error():
    def learner(x):
        torch.set_grad_enabled(False)
        raise RuntimeError("and then this")

    result = check(learner)
    assert (result.exercise, result.misconception) == ("ex", STATE_CHANGED)
    assert result.message.startswith("[ex] not yet: your code turned gradients off for the rest of the notebook")


def test_an_error_about_a_dtype_sends_the_learner_to_the_dtypes():
    def learner(x):
        raise RuntimeError("expected dtype Float but found Double")

    assert check(learner).message.endswith("; check which dtypes your code assumes.")


def test_an_error_that_never_ran_the_learners_code_has_no_line_of_theirs():
    assert learner_line(RuntimeError("raised by the checker")) == ""


def test_a_rejection_that_ends_a_sentence_keeps_its_own_stop():
    for said in ("Stop here!", "Stop here."):

        def learner(x, said=said):
            raise AnswerRejected(said)

        assert check(learner).message.startswith(f"[ex] not yet: {said} It was called with"), check(learner).message
