"""Notebook 07's recall questions, on the notebooks before it: each answer computed with the package where it is a
number or a shape, and each with its reason (:mod:`mhsa_helpers.teaching.recall`)."""

from __future__ import annotations

import torch

from ... import KVCache, causal_mask
from ...teaching.checking import CheckResult
from ...teaching.recall import Question
from ...teaching.recall import check_recall as check_answers

__all__ = ["RECALL", "check_recall"]


def _cached_length() -> int:
    """The positions of new tokens start at the cache's length: here, after 4 cached tokens."""
    cache = KVCache()
    cache.append(torch.zeros(1, 1, 4, 2), torch.zeros(1, 1, 4, 2))
    return cache.length


RECALL = (
    Question(
        "A cache holds 4 tokens and 3 new tokens are decoded in one call. What shape is the causal mask?",
        lambda: tuple(causal_mask(3, 7).shape),
        "one row per new token and one column per key, the 4 cached and the 3 new: (3, 7).",
        "notebook 06, section 4",
        {(3, 3): "the mask covered only the new tokens", (7, 7): "every token were recomputed"},
    ),
    Question(
        "At which position is the first of those 3 new tokens rotated by RoPE?",
        _cached_length,
        "the new tokens continue the sequence after the 4 cached ones, at positions 4, 5 and 6.",
        "notebook 06, section 4",
        {0: "the positions restarted at 0 at each call"},
    ),
    Question(
        "Does the cache store the keys (A) before RoPE or (B) after RoPE?",
        lambda: "B",
        "each key is rotated once, at its own position, when it is appended; the cache never rotates again.",
        "notebook 06, section 4",
    ),
)


def check_recall(answers: object, *, verbose: bool = True) -> CheckResult:
    """The recall questions that open notebook 07: ``answers`` is ``{1: ..., 2: ..., 3: ...}`` (``None`` until
    answered)."""
    return check_answers("recall_07", RECALL, answers, verbose=verbose)
