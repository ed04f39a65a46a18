"""The base of the heads and MHSA explorers: the sentence they both draw, its inputs, the seeded
:class:`~mhsa_helpers.MultiHeadSelfAttention` they both split into heads, the layout of their grid of
heads and the checks of their settings.

Notebook 04's explorer (:func:`~mhsa_helpers.lessons.multi_head_attention.heads_explorer`) and notebook 06's
(:func:`~mhsa_helpers.lessons.causal_mhsa_with_rope.mhsa_explorer`) use it, so that both draw the same
sentence through the same projections. The constants below let a notebook rebuild them.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
import torch

from ..checks import expect_int
from ..examples import TELESCOPE_SENTENCE, sentence_embeddings
from ..mha import MultiHeadSelfAttention
from ..rope import RotaryEmbedding
from .explorer import divisors, seeded

__all__ = [
    "HEADS_SENTENCE",
    "INPUT_SCALE",
    "MAX_HEADS_PER_ROW",
    "MODEL_SEED",
    "expect_d_model",
    "expect_num_heads",
    "heads_columns",
    "heads_figsize",
    "heads_inputs",
    "heads_rows",
    "seeded_module",
]

#: ``torch.manual_seed`` right before building the explorers' :class:`MultiHeadSelfAttention`.
MODEL_SEED = 0
#: Words fed to the heads and MHSA explorers.
HEADS_SENTENCE = TELESCOPE_SENTENCE
#: Their inputs are ``INPUT_SCALE * sentence_embeddings(HEADS_SENTENCE, d_model, seed=MODEL_SEED)``:
#: a freshly initialised module's small weights give almost uniform attention on unit-size
#: inputs, and larger inputs make the heads' differences visible.
INPUT_SCALE = 3.0


def heads_inputs(d_model: int) -> tuple[tuple[str, ...], torch.Tensor]:
    """``(tokens, inputs (8, d_model))`` of the heads and MHSA explorers."""
    tokens, embeddings = sentence_embeddings(HEADS_SENTENCE, d_model, seed=MODEL_SEED)
    return tokens, INPUT_SCALE * embeddings


#: Heads per row of a head grid: panels stay wide enough for their token labels.
MAX_HEADS_PER_ROW = 4


def heads_columns(heads: int) -> int:
    """Columns of the head grid: at most :data:`MAX_HEADS_PER_ROW` heads per row, rows as even as possible."""
    rows = math.ceil(heads / MAX_HEADS_PER_ROW)
    return math.ceil(heads / rows)


def heads_rows(heads: int) -> int:
    """Rows of the head grid (see :func:`heads_columns`)."""
    return math.ceil(heads / heads_columns(heads))


def heads_figsize(figsize: tuple[float, float], heads: int) -> tuple[float, float]:
    """An explorer's ``figsize`` grown to fit ``heads`` panels: taller by rows of heads, instead of
    shrinking every panel (the heads and MHSA explorers share it)."""
    return figsize[0], max(figsize[1], 1.2 + 1.6 * heads_rows(heads))


@functools.lru_cache(maxsize=64)
def _cached_module(
    d_model: int, num_heads: int, rope: tuple[float, int] | None, options: tuple[tuple[str, Any], ...]
) -> MultiHeadSelfAttention:
    rotary = None if rope is None else RotaryEmbedding(d_model // num_heads, max_seq_len=rope[1], base=rope[0])
    with seeded(MODEL_SEED):
        module = MultiHeadSelfAttention(d_model, num_heads, rope=rotary, **dict(options))
    return module.eval().requires_grad_(False)


def seeded_module(
    d_model: int, num_heads: int, *, rope_base: float | None = None, rope_len: int = 2048, **options: Any
) -> MultiHeadSelfAttention:
    """``MultiHeadSelfAttention(d_model, num_heads, **options)`` right after ``torch.manual_seed(MODEL_SEED)``,
    in eval mode, rotating with a ``RotaryEmbedding(d_head, rope_len, rope_base)`` unless ``rope_base`` is
    ``None``. Its parameters do not depend on ``num_heads``, causal or RoPE, so every
    configuration splits the same projections differently."""
    rope = None if rope_base is None else (rope_base, rope_len)
    return _cached_module(d_model, num_heads, rope, tuple(sorted(options.items())))


def expect_num_heads(name: str, num_heads: object, d_model: int, *, rope: bool = False) -> int:
    """``num_heads`` as an int that divides ``d_model`` (and, with ``rope``, leaves an even ``d_head``)."""
    options = divisors(d_model)
    choices = ", ".join(map(str, options))
    if isinstance(num_heads, bool) or not isinstance(num_heads, (int, np.integer)):
        raise TypeError(
            f"{name} must be an int that divides d_model={d_model} (choose from {choices}), "
            f"got {type(num_heads).__name__} {num_heads!r}"
        )
    if num_heads not in options:
        raise ValueError(f"{name} must divide d_model={d_model} (choose from {choices}), got {name}={num_heads!r}")
    if rope and (d_model // num_heads) % 2:
        raise ValueError(
            f"RoPE rotates pairs of features, so d_head = d_model / num_heads must be even: "
            f"{name}={num_heads} gives d_head={d_model // num_heads}"
        )
    return int(num_heads)


def expect_d_model(d_model: object) -> int:
    """``d_model`` of the heads and MHSA explorers: an int in [1, 64]."""
    return expect_int("d_model", d_model, 1, 64)
