"""Notebook 08's lesson pieces: the checkers accept right answers and name each mistake, the
explorers draw what the core computes, the diagrams show the tiles and the head groups."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import pytest
import torch

from mhsa_helpers.kv_cache_memory import kv_cache_bytes_for
from mhsa_helpers.lessons.attention_at_scale import (
    cache_explorer,
    check_expand_kv,
    check_kv_cache_bytes,
    check_online_attention,
    check_online_update,
    head_groups_diagram,
    kv_heads_explorer,
    tiles_diagram,
    tiles_explorer,
)
from mhsa_helpers.tiled_attention import tile_kinds


def update(m, norm, o, s, v, *, rescale_norm=True, rescale_out=True, factor_sign=1):
    new = torch.maximum(m, s.amax(-1, keepdim=True))
    r = torch.exp(factor_sign * (m - new))
    w = torch.exp(s - new)
    return new, (norm * r if rescale_norm else norm) + w.sum(-1, keepdim=True), (o * r if rescale_out else o) + w @ v


def test_online_update_checker():
    assert check_online_update(update, verbose=False).correct
    named = {
        "the running sums are not rescaled when the maximum grows": dict(rescale_norm=False, rescale_out=False),
        "the output is rescaled but not the normaliser": dict(rescale_norm=False),
        "the normaliser is rescaled but not the output": dict(rescale_out=False),
        "the rescale factor is upside down": dict(factor_sign=-1),
    }
    for name, options in named.items():
        result = check_online_update(lambda *a, o=options: update(*a, **o), verbose=False)
        assert result.misconception == name, result.message


def online(s, v, t, *, start=-math.inf, divide=True):
    m = torch.full((s.shape[0], 1), start, dtype=s.dtype)
    norm, o = torch.zeros_like(m), torch.zeros(s.shape[0], v.shape[1], dtype=s.dtype)
    for a in range(0, s.shape[1], t):
        m, norm, o = update(m, norm, o, s[:, a : a + t], v[a : a + t])
    return o / norm if divide else o


def test_online_attention_checker():
    assert check_online_attention(online, verbose=False).correct
    assert (
        check_online_attention(lambda s, v, t: online(s, v, t, start=0.0), verbose=False).misconception
        == "the running maximum starts at 0 instead of -inf"
    )
    assert (
        check_online_attention(lambda s, v, t: online(s, v, t, divide=False), verbose=False).misconception
        == "the output is not divided by the normaliser at the end"
    )
    # Each tile's own softmax, averaged: wrong, and rejected.
    assert not check_online_attention(
        lambda s, v, t: (
            sum(torch.softmax(s[:, a : a + t], -1) @ v[a : a + t] for a in range(0, s.shape[1], t))
            / math.ceil(s.shape[1] / t)
        ),
        verbose=False,
    ).correct


def test_expand_kv_checker():
    assert check_expand_kv(lambda x, g: x.repeat_interleave(g, dim=1), verbose=False).correct
    assert check_expand_kv(lambda x, g: x.repeat(1, g, 1, 1), verbose=False).misconception == (
        "heads tiled with repeat instead of repeat_interleave"
    )
    for dim in (0, 2):
        result = check_expand_kv(lambda x, g, d=dim: x.repeat_interleave(g, dim=d), verbose=False)
        assert result.misconception == "repeated along the wrong axis"
    # expand + reshape is another correct way.
    assert check_expand_kv(
        lambda x, g: x[:, :, None].expand(-1, -1, g, -1, -1).reshape(x.shape[0], -1, *x.shape[2:]), verbose=False
    ).correct


def test_kv_cache_bytes_checker():
    def right(n, h, kv, d, t, b, e):
        return 2 * n * kv * d * t * b * e

    assert check_kv_cache_bytes(right, verbose=False).correct
    assert check_kv_cache_bytes(lambda *a: float(right(*a)), verbose=False).correct
    assert check_kv_cache_bytes(lambda *a: right(*a) // 2, verbose=False).misconception == (
        "forgot the factor 2 (keys and values)"
    )
    assert check_kv_cache_bytes(
        lambda n, h, kv, d, t, b, e: right(n, h, h, d, t, b, e), verbose=False
    ).misconception == ("counted the query heads instead of the key/value heads")
    assert not check_kv_cache_bytes(lambda *a: str(right(*a)), verbose=False).correct
    with pytest.raises(TypeError, match="learner must be a function"):
        check_kv_cache_bytes(42)


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
