"""Notebook 08's lesson pieces: the explorers draw what the core computes, the diagrams show the tiles and
the head groups (the checkers: ``test_attention_at_scale_checkers.py``)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest
import torch

from mhsa_helpers.kv_cache_memory import kv_cache_bytes_for
from mhsa_helpers.lessons.attention_at_scale import (
    cache_explorer,
    head_groups_diagram,
    kv_heads_explorer,
    tiles_diagram,
    tiles_explorer,
)
from mhsa_helpers.tiled_attention import tile_kinds


def test_tiles_explorer_follows_the_core():
    explorer = tiles_explorer(tile_size=4, causal=True)
    try:
        kinds = tile_kinds(16, 16, tile_size=4, causal=True)
        computed = sum(kind != "skipped" for row in kinds for kind in row) / 16
        assert explorer.data["computed_fraction"] == pytest.approx(computed)
        assert explorer.data["ends"] == [4, 8, 12, 16]
        assert (torch.tensor(explorer.data["running_max"]).diff() >= 0).all()
        assert explorer.update(causal=False).data["computed_fraction"] == 1.0
        assert explorer.update(tile_size=16).data["ends"] == [16]
        with pytest.raises(ValueError, match="tile_size"):
            explorer.update(tile_size=0)
    finally:
        explorer.close()


def test_kv_heads_explorer():
    explorer = kv_heads_explorer(num_heads=8, num_kv_heads=2)
    try:
        assert explorer.data["reads"] == [0, 0, 0, 0, 1, 1, 1, 1]
        assert explorer.update(num_kv_heads=1).data["cache_fraction"] == 1 / 8
        assert "multi-head" in explorer.update(num_kv_heads=8).data["caption"]
    finally:
        explorer.close()
    with pytest.raises(ValueError, match="num_kv_heads"):
        kv_heads_explorer(num_heads=8, num_kv_heads=3)


def test_cache_explorer_matches_the_calculator():
    explorer = cache_explorer(model="Llama-2-70B", tokens=4096, batch=2, dtype="float16")
    try:
        gqa = kv_cache_bytes_for("Llama-2-70B", tokens=4096, batch=2, dtype="float16") / 2**30
        assert explorer.data["gib"][1] == pytest.approx(gqa)
        assert explorer.data["gib"][0] == pytest.approx(8 * gqa)  # 64 heads against 8
        with pytest.raises(ValueError, match="tokens"):
            explorer.update(tokens=1000)
    finally:
        explorer.close()


def test_diagrams_draw_the_tiles_and_the_groups():
    fig = tiles_diagram(seq=8, tile_size=3, causal=True)
    assert any("tiles of 3" in ax.get_title() for ax in fig.axes)
    fig = head_groups_diagram(num_heads=8, num_kv_heads=2)
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert [t for t in texts if t.startswith("q") and t[1:].isdigit()] == [f"q{h}" for h in range(8)]
    assert [t for t in texts if t.startswith("kv")] == ["kv0", "kv1"]
    with pytest.raises(ValueError, match="num_kv_heads must divide num_heads"):
        head_groups_diagram(num_heads=8, num_kv_heads=3)


# ---------------------------------------------------------------- the kinds named as their papers define them

# (query heads, key/value heads, kind). Shazeer (2019), "Fast Transformer Decoding: One Write-Head is
# All You Need": multi-query attention has many query heads that share a single key/value head.
# Ainslie et al. (2023), "GQA": grouped-query attention divides the query heads into groups, one
# key/value head per group, "interpolating" between multi-query (one group) and multi-head (as
# many groups as heads). One query head with its one key/value head shares nothing with anyone: it
# is plain single-head attention, which is multi-head attention with h = 1 (Vaswani et al., 2017),
# never MQA, whatever ``num_kv_heads == 1`` would suggest.
KINDS = [
    (1, 1, "MHA"),
    (8, 1, "MQA"),
    (8, 2, "GQA"),
    (8, 4, "GQA"),
    (8, 8, "MHA"),
    (2, 1, "MQA"),  # the smallest MQA: two query heads, one shared key/value head
    (2, 2, "MHA"),
]
WORDS = {"MHA": "multi-head", "MQA": "multi-query", "GQA": "grouped-query"}


@pytest.mark.parametrize(("num_heads", "num_kv_heads", "kind"), KINDS)
def test_the_head_groups_diagram_names_the_kind_of_the_definitions(num_heads, num_kv_heads, kind):
    """Notebook 08's picture of which query heads read which key/value head: its title names the
    kind. The same one-head fault there would title one lone head "multi-query attention"."""
    title = head_groups_diagram(num_heads=num_heads, num_kv_heads=num_kv_heads).axes[0].get_title()
    assert title.startswith(f"{WORDS[kind]} attention:"), title
    # and counts in words: "1 query head", "8 query heads"
    heads = f"{num_heads} query head{'s' if num_heads > 1 else ''}"
    kv = f"{num_kv_heads} key/value head{'s' if num_kv_heads > 1 else ''}"
    assert title.endswith(f": {heads}, {kv}"), title


@pytest.mark.parametrize(("num_heads", "num_kv_heads", "kind"), KINDS)
def test_the_kv_heads_explorer_names_the_kind_of_the_definitions(num_heads, num_kv_heads, kind):
    """Notebook 08's explorer of the same picture: its caption names the kind, and says how many
    query heads read each key/value head (1 for MHA, all of them for MQA)."""
    explorer = kv_heads_explorer(num_heads=num_heads, num_kv_heads=num_kv_heads)
    try:
        caption = explorer.data["caption"]
    finally:
        explorer.close()
    assert caption.startswith(f"{WORDS[kind]} attention:"), caption
    assert f"each read by {num_heads // num_kv_heads} query head(s)" in caption
