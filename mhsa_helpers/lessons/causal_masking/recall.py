"""Notebook 03's recall questions, on the notebooks before it: each answer computed with the package where it is a
number or a shape, and each with its reason (:mod:`mhsa_helpers.teaching.recall`)."""

from __future__ import annotations

import math

import torch

from ... import scaled_dot_product_attention
from ...teaching.checking import CheckResult
from ...teaching.recall import Question
from ...teaching.recall import check_recall as check_answers

__all__ = ["RECALL", "check_recall"]

RECALL = (
    Question(
        "Keys of size d_k = 64: by what number does scaled dot-product attention divide the scores?",
        lambda: math.sqrt(64),
        "√d_k = 8 brings the scores' spread back to about 1, whatever the size of the keys.",
        "notebook 02, why divide by √d_k",
        {64: "the scores were divided by d_k itself"},
    ),
    Question(
        "Cross-attention: queries `q` of shape `(2, 5, 16)`, keys and values `(2, 7, 16)`. What shape are the "
        "attention weights?",
        lambda: tuple(
            scaled_dot_product_attention(
                torch.zeros(2, 5, 16), torch.zeros(2, 7, 16), torch.zeros(2, 7, 16), need_weights=True
            )[1].shape
        ),
        "one row per query and one column per key, in each of the 2 batch items: (2, 5, 7).",
        "notebook 02, scaled dot-product attention from scratch",
        {(2, 7, 5): "the weights had one row per key", (2, 5, 16): "that is the output's shape, not the weights'"},
    ),
    Question(
        "The stable softmax of the scores `[1000, 1000]`: what is the first weight?",
        lambda: float(torch.softmax(torch.tensor([1000.0, 1000.0]), dim=0)[0]),
        "subtracting the row's maximum leaves [0, 0], and exp(0) / (exp(0) + exp(0)) is 1/2.",
        "notebook 02, the numerically stable softmax",
    ),
)


def check_recall(answers: object, *, verbose: bool = True) -> CheckResult:
    """The recall questions that open notebook 03: ``answers`` is ``{1: ..., 2: ..., 3: ...}`` (``None`` until
    answered)."""
    return check_answers("recall_03", RECALL, answers, verbose=verbose)
