"""The ordering exercises (``mhsa_helpers.teaching.ordering``) and the three puzzles of notebooks 04, 06 and 08.

Each registered puzzle's solution is compared with an independent reference (PyTorch's fused attention, the
softmax written out); each known mis-ordering, made by moving one line, must be refused, told by its symptom first
and named when it comes again; orders whose lines do not depend on each other are accepted both ways. The widget
is driven as a learner drives it (select, move, check, hint).
"""

from __future__ import annotations

import base64
import io
import math
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from PIL import Image

import mhsa_helpers as mh
from mhsa_helpers.lessons import LESSONS
from mhsa_helpers.lessons.attention_at_scale import online_order_exercise
from mhsa_helpers.lessons.attention_at_scale.exercises import ONLINE_ORDER_PUZZLE
from mhsa_helpers.lessons.causal_mhsa_with_rope.exercises import DECODING_PUZZLE
from mhsa_helpers.lessons.multi_head_attention import check_recipe_order, recipe_order_exercise
from mhsa_helpers.lessons.multi_head_attention.exercises import RECIPE_PUZZLE
from mhsa_helpers.teaching.ordering import MisOrder, OrderPuzzle, check_order

#: Every ordering exercise of the series, with its puzzle (found through the registry's kind "order").
ORDERS = {
    exercise.checker.__name__: exercise.checker for item in LESSONS for exercise in item.exercises
    if exercise.kind == "order"
}  # fmt: skip
PUZZLES = {"check_recipe_order": RECIPE_PUZZLE, "check_decoding_order": DECODING_PUZZLE,
           "check_online_order": ONLINE_ORDER_PUZZLE}  # fmt: skip
NAMES = sorted(ORDERS)


def test_the_series_has_three_ordering_exercises_and_each_has_its_puzzle():
    assert set(ORDERS) == set(PUZZLES)


def moved(order, label, before):
    """``order`` with line ``label`` moved to just before line ``before``."""
    rest = [other for other in order if other != label]
    return [*rest[: rest.index(before)], label, *rest[rest.index(before) :]]


@pytest.mark.parametrize("name", NAMES)
def test_the_solution_is_accepted_as_a_list_a_tuple_lower_case_or_a_function(name, capsys):
    solution = list(PUZZLES[name].solution)
    for answer in (solution, tuple(solution), [label.lower() for label in solution], lambda: solution):
        result = ORDERS[name](answer)
        assert result.correct, result.message
    printed = capsys.readouterr().out
    assert "correct: run in your order, the lines give the recipe's result on all 3 inputs." in printed
    assert "differs from the solution's order" not in printed


@pytest.mark.parametrize("name", NAMES)
def test_each_known_mis_ordering_is_told_by_its_symptom_then_named_then_fixed_on_request(name, capsys):
    puzzle = PUZZLES[name]
    for mistake in puzzle.misorders:
        wrong = moved(list(puzzle.solution), mistake.then, mistake.first)
        first = ORDERS[name](wrong, verbose=False)
        assert first.status == "misconception" and mistake.name in first.key, first.message
        assert first.message == first.symptom and mistake.name not in first.message
        assert first.message.startswith(f"[{puzzle.exercise}] not yet: run in your order, ")
        again = ORDERS[name](wrong, verbose=False)
        assert again.message == again.diagnosis and f"'{mistake.name}'" in again.message
        assert (
            f"line {mistake.then} (`{puzzle.lines[mistake.then]}`) comes before line {mistake.first}" in again.message
        )
        capsys.readouterr()
        again.reveal()
        assert f"the fix for '{mistake.name}': {mistake.fix}" in capsys.readouterr().out


def test_the_named_mistakes_of_the_series():
    assert [m.name for m in RECIPE_PUZZLE.misorders] == ["mask after softmax", "scores before the split into heads"]
    assert [m.name for m in DECODING_PUZZLE.misorders] == [
        "append before reading the offset",
        "append before rotating",
        "attend before appending",
    ]
    assert [m.name for m in ONLINE_ORDER_PUZZLE.misorders] == ["the maximum moves before the rescale"]


def test_mask_after_softmax_lets_the_first_token_see_the_future_as_its_symptom_says():
    """The symptom's claim, measured: with the mask after the softmax the first token's output is no longer the
    projection of its own value alone."""
    inputs = RECIPE_PUZZLE.inputs(torch.Generator().manual_seed(0))
    x, w_v, w_o = inputs["x"], inputs["w_v"], inputs["w_o"]
    namespace = {"torch": torch, "math": math, **inputs}
    exec(RECIPE_PUZZLE.source(["B", "G", "D", "A", "F", "H", "C", "E"])[0], namespace)
    alone = (x[:, :1] @ w_v.T) @ w_o.T  # the first token sees only itself: its own value, through W_O
    assert not torch.allclose(namespace["out"][:, :1], alone)
    exec(RECIPE_PUZZLE.source(RECIPE_PUZZLE.solution)[0], namespace)
    assert torch.allclose(namespace["out"][:, :1], alone)


