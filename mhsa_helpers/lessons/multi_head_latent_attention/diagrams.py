"""Notebook 13's schematic diagrams: the data flow of one latent-attention layer with its shapes (what is cached,
what is rebuilt per head), and the two ways of scoring one new query against the cached latents (keys rebuilt, or
``W_UK`` absorbed into the query)."""

from __future__ import annotations

from matplotlib.figure import Figure

from ...teaching.diagrams import Canvas

__all__ = ["LATENT_COLOR", "ROPE_COLOR", "absorption_diagram", "latent_diagram"]

#: The cached latent's cells (``c_kv``): a purple that no role of the series uses.
LATENT_COLOR = "#bcbddc"
#: The cells of the position part (``q_r``, ``k_r``, rotated by RoPE).
ROPE_COLOR = "#fdae6b"
_CACHED = "#54278f"


def _cached(canvas: Canvas, box, text: str) -> None:
    """A note under ``box``'s shape, in the cache's colour: what this tensor is kept for."""
    canvas.text(text, at=(box.center[0], box.y - 1.05), size=9, color=_CACHED, fontweight="bold", va="top")


def _shape_beside(canvas: Canvas, box, shape: str) -> None:
    """``shape`` right of ``box`` (where an arrow leaves the box from below or enters it from above)."""
    canvas.text(shape, at=(box.x + box.width + 0.3, box.center[1]), ha="left", family="monospace")


def latent_diagram() -> Figure:
    """One layer of multi-head latent attention, left to right, with the shape of each tensor: ``x (seq, d_model)``
    is compressed into the latent ``c_kv (seq, d_latent)`` (cached), from which each head ``h`` rebuilds its keys
    ``k_h = c_kv W_UK_hᵀ`` and values ``v_h = c_kv W_UV_hᵀ``; ``x`` also gives one rotated key ``k_r (seq,
    d_rope)`` (cached, shared by every head). Each head's query has a content part ``q_h`` and a rotated part
    ``q_r_h`` (through the query latent ``c_q``); scores are taken between ``[q_h, q_r_h]`` and ``[k_h, k_r]``,
    scaled by ``1/√(d_head + d_rope)``, and the heads' outputs are merged by ``W_O``."""
    canvas = Canvas(width=27.5, height=17.0, title="one layer of multi-head latent attention", scale=0.36)
    x = canvas.tensor("x", rows=2, cols=3, at=(1.0, 8.0), shape="(seq, d_model)", name_side="left")
    # Queries: through the query latent, a content part and a rotated part per head.
    queries = canvas.op(
        "c_q = x W_DQᵀ\nq_h = c_q W_UQ_hᵀ\nq_r_h = RoPE(c_q W_QR_hᵀ)", at=(7.6, 14.0), width=6.4, height=2.6
    )
    canvas.arrow(x.top, queries.left)
    q = canvas.tensor(
        "[q_h, q_r_h]",
        rows=2,
        cols=3,
        at=(16.0, 13.0),
        cell_colors=[["query", "query", ROPE_COLOR]] * 2,
        shape="(seq, d_head + d_rope)",
    )
    canvas.arrow(queries.right, q.left, "each head h")
    # The rotated key: one for every head.
    rope = canvas.op("RoPE", at=(8.0, 11.5), width=2.2, height=1.0)
    canvas.arrow(x.right, rope.left, "· W_KRᵀ", label_offset=(-0.6, 0.3))
    k_r = canvas.tensor("k_r", rows=2, cols=1, at=(11.5, 10.5), color=ROPE_COLOR, shape="(seq, d_rope)")
    canvas.arrow(rope.right, k_r.left)
    _cached(canvas, k_r, "cached, one\nfor all heads")
    # The latent, and each head's keys and values rebuilt from it.
    c_kv = canvas.tensor("c_kv", rows=2, cols=2, at=(6.0, 3.5), color=LATENT_COLOR, shape="(seq, d_latent)")
    canvas.arrow(x.right, c_kv.left, "· W_DKVᵀ", label_offset=(-1.3, -0.3))
    _cached(canvas, c_kv, "cached")
    k_h = canvas.tensor("k_h", rows=2, cols=2, at=(11.5, 4.5), color="key", shape="(seq, d_head)")
    canvas.arrow(c_kv.right, k_h.left, "· W_UK_hᵀ", label_offset=(-0.3, 0.3))
    keys = canvas.tensor(
        "[k_h, k_r]",
        rows=2,
        cols=3,
        at=(16.0, 7.0),
        cell_colors=[["key", "key", ROPE_COLOR]] * 2,
        shape="(seq, d_head + d_rope)",
    )
    canvas.arrow(k_h.right, keys.left)
    canvas.arrow(k_r.right, keys.left)
    v_h = canvas.tensor("v_h", rows=2, cols=2, at=(16.0, 1.0), color="value", shape="(seq, d_head)")
    canvas.arrow(c_kv.right, v_h.left, "· W_UV_hᵀ", label_offset=(0.3, -0.9))
    # Attention in each head, then the heads merged.
    attention = canvas.op("attention\nin each head h,\n÷ √(d_head + d_rope)", at=(23.0, 8.0), width=5.6, height=2.6)
    for source in (q, keys):
        canvas.arrow(source.right, attention.left)
    canvas.arrow(v_h.right, attention.bottom)
    out = canvas.tensor("output", rows=2, cols=3, at=(20.5, 13.0), color="output")
    # Its shape beside it: below it, the arrow from the attention would cross it.
    _shape_beside(canvas, out, "(seq, d_model)")
    canvas.arrow(attention.top, out.bottom, "merge, · W_Oᵀ", label_offset=(1.9, -0.3))
    return canvas.figure


