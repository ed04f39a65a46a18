"""The explorers on the website, where no kernel runs: their pictures computed when the site is built.

On the website (``make site``) an explorer's controls cannot call Python. So, at build time, each explorer
cell of a lesson notebook (``explorer = NAME(arguments)`` whose output is an :class:`~.explorer.Explorer`) is
made again with the same call, and moved through a grid of its settings; each setting's picture (the kernel's
own figure, drawn by the same explorer code, as WebP) and caption are saved, and the page's script
(``book/_static/explorers.js``) shows them as its controls move. Nothing is recomputed in the browser.

Where a control offers more values than the grid can hold (:data:`STATE_LIMIT` settings per explorer), it
offers fewer, evenly spaced, always with its first, last and starting value; where even that is too many, the
sliders move one at a time (:func:`site_controls`). The page says which (:func:`offered`). A setting the
explorer refuses (e.g. a head that a smaller number of heads does not have) is left out, and the page moves the
other controls to the nearest setting it has, as the explorer's own controls would.

:func:`site_explorers` is what the website's build calls: the manifest of every explorer cell, keyed by
``(notebook, cell index)``, with its pictures written once into a cache folder named by a hash of the
package's code and the cell's call (a second build, e.g. the browser tests', reuses them).
:func:`budget_table` checks the pictures' bytes per page and for the site, and the time computing them took.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import io
import itertools
import json
import math
import shutil
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import ipywidgets as widgets
import numpy as np
from PIL import Image as PILImage

from .explorer import STATIC_NOTE, Explorer, option_values

__all__ = [
    "BUILD_BUDGET",
    "MOST_SETTINGS",
    "PAGE_BUDGET",
    "PICTURE_QUALITY",
    "SITE_BUDGET",
    "STATE_LIMIT",
    "ExplorerCell",
    "SiteControl",
    "SiteExplorer",
    "budget_table",
    "explorer_cells",
    "explorer_manifest",
    "offered",
    "settings",
    "site_controls",
    "site_explorers",
]

#: Settings of a grid of every control precomputed per explorer at most (a soft limit: a grid of two values per
#: control may pass it).
STATE_LIMIT = 48
#: Settings an explorer holds at most when its sliders move one at a time for every combination of its choices:
#: at 15-45 KB a picture, within a page's budget.
MOST_SETTINGS = 128
#: WebP quality of the pictures (0-100): at the explorers' DPI, 30-45 KB a picture.
PICTURE_QUALITY = 75
#: Bytes of explorer pictures one page may hold (all its explorers' settings), and the whole site.
PAGE_BUDGET = 6_000_000
SITE_BUDGET = 40_000_000
#: Seconds that computing every explorer's pictures may take, in all (once per version of the code: about 100 s
#: on the 2-core machine CI runs on, 4-5 minutes with other work on both cores).
BUILD_BUDGET = 600


@dataclass(frozen=True)
class SiteControl:
    """One control as the website offers it: ``kind`` "range" (a slider over ``labels``), "check" (a checkbox)
    or "buttons" (one button per label); ``values`` the explorer's values offered, ``labels`` how each reads,
    ``start`` the index of the notebook's value, ``all_values`` how many the explorer's control has,
    ``combined`` whether its values meet every value of the other combined controls (else it moves alone), and
    ``everywhere`` whether, moving alone, it does so at every combination of the combined controls (else at their
    start)."""

    name: str
    label: str
    kind: Literal["range", "check", "buttons"]
    values: tuple[Any, ...]
    labels: tuple[str, ...]
    start: int
    all_values: int
    combined: bool = True
    everywhere: bool = False


@dataclass(frozen=True)
class ExplorerCell:
    """An explorer cell of a notebook: its index among the notebook's cells and the call that makes it."""

    notebook: str
    index: int
    factory: str
    kwargs: dict[str, Any]

    @property
    def key(self) -> str:
        """The explorer's name on the site: the notebook's stem and the cell's index."""
        return f"{Path(self.notebook).stem}-{self.index}"


def _readout(widget: widgets.Widget, value: Any) -> str:
    fmt = str(getattr(widget, "readout_format", "") or "").replace("~", "")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and fmt:
        try:
            return format(value, fmt)
        except ValueError:
            pass
    return f"{value:g}" if isinstance(value, float) else str(value)


