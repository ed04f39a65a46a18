"""Notebook 11's recall questions, on the notebooks before it: each answer computed with the package where it is a
number or a shape, and each with its reason (:mod:`mhsa_helpers.teaching.recall`)."""

from __future__ import annotations

import math

import torch

from ...teaching.checking import CheckResult
from ...teaching.recall import Question
from ...teaching.recall import check_recall as check_answers

__all__ = ["RECALL", "check_recall"]


def _last_two_axes_line() -> str:
    """The line that swaps only the last two axes of a batch of keys: run both, keep the one that does."""
    k = torch.randn(2, 8, 5, 4)
    lines = {"A": lambda: k.permute(*range(k.ndim - 1, -1, -1)), "B": lambda: k.transpose(-2, -1)}
    (letter,) = [letter for letter, line in lines.items() if tuple(line().shape) == (2, 8, 4, 5)]
    return letter


RECALL = (
    Question(
        "d_model = 512 with 8 heads: by what number is each head's score divided?",
        lambda: math.sqrt(512 // 8),
        "each head divides by √d_head, the size of the keys it compares: √64 = 8.",
        "notebook 10, section 5",
        {math.sqrt(512): "the scores were divided by √d_model", 64: "they were divided by d_head itself"},
    ),
    Question(
        "The future's weights set to 0 *after* the softmax: each row of weights then sums to (A) exactly 1, "
        "(B) less than 1?",
        lambda: "B",
        "the weights of the past were computed with the future in the normaliser: what the future took is missing.",
        "notebook 10, section 2",
    ),
    Question(
        "Which swaps only the last two axes of keys of shape `(2, 8, 5, 64)`: (A) `k.T`, (B) `k.transpose(-2, -1)`?",
        _last_two_axes_line,
        "on a batch, `.T` reverses all the axes, (64, 5, 8, 2) here, and PyTorch warns that this use will become "
        "an error; only the last two are to be swapped.",
        "notebook 10, section 12",
    ),
)


def check_recall(answers: object, *, verbose: bool = True) -> CheckResult:
    """The recall questions that open notebook 11: ``answers`` is ``{1: ..., 2: ..., 3: ...}`` (``None`` until
    answered)."""
    return check_answers("recall_11", RECALL, answers, verbose=verbose)
