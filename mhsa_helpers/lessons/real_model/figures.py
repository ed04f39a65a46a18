"""Notebook 11's pictures: scores of every head of the real model as layer × head maps, and the
copy loss with heads zeroed as bars.

Each function draws on the figure or Axes it is given or, without one, on a new pyplot figure that
Jupyter shows below the cell.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from ...teaching.figures import as_array, new_axes

__all__ = ["ablation_loss_bars", "layer_head_maps"]


def layer_head_maps(
    maps: Mapping[str, torch.Tensor | np.ndarray],
    *,
    marks: Mapping[str, Sequence[tuple[int, int]]] | None = None,
    colorbar: str = "score (mean attention weight)",
    fig: Figure | None = None,
) -> Figure:
    """One heatmap per entry of ``maps`` (title -> ``(layers, heads)`` values in [0, 1]), side by
    side on one shared 0-1 colour scale with one colour bar: rows are layers (0 at the top),
    columns heads. ``marks[title]`` frames the listed ``(layer, head)`` cells of that panel."""
    arrays = {title: as_array(title, values) for title, values in maps.items()}
    if not arrays or any(a.ndim != 2 for a in arrays.values()):
        raise ValueError(f"maps must hold (layers, heads) arrays, got shapes {[a.shape for a in arrays.values()]}")
    shapes = {a.shape for a in arrays.values()}
    if len(shapes) != 1:
        raise ValueError(f"maps must all have one shape (layers, heads), got {sorted(shapes)}")
    layers, heads = shapes.pop()
    if fig is None:
        fig = plt.figure(figsize=(3.0 * len(arrays) + 1.2, 0.16 * layers + 1.4))
    axes = fig.subplots(1, len(arrays), squeeze=False, gridspec_kw={"wspace": 0.35})[0]
    image = None
    for ax, (title, values) in zip(axes, arrays.items(), strict=True):
        image = ax.imshow(values, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto", interpolation="nearest")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("head", fontsize=9)
        ax.set_ylabel("layer", fontsize=9)
        ax.set_xticks(range(heads))
        ax.set_yticks(range(0, layers, 2))
        ax.tick_params(labelsize=8)
        for layer, head in (marks or {}).get(title, ()):
            ax.add_patch(Rectangle((head - 0.5, layer - 0.5), 1, 1, fill=False, edgecolor="#d62728", linewidth=1.8))
    bar = fig.colorbar(image, ax=list(axes), fraction=0.03, pad=0.02)  # type: ignore[arg-type]  # drawn above
    bar.set_label(colorbar, fontsize=9)
    bar.ax.tick_params(labelsize=8)
    return fig


def ablation_loss_bars(
    losses: Mapping[str, float], *, baseline: float, first_copy: float, ax: Axes | None = None
) -> Axes:
    """Horizontal bars: the loss on the second copy with each named set of heads zeroed, against a
    dashed line at ``baseline`` (nothing zeroed) and a dotted one at ``first_copy`` (the unpredictable
    first copy: what "no copying at all" costs)."""
    if not losses:
        raise ValueError("losses must name at least one ablation")
    if ax is None:
        ax = new_axes((7.0, 0.45 * len(losses) + 1.3))
    names = list(losses)
    y = np.arange(len(names))
    ax.barh(y, [losses[n] for n in names], color=["#d62728" if "induction" in n else "#7f7f7f" for n in names])
    ax.axvline(baseline, color="black", linestyle="--", linewidth=1.0, label=f"nothing zeroed: {baseline:.2f}")
    ax.axvline(first_copy, color="#1f77b4", linestyle=":", linewidth=1.5, label=f"first copy: {first_copy:.2f}")
    ax.set_yticks(y)
    ax.set_yticklabels(names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("loss on the second copy (nats)", fontsize=9)
    ax.legend(fontsize=8, loc="lower right")
    return ax