def _all_values(widget: widgets.Widget) -> tuple[list[Any], list[str]]:
    """Every value ``widget`` offers, and how each reads."""
    if isinstance(widget, widgets.Checkbox):
        return [False, True], ["off", "on"]
    if hasattr(widget, "options"):
        labels = [str(o[0]) if isinstance(o, tuple) else str(o) for o in widget.options]
        return option_values(widget), labels
    if isinstance(widget, widgets.FloatLogSlider):
        count = round((widget.max - widget.min) / widget.step) + 1
        values = [float(widget.base ** round(widget.min + i * widget.step, 10)) for i in range(count)]
    elif isinstance(widget, widgets.FloatSlider):
        count = round((widget.max - widget.min) / widget.step) + 1
        values = [round(widget.min + i * widget.step, 10) for i in range(count)]
    else:
        values = list(range(widget.min, widget.max + 1, widget.step))
    return values, [_readout(widget, value) for value in values]


def _nearest(values: Sequence[Any], value: Any) -> int:
    if value in values:
        return list(values).index(value)
    return int(np.argmin([abs(float(v) - float(value)) for v in values]))


def _thinned(count: int, keep: int, must: int) -> list[int]:
    """``keep`` indices of ``range(count)`` evenly spaced, with the first, the last and ``must`` (which takes the
    place of the nearest one between them, or is added when there is none)."""
    chosen = sorted({round(i) for i in np.linspace(0, count - 1, max(keep, 2))})
    if must not in chosen:
        inner = chosen[1:-1]
        if inner:
            chosen.remove(min(inner, key=lambda i: abs(i - must)))
        chosen = sorted([*chosen, must])
    return chosen


#: Values a control keeps at least in a grid; below this the explorer moves one control at a time instead.
GRID_VALUES = 4
#: Grids up to this many settings are counted by asking the explorer which it takes (some, e.g. head 5 of 2,
#: it refuses); larger ones count all.
COUNT_ASKED = 20_000
#: Values a control keeps at most when the explorer moves one control at a time.
STAR_VALUES = 12


def _values_over_settings(explorer: Explorer) -> dict[str, tuple[list[Any], list[str]]]:
    """Every value each control offers, and how each reads, over the settings of the others: a control whose
    options follow another's (e.g. which head to frame, after the number of heads) offers all it can have.
    Each control with a list of options is set alone to each of them (without drawing) to see what the others
    then offer."""
    everything = {name: _all_values(widget) for name, widget in explorer.controls.items()}
    if not any(hasattr(widget, "options") for widget in explorer.controls.values()):
        return everything
    start = explorer.values()
    for name, widget in explorer.controls.items():
        if not hasattr(widget, "options") or len(everything[name][0]) > STAR_VALUES:
            continue
        for value in list(everything[name][0]):
            try:
                explorer.set_values(**{**start, name: value})
            except ValueError:
                continue
            for other, other_widget in explorer.controls.items():
                if other == name or not hasattr(other_widget, "options"):
                    continue
                values, labels = everything[other]
                for new_value, new_label in zip(*_all_values(other_widget), strict=True):
                    if new_value not in values:
                        values.append(new_value)
                        labels.append(new_label)
                if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
                    order = sorted(range(len(values)), key=lambda i: values[i])
                    everything[other] = ([values[i] for i in order], [labels[i] for i in order])
    explorer.set_values(**start)
    return everything


