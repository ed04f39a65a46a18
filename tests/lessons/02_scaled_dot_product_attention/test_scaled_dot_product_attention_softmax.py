"""Notebook 02's softmax checker recognises right and wrong answers.

Every wrong implementation below is written the way a learner would write it (not taken from the checker
modules), so each test shows that the checker's cases really tell that mistake apart from the right answer
*and* from the other named mistakes.
"""

from __future__ import annotations

import pytest
import torch

from mhsa_helpers.lessons.scaled_dot_product_attention import check_softmax


def assert_named(checker, learner, name):
    """The first attempt is told the symptom without the name; the same answer again is named."""
    result = checker(learner, verbose=False)
    assert result.status == "misconception", result.message
    assert result.misconception == name, result.message
    assert name not in result.message and result.message == result.symptom
    again = checker(learner, verbose=False)
    assert name in again.message
    return again


def test_softmax_correct_with_an_independent_stable_formula():
    def log_sum_exp_softmax(x):
        return torch.exp(x - torch.logsumexp(x, dim=-1, keepdim=True))

    assert check_softmax(log_sum_exp_softmax, verbose=False).correct


def _naive_softmax(x):
    return torch.exp(x) / torch.exp(x).sum(dim=-1, keepdim=True)


def _global_max_softmax(x):
    e = torch.exp(x - x.max())
    return e / e.sum(dim=-1, keepdim=True)


def _whole_sum_softmax(x):
    e = torch.exp(x)
    return e / e.sum()


def _stable_whole_sum_softmax(x):
    e = torch.exp(x - x.max(dim=-1, keepdim=True).values)
    return e / torch.sum(e)


def _no_keepdim_softmax(x):
    e = torch.exp(x - x.max(dim=-1, keepdim=True).values)
    return e / e.sum(dim=-1)


@pytest.mark.parametrize(
    "learner, name",
    [
        (lambda x: torch.softmax(x, dim=-2), "softmax over the wrong dimension"),
        (lambda x: torch.softmax(x, dim=0), "softmax over the wrong dimension"),
        (lambda x: torch.softmax(x, dim=1), "softmax over the wrong dimension"),
        (_naive_softmax, "did not subtract the row's max"),
        (_global_max_softmax, "subtracted one global max instead of each row's max"),
        (_whole_sum_softmax, "summed over the whole tensor (forgot dim=-1 in the sum)"),
        (_stable_whole_sum_softmax, "summed over the whole tensor (forgot dim=-1 in the sum)"),
        (_no_keepdim_softmax, "summed without keepdim=True (the row sums broadcast along the wrong axis)"),
    ],
)
def test_softmax_mistakes(learner, name):
    assert_named(check_softmax, learner, name)
