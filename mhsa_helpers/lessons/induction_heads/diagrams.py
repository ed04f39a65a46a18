"""Schematic diagrams of notebook 07: the induction circuit on a repeated chunk, and the
attention-only model as a residual stream that two attention layers write into."""

from __future__ import annotations

from matplotlib.figure import Figure

from ...teaching.diagrams import Canvas

__all__ = ["induction_circuit_diagram", "residual_stream_diagram"]

#: The sequence the circuit diagram walks through: a chunk A B C D seen once, then again up to B.
_TOKENS = ("BOS", "x", "A", "B", "C", "D", "y", "A", "B")


def induction_circuit_diagram() -> Figure:
    """The two steps of an induction circuit on ``BOS x A B C D y A B``, predicting ``C``.

    Bottom row: the tokens. Middle: layer 0's previous-token head, each arrow from a query
    to the key it reads (every token reads the one before it; the earlier ``C`` learns
    "my predecessor was B"). Top: layer 1's induction head, the query of the second ``B``
    reading the key of the earlier ``C`` (the token *after* the earlier ``B``) and copying
    it out as the prediction.
    """
    n = len(_TOKENS)
    canvas = Canvas(width=n + 5.5, height=9.6, title="an induction circuit: two heads in two layers", scale=0.62)
    rows = {}
    for name, y, color in (("tokens", 0.3, "input"), ("layer 0", 3.6, "key"), ("layer 1", 6.9, "query")):
        rows[name] = canvas.tensor(
            name, rows=1, cols=n, at=(3.0, y), color=color, values=[list(_TOKENS)], name_side="left"
        )

    def middle(row: str, position: float) -> float:
        return rows[row].x + position + 0.5

    # Each position carries its own token up the residual stream.
    for position in range(n):
        canvas.arrow((middle("tokens", position), 1.3), (middle("tokens", position), 3.6))
    # Layer 0, previous-token head: the earlier C (position 4) reads B (position 3), as every token does.
    canvas.arrow((middle("layer 0", 4), 4.6), (middle("layer 0", 3), 4.6), bend=0.9)
    canvas.arrow((middle("layer 0", 8), 4.6), (middle("layer 0", 7), 4.6), bend=0.9)
    canvas.text("previous-token head:\nC now carries\n“after B”", at=(middle("layer 0", 4) + 0.2, 5.9), size=8)
    for position in range(n):
        canvas.arrow((middle("layer 0", position), 4.6), (middle("layer 1", position), 6.9))
    # Layer 1, induction head: the second B (position 8) finds the key that says "after B": the earlier C.
    canvas.arrow((middle("layer 1", 8), 7.9), (middle("layer 1", 4), 7.9), bend=0.35)
    canvas.text(
        "induction head: the query of\nthe second B reads the key\n“after B”, the earlier C",
        at=(middle("layer 1", 1.5), 8.6),
        size=8,
    )
    canvas.text("next: C", at=(rows["layer 1"].x + n + 0.9, 7.4), size=10, fontweight="bold")
    return canvas.figure


def residual_stream_diagram() -> Figure:
    """The attention-only Transformer of notebook 07: tokens are embedded into the residual
    stream ``(batch, seq, d_model)``; each causal MultiHeadSelfAttention layer reads the
    stream and adds its output back; the unembedding turns the stream into logits ``(batch, seq, vocab)``."""
    canvas = Canvas(width=20, height=5.6, title="two attention layers writing into one residual stream", scale=0.55)
    y = 0.8
    tokens = canvas.tensor("tokens", rows=1, cols=1, at=(0, y), shape="(batch, seq)", values=[["ids"]])
    embed = canvas.op("embed", at=(3.3, y + 0.5), width=2.2)
    plus_0 = canvas.op("+", at=(7.4, y + 0.5), width=0.9)
    plus_1 = canvas.op("+", at=(11.9, y + 0.5), width=0.9)
    unembed = canvas.op("unembed", at=(15.0, y + 0.5), width=2.4)
    canvas.arrow(tokens.right, embed.left)
    canvas.arrow(embed.right, plus_0.left, "(batch, seq, d_model)", label_offset=(0.0, -0.9))
    canvas.arrow(plus_0.right, plus_1.left, "residual stream", label_offset=(0.0, -0.9))
    canvas.arrow(plus_1.right, unembed.left)
    canvas.arrow(unembed.right, (17.0, y + 0.5))
    canvas.text("logits\n(batch, seq, vocab)", at=(18.3, y + 0.5), size=8)
    for plus, name, x in ((plus_0, "MHSA 0\n(causal, RoPE)", 6.0), (plus_1, "MHSA 1\n(causal, RoPE)", 10.5)):
        layer = canvas.op(name, at=(x, y + 2.8), width=2.6, height=1.4)
        # The layer reads the stream before the "+" and its output is added back at the "+".
        canvas.arrow((x - 1.6, y + 0.5), (x - 0.6, layer.y))
        canvas.arrow((x + 0.6, layer.y), plus.top)
    return canvas.figure
