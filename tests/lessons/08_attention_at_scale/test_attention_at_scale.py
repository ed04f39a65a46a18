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
