"""Notebook 10's pieces: every bug of the zoo does damage and its fix is the right computation;
the checkers accept the right answers, name each mistake and reject other wrong ones."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import pytest
import torch
import torch.nn.functional as F

from mhsa_helpers import causal_mask, softmax
from mhsa_helpers.lessons.mistakes_that_circulate import (
    BUGS,
    bug,
    bug_names,
    bug_zoo_explorer,
    check_decode_mask,
    check_masked_weights,
)
from mhsa_helpers.lessons.mistakes_that_circulate.diagrams import MISTAKE_SITES, mistake_map_diagram

# ---------------------------------------------------------------- the zoo


@pytest.mark.parametrize("item", BUGS, ids=lambda b: b.name)
def test_every_bug_does_visible_damage_and_its_fix_is_well_formed(item):
    demo = item.run()
    assert demo.buggy.shape == demo.fixed.shape and demo.buggy.ndim == 2
    assert len(demo.rows) == demo.buggy.shape[0] and len(demo.cols) == demo.buggy.shape[1]
    assert demo.damage > 0.4
    assert torch.isfinite(demo.fixed).all() and torch.isfinite(demo.buggy).all()
    if demo.kind == "weights":
        torch.testing.assert_close(demo.fixed.sum(-1), torch.ones(demo.fixed.shape[0]))
        assert (demo.fixed >= 0).all()
    else:
        assert demo.kind == "output"
    assert demo.symptom and item.fix and item.seen and item.mistake


def test_the_fixes_are_what_pytorch_computes():
    inverted = bug("inverted boolean mask").run()
    # The fixed weights are causal; the buggy ones put all of the first row on later tokens.
    assert (inverted.fixed.triu(1) == 0).all()
    assert float(inverted.buggy[0, 1:].sum()) == pytest.approx(1.0)
    top_left = bug("top-left causal mask with a cache").run()
    assert ((top_left.fixed > 0) == causal_mask(3, 6)).all()
    assert ((top_left.buggy > 0) == torch.ones(3, 6, dtype=torch.bool).tril()).all()
    additive = bug("additive -10000 mask").run()
    assert float(additive.buggy[1, 2]) == pytest.approx(1.0)  # 'journey' reads the future key 'starts'
    assert (additive.fixed.triu(1) == 0).all()


def test_caching_keys_before_rope_loses_positions_entirely():
    # Rotating query and every cached key by the same angle leaves their dot products unchanged:
    # the buggy decoder computes attention without positions.
    demo = bug("keys cached before RoPE").run()
    assert "no positions at all" in demo.symptom
    g = torch.Generator().manual_seed(4)
    q, k = torch.randn(1, 1, 6, 8, generator=g), torch.randn(1, 1, 6, 8, generator=g)
    plain = softmax((q @ k.transpose(-2, -1) / math.sqrt(8)).masked_fill(~causal_mask(6), -math.inf))[0, 0]
    torch.testing.assert_close(demo.buggy, plain, atol=1e-6, rtol=1e-5)


def test_gqa_with_repeat_is_wrong_only_where_the_tiling_differs():
    g = torch.Generator().manual_seed(0)
    k = torch.randn(1, 2, 3, 4, generator=g)
    right, wrong = k.repeat_interleave(2, dim=1), k.repeat(1, 2, 1, 1)
    assert [torch.equal(right[:, h], wrong[:, h]) for h in range(4)] == [True, False, False, True]
    q = torch.randn(1, 4, 3, 4, generator=g)
    torch.testing.assert_close(
        F.scaled_dot_product_attention(q, right, right), F.scaled_dot_product_attention(q, k, k, enable_gqa=True)
    )


def test_bug_lookup_names_a_bad_name():
    assert bug_names()[0] == BUGS[0].name and len(bug_names()) == len(BUGS) == 8
    with pytest.raises(ValueError, match="name must be one of"):
        bug("off by one")


# ---------------------------------------------------------------- checkers


def right_weights(scores, allowed):
    return softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)


MASKED_WEIGHTS_MISTAKES = {
    "mask added after the softmax": lambda s, a: softmax(s, dim=-1) + torch.zeros_like(s).masked_fill(~a, -math.inf),
    "weights zeroed after the softmax, not renormalised": lambda s, a: softmax(s, dim=-1) * a,
    "mask polarity inverted (True read as blocked)": lambda s, a: softmax(s.masked_fill(a, -math.inf), dim=-1),
    "blocked scores set to 0 instead of -inf": lambda s, a: softmax(s.masked_fill(~a, 0.0), dim=-1),
    "blocked scores pushed down by adding -10000": lambda s, a: softmax(s - 10_000.0 * (~a), dim=-1),
    "softmax over the wrong dimension": lambda s, a: torch.softmax(s.masked_fill(~a, -math.inf), dim=-2),
}


def test_masked_weights_accepts_right_answers_written_differently():
    assert check_masked_weights(right_weights, verbose=False).correct
    # A finite fill far below every score is as good as -inf here, and renormalising the zeroed weights too.
    assert check_masked_weights(lambda s, a: torch.softmax(s.masked_fill(~a, -1e30), dim=-1), verbose=False).correct

    def renormalised(s, a):
        w = torch.softmax(s, dim=-1) * a
        return w / w.sum(-1, keepdim=True)

    # exp overflows nowhere here (softmax subtracts the max), but the -24000 row underflows to 0/0:
    result = check_masked_weights(renormalised, verbose=False)
    assert not result.correct


@pytest.mark.parametrize("name", list(MASKED_WEIGHTS_MISTAKES))
def test_masked_weights_names_each_mistake(name):
    result = check_masked_weights(MASKED_WEIGHTS_MISTAKES[name], verbose=False)
    assert result.status == "misconception" and result.misconception == name


@pytest.mark.parametrize(
    "wrong",
    [
        lambda s, a: softmax(s - 1_000.0 * (~a), dim=-1),  # a smaller additive mask
        lambda s, a: torch.exp(s.masked_fill(~a, -math.inf)) / torch.exp(s).sum(-1, keepdim=True),
        lambda s, a: softmax(s, dim=-1),  # no mask at all
        lambda s, a: softmax(s * a, dim=-1),
        lambda s, a: a.to(s.dtype) / a.sum(-1, keepdim=True),  # uniform over the allowed keys
    ],
)
def test_masked_weights_rejects_other_wrong_answers(wrong):
    # (multiplying the scores by the mask is named as setting them to 0: it is the same computation)
    assert not check_masked_weights(wrong, verbose=False).correct


def right_decode_mask(past_len, new_len):
    return torch.ones(new_len, past_len + new_len, dtype=torch.bool).tril(diagonal=past_len)


DECODE_MASK_MISTAKES = {
    "causal mask aligned top-left": lambda p, n: torch.ones(n, p + n, dtype=torch.bool).tril(),
    "mask polarity inverted (True = blocked)": lambda p, n: torch.ones(n, p + n, dtype=torch.bool).triu(p + 1),
    "the query cannot see itself": lambda p, n: torch.ones(n, p + n, dtype=torch.bool).tril(p - 1),
    "off by one: the query sees the next token": lambda p, n: torch.ones(n, p + n, dtype=torch.bool).tril(p + 1),
    "a mask over the new tokens only": lambda p, n: torch.ones(n, n, dtype=torch.bool).tril(),
    "0/1 numbers instead of booleans": lambda p, n: torch.ones(n, p + n).tril(p),
}


def test_decode_mask_accepts_the_right_mask():
    assert check_decode_mask(right_decode_mask, verbose=False).correct
    assert check_decode_mask(lambda p, n: causal_mask(n, p + n), verbose=False).correct


@pytest.mark.parametrize("name", list(DECODE_MASK_MISTAKES))
def test_decode_mask_names_each_mistake(name):
    result = check_decode_mask(DECODE_MASK_MISTAKES[name], verbose=False)
    assert result.status == "misconception" and result.misconception == name


def test_decode_mask_rejects_a_mask_that_ignores_the_cache_length():
    assert not check_decode_mask(lambda p, n: torch.ones(n, p + n, dtype=torch.bool), verbose=False).correct


# ---------------------------------------------------------------- explorer and diagram


def test_explorer_shows_each_bug_next_to_its_fix_on_one_scale():
    explorer = bug_zoo_explorer()
    try:
        assert explorer.data["bug"] == BUGS[0].name
        for item in BUGS:
            data = explorer.update(bug=item.name).data
            demo = item.run()
            torch.testing.assert_close(torch.as_tensor(data["buggy"]), demo.buggy.double(), check_dtype=False)
            torch.testing.assert_close(torch.as_tensor(data["fixed"]), demo.fixed.double(), check_dtype=False)
            assert item.name in data["caption"]
        with pytest.raises(ValueError, match="bug"):
            explorer.update(bug="no such bug")
    finally:
        explorer.close()
    with pytest.raises(ValueError, match="bug"):
        bug_zoo_explorer(bug="no such bug")


def test_the_map_marks_every_site():
    fig = mistake_map_diagram()
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    for marker, _, _ in MISTAKE_SITES:
        assert marker in texts
    assert len(MISTAKE_SITES) == 8