def test_two_mis_orderings_are_named_together_and_a_crash_carries_no_result_symptom():
    both = ["B", "D", "G", "A", "F", "H", "C", "E"]  # scores before the split, and the mask after the softmax
    result = check_recipe_order(both, verbose=False)
    assert "It has 2 known mis-orderings: `result.hint()` names them." in result.message
    again = check_recipe_order(both, verbose=False)
    assert "your order has 2 known mis-orderings. 'mask after softmax'" in again.message
    assert "And 'scores before the split into heads'" in again.message
    stopped = ["F", "B", "G", "D", "A", "H", "C", "E"]  # the mask first: `scores` is not made yet
    result = check_recipe_order(stopped, verbose=False)
    assert result.status == "incorrect", result.message
    assert 'line F (`scores = scores.masked_fill(~mask, float("-inf"))`) uses `scores`, which no line before it' in (
        result.message
    )
    assert "first token" not in result.message


def test_decoding_mis_orderings_that_stop_the_run_say_where_and_why():
    attend_first = ["D", "F", "H", "B", "E", "G", "A", "C"]  # the mask made, then the attention before the append
    result = ORDERS["check_decoding_order"](attend_first, verbose=False)
    assert result.misconception == "attend before appending"
    assert "line G (`heads = mh.scaled_dot_product_attention(q, k_cache, v_cache, mask)`) raised ValueError" in (
        result.message
    )
    assert "(1, 2, 2, 3), got shape (2, 5)" in result.message


@pytest.mark.parametrize(
    ("name", "order"),
    [
        ("check_decoding_order", ["D", "F", "H", "B", "E", "A", "G", "C"]),  # the mask before the append
        ("check_decoding_order", ["F", "D", "H", "B", "A", "E", "G", "C"]),  # the offset after the projection
        ("check_online_order", ["C", "F", "D", "E", "A", "B"]),  # the output before the normaliser
        ("check_online_order", ["C", "D", "F", "A", "E", "B"]),  # the weights before the rescale
    ],
)
def test_lines_that_do_not_depend_on_each_other_may_come_either_way(name, order):
    result = ORDERS[name](order, verbose=False)
    assert result.correct, result.message
    assert "It differs from the solution's order where two lines do not depend on each other" in result.message


def test_the_solutions_equal_independent_references():
    """Each puzzle's lines, in the solution's order, against the same computation written with PyTorch alone."""
    for seed in RECIPE_PUZZLE.seeds:
        inputs = RECIPE_PUZZLE.inputs(torch.Generator().manual_seed(seed))
        x = inputs["x"]
        q, k, v = (
            (x @ inputs[w].T).view(1, 4, 2, 4).transpose(1, 2) for w in ("w_q", "w_k", "w_v")
        )  # (batch, heads, seq, d_head)
        heads = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        expected = heads.transpose(1, 2).reshape(1, 4, 8) @ inputs["w_o"].T
        namespace = {"torch": torch, "math": math, **inputs}
        exec(RECIPE_PUZZLE.source(RECIPE_PUZZLE.solution)[0], namespace)
        torch.testing.assert_close(namespace["out"], expected)

        inputs = ONLINE_ORDER_PUZZLE.inputs(torch.Generator().manual_seed(seed))
        namespace = {"torch": torch, "math": math, **inputs}
        exec(ONLINE_ORDER_PUZZLE.source(ONLINE_ORDER_PUZZLE.solution)[0], namespace)
        expected = torch.softmax(inputs["all_scores"], dim=-1) @ inputs["all_values"]
        torch.testing.assert_close(namespace["result"], expected)

        inputs = DECODING_PUZZLE.inputs(torch.Generator().manual_seed(seed))
        x_new, rope = inputs["x_new"], inputs["rope"]
        q, k, v = ((x_new @ inputs[w].T).view(1, 2, 2, 4).transpose(1, 2) for w in ("w_q", "w_k", "w_v"))
        positions = torch.tensor([3, 4])  # after three cached tokens
        q, k = rope(q, positions), rope(k, positions)
        keys = torch.cat([inputs["k_cache"], k], dim=-2)
        values = torch.cat([inputs["v_cache"], v], dim=-2)
        # new token i (position 3 + i) sees keys 0 .. 3 + i
        mask = torch.tensor([[True, True, True, True, False], [True, True, True, True, True]])
        heads = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
        expected = heads.transpose(1, 2).reshape(1, 2, 8) @ inputs["w_o"].T
        namespace = {"torch": torch, "math": math, **inputs}
        exec(DECODING_PUZZLE.source(DECODING_PUZZLE.solution)[0], namespace)
        torch.testing.assert_close(namespace["out"], expected)
        torch.testing.assert_close(namespace["k_cache"], keys)
        torch.testing.assert_close(namespace["v_cache"], values)


