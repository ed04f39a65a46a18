"""Notebook 11's schematic: the whole real model, bottom to top, with every shape written.

Drawn from a :class:`~mhsa_helpers.real_model.LlamaConfig`, so the numbers on the picture are the
numbers of the loaded file.
"""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.patches import FancyBboxPatch

from ...real_model import LlamaConfig
from ...teaching.diagrams import Canvas

__all__ = ["real_model_diagram"]


def real_model_diagram(config: LlamaConfig) -> Figure:
    """``input_ids (batch, seq)`` → embedding → ``num_layers`` × [RMSNorm → causal attention
    (``num_heads`` query heads sharing ``num_kv_heads`` key/value heads, RoPE) → +; RMSNorm → SwiGLU → +]
    → RMSNorm → the embedding matrix again (tied) → ``logits (batch, seq, vocab)``."""
    if not isinstance(config, LlamaConfig):
        raise TypeError(f"config must be a LlamaConfig (model.config), got {type(config).__name__}")
    c = config
    canvas = Canvas(width=23, height=25, title=f"the real model: {c.num_layers} Llama blocks", scale=0.36)
    spine = 8.0
    ids = canvas.op("input_ids  (batch, seq)", at=(spine, 0.6), width=7.0)
    embed = canvas.op(f"embedding  ({c.vocab_size}, {c.d_model})", at=(spine, 2.6), width=7.0)
    canvas.arrow(ids.top, embed.bottom)
    canvas.text(f"x  (batch, seq, {c.d_model})", at=(spine + 0.4, 3.8), ha="left", size=8)
    norm_1 = canvas.op("RMSNorm", at=(spine, 6.4), width=3.6)
    attention = canvas.op("causal attention + RoPE", at=(spine, 8.6), width=6.4)
    add_1 = canvas.op("+", at=(spine, 10.6), width=1.0)
    norm_2 = canvas.op("RMSNorm", at=(spine, 12.6), width=3.6)
    mlp = canvas.op(f"SwiGLU: {c.d_model} → {c.d_ff} → {c.d_model}", at=(spine, 14.8), width=6.4)
    add_2 = canvas.op("+", at=(spine, 16.8), width=1.0)
    final = canvas.op("RMSNorm", at=(spine, 19.4), width=3.6)
    head = canvas.op(f"× embeddingᵀ (tied)  ({c.d_model}, {c.vocab_size})", at=(spine, 21.4), width=8.6)
    logits = canvas.op(f"logits  (batch, seq, {c.vocab_size})", at=(spine, 23.4), width=7.0)
    for low, high in (
        (embed, norm_1),
        (norm_1, attention),
        (attention, add_1),
        (add_1, norm_2),
        (norm_2, mlp),
        (mlp, add_2),
        (add_2, final),
        (final, head),
        (head, logits),
    ):
        canvas.arrow(low.top, high.bottom)
    # The residual path around each sub-layer, on the left.
    side = spine - 4.2
    for start_y, add in ((5.0, add_1), (11.5, add_2)):
        canvas.ax.plot([spine, side, side], [start_y, start_y, add.center[1]], color="#333333", lw=1.2)
        canvas.arrow((side, add.center[1]), add.left)
        canvas.text("residual", at=(side - 0.5, (start_y + add.center[1]) / 2), size=8, rotation=90)
    # The repeated block, framed.
    canvas.ax.add_patch(
        FancyBboxPatch(
            (side - 1.3, 4.3),
            11.2,
            13.2,
            boxstyle="round,pad=0.1,rounding_size=0.4",
            fill=False,
            edgecolor="#555555",
            linestyle="--",
            lw=1.2,
        )
    )
    canvas.text(f"× {c.num_layers} layers", at=(side + 9.7, 4.9), ha="right", size=10, fontweight="bold")
    notes = 14.6
    canvas.text(
        f"{c.num_heads} query heads, {c.d_head} features each\n"
        f"{c.num_kv_heads} key/value heads: each shared\nby {c.num_heads // c.num_kv_heads} query heads (GQA)\n"
        f"RoPE, base {c.rope_base:g}",
        at=(notes, 8.6),
        ha="left",
        size=8,
    )
    canvas.text("each token on its own", at=(notes, 14.8), ha="left", size=8)
    canvas.text(f"RMSNorm: eps {c.eps:g}, no bias", at=(notes, 12.6), ha="left", size=8)
    canvas.text(f"one row per token of the\nvocabulary ({c.vocab_size})", at=(notes, 2.6), ha="left", size=8)
    canvas.text("the same matrix as the\nembedding: no extra weights", at=(notes, 21.4), ha="left", size=8)
    return canvas.figure
