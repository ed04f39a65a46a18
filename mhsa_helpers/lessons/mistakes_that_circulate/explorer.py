"""Notebook 10's explorer: pick a bug of the zoo and see its result next to the fix, on one
colour scale, with the code's mistake and its fix above, and the symptom measured and where the
bug was reported (or that it is an illustration) in the caption."""

from __future__ import annotations

import ipywidgets as widgets
import numpy as np

from ...checks import expect_choice
from ...teaching.explorer import SLIDER, Explorer, to_numpy
from ...teaching.figures import SCORES_CMAP, WEIGHTS_CMAP, Heatmap
from .bug_zoo import bug, bug_names

__all__ = ["bug_zoo_explorer"]


class _BugZooExplorer(Explorer):
    figsize = (8.0, 3.6)

    def __init__(self, name: str) -> None:
        controls = {
            "bug": widgets.SelectionSlider(options=list(bug_names()), value=name, description="bug", **SLIDER),
        }
        #: Each bug's computed data: a move back to a bug shown before only redraws it.
        self._computed: dict[str, dict] = {}
        super().__init__(controls, title="The bug zoo: each bug next to its fix")

    def _check(self, values):
        expect_choice("bug", values["bug"], bug_names())

    def _compute(self, values):
        name = values["bug"]
        if name not in self._computed:
            self._computed[name] = self._run(name)
        return dict(self._computed[name])

    def _run(self, name):
        item = bug(name)
        demo = item.run()
        buggy, fixed = to_numpy(demo.buggy), to_numpy(demo.fixed)
        return {
            "bug": item.name,
            "mistake": item.mistake,
            "fix": item.fix,
            "symptom": demo.symptom,
            "reports": [report.where for report in item.reports],
            "kind": demo.kind,
            "rows": list(demo.rows),
            "cols": list(demo.cols),
            "buggy": buggy,
            "fixed": fixed,
            "damage": demo.damage,
            # Both panels on one scale: 0..1 for weights, symmetric about 0 for outputs.
            "limit": float(max(np.abs(buggy).max(), np.abs(fixed).max()) or 1.0),
        }

    def _layout(self, data):
        return (data["kind"], data["buggy"].shape, tuple(data["rows"]), tuple(data["cols"]))

    def _static(self, data):
        # An output's colour bar spans ±limit, which differs between bugs of one layout.
        return (self._layout(data), None if data["kind"] == "weights" else data["limit"])

    def _build(self, fig, data):
        weights = data["kind"] == "weights"
        panels = []
        for left, title in ((0.1, "with the bug"), (0.55, "fixed")):
            ax = fig.add_axes((left, 0.2, 0.34, 0.58))
            panel = Heatmap(
                ax,
                data["buggy"],
                row_labels=data["rows"],
                col_labels=data["cols"],
                cmap=WEIGHTS_CMAP if weights else SCORES_CMAP,
                vmin=0.0 if weights else -1.0,
                vmax=1.0,
                annotate=max(data["buggy"].shape) <= 6,
                fontsize=7,
                row_name="query" if weights else "token",
                col_name="key" if weights else "feature",
            )
            ax.set_title(title, fontsize=9)
            panels.append(panel)
        bar = fig.add_axes((0.92, 0.2, 0.015, 0.58))
        colorbar = fig.colorbar(panels[1].image, cax=bar)
        colorbar.set_label("attention weight" if weights else "output value", fontsize=7)
        colorbar.ax.tick_params(labelsize=6)
        # What the code did and the fix, above the panels: they change with the bug.
        texts = [fig.text(0.02, y, "", fontsize=8, va="center") for y in (0.955, 0.905)]
        return panels, texts

    def _update(self, artists, data):
        (buggy, fixed), (code, fix) = artists
        if data["kind"] != "weights":
            for panel in (buggy, fixed):
                panel.set_range(-data["limit"], data["limit"])
        buggy.set_values(data["buggy"])
        fixed.set_values(data["fixed"])
        code.set_text(f"the code: {data['mistake']}")
        fix.set_text(f"the fix: {data['fix']}")

    def _dynamic(self, artists):
        panels, texts = artists
        return [artist for panel in panels for artist in panel.dynamic()] + list(texts)

    def _caption_text(self, data):
        where = (
            "reported in " + ", ".join(data["reports"])
            if data["reports"]
            else "an illustration (no public report cited)"
        )
        return f"{data['bug']}: {data['symptom']} · {where}"


def bug_zoo_explorer(*, bug: str = "inverted boolean mask") -> Explorer:
    """Pick a bug of :data:`~.bug_zoo.BUGS`: its result (left) next to the fixed code's (right), one
    colour scale for both. data: ``bug``, ``mistake``, ``fix``, ``symptom``, ``reports``, ``kind``
    (``"weights"`` or ``"output"``), ``buggy`` and ``fixed`` (2-D), ``damage`` (largest difference)."""
    expect_choice("bug", bug, bug_names())
    return _BugZooExplorer(bug)
