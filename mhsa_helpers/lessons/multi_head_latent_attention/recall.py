"""Notebook 13's recall questions, on the notebooks before it: each answer computed with the package where it is a
number, a shape or a fact, and each with its reason (:mod:`mhsa_helpers.teaching.recall`)."""

from __future__ import annotations

import torch

from ...heads import split_heads
from ...kv_cache_memory import kv_cache_bytes
from ...rope import RotaryEmbedding, apply_rotary
from ...teaching.checking import CheckResult
from ...teaching.recall import Question
from ...teaching.recall import check_recall as check_answers

__all__ = ["RECALL", "check_recall"]


def _gqa_ratio() -> int:
    """MHA's cache over GQA's for 32 query heads and 8 key/value heads of 128 (any layers, tokens and dtype)."""
    mha = kv_cache_bytes(num_layers=1, num_kv_heads=32, head_dim=128, tokens=1)
    gqa = kv_cache_bytes(num_layers=1, num_kv_heads=8, head_dim=128, tokens=1)
    return mha // gqa


def _same_score_100_positions_later() -> bool:
    """One query and one key, rotated at positions (5, 2) and at (105, 102): the same score?"""
    generator = torch.Generator().manual_seed(0)
    q, k = (
        torch.randn(1, 8, generator=generator, dtype=torch.float64),
        torch.randn(1, 8, generator=generator, dtype=torch.float64),
    )
    rope = RotaryEmbedding(8, 128)

    def score(query_at: int, key_at: int) -> torch.Tensor:
        rotated_q = apply_rotary(q, *rope.angles_at(query_at, 1), rope.convention)
        rotated_k = apply_rotary(k, *rope.angles_at(key_at, 1), rope.convention)
        return (rotated_q * rotated_k).sum()

    return bool(torch.allclose(score(5, 2), score(105, 102)))


RECALL = (
    Question(
        "A model has 32 query heads and 8 key/value heads of 128 numbers each. Its KV cache is how many times "
        "smaller than that of multi-head attention with the same 32 heads?",
        _gqa_ratio,
        "only key/value heads are cached, and each of the 8 serves 4 query heads: 32 / 8 = 4 times fewer keys and "
        "values per token.",
        "notebook 08, sections 4 and 5",
        {8: "the number of key/value heads were the ratio", 0.25: "the ratio were taken the other way round"},
    ),
    Question(
        "With RoPE, a query at position 5 and a key at position 2 get a score. Moved to positions 105 and 102 (the "
        "same vectors), do they get the same score? True or False?",
        _same_score_100_positions_later,
        "the query is turned by angles of 105 and the key by angles of 102: their score depends on the difference "
        "of the angles only, the same 3 positions apart.",
        "notebook 05, section 6",
    ),
    Question(
        "x has shape (2, 10, 64): batch 2, 10 tokens, d_model 64. What shape does split_heads(x, 8) return?",
        lambda: tuple(split_heads(torch.zeros(2, 10, 64), 8).shape),
        "the 64 features are cut into 8 heads of 8, and the heads are moved before the tokens: (batch, heads, seq, "
        "d_head), so that each head attends over its own tokens.",
        "notebook 04, section 4",
        {
            (2, 10, 8, 8): "the features were cut into heads without moving the heads before the tokens",
            (2, 8, 10, 64): "each head kept all of d_model",
        },
    ),
)


def check_recall(answers: object, *, verbose: bool = True) -> CheckResult:
    """The recall questions that open notebook 13: ``answers`` is ``{1: ..., 2: ..., 3: ...}`` (``None`` until
    answered)."""
    return check_answers("recall_13", RECALL, answers, verbose=verbose)
