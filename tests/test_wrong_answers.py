"""A catalogue of wrong solutions that real learners write, fed to every exercise checker.

No checker may accept any of them: a wrong answer reported "correct" is the worst thing a checker can
do. Where the catalogue gives a name, the checker must name that misconception; the others must be
rejected, with a message that helps. Each entry is a small plain function, written the way a learner
would write it. ``test_the_catalogue_is_counted`` prints the counts for the issue note.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
from checker_table import selectable

from mhsa_helpers.lessons.attention_at_scale import check_expand_kv, check_kv_cache_bytes, check_online_attention
from mhsa_helpers.lessons.causal_masking import check_masked_softmax
from mhsa_helpers.lessons.causal_mhsa_with_rope import check_attend_with_cache
from mhsa_helpers.lessons.multi_head_attention import check_multi_head_attention, check_split_heads
from mhsa_helpers.lessons.multi_head_latent_attention.exercises import check_absorbed_scores, check_latent_prediction
from mhsa_helpers.lessons.rotary_position_embeddings import (
    check_apply_rope,
    check_rope_attention,
)
from mhsa_helpers.lessons.scaled_dot_product_attention import check_softmax

INF = float("inf")


@dataclass(frozen=True)
class Wrong:
    checker: Callable
    name: str  # what the learner did
    function: Callable
    named: str | None = None  # the misconception the checker must name (None: any rejection)
    says: tuple[str, ...] = ()  # words the message must contain


def sdpa_weights(q, k, scale=None):
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    return torch.softmax(q @ k.transpose(-2, -1) * scale, dim=-1)


def rotate(x, positions, base, *, pairs="interleaved", integer_exponent=False, exponent_step=2):
    d = x.shape[-1]
    i = torch.arange(d // 2, dtype=torch.float64)
    exponent = (exponent_step * i // d) if integer_exponent else (exponent_step * i / d)
    theta = base**-exponent
    angles = positions.to(torch.float64)[:, None] * theta
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    if pairs == "interleaved":
        even, odd = x[..., 0::2], x[..., 1::2]
        return torch.stack((even * cos - odd * sin, even * sin + odd * cos), -1).flatten(-2)
    even, odd = x[..., 0::2], x[..., 1::2]  # rotated right, but written back as two halves
    return torch.cat((even * cos - odd * sin, even * sin + odd * cos), -1)


def merge(x):
    return x.transpose(-3, -2).flatten(-2)


def split(x, h):
    return x.reshape(*x.shape[:-1], h, x.shape[-1] // h).transpose(-3, -2)


def mha(x, wq, wk, wv, wo, h, *, scale=None, softmax_dim=-1, transpose_o=True, project_out=True):
    q, k, v = (split(x @ w.T, h) for w in (wq, wk, wv))
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    weights = torch.softmax(q @ k.transpose(-2, -1) * scale, dim=softmax_dim)
    out = merge(weights @ v)
    if not project_out:
        return out
    return out @ (wo.T if transpose_o else wo)


CATALOGUE = [
    # ----------------------------------------------------------- 02 softmax
    Wrong(
        check_softmax,
        "subtracts the row minimum",
        lambda x: (
            torch.exp(x - x.amin(-1, keepdim=True)) / torch.exp(x - x.amin(-1, keepdim=True)).sum(-1, keepdim=True)
        ),
        named="subtracted the row's minimum instead of its maximum",
    ),
    Wrong(
        check_softmax,
        "subtracts the row mean",
        lambda x: (
            torch.exp(x - x.mean(-1, keepdim=True)) / torch.exp(x - x.mean(-1, keepdim=True)).sum(-1, keepdim=True)
        ),
        named="subtracted the row's mean instead of its maximum",
    ),
    Wrong(
        check_softmax,
        "no max subtraction",
        lambda x: torch.exp(x) / torch.exp(x).sum(-1, keepdim=True),
        "did not subtract the row's max",
    ),
    Wrong(
        check_softmax,
        "normalises by the sum, no exp",
        lambda x: x / x.sum(-1, keepdim=True),
        named="normalised by the sum without exp",
    ),
    Wrong(
        check_softmax,
        "max without keepdim",
        lambda x: torch.exp(x - x.max(-1).values) / torch.exp(x - x.max(-1).values).sum(-1, keepdim=True),
        named="took the max without keepdim=True",
    ),
    Wrong(check_softmax, "softmax over dim 0", lambda x: torch.softmax(x, dim=0)),
    Wrong(check_softmax, "softmax over dim -2", lambda x: torch.softmax(x, dim=-2)),
    Wrong(
        check_softmax,
        "global max over the whole tensor",
        lambda x: torch.exp(x - x.max()) / torch.exp(x - x.max()).sum(-1, keepdim=True),
    ),
    # ----------------------------------------------------------- 03 masked softmax (more: test_build_early_*.py)
    Wrong(
        check_masked_softmax,
        "no max subtraction",
        lambda s, m: (torch.exp(s) * m) / (torch.exp(s) * m).sum(-1, keepdim=True).clamp(min=1e-300),
    ),
    Wrong(
        check_masked_softmax,
        "adds the boolean mask to the scores",
        lambda s, m: torch.softmax(s + m, -1),
        named="added the boolean mask to the scores",
    ),
    Wrong(
        check_masked_softmax,
        "(1 - mask) * -inf",
        lambda s, m: torch.nan_to_num(torch.softmax(s + (1 - m.to(s.dtype)) * -INF, -1)),
    ),
    Wrong(check_masked_softmax, "zeroes after the softmax", lambda s, m: torch.softmax(s, -1) * m),
    Wrong(
        check_masked_softmax, "inverted mask", lambda s, m: torch.nan_to_num(torch.softmax(s.masked_fill(m, -INF), -1))
    ),
    Wrong(
        check_masked_softmax,
        "adds -10000",
        lambda s, m: torch.softmax(s - 1e4 * (~m), -1) * m.any(-1, keepdim=True),
        named="blocked scores pushed down by adding -10000 instead of -inf",
    ),
    Wrong(check_masked_softmax, "fills with 0", lambda s, m: torch.softmax(s.masked_fill(~m, 0.0), -1)),
    # ----------------------------------------------------------- 04 heads
    Wrong(
        check_split_heads,
        "hard-coded transpose(1, 2)",
        lambda x, h: x.reshape(*x.shape[:-1], h, x.shape[-1] // h).transpose(1, 2),
        named="hard-coded transpose(1, 2)",
    ),
    Wrong(
        check_split_heads,
        "view without transpose",
        lambda x, h: x.reshape(*x.shape[:-2], h, x.shape[-2], x.shape[-1] // h),
    ),
    Wrong(
        check_split_heads,
        "torch.split instead of chunk",
        lambda x, h: torch.stack(torch.split(x, h, dim=-1), dim=-3),
        named="heads take every h-th feature",
    ),
    Wrong(
        check_split_heads,
        "view as (d_head, heads), then transpose(-3, -2)",
        lambda x, h: x.reshape(*x.shape[:-1], x.shape[-1] // h, h).transpose(-3, -2),
        named="heads take every h-th feature",
    ),
    Wrong(
        check_multi_head_attention,
        "W_O not transposed",
        lambda x, wq, wk, wv, wo, h: mha(x, wq, wk, wv, wo, h, transpose_o=False),
        named="only W_O applied without its transpose",
    ),
    Wrong(
        check_multi_head_attention,
        "softmax over the heads axis",
        lambda x, wq, wk, wv, wo, h: mha(x, wq, wk, wv, wo, h, softmax_dim=-3),
        named="softmax over the heads axis",
    ),
    Wrong(
        check_multi_head_attention,
        "missing output projection",
        lambda x, wq, wk, wv, wo, h: mha(x, wq, wk, wv, wo, h, project_out=False),
    ),
    Wrong(
        check_multi_head_attention,
        "scaled by sqrt(d_model)",
        lambda x, wq, wk, wv, wo, h: mha(x, wq, wk, wv, wo, h, scale=1 / math.sqrt(x.shape[-1])),
        named="scaled by √d_model instead of √d_head",
    ),
    # ----------------------------------------------------------- 05 RoPE
    Wrong(
        check_apply_rope,
        "exponent i/d instead of 2i/d",
        lambda x, p, base: rotate(x, p, base, exponent_step=1),
        named="frequencies with exponent -i/d",
    ),
    Wrong(
        check_apply_rope,
        "positions shifted by one",
        lambda x, p, base: rotate(x, p + 1, base),
        named="positions shifted by one",
    ),
    Wrong(
        check_apply_rope,
        "cat instead of interleaving the pairs",
        lambda x, p, base: rotate(x, p, base, pairs="cat"),
        named="rotated pairs written back as two halves (cat instead of interleaving)",
    ),
    Wrong(check_apply_rope, "integer // in the exponent", lambda x, p, base: rotate(x, p, base, integer_exponent=True)),
    Wrong(
        check_rope_attention,
        "positions ignored",
        lambda q, k, v, p, base: (
            sdpa_weights(rotate(q, torch.arange(q.shape[-2]), base), rotate(k, torch.arange(k.shape[-2]), base)) @ v
        ),
        named="positions ignored (0 .. seq-1 used)",
    ),
    Wrong(
        check_rope_attention,
        "RoPE on the values too",
        lambda q, k, v, p, base: sdpa_weights(rotate(q, p, base), rotate(k, p, base)) @ rotate(v, p, base),
    ),
    Wrong(check_rope_attention, "no RoPE at all", lambda q, k, v, p, base: sdpa_weights(q, k) @ v),
    # ----------------------------------------------------------- 06 decoding with a cache
    # (the learner's modules and the predictions: tests/lessons/NN_<name>/test_<name>_module.py)
    Wrong(
        check_attend_with_cache,
        "positions restart at 0 (the handed-out bug: still the original)",
        lambda q, k, v, ck, cv, rope: _cached_step(q, k, v, ck, cv, rope, first=0),
    ),
    Wrong(
        check_attend_with_cache,
        "is_causal=True with a cache",
        lambda q, k, v, ck, cv, rope: _cached_step(q, k, v, ck, cv, rope, top_left=True),
        named="mask aligned to the first key",
    ),
    # ----------------------------------------------------------- 08
    Wrong(
        check_expand_kv,
        "repeat instead of repeat_interleave",
        lambda x, g: x.repeat(1, g, 1, 1),
        "heads tiled with repeat instead of repeat_interleave",
    ),
    Wrong(
        check_online_attention,
        "softmax per tile, averaged",
        lambda s, v, t: (
            sum(torch.softmax(s[:, a : a + t], -1) @ v[a : a + t] for a in range(0, s.shape[1], t))
            / math.ceil(s.shape[1] / t)
        ),
        named="a softmax per tile, then averaged",
    ),
    Wrong(
        check_kv_cache_bytes,
        "query heads",
        lambda n, h, kv, d, t, b, e: 2 * n * h * d * t * b * e,
        "counted the query heads instead of the key/value heads",
    ),
    # ----------------------------------------------------------- 13
    Wrong(
        check_latent_prediction,
        "a latent for keys, one for values",
        lambda: 2 * 96 + 32,
        "a latent for the keys and another for the values",
    ),
    Wrong(check_latent_prediction, "a rotated key per head", lambda: 8 * 32 + 96, "a rotated key per head"),
    Wrong(
        check_absorbed_scores,
        "keys rebuilt, then q @ k^T",
        lambda q, w_uk, c_kv: q @ (c_kv.unsqueeze(1) @ w_uk.transpose(-2, -1)).transpose(-2, -1),
        "every head's keys built from the latents",
    ),
    Wrong(
        check_absorbed_scores,
        "scaled as attention scales",
        lambda q, w_uk, c_kv: (q @ w_uk) @ c_kv.unsqueeze(1).transpose(-2, -1) / math.sqrt(q.shape[-1]),
        "scaled by sqrt(d_head)",
    ),
]


def _cached_step(q_new, k_new, v_new, cached_k, cached_v, rope, *, first=None, top_left=False):
    past, new = cached_k.shape[-2], q_new.shape[-2]
    positions = torch.arange(past if first is None else first, (past if first is None else first) + new)
    q, k = rope(q_new, positions), rope(k_new, positions)
    keys, values = torch.cat((cached_k, k), dim=-2), torch.cat((cached_v, v_new), dim=-2)
    allowed = torch.ones(new, past + new, dtype=torch.bool).tril(0 if top_left else past)  # top-left: is_causal=True
    scores = q @ keys.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return torch.softmax(scores.masked_fill(~allowed, -INF), dim=-1) @ values


@pytest.mark.parametrize("wrong", CATALOGUE, ids=lambda w: selectable(f"{w.checker.__name__}: {w.name}"))
def test_no_checker_accepts_a_wrong_answer(wrong):
    result = wrong.checker(wrong.function, verbose=False)
    assert result.status != "correct", f"accepted although wrong: {wrong.name}"
    assert result.status != "not_attempted"
    if wrong.named is not None:
        assert result.misconception == wrong.named, result.message


def verdict_counts(catalogue) -> dict[str, int]:
    """How many wrong answers of ``catalogue`` (each with ``.checker`` and ``.function``) the checkers
    named, rejected without a name, or accepted."""
    counts = {"named": 0, "rejected generically": 0, "accepted": 0}
    for wrong in catalogue:
        status = wrong.checker(wrong.function, verbose=False).status
        kind = {"correct": "accepted", "misconception": "named"}.get(status, "rejected generically")
        counts[kind] += 1
    return counts


def test_the_catalogue_is_counted(capsys):
    counts = verdict_counts(CATALOGUE)
    with capsys.disabled():
        print(f"\ncatalogue of {len(CATALOGUE)} wrong answers: {counts}")
    assert counts["accepted"] == 0
