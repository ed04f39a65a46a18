"""Notebook 10's pieces: every bug of the zoo does damage and its fix is the right computation; the explorer
and the map draw them (the checkers: test_mistakes_that_circulate_checkers.py)."""

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
