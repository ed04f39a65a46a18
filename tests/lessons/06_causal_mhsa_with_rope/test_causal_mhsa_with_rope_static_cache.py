"""Notebook 06's exercise 6, the learner's preallocated cache (``check_static_cache``): the right cache is accepted,
holds what concatenating every chunk holds, refuses an append past ``max_len`` and decodes as PyTorch's causal
attention over the whole sequence; each known mistake is told by its symptom, then named; a mistake the probes do
not single out is never named."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from mhsa_helpers.lessons.causal_mhsa_with_rope import check_static_cache


class Right:
    def __init__(self, max_len):
        self.max_len, self.length = max_len, 0
        self.k = self.v = None

    def make_buffers(self, k, v, make=torch.Tensor.new_zeros):
        if self.k is None:
            self.k = make(k, (*k.shape[:-2], self.max_len, k.shape[-1]))
            self.v = make(v, (*v.shape[:-2], self.max_len, v.shape[-1]))

    def append(self, k, v):
        new = k.shape[-2]
        if self.length + new > self.max_len:
            raise ValueError(f"the cache is full: it holds {self.length} tokens, {new} more exceed {self.max_len}")
        self.make_buffers(k, v)
        end = self.length + new
        self.k[:, :, self.length : end], self.v[:, :, self.length : end] = k, v
        self.length = end
        return self.k[:, :, :end], self.v[:, :, :end]


class WholeBuffer(Right):
    def append(self, k, v):
        super().append(k, v)
        return self.k, self.v


class WholeEmptyBuffer(Right):
    def append(self, k, v):
        self.make_buffers(k, v, torch.Tensor.new_empty)  # rows never written hold whatever the memory held
        super().append(k, v)
        return self.k, self.v


class AtSlot0(Right):
    def append(self, k, v):
        keys, values = super().append(k, v)
        new = k.shape[-2]
        self.k[:, :, :new], self.v[:, :, :new] = k, v
        return keys, values


class CountsAppends(Right):
    def append(self, k, v):
        self.make_buffers(k, v)
        start = self.length
        self.k[:, :, start : start + k.shape[-2]], self.v[:, :, start : start + k.shape[-2]] = k, v
        self.length += 1
        return self.k[:, :, : self.length], self.v[:, :, : self.length]


class NewOnly(Right):
    def append(self, k, v):
        super().append(k, v)
        return k, v


class Clips(Right):
    def append(self, k, v):
        room = self.max_len - self.length
        return super().append(k[..., :room, :], v[..., :room, :])


class NoCheck(Right):
    def append(self, k, v):
        self.make_buffers(k, v)
        end = self.length + k.shape[-2]
        self.k[:, :, self.length : end], self.v[:, :, self.length : end] = k, v  # past max_len: torch's own error
        self.length = end
        return self.k[:, :, :end], self.v[:, :, :end]


class CountsFirst(Right):
    def append(self, k, v):
        start = self.length
        self.length += k.shape[-2]
        if self.length > self.max_len:
            raise ValueError("the cache is full")
        self.length = start
        return super().append(k, v)


class Concatenating(Right):
    def append(self, k, v):
        if self.length + k.shape[-2] > self.max_len:
            raise ValueError("the cache is full")
        if self.k is not None:
            k, v = torch.cat((self.k, k), dim=-2), torch.cat((self.v, v), dim=-2)
        self.k, self.v, self.length = k, v, k.shape[-2]
        return k, v


class Clones(Right):
    def append(self, k, v):
        keys, values = super().append(k, v)
        return keys.clone(), values.clone()


class DefaultDtype(Right):
    def append(self, k, v):
        self.make_buffers(k, v, lambda like, shape: torch.zeros(shape))  # float32, whatever the keys are
        return super().append(k, v)


def test_the_right_cache_is_accepted_holds_every_chunk_and_decodes_as_causal_attention():
    assert check_static_cache(Right, verbose=False).message == (
        "[static_cache] correct on all 8 cases (4 given, 4 drawn at random for your code)."
    )
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 2, 3, 9, 5, dtype=torch.float64).unbind(0)
    cache, outputs = Right(max_len=9), []
    for start, end in ((0, 4), (4, 5), (5, 7), (7, 9)):
        keys, values = cache.append(k[..., start:end, :], v[..., start:end, :])
        torch.testing.assert_close(keys, torch.cat([k[..., :start, :], k[..., start:end, :]], dim=-2), rtol=0, atol=0)
        assert cache.length == end and values.shape == (2, 3, end, 5)
        # The new queries sit at start .. end - 1 and see the keys up to themselves: a mask aligned to the last key.
        allowed = torch.ones(end - start, end, dtype=torch.bool).tril(diagonal=start)
        outputs.append(F.scaled_dot_product_attention(q[..., start:end, :], keys, values, attn_mask=allowed))
    torch.testing.assert_close(torch.cat(outputs, dim=-2), F.scaled_dot_product_attention(q, k, v, is_causal=True))
    with pytest.raises(ValueError, match="holds 9 tokens, 1 more exceed 9"):
        cache.append(k[..., :1, :], v[..., :1, :])
    assert cache.length == 9


@pytest.mark.parametrize(
    ("wrong", "symptom", "name"),
    [
        (WholeBuffer, "has max_len rows along the sequence axis", "the whole buffer returned"),
        (WholeEmptyBuffer, "has max_len rows along the sequence axis", "the whole buffer returned"),
        (AtSlot0, "The first rows of what append returns are the latest chunk's keys", "every chunk written at slot 0"),
        (CountsAppends, "Your length is right after appends of one token", "length counts the appends, not the tokens"),
        (NewOnly, "has the size of the latest chunk", "only the new keys and values returned"),
        (Clips, "max_len=5 returns without an error", "an append past max_len goes through"),
        (NoCheck, "fails, but not with a ValueError", "an append past max_len left to torch's error"),
        (CountsFirst, "no longer the 4 tokens it holds", "the refused append changed the length"),
        (Concatenating, "sit in different memory from one append to the next", "new memory at every append"),
        (Clones, "sit in different memory from one append to the next", "new memory at every append"),
        (DefaultDtype, "your append returns tensors of another dtype", "the buffers not made in the keys' dtype"),
    ],
    ids=["whole buffer", "whole empty buffer", "slot 0", "appends", "new only", "clips", "torch's error",
         "counts first", "torch.cat", "clone", "default dtype"],
)  # fmt: skip
def test_a_known_mistake_is_told_by_its_symptom_then_named(wrong, symptom, name):
    first = check_static_cache(wrong, verbose=False)
    assert not first.correct and symptom in first.message and name not in first.message
    again = check_static_cache(wrong, verbose=False)
    assert again.misconception == name and f"this looks like '{name}'" in again.message


def test_a_refusal_of_tokens_that_fit_is_told_with_the_numbers_at_the_learners_line():
    class RefusesAFullFit(Right):
        def append(self, k, v):
            if self.length + k.shape[-2] >= self.max_len:
                raise ValueError("the cache is full")
            return super().append(k, v)

    result = check_static_cache(RefusesAFullFit, verbose=False)
    assert result.status == "incorrect" and result.misconception is None
    assert "append refused 2 token(s) with 5 held and max_len=7" in result.message
    assert "but they fit: 5 + 2 = 7 is not more than 7" in result.message and "(in append, line" in result.message


def test_a_wrong_cache_is_never_named_after_a_property_it_also_lacks():
    # Keys and values swapped, and nothing refused past max_len: the probes show the second, the numbers the first.
    class SwapsAndClips(Clips):
        def append(self, k, v):
            keys, values = super().append(k, v)
            return values, keys

    for _ in range(2):
        result = check_static_cache(SwapsAndClips, verbose=False)
        assert result.status == "incorrect" and result.misconception is None
        assert "output 2 (the keys returned)" in result.message


def test_a_placeholder_is_not_attempted_and_a_value_is_not_a_cache():
    class Placeholder:
        def __init__(self, max_len):
            raise NotImplementedError

    assert check_static_cache(Placeholder, verbose=False).status == "not_attempted"
    with pytest.raises(TypeError, match=r"learner must be a function or a class \(your MyStaticCache\), got int"):
        check_static_cache(3)
