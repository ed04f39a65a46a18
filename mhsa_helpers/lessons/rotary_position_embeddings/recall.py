"""Notebook 05's recall questions, on the notebooks before it: each answer computed with the package where it is a
number or a shape, and each with its reason (:mod:`mhsa_helpers.teaching.recall`)."""

from __future__ import annotations

import torch

from ... import MultiHeadSelfAttention, merge_heads, split_heads
from ...teaching.checking import CheckResult
from ...teaching.recall import Question
from ...teaching.recall import check_recall as check_answers

__all__ = ["RECALL", "check_recall"]


def _merge_line() -> str:
    """The line that merges heads as the package does: run each, keep the one that gives its result."""
    heads = torch.randn(2, 4, 3, 5)  # (batch, heads, seq, d_head)
    lines = {"A": heads.reshape(2, 3, 20), "B": heads.transpose(1, 2).reshape(2, 3, 20)}
    (letter,) = [letter for letter, merged in lines.items() if torch.equal(merged, merge_heads(heads))]
    return letter


RECALL = (
    Question(
        "`x` of shape `(2, 10, 512)` is split into 8 heads. What is the shape of `mh.split_heads(x, 8)`?",
        lambda: tuple(split_heads(torch.zeros(2, 10, 512), 8).shape),
        "(batch, heads, seq, d_head): each of the 8 heads gets 512 / 8 = 64 features of each of the 10 tokens.",
        "notebook 04, section 4",
        {(2, 10, 8, 64): "the view were not followed by the transpose", (2, 8, 10, 512): "each head kept all 512"},
    ),
    Question(
        "A 512-wide layer with 8 heads: how many parameters do W_Q, W_K, W_V and W_O hold together, without biases?",
        lambda: sum(p.numel() for p in MultiHeadSelfAttention(512, 8, qkv_bias=False, out_bias=False).parameters()),
        "four 512 × 512 matrices, 1,048,576 numbers: the heads are slices of the same matrices and add nothing.",
        "notebook 04, section 7",
        {8_388_608: "the count were multiplied by the number of heads", 131_072: "each matrix were 512 × 64"},
    ),
    Question(
        "Heads `h` of shape `(b, heads, n, d_head)` are merged back into `(b, n, d_model)`. Which line does it: "
        "(A) `h.reshape(b, n, d_model)`, (B) `h.transpose(1, 2).reshape(b, n, d_model)`?",
        _merge_line,
        "the heads axis must first go back behind the positions; reshaping at once mixes the positions.",
        "notebook 04, section 4",
    ),
)


def check_recall(answers: object, *, verbose: bool = True) -> CheckResult:
    """The recall questions that open notebook 05: ``answers`` is ``{1: ..., 2: ..., 3: ...}`` (``None`` until
    answered)."""
    return check_answers("recall_05", RECALL, answers, verbose=verbose)
