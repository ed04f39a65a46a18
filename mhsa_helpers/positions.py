"""Absolute position embeddings: a vector per position, added to the token embeddings.

Taught in notebook 05, section 1 ("Before RoPE: absolute position embeddings"), as the idea RoPE
improves on. The original Transformer (Vaswani et al. 2017) adds a fixed table,

    PE[pos, 2i]     = sin(pos / base^(2i/d_model))
    PE[pos, 2i + 1] = cos(pos / base^(2i/d_model)),

and GPT-2 adds a learned one — an ``nn.Embedding(max_seq_len, d_model)`` trained like the
token embeddings, which knows nothing beyond ``max_seq_len``. Either way the position is mixed
into the content before ``W_Q`` and ``W_K``, so a score depends on both absolute positions; RoPE
rotates the queries and keys instead, so a score depends on their distance only.
"""

from __future__ import annotations

import torch

from .checks import expect_int, expect_number
from .rope import rope_frequencies

__all__ = ["sinusoidal_positions"]


def sinusoidal_positions(seq_len: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """The original Transformer's position table, shape ``(seq_len, d_model)``, float32: row ``pos``
    holds ``sin(pos·ω_i)`` in feature ``2i`` and ``cos(pos·ω_i)`` in feature ``2i + 1``, with
    ``ω_i = base^(-2i/d_model)`` — the frequencies RoPE uses too. Computed in float64."""
    expect_int("seq_len", seq_len)
    if expect_int("d_model", d_model) % 2:
        raise ValueError(f"d_model must be even (positions fill sine/cosine pairs of features), got d_model={d_model}")
    expect_number("base", base, 1.0, open_low=True, why=" (10000 in the original Transformer)")
    positions = torch.arange(seq_len, dtype=torch.float64)[:, None]
    # The frequencies are exactly RoPE's theta_i for a head of width d_model.
    omegas = rope_frequencies(d_model, float(base), dtype=torch.float64)
    angles = positions * omegas  # (seq_len, d_model / 2)
    table = torch.empty(seq_len, d_model, dtype=torch.float64)
    table[:, 0::2], table[:, 1::2] = angles.sin(), angles.cos()
    return table.float()
