"""Notebook 13's pictures of the training comparison: the four kinds' copying losses on one axes, and what each
caches per token as a small bar panel beside them.

Each function draws on the figure or Axes it is given or, without one, on a new pyplot figure that Jupyter shows
below the cell.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ...teaching.figures import as_array, induction_loss_curves, new_axes

__all__ = ["KIND_COLORS", "KIND_STYLES", "cache_bars", "kind_comparison", "kind_loss_curves"]

#: One colour per kind of :data:`~.experiments.KINDS`, in its order (MHA black, MLA red).
KIND_COLORS = ("#000000", "#1f77b4", "#2ca02c", "#d62728")
#: One line style per kind: GQA's and MQA's curves can lie close together, so one of them is dashed.
KIND_STYLES = ("-", "-", "--", "-")


def kind_loss_curves(
    histories: Mapping[str, Sequence[float]],
    *,
    vocab_size: int,
    crossings: Mapping[str, int | None] | None = None,
    level: float = 1.0,
    colors: Sequence[str] = KIND_COLORS,
    styles: Sequence[str] = KIND_STYLES,
    window: int = 10,
    ax: Axes | None = None,
) -> Axes:
    """Each kind's per-step loss on the repeated tokens (``histories``: name -> ``(steps,)`` losses, a run's
    ``induction_loss``) on one axes, in the kinds' colours, as
    :func:`~mhsa_helpers.teaching.figures.induction_loss_curves` draws them (with a dashed line at ``level``).
    ``crossings`` (name -> step or None, e.g. ``result.steps_below(level)``), if given, marks the step at which
    each kind's trailing mean first fell below ``level`` with a dot on that line."""
    if crossings is not None and set(crossings) - set(histories):
        raise ValueError(f"crossings must name kinds of histories {list(histories)}, got {sorted(set(crossings))}")
    ax = induction_loss_curves(
        histories, vocab_size=vocab_size, colors=colors, styles=styles, level=level, window=window, ax=ax
    )
    for name, color in zip(histories, colors, strict=False):
        step = None if crossings is None else crossings.get(name)
        if step is not None:
            # phase_change_step counts the losses seen: its trailing mean first falls below level at index step - 1.
            ax.plot([step - 1], [level], marker="o", markersize=6, color=color, markeredgecolor="white", zorder=5)
    return ax


def cache_bars(
    numbers: Mapping[str, int],
    *,
    colors: Sequence[str] = KIND_COLORS,
    ax: Axes | None = None,
) -> Axes:
    """What each kind caches per token and layer (``numbers``: name -> count, e.g. a result's ``cache_numbers``) as
    horizontal bars, the first kind at the top, each count written at the end of its bar."""
    if not isinstance(numbers, Mapping) or not numbers:
        raise ValueError("numbers must map at least one kind's name to its cached numbers per token")
    counts = as_array("numbers", list(numbers.values()))
    if counts.ndim != 1 or (counts < 0).any():
        raise ValueError(f"numbers must hold counts >= 0, got {list(numbers.values())}")
    if len(colors) < len(numbers):
        raise ValueError(f"colors must give one per kind ({len(numbers)}), got {len(colors)}")
    if ax is None:
        ax = new_axes((3.2, 0.45 * len(numbers) + 1.0))
    y = np.arange(len(numbers))
    ax.barh(y, counts, height=0.6, color=list(colors[: len(numbers)]))
    top = float(counts.max()) or 1.0
    for row, count in zip(y, counts, strict=True):
        ax.text(count + 0.02 * top, float(row), f"{count:g}", va="center", ha="left", fontsize=8)
    ax.set_yticks(y, list(numbers), fontsize=8)
    ax.invert_yaxis()  # the first kind at the top, as in the legend
    ax.set_xlim(0, top * 1.25)
    ax.set_xlabel("numbers cached per token and layer", fontsize=9)
    ax.tick_params(labelsize=8)
    ax.grid(True, axis="x", alpha=0.3)
    return ax


def kind_comparison(
    histories: Mapping[str, Sequence[float]],
    numbers: Mapping[str, int],
    *,
    vocab_size: int,
    crossings: Mapping[str, int | None] | None = None,
    level: float = 1.0,
    fig: Figure | None = None,
) -> Figure:
    """:func:`kind_loss_curves` (left) and :func:`cache_bars` (right) side by side, in the same colours: the price
    of each kind in memory beside how fast it learned. ``histories`` and ``numbers`` must name the same kinds;
    ``crossings`` and ``level`` as in :func:`kind_loss_curves`."""
    if not isinstance(histories, Mapping) or not isinstance(numbers, Mapping) or list(histories) != list(numbers):
        given = (
            (list(histories), list(numbers)) if isinstance(histories, Mapping) and isinstance(numbers, Mapping) else ()
        )
        raise ValueError(f"histories and numbers must name the same kinds in the same order, got {given}")
    if fig is None:
        fig = plt.figure(figsize=(10.5, 3.8))
    left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": (3.0, 1.0), "wspace": 0.45})
    kind_loss_curves(histories, vocab_size=vocab_size, crossings=crossings, level=level, ax=left)
    cache_bars(numbers, ax=right)
    return fig
