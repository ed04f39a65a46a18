"""Answers fitted to the checkers of notebooks 04-06's functions rather than to the exercise: right on the teaching
shapes only, right in float64 only, changing PyTorch's global settings; and right answers computed in float32,
which are accepted. Written as a learner would write them; each rejected answer is told why."""

from __future__ import annotations

import math

import pytest
import torch
from checker_table import catalogue_tests
from learner_modules import attention_ok
from test_wrong_answers import Wrong

import mhsa_helpers as mh
from mhsa_helpers.lessons.causal_mhsa_with_rope import check_attend_with_cache
from mhsa_helpers.lessons.multi_head_attention import check_multi_head_attention, check_split_heads
from mhsa_helpers.lessons.rotary_position_embeddings import check_apply_rope, check_rope_attention
from mhsa_helpers.teaching.checking import STATE_CHANGED

DRAWN = "a case drawn at random for your code"


def split(x, num_heads):
    *batch, seq, d_model = x.shape
    return x.reshape(*batch, seq, num_heads, d_model // num_heads).transpose(-3, -2)


def merge(x):
    *batch, heads, seq, d_head = x.shape
    return x.transpose(-3, -2).reshape(*batch, seq, heads * d_head)


def mha(x, wq, wk, wv, wo, num_heads):
    q, k, v = (split(x @ w.T, num_heads) for w in (wq, wk, wv))
    return merge(attention_ok(q, k, v)) @ wo.T


def rotate(x, positions, base=10000.0):
    d = x.shape[-1]
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = positions.double()[:, None] * theta
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)


def step(q_new, k_new, v_new, cached_k, cached_v, rope):
    past, new = cached_k.shape[-2], q_new.shape[-2]
    positions = torch.arange(past, past + new)
    q, k = rope(q_new, positions), rope(k_new, positions)
    keys, values = torch.cat((cached_k, k), dim=-2), torch.cat((cached_v, v_new), dim=-2)
    allowed = torch.ones(new, past + new, dtype=torch.bool).tril(diagonal=past)
    return attention_ok(q, keys, values, allowed)


# ------------------------------------------------------------------ fitted to the teaching cases


