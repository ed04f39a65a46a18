"""Notebook 06's recall questions, on the notebooks before it: each answer computed with the package where it is a
number or a shape, and each with its reason (:mod:`mhsa_helpers.teaching.recall`)."""

from __future__ import annotations

import torch

from ... import RotaryEmbedding, rope_frequencies
from ...teaching.checking import CheckResult
from ...teaching.recall import Question
from ...teaching.recall import check_recall as check_answers

__all__ = ["RECALL", "check_recall"]


def _same_score_two_positions_on() -> bool:
    """Whether a rotated query at 7 and key at 5 score as the same vectors at 3 and 1."""
    rope, q, k = RotaryEmbedding(d_head=8, max_seq_len=16), torch.randn(1, 8), torch.randn(1, 8)

    def score(m: int, n: int) -> torch.Tensor:
        return (rope(q, torch.tensor([m])) * rope(k, torch.tensor([n]))).sum()

    return bool(torch.allclose(score(7, 5), score(3, 1), atol=1e-5))


RECALL = (
    Question(
        "RoPE on heads of size d_head = 8: how many pairs of dimensions are rotated, each at its own frequency?",
        lambda: len(rope_frequencies(8)),
        "the dimensions are rotated in pairs: 8 / 2 = 4, with 4 frequencies.",
        "notebook 05, section 3",
        {8: "each dimension were rotated alone"},
    ),
    Question(
        "With RoPE, a query at position 7 and a key at position 5 score the same as the same two vectors at "
        "positions 3 and 1. True or False?",
        _same_score_two_positions_on,
        "a rotated score depends only on the distance between the two positions, 2 in both cases.",
        "notebook 05, section 6",
    ),
    Question(
        "Which does RoPE rotate: (A) the queries, keys and values, (B) the queries and keys, (C) only the queries?",
        lambda: "B",
        "only the scores need the positions, and a score is a query times a key; the values are left as they are.",
        "notebook 05, section 5",
    ),
)


def check_recall(answers: object, *, verbose: bool = True) -> CheckResult:
    """The recall questions that open notebook 06: ``answers`` is ``{1: ..., 2: ..., 3: ...}`` (``None`` until
    answered)."""
    return check_answers("recall_06", RECALL, answers, verbose=verbose)
