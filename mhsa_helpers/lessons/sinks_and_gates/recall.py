"""Notebook 12's recall questions, on the notebooks before it: each answer computed with the package where it is a
number, and each with its reason (:mod:`mhsa_helpers.teaching.recall`)."""

from __future__ import annotations

import math

import torch

from ...softmax import softmax
from ...teaching.checking import CheckResult
from ...teaching.recall import Question
from ...teaching.recall import check_recall as check_answers

__all__ = ["RECALL", "check_recall"]

RECALL = (
    Question(
        "One row of scores is (0, 0, ln 2). What weight does the softmax give the third key?",
        lambda: float(softmax(torch.tensor([0.0, 0.0, math.log(2.0)]))[2]),
        "the exponentials are 1, 1 and 2, so the third key gets 2 / (1 + 1 + 2) = 0.5: the weights always sum to 1.",
        "notebook 02, section “The numerically stable softmax”",
        {1 / 3: "every key got the same weight", math.log(2.0): "the score itself were the weight"},
    ),
    Question(
        "In notebook 07's trained model, a head with nothing to do at a query puts its weight on: (A) the token "
        "before the query, (B) the first token, BOS, (C) the query itself?",
        lambda: "B",
        "the softmax must put its weight somewhere; BOS carries nothing a head could copy by mistake, so idle heads "
        "park there: an attention sink.",
        "notebook 07, section 11",
    ),
    Question(
        "Notebook 09 gave its sliding window a sink, the first token kept. Without it, the loss on the "
        "unpredictable tokens: (A) rises, (B) falls?",
        lambda: "A",
        "the heads that park on the first token lose their parking place once it leaves the window: their weight "
        "lands on real tokens and adds noise.",
        "notebook 09, section 3",
    ),
)


def check_recall(answers: object, *, verbose: bool = True) -> CheckResult:
    """The recall questions that open notebook 12: ``answers`` is ``{1: ..., 2: ..., 3: ...}`` (``None`` until
    answered)."""
    return check_answers("recall_12", RECALL, answers, verbose=verbose)
