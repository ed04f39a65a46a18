"""Notebook 02's recall questions, on the notebooks before it: each answer computed with the package where it is a
number or a shape, and each with its reason (:mod:`mhsa_helpers.teaching.recall`)."""

from __future__ import annotations

import torch
from torch import nn

from ...teaching.checking import CheckResult
from ...teaching.recall import Question
from ...teaching.recall import check_recall as check_answers

__all__ = ["RECALL", "check_recall"]


def _projection_line() -> str:
    """The line that projects ``x`` as ``nn.Linear`` does: run each, keep the one that gives the layer's output."""
    layer, x = nn.Linear(4, 2, bias=False), torch.randn(3, 4)
    lines = {"A": lambda: x @ layer.weight, "B": lambda: x @ layer.weight.T, "C": lambda: layer.weight @ x}
    right = []
    for letter, line in lines.items():
        try:
            if torch.allclose(line(), layer(x)):
                right.append(letter)
        except RuntimeError:  # the shapes do not fit
            continue
    (letter,) = right
    return letter


RECALL = (
    Question(
        "The three words of “Money Bank Grows” have embeddings `E` of shape `(3, 4)`, and `W_Q` has shape "
        "`(4, 2)`. What is the shape of `Q = E @ W_Q`?",
        lambda: tuple((torch.zeros(3, 4) @ torch.zeros(4, 2)).shape),
        "each of the 3 words gets one query with W_Q's 2 columns: (3, 4) @ (4, 2) is (3, 2).",
        "notebook 01, step 1",
        {(2, 3): "rows and columns were swapped", (3, 4): "a projection kept the embedding's size"},
    ),
    Question(
        "A query scores the same against each of 3 keys. What weight does the softmax give each key?",
        lambda: float(torch.softmax(torch.zeros(3), dim=0)[0]),
        "equal scores give equal weights, and the weights sum to 1: a third each.",
        "notebook 01, the warm-up and step 4",
        {1.0: "each key kept exp(0) = 1, before the division by the sum"},
    ),
    Question(
        "`layer = nn.Linear(4, 2)` stores `layer.weight` with shape `(2, 4)`. Which line projects `x` `(3, 4)` as "
        "the layer does (bias aside): (A) `x @ layer.weight`, (B) `x @ layer.weight.T`, (C) `layer.weight @ x`?",
        _projection_line,
        "PyTorch stores a layer's weight as (out, in), so the product is x @ weight.T; the other two fail on "
        "these shapes.",
        "notebook 01, paper layout versus PyTorch layout",
    ),
)


def check_recall(answers: object, *, verbose: bool = True) -> CheckResult:
    """The recall questions that open notebook 02: ``answers`` is ``{1: ..., 2: ..., 3: ...}`` (``None`` until
    answered)."""
    return check_answers("recall_02", RECALL, answers, verbose=verbose)