def absorption_diagram() -> Figure:
    """Scoring one new query against ``N`` cached latents, two ways that give the same scores. Materialised (top):
    head ``h``'s keys are rebuilt from every latent, ``k_h = c_kv W_UK_hᵀ (N, d_head)``, then ``q_h k_hᵀ``.
    Absorbed (bottom): the query is taken into the latent space once, ``q̃_h = q_h W_UK_h (1, d_latent)``, and scored
    against the latents themselves, ``q̃_h c_kvᵀ``: no per-head key is built (the rotated parts, ``q_r_h k_rᵀ``, are
    added alike on both paths)."""
    canvas = Canvas(width=24.0, height=18.0, title="one new query against N cached latents: two ways", scale=0.38)
    # Materialised: rebuild every head's keys from the latents, then score.
    canvas.text("materialised: rebuild every key", at=(0.0, 16.8), size=10, ha="left", fontweight="bold")
    c_top = canvas.tensor("c_kv (cached)", rows=4, cols=2, at=(0.5, 10.5), color=LATENT_COLOR, shape="(N, d_latent)")
    k_h = canvas.tensor("k_h", rows=4, cols=2, at=(7.5, 10.5), color="key", shape="(N, d_head)")
    canvas.arrow(c_top.right, k_h.left, "· W_UK_hᵀ")
    canvas.text("N · d_latent · d_head\nmultiply-adds a head", at=(5.25, 9.3), size=9, va="top")
    q_top = canvas.tensor("q_h", rows=1, cols=2, at=(12.5, 14.6), color="query")
    _shape_beside(canvas, q_top, "(1, d_head)")
    score_top = canvas.op("q_h · k_hᵀ", at=(13.5, 12.5), width=3.0, height=1.0)
    canvas.arrow(k_h.right, score_top.left)
    canvas.arrow(q_top.bottom, score_top.top)
    s_top = canvas.tensor("scores", rows=1, cols=4, at=(18.0, 12.0), color="scores", shape="(1, N)")
    canvas.arrow(score_top.right, s_top.left)
    # Absorbed: take the query into the latent space, score the latents themselves.
    canvas.text("absorbed: W_UK folded into the query", at=(0.0, 7.6), size=10, ha="left", fontweight="bold")
    q_low = canvas.tensor("q_h", rows=1, cols=2, at=(0.5, 4.9), color="query", shape="(1, d_head)")
    q_abs = canvas.tensor("q̃_h", rows=1, cols=2, at=(7.5, 4.9), color=LATENT_COLOR, shape="(1, d_latent)")
    canvas.arrow(q_low.right, q_abs.left, "· W_UK_h")
    canvas.text("d_head · d_latent\nmultiply-adds a head", at=(5.0, 3.6), size=9, va="top")
    score_low = canvas.op("q̃_h · c_kvᵀ", at=(13.5, 5.4), width=3.0, height=1.0)
    canvas.arrow(q_abs.right, score_low.left)
    c_low = canvas.tensor("c_kv (cached)", rows=4, cols=2, at=(12.5, -0.2), color=LATENT_COLOR, name_side="left")
    _shape_beside(canvas, c_low, "(N, d_latent)")
    canvas.arrow(c_low.top, score_low.bottom)
    s_low = canvas.tensor("scores", rows=1, cols=4, at=(18.0, 4.9), color="scores", shape="(1, N)")
    canvas.arrow(score_low.right, s_low.left)
    canvas.text(
        "the same scores:\nq_h · (c_kv W_UK_hᵀ)ᵀ\n= (q_h W_UK_h) · c_kvᵀ", at=(20.0, 8.8), size=9, color="#333333"
    )
    return canvas.figure
