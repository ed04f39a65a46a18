"""Exercise checkers for notebook 08 (attention at scale): one step of the online softmax, the
whole tiled softmax-attention of one row block, expanding key/value heads for grouped-query
attention, and the size of a KV cache. Each names the mistake a wrong answer matches."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from ...heads import repeat_kv
from ...kv_cache_memory import kv_cache_bytes
from ...teaching.checking import Case, CheckResult, Misconception, check_function, random_tensor
from ...tiled_attention import OnlineSoftmaxState, online_softmax_update

__all__ = ["check_expand_kv", "check_kv_cache_bytes", "check_online_attention", "check_online_update"]


# ---------------------------------------------------------------- one online-softmax step


def _reference_update(running_max, normaliser, output, scores, values):
    state = online_softmax_update(OnlineSoftmaxState(running_max, normaliser, output), scores, values)
    return state.running_max, state.normaliser, state.output


def _update_cases() -> list[Case]:
    g = torch.Generator().manual_seed(801)
    cases = []
    for description, old_max, shift in (
        ("the new tile raises the maximum", 0.5, 3.0),
        ("the new tile leaves the maximum", 4.0, 0.0),
        ("scores near -1000", -1000.0, -998.0),
    ):
        running_max = torch.full((3, 1), old_max, dtype=torch.float64) + random_tensor(g, 3, 1, scale=0.1)
        normaliser = 1.0 + random_tensor(g, 3, 1, scale=0.1).abs()
        output = random_tensor(g, 3, 2)
        scores = shift + random_tensor(g, 3, 4)
        values = random_tensor(g, 4, 2)
        cases.append(Case((running_max, normaliser, output, scores, values), description=description))
    return cases


def check_online_update(learner: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    """Exercise: ``learner(running_max, normaliser, output, scores, values)`` folds one tile of keys into
    the online softmax and returns ``(new_max, new_normaliser, new_output)``.

    Shapes: ``running_max``, ``normaliser`` ``(seq_q, 1)``; ``output`` ``(seq_q, d_v)`` (unnormalised);
    ``scores`` ``(seq_q, tile)``; ``values`` ``(tile, d_v)``."""

    def new_max(m, s):
        return torch.maximum(m, s.amax(-1, keepdim=True))

    def no_rescale(m, norm, o, s, v):
        m2 = new_max(m, s)
        w = torch.exp(s - m2)
        return m2, norm + w.sum(-1, keepdim=True), o + w @ v

    def output_only(m, norm, o, s, v):
        m2 = new_max(m, s)
        w, r = torch.exp(s - m2), torch.exp(m - m2)
        return m2, norm + w.sum(-1, keepdim=True), o * r + w @ v

    def normaliser_only(m, norm, o, s, v):
        m2 = new_max(m, s)
        w, r = torch.exp(s - m2), torch.exp(m - m2)
        return m2, norm * r + w.sum(-1, keepdim=True), o + w @ v

    def inverted(m, norm, o, s, v):
        m2 = new_max(m, s)
        w, r = torch.exp(s - m2), torch.exp(m2 - m)
        return m2, norm * r + w.sum(-1, keepdim=True), o * r + w @ v

    misconceptions = [
        Misconception(
            "the running sums are not rescaled when the maximum grows",
            no_rescale,
            "Your old normaliser and output still count each earlier key as exp(score - old max), while the new "
            "tile counts exp(score - new max): mixed units. Multiply both by exp(old max - new max) first.",
        ),
        Misconception(
            "the output is rescaled but not the normaliser",
            output_only,
            "Your output is rescaled to the new maximum but the normaliser is not, so output / normaliser no longer "
            "sums the weights to 1. Both running sums need the factor exp(old max - new max).",
        ),
        Misconception(
            "the normaliser is rescaled but not the output",
            normaliser_only,
            "Your normaliser is rescaled to the new maximum but the output is not: the earlier values keep their old, "
            "too large weights. Both running sums need the factor exp(old max - new max).",
        ),
        Misconception(
            "the rescale factor is upside down",
            inverted,
            "Your factor is exp(new max - old max), which is >= 1: the earlier terms must shrink, by "
            "exp(old max - new max) <= 1, when the maximum grows.",
        ),
    ]
    return check_function(
        "online_update",
        learner,
        _reference_update,
        _update_cases(),
        misconceptions,
        output_names=("new_max", "new_normaliser", "new_output"),
        shortcuts=("online_softmax_update",),
        verbose=verbose,
    )


# ---------------------------------------------------------------- online attention of one block of queries


def _reference_online_attention(scores: torch.Tensor, values: torch.Tensor, tile_size: int) -> torch.Tensor:
    return torch.softmax(scores, dim=-1) @ values


def _online(scores, values, tile_size, *, start_max=-math.inf, rescale=True, normalise=True):
    m = torch.full((scores.shape[0], 1), start_max, dtype=scores.dtype)
    norm = torch.zeros(scores.shape[0], 1, dtype=scores.dtype)
    out = torch.zeros(scores.shape[0], values.shape[1], dtype=scores.dtype)
    for start in range(0, scores.shape[1], tile_size):
        s, v = scores[:, start : start + tile_size], values[start : start + tile_size]
        m2 = torch.maximum(m, s.amax(-1, keepdim=True))
        r = torch.exp(m - m2) if rescale else torch.ones_like(m)
        w = torch.exp(s - m2)
        norm, out, m = norm * r + w.sum(-1, keepdim=True), out * r + w @ v, m2
    return out / norm if normalise else out


def check_online_attention(learner: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    """Exercise: ``learner(scores, values, tile_size)`` returns ``softmax(scores) @ values`` computed
    tile by tile with the online softmax: ``scores (seq_q, seq_k)``, ``values (seq_k, d_v)`` ->
    ``(seq_q, d_v)``, reading ``tile_size`` keys at a time (the last tile may be shorter)."""
    g = torch.Generator().manual_seed(802)
    far_below = random_tensor(g, 3, 7) - 1000.0
    cases = [
        Case((random_tensor(g, 4, 10, scale=3.0), random_tensor(g, 10, 3), 3), description="seq_k=10, tile_size=3"),
        Case((random_tensor(g, 2, 8, scale=3.0), random_tensor(g, 8, 2), 8), description="one tile of 8"),
        Case((random_tensor(g, 3, 5, scale=3.0), random_tensor(g, 5, 2), 1), description="tile_size=1"),
        Case((far_below, random_tensor(g, 7, 2), 2), description="scores near -1000"),
    ]
    misconceptions = [
        Misconception(
            "the running maximum starts at 0 instead of -inf",
            lambda s, v, t: _online(s, v, t, start_max=0.0),
            "Starting at 0 claims a score of 0 was already seen: scores near -1000 then give exp(-1000 - 0) = 0 "
            "for every key, and 0 / 0. The maximum must start at -inf (nothing seen yet).",
        ),
        Misconception(
            "the running sums are not rescaled when the maximum grows",
            lambda s, v, t: _online(s, v, t, rescale=False),
            "Each tile's weights are measured against a different maximum: multiply the normaliser and the output "
            "by exp(old max - new max) before adding the new tile.",
        ),
        Misconception(
            "a softmax per tile, then averaged",
            lambda s, v, t: (
                sum(torch.softmax(s[:, a : a + t], dim=-1) @ v[a : a + t] for a in range(0, s.shape[1], t))
                / math.ceil(s.shape[1] / t)
            ),
            "Each of your tiles was normalised on its own and the results averaged: a key in a small tile then "
            "weighs more than one in a large tile. The softmax of the whole row needs one running maximum and "
            "one normaliser carried across the tiles.",
        ),
        Misconception(
            "the output is not divided by the normaliser at the end",
            lambda s, v, t: _online(s, v, t, normalise=False),
            "The running output is a sum of exp(score - max) * value: divide it by the normaliser once all tiles "
            "are read, so that the weights sum to 1.",
        ),
    ]
    return check_function(
        "online_attention",
        learner,
        _reference_online_attention,
        cases,
        misconceptions,
        shortcuts=("online_softmax", "tiled_attention", "scaled_dot_product_attention"),
        verbose=verbose,
    )


# ---------------------------------------------------------------- expanding key/value heads


def check_expand_kv(learner: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    """Exercise: ``learner(x, groups)`` repeats each key/value head ``groups`` times in a row:
    ``(batch, kv_heads, seq, d_head)`` -> ``(batch, kv_heads * groups, seq, d_head)``, so that query
    head ``h`` reads key/value head ``h // groups``."""
    g = torch.Generator().manual_seed(803)
    cases = [
        Case((random_tensor(g, 2, 2, 5, 3), 4), description="x (2, 2, 5, 3), groups=4"),
        Case((random_tensor(g, 1, 4, 3, 2), 2), description="x (1, 4, 3, 2), groups=2"),
        Case((random_tensor(g, 1, 1, 6, 4), 8), description="one key/value head (multi-query), groups=8"),
    ]
    square = [Case((random_tensor(g, 2, 2, 2, 2), 2), description="every axis 2")]
    misconceptions = [
        Misconception(
            "heads tiled with repeat instead of repeat_interleave",
            lambda x, k: x.repeat(1, k, 1, 1),
            "Your heads come out as 0, 1, 0, 1, ...: that is x.repeat. Query heads 0 and 1 must share key/value "
            "head 0, so each head is repeated in a row, 0, 0, 1, 1: x.repeat_interleave(groups, dim=1).",
        ),
        Misconception(
            "repeated along the wrong axis",
            lambda x, k: x.repeat_interleave(k, dim=2),
            "Your copies went along the sequence axis (dim=2): the cache then has more positions, not more heads. "
            "Repeat along the heads axis, dim=1.",
        ),
        Misconception(
            "repeated along the wrong axis",
            lambda x, k: x.repeat_interleave(k, dim=0),
            "Your copies went along the batch axis (dim=0). Repeat along the heads axis, dim=1.",
        ),
    ]
    return check_function(
        "expand_kv",
        learner,
        lambda x, k: repeat_kv(x, k),
        cases,
        misconceptions,
        square_cases=square,
        shortcuts=("repeat_kv",),
        verbose=verbose,
    )


