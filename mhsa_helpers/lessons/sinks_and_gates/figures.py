"""Notebook 12's pictures: the five trained variants' heads as layer × head maps (weight on BOS, weight kept, mean
gate) on one shared 0-1 scale, their copying losses on one axes, and the real model's weight on the first token for
every layer and head.

Each function draws on the figure or Axes it is given or, without one, on a new pyplot figure that Jupyter shows
below the cell.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ...teaching.figures import WEIGHTS_CMAP, as_array, induction_loss_curves, relative_luminance

__all__ = [
    "VARIANT_COLORS",
    "VARIANT_STYLES",
    "first_token_map",
    "variant_loss_curves",
    "variant_maps",
]

#: One colour per variant of :data:`~.experiments.VARIANTS`, in its order (plain softmax black).
VARIANT_COLORS = ("#000000", "#d62728", "#ff7f0e", "#1f77b4", "#2ca02c")
#: One line style per variant: the two sinks' curves often lie on top of each other, so one of them is dashed.
VARIANT_STYLES = ("-", "-", "--", "-", "-.")


def variant_maps(
    rows: Mapping[str, Mapping[str, torch.Tensor | np.ndarray]],
    *,
    colorbar: str = "mean over the queries t ≥ 1",
    fig: Figure | None = None,
) -> Figure:
    """A grid of small layer × head maps: one row per quantity (``rows``: its name -> {variant name: ``(layers,
    heads)`` values in [0, 1]}), one column per variant, every panel on one 0-1 scale with one colour bar and its
    value written in each cell. Every row must name the same variants."""
    if not rows:
        raise ValueError("rows must name at least one quantity")
    columns = list(next(iter(rows.values())))
    if not columns:
        raise ValueError("rows must map each quantity to at least one variant")
    arrays: dict[str, dict[str, np.ndarray]] = {}
    for quantity, maps in rows.items():
        if list(maps) != columns:
            raise ValueError(f"rows must all name the same variants {columns}, got {list(maps)} for {quantity!r}")
        arrays[quantity] = {name: as_array(f"{quantity}, {name}", values) for name, values in maps.items()}
    shapes = {a.shape for maps in arrays.values() for a in maps.values()}
    if len(shapes) != 1 or len(next(iter(shapes))) != 2:
        raise ValueError(f"rows must hold (layers, heads) arrays of one shape, got shapes {sorted(shapes)}")
    layers, heads = shapes.pop()
    low = min(float(a.min()) for maps in arrays.values() for a in maps.values())
    high = max(float(a.max()) for maps in arrays.values() for a in maps.values())
    if low < -1e-6 or high > 1 + 1e-6:
        raise ValueError(
            f"rows must hold values in [0, 1] (one shared 0-1 scale), got values from {low:.3g} to {high:.3g}"
        )
    if fig is None:
        fig = plt.figure(figsize=(2.1 * len(columns) + 1.3, (0.36 * layers + 0.75) * len(rows) + 0.5))
    axes = fig.subplots(len(rows), len(columns), squeeze=False, gridspec_kw={"hspace": 0.75, "wspace": 0.15})
    image = None
    for r, (quantity, maps) in enumerate(arrays.items()):
        for c, (name, values) in enumerate(maps.items()):
            ax = axes[r, c]
            image = ax.imshow(values, cmap=WEIGHTS_CMAP, vmin=0.0, vmax=1.0, aspect="equal", interpolation="nearest")
            for (layer, head), value in np.ndenumerate(values):
                dark = relative_luminance(image.cmap(image.norm(value))) < 0.35
                ax.text(
                    head,
                    layer,
                    f"{value:.2f}",
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="white" if dark else "black",
                )
            ax.set_title(f"{name}\n{quantity}" if r == 0 else quantity, fontsize=8)
            ax.set_xticks(range(heads), [str(h) for h in range(heads)], fontsize=7)
            ax.set_yticks(range(layers), [str(layer) for layer in range(layers)], fontsize=7)
            ax.tick_params(length=0)
            if r == len(rows) - 1:
                ax.set_xlabel("head", fontsize=8)
            if c == 0:
                ax.set_ylabel("layer", fontsize=8)
    bar = fig.colorbar(image, ax=list(axes.ravel()), fraction=0.025, pad=0.02)  # type: ignore[arg-type]  # drawn above
    bar.set_label(colorbar, fontsize=8)
    bar.ax.tick_params(labelsize=7)
    return fig


def variant_loss_curves(
    histories: Mapping[str, Sequence[float]],
    *,
    vocab_size: int,
    colors: Sequence[str] = VARIANT_COLORS,
    styles: Sequence[str] = VARIANT_STYLES,
    window: int = 10,
    ax: Axes | None = None,
) -> Axes:
    """Each variant's per-step loss on the repeated tokens (``histories``: name -> losses, e.g. a run's
    ``induction_loss``) on one axes, in the variants' colours, as
    :func:`~mhsa_helpers.teaching.figures.induction_loss_curves` draws them."""
    return induction_loss_curves(histories, vocab_size=vocab_size, colors=colors, styles=styles, window=window, ax=ax)


def first_token_map(first_token: torch.Tensor | np.ndarray, *, fig: Figure | None = None) -> Figure:
    """The real model's weight on the first token, ``(layers, heads)`` or ``(prompts, layers, heads)`` (averaged over
    the prompts): a layer × head map on a 0-1 scale with its colour bar (layer 0 at the top), and beside it each
    layer's mean over its heads, with the range over the prompts when there are several."""
    values = as_array("first_token", first_token)
    if values.ndim == 2:
        values = values[None]
    if values.ndim != 3 or 0 in values.shape:
        raise ValueError(f"first_token must be (layers, heads) or (prompts, layers, heads), got shape {values.shape}")
    if values.min() < -1e-6 or values.max() > 1 + 1e-6:
        raise ValueError("first_token must hold attention weights in [0, 1]")
    mean = values.mean(0)  # (layers, heads)
    layers, heads = mean.shape
    if fig is None:
        fig = plt.figure(figsize=(7.6, 0.16 * layers + 1.6))
    grid = fig.add_gridspec(1, 2, width_ratios=(heads * 0.36 + 0.9, 2.3), wspace=0.5)
    ax = fig.add_subplot(grid[0, 0])
    image = ax.imshow(mean, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto", interpolation="nearest")
    ax.set_xticks(range(heads))
    ax.set_yticks(range(0, layers, 2))
    ax.set_xlabel("head", fontsize=9)
    ax.set_ylabel("layer", fontsize=9)
    ax.tick_params(labelsize=8)
    prompts = values.shape[0]
    ax.set_title(f"each head (mean of {prompts} prompts)" if prompts > 1 else "each head", fontsize=9)
    bar = fig.colorbar(image, ax=ax, fraction=0.1, pad=0.04)
    bar.set_label("weight on the first token\n(mean over queries t ≥ 1)", fontsize=8)
    bar.ax.tick_params(labelsize=7)
    side = fig.add_subplot(grid[0, 1], sharey=ax)
    per_prompt = values.mean(2)  # (prompts, layers)
    y = np.arange(layers)
    layer_mean = per_prompt.mean(0)
    side.barh(y, layer_mean, height=0.7, color="#7f7f7f")
    title = "each layer: mean over its heads"
    if prompts > 1:
        low, high = per_prompt.min(0), per_prompt.max(0)
        side.errorbar(
            layer_mean, y, xerr=[layer_mean - low, high - layer_mean], fmt="none", ecolor="black", elinewidth=0.8,
            capsize=1.5,
        )  # fmt: skip
        title += "\n(black: range over the prompts)"
    side.set_xlim(0, 1)
    side.set_xlabel("weight on the first token", fontsize=9)
    side.set_title(title, fontsize=9)
    side.tick_params(labelsize=8, labelleft=False)
    side.grid(True, axis="x", alpha=0.3)
    return fig
