"""The gradient checker (mhsa_helpers.teaching.gradients): what a learner is told when their function returns
the wrong form (None, a list, a float, too many outputs, a tensor that is not of numbers), when it cuts the
graph, and when what they pass is a class rather than a function; and the fixed weights whose gradient is
compared. Pinned exactly, found unpinned by mutation testing (``make mutate``).

Written against the public API: ``compare_with_gradients`` with ``Case`` objects and the result's fields, and
``with_gradients``.
"""

from __future__ import annotations

import torch

from mhsa_helpers.teaching.checking import Case
from mhsa_helpers.teaching.gradients import (
    GRADIENT_FIX,
    GRADIENT_HINT,
    GRADIENT_NAME,
    GRADIENT_SYMPTOM,
    compare_with_gradients,
    with_gradients,
)

X = torch.tensor([1.0, 2.0], dtype=torch.float64)
TWO_NUMBERS = [Case((X,), description="two numbers")]
CALLED = "It was called with a tensor of shape (2,) (two numbers)."


def one_output(learner):
    """The result for ``learner`` where the reference returns one tensor, ``2 * x``."""
    return compare_with_gradients("ex", learner, lambda x: 2 * x, TWO_NUMBERS, (), ("output",), ("x",), verbose=False)


def output_and_weights(x):
    return 2 * x, x + 1


def two_outputs(learner):
    """The result for ``learner`` where the reference returns two tensors, ``(output, weights)``."""
    outputs = ("output", "weights")
    return compare_with_gradients("ex", learner, output_and_weights, TWO_NUMBERS, (), outputs, ("x",), verbose=False)


# ------------------------------------------------------------------ the fixed weights


def test_the_gradient_is_that_of_fixed_weights_computed_in_the_outputs_dtype():
    # The identity's gradient is the weights themselves: cos(0), cos(1), ... + 1.5, in float64 for a float64
    # output (not rounded to float32 on the way).
    x = torch.zeros(2, 3, dtype=torch.float64)
    _, gradient = with_gradients(lambda x: x, ("output",), ("x",))(x)
    expected = torch.cos(torch.arange(6, dtype=torch.float64)).reshape(2, 3) + 1.5
    assert gradient.dtype == torch.float64 and torch.equal(gradient, expected)


# ------------------------------------------------------------------ the wrong form


def test_a_forgotten_return_is_asked_about():
    message = one_output(lambda x: None).message
    # (The checker adds a full stop after the question mark: the message is pinned up to it and from the case on.)
    assert message.startswith("[ex] not yet: your function returned None — did you forget `return`?")
    assert message.endswith(f" {CALLED}")


def test_one_output_returned_as_something_else_is_named_by_what_it_is():
    def told(returned: str) -> str:
        return f"[ex] not yet: return the output as one tensor; your function returned {returned}. {CALLED}"

    assert one_output(lambda x: 2.0).message == told("a float")
    assert one_output(lambda x: [1.0, 2.0]).message == told("a list of 2 items")
    assert one_output(lambda x: ()).message == told("a tuple of 0 items")
    assert one_output(lambda x: [2 * x, x]).message == told("a list of 2 tensors")
    assert one_output(lambda x: (2 * x,)).message == (
        f"[ex] not yet: your function returned a tuple of 1 tensor; return the tensor itself. {CALLED}"
    )


def test_several_outputs_returned_in_another_number_are_counted():
    def told(returned: str) -> str:
        return f"[ex] not yet: return 2 tensors, (output, weights); your function returned {returned}. {CALLED}"

    assert two_outputs(lambda x: 2 * x).message == told("a tensor of shape (2,)")
    assert two_outputs(lambda x: (2 * x, x + 1, x)).message == told("a tuple of 3 tensors")


def test_an_output_that_is_not_a_tensor_of_numbers_is_named():
    def told(it_is: str) -> str:
        return f"[ex] not yet: the weights you return must be a tensor of numbers; it is {it_is}. {CALLED}"

    assert two_outputs(lambda x: (2 * x, None)).message == told("None")
    assert two_outputs(lambda x: (2 * x, torch.tensor([2, 3]))).message == told("a tensor of shape (2,)")


# ------------------------------------------------------------------ a cut graph


def test_a_cut_graph_is_told_by_its_symptom_then_named_and_its_fix_given():
    result = one_output(lambda x: (2 * x).detach())
    assert (result.status, result.misconception) == ("misconception", GRADIENT_NAME)
    assert result.message == (
        "[ex] not yet: case 'two numbers' differs from the reference (output 2 (gradient reaching x): largest "
        f"difference 5 (the other output matches)). {GRADIENT_SYMPTOM} This is a known mistake: `result.hint()` "
        "names it."
    )
    assert result.diagnosis == (
        f"[ex] not yet: this looks like '{GRADIENT_NAME}'. {GRADIENT_HINT} `result.reveal()` shows the fix."
    )
    assert result.fix == f"[ex] the fix for '{GRADIENT_NAME}': {GRADIENT_FIX}"


def test_the_cut_graph_probe_runs_the_first_case_with_its_keyword_arguments():
    cases = [Case((X,), {"scale": 2.0})]

    def detached(x, *, scale):
        return (scale * x).detach()

    def reference(x, *, scale):
        return scale * x

    result = compare_with_gradients("ex", detached, reference, cases, (), ("output",), ("x",), verbose=False)
    assert result.misconception == GRADIENT_NAME, result.message


# ------------------------------------------------------------------ not a function


def test_a_module_class_is_told_to_be_made_into_a_module():
    class Doubling(torch.nn.Module):
        def forward(self, x):
            return 2 * x

    result = one_output(Doubling)
    assert (result.exercise, result.status) == ("ex", "error")
    assert result.message == (
        "[ex] not yet: you passed the class Doubling itself; pass a module made from it, Doubling(...)."
    )


def test_another_class_is_run_and_compared_with_the_reference_with_the_options_given(capsys):
    class Doubling:
        def __init__(self, x):
            self.x = x

    result = one_output(Doubling)  # verbose=False: nothing printed
    assert (result.exercise, result.status) == ("ex", "incorrect")
    assert result.message == (
        "[ex] not yet: case 'two numbers' differs from the reference (expected a tensor, got a Doubling)."
    )
    assert capsys.readouterr().out == ""
