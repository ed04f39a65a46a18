"""Notebook 12's schematic diagrams: where a sink's share of a row goes (one more logit in the softmax, no value
row behind it), and where an output gate sits in a layer of multi-head attention (after each head's attention,
before ``W_O``)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from ...attention import scaled_dot_product_attention
from ...checks import expect_choice, expect_divisible, expect_int, expect_number
from ...mha import GATES
from ...teaching.diagrams import Canvas, head_colors

__all__ = ["SINK_COLOR", "gate_diagram", "sink_diagram", "sink_row"]

#: The sink's cells in the diagrams (and the explorer's sink bar): a grey that no role of the series uses.
SINK_COLOR = "#969696"


def sink_row(scores: Sequence[float], sink: float) -> tuple[torch.Tensor, torch.Tensor]:
    """One query's scaled ``scores (seq_k,)`` and a ``sink`` logit -> ``(full, kept)``: ``full (seq_k + 1,)`` is the
    softmax over the keys and the sink (the sink last), ``kept (seq_k,)`` the weights the keys keep, computed by
    :func:`~mhsa_helpers.attention.scaled_dot_product_attention` with ``sink=`` (a query of 1 against keys equal to
    the scores, no scaling). ``kept`` is ``full`` without its last entry."""
    if isinstance(scores, (str, bytes)) or not isinstance(scores, Sequence) or not 1 <= len(scores) <= 8:
        raise ValueError(f"scores must be a sequence of 1 to 8 numbers, got {scores!r}")
    values = [expect_number("scores", s) for s in scores]
    sink = expect_number("sink", sink)
    row = torch.tensor(values, dtype=torch.float64)
    q = torch.ones(1, 1, dtype=torch.float64)
    # A key equal to the score, a query of 1, no scaling: q . k is the score itself.
    _, kept = scaled_dot_product_attention(
        q, row[:, None], row[:, None], need_weights=True, scale=1.0, sink=torch.tensor(sink, dtype=torch.float64)
    )
    kept = kept[0]
    full = torch.cat([kept, (1.0 - kept.sum()).reshape(1)])
    return full, kept


def sink_diagram(scores: Sequence[float] = (2.0, 0.5, 1.0, -1.0), sink: float = 1.5, d_v: int = 3) -> Figure:
    """One query's row of scaled ``scores`` and the head's ``sink`` logit: a softmax over ``seq_k + 1`` logits, the
    sink's column dropped, and the kept weights (summing to less than 1) times ``V (seq_k, d_v)``, which has no row
    for the sink. The numbers are the package's (:func:`sink_row`)."""
    full, kept = sink_row(scores, sink)
    d_v = expect_int("d_v", d_v, 1, 4)
    n = len(scores)
    total = float(kept.sum())
    lse = float(torch.logsumexp(torch.tensor([float(s) for s in scores], dtype=torch.float64), 0))
    keys = [f"k{j}" for j in range(n)]
    canvas = Canvas(
        width=3 * n + 2 * d_v + 11.0, height=12.0, title="a sink: one more logit, no value behind it", scale=0.46
    )
    top = 8.2
    logits = canvas.tensor(
        "scores, and the sink logit",
        rows=1,
        cols=n + 1,
        at=(0.5, top),
        cell_colors=[["scores"] * n + [SINK_COLOR]],
        values=[[f"{float(s):.1f}" for s in scores] + [f"s={float(sink):.1f}"]],
        col_labels=[*keys, "sink"],
        shape=f"(seq_k + 1,) = ({n} + 1,)",
    )
    softmax = canvas.op(f"softmax\nover all {n + 1}", at=(logits.x + n + 1 + 2.6, top + 0.5), width=3.2, height=1.8)
    canvas.arrow(logits.right, softmax.left)
    weights = canvas.tensor(
        "weights",
        rows=1,
        cols=n + 1,
        at=(softmax.x + softmax.width + 1.6, top),
        cell_colors=[["weights"] * n + [SINK_COLOR]],
        values=[[f"{float(w):.2f}" for w in full]],
        col_labels=[*keys, "sink"],
        shape="sums to 1",
    )
    canvas.arrow(softmax.right, weights.left)
    # The sink's cell crossed out: its share is dropped, not handed back to the keys.
    cx, cy = weights.x + n, weights.y
    canvas.ax.plot([cx, cx + 1], [cy, cy + 1], color="#d62728", lw=1.5)
    canvas.ax.plot([cx, cx + 1], [cy + 1, cy], color="#d62728", lw=1.5)
    canvas.text(
        f"its {float(full[-1]):.2f} goes nowhere",
        at=(cx + 0.5, cy - 1.2),
        size=8,
        color="#d62728",
        ha="left",
    )
    kept_box = canvas.tensor(
        "kept weights",
        rows=1,
        cols=n,
        at=(weights.x, 3.6),
        color="weights",
        values=[[f"{float(w):.2f}" for w in kept]],
        shape=f"sum = {total:.2f} < 1",
    )
    canvas.arrow((weights.x + n / 2, weights.y - 0.7), (kept_box.center[0], kept_box.y + kept_box.height + 0.7))
    canvas.text("drop the sink's column", at=(weights.x + n / 2 - 0.3, 6.1), size=8, ha="right")
    v = canvas.tensor(
        "V",
        rows=n,
        cols=d_v,
        at=(kept_box.x + n + 3.8, kept_box.center[1] - n / 2),
        color="value",
        row_labels=[f"v{j}" for j in range(n)],
    )
    # Where one more row would be: there is none, the sink has no value vector.
    canvas.ax.add_patch(Rectangle((v.x, v.y - 1.3), d_v, 1.0, fill=False, edgecolor=SINK_COLOR, lw=1.2, linestyle="--"))
    canvas.text("sink: no value row", at=(v.center[0], v.y - 1.9), size=8, color="#555555")
    canvas.arrow(kept_box.right, (v.x - 0.9, kept_box.center[1]), "× V", label_offset=(-0.2, 0.15))
    out = canvas.tensor(
        "output",
        rows=1,
        cols=d_v,
        at=(v.x + d_v + 2.5, kept_box.y),
        color="output",
        shape=f"{total:.2f} × a weighted\nmean of v0..v{n - 1}",
    )
    canvas.arrow(v.right, out.left)
    canvas.text(
        f"kept = softmax(scores) · σ(LSE − s)\nLSE(scores) = {lse:.2f}\nσ({lse:.2f} − {float(sink):.1f}) = {total:.2f}",
        at=(logits.center[0] + 0.6, 4.1),
        size=9,
    )
    return canvas.figure


