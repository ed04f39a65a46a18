"""Notebook 09's schematic diagram: what a streaming cache keeps — a few sink tokens at the start,
the last ``window`` tokens, and nothing in between."""

from __future__ import annotations

from matplotlib.figure import Figure

from ...checks import expect_int
from ...teaching.diagrams import Canvas

__all__ = ["streaming_cache_diagram"]


def streaming_cache_diagram(seq_len: int = 14, window: int = 4, sinks: int = 1) -> Figure:
    """One row of ``seq_len`` positions of a long stream while the last token is generated: the first
    ``sinks`` tokens (kept: attention sinks), the evicted middle (grey), the last ``window`` tokens
    (kept: the sliding window), and the cache that results, of ``sinks + window`` keys and values."""
    seq_len = expect_int("seq_len", seq_len, 2)
    window = expect_int("window", window, 1, seq_len)
    sinks = expect_int("sinks", sinks, 0, seq_len - window)
    colors = ["query" if i < sinks else "past" if i < seq_len - window else "key" for i in range(seq_len)]
    colors[-1] = "new"
    canvas = Canvas(width=seq_len + 4.5, height=6.8, title="what a streaming cache keeps", scale=0.55)
    stream = canvas.tensor(
        "stream",
        rows=1,
        cols=seq_len,
        at=(3.5, 3.6),
        cell_colors=[colors],
        values=[[str(i) for i in range(seq_len)]],
        name_side="left",
    )
    kept = [i for i in range(seq_len) if i < sinks or i >= seq_len - window]
    cache = canvas.tensor(
        "cache",
        rows=1,
        cols=len(kept),
        at=(3.5, 0.8),
        cell_colors=[[colors[i] for i in kept]],
        values=[[str(i) for i in kept]],
        shape=f"sinks + window = {sinks} + {window} keys and values",
        name_side="left",
    )
    for slot, position in enumerate(kept):
        canvas.arrow((stream.x + position + 0.5, stream.y), (cache.x + slot + 0.5, cache.y + 1.0))
    if sinks:
        canvas.text("sink(s): kept", at=(stream.x + sinks / 2, stream.y + 1.6), size=8)
    canvas.text("evicted", at=(stream.x + (sinks + seq_len - window) / 2, stream.y + 1.6), size=8)
    canvas.text("window: kept (last = new token)", at=(stream.x + seq_len - window / 2, stream.y + 1.6), size=8)
    return canvas.figure
