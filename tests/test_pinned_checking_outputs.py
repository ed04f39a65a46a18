"""How the exercise checker (mhsa_helpers.teaching.checking) describes outputs that differ, whose code
an error or a call belongs to, and which shortcuts it notes. Pinned exactly, found unpinned by mutation
testing (``make mutate``).

A learner whose function returns several outputs reads which of them is missing, extra or wrong; a
learner who calls a function that does the exercise's work is told its name; a learner whose code
fails inside numpy or Python's own modules is pointed at their own line.

Written against the public API only: ``check_function`` with ``Case`` objects and the result's
``message`` and ``shortcuts``.
"""

from __future__ import annotations

import os
import textwrap

import numpy as np
import torch

from mhsa_helpers.teaching.checking import Case, check_function

TWO_ZEROS = [Case((torch.zeros(2),), description="two zeros")]


def check(got, expected, **options):
    """The result for a learner that returns ``got`` where the reference returns ``expected``."""
    return check_function("ex", lambda *a: got, lambda *a: expected, TWO_ZEROS, verbose=False, **options)


def differs(detail: str) -> str:
    return f"[ex] not yet: case 'two zeros' differs from the reference ({detail})."


X = torch.ones(2)


# ------------------------------------------------------------------ several outputs


def test_one_output_where_several_are_expected():
    assert check(X, (X, X)).message == differs("returned a tensor of shape (2,), expected 2 outputs")
    named = check(X, (X, X), output_names=("weights", "values")).message
    assert named == differs("returned a tensor of shape (2,), expected 2 outputs (weights, values)")


def test_extra_outputs_are_named():
    assert check((X, X, X, X), (X, X)).message == differs(
        "returned 4 outputs, expected 2 outputs: output 3, output 4 extra"
    )


def test_missing_outputs_are_named_in_the_singular_or_the_plural():
    names = {"output_names": ("q", "k", "v")}
    assert check((X,), (X, X, X), **names).message == differs(
        "returned 1 output, expected 3 outputs (q, k, v): output 2 (k), output 3 (v) missing"
    )
    assert check((X, X), (X, X, X), **names).message == differs(
        "returned 2 outputs, expected 3 outputs (q, k, v): output 3 (v) missing"
    )


def test_every_output_that_differs_is_named():
    assert check((X, X), (2 * X, 3 * X)).message == differs(
        "output 1: largest difference 1; output 2: largest difference 2"
    )
    assert check((X, X, X), (2 * X, X, X)).message == differs(
        "output 1: largest difference 1 (the other 2 outputs match)"
    )


# ------------------------------------------------------------------ values that are neither tensors nor numbers


def test_other_values_are_compared_with_equality():
    assert check("causal", "causal").correct
    assert check(True, True).correct
    assert check("full", "causal").message == differs("returned a str, expected 'causal'")
    assert check(None, (1, 2)).status == "incorrect"


def test_values_that_cannot_be_compared_are_not_the_same():
    # A numpy array against a list: `==` gives an array whose truth is ambiguous (it raises).
    result = check((X, np.array([1, 2])), (X, [1, 2]))
    assert result.message == differs("output 2: returned a ndarray, expected [1, 2] (the other output matches)")


def test_whole_numbers_beyond_float64_differ_without_a_gap_of_0():
    # 2**60 + 1 and 2**60 are the same float64: the difference is told without "largest difference 0".
    big = 2**60
    assert check(torch.tensor([big + 1]), torch.tensor([big])).message == differs("the values differ")


# ------------------------------------------------------------------ whose code is it


def test_an_error_inside_pythons_frozen_modules_names_the_learners_line():
    # os.path's code is frozen into Python: its frames are "<frozen posixpath>", not the learner's.
    def learner(x):
        return os.path.join("weights", 1)

    message = check_function("ex", learner, lambda x: x, TWO_ZEROS, verbose=False).message
    line = learner.__code__.co_firstlineno + 1
    assert message.startswith("[ex] your function raised TypeError: ")
    assert message.endswith(
        f'(in learner, line {line}: `return os.path.join("weights", 1)`). It was called with a tensor of '
        "shape (2,) (two zeros); check which shapes your code assumes."
    )


def test_an_error_inside_an_installed_package_names_the_learners_line():
    def learner(x):
        return np.linalg.inv(np.zeros((2, 2)))

    message = check_function("ex", learner, lambda x: x, TWO_ZEROS, verbose=False).message
    assert message.startswith("[ex] your function raised LinAlgError: Singular matrix (in learner, line ")
    assert "`return np.linalg.inv(np.zeros((2, 2)))`). It was called with" in message


# ------------------------------------------------------------------ shortcuts


def _shortcuts(learner, names):
    expected = learner(None)
    return check_function("ex", learner, lambda x: expected, TWO_ZEROS, shortcuts=names, verbose=False).shortcuts


def test_a_python_function_called_by_the_learner_is_noted_with_its_module():
    assert _shortcuts(lambda x: textwrap.dedent("  a"), ("dedent",)) == ("textwrap.dedent",)


def test_a_method_called_by_the_learner_is_noted_by_its_name():
    assert _shortcuts(lambda x: textwrap.TextWrapper(width=3).wrap("one two"), ("wrap",)) == ("textwrap.wrap",)


def test_shortcuts_are_listed_in_the_order_the_learners_code_called_them():
    # textwrap.fill is called first; the TextWrapper it makes, inside it, second.
    fill = lambda x: textwrap.fill("one two", width=3)  # noqa: E731 - the learner's one-line answer
    assert _shortcuts(fill, ("fill", "TextWrapper")) == ("textwrap.fill", "textwrap.TextWrapper")


def test_a_class_made_by_the_learner_is_noted():
    assert _shortcuts(lambda x: textwrap.TextWrapper(width=3).width, ("TextWrapper",)) == ("textwrap.TextWrapper",)


def test_a_call_one_step_below_the_learners_is_noted_and_deeper_ones_are_not():
    # textwrap.fill makes a TextWrapper (one step below the learner: noted, as through a decorator) and
    # calls its `wrap` through TextWrapper.fill (two steps below: the library's own business).
    fill = lambda x: textwrap.fill("one two", width=3)  # noqa: E731 - the learner's one-line answer
    assert _shortcuts(fill, ("TextWrapper",)) == ("textwrap.TextWrapper",)
    assert _shortcuts(fill, ("wrap",)) == ()


def test_a_library_function_outside_any_module_is_noted_by_its_name():
    # Code of a library file run with globals that have no `__name__`: the name alone, no leading dot.
    namespace: dict = {}
    exec(compile("def Xavier_init():\n    return 1\n", textwrap.__file__, "exec"), namespace)
    xavier_init = namespace["Xavier_init"]
    assert _shortcuts(lambda x: xavier_init(), ("Xavier_init",)) == ("Xavier_init",)


def test_an_error_inside_a_debian_installed_package_names_the_learners_line():
    # Debian's Python keeps installed packages in dist-packages: their code is not the learner's.
    namespace: dict = {}
    source = "def invert(m):\n    raise ValueError('singular')\n"
    exec(compile(source, "/usr/lib/python3/dist-packages/linalg_tools/core.py", "exec"), namespace)
    invert = namespace["invert"]

    def learner(x):
        return invert(x)

    message = check_function("ex", learner, lambda x: x, TWO_ZEROS, verbose=False).message
    line = learner.__code__.co_firstlineno + 1
    assert message.startswith(f"[ex] your function raised ValueError: singular (in learner, line {line}: ")
