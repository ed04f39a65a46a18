"""The checkers of notebook 08's exercises: one online-softmax step, attention tile by tile, expanding
key/value heads and the size of a KV cache.

The right answers are written here by hand. A wrong answer is told its symptom first and its name on a
repeat, the fix only on request; answers fitted to the teaching shapes or to float64, and answers that change
PyTorch's global settings, are refused; a right answer computed in float32 is accepted. No exercise cell of the
committed notebook names a mistake.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from checker_table import catalogue_tests, state_change_tests, table_tests
from test_wrong_answers import Wrong

from mhsa_helpers.lessons.attention_at_scale import (
    check_expand_kv,
    check_kv_cache_bytes,
    check_online_attention,
    check_online_update,
    exercises,
)

NOTEBOOK = Path(__file__).resolve().parents[3] / "notebooks" / "08_attention_at_scale.ipynb"


def update(m, norm, o, s, v, *, rescale_norm=True, rescale_out=True, factor_sign=1, dtype=None):
    m, norm, o, s, v = (t.to(dtype or t.dtype) for t in (m, norm, o, s, v))
    new = torch.maximum(m, s.amax(-1, keepdim=True))
    r = torch.exp(factor_sign * (m - new))
    w = torch.exp(s - new)
    return new, (norm * r if rescale_norm else norm) + w.sum(-1, keepdim=True), (o * r if rescale_out else o) + w @ v


def online(s, v, t, *, start=-math.inf, divide=True, dtype=None):
    s, v = s.to(dtype or s.dtype), v.to(dtype or v.dtype)
    m = torch.full((s.shape[0], 1), start, dtype=s.dtype)
    norm, o = torch.zeros_like(m), torch.zeros(s.shape[0], v.shape[1], dtype=s.dtype)
    for a in range(0, s.shape[1], t):
        m, norm, o = update(m, norm, o, s[:, a : a + t], v[a : a + t])
    return o / norm if divide else o


def expand(x, groups):
    # expand + reshape: another right way
    return x[:, :, None].expand(-1, -1, groups, -1, -1).reshape(x.shape[0], -1, *x.shape[2:])


def cache_bytes(n, h, kv, d, t, b, e):
    return 2 * n * kv * d * t * b * e


# ------------------------------------------------------------------ the one-tensor checkers' table


def per_tile_softmax(s, v, t):
    return sum(torch.softmax(s[:, a : a + t], -1) @ v[a : a + t] for a in range(0, s.shape[1], t)) / math.ceil(
        s.shape[1] / t
    )


def starts_at_zero(s, v, t):
    return online(s, v, t, start=0.0)


def exp_without_a_maximum(s, v, t):
    # No running maximum at all: exp of the raw scores, tile by tile. Right on ordinary scores, like a maximum
    # started at 0, and NaN near -1000 like it too; near +1000 it overflows where the maximum started at 0 does not.
    norm, o = torch.zeros(s.shape[0], 1, dtype=s.dtype), torch.zeros(s.shape[0], v.shape[1], dtype=s.dtype)
    for a in range(0, s.shape[1], t):
        w = torch.exp(s[:, a : a + t])
        norm, o = norm + w.sum(-1, keepdim=True), o + w @ v[a : a + t]
    return o / norm


def never_divided(s, v, t):
    return online(s, v, t, divide=False)


CHECKERS = {
    "online_attention": (check_online_attention, online, exercises.ONLINE_ATTENTION_MISCONCEPTIONS),
    "expand_kv": (check_expand_kv, expand, exercises.EXPAND_KV_MISCONCEPTIONS),
}

LISTED_MISTAKES = [
    ("online_attention", starts_at_zero, "the running maximum starts at 0 instead of -inf"),
    ("online_attention", exp_without_a_maximum, "did not subtract the row's max"),
    ("online_attention", never_divided, "the output is not divided by the normaliser at the end"),
    ("online_attention", per_tile_softmax, "a softmax per tile, then averaged"),
    ("expand_kv", lambda x, g: x.repeat(1, g, 1, 1), "heads tiled with repeat instead of repeat_interleave"),
    ("expand_kv", lambda x, g: x.repeat_interleave(g, dim=2), "repeated along the wrong axis"),
    ("expand_kv", lambda x, g: x.repeat_interleave(g, dim=0), "repeated along the wrong axis"),
]  # fmt: skip

(
    test_independent_solution_is_correct,
    test_stub_is_not_attempted,
    test_listed_mistakes_are_named,
    test_every_misconception_is_told_apart,
    test_unknown_wrong_answer_is_incorrect,
    test_a_crash_is_reported_not_raised,
) = table_tests(CHECKERS, LISTED_MISTAKES)


def test_a_softmax_over_the_whole_row_is_noted():
    result = check_online_attention(lambda s, v, t: torch.softmax(s, dim=-1) @ v, verbose=False)
    assert result.correct and "`torch.softmax`" in result.message and "write it from the steps" in result.message


# ------------------------------------------------------------------ the checkers of several outputs or a number


@pytest.mark.parametrize(
    ("checker", "mistakes", "right"),
    [
        (check_online_update, exercises.ONLINE_UPDATE_MISCONCEPTIONS, update),
        (check_kv_cache_bytes, exercises.KV_CACHE_BYTES_MISCONCEPTIONS, cache_bytes),
    ],
    ids=["online_update", "kv_cache_bytes"],
)
def test_right_answers_pass_and_each_mistake_is_told_its_symptom_then_named(checker, mistakes, right):
    assert checker(right, verbose=False).correct
    for mistake in mistakes:
        first = checker(mistake.implementation, verbose=False)
        assert first.misconception == mistake.name and first.message == first.symptom, mistake.name
        assert mistake.symptom in first.message and mistake.name not in first.message
        again = checker(mistake.implementation, verbose=False)
        assert again.message == again.diagnosis and mistake.hint in again.message
        assert mistake.fix in again.fix and mistake.fix not in again.message


def test_online_update_names_mistakes_written_by_hand():
    named = {
        "the running sums are not rescaled when the maximum grows": {"rescale_norm": False, "rescale_out": False},
        "the output is rescaled but not the normaliser": {"rescale_norm": False},
        "the normaliser is rescaled but not the output": {"rescale_out": False},
        "the rescale factor is upside down": {"factor_sign": -1},
    }
    for name, options in named.items():
        result = check_online_update(lambda *a, o=options: update(*a, **o), verbose=False)
        assert result.misconception == name, result.message


def test_kv_cache_bytes_takes_any_whole_number_and_nothing_else():
    assert check_kv_cache_bytes(lambda *a: float(cache_bytes(*a)), verbose=False).correct
    assert check_kv_cache_bytes(lambda *a: np.int64(cache_bytes(*a)), verbose=False).correct
    assert not check_kv_cache_bytes(lambda *a: str(cache_bytes(*a)), verbose=False).correct
    assert check_kv_cache_bytes(lambda *a: cache_bytes(*a) + 1, verbose=False).status == "incorrect"
    with pytest.raises(TypeError, match="learner must be a function"):
        check_kv_cache_bytes(42)


# ------------------------------------------------------------------ answers fitted to what the checker shows


def fitted(right, wrong, teaching_shapes):
    """Right on the shapes of the teaching cases (the ones the messages name), ``wrong`` on any other."""

    def answer(*args):
        first = next(a for a in args if isinstance(a, torch.Tensor) and a.ndim > 0)
        return (right if tuple(first.shape) in teaching_shapes else wrong)(*args)

    return answer


TEACHING_BYTES = {(32, 32, 8, 128, 131072, 1, 2), (12, 12, 12, 64, 1024, 4, 4), (80, 64, 8, 128, 4096, 2, 2)}


def bytes_looked_up(*args):
    # The three teaching models looked up, anything else guessed without the factor 2.
    return cache_bytes(*args) if args in TEACHING_BYTES else cache_bytes(*args) // 2


FITTED = {
    "online_update": (
        check_online_update,
        fitted(update, lambda *a: update(*a, rescale_norm=False, rescale_out=False), {(3, 1)}),
    ),
    "online_attention": (check_online_attention, fitted(online, per_tile_softmax, {(4, 10), (2, 8), (3, 5), (3, 7)})),
    "expand_kv": (
        check_expand_kv,
        fitted(expand, lambda x, g: x.repeat(1, g, 1, 1), {(2, 2, 5, 3), (1, 4, 3, 2), (1, 1, 6, 4)}),
    ),
    "kv_cache_bytes": (check_kv_cache_bytes, bytes_looked_up),
}


@pytest.mark.parametrize("name", sorted(FITTED))
def test_an_answer_fitted_to_the_teaching_cases_meets_a_case_drawn_for_it(name):
    checker, answer = FITTED[name]
    result = checker(answer, verbose=False)
    assert result.status == "incorrect", result.message
    assert "drawn at random for your code" in result.message and result.case is not None


@pytest.mark.parametrize(
    ("checker", "answer"),
    [
        (check_online_update, lambda *a: update(*a, dtype=torch.float64)),
        (check_online_attention, lambda s, v, t: online(s, v, t, dtype=torch.float64)),
        (check_expand_kv, lambda x, g: x.double().repeat_interleave(g, dim=1)),
    ],
    ids=["online_update", "online_attention", "expand_kv"],
)
def test_an_answer_fitted_to_float64_is_refused_on_float32_inputs(checker, answer):
    result = checker(answer, verbose=False)
    assert result.status == "incorrect", result.message
    assert "returned dtype torch.float64 for torch.float32 inputs" in result.message


@pytest.mark.parametrize(
    ("checker", "answer"),
    [
        (check_online_update, lambda *a: update(*a, dtype=torch.float32)),
        (check_online_attention, lambda s, v, t: online(s, v, t, dtype=torch.float32)),
    ],
    ids=["online_update", "online_attention"],
)
def test_a_right_answer_computed_in_float32_is_accepted(checker, answer):
    assert checker(answer, verbose=False).correct


# ------------------------------------------------------------------ the notebook's settings are not the answer's

RIGHT = {
    "online_update": (check_online_update, update),
    "online_attention": (check_online_attention, online),
    "expand_kv": (check_expand_kv, expand),
    "kv_cache_bytes": (check_kv_cache_bytes, cache_bytes),
}
test_a_right_answer_that_changes_a_global_setting_is_told_so_and_the_setting_is_back = state_change_tests(RIGHT)


# ------------------------------------------------------------------ a catalogue of learner slips


def update_against_the_old_maximum(running_max, normaliser, output, scores, values):
    new_max = torch.maximum(running_max, scores.amax(-1, keepdim=True))
    weights = torch.exp(scores - running_max)  # the tile measured against the maximum before it
    return new_max, normaliser + weights.sum(-1, keepdim=True), output + weights @ values


def attention_dividing_every_tile(s, v, t):
    m = torch.full((s.shape[0], 1), -math.inf, dtype=s.dtype)
    norm, o = torch.zeros_like(m), torch.zeros(s.shape[0], v.shape[1], dtype=s.dtype)
    for a in range(0, s.shape[1], t):
        m, norm, o = update(m, norm, o, s[:, a : a + t], v[a : a + t])
        o = o / norm  # normalised too early, then rescaled as if it were a sum
    return o


def expand_through_a_new_leading_axis(x, groups):
    return x[None].expand(groups, *x.shape).transpose(0, 1).reshape(x.shape[0], -1, *x.shape[2:])


CATALOGUE = [
    Wrong(check_online_update, "rescaled the output only", lambda *a: update(*a, rescale_norm=False),
          "the output is rescaled but not the normaliser"),
    Wrong(check_online_update, "exp(new - old)", lambda *a: update(*a, factor_sign=-1),
          "the rescale factor is upside down", ("at most 1",)),
    Wrong(check_online_update, "the tile against the old maximum", update_against_the_old_maximum,
          "the sums are measured against the old maximum"),
    Wrong(check_online_attention, "torch.zeros for the running maximum", starts_at_zero,
          "the running maximum starts at 0 instead of -inf", ("0 / 0",)),
    Wrong(check_online_attention, "exp of the raw scores, no maximum", exp_without_a_maximum,
          "did not subtract the row's max", ("overflows",)),
    Wrong(check_online_attention, "no division at the end", never_divided,
          "the output is not divided by the normaliser at the end"),
    Wrong(check_online_attention, "divides after every tile", attention_dividing_every_tile),
    Wrong(check_online_attention, "softmax per tile", per_tile_softmax, "a softmax per tile, then averaged"),
    Wrong(check_expand_kv, "a new leading axis, expanded", expand_through_a_new_leading_axis,
          "heads tiled with repeat instead of repeat_interleave"),
    Wrong(check_expand_kv, "repeat_interleave on the sequence axis", lambda x, g: x.repeat_interleave(g, dim=-2),
          "repeated along the wrong axis"),
    Wrong(check_kv_cache_bytes, "num_heads", lambda n, h, kv, d, t, b, e: 2 * n * h * d * t * b * e,
          "counted the query heads instead of the key/value heads", ("never cached",)),
    Wrong(check_kv_cache_bytes, "bits", lambda n, h, kv, d, t, b, e: 16 * n * kv * d * t * b * e,
          "counted bits, not bytes"),
    Wrong(check_kv_cache_bytes, "batch left out", lambda n, h, kv, d, t, b, e: 2 * n * kv * d * t * e,
          "left out the batch"),
    Wrong(check_kv_cache_bytes, "one layer", lambda n, h, kv, d, t, b, e: 2 * kv * d * t * b * e,
          "left out the layers"),
    Wrong(check_kv_cache_bytes, "in GiB", lambda *a: cache_bytes(*a) / 2**30),
]  # fmt: skip

test_no_checker_accepts_a_wrong_answer_and_names_it, test_the_catalogue_is_counted = catalogue_tests(
    CATALOGUE, "notebook 08"
)


# ------------------------------------------------------------------ the committed notebook
