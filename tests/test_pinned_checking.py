"""The exercise checker (mhsa_helpers.teaching.checking): a learner's in-place edits stay in the
learner's call. Found unpinned by mutation testing (``make mutate``): the checker could pass the
cases' own tensors to the learner, and no test noticed.

Written against public behaviour only: ``check_function`` with ``Case`` objects.
"""

from __future__ import annotations

import torch

from mhsa_helpers.teaching.checking import Case, Misconception, check_function


def _cases():
    return [
        Case((torch.tensor([1.0, 2.0, 3.0]),), description="three numbers"),
        Case((torch.tensor([[0.5, -1.0], [4.0, 2.0]]),), description="a 2x2 matrix"),
    ]


def test_a_correct_learner_that_works_in_place_is_correct_and_the_cases_are_unchanged():
    cases = _cases()
    before = [case.args[0].clone() for case in cases]

    def doubled_in_place(x):
        return x.mul_(2)

    result = check_function("double", doubled_in_place, lambda x: 2 * x, cases, verbose=False)
    assert result.correct, result.message
    for case, original in zip(cases, before, strict=True):
        assert torch.equal(case.args[0], original)


def test_a_wrong_in_place_learner_does_not_corrupt_the_reference_or_the_misconceptions():
    cases = _cases()

    def zeroed_in_place(x):
        return x.zero_()

    # Were the learner's zeros written into the cases, the reference (x + 1) would give ones and the
    # "returned zeros" misconception (0 * x) would give zeros again: named only if inputs stay intact.
    mistakes = [Misconception("returned zeros", lambda x: 0 * x, "hint")]
    result = check_function("plus one", zeroed_in_place, lambda x: x + 1, cases, mistakes, verbose=False)
    assert result.status == "misconception" and result.misconception == "returned zeros"
    assert torch.equal(cases[0].args[0], torch.tensor([1.0, 2.0, 3.0]))


def test_a_reference_that_works_in_place_does_not_change_what_the_learner_is_compared_on():
    cases = _cases()
    expected_sum = [float(case.args[0].sum()) for case in cases]

    def learner_sum(x):
        return x.sum()

    def reference_sum(x):
        total = x.sum()
        x.fill_(100.0)  # an untidy reference must not reach the next case or the learner
        return total

    result = check_function("sum", learner_sum, reference_sum, cases, verbose=False)
    assert result.correct, result.message
    assert [float(case.args[0].sum()) for case in cases] == expected_sum