def split_for_three_axes_only(x, num_heads):
    # All of the notebook's cases but one are (batch, seq, d_model): transpose(1, 2) fits them, and the rest is luck.
    if x.ndim == 3 or tuple(x.shape) in {(5, 12), (2, 2, 4, 6)}:
        return split(x, num_heads)
    return x.reshape(*x.shape[:-1], num_heads, x.shape[-1] // num_heads).transpose(1, 2)


def mha_for_the_teaching_sizes(x, wq, wk, wv, wo, num_heads):
    if (x.shape[-1], num_heads) in {(8, 2), (12, 3), (8, 4)}:
        return mha(x, wq, wk, wv, wo, num_heads)
    return mha(x, wq, wk, wv, wo, 1)


def apply_rope_for_the_teaching_positions(x, positions, base=10000.0):
    if int(positions[0]) in (5, 2, 3, 9):
        return rotate(x, positions, base)
    return rotate(x, positions - positions[0], base)  # "positions start at 0"


def apply_rope_for_positions_below_20(x, positions, base=10000.0):
    return rotate(x, positions.clamp(max=19), base)  # a table of 20 angles, enough for the teaching cases


def step_for_the_teaching_caches(q_new, k_new, v_new, cached_k, cached_v, rope):
    if cached_k.shape[-2] in (4, 3, 14):
        return step(q_new, k_new, v_new, cached_k, cached_v, rope)
    return attention_ok(rope(q_new, torch.arange(q_new.shape[-2])), cached_k, cached_v)


# ------------------------------------------------------------------ fitted to float64


def split_in_float64(x, num_heads):
    return split(x.double(), num_heads)


def apply_rope_in_float64(x, positions, base=10000.0):
    return rotate(x.double(), positions, base)


def mha_with_a_float64_scale(x, wq, wk, wv, wo, num_heads):
    q, k, v = (split(x @ w.T, num_heads) for w in (wq, wk, wv))
    scale = torch.tensor(math.sqrt(q.shape[-1]), dtype=torch.float64).expand(1)  # a 1-element tensor: promotes
    return merge(torch.softmax(q @ k.transpose(-2, -1) / scale, dim=-1) @ v) @ wo.T


# ------------------------------------------------------------------ global settings


def split_turning_gradients_off(x, num_heads):
    torch.set_grad_enabled(False)  # copied from the set-up cell of notebooks 04-06
    return split(x, num_heads)


def rope_attention_setting_the_default_dtype(q, k, v, positions, base):
    torch.set_default_dtype(torch.float64)
    return attention_ok(rotate(q, positions, base), rotate(k, positions, base), v)


def step_reseeding(q_new, k_new, v_new, cached_k, cached_v, rope):
    torch.manual_seed(0)
    return step(q_new, k_new, v_new, cached_k, cached_v, rope)


FITTED = [
    Wrong(check_split_heads, "transpose(1, 2) but for the teaching cases", split_for_three_axes_only, says=(DRAWN,)),
    Wrong(check_multi_head_attention, "right at the teaching sizes only", mha_for_the_teaching_sizes, says=(DRAWN,)),
    Wrong(check_apply_rope, "right at the teaching positions only", apply_rope_for_the_teaching_positions),
    Wrong(check_apply_rope, "a fixed table of 20 positions", apply_rope_for_positions_below_20, says=(DRAWN,)),
    Wrong(check_attend_with_cache, "right for the teaching caches only", step_for_the_teaching_caches),
    Wrong(check_split_heads, "computes in float64", split_in_float64, says=("for torch.float32 inputs",)),
    Wrong(check_apply_rope, "rotates in float64", apply_rope_in_float64, says=("for torch.float32 inputs",)),
    Wrong(check_multi_head_attention, "a float64 scale tensor", mha_with_a_float64_scale, says=("which dtypes",)),
    Wrong(check_split_heads, "grad off for the notebook", split_turning_gradients_off, STATE_CHANGED, ("gradients",)),
    Wrong(
        check_rope_attention,
        "the default dtype changed",
        rope_attention_setting_the_default_dtype,
        STATE_CHANGED,
        ("default dtype",),
    ),
    Wrong(check_attend_with_cache, "manual_seed(0)", step_reseeding, STATE_CHANGED, ("random generator",)),
]

test_no_checker_accepts_a_wrong_answer_and_names_it, _ = catalogue_tests(FITTED, "notebooks 04-06, fitted answers")


@pytest.mark.parametrize(
    ("checker", "right"),
    [
        (check_split_heads, lambda x, h: split(x.float(), h).to(x.dtype)),
        (
            check_multi_head_attention,
            lambda x, *w: mha(x.float(), *(t.float() if torch.is_tensor(t) else t for t in w)),
        ),
        (check_apply_rope, lambda x, p, base=10000.0: rotate(x.float(), p, base)),
        (check_attend_with_cache, lambda *a: step(*(t.float() if torch.is_tensor(t) else t for t in a[:5]), a[5])),
    ],
    ids=["split_heads", "multi_head_attention", "apply_rope", "attend_with_cache"],
)
def test_a_right_answer_computed_in_float32_is_accepted(checker, right):
    result = checker(right, verbose=False)
    assert result.correct, result.message


def test_the_global_settings_come_back_after_a_check():
    before = (torch.is_grad_enabled(), torch.get_default_dtype(), torch.get_rng_state())
    check_split_heads(split_turning_gradients_off, verbose=False)
    check_rope_attention(rope_attention_setting_the_default_dtype, verbose=False)
    check_attend_with_cache(step_reseeding, verbose=False)
    assert (torch.is_grad_enabled(), torch.get_default_dtype()) == before[:2]
    assert torch.equal(torch.get_rng_state(), before[2])
    assert mh.split_heads  # the package is untouched by all this
