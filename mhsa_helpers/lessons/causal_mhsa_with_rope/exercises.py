"""Checkers for notebook 06: decoding with a cache, and the learner's own causal module with RoPE.

Cached-decoding mistakes hide on the first step (nothing is cached yet: positions
start at 0 either way and the mask is an ordinary triangle) and some hide when
one token is decoded at a time. So every cached case here has something in the
cache, and several add more than one new token at once.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ... import RotaryEmbedding, causal_mask, scaled_dot_product_attention
from ...teaching.checking import Case, CheckResult, Misconception, check_function
from ..multi_head_attention.exercises import MHA_MODULE_MISTAKES
from ..multi_head_attention.learner import ModuleSetting, check_module, check_prediction
from .learner import copy_package_weights

__all__ = ["check_attend_with_cache", "check_mask_prediction", "check_my_causal_self_attention"]


# ------------------------------------------------ masks for new tokens


def _mask_top_left(num_new: int, total: int) -> torch.Tensor:
    return torch.ones(num_new, total, dtype=torch.bool).tril()


def _mask_hides_self(num_new: int, total: int) -> torch.Tensor:
    return torch.ones(num_new, total, dtype=torch.bool).tril(diagonal=total - num_new - 1)


def _mask_one_ahead(num_new: int, total: int) -> torch.Tensor:
    return torch.ones(num_new, total, dtype=torch.bool).tril(diagonal=total - num_new + 1)


# ----------------------------------------------- one decoding step with a cache


def _step(
    q_new,
    k_new,
    v_new,
    cached_k,
    cached_v,
    rope,
    *,
    positions="continue",
    mask="bottom_right",
    rotate_cache=False,
    use_cache=True,
):
    past, new = cached_k.shape[-2], q_new.shape[-2]
    start = past if positions == "continue" else 0
    pos = torch.arange(start, start + new)
    q, k = rope(q_new, pos), rope(k_new, pos)
    if rotate_cache:
        # The cached keys were stored rotated; rotating everything again turns them twice.
        keys = rope(torch.cat((cached_k, k_new), dim=-2), torch.arange(past + new))
    else:
        keys = torch.cat((cached_k, k), dim=-2)
    values = torch.cat((cached_v, v_new), dim=-2)
    if not use_cache:
        keys, values = k, v_new
    total = keys.shape[-2]
    masks = {
        "bottom_right": causal_mask(new, total),
        "top_left": _mask_top_left(new, total),
        "hides_self": _mask_hides_self(new, total),
        "one_ahead": _mask_one_ahead(new, total),
        "none": None,
    }
    return scaled_dot_product_attention(q, keys, values, masks[mask])


def _step_reference(q_new, k_new, v_new, cached_k, cached_v, rope):
    return _step(q_new, k_new, v_new, cached_k, cached_v, rope)


STEP_MISCONCEPTIONS = (
    Misconception(
        "RoPE positions restart at 0",
        lambda *a: _step(*a, positions="restart"),
        "The new tokens continue the sequence: rotate them at positions past, past + 1, ... where "
        "past = cached_k.shape[-2], not at 0, 1, ... (the cached keys were rotated at 0 .. past - 1).",
    ),
    Misconception(
        "cache mask off by one: a token cannot see itself",
        lambda *a: _step(*a, mask="hides_self"),
        "Key j is visible to new token i when j <= past + i (it sees itself): "
        "causal_mask(new, past + new), i.e. tril(diagonal=past).",
    ),
    Misconception(
        "cache mask off by one: a token sees the next one",
        lambda *a: _step(*a, mask="one_ahead"),
        "New token i must not see the token right after it: the mask is tril(diagonal=past), not past + 1.",
    ),
    Misconception(
        "mask aligned to the first key",
        lambda *a: _step(*a, mask="top_left"),
        "With past cached keys the queries are the *last* rows: a plain tril() on the (new, past + new) "
        "rectangle (or is_causal=True in F.scaled_dot_product_attention) hides most of the cache. "
        "Use causal_mask(new, past + new) or tril(diagonal=past).",
    ),
    Misconception(
        "no mask among the new tokens",
        lambda *a: _step(*a, mask="none"),
        "When several tokens arrive at once, each may only see the ones before it (and itself): "
        "apply the causal mask causal_mask(new, past + new).",
    ),
    Misconception(
        "cached keys rotated again",
        lambda *a: _step(*a, rotate_cache=True),
        "The cache stores keys *after* RoPE. Rotate only the new keys (at their positions) and append "
        "them; rotating the whole cache again turns the old keys twice.",
    ),
    Misconception(
        "cache ignored",
        lambda *a: _step(*a, use_cache=False),
        "Attend over the cached keys/values *and* the new ones: torch.cat((cached_k, k), dim=-2).",
    ),
)


def _step_cases() -> list[Case]:
    g = torch.Generator().manual_seed(6)

    def case(batch, heads, past, new, d_head, base):
        rope = RotaryEmbedding(d_head, 64, base)
        shape = (batch, heads)
        cached_k = rope(torch.randn(*shape, past, d_head, generator=g))  # stored after RoPE, positions 0..past-1
        cached_v = torch.randn(*shape, past, d_head, generator=g)
        q_new, k_new, v_new = (torch.randn(*shape, new, d_head, generator=g) for _ in range(3))
        return Case(
            (q_new, k_new, v_new, cached_k, cached_v, rope),
            description=f"{new} new token(s) after {past} cached, heads={heads}, d_head={d_head}, base={base:g}",
        )

    # The last case reaches position 16: 17 positions, longer than a fixed (16, 16) mask or angle table.
    return [case(1, 2, 4, 1, 8, 100.0), case(2, 2, 3, 2, 8, 10000.0), case(1, 3, 14, 3, 6, 100.0)]


def check_attend_with_cache(learner: Callable[..., torch.Tensor], *, verbose: bool = True) -> CheckResult:
    """Check one cached decoding step.

    ``learner(q_new, k_new, v_new, cached_k, cached_v, rope)``: ``q_new, k_new, v_new``
    ``(batch, heads, new, d_head)`` before RoPE; ``cached_k, cached_v`` ``(batch, heads, past, d_head)``,
    keys already rotated at positions ``0 .. past-1``; ``rope`` a :class:`RotaryEmbedding` called as
    ``rope(x, positions)``. Returns the new tokens' attention output ``(batch, heads, new, d_head)``.
    """
    return check_function(
        "attend_with_cache", learner, _step_reference, _step_cases(), STEP_MISCONCEPTIONS, verbose=verbose
    )


# ------------------------------------------------- predict: what the new tokens see

#: The prediction exercise: tokens already in the cache, and new tokens decoded in one call.
PREDICTION_PAST, PREDICTION_NEW = 4, 3


def check_mask_prediction(answer: object, *, verbose: bool = True) -> CheckResult:
    """Check the predicted number of ``True`` entries of the mask when 3 new tokens are decoded in one
    call after 4 cached ones: new token ``i`` sits at position ``4 + i`` and sees keys ``0 .. 4 + i``."""
    past, new = PREDICTION_PAST, PREDICTION_NEW
    total = past + new
    mistakes = (
        Misconception(
            "mask aligned to the first key",
            lambda: int(_mask_top_left(new, total).sum()),
            "You counted a plain triangle, 1 + 2 + 3: that is the mask of 3 tokens with no cache. The new tokens "
            "are positions 4, 5, 6, and each sees all 4 cached keys as well.",
        ),
        Misconception(
            "no mask among the new tokens",
            lambda: new * total,
            "Each new token sees the cache and the new tokens up to itself, not the ones after it: the first "
            "new token sees 5 keys, not 7.",
        ),
        Misconception(
            "a token cannot see itself",
            lambda: int(_mask_hides_self(new, total).sum()),
            "A token attends to itself too: new token i (at position 4 + i) sees keys 0 .. 4 + i, 5 + i of them.",
        ),
        Misconception(
            "the whole (7, 7) triangle",
            lambda: int(causal_mask(total).sum()),
            "Only the 3 new tokens are queries in this call: the mask has 3 rows (one per new token) and 7 "
            "columns (4 cached keys + 3 new).",
        ),
    )
    return check_prediction(
        "mask_prediction",
        answer,
        lambda: int(causal_mask(new, total).sum()),
        f"{new} new tokens after {past} cached",
        mistakes,
        verbose=verbose,
    )


# ------------------------------------------------- the learner's own causal module


CAUSAL_MODULE_MISTAKES = (
    *MHA_MODULE_MISTAKES,
    (
        "no causal mask",
        {"causal": False},
        "This is a decoder: token i may attend to tokens 0 .. i only. Fill the scores of later keys with -inf "
        "before the softmax (or pass is_causal=True when nothing is cached).",
    ),
    (
        "RoPE applied to V",
        {"rope_on": ("q", "k", "v")},
        "Rotate the queries and keys only: the values carry content and stay as they are.",
    ),
    (
        "RoPE on the queries only",
        {"rope_on": ("q",)},
        "Rotate the keys too: q_m . k_n depends on m - n only when both are rotated by their positions.",
    ),
    (
        "RoPE on the keys only",
        {"rope_on": ("k",)},
        "Rotate the queries too: q_m . k_n depends on m - n only when both are rotated by their positions.",
    ),
    ("no RoPE", {"rope_base": None}, "Rotate q and k by their positions (your my_apply_rope from notebook 05)."),
    (
        "rotating pairs half-split instead of interleaved",
        {"convention": "half_split"},
        "Pair the features as (x[2i], x[2i+1]) (interleaved, as in notebook 05), not as (x[i], x[i + d/2]).",
    ),
    (
        "RoPE applied before splitting the heads",
        {"rope_before_split": True},
        "RoPE works inside each head, with frequencies base**(-2i/d_head): split q and k into heads first, "
        "then rotate each (seq, d_head) matrix.",
    ),
    (
        "rope_base ignored",
        {"rope_base": 10000.0},
        "Use the module's rope_base for the frequencies, not a fixed 10000.",
    ),
    (
        "positions not offset by the cache",
        {"offset_positions": False},
        "New tokens continue the sequence: rotate them at positions past, past + 1, ... with past = cache.length "
        "(read it *before* appending), not at 0, 1, ...",
    ),
    (
        "mask not offset by the cache",
        {"offset_mask": False},
        "With past cached keys the queries are the last rows: query i sits at position past + i and sees keys "
        "0 .. past + i, i.e. tril(diagonal=past) on the (seq, past + seq) rectangle; a plain tril() (or "
        "is_causal=True) hides most of the cache.",
    ),
)


def _leaks_the_future_probe(d_in: int) -> Misconception:
    def detect(run) -> bool:
        x = torch.randn(1, 6, d_in, generator=torch.Generator().manual_seed(66))
        later = x.clone()
        later[:, 4:] += 1.0  # change tokens 4 and 5 only
        return not torch.allclose(run(x)[:, :4], run(later)[:, :4], atol=1e-5, rtol=1e-4)

    return Misconception(
        "not causal: changing a later token changes an earlier output",
        None,
        "Changing tokens 4 and 5 changed the outputs of tokens 0 .. 3: a token must not see the ones after it. "
        "Mask the scores of later keys with -inf before the softmax.",
        detect=detect,
    )


def _causal_settings() -> list[ModuleSetting]:
    def setting(d_model, heads, calls, *, d_in=None, bias=True, rope_base=10000.0):
        kwargs = {}
        if d_in is not None:
            kwargs["d_in"] = d_in
        if not bias:
            kwargs["bias"] = False
        if rope_base != 10000.0:
            kwargs["rope_base"] = rope_base
        package = {
            "d_model": d_model,
            "num_heads": heads,
            "d_in": d_in,
            "qkv_bias": bias,
            "out_bias": bias,
            "causal": True,
            "rope": True,
            "rope_base": rope_base,
            "max_seq_len": 64,
        }
        return ModuleSetting((d_model, heads), kwargs, package, tuple(calls), {"causal": True, "rope_base": rope_base})

    # split_at None: the full pass; p > 0: p tokens cached, the rest decoded in one call (need_weights=True);
    # 0: every token decoded on its own. 17 tokens: longer than a fixed (16, 16) mask or RoPE table.
    return [
        setting(8, 2, [(2, 5, None), (1, 1, None), (2, 7, 3), (1, 6, 0)]),
        setting(12, 3, [(1, 17, None), (2, 7, 5), (1, 7, 0)], d_in=6, rope_base=100.0),
        setting(16, 4, [(3, 7, None), (1, 9, 4)], bias=False),
        setting(8, 1, [(2, 4, None), (1, 5, 0), (1, 5, 2)]),
    ]


def check_my_causal_self_attention(learner, *, verbose: bool = True) -> CheckResult:
    """Check the learner's class ``MyCausalSelfAttention(d_model, num_heads, *, d_in=None, bias=True,
    rope_base=10000.0)`` (the contract of :mod:`.learner`).

    Built at four sizes (1 to 4 heads, d_in != d_model, no biases, base 100) with a package module's
    weights copied in by :func:`copy_package_weights`, it must give the package's outputs on full passes
    of 1 to 17 tokens, on new tokens decoded after a cache (outputs and attention weights
    ``(batch, heads, seq, past + seq)``) and token by token; a later token must never change an earlier
    output; and a backward pass must reach every weight and bias."""
    return check_module(
        "my_causal_self_attention",
        learner,
        _causal_settings(),
        CAUSAL_MODULE_MISTAKES,
        seed=6060,
        probes=(_leaks_the_future_probe,),
        shortcuts=("multi_head_self_attention", "MultiHeadSelfAttention", "MultiheadAttention"),
        loader=copy_package_weights,
        verbose=verbose,
    )
