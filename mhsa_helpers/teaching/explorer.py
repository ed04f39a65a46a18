"""What every explorer shares: the :class:`Explorer` widget (controls, caption, figure),
the cache of its off-screen figures (one per layout, redrawn by blitting), the setting
checks and seeding helpers, and the constants the explorers document (resolution, seeds,
sentences and input scale), so that a notebook can rebuild any explorer's numbers.
"""

from __future__ import annotations

import functools
import html
import io
import math
import weakref
from collections import OrderedDict
from contextlib import contextmanager
from typing import Any, Dict, Hashable, Iterator, List, Optional, Sequence, Tuple

import ipywidgets as widgets
import numpy as np
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from PIL import Image as PILImage

from ..checks import check_int
from ..examples import TELESCOPE_SENTENCE, sentence_embeddings
from ..mha import MultiHeadSelfAttention

__all__ = [
    "Explorer",
    "DPI",
    "LAYOUT_CACHE",
    "MODEL_SEED",
    "DROPOUT_SEED",
    "SEED_002_SEED",
    "SCALING_SENTENCES",
    "HEADS_SENTENCE",
    "INPUT_SCALE",
]

#: Resolution of the explorers' figures (pixels per inch): small PNGs redraw fast.
DPI = 80
#: Figures kept per explorer, one per layout (e.g. per number of heads and sequence length);
#: each holds a few MB of canvas, background and artists.
LAYOUT_CACHE = 4
#: ``torch.manual_seed`` right before building the explorers' :class:`MultiHeadSelfAttention`.
MODEL_SEED = 0
#: ``torch.manual_seed`` right before the masking explorer's training-mode dropout.
DROPOUT_SEED = 0
#: Seed 002's ``torch.manual_seed`` before its three ``nn.Linear(3, 3, bias=False)`` (query, key, value).
SEED_002_SEED = 789
#: Sentences of the scaling explorer.
SCALING_SENTENCES = ("She loves cats", "Your journey starts with one step")
#: Words fed to the heads and MHSA explorers.
HEADS_SENTENCE = TELESCOPE_SENTENCE
#: Their inputs are ``INPUT_SCALE * sentence_embeddings(HEADS_SENTENCE, d_model, seed=MODEL_SEED)``:
#: a freshly initialised module's small weights give almost uniform attention on unit-size
#: inputs, and larger inputs make the heads' differences visible.
INPUT_SCALE = 3.0

_SLIDER = {"continuous_update": False, "style": {"description_width": "initial"}}


