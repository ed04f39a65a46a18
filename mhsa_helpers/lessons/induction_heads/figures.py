"""Notebook 07's pictures: the loss curves with the phase change, the heads' scores as bars, and
every head's attention on one sequence with the two copies of its chunk marked.

Each function draws on the ``ax``/``fig`` it is given (the explorer draws into its own figure) or,
without one, on a new pyplot figure that Jupyter shows below the cell.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ...teaching.figures import WEIGHTS_CMAP, as_array, new_axes, trailing_mean
from ...teaching.induction.training import phase_change_step

__all__ = [
    "INDUCTION_COLOR",
    "OTHER_COLOR",
    "SCORE_COLORS",
    "ablation_bars",
    "layer_heatmaps",
    "loss_curves",
    "mark_copies",
    "score_bars",
]

INDUCTION_COLOR = "#d62728"
OTHER_COLOR = "#7f7f7f"
#: Bar colours of the scores drawn by :func:`score_bars`.
SCORE_COLORS = {"previous_token": "#1f77b4", "induction": "#d62728", "bos": "#bbbbbb"}
_SCORE_LABELS = {"previous_token": "previous-token score", "induction": "induction score", "bos": "weight on BOS"}
_COPY_COLORS = ("#2ca02c", "#ff7f0e")


def loss_curves(
    history: dict[str, list],
    *,
    vocab_size: int,
    ax: Axes | None = None,
    window: int = 10,
    step: int | None = None,
    fontsize: float = 9,
) -> Axes:
    """The per-step losses of a run (``history`` with ``step``, ``induction_loss``, ``other_loss``):
    thin lines per step, thick lines their ``window``-step trailing mean, a dotted line at chance
    ``log(vocab_size - 1)`` and a dashed one where the induction loss first falls below 1.0.
    ``step`` draws a black line at that step (the explorer's slider)."""
    for key in ("step", "induction_loss", "other_loss"):
        if key not in history:
            raise ValueError(f"history must hold the lists 'step', 'induction_loss', 'other_loss'; {key!r} is missing")
    if ax is None:
        ax = new_axes((7.5, 3.4))
    steps = np.asarray(history["step"])
    chance = math.log(vocab_size - 1)
    for key, color, label in (
        ("other_loss", OTHER_COLOR, "other tokens (random: unpredictable)"),
        ("induction_loss", INDUCTION_COLOR, "repeated tokens (second copy)"),
    ):
        ax.plot(steps, history[key], color=color, alpha=0.25, linewidth=0.8)
        ax.plot(steps, trailing_mean(history[key], window), color=color, linewidth=2, label=label)
    ax.axhline(chance, color="black", linestyle=":", linewidth=1, label=f"chance: ln {vocab_size - 1} = {chance:.2f}")
    learned = phase_change_step(history["induction_loss"], window=window)
    if learned is not None:
        ax.axvline(learned, color=INDUCTION_COLOR, linestyle="--", linewidth=1)
        # Beside the line, on the side with more room, so that the caption stays inside the axes.
        right_half = learned > (int(steps[-1]) if len(steps) else 0) / 2
        ax.text(
            learned - 4 if right_half else learned + 4,
            0.25,
            f"learned at step {learned}",
            color=INDUCTION_COLOR,
            fontsize=fontsize - 1,
            ha="right" if right_half else "left",
            # Readable where the explorer's black step line crosses it.
            bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.85, "pad": 1.0},
            zorder=5,
        )
    if step is not None:
        ax.axvline(step, color="black", linewidth=1.5)
    ax.set_xlabel("training step", fontsize=fontsize)
    ax.set_ylabel("cross-entropy (nats)", fontsize=fontsize)
    ax.set_ylim(0, max(4.5, chance + 0.8))
    ax.set_xlim(0, max(int(steps[-1]) + 1 if len(steps) else 1, 1))
    ax.tick_params(labelsize=fontsize - 1)
    ax.legend(fontsize=fontsize - 1, loc="lower left", framealpha=0.9)
    return ax


def _head_labels(layers: int, heads: int) -> list[str]:
    return [f"L{layer}H{head}" for layer in range(layers) for head in range(heads)]


def score_bars(
    scores: dict[str, torch.Tensor],
    *,
    names: Sequence[str] = ("previous_token", "induction", "bos"),
    ax: Axes | None = None,
    highlight: tuple[int, int] | None = None,
    fontsize: float = 9,
) -> Axes:
    """Grouped bars, one group per head (``L0H0``, ``L0H1``, ...): the scores ``names`` of
    :func:`~mhsa_helpers.teaching.induction.scores.head_scores` (each ``(layers, heads)``, all in [0, 1]) on one
    shared 0-1 axis.
    ``highlight`` = ``(layer, head)`` frames that head's group."""
    unknown = [name for name in names if name not in SCORE_COLORS]
    if unknown:
        raise ValueError(f"names must be among {list(SCORE_COLORS)}, got {unknown}")
    values = {name: as_array(name, scores[name]) for name in names}
    layers, heads = values[names[0]].shape
    if ax is None:
        ax = new_axes((7.5, 3.0))
    x = np.arange(layers * heads)
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        ax.bar(
            x + (i - (len(names) - 1) / 2) * width,
            values[name].reshape(-1),
            width,
            color=SCORE_COLORS[name],
            label=_SCORE_LABELS[name],
        )
    ax.axvline(heads - 0.5, color="black", linewidth=0.8)
    ax.text(heads / 2 - 0.5, 1.04, "layer 0", ha="center", fontsize=fontsize)
    ax.text(heads + (layers * heads - heads) / 2 - 0.5, 1.04, "layer 1", ha="center", fontsize=fontsize)
    if highlight is not None:
        index = highlight[0] * heads + highlight[1]
        ax.axvspan(index - 0.45, index + 0.45, color="#ffe082", zorder=0)
    ax.set_xticks(x)
    ax.set_xticklabels(_head_labels(layers, heads), fontsize=fontsize - 1)
    ax.set_ylim(0, 1.12)
    ax.set_yticks([0, 0.25, 0.5, 0.75, 1.0])
    ax.set_ylabel("score (0 to 1)", fontsize=fontsize)
    ax.set_xlabel("head (layer, head)", fontsize=fontsize)
    ax.tick_params(labelsize=fontsize - 1)
    ax.legend(fontsize=fontsize - 1, ncol=len(names), loc="upper center", bbox_to_anchor=(0.5, -0.28), frameon=False)
    return ax


