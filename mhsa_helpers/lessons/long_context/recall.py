"""Notebook 09's recall questions, on the notebooks before it: each answer computed with the package where it is a
number or a shape, and each with its reason (:mod:`mhsa_helpers.teaching.recall`)."""

from __future__ import annotations

import math

from ...kv_cache_memory import kv_cache_bytes
from ...teaching.checking import CheckResult
from ...teaching.recall import Question
from ...teaching.recall import check_recall as check_answers

__all__ = ["RECALL", "check_recall"]

RECALL = (
    Question(
        "32 query heads share 8 key/value heads (grouped-query attention). How many query heads read each "
        "key/value head?",
        lambda: 32 // 8,
        "the query heads are split into 8 groups of 32 / 8 = 4, each group reading one key/value head.",
        "notebook 08, section 4",
    ),
    Question(
        "The KV cache of one token in one layer with 8 key/value heads of size 128, in bfloat16 (2 bytes a "
        "number): how many bytes?",
        lambda: kv_cache_bytes(num_layers=1, num_kv_heads=8, head_dim=128, tokens=1, bytes_per_element=2),
        "a key and a value per key/value head: 2 × 8 × 128 numbers of 2 bytes, 4,096 bytes.",
        "notebook 08, section 5",
        {2048: "only the keys were counted", 16_384: "the 32 query heads were counted instead of the 8"},
    ),
    Question(
        "In the online softmax the running maximum grows from 2 to 5. By what factor are the running sums rescaled?",
        lambda: math.exp(2 - 5),
        "the sums so far count each key as exp(score − 2); against the new maximum each counts as exp(score − 5), "
        "so they are multiplied by exp(2 − 5) ≈ 0.0498.",
        "notebook 08, section 2",
        {math.exp(5 - 2): "the factor were upside down", 1.0: "nothing were rescaled"},
    ),
)


def check_recall(answers: object, *, verbose: bool = True) -> CheckResult:
    """The recall questions that open notebook 09: ``answers`` is ``{1: ..., 2: ..., 3: ...}`` (``None`` until
    answered)."""
    return check_answers("recall_09", RECALL, answers, verbose=verbose)
