"""Gradients as outputs: a checker that compares what flows back through the learner's function as well as
what it returns (notebooks 01-03, and every function the learner trains through later).

:func:`with_gradients` wraps a function so that it returns its outputs followed by the gradient reaching each
named input; :func:`compare_with_gradients` is :func:`~mhsa_helpers.teaching.checking.check_function` with the
learner, the reference and the misconceptions so wrapped, and the cut graph named (:data:`GRADIENT_NAME`).
A call under ``torch.no_grad()`` (a case drawn so) compares the outputs alone: no gradient exists there.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import torch

from .checking import AnswerRejected, Case, CheckResult, Misconception, check_function

__all__ = [
    "GRADIENT_FIX",
    "GRADIENT_HINT",
    "GRADIENT_NAME",
    "compare_with_gradients",
    "gradient_names",
    "with_gradients",
    "with_gradients_all",
]


def _probe(output: torch.Tensor) -> torch.Tensor:
    # Fixed weights for the sum whose gradient is compared: the same for every answer of the same shape.
    return torch.cos(torch.arange(output.numel(), dtype=output.dtype)).reshape(output.shape) + 1.5


def _form(value: Any) -> str:
    """What a value is, as a learner reads it: "a tensor of shape (3, 4)", "a tuple of 1 tensor", "None"."""
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    if isinstance(value, (tuple, list)):
        kind = "tensor" if value and all(isinstance(v, torch.Tensor) for v in value) else "item"
        return f"a {type(value).__name__} of {len(value)} {kind}{'s' if len(value) != 1 else ''}"
    return "None" if value is None else f"a {type(value).__name__}"


GRADIENT_NAME = "no gradient reaches an argument (the graph is cut)"
GRADIENT_HINT = (
    "Your values may be right, but no gradient flows back from what your function returns to one of its "
    "arguments: a step cut the graph, or the result does not depend on that argument. Training adjusts the "
    "weights through these gradients."
)
GRADIENT_FIX = (
    "Compute with tensor operations all the way: no `.detach()`, `torch.no_grad()`, `.item()` or `.tolist()` "
    "on the way, and no new tensor built with `torch.tensor(...)` from computed numbers."
)
GRADIENT_SYMPTOM = "The gradient reaching one of the arguments is zero where the reference's is not."


def _outputs(result: Any, outputs: Sequence[str]) -> tuple:
    """The learner's ``result`` as a tuple of tensors of numbers, one per name in ``outputs``; a wrong form
    (None, a one-tuple, too few outputs, a tensor of booleans) is an :class:`AnswerRejected`."""
    if result is None:
        raise AnswerRejected("your function returned None — did you forget `return`?")
    if len(outputs) == 1:
        if isinstance(result, (tuple, list)) and len(result) == 1 and isinstance(result[0], torch.Tensor):
            raise AnswerRejected(f"your function returned {_form(result)}; return the tensor itself")
        if not isinstance(result, torch.Tensor):
            raise AnswerRejected(f"return the {outputs[0]} as one tensor; your function returned {_form(result)}")
        results: tuple = (result,)
    else:
        if not isinstance(result, (tuple, list)) or len(result) != len(outputs):
            raise AnswerRejected(
                f"return {len(outputs)} tensors, ({', '.join(outputs)}); your function returned {_form(result)}"
            )
        results = tuple(result)
    for name, value in zip(outputs, results, strict=True):
        if not isinstance(value, torch.Tensor) or not (value.is_floating_point() or value.is_complex()):
            raise AnswerRejected(f"the {name} you return must be a tensor of numbers; it is {_form(value)}")
    return results


def with_gradients(
    function: Callable[..., Any],
    outputs: Sequence[str],
    inputs: Sequence[str],
    missing: list[str] | None = None,
) -> Callable[..., Any]:
    """``function``'s outputs followed by the gradient, for each tensor argument named in ``inputs`` (the
    first positional ones, in order), of a fixed weighted sum of the outputs.

    A checker compares these with the reference's, so an answer must get the gradients right as well as
    the values. Where no gradient reaches an argument (an answer that cuts the graph with ``.detach()``,
    ``torch.no_grad()``, ``.item()``, a new tensor built with ``torch.tensor(...)``, or does not use it), its
    gradient counts as zeros and its name is added to ``missing``. The function gets
    copies of its arguments; if it changes one in place, it is told so. ``outputs`` names what the
    function returns: one name for a bare tensor, several for a tuple. Errors keep pointing at the
    learner's own line (the wrapper sets ``__wrapped__``)."""

    @functools.wraps(function)
    def run(*args: Any, **kwargs: Any) -> tuple:
        if not torch.is_grad_enabled():  # a call under torch.no_grad(): the outputs alone, no gradient exists
            return (*_outputs(function(*args, **kwargs), outputs), *(None,) * len(inputs))
        leaves = [
            a.detach().clone().requires_grad_() if i < len(inputs) and isinstance(a, torch.Tensor) else a
            for i, a in enumerate(args)
        ]
        given = [leaf.clone() if i < len(inputs) else leaf for i, leaf in enumerate(leaves)]
        result = function(*given, **kwargs)
        changed = False
        for original, leaf, passed in zip(args, leaves, given, strict=False):
            if passed.shape != leaf.shape or not torch.equal(passed.detach(), leaf.detach()):
                # Hand the change on to the argument the checker gave us (its own copy), so that the checker
                # names it as the change of an argument in place, with the argument's name.
                with torch.no_grad():
                    original.set_(passed.detach().clone())
                changed = True
        if changed:
            return result
        results = _outputs(result, outputs)
        carried = [value for value in results if value.requires_grad]
        grads: tuple = (None,) * len(inputs)
        if carried:
            total = sum((value * _probe(value)).sum() for value in carried)
            grads = torch.autograd.grad(total, leaves[: len(inputs)], allow_unused=True)
        if missing is not None:
            missing[:] = [name for name, grad in zip(inputs, grads, strict=True) if grad is None]
        grads = tuple(
            torch.zeros_like(leaf) if grad is None else grad for leaf, grad in zip(leaves, grads, strict=False)
        )
        return (*(value.detach() for value in results), *grads)

    return run


