"""Notebook 10's recall questions, on the notebooks before it: each answer computed with the package where it is a
number or a shape, and each with its reason (:mod:`mhsa_helpers.teaching.recall`)."""

from __future__ import annotations

from ...long_context import alibi_bias
from ...masking import sliding_window_mask
from ...teaching.checking import CheckResult
from ...teaching.recall import Question
from ...teaching.recall import check_recall as check_answers

__all__ = ["RECALL", "check_recall"]


def _reach_of_three_windows() -> int:
    """How far back the last of 24 tokens reads through three layers with windows of 4: the earliest key a path
    of three masks joins it to."""
    window = sliding_window_mask(24, window=4).double()
    joined = (window @ window @ window)[-1] > 0
    return 23 - int(joined.nonzero().min())


RECALL = (
    Question(
        "A sliding window of 4: the last of 10 tokens sees how many keys?",
        lambda: int(sliding_window_mask(10, window=4)[-1].sum()),
        "the window holds the token itself and the 3 before it.",
        "notebook 09, section 2",
        {10: "there were no window", 5: "the window held 4 tokens before the query and the query"},
    ),
    Question(
        "Three layers, each with a window of 4: from at most how many tokens back can information reach the last "
        "token?",
        _reach_of_three_windows,
        "each layer reaches 3 tokens further back: 3 × (4 − 1) = 9.",
        "notebook 09, section 2",
        {12: "each layer reached a whole window further", 3: "stacked layers reached no further than one"},
    ),
    Question(
        "ALiBi, the head whose slope is 1/2: what is added to the score of a key 3 tokens before the query?",
        lambda: float(alibi_bias(8, 4)[0, -1, 0]),
        "the penalty is the slope times the distance, subtracted: −1/2 × 3 = −1.5.",
        "notebook 09, section 4",
        {1.5: "the penalty were added as a bonus"},
    ),
)


def check_recall(answers: object, *, verbose: bool = True) -> CheckResult:
    """The recall questions that open notebook 10: ``answers`` is ``{1: ..., 2: ..., 3: ...}`` (``None`` until
    answered)."""
    return check_answers("recall_10", RECALL, answers, verbose=verbose)