def mark_copies(ax: Axes, first_start: int, repeat_len: int, seq: int) -> None:
    """Coloured bars outside a ``(seq, seq)`` heatmap: along the keys (x) the two copies of the
    chunk, along the queries (y) the second copy (the queries an induction head serves)."""
    second = first_start + repeat_len
    for start, color in ((first_start, _COPY_COLORS[0]), (second, _COPY_COLORS[1])):
        ax.plot(
            [start - 0.5, start + repeat_len - 0.5],
            [seq + 0.3, seq + 0.3],
            color=color,
            linewidth=4,
            clip_on=False,
            solid_capstyle="butt",
        )
    ax.plot(
        [-1.3, -1.3],
        [second - 0.5, second + repeat_len - 0.5],
        color=_COPY_COLORS[1],
        linewidth=4,
        clip_on=False,
        solid_capstyle="butt",
    )


def layer_heatmaps(
    weights: Sequence[torch.Tensor],
    *,
    first_start: int,
    repeat_len: int,
    fig: Figure | None = None,
    title: str | None = None,
) -> Figure:
    """Every head's attention on one sequence: ``weights`` holds one ``(heads, seq, seq)`` tensor per
    layer; a grid of layers x heads heatmaps (queries on rows, keys on columns) sharing one 0-1
    colour scale and one colour bar. The chunk's copies are marked outside each panel (green: first
    copy, orange: second copy; on the left, the second copy's queries)."""
    arrays = [as_array(f"weights[{i}]", w) for i, w in enumerate(weights)]
    if not arrays or any(a.ndim != 3 or a.shape[-1] != a.shape[-2] for a in arrays):
        raise ValueError(
            f"weights must be a list of (heads, seq, seq) arrays, one per layer, got shapes {[a.shape for a in arrays]}"
        )
    layers, (heads, seq, _) = len(arrays), arrays[0].shape
    if fig is None:
        import matplotlib.pyplot as plt

        fig = plt.figure(figsize=(2.3 * heads + 0.9, 2.3 * layers + 0.7))
    grid = fig.add_gridspec(layers, heads, left=0.07, right=0.9, bottom=0.09, top=0.88, wspace=0.18, hspace=0.35)
    image = None
    for layer in range(layers):
        for head in range(heads):
            ax = fig.add_subplot(grid[layer, head])
            image = ax.imshow(arrays[layer][head], cmap=WEIGHTS_CMAP, vmin=0.0, vmax=1.0, interpolation="nearest")
            ax.set_title(f"layer {layer}, head {head}", fontsize=9, pad=9)
            ticks = list(range(0, seq, 8))
            ax.set_xticks(ticks)
            ax.set_yticks(ticks)
            ax.tick_params(labelsize=7, length=2)
            if head == 0:
                ax.set_ylabel("query position", fontsize=8)
            else:
                ax.set_yticklabels([])
            if layer == layers - 1:
                ax.set_xlabel("key position", fontsize=8)
            mark_copies(ax, first_start, repeat_len, seq)
    colorbar_ax = fig.add_axes((0.92, 0.15, 0.015, 0.65))
    fig.colorbar(image, cax=colorbar_ax).set_label("attention weight", fontsize=8)  # type: ignore[arg-type]  # drawn above
    colorbar_ax.tick_params(labelsize=7)
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def ablation_bars(
    losses: torch.Tensor,
    baseline: float,
    *,
    vocab_size: int,
    ax: Axes | None = None,
    fontsize: float = 9,
) -> Axes:
    """One bar per head: the in-context loss with that head zeroed (``losses (layers, heads)`` from
    :func:`~mhsa_helpers.teaching.induction.scores.ablation_losses`), a dashed line at ``baseline`` (nothing
    zeroed) and a dotted one at chance, ``log(vocab_size - 1)``."""
    values = as_array("losses", losses)
    if values.ndim != 2:
        raise ValueError(f"losses must be a (layers, heads) array, got shape {values.shape}")
    layers, heads = values.shape
    if ax is None:
        ax = new_axes((7.5, 3.0))
    x = np.arange(layers * heads)
    colors = [SCORE_COLORS["previous_token"] if i < heads else SCORE_COLORS["induction"] for i in x]
    ax.bar(x, values.reshape(-1), 0.6, color=colors)
    ax.axhline(baseline, color="black", linestyle="--", linewidth=1, label=f"no head zeroed: {baseline:.2f}")
    chance = math.log(vocab_size - 1)
    ax.axhline(chance, color="black", linestyle=":", linewidth=1, label=f"chance: {chance:.2f}")
    ax.axvline(heads - 0.5, color="black", linewidth=0.8)
    ax.set_xticks(x)
    ax.set_xticklabels([f"zero {label}" for label in _head_labels(layers, heads)], fontsize=fontsize - 1)
    ax.set_ylabel("loss on repeated tokens", fontsize=fontsize)
    ax.set_ylim(0, max(chance, float(values.max())) + 0.6)
    ax.tick_params(labelsize=fontsize - 1)
    ax.legend(fontsize=fontsize - 1, loc="center right")
    return ax