def test_every_named_mis_ordering_changes_the_result_on_every_input():
    """A mis-ordering that gave the right result on some input could not be told apart there: each must change
    the result (or stop the run) on each of its puzzle's inputs."""
    for puzzle in PUZZLES.values():
        for mistake in puzzle.misorders:
            wrong = moved(list(puzzle.solution), mistake.then, mistake.first)
            for seed in puzzle.seeds:
                result = check_order(replace(puzzle, seeds=(seed,)), wrong, verbose=False)
                assert result.status == "misconception", (mistake.name, seed)


# ------------------------------------------------------------------ the machinery on a small puzzle of its own


def _inputs(generator):
    return {"x": torch.randn(3, generator=generator, dtype=torch.float64)}


SMALL = OrderPuzzle(
    exercise="small",
    lines={"A": "z = y * 2", "B": "y = x + 1", "C": "out = z - x", "D": "w = x * 0"},
    solution=("B", "D", "A", "C"),
    inputs=_inputs,
    result="out",
    misorders=(MisOrder("doubled too late", first="A", then="C", hint="idea", fix="the fix", symptom="it shows"),),
)


def test_a_wrong_form_is_told_what_is_wrong_with_it():
    told = {
        ("B", "B", "A", "C"): "your order uses 'B' more than once and leaves out 'D': every line is used exactly once.",
        ("B", "A", "C"): "your order leaves out 'D': every line is used exactly once.",
        ("B", "A", "C", "Z", "Q"): "'Z', 'Q' are not a label of these lines (A to D).",
        ("B", "A", "C", "Z"): "'Z' is not a label of these lines (A to D).",
    }
    for answer, words in told.items():
        result = check_order(SMALL, list(answer), verbose=False)
        assert result.status == "incorrect" and result.message == f"[small] not yet: {words}"


def test_not_attempted_a_function_returning_a_string_and_a_string_are_told():
    for answer in (None, ...):
        assert check_order(SMALL, answer, verbose=False).status == "not_attempted"
    result = check_order(SMALL, lambda: "BDAC", verbose=False)
    assert result.message == (
        "[small] not yet: your function returned a str; return the list of the lines' labels, first line first."
    )
    with pytest.raises(TypeError, match=r"learner must be a function returning your order, .*\['A', 'B'\].*got str"):
        check_order(SMALL, "BDAC", verbose=False)


def test_an_order_no_known_mistake_fits_gets_the_one_move_that_fixes_it(capsys):
    result = check_order(SMALL, ["D", "A", "B", "C"], verbose=False)  # A before B: `y` is not made yet
    assert result.status == "incorrect" and result.misconception is None
    assert result.message == (
        "[small] not yet: run in your order, line A (`z = y * 2`) uses `y`, which no line before it has made yet. "
        "Follow each name back to the line that makes it."
    )
    result.reveal()
    assert capsys.readouterr().out.strip() == "[small] Move line A (`z = y * 2`) to come right after line B."
    chain = OrderPuzzle(
        exercise="chain",
        lines={"A": "a = x + 1", "B": "b = a * 2", "C": "c = b - 1", "D": "out = c * 3"},
        solution=("A", "B", "C", "D"),
        inputs=_inputs,
        result="out",
    )
    backwards = check_order(chain, ["D", "C", "B", "A"], verbose=False)
    backwards.reveal()
    assert capsys.readouterr().out.strip() == (
        "[chain] more than one line is out of place. One right order: ['A', 'B', 'C', 'D']."
    )


def test_a_result_that_differs_says_by_how_much_and_a_known_mistake_adds_its_symptom():
    puzzle = OrderPuzzle(
        exercise="numbers",
        lines={"A": "y = x + 1", "B": "y = y * 2", "C": "out = y"},
        solution=("A", "B", "C"),
        inputs=lambda g: {"x": torch.zeros(2, dtype=torch.float64)},
        result="out",
        misorders=(MisOrder("copied too early", first="B", then="C", hint="idea", fix="fix", symptom="It shows."),),
    )
    result = check_order(puzzle, ["A", "C", "B"], verbose=False)
    assert result.message == (
        "[numbers] not yet: run in your order, the result differs from the recipe's by up to 1. It shows. "
        "This is a known mis-ordering: `result.hint()` names it."
    )
    shape = OrderPuzzle(
        exercise="shape",
        lines={"A": "y = x[:1]", "B": "y = x"},
        solution=("A", "B"),
        inputs=lambda g: {"x": torch.zeros(2, dtype=torch.float64)},
        result="y",
    )
    assert check_order(shape, ["B", "A"], verbose=False).symptom == (
        "[shape] not yet: run in your order, the result has shape (1,), where the recipe's has (2,). Follow each "
        "name back to the line that makes it."
    )


