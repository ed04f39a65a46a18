"""A benchmark table drawn as lines: one line per implementation, time (or memory) against size."""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

from matplotlib.axes import Axes

from ._common import _new_axes

__all__ = ["benchmark_plot"]


def benchmark_plot(
    rows: Sequence[Dict[str, object]],
    *,
    x: str = "n",
    y: str = "median_ms",
    group: str = "implementation",
    ax: Optional[Axes] = None,
    logy: bool = True,
    logx: Optional[bool] = None,
) -> Axes:
    """One line per ``group`` of ``rows`` (e.g. a benchmark table), ``y`` against ``x``.

    Groups keep the order in which they first appear; points are sorted by ``x``.
    ``logx`` defaults to a log axis when every ``x`` is positive and they span 16x or more.
    """
    if isinstance(rows, dict) or not isinstance(rows, Sequence) or len(rows) == 0:
        raise ValueError(f"rows must be a non-empty list of dicts, got {type(rows).__name__} {rows!r:.60}")
    series: Dict[object, List[Tuple[float, float]]] = {}
    for index, row in enumerate(rows):
        if not isinstance(row, dict):
            raise TypeError(f"rows[{index}] must be a dict, got {type(row).__name__}")
        missing = [key for key in (x, y, group) if key not in row]
        if missing:
            raise ValueError(f"rows[{index}] must have the keys {x!r}, {y!r} and {group!r}, missing {missing}")
        series.setdefault(row[group], []).append((float(row[x]), float(row[y])))
    if ax is None:
        ax = _new_axes((5.0, 3.4))
    all_x = [px for points in series.values() for px, _ in points]
    if logx is None:
        logx = min(all_x) > 0 and max(all_x) / min(all_x) >= 16
    for name, points in series.items():
        points.sort()
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", markersize=4, label=str(name))
    if logy:
        ax.set_yscale("log")
    if logx:
        ax.set_xscale("log")
    ax.set_xlabel(x, fontsize=8)
    ax.set_ylabel(y, fontsize=8)
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=7, title=group, title_fontsize=7)
    ax.grid(True, which="major", alpha=0.3)
    return ax
