"""The exercise checker's verdicts (mhsa_helpers.teaching.checking): correct on one case or on all of
them, a forgotten ``return``, and which known mistakes are named, in the order the checker lists them,
when some cannot be run or are known only by a symptom. Pinned exactly, found unpinned by mutation
testing (``make mutate``).

A learner reads the verdict first: "correct on all 3 cases", "did you forget `return`?", or the name
and hint of the mistake their numbers fit (both, when two mistakes give the same numbers).

Written against the public API only: ``check_function`` with ``Case`` and ``Misconception`` objects.
"""

from __future__ import annotations

import torch

from mhsa_helpers.teaching.checking import Case, Misconception, check_function

ONE = [Case((torch.ones(2),))]
TWO = [Case((torch.ones(2),)), Case((torch.arange(3.0),))]


def test_a_right_answer_is_counted_on_its_cases():
    assert check_function("ex", lambda x: x, lambda x: x, ONE, verbose=False).message == "[ex] correct on its one case."
    assert check_function("ex", lambda x: x, lambda x: x, TWO, verbose=False).message == "[ex] correct on all 2 cases."


def test_a_forgotten_return_is_asked_about():
    def learner(x):
        x * 2  # computed, not returned

    result = check_function("ex", learner, lambda x: 2 * x, TWO, verbose=False)
    assert (result.exercise, result.status) == ("ex", "incorrect")
    assert result.message == (
        "[ex] not yet: your function returned None — did you forget `return`? "
        "It was called with a tensor of shape (2,)."
    )


def _doubled(x):
    return 2 * x


def test_a_mistake_known_only_by_its_symptom_does_not_hide_the_ones_after_it():
    mistakes = [
        Misconception("symptom only", None, "Look again.", detect=lambda run: False),
        Misconception("doubled", _doubled, "Do not double."),
    ]
    result = check_function("ex", _doubled, lambda x: x, TWO, mistakes, verbose=False)
    assert result.misconception == "doubled", result.message


def test_a_mistake_whose_implementation_fails_does_not_hide_the_ones_after_it():
    def fails(x):
        raise RuntimeError("this mistake cannot run on these cases")

    mistakes = [Misconception("fails", fails, "-"), Misconception("doubled", _doubled, "Do not double.")]
    result = check_function("ex", _doubled, lambda x: x, TWO, mistakes, verbose=False)
    assert result.misconception == "doubled", result.message


def test_two_fitting_mistakes_are_both_named_in_the_order_given():
    mistakes = [
        Misconception("doubled", _doubled, "Do not double."),
        Misconception("doubled", lambda x: x + x, "A second hint for the same name is not repeated."),
        Misconception("added itself", lambda x: x + x, "Do not add x to itself."),
    ]
    result = check_function("ex", _doubled, lambda x: x, TWO, mistakes, verbose=False)
    assert (result.exercise, result.status, result.misconception) == ("ex", "misconception", "doubled")
    assert result.diagnosis == (
        "[ex] not yet: your numbers fit 2 known mistakes, which give the same results on these cases; look for "
        "either. 'doubled': Do not double. Or 'added itself': Do not add x to itself."
    )
    assert result.key == "mistake: doubled | added itself" and result.message == result.symptom
