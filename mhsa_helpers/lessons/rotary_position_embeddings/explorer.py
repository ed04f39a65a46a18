"""Notebook 05's explorer: rotary position embeddings — the frequencies, the rotation of
one feature pair along the positions, and the score against the distance."""

from __future__ import annotations

import ipywidgets as widgets
import numpy as np
import torch

from ...checks import expect_int, expect_number
from ...rope import rope_frequencies
from ...teaching.explorer import SLIDER, Explorer, log_slider
from .figures import (
    arrow_label_position,
    rope_frequencies_plot,
    rope_rotation_arrows,
    rope_score_vs_distance,
    rope_scores,
    rotate_pair,
)

__all__ = ["rope_explorer"]


#: Arrows closer than this (radians) share one label, so slow pairs do not pile up "m=0", "m=1", ...
LABEL_GAP = 0.3


def arrow_labels(positions: np.ndarray, angles: np.ndarray) -> list[str]:
    """One label per arrow: arrows within :data:`LABEL_GAP` of the first of their group share one label,
    written at the group's last arrow ("m=0–5"); the others are left blank."""
    labels = [""] * len(positions)
    start = 0
    for i in range(1, len(positions) + 1):
        if i == len(positions) or angles[i] - angles[start] >= LABEL_GAP:
            first, last = positions[start], positions[i - 1]
            labels[i - 1] = f"m={first}" if i - 1 == start else f"m={first}–{last}"
            start = i
    return labels


