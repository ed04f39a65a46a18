"""Pins for the ordering checker (``mhsa_helpers.teaching.ordering``), word for word where the learner reads it,
on small puzzles of their own: each pins one thing a mutation run found no test to notice.
"""

from __future__ import annotations

import re

import pytest
import torch

from mhsa_helpers.lessons.causal_mhsa_with_rope import check_decoding_order
from mhsa_helpers.teaching.ordering import MisOrder, OrderPuzzle, check_order


def _x(generator):
    return {"x": torch.randn(3, generator=generator, dtype=torch.float64)}


def puzzle(lines, solution, misorders=(), *, seeds=(0, 1, 2), inputs=_x, template="{lines}", result="out"):
    return OrderPuzzle("pin", lines, solution, inputs, result, misorders, template, seeds)


CHAIN = puzzle({"A": "a = x + 1", "B": "b = a * 2", "C": "c = b - 1", "D": "out = c * 3"}, ("A", "B", "C", "D"))
#: Three lines, two of them free to swap (B and C both read only `a`), and two known mis-orderings.
FORK = puzzle(
    {"A": "a = x + 1", "B": "b = a * 2", "C": "c = a - 1", "D": "out = b * c", "E": "a = a * 0"},
    ("A", "B", "C", "D", "E"),
    (
        MisOrder("zeroed before b", first="B", then="E", hint="Hint one.", fix="Fix one.", symptom="Symptom one."),
        MisOrder("zeroed before c", first="C", then="E", hint="Hint two.", fix="Fix two.", symptom="Symptom two."),
    ),
)


def test_the_right_order_says_how_many_inputs_and_another_right_order_says_why_it_is_right_too():
    result = check_order(FORK, ["A", "B", "C", "D", "E"], verbose=False)
    assert (result.exercise, result.status) == ("pin", "correct")
    assert result.message == "[pin] correct: run in your order, the lines give the recipe's result on all 3 inputs."
    swapped = check_order(FORK, ["A", "C", "B", "D", "E"], verbose=False)
    assert swapped.message == (
        "[pin] correct: run in your order, the lines give the recipe's result on all 3 inputs. It differs from the "
        "solution's order where two lines do not depend on each other: both are right."
    )
    one = puzzle(FORK.lines, FORK.solution, seeds=(5,))
    assert check_order(one, FORK.solution, verbose=False).message.endswith("the recipe's result on its input.")
    two = puzzle(FORK.lines, FORK.solution, seeds=(5, 6))
    assert check_order(two, FORK.solution, verbose=False).message.endswith("the recipe's result on all 2 inputs.")


def test_two_known_mis_orderings_word_for_word_symptom_diagnosis_fix_and_key(capsys):
    order = ["A", "E", "B", "C", "D"]  # `a` zeroed before both b and c read it
    first = check_order(FORK, order, verbose=False)
    assert (first.exercise, first.status, first.misconception) == ("pin", "misconception", "zeroed before b")
    assert first.key == "order: zeroed before b | zeroed before c"
    assert first.message == first.symptom
    assert re.fullmatch(
        r"\[pin\] not yet: run in your order, the result differs from the recipe's by up to [0-9.]+\. Symptom one\. "
        r"Symptom two\. It has 2 known mis-orderings: `result\.hint\(\)` names them\.",
        first.message,
    ), first.message
    again = check_order(FORK, order, verbose=False)
    assert (
        again.message
        == again.diagnosis
        == (
            "[pin] not yet: your order has 2 known mis-orderings. 'zeroed before b': line E (`a = a * 0`) comes before "
            "line B (`b = a * 2`). Hint one. And 'zeroed before c': line E (`a = a * 0`) comes before line C "
            "(`c = a - 1`). Hint two. `result.reveal()` shows the fixes."
        )
    )
    again.reveal()
    assert (
        capsys.readouterr().out
        == "[pin] the fix for 'zeroed before b': Fix one.\n[pin] the fix for 'zeroed before c': Fix two.\n"
    )