def test_source_indents_the_lines_where_the_template_puts_them():
    puzzle = OrderPuzzle(
        exercise="loop",
        lines={"A": "total = total + i", "B": "count += 1"},
        solution=("A", "B"),
        inputs=lambda g: {},
        result="total",
        template="total, count = 0, 0\nfor i in range(3):\n    {lines}\n",
    )
    source, labels = puzzle.source(["B", "A"])
    assert source == "total, count = 0, 0\nfor i in range(3):\n    count += 1\n    total = total + i\n"
    assert labels == {3: "B", 4: "A"}


# ------------------------------------------------------------------ the widget


def row_button(widget, row, arrow):
    """Row ``row``'s "↑" or "↓" button, as a learner clicks it."""
    return next(b for b in widget.rows.children[row].children if getattr(b, "description", "") == arrow)


def test_the_widget_moves_a_line_with_its_rows_buttons_within_the_ends():
    widget = recipe_order_exercise()
    assert widget.order == list("ABCDEFGH")
    row_button(widget, 1, "↑").click()  # B up
    assert widget.order == list("BACDEFGH")
    row_button(widget, 0, "↑").click()  # already first
    row_button(widget, 7, "↓").click()  # already last
    assert widget.order == list("BACDEFGH")
    row_button(widget, 6, "↓").click()  # G down
    assert widget.order == list("BACDEFHG")
    assert [code.value[0] for code in widget.codes] == widget.order
    assert widget.codes[0].value == "B   q, k, v = x @ w_q.T, x @ w_k.T, x @ w_v.T"
    assert widget.codes[5].value == "F   scores = scores.masked_fill(~mask, float(&quot;-inf&quot;))"
    assert widget.answer.value == "Your order: <code>[&#x27;B&#x27;, &#x27;A&#x27;, &#x27;C&#x27;, &#x27;D&#x27;, " \
        "&#x27;E&#x27;, &#x27;F&#x27;, &#x27;H&#x27;, &#x27;G&#x27;]</code>"  # fmt: skip


def test_the_widget_checks_hints_and_reveals_as_the_cell_does():
    widget = online_order_exercise()
    widget.buttons["Hint"].click()
    assert widget.feedback.value == "Check your order first."
    for label, place in (("C", 0), ("D", 1), ("B", 2), ("F", 3)):  # B, the maximum moved on, before F
        while widget.order.index(label) > place:
            row_button(widget, widget.order.index(label), "↑").click()
    assert widget.order == ["C", "D", "B", "F", "A", "E"]
    widget.buttons["Check"].click()
    assert widget.result is not None and widget.result.misconception == "the maximum moves before the rescale"
    assert widget.feedback.value.startswith("[online_order] not yet: run in your order, the result differs")
    widget.buttons["Hint"].click()
    assert "this is &#x27;the maximum moves before the rescale&#x27;" in widget.feedback.value
    widget.buttons["Reveal"].click()
    assert widget.feedback.value.startswith("[online_order] the fix for")
    widget.move("B", +2)
    widget.buttons["Check"].click()
    assert widget.result.correct and widget.feedback.value.startswith("[online_order] correct")


def test_without_a_kernel_the_widget_shows_its_lines_as_text():
    bundle, _ = recipe_order_exercise()._repr_mimebundle_()
    assert bundle["text/plain"].splitlines()[:2] == [
        "A  weights = torch.softmax(scores, dim=-1)",
        "B  q, k, v = x @ w_q.T, x @ w_k.T, x @ w_v.T",
    ]
    assert "text/html" not in bundle  # nbconvert and nbviewer would show it instead of the picture
    picture = base64.b64decode(bundle["image/png"])  # what GitHub and nbviewer show
    assert picture.startswith(b"\x89PNG") and Image.open(io.BytesIO(picture)).size[1] > 8 * 40
    assert "application/vnd.jupyter.widget-view+json" in bundle


def test_the_package_names_the_lines_use_are_the_packages():
    inputs = DECODING_PUZZLE.inputs(torch.Generator().manual_seed(0))
    assert inputs["mh"].scaled_dot_product_attention is mh.scaled_dot_product_attention
    assert RECIPE_PUZZLE.inputs(torch.Generator())["mh"].split_heads is mh.split_heads