class _RopeExplorer(Explorer):
    figsize = (9.0, 3.0)

    def __init__(self, d_head: int, base: float, offset: int, pair_index: int, num_positions: int, max_distance: int):
        self.d_head, self.num_positions, self.max_distance = d_head, num_positions, max_distance
        # All-ones q = k, as in RoFormer's long-term-decay figure: the score falls with distance.
        self.q = torch.ones(d_head, dtype=torch.float64)
        self.k = torch.ones(d_head, dtype=torch.float64)
        controls = {
            "base": log_slider("base", base, 1.0, 6.0, 0.1, ",.0f"),
            "offset": widgets.IntSlider(value=offset, min=0, max=256, description="offset", **SLIDER),
            "pair_index": widgets.IntSlider(value=pair_index, min=0, max=d_head // 2 - 1, description="pair", **SLIDER),
        }
        super().__init__(controls, title=f"Rotary position embeddings (d_head = {d_head})")

    def _check(self, values):
        expect_number("base", values["base"], 10.0, 1e6)
        expect_int("offset", values["offset"], 0, 256)
        expect_int(
            "pair_index",
            values["pair_index"],
            0,
            self.d_head // 2 - 1,
            f" (d_head={self.d_head} has {self.d_head // 2} pairs)",
        )

    def _compute(self, values):
        base, offset, pair = float(values["base"]), values["offset"], values["pair_index"]
        frequencies = rope_frequencies(self.d_head, base).double().numpy()
        positions = list(range(offset, offset + self.num_positions))
        rotated = rotate_pair([1.0, 0.0], base=base, d_head=self.d_head, pair_index=pair, positions=positions)
        distances, scores = rope_scores(self.q, self.k, base=base, max_distance=self.max_distance, offset=offset)
        return {
            "base": base,
            "offset": offset,
            "pair_index": pair,
            "d_head": self.d_head,
            "frequencies": frequencies,
            "positions": np.array(positions),
            "angles": np.array(positions, dtype=np.float64) * frequencies[pair],
            "rotated": rotated,
            "distances": distances,
            "scores": scores,
        }

    def _build(self, fig, data):
        # Drawn once with the plotting functions; later redraws move their artists in place.
        freq_ax = fig.add_axes((0.07, 0.17, 0.25, 0.7))
        arrow_ax = fig.add_axes((0.4, 0.17, 0.2, 0.7))
        score_ax = fig.add_axes((0.7, 0.17, 0.28, 0.7))
        rope_frequencies_plot(self.d_head, data["base"], ax=freq_ax, highlight=data["pair_index"])
        rope_rotation_arrows(
            [1.0, 0.0],
            base=data["base"],
            d_head=self.d_head,
            pair_index=data["pair_index"],
            positions=list(data["positions"]),
            ax=arrow_ax,
        )
        rope_score_vs_distance(
            self.q, self.k, base=data["base"], max_distance=self.max_distance, offset=data["offset"], ax=score_ax
        )
        # Fixed ranges keep the axes (the costly part to draw) the same for every setting:
        # theta_i lies in [base^-1, 1] with base <= 1e6, and |q.k| <= |q||k| = d_head.
        freq_ax.set_ylim(5e-7, 2.0)
        score_ax.set_ylim(-1.05 * self.d_head, 1.05 * self.d_head)
        arrow_ax.set_xlabel("x[2i]", fontsize=8)
        arrow_ax.set_ylabel("x[2i+1]", fontsize=8)
        return freq_ax, arrow_ax, score_ax

    def _dynamic(self, axes):
        freq_ax, arrow_ax, score_ax = axes
        return [
            *freq_ax.lines,
            freq_ax.title,
            arrow_ax.collections[0],
            *arrow_ax.texts,
            arrow_ax.title,
            score_ax.lines[0],
            score_ax.title,
        ]

    def _update(self, axes, data):
        freq_ax, arrow_ax, score_ax = axes
        frequencies, pair = data["frequencies"], data["pair_index"]
        line, marker = freq_ax.lines[0], freq_ax.lines[1]
        line.set_ydata(frequencies)
        marker.set_data([pair], [frequencies[pair]])
        freq_ax.set_title(f"RoPE frequencies, base {data['base']:,.0f}", fontsize=9)
        rotated = data["rotated"]
        arrow_ax.collections[0].set_UVC(rotated[:, 0], rotated[:, 1])
        for text, (x, y), label in zip(
            arrow_ax.texts, rotated, arrow_labels(data["positions"], data["angles"]), strict=True
        ):
            text.set_position(arrow_label_position(x, y))
            text.set_text(label)
        arrow_ax.set_title(f"pair {pair}: θ = {frequencies[pair]:.3g} rad per position", fontsize=9)
        score_ax.lines[0].set_ydata(data["scores"])
        score_ax.set_title(f"score vs distance (keys at {data['offset']}+)", fontsize=9)

    def _caption_text(self, data):
        return (
            f"base {data['base']:,.0f} · positions {data['offset']}–{data['offset'] + self.num_positions - 1} · "
            f"pair {data['pair_index']} turns {data['frequencies'][data['pair_index']]:.3g} rad per position · "
            f"score at distance 0: {data['scores'][0]:.2f}"
        )


def rope_explorer(
    d_head: int = 16,
    *,
    base: float = 10000.0,
    offset: int = 0,
    pair_index: int = 0,
    num_positions: int = 6,
    max_distance: int = 48,
) -> Explorer:
    """RoPE's frequencies ``theta_i = base^(-2i/d_head)``, the rotation of pair ``pair_index`` at
    positions ``offset .. offset + num_positions - 1``, and the score ``rope(q, offset+d)·rope(k, offset)``
    of all-ones ``q = k`` against the distance ``d`` — unchanged by ``offset``: RoPE scores depend on
    relative positions only.

    data: ``frequencies`` (d_head/2,), ``positions``, ``angles`` (radians, ``positions * theta``),
    ``rotated`` (num_positions, 2), ``distances``, ``scores`` (max_distance + 1,).
    """
    expect_int("d_head", d_head, 2, 256, " (RoPE rotates pairs of features)")
    if d_head % 2:
        raise ValueError(f"d_head must be even (RoPE rotates pairs of features), got d_head={d_head!r}")
    expect_number("base", base, 10.0, 1e6)
    expect_int("offset", offset, 0, 256)
    expect_int("pair_index", pair_index, 0, d_head // 2 - 1, f" (d_head={d_head} has {d_head // 2} pairs)")
    expect_int("num_positions", num_positions, 1, 16)
    expect_int("max_distance", max_distance, 1, 1024)
    return _RopeExplorer(int(d_head), float(base), int(offset), int(pair_index), int(num_positions), int(max_distance))
