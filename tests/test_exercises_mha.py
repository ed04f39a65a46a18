"""The function checkers of notebooks 04-06 name the mistakes they are built to catch (the module and
prediction checkers: test_build_middle_modules).

For each checker: an independent correct solution (written here from torch primitives,
not taken from the package) is "correct"; a stub is "not_attempted"; hand-written
versions of the mistakes the issue lists are named; and every misconception the
checker knows is told apart from the right answer *and* from the others.
"""

from __future__ import annotations

import math

import pytest
import torch

from mhsa_helpers.lessons.causal_mhsa_with_rope import exercises as decoding
from mhsa_helpers.lessons.multi_head_attention import exercises as heads
from mhsa_helpers.lessons.rotary_position_embeddings import exercises as rope
from mhsa_helpers.rope import RotaryEmbedding


def stub(*args, **kwargs):
    raise NotImplementedError


# ------------------------------------------------ independent correct solutions


def split_ok(x, num_heads):
    *batch, seq, d_model = x.shape
    return x.reshape(*batch, seq, num_heads, d_model // num_heads).transpose(-3, -2)


def merge_ok(x):
    *batch, heads_, seq, d_head = x.shape
    return x.transpose(-3, -2).reshape(*batch, seq, heads_ * d_head)


def attention_ok(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def mha_ok(x, q_weight, k_weight, v_weight, o_weight, num_heads):
    q, k, v = (split_ok(x @ w.T, num_heads) for w in (q_weight, k_weight, v_weight))
    return merge_ok(attention_ok(q, k, v)) @ o_weight.T


def frequencies_ok(d_head, base):
    return torch.tensor([base ** (-2 * i / d_head) for i in range(d_head // 2)])


def rotate_ok(x, positions, base=10000.0, pairs="interleaved"):
    """Rotate pair (a, b) of row j by positions[j] * theta_i, pairs chosen by ``pairs``."""
    d_head = x.shape[-1]
    out = x.clone()
    for j, m in enumerate(positions.tolist()):
        for i in range(d_head // 2):
            a, b = (2 * i, 2 * i + 1) if pairs == "interleaved" else (i, i + d_head // 2)
            angle = m * base ** (-2 * i / d_head)
            c, s = math.cos(angle), math.sin(angle)
            xa, xb = x[..., j, a], x[..., j, b]
            out[..., j, a] = xa * c - xb * s
            out[..., j, b] = xa * s + xb * c
    return out


def rope_attention_ok(q, k, v, positions, base):
    return attention_ok(rotate_ok(q, positions, base), rotate_ok(k, positions, base), v)


def decoding_mask_ok(num_new, total):
    past = total - num_new
    return torch.tensor([[j <= past + i for j in range(total)] for i in range(num_new)])


def _base_of(rope_module):
    return rope_module.base


def _attend_with_cache(q_new, k_new, v_new, cached_k, cached_v, rope_module, *, first_position=None, mask=None):
    """One cached decoding step written from torch primitives; the keyword arguments inject a mistake."""
    past, new = cached_k.shape[-2], q_new.shape[-2]
    start = past if first_position is None else first_position
    positions = torch.arange(start, start + new)
    base = _base_of(rope_module)
    q = rotate_ok(q_new, positions, base)
    k = torch.cat((cached_k, rotate_ok(k_new, positions, base)), dim=-2)
    v = torch.cat((cached_v, v_new), dim=-2)
    return attention_ok(q, k, v, decoding_mask_ok(new, past + new) if mask is None else mask(past, new))


def attend_with_cache_ok(q_new, k_new, v_new, cached_k, cached_v, rope_module):
    return _attend_with_cache(q_new, k_new, v_new, cached_k, cached_v, rope_module)


# ---------------------------------------- hand-written versions of listed mistakes


def split_view_without_transpose(x, num_heads):
    *batch, seq, d_model = x.shape
    return x.view(*batch, num_heads, seq, d_model // num_heads)


def mha_without_w_o(x, q_weight, k_weight, v_weight, o_weight, num_heads):
    q, k, v = (split_ok(x @ w.T, num_heads) for w in (q_weight, k_weight, v_weight))
    return merge_ok(attention_ok(q, k, v))


def mha_view_without_transpose(x, q_weight, k_weight, v_weight, o_weight, num_heads):
    *batch, seq, d_model = x.shape
    q, k, v = (split_view_without_transpose(x @ w.T, num_heads) for w in (q_weight, k_weight, v_weight))
    return attention_ok(q, k, v).reshape(*batch, seq, d_model) @ o_weight.T


def mha_split_view_merge_ok(x, q_weight, k_weight, v_weight, o_weight, num_heads):
    # Split with a plain view (no transpose) but merge correctly: positions mix inside each head.
    q, k, v = (split_view_without_transpose(x @ w.T, num_heads) for w in (q_weight, k_weight, v_weight))
    return merge_ok(attention_ok(q, k, v)) @ o_weight.T


def rope_attention_rotating_v(q, k, v, positions, base):
    return attention_ok(rotate_ok(q, positions, base), rotate_ok(k, positions, base), rotate_ok(v, positions, base))


def apply_rope_half_split(x, positions, base):
    return rotate_ok(x, positions, base, pairs="half_split")


def rope_attention_half_split(q, k, v, positions, base):
    return attention_ok(rotate_ok(q, positions, base, "half_split"), rotate_ok(k, positions, base, "half_split"), v)


def attend_with_cache_restarting_positions(q_new, k_new, v_new, cached_k, cached_v, rope_module):
    # the mistake: positions as if the sequence started again
    return _attend_with_cache(q_new, k_new, v_new, cached_k, cached_v, rope_module, first_position=0)


def attend_with_cache_mask_strict(q_new, k_new, v_new, cached_k, cached_v, rope_module):
    def strict(past, new):  # < instead of <=: a new token cannot see itself
        return torch.tensor([[j < past + i for j in range(past + new)] for i in range(new)])

    return _attend_with_cache(q_new, k_new, v_new, cached_k, cached_v, rope_module, mask=strict)


# ------------------------------------------------------------------- the table

CHECKERS = {
    "split_heads": (heads.check_split_heads, split_ok, heads.SPLIT_HEADS_MISCONCEPTIONS),
    "merge_heads": (heads.check_merge_heads, merge_ok, heads.MERGE_HEADS_MISCONCEPTIONS),
    "multi_head_attention": (heads.check_multi_head_attention, mha_ok, heads.MHA_MISCONCEPTIONS),
    "rope_frequencies": (rope.check_rope_frequencies, frequencies_ok, rope.FREQUENCY_MISCONCEPTIONS),
    "apply_rope": (rope.check_apply_rope, rotate_ok, rope.APPLY_MISCONCEPTIONS),
    "rope_attention": (rope.check_rope_attention, rope_attention_ok, rope.ROPE_ATTENTION_MISCONCEPTIONS),
    "attend_with_cache": (decoding.check_attend_with_cache, attend_with_cache_ok, decoding.STEP_MISCONCEPTIONS),
}

# The mistakes the issue asks the checkers to name, written by hand above.
LISTED_MISTAKES = [
    ("split_heads", split_view_without_transpose, "view without transpose"),
    ("multi_head_attention", mha_view_without_transpose, "view without transpose"),
    ("multi_head_attention", mha_split_view_merge_ok, "view without transpose when splitting (merge correct)"),
    ("multi_head_attention", mha_without_w_o, "forgot W_O"),
    ("rope_attention", rope_attention_rotating_v, "RoPE applied to V"),
    ("apply_rope", apply_rope_half_split, "wrong pairing convention (half-split)"),
    ("rope_attention", rope_attention_half_split, "wrong pairing convention (half-split)"),
    ("attend_with_cache", attend_with_cache_restarting_positions, "RoPE positions restart at 0"),
    ("attend_with_cache", attend_with_cache_mask_strict, "cache mask off by one: a token cannot see itself"),
]


@pytest.mark.parametrize("name", sorted(CHECKERS))
def test_independent_solution_is_correct(name):
    checker, solution, _ = CHECKERS[name]
    result = checker(solution, verbose=False)
    assert result.status == "correct", result.message
    assert result.correct


@pytest.mark.parametrize("name", sorted(CHECKERS))
def test_stub_is_not_attempted(name, capsys):
    checker, _, _ = CHECKERS[name]
    result = checker(stub)
    assert result.status == "not_attempted"
    assert not result.correct
    assert "not attempted yet" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("name", "mistake", "expected"), LISTED_MISTAKES, ids=[f"{n}-{e}" for n, _, e in LISTED_MISTAKES]
)
def test_listed_mistakes_are_named(name, mistake, expected):
    checker, _, _ = CHECKERS[name]
    result = checker(mistake, verbose=False)
    assert result.status == "misconception", result.message
    assert result.misconception == expected
    assert expected in result.message


ALL_MISCONCEPTIONS = [(name, m) for name, (_, _, ms) in sorted(CHECKERS.items()) for m in ms]


@pytest.mark.parametrize(
    ("name", "misconception"), ALL_MISCONCEPTIONS, ids=[f"{n}-{m.name}" for n, m in ALL_MISCONCEPTIONS]
)
def test_every_misconception_is_told_apart(name, misconception):
    """Fed as the learner's answer, each known mistake is named as itself: it differs from the
    right answer on some case, and from every misconception listed before it."""
    checker, _, _ = CHECKERS[name]
    result = checker(misconception.implementation, verbose=False)
    assert result.status == "misconception", result.message
    assert result.misconception == misconception.name
    assert misconception.hint in result.message


@pytest.mark.parametrize("name", sorted(CHECKERS))
def test_unknown_wrong_answer_is_incorrect(name):
    checker, solution, _ = CHECKERS[name]

    def off_a_little(*args):
        out = solution(*args)
        return torch.zeros_like(out) if out.dtype == torch.bool else 1.5 * out

    result = checker(off_a_little, verbose=False)
    assert result.status == "incorrect", result.message
    assert "differs from the reference" in result.message


@pytest.mark.parametrize("name", sorted(CHECKERS))
def test_a_crash_is_reported_not_raised(name):
    checker, _, _ = CHECKERS[name]

    def crashes(*args):
        raise ValueError("boom")

    result = checker(crashes, verbose=False)
    assert result.status == "error"
    assert "ValueError: boom" in result.message


def test_scaled_answer_is_incorrect_with_its_case_named():
    result = heads.check_multi_head_attention(lambda *a: 1.5 * mha_ok(*a), verbose=False)
    assert result.status == "incorrect"
    assert "x (2, 4, 8), 2 heads" in result.message


def test_attend_with_cache_cases_have_a_cache():
    # The listed cache mistakes are invisible on an empty cache; every case must hold past keys.
    for case in decoding._step_cases():
        cached_k = case.args[3]
        assert cached_k.shape[-2] >= 1
    assert isinstance(decoding._step_cases()[0].args[5], RotaryEmbedding)
