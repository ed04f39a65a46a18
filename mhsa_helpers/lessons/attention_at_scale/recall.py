"""Notebook 08's recall questions, on the notebooks before it: each answer computed with the package where it is a
number or a shape, and each with its reason (:mod:`mhsa_helpers.teaching.recall`)."""

from __future__ import annotations

from ...teaching.checking import CheckResult
from ...teaching.recall import Question
from ...teaching.recall import check_recall as check_answers

__all__ = ["RECALL", "check_recall"]

RECALL = (
    Question(
        "Ten random tokens, then the same ten again (positions 0–9 and 10–19). An induction head at position 13 "
        "puts its weight on which position?",
        lambda: 13 - 10 + 1,
        "position 13 holds the token of position 3; the induction head looks at what followed it there, "
        "position 4, to predict the next token.",
        "notebook 07, section 1",
        {3: "the head looked at the earlier copy of the token itself", 12: "it were a previous-token head"},
    ),
    Question(
        "At least how many attention layers does the induction circuit need?",
        lambda: 2,
        "a previous-token head writes into each position what came before it; a head of a later layer reads that "
        "to find the earlier occurrence.",
        "notebook 07, section 1",
    ),
    Question(
        "Zeroing the induction head of the trained model makes the loss on the second copy (A) rise, (B) fall, "
        "(C) stay the same?",
        lambda: "A",
        "the head is what copies the next token of the first copy: without it the second copy is as hard as the first.",
        "notebook 07, section 9",
    ),
)


def check_recall(answers: object, *, verbose: bool = True) -> CheckResult:
    """The recall questions that open notebook 08: ``answers`` is ``{1: ..., 2: ..., 3: ...}`` (``None`` until
    answered)."""
    return check_answers("recall_08", RECALL, answers, verbose=verbose)
