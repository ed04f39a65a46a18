"""Notebook 06's exercise 5, the learner's own KV cache (``check_kv_cache``): the right cache is accepted and is the
cache the package's module decodes with; each known mistake is told by its symptom, then named; other wrong caches are
rejected at their own line."""

from __future__ import annotations

import pytest
import torch

from mhsa_helpers.lessons.causal_mhsa_with_rope import check_kv_cache
from mhsa_helpers.teaching.modules import CacheWithLengthAndAppend


class Right:
    def __init__(self):
        self.keys = self.values = None
        self.length = 0

    def append(self, k, v):
        if self.keys is not None:
            k, v = torch.cat((self.keys, k), dim=-2), torch.cat((self.values, v), dim=-2)
        self.keys, self.values, self.length = k, v, k.shape[-2]
        return k, v


class CountsAppends(Right):
    def append(self, k, v):
        k, v = super().append(k, v)
        self.appends = getattr(self, "appends", 0) + 1
        self.length = self.appends
        return k, v


class LastChunk(Right):
    def append(self, k, v):
        keys, values = super().append(k, v)
        self.length = k.shape[-2]
        return keys, values


class NewOnly(Right):
    def append(self, k, v):
        super().append(k, v)
        return k, v


class NewFirst(Right):
    def append(self, k, v):
        if self.keys is not None:
            k, v = torch.cat((k, self.keys), dim=-2), torch.cat((v, self.values), dim=-2)
        self.keys, self.values, self.length = k, v, k.shape[-2]
        return k, v


class HeadsAxis(Right):
    def append(self, k, v):
        if self.keys is not None:
            k, v = torch.cat((self.keys, k), dim=1), torch.cat((self.values, v), dim=1)
        self.keys, self.values, self.length = k, v, k.shape[-2]
        return k, v


class SwapsKeysAndValues(Right):
    def append(self, k, v):
        keys, values = super().append(k, v)
        return values, keys


def test_the_right_cache_is_accepted_and_holds_what_the_module_checkers_cache_holds():
    result = check_kv_cache(Right, verbose=False)
    assert result.correct and result.message == "[kv_cache] correct on all 3 cases."
    mine, theirs = Right(), CacheWithLengthAndAppend()  # the cache notebook 06's module checker decodes with
    for new in (4, 1, 2):
        k, v = torch.randn(2, 3, new, 5), torch.randn(2, 3, new, 5)
        for got, expected in zip(mine.append(k, v), theirs.append(k, v), strict=True):
            torch.testing.assert_close(got, expected, rtol=0, atol=0)
        assert mine.length == theirs.length


@pytest.mark.parametrize(
    ("wrong", "symptom", "name"),
    [
        (CountsAppends, "Your length is right after appends of one token", "length counts the appends, not the tokens"),
        (
            LastChunk,
            "Your length after each append is the size of that append alone",
            "length is the size of the last chunk",
        ),
        (NewOnly, "What append returns has the size of the latest chunk", "only the new keys and values returned"),
        (NewFirst, "The right keys, in the wrong order.", "the new tokens put first"),
    ],
    ids=["appends", "last chunk", "new only", "new first"],
)
def test_a_known_mistake_is_told_by_its_symptom_then_named(wrong, symptom, name):
    first = check_kv_cache(wrong, verbose=False)
    assert not first.correct and symptom in first.message and name not in first.message
    again = check_kv_cache(wrong, verbose=False)
    assert again.misconception == name and f"this looks like '{name}'" in again.message


def test_other_wrong_caches_are_rejected_at_their_line_with_the_shapes_they_were_given():
    crashed = check_kv_cache(HeadsAxis, verbose=False)
    assert crashed.status == "error" and "(in append, line" in crashed.message
    assert "It was called with [(a tensor of shape (2, 3, 3, 4), a tensor of shape (2, 3, 3, 4)), " in crashed.message
    swapped = check_kv_cache(SwapsKeysAndValues, verbose=False)
    assert swapped.status == "incorrect" and swapped.misconception is None
    assert "output 2 (the keys returned)" in swapped.message and "output 3 (the values returned)" in swapped.message


def test_a_placeholder_is_not_attempted_and_a_value_is_not_a_cache():
    class Placeholder:
        def __init__(self):
            raise NotImplementedError

    assert check_kv_cache(Placeholder, verbose=False).status == "not_attempted"
    with pytest.raises(TypeError, match=r"learner must be a function or a class \(your MyKVCache\), got int"):
        check_kv_cache(3)
