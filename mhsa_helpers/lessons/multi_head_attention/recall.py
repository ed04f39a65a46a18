"""Notebook 04's recall questions, on the notebooks before it: each answer computed with the package where it is a
number or a shape, and each with its reason (:mod:`mhsa_helpers.teaching.recall`)."""

from __future__ import annotations

import torch

from ... import causal_mask
from ...teaching.checking import CheckResult
from ...teaching.recall import Question
from ...teaching.recall import check_recall as check_answers

__all__ = ["RECALL", "check_recall"]


def _fully_masked_row() -> str:
    """What ``torch.softmax`` gives on a row masked everywhere with -inf, as a letter."""
    row = torch.softmax(torch.full((3,), float("-inf")), dim=0)
    return "B" if bool(row.isnan().all()) else "A" if bool((row == 0).all()) else "C"


RECALL = (
    Question(
        "How many entries of the causal mask of 5 tokens are `True` (the query may look there)?",
        lambda: int(causal_mask(5).sum()),
        "query i sees keys 0 to i, itself included: 1 + 2 + 3 + 4 + 5 = 15.",
        "notebook 03, why a decoder must not see the future",
        {10: "a token could not see itself", 25: "nothing were masked"},
    ),
    Question(
        "A row of scores masked everywhere with −∞: what does `torch.softmax` give there? (A) zeros, (B) NaN, "
        "(C) equal weights",
        _fully_masked_row,
        "its maximum is −∞, and exp(−∞ − (−∞)) is exp(NaN): every weight is NaN.",
        "notebook 03, the NaN trap of a fully masked row",
    ),
    Question(
        "One new query is decoded after 4 cached tokens. How many keys may it see?",
        lambda: int(causal_mask(1, 5).sum()),
        "it sits at position 4 and sees keys 0 to 4: the 4 cached ones and itself.",
        "notebook 03, new queries after cached tokens",
        {4: "the new token could not see itself", 1: "the mask were the first row of the square triangle"},
    ),
)


def check_recall(answers: object, *, verbose: bool = True) -> CheckResult:
    """The recall questions that open notebook 04: ``answers`` is ``{1: ..., 2: ..., 3: ...}`` (``None`` until
    answered)."""
    return check_answers("recall_04", RECALL, answers, verbose=verbose)