@contextmanager
def _seeded(seed: int) -> Iterator[None]:
    """Run with ``torch.manual_seed(seed)`` without disturbing the caller's random state."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def _check_bool(name: str, value: object) -> bool:
    # bool(value) would turn any non-empty string, e.g. "no", into True.
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}")
    return bool(value)


def _divisors(n: int) -> List[int]:
    return [d for d in range(1, n + 1) if n % d == 0]



def _check_float(name: str, value: object, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise TypeError(f"{name} must be a number in [{low:g}, {high:g}], got {type(value).__name__} {value!r}")
    if not (math.isfinite(float(value)) and low <= float(value) <= high):
        raise ValueError(f"{name} must be in [{low:g}, {high:g}], got {name}={value}")
    return float(value)



def _numpy(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().double().numpy()


def _log_slider(
    description: str, value: float, low_exp: float, high_exp: float, step: float, readout_format: str
) -> widgets.FloatLogSlider:
    # readout_format is a d3-format string, read by the browser.
    return widgets.FloatLogSlider(value=value, base=10, min=low_exp, max=high_exp, step=step,
                                  description=description, readout_format=readout_format, **_SLIDER)


#: Explorers not closed yet (weakly held): a new explorer trims the figure cache of the older
#: ones of its kind, which are usually left behind by re-running the cell that made them.
_OPEN_EXPLORERS: "weakref.WeakSet[Explorer]" = weakref.WeakSet()


class Explorer(widgets.VBox):
    """A row of controls, a caption and a figure that is redrawn whenever a control changes.

    Attributes:
        controls: ``{name: widget}``; set ``controls[name].value`` from Python to move one.
        data: what the last redraw drew, e.g. ``data["weights"]`` (numpy arrays and plain values).
        redraw_count: how many times the figure was drawn.

    Each explorer keeps the figures of its last :data:`LAYOUT_CACHE` layouts. Creating an
    explorer trims every older explorer of the same kind to the figure it shows (it still
    works, and rebuilds other layouts when moved); :meth:`close` frees everything.

    Subclasses provide ``_check`` (validate a full set of values), ``_compute`` (values ->
    data, with the package), ``_layout`` (a key: one figure is built per key and reused),
    ``_build``/``_update`` (draw the data), ``_static``/``_dynamic`` (what to redraw) and
    ``_caption_text``.
    """

    figsize: Tuple[float, float] = (7.5, 3.6)
    #: Controls that change which values other controls offer (e.g. RoPE on/off changes the
    #: head counts on offer); ``update`` sets them before the rest.
    options_controls: Tuple[str, ...] = ()

    def __init__(self, controls: Dict[str, widgets.Widget], *, title: str) -> None:
        self.controls: Dict[str, widgets.Widget] = dict(controls)
        self.data: Dict[str, Any] = {}
        self.redraw_count = 0
        self._names = {id(widget): name for name, widget in self.controls.items()}
        self._syncing = False
        self._batch = 0
        self._layouts: "OrderedDict[Hashable, _Layout]" = OrderedDict()
        self._current: Optional[_Layout] = None
        self._image = widgets.Image(format="png")
        self._image.add_class("mhsa-explorer-figure")
        self._caption = widgets.HTML(value="")
        self._caption.add_class("mhsa-explorer-caption")
        for name, widget in self.controls.items():
            widget.add_class(f"mhsa-control-{name.replace('_', '-')}")
            widget.observe(self._on_change, names="value")
        rows = [widgets.HBox(list(self.controls.values())[i : i + 3]) for i in range(0, len(self.controls), 3)]
        header = widgets.HTML(value=f"<b>{html.escape(title)}</b>")
        super().__init__(children=[header, *rows, self._caption, self._image])
        self.add_class("mhsa-explorer")
        self._closed = False
        self.redraw()
        for other in list(_OPEN_EXPLORERS):
            if type(other) is type(self):
                other._trim_layouts(keep=1)
        _OPEN_EXPLORERS.add(self)

    # ------------------------------------------------------------ public

    def values(self) -> Dict[str, Any]:
        """The current value of every control, ``{name: value}``."""
        return {name: widget.value for name, widget in self.controls.items()}

    def update(self, **values: Any) -> "Explorer":
        """Set several controls at once (checked first, one redraw at the end)::

            explorer.update(num_heads=4, seq_len=3)
        """
        unknown = sorted(set(values) - set(self.controls))
        if unknown:
            raise ValueError(f"unknown setting(s) {unknown}: this explorer has {sorted(self.controls)}")
        merged = {**self.values(), **values}
        self._check(merged)
        self._batch += 1
        try:
            # Option-changing controls first, then the controls' own order, so that e.g. num_heads
            # widens the head selector before the head is chosen.
            order = [*self.options_controls, *(n for n in self.controls if n not in self.options_controls)]
            for name in order:
                if name in values:
                    self.controls[name].value = values[name]
        finally:
            self._batch -= 1
        self.redraw()
        return self

    def redraw(self) -> None:
        """Recompute with the current control values and redraw the figure."""
        if self._closed:
            raise RuntimeError("this explorer was closed: create a new one to draw again")
        values = self.values()
        self._check(values)
        data = self._compute(values)
        layout = self._layout_for(data)
        self._update(layout.artists, data)
        data["panels"] = sum(1 for ax in layout.figure.axes if ax.images)
        layout.draw(self._static(data), self._dynamic(layout.artists))
        self._image.value = layout.png()
        caption = self._caption_text(data)
        data["caption"] = caption
        self._caption.value = f"<span class='mhsa-caption-text'>{html.escape(caption)}</span>"
        self.data = data
        self.redraw_count += 1

    def _layout_for(self, data: Dict[str, Any]) -> "_Layout":
        """The figure for this data's layout: built on first use, then kept (the last
        :data:`LAYOUT_CACHE` of them), since building axes costs more than drawing them."""
        key = self._layout(data)
        layout = self._layouts.get(key)
        if layout is None:
            figure = Figure(figsize=self.figsize, dpi=DPI)
            FigureCanvasAgg(figure)
            layout = _Layout(figure, self._build(figure, data))
            self._layouts[key] = layout
        self._layouts.move_to_end(key)
        self._current = layout
        self._trim_layouts(keep=LAYOUT_CACHE)
        return layout

    def _trim_layouts(self, keep: int) -> None:
        """Forget all but the ``keep`` most recently used figures (the current one is the last)."""
        while len(self._layouts) > keep:
            self._layouts.popitem(last=False)

    @property
    def figure(self) -> Figure:
        """The off-screen matplotlib Figure of the last redraw (for tests and saving)."""
        if self._current is None:
            raise RuntimeError("this explorer was closed: it holds no figure any more")
        return self._current.figure

    @property
    def png(self) -> bytes:
        """The PNG bytes currently shown."""
        return bytes(self._image.value)

    def close(self) -> None:
        """Remove the explorer from the page and free its figures and widgets.

        Re-running a notebook cell that creates an explorer leaves the old one alive (the
        widget registry and the cell's ``Out[...]`` refer to it); ``explorer.close()`` before
        re-running, or at the end, returns its memory.
        """
        if getattr(self, "_closed", True):  # closed already (ipywidgets 8 closes again on __del__)
            super().close()
            return
        self._closed = True
        for widget in self.controls.values():
            widget.unobserve(self._on_change, names="value")
        self._layouts.clear()
        self._current = None
        _OPEN_EXPLORERS.discard(self)
        # The children are the header, the rows of controls, the caption and the image. Each
        # widget made here has its own Layout (and Style) widget, registered like the widget.
        for widget in [*self.controls.values(), *self.children, self]:
            for part in (getattr(widget, "layout", None), getattr(widget, "style", None)):
                if isinstance(part, widgets.Widget):
                    part.close()
        for widget in [*self.controls.values(), *self.children]:
            widget.close()
        super().close()

    # ------------------------------------------------------------ internals

    def _on_change(self, change: Dict[str, Any]) -> None:
        if self._syncing:
            return  # a control being adjusted by _sync; the redraw comes after
        self._syncing = True
        try:
            self._sync(self._names[id(change["owner"])])
        finally:
            self._syncing = False
        if not self._batch:
            self.redraw()

    def _sync(self, changed: str) -> None:
        """Adjust dependent controls after ``changed`` moved (e.g. the head selector's range)."""

    def _check(self, values: Dict[str, Any]) -> None:
        raise NotImplementedError

    def _compute(self, values: Dict[str, Any]) -> Dict[str, Any]:
        raise NotImplementedError

    def _layout(self, data: Dict[str, Any]) -> Hashable:
        """Key of the figure's structure: the artists are rebuilt when it changes."""
        return None

    def _static(self, data: Dict[str, Any]) -> Hashable:
        """Key of everything drawn that is not in ``_dynamic`` (axis labels, frames...)."""
        return self._layout(data)

    def _dynamic(self, artists: Any) -> Optional[List[Any]]:
        """The artists that change between redraws of one layout (None: redraw everything)."""
        return None

    def _build(self, fig: Figure, data: Dict[str, Any]) -> Any:
        raise NotImplementedError

    def _update(self, artists: Any, data: Dict[str, Any]) -> None:
        raise NotImplementedError

    def _caption_text(self, data: Dict[str, Any]) -> str:
        raise NotImplementedError


class _Layout:
    """One figure with its artists, and the background the blitting pastes under them."""

    def __init__(self, figure: Figure, artists: Any) -> None:
        self.figure = figure
        self.artists = artists
        self.background: Any = None
        self.static_key: Optional[Hashable] = None

    def draw(self, static_key: Hashable, dynamic: Optional[List[Any]]) -> None:
        """Draw the figure into its canvas. Drawing text is most of the cost, and the axis
        labels and titles rarely change: so the static part is drawn once per ``static_key``
        and kept as a background, and each redraw pastes it and draws only the ``dynamic``
        artists on top (matplotlib's blitting). ``dynamic=None`` draws everything."""
        canvas = self.figure.canvas
        if dynamic is None:
            canvas.draw()
            return
        for artist in dynamic:
            artist.set_animated(True)  # left out of canvas.draw(), i.e. of the background
        if self.background is None or static_key != self.static_key:
            canvas.draw()
            self.background = canvas.copy_from_bbox(self.figure.bbox)
            self.static_key = static_key
        canvas.restore_region(self.background)
        for artist in dynamic:
            self.figure.draw_artist(artist)

    def png(self) -> bytes:
        rgba = np.asarray(self.figure.canvas.buffer_rgba())
        buffer = io.BytesIO()
        # Fast zlib level: the image is shown once and replaced at the next move.
        PILImage.fromarray(np.ascontiguousarray(rgba[..., :3])).save(buffer, format="png", compress_level=1)
        return buffer.getvalue()


def _set_options(widget: widgets.Widget, options: Sequence[Any], value: Any) -> None:
    """Replace a selection widget's options and select ``value`` (setting options alone
    would jump to the first option)."""
    if tuple(widget.options) != tuple(options):
        widget.options = options
    widget.value = value


# ===================================================================== heads and MHSA explorers (nb04, nb06)


def _heads_inputs(d_model: int) -> Tuple[Tuple[str, ...], torch.Tensor]:
    """``(tokens, inputs (8, d_model))`` of the heads and MHSA explorers."""
    tokens, embeddings = sentence_embeddings(HEADS_SENTENCE, d_model, seed=MODEL_SEED)
    return tokens, INPUT_SCALE * embeddings


def _heads_columns(heads: int) -> int:
    rows = math.ceil(heads / 6)
    return math.ceil(heads / rows)


@functools.lru_cache(maxsize=64)
def _cached_module(d_model: int, num_heads: int, options: Tuple[Tuple[str, Any], ...]) -> MultiHeadSelfAttention:
    with _seeded(MODEL_SEED):
        module = MultiHeadSelfAttention(d_model, num_heads, **dict(options))
    return module.eval().requires_grad_(False)


def _seeded_module(d_model: int, num_heads: int, **options: Any) -> MultiHeadSelfAttention:
    """``MultiHeadSelfAttention(d_model, num_heads, **options)`` right after ``torch.manual_seed(MODEL_SEED)``,
    in eval mode. Its parameters do not depend on ``num_heads``, causal or RoPE, so every
    configuration splits the same projections differently."""
    return _cached_module(d_model, num_heads, tuple(sorted(options.items())))


def _check_heads(name: str, num_heads: object, d_model: int, *, rope: bool = False) -> int:
    options = _divisors(d_model)
    choices = ", ".join(map(str, options))
    if isinstance(num_heads, bool) or not isinstance(num_heads, (int, np.integer)):
        raise TypeError(
            f"{name} must be an int that divides d_model={d_model} (choose from {choices}), "
            f"got {type(num_heads).__name__} {num_heads!r}"
        )
    if num_heads not in options:
        raise ValueError(f"{name} must divide d_model={d_model} (choose from {choices}), got {name}={num_heads!r}")
    if rope and (d_model // num_heads) % 2:
        raise ValueError(
            f"RoPE rotates pairs of features, so d_head = d_model / num_heads must be even: "
            f"{name}={num_heads} gives d_head={d_model // num_heads}"
        )
    return int(num_heads)


def _check_d_model(d_model: object) -> int:
    return check_int("d_model", d_model, 1, 64)
