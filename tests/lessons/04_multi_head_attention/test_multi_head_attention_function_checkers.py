"""The function checkers of notebook 04 (split_heads, merge_heads, multi_head_attention) name the mistakes
they are built to catch (the module and prediction checkers: ``test_multi_head_attention_module.py``).

For each checker: an independent correct solution (written here from torch primitives,
not taken from the package) is "correct"; a stub is "not_attempted"; hand-written
versions of the mistakes the issue lists are named; and every misconception the
checker knows is told apart from the right answer *and* from the others.
"""

from __future__ import annotations

import math

import pytest
import torch

from mhsa_helpers.lessons.multi_head_attention import exercises as heads


def stub(*args, **kwargs):
    raise NotImplementedError


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


CHECKERS = {
    "split_heads": (heads.check_split_heads, split_ok, heads.SPLIT_HEADS_MISCONCEPTIONS),
    "merge_heads": (heads.check_merge_heads, merge_ok, heads.MERGE_HEADS_MISCONCEPTIONS),
    "multi_head_attention": (heads.check_multi_head_attention, mha_ok, heads.MHA_MISCONCEPTIONS),
}


# The mistakes the issue asks the checkers to name, written by hand above.
LISTED_MISTAKES = [
    ("split_heads", split_view_without_transpose, "view without transpose"),
    ("multi_head_attention", mha_view_without_transpose, "view without transpose"),
    ("multi_head_attention", mha_split_view_merge_ok, "view without transpose when splitting (merge correct)"),
    ("multi_head_attention", mha_without_w_o, "forgot W_O"),
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