def site_controls(explorer: Explorer, limit: int = STATE_LIMIT, most: int = MOST_SETTINGS) -> list[SiteControl]:
    """The explorer's controls with the values the website offers, and which of them combine.

    The settings offered (:func:`settings`) are every combination of the values of the controls marked
    ``combined``, the others at their start, and each other control moved alone (from the start, or at every one
    of those combinations: ``everywhere``). All controls
    combine while the explorer takes at most ``limit`` of their settings: with all of each control's values
    if it can, else the control with the most values keeps about half of them, again and again (always its
    first, last and current value), until the grid fits or a halving leaves a control fewer than
    :data:`GRID_VALUES` values (that grid is kept if it fits: notebook 05's offset keeps 3). Otherwise
    the choices (buttons, checkboxes, lists of options) combine, if at most ``limit`` of their settings
    are taken, and each slider moves alone: at every combination of the choices while that makes at most
    ``most`` settings (notebook 11's layer and head for every sentence), else from their start (only when there
    are two choices or more); or else every control moves alone. A control moving alone offers at most
    :data:`STAR_VALUES` values."""
    everything = _values_over_settings(explorer)
    dependent = {n for n, w in explorer.controls.items() if len(everything[n][0]) > len(_all_values(w)[0])}
    start = {name: _nearest(everything[name][0], widget.value) for name, widget in explorer.controls.items()}
    offered = {name: list(range(len(values))) for name, (values, _) in everything.items()}

    def accepted(names: Sequence[str]) -> int:
        """How many settings of the grid of ``names`` (the others at the start) the explorer takes (all of them,
        when too many to ask)."""
        product = math.prod(len(offered[n]) for n in names)
        if product > COUNT_ASKED:
            return product
        return sum(
            explorer.accepts(**{n: everything[n][0][i] for n, i in zip(names, indices, strict=True)})
            for indices in itertools.product(*(offered[n] for n in names))
        )

    names = list(explorer.controls)
    count = accepted(names)
    while count > limit:
        # A control whose options follow another's (more values than it shows now) is thinned last: thinning
        # both would leave few of their pairs that the explorer takes.
        name = max(offered, key=lambda n: (len(offered[n]) > GRID_VALUES and n not in dependent, len(offered[n])))
        offered[name] = _thinned(len(everything[name][0]), math.ceil(len(offered[name]) / 2), start[name])
        count = accepted(names)
        if len(offered[name]) < min(GRID_VALUES, len(everything[name][0])):
            break
    combined = set(names)
    everywhere = False
    if count > limit:
        # Every combination of the choices (buttons, checkboxes, lists of options), each slider alone at each of
        # them or from the start; or, when the choices alone are too many, every control alone.
        offered = {
            name: _thinned(len(values), STAR_VALUES, start[name])
            if len(values) > STAR_VALUES
            else list(range(len(values)))
            for name, (values, _) in everything.items()
        }
        choices = [
            n
            for n in names
            if hasattr(explorer.controls[n], "options") or isinstance(explorer.controls[n], widgets.Checkbox)
        ]
        combos = accepted(choices) if choices else 0
        moves = sum(len(offered[n]) - 1 for n in names if n not in choices)
        everywhere = 0 < combos <= limit and combos * (1 + moves) <= most
        combined = set(choices) if everywhere or (len(choices) > 1 and combos <= limit) else set()
    controls = []
    for name, widget in explorer.controls.items():
        values, labels = everything[name]
        kind: Literal["range", "check", "buttons"] = (
            "check"
            if isinstance(widget, widgets.Checkbox)
            else "buttons"
            if isinstance(widget, (widgets.ToggleButtons, widgets.Dropdown, widgets.RadioButtons))
            else "range"
        )
        indices = offered[name]
        controls.append(
            SiteControl(
                name=name,
                label=str(widget.description or name),
                kind=kind,
                values=tuple(values[i] for i in indices),
                labels=tuple(labels[i] for i in indices),
                start=indices.index(start[name]),
                all_values=len(values),
                combined=name in combined,
                everywhere=everywhere and name not in combined,
            )
        )
    return controls


def _picture(explorer: Explorer) -> bytes:
    """The explorer's figure as drawn now, sharp (its DPI), as WebP."""
    buffer = io.BytesIO()
    PILImage.fromarray(np.ascontiguousarray(explorer.sharp_pixels())).save(
        buffer, format="webp", quality=PICTURE_QUALITY, method=6
    )
    return buffer.getvalue()


def settings(controls: Sequence[SiteControl]) -> Iterator[tuple[int, ...]]:
    """The indices of the settings offered: every combination of the combined controls' values (the others
    at their start), then each other control's values, alone: at every one of those combinations if it moves
    ``everywhere``, else at the start."""
    start = tuple(control.start for control in controls)
    combined = [k for k, control in enumerate(controls) if control.combined]
    grid = []
    for chosen in itertools.product(*(range(len(controls[k].values)) for k in combined)):
        indices = list(start)
        for k, index in zip(combined, chosen, strict=True):
            indices[k] = index
        grid.append(tuple(indices))
    yield from grid
    for k, control in enumerate(controls):
        if not control.combined:
            for base in grid if control.everywhere else [start]:
                for index in range(len(control.values)):
                    if index != control.start:
                        yield (*base[:k], index, *base[k + 1 :])