def test_one_known_mis_ordering_without_a_symptom_and_a_run_that_stopped():
    order = ["A", "B", "E", "C", "D"]  # zeroed before c only
    no_symptom = puzzle(FORK.lines, FORK.solution, (MisOrder("z", first="C", then="E", hint="H.", fix="F."),))
    result = check_order(no_symptom, order, verbose=False)
    assert re.fullmatch(
        r"\[pin\] not yet: run in your order, the result differs from the recipe's by up to [0-9.]+\. This is a "
        r"known mis-ordering: `result\.hint\(\)` names it\.",
        result.message,
    ), result.message
    assert check_order(no_symptom, order, verbose=False).message == (
        "[pin] not yet: this is 'z': line E (`a = a * 0`) comes before line C (`c = a - 1`). H. `result.reveal()` "
        "shows the fix."
    )
    # The decoding step run with the cache appended first stops at the attention; the symptom of 'append before
    # rotating', which describes a result, is not told.
    stopped = check_decoding_order(["F", "A", "D", "H", "B", "E", "G", "C"], verbose=False)
    assert stopped.message.endswith(
        "raised ValueError: mask must be broadcastable to (..., seq_q, seq_k) = (1, 2, 2, 5), got shape (2, 7). It has "
        "2 known mis-orderings: `result.hint()` names them."
    ), stopped.message


def test_an_order_no_known_mistake_fits_word_for_word_and_its_key():
    result = check_order(CHAIN, ["B", "C", "D", "A"], verbose=False)
    assert (result.exercise, result.status, result.key) == ("pin", "incorrect", "differs: BCDA")
    assert (
        result.message
        == result.symptom
        == (
            "[pin] not yet: run in your order, line B (`b = a * 2`) uses `a`, which no line before it has made yet. "
            "Follow each name back to the line that makes it."
        )
    )
    assert result.fix == "[pin] Move line A (`a = x + 1`) to come first."


def test_a_result_slightly_off_is_wrong_and_one_not_a_number_is_told_as_infinitely_off():
    relative = puzzle({"A": "x = x * 1.0000001", "B": "out = x"}, ("B", "A"))
    assert "differs from the recipe's by up to" in check_order(relative, ["A", "B"], verbose=False).message
    tiny = puzzle(
        {"A": "x = x + 1e-10", "B": "out = x"}, ("B", "A"), inputs=lambda g: {"x": torch.zeros(2, dtype=torch.float64)}
    )
    assert "differs from the recipe's by up to 1e-10." in check_order(tiny, ["A", "B"], verbose=False).message
    nan = puzzle({"A": "d = x * 0 + 1", "B": "d = d * 0", "C": "out = (x - x) / d"}, ("A", "C", "B"))
    assert "differs from the recipe's by up to inf." in check_order(nan, ["A", "B", "C"], verbose=False).message


def test_an_error_outside_the_lines_is_placed_around_them():
    around = puzzle({"A": "y = x", "B": "y = None"}, ("B", "A"), template="{lines}\nout = y * 1.0")
    assert check_order(around, ["A", "B"], verbose=False).message.startswith(
        "[pin] not yet: run in your order, the code around your lines raised TypeError: unsupported operand"
    )


def test_answers_of_the_wrong_form_word_for_word_and_by_exercise():
    result = check_order(CHAIN, ["B", "B", "C", "C"], verbose=False)
    assert (result.exercise, result.status) == ("pin", "incorrect")
    assert result.message == (
        "[pin] not yet: your order uses 'B', 'C' more than once and leaves out 'A', 'D': every line is used exactly "
        "once."
    )
    returned = check_order(CHAIN, lambda: "ABCD", verbose=False)
    assert (returned.exercise, returned.status) == ("pin", "incorrect")
    with pytest.raises(TypeError, match=r"^learner must be a function returning your order"):
        check_order(CHAIN, 3, verbose=False)


def test_a_function_that_is_still_a_stub_is_told_by_the_exercise_and_the_check_prints_by_default(capsys):
    def stub():
        raise NotImplementedError

    result = check_order(CHAIN, stub)
    assert (result.exercise, result.status) == ("pin", "not_attempted")
    assert capsys.readouterr().out.startswith("[pin] not attempted yet")
    check_order(CHAIN, None)
    assert capsys.readouterr().out == (
        "[pin] not attempted yet: replace None by your order, the lines' labels first line first, or arrange the "
        "lines above and press Check.\n"
    )
    assert check_order(CHAIN, None, verbose=False).exercise == "pin"