def gate_diagram(gate: str = "headwise", seq: int = 3, d_model: int = 6, num_heads: int = 2) -> Figure:
    """Where the output ``gate`` (``"headwise"`` or ``"elementwise"``) sits: ``x (seq, d_model)`` → Q, K, V → attention
    in each head → the heads' outputs side by side ``(seq, d_model)``, multiplied by ``σ(x W_gᵀ + b_g)`` — ``(seq,
    heads)``, one number per head and token, or ``(seq, d_model)``, one per channel — then merged by ``· W_Oᵀ``."""
    gate = expect_choice("gate", gate, GATES)
    seq = expect_int("seq", seq, 1, 6)
    d_model = expect_int("d_model", d_model, 2, 12)
    num_heads = expect_int("num_heads", num_heads, 1, 4)
    d_head = expect_divisible("d_model", d_model, "num_heads", num_heads)
    colors = head_colors(num_heads)
    by_head = [[colors[j // d_head] for j in range(d_model)] for _ in range(seq)]
    width = 4 * d_model + 14.5
    canvas = Canvas(
        width=width,
        height=2 * seq + 6.0,
        title=f"{'a' if gate == 'headwise' else 'an'} {gate} output gate: after attention, before W_O",
        scale=0.45,
    )
    top = seq + 4.2
    x = canvas.tensor("x", rows=seq, cols=d_model, at=(0.5, top), shape="(seq, d_model)")
    attention = canvas.op(
        "Q, K, V,\nattention\nin each head", at=(x.x + d_model + 3.2, x.center[1]), width=3.6, height=2.4
    )
    canvas.arrow(x.right, attention.left)
    heads = canvas.tensor(
        "heads' outputs",
        rows=seq,
        cols=d_model,
        at=(attention.x + attention.width + 1.5, top),
        cell_colors=by_head,
        shape="(seq, heads · d_head)",
    )
    canvas.arrow(attention.right, heads.left)
    times = canvas.op("×", at=(heads.x + d_model + 1.5, heads.center[1]), width=1.0)
    canvas.arrow(heads.right, times.left)
    gated = canvas.tensor(
        "gated",
        rows=seq,
        cols=d_model,
        at=(times.x + times.width + 1.2, top),
        cell_colors=by_head,
        shape="(seq, d_model)",
    )
    canvas.arrow(times.right, gated.left)
    out = canvas.tensor(
        "output", rows=seq, cols=d_model, at=(gated.x + d_model + 3.2, top), color="output", shape="(seq, d_model)"
    )
    canvas.arrow(gated.right, out.left, "merge, · W_Oᵀ")
    cols = num_heads if gate == "headwise" else d_model
    per = [[colors[j] for j in range(num_heads)] for _ in range(seq)] if gate == "headwise" else by_head
    params = (
        f"d_model·heads + heads = {d_model * num_heads + num_heads}"
        if gate == "headwise"
        else (f"d_model² + d_model = {d_model * d_model + d_model}")
    )
    g = canvas.tensor("", rows=seq, cols=cols, at=(times.center[0] - cols / 2, 0.3), cell_colors=per)
    sigma = canvas.op("g = σ(x W_gᵀ + b_g)", at=(g.x - 4.2, g.center[1]), width=5.0)
    canvas.arrow((x.center[0], x.y - 0.7), sigma.left, bend=0.3)
    canvas.arrow(sigma.right, g.left)
    canvas.arrow(g.top, times.bottom)
    what = (
        f"(seq, heads): one gate per head and token,\nthe same for its {d_head} channels"
        if gate == "headwise"
        else "(seq, d_model): one gate per channel"
    )
    canvas.text(f"{what}\nW_g, b_g: {params} numbers", at=(g.x + cols + 0.6, g.center[1]), size=8, ha="left")
    return canvas.figure