def compare_with_gradients(
    exercise: str,
    learner: Callable[..., Any],
    reference: Callable[..., Any],
    cases: Sequence[Case],
    misconceptions: Sequence[Misconception],
    outputs: Sequence[str],
    inputs: Sequence[str],
    **options: Any,
) -> CheckResult:
    """:func:`~mhsa_helpers.teaching.checking.check_function` with the learner, the reference and the
    misconceptions wrapped by :func:`with_gradients`, and the outputs named. Something that is not a function,
    a class, or a module without ``forward`` is passed to ``check_function`` as it is, which refuses it (a
    TypeError) or names that mistake before running anything."""
    if (
        not callable(learner)
        or isinstance(learner, type)
        or (isinstance(learner, torch.nn.Module) and type(learner).forward is torch.nn.Module.forward)
    ):
        return check_function(exercise, learner, reference, cases, **options)
    missing: list[str] = []

    def cuts_the_graph(run: Callable[..., Any]) -> bool:
        missing.clear()
        run(*cases[0].args, **cases[0].kwargs)
        return bool(missing)

    graph_cut = Misconception(
        GRADIENT_NAME, None, GRADIENT_HINT, detect=cuts_the_graph, fix=GRADIENT_FIX, symptom=GRADIENT_SYMPTOM
    )
    return check_function(
        exercise,
        with_gradients(learner, outputs, inputs, missing),
        with_gradients(reference, outputs, inputs),
        cases,
        [*with_gradients_all(misconceptions, outputs, inputs), graph_cut],
        output_names=gradient_names(outputs, inputs),
        **options,
    )


def with_gradients_all(misconceptions: Sequence[Misconception], outputs: Sequence[str], inputs: Sequence[str]) -> list:
    """The ``misconceptions`` with their implementations wrapped by :func:`with_gradients` too."""
    return [
        m if m.implementation is None else replace(m, implementation=with_gradients(m.implementation, outputs, inputs))
        for m in misconceptions
    ]


def gradient_names(outputs: Sequence[str], inputs: Sequence[str]) -> tuple[str, ...]:
    """The names of :func:`with_gradients`' outputs, for the checker's messages."""
    return (*outputs, *(f"gradient reaching {name}" for name in inputs))