def _states(explorer: Explorer, controls: list[SiteControl]) -> Iterator[tuple[tuple[int, ...], bytes, str]]:
    """Every setting the explorer accepts as it is: its indices, picture and caption."""
    for indices in settings(controls):
        wanted = {control.name: control.values[i] for control, i in zip(controls, indices, strict=True)}
        try:
            explorer.update(**wanted)
        except ValueError:
            continue  # a setting the explorer refuses (e.g. head 3 of 2)
        if explorer.values() != wanted:
            continue  # the explorer moved another control to fit: that setting has its own entry
        yield indices, _picture(explorer), str(explorer.data.get("caption", ""))


def _listed(names: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return " and ".join(names) if len(names) < 3 else f"{', '.join(names[:-1])} and {names[-1]}"


def offered(controls: Sequence[SiteControl]) -> str:
    """What the website offers of an explorer, in the words its page shows under it."""
    thinned = [c for c in controls if len(c.values) < c.all_values]
    alone = [c.label for c in controls if not c.combined]
    said = []
    if alone and len(alone) == len(controls):
        said.append("One control at a time: moving one sets the others back to the notebook's values.")
    elif any(c.everywhere for c in controls):
        choices = _listed([c.label for c in controls if c.combined])
        if len(alone) == 1:
            said.append(f"Every value of {alone[0]} for every setting of {choices}.")
        else:
            other = (
                "the other back to the notebook's value"
                if len(alone) == 2
                else "the others back to the notebook's values"
            )
            said.append(f"One at a time, for every setting of {choices}: {_listed(alone)} (moving one sets {other}).")
    elif alone:
        moved = "it sets the other controls" if len(alone) == 1 else "one sets the others"
        said.append(f"One at a time: {_listed(alone)} (moving {moved} back to the notebook's values).")
    if thinned:
        said.append(
            "Offered: "
            + "; ".join(f"{c.label} {', '.join(c.labels)} (of {c.all_values} values)" for c in thinned)
            + "."
        )
    if not said:
        said.append("Every setting of its controls is here.")
    return " ".join(said)


def explorer_manifest(explorer: Explorer, folder: Path, *, limit: int = STATE_LIMIT) -> dict[str, Any]:
    """Move ``explorer`` through the settings the website offers (:func:`site_controls`), write each picture
    once into ``folder`` (named by its content's hash) and return the manifest the page's script reads: the
    controls, the settings (``"i,j,k"`` -> picture and caption), the figure's width as shown, and a sentence
    saying what is offered."""
    folder.mkdir(parents=True, exist_ok=True)
    start = explorer.values()
    controls = site_controls(explorer, limit)
    states: dict[str, dict[str, str]] = {}
    for indices, picture, caption in _states(explorer, controls):
        name = hashlib.sha256(picture).hexdigest()[:16] + ".webp"
        path = folder / name
        if not path.exists():
            path.write_bytes(picture)
        states[",".join(map(str, indices))] = {"picture": name, "caption": caption}
    explorer.update(**start)
    return {
        "title": explorer.title,
        "width": explorer.shown_width,
        "controls": [{"name": c.name, "label": c.label, "kind": c.kind, "labels": list(c.labels)} for c in controls],
        "start": [c.start for c in controls],
        "states": states,
        "offered": offered(controls),
    }


def explorer_cells(notebook: Path, root: Path) -> list[ExplorerCell]:
    """The explorer cells of ``notebook``: code cells with a line ``explorer = NAME(literal arguments)`` whose
    output is an explorer's (its text says it needs a kernel)."""
    cells = json.loads((root / notebook).read_text(encoding="utf-8"))["cells"]
    found = []
    for index, cell in enumerate(cells):
        if cell["cell_type"] != "code":
            continue
        shown = "".join("".join(output.get("data", {}).get("text/plain", "")) for output in cell.get("outputs", []))
        if STATIC_NOTE not in shown:
            continue
        for statement in ast.parse("".join(cell["source"])).body:
            call = statement.value if isinstance(statement, ast.Assign) else None
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and not call.args:
                kwargs = {str(k.arg): ast.literal_eval(k.value) for k in call.keywords}
                found.append(ExplorerCell(notebook.as_posix(), index, call.func.id, kwargs))
                break
        else:
            raise ValueError(f"{notebook} cell {index} shows an explorer but makes it with no `name = factory(...)`")
    return found


def _code_hash(package: Path) -> str:
    """A hash of every file of the package (its code, and artefacts such as notebook 07's checkpoints)."""
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


@dataclass(frozen=True)
class SiteExplorer:
    """An explorer cell as the website's build made it: the ``manifest`` its page reads
    (:func:`explorer_manifest`), the cache ``folder`` holding its pictures (in ``pictures/``) and the ``seconds``
    making them took."""

    manifest: dict[str, Any]
    folder: Path
    seconds: float


def site_explorers(lessons: Sequence[Any], root: Path, cache: Path) -> dict[str, SiteExplorer]:
    """Every explorer cell of ``lessons``' notebooks as the website shows it, keyed by :attr:`ExplorerCell.key`;
    its pictures are made here unless a build of the same code and call made them already."""
    import matplotlib

    matplotlib.use("Agg")
    package = Path(__file__).resolve().parents[1]
    code = _code_hash(package)
    explorers: dict[str, SiteExplorer] = {}
    for lesson in lessons:
        module = importlib.import_module(f"{package.name}.lessons.{lesson.slug}")
        for cell in explorer_cells(Path(lesson.notebook), root):
            call = json.dumps([cell.factory, cell.kwargs, STATE_LIMIT, PICTURE_QUALITY], sort_keys=True)
            key = hashlib.sha256((code + call).encode()).hexdigest()[:20]
            folder = cache / f"{cell.key}-{key}"
            made_path = folder / "made.json"
            if not made_path.exists():
                shutil.rmtree(folder, ignore_errors=True)
                began = time.perf_counter()
                explorer = getattr(module, cell.factory)(**cell.kwargs)
                try:
                    manifest = explorer_manifest(explorer, folder / "pictures")
                finally:
                    explorer.close()
                made = {"manifest": manifest, "seconds": round(time.perf_counter() - began, 1)}
                made_path.write_text(json.dumps(made), encoding="utf-8")
            made = json.loads(made_path.read_text(encoding="utf-8"))
            explorers[cell.key] = SiteExplorer(made["manifest"], folder, made["seconds"])
    return explorers


def budget_table(explorers: dict[str, SiteExplorer]) -> list[str]:
    """Markdown lines: per page, its explorers, settings, bytes of pictures and seconds to compute them, then
    the whole site's; a page over :data:`PAGE_BUDGET`, a site over :data:`SITE_BUDGET` or computing over
    :data:`BUILD_BUDGET` raises ``ValueError`` naming it. ``explorers`` as :func:`site_explorers` returns them."""
    rows: dict[str, list[float]] = {}
    for key, made in explorers.items():
        pictures = sum(path.stat().st_size for path in (made.folder / "pictures").iterdir())
        row = rows.setdefault(key.rsplit("-", 1)[0], [0, 0, 0, 0.0])
        for k, value in enumerate((1, len(made.manifest["states"]), pictures, made.seconds)):
            row[k] += value
    site = [sum(column) for column in zip(*rows.values(), strict=True)]
    lines = [
        "| page | explorers | settings | MB of pictures | seconds to compute |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for page, (count, states, size, seconds) in [*rows.items(), ("whole site", site)]:
        lines.append(f"| {page} | {count} | {states} | {size / 1e6:.2f} | {seconds:.0f} |")
    for page, (_, _, size, _) in rows.items():
        if size > PAGE_BUDGET:
            raise ValueError(f"{page}: its explorers' pictures take {size:,} bytes, over the {PAGE_BUDGET:,} budget")
    if site[2] > SITE_BUDGET:
        raise ValueError(f"the explorers' pictures take {site[2]:,} bytes, over the site's {SITE_BUDGET:,} budget")
    if site[3] > BUILD_BUDGET:
        raise ValueError(f"the explorers took {site[3]:.1f} s to compute, over the {BUILD_BUDGET} s budget")
    return lines
