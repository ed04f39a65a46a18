"""Checkers for notebook 06: the full causal block with RoPE, and decoding with a cache.

Cached-decoding mistakes hide on the first step (nothing is cached yet: positions
start at 0 either way and the mask is an ordinary triangle) and some hide when
one token is decoded at a time. So every cached case here has something in the
cache, and several add more than one new token at once.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from ... import (
    RotaryEmbedding,
    causal_mask,
    merge_heads,
    multi_head_self_attention,
    scaled_dot_product_attention,
    split_heads,
)
from ...teaching.checking import AnswerRejected, Case, CheckResult, Misconception, check_function
from ..multi_head.exercises import merge_reshape_without_transpose, split_view_without_transpose

__all__ = ["check_attend_with_cache", "check_causal_mhsa_rope", "check_decoding_mask"]


# ------------------------------------------------ the mask for new tokens


def _mask_top_left(num_new: int, total: int) -> torch.Tensor:
    return torch.ones(num_new, total, dtype=torch.bool).tril()


def _mask_hides_self(num_new: int, total: int) -> torch.Tensor:
    return torch.ones(num_new, total, dtype=torch.bool).tril(diagonal=total - num_new - 1)


def _mask_one_ahead(num_new: int, total: int) -> torch.Tensor:
    return torch.ones(num_new, total, dtype=torch.bool).tril(diagonal=total - num_new + 1)


def _mask_inverted(num_new: int, total: int) -> torch.Tensor:
    return ~causal_mask(num_new, total)


def _mask_cache_hidden(num_new: int, total: int) -> torch.Tensor:
    mask = torch.zeros(num_new, total, dtype=torch.bool)
    mask[:, total - num_new :] = causal_mask(num_new)
    return mask


MASK_MISCONCEPTIONS = (
    Misconception(
        "mask aligned to the first key",
        _mask_top_left,
        "The new tokens are the *last* num_new positions: new token i sits at position "
        "total - num_new + i and sees keys 0 .. total - num_new + i. A plain lower triangle on the "
        "(num_new, total) rectangle is aligned to the first key (this is what is_causal=True does in "
        "F.scaled_dot_product_attention when seq_q != seq_k). Use tril(diagonal=total - num_new).",
    ),
    Misconception(
        "cache mask off by one: a token cannot see itself",
        _mask_hides_self,
        "A token attends to every earlier token *and to itself*: key j is visible to new token i when "
        "j <= total - num_new + i (less-or-equal, diagonal=total - num_new).",
    ),
    Misconception(
        "cache mask off by one: a token sees the next one",
        _mask_one_ahead,
        "New token i must not see key total - num_new + i + 1, the token after it: use "
        "diagonal=total - num_new, not + 1.",
    ),
    Misconception(
        "True marks blocked keys",
        _mask_inverted,
        "In this package (and in F.scaled_dot_product_attention's boolean attn_mask) True means "
        "'may attend'. Flip your mask with ~mask.",
    ),
    Misconception(
        "cached keys hidden",
        _mask_cache_hidden,
        "The cached keys are the past: every new token may attend to all of them, plus the new "
        "tokens up to and including itself.",
    ),
)


def _require_bool(learner: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    # A number mask is rejected with a request for a boolean one, not just as "incorrect":
    # the next exercise uses the mask with ~mask and masked_fill, which need a boolean tensor.
    if not callable(learner):
        return learner  # check_function reports it

    @functools.wraps(learner)
    def wrapped(*args, **kwargs):
        mask = learner(*args, **kwargs)
        if isinstance(mask, torch.Tensor) and mask.dtype != torch.bool:
            raise AnswerRejected(f"return a boolean mask (True = may attend), got dtype {mask.dtype}")
        return mask  # anything else (None, a tuple) is described by check_function

    return wrapped


def check_decoding_mask(learner: Callable[..., torch.Tensor], *, verbose: bool = True) -> CheckResult:
    """Check ``learner(num_new, total) -> bool (num_new, total)``, True where a new token may attend.

    The ``num_new`` new tokens are the last positions of ``total`` (``total - num_new`` are cached).
    """
    cases = [
        Case((1, 5), description="1 new token after 4 cached"),
        Case((3, 7), description="3 new tokens after 4 cached"),
        Case((4, 4), description="4 new tokens, empty cache"),
        Case((2, 17), description="2 new tokens after 15 cached (longer than a fixed (16, 16) buffer)"),
    ]
    return check_function(
        "decoding_mask",
        _require_bool(learner),
        causal_mask,
        cases,
        MASK_MISCONCEPTIONS,
        shortcuts=("causal_mask",),
        verbose=verbose,
    )


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


# ------------------------------------------------- the full causal block with RoPE


def _block(
    x,
    q_weight,
    k_weight,
    v_weight,
    o_weight,
    num_heads,
    base,
    *,
    rope_on=("q", "k"),
    convention="interleaved",
    causal=True,
    split=split_heads,
    merge=merge_heads,
    project_out=True,
    rope_before_split=False,
    scale=None,
    fill=None,
):
    q, k, v = x @ q_weight.T, x @ k_weight.T, x @ v_weight.T
    seq = x.shape[-2]
    if rope_before_split:
        rope = RotaryEmbedding(q.shape[-1], seq, base, convention)
        q = rope(q) if "q" in rope_on else q
        k = rope(k) if "k" in rope_on else k
        v = rope(v) if "v" in rope_on else v
    q, k, v = split(q, num_heads), split(k, num_heads), split(v, num_heads)
    if not rope_before_split:
        rope = RotaryEmbedding(q.shape[-1], seq, base, convention)
        q = rope(q) if "q" in rope_on else q
        k = rope(k) if "k" in rope_on else k
        v = rope(v) if "v" in rope_on else v
    if fill is None:
        heads = merge(scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale))
    else:
        # The blocked scores filled with an ordinary number instead of -inf.
        scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
        scores = scores.masked_fill(torch.ones(seq, seq, dtype=torch.bool).triu(1), fill)
        heads = merge(torch.softmax(scores, dim=-1) @ v)
    return heads @ o_weight.T if project_out else heads


def _block_reference(x, q_weight, k_weight, v_weight, o_weight, num_heads, base):
    return multi_head_self_attention(
        x, q_weight, k_weight, v_weight, o_weight, num_heads=num_heads, causal=True, rope_base=base
    )


BLOCK_MISCONCEPTIONS = (
    Misconception(
        "forgot W_O",
        lambda *a: _block(*a, project_out=False),
        "Finish with the output projection: merged_heads @ o_weight.T.",
    ),
    Misconception(
        "RoPE applied to V",
        lambda *a: _block(*a, rope_on=("q", "k", "v")),
        "Rotate the queries and keys only; the values carry content and stay as they are.",
    ),
    Misconception(
        "no causal mask",
        lambda *a: _block(*a, causal=False),
        "This is a decoder block: token i may attend to tokens 0 .. i only (is_causal=True, or a "
        "lower-triangular mask inside the softmax).",
    ),
    Misconception(
        "wrong pairing convention (half-split)",
        lambda *a: _block(*a, convention="half_split"),
        "Use the interleaved pairs (x[2i], x[2i+1]) (RotaryEmbedding's default), not Hugging Face's "
        "half-split (x[i], x[i + d/2]).",
    ),
    Misconception(
        "RoPE applied before splitting the heads",
        lambda *a: _block(*a, rope_before_split=True),
        "RoPE works inside each head, with frequencies base**(-2i/d_head): split q and k into heads "
        "first, then rotate each (seq, d_head) matrix.",
    ),
    Misconception(
        "view without transpose",
        lambda *a: _block(*a, split=split_view_without_transpose, merge=merge_reshape_without_transpose),
        "Split with .view(..., seq, heads, d_head).transpose(-3, -2), and merge by transposing back "
        "before flattening; a reshape straight to (..., heads, seq, d_head) mixes positions.",
    ),
    Misconception(
        "view without transpose when splitting (merge correct)",
        lambda *a: _block(*a, split=split_view_without_transpose),
        "Your merge is right, but the split reshapes (..., seq, d_model) straight to (..., heads, seq, d_head), "
        "which mixes positions inside each head: view as (..., seq, heads, d_head), then .transpose(-3, -2).",
    ),
    Misconception(
        "scaled by sqrt(d_model) instead of sqrt(d_head)",
        lambda *a: _block(*a, scale=1.0 / a[0].shape[-1] ** 0.5),
        "Your scores are divided by √d_model. Each head attends over its own d_head features: divide by "
        "√d_head = √(d_model / num_heads).",
    ),
    Misconception(
        "masked scores filled with 0 instead of -inf",
        lambda *a: _block(*a, fill=0.0),
        "Your future tokens still get weight: a score of 0 is an ordinary score, exp(0) = 1. Fill the "
        "blocked scores with -inf (or pass is_causal=True).",
    ),
    Misconception(
        "merge without transposing back",
        lambda *a: _block(*a, merge=merge_reshape_without_transpose),
        "Transpose the head outputs back to (..., seq, heads, d_head) before flattening: a reshape alone "
        "mixes positions.",
    ),
)


def _block_cases() -> list[Case]:
    g = torch.Generator().manual_seed(66)

    def case(batch, seq, d_model, heads, base):
        weights = [torch.randn(d_model, d_model, generator=g) / d_model**0.5 for _ in range(4)]
        x = 2.0 * torch.randn(*batch, seq, d_model, generator=g)
        return Case((x, *weights, heads, base), description=f"x {(*batch, seq, d_model)}, {heads} heads, base {base:g}")

    # 17 tokens in the last case: longer than a fixed (16, 16) mask or RoPE table.
    return [case((2,), 5, 8, 2, 100.0), case((), 4, 12, 3, 10000.0), case((1,), 17, 16, 2, 100.0)]


def check_causal_mhsa_rope(learner: Callable[..., torch.Tensor], *, verbose: bool = True) -> CheckResult:
    """Check ``learner(x (..., seq, d_model), q_weight, k_weight, v_weight, o_weight, num_heads, base)``.

    Causal multi-head self-attention with interleaved RoPE (positions ``0 .. seq-1``) on queries and
    keys; weights ``(d_model, d_model)`` in ``nn.Linear`` layout, no biases. Returns ``(..., seq, d_model)``.
    """
    return check_function(
        "causal_mhsa_rope",
        learner,
        _block_reference,
        _block_cases(),
        BLOCK_MISCONCEPTIONS,
        shortcuts=("multi_head_self_attention", "MultiHeadSelfAttention", "MultiheadAttention"),
        verbose=verbose,
    )