# ---------------------------------------------------------------- the size of a KV cache


def _reference_bytes(layers, heads, kv_heads, head_dim, tokens, batch, element):
    return kv_cache_bytes(
        num_layers=layers,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        tokens=tokens,
        batch=batch,
        bytes_per_element=element,
    )


def check_kv_cache_bytes(learner: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    """Exercise: ``learner(num_layers, num_heads, num_kv_heads, head_dim, tokens, batch, bytes_per_element)``
    returns the bytes a full KV cache takes (a number)."""
    cases = [
        # 131072 tokens: one token too many is off by a relative 8e-6, so bytes are compared exactly.
        Case((32, 32, 8, 128, 131072, 1, 2), description="Llama-3.1-8B, 131072 tokens (its full context), bfloat16"),
        Case((12, 12, 12, 64, 1024, 4, 4), description="GPT-2 small, 1024 tokens, batch 4, float32"),
        Case((80, 64, 8, 128, 4096, 2, 2), description="Llama-2-70B, 4096 tokens, batch 2, float16"),
    ]
    misconceptions = [
        Misconception(
            "forgot the factor 2 (keys and values)",
            lambda n, h, kv, d, t, b, e: n * kv * d * t * b * e,
            "Your number is half the size: every layer caches the keys *and* the values, so there is a factor 2.",
        ),
        Misconception(
            "counted the query heads instead of the key/value heads",
            lambda n, h, kv, d, t, b, e: 2 * n * h * d * t * b * e,
            "Your number uses num_heads: only the key/value heads are cached, num_kv_heads of them (fewer with "
            "grouped-query attention; the queries are never cached).",
        ),
        Misconception(
            "counted bits, not bytes",
            lambda n, h, kv, d, t, b, e: 2 * n * kv * d * t * b * e * 8,
            "Your number is 8 times too large: bytes_per_element is already in bytes.",
        ),
    ]
    # A whole number of bytes: compared exactly (a numpy integer, or a float like 2.0 * ..., counts as well).
    return check_function(
        "kv_cache_bytes",
        learner,
        _reference_bytes,
        cases,
        misconceptions,
        shortcuts=("kv_cache_bytes",),
        verbose=verbose,
    )
