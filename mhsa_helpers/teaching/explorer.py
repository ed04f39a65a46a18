"""What every explorer shares: the :class:`Explorer` widget (controls, caption, figure),
the cache of its off-screen figures (one per layout, redrawn by blitting), the setting
checks, slider defaults and seeding helpers.

Each lesson's explorer (``mhsa_helpers.lessons.<slug>.explorer``) subclasses
:class:`Explorer` and is returned by a factory function that checks its settings first::

    from mhsa_helpers.lessons.multi_head_attention import heads_explorer
    explorer = heads_explorer()
    explorer                                   # shows the controls, a caption and the figure
    explorer.controls["num_heads"].value = 4   # same as moving the control by hand
    explorer.data["weights"].shape             # (4, 6, 6): exactly what is drawn now

Every number drawn is computed by :mod:`mhsa_helpers` (never by a second copy of
the maths here). Figures are drawn by matplotlib into off-screen figures (one per
layout, reused) and sent as a JPEG to one ``ipywidgets.Image``, whose picture is
replaced in place: no pyplot figure is opened (so none leaks, however often a slider
moves), nothing flickers, and only core widgets that exist in both ipywidgets 7.7.1
(Colab) and 8.x (JupyterLab 4) are used.

A move answers in two steps: at once a picture at the screen's own resolution
(:data:`CSS_DPI`, a quarter of the pixels to draw, encode, send and decode), then, once
the controls have been still for :data:`SHARPEN_AFTER` seconds, the same picture at
twice that resolution (:data:`DPI`), sharp on high-DPI screens. Where no event loop runs
(a script, a test) the sharp picture follows at once.

Controls only offer possible settings; calling an explorer, or :meth:`Explorer.update`,
with an impossible setting raises ``ValueError`` naming it (``TypeError`` for a value of
the wrong type, e.g. ``num_heads=2.0`` or ``causal="no"``).

Each explorer keeps the figures of its last few layouts (:data:`LAYOUT_CACHE`); a new
explorer trims the older ones of its kind (e.g. left behind by re-running a cell) to the
one figure they show, and ``explorer.close()`` frees an explorer's figures and widgets.
"""

from __future__ import annotations

import asyncio
import base64
import html
import io
import math
import weakref
from collections import OrderedDict
from collections.abc import Hashable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, cast

import ipywidgets as widgets
import numpy as np
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg, RendererAgg
from matplotlib.figure import Figure
from PIL import Image as PILImage

__all__ = [
    "CSS_DPI",
    "DPI",
    "LAYOUT_CACHE",
    "PIXEL_RATIO",
    "SHARPEN_AFTER",
    "SLIDER",
    "STATIC_NOTE",
    "Explorer",
    "divisors",
    "log_slider",
    "nearby_value",
    "open_explorers",
    "option_values",
    "seeded",
    "set_options",
    "to_numpy",
]

#: CSS pixels per inch of an explorer's figure as shown: matplotlib's default, the scale of the
#: notebooks' static figures, so that an explorer's labels are as large as theirs.
CSS_DPI = 100
#: Image pixels per CSS pixel: figures are rendered at twice the size they are shown at, sharp on
#: high-DPI screens (and, scaled down by the browser, on the others), never stretched up.
PIXEL_RATIO = 2
#: Resolution the explorers' figures are rendered at (image pixels per inch).
DPI = CSS_DPI * PIXEL_RATIO
#: The line under an explorer's picture where no kernel runs it.
STATIC_NOTE = "A picture of the explorer: its controls need a running kernel (run the notebook, or open it in Colab)."
#: Figures kept per explorer, one per layout (e.g. per number of heads and sequence length);
#: each holds a few MB of canvas, background and artists.
LAYOUT_CACHE = 4
#: Seconds the controls must stay still before the picture shown at CSS_DPI after a move is
#: drawn again at DPI: short enough to pass unnoticed, long enough that holding an arrow key
#: (about 30 moves a second) draws only the quick pictures.
SHARPEN_AFTER = 0.1
#: Keyword arguments of every slider: redraw on release (not on every pixel), labels at full width.
SLIDER = {"continuous_update": False, "style": {"description_width": "initial"}}


@contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Run with ``torch.manual_seed(seed)`` without disturbing the caller's random state."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def divisors(n: int) -> list[int]:
    """The divisors of ``n``, ascending (the head counts a ``d_model`` of ``n`` allows)."""
    return [d for d in range(1, n + 1) if n % d == 0]


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """A tensor of any shape as a float64 numpy array (what explorers keep in ``data``)."""
    return t.detach().cpu().double().numpy()


def log_slider(
    description: str, value: float, low_exp: float, high_exp: float, step: float, readout_format: str
) -> widgets.FloatLogSlider:
    """A base-10 log slider from ``10**low_exp`` to ``10**high_exp``; ``readout_format`` is a d3-format
    string (read by the browser)."""
    return widgets.FloatLogSlider(
        value=value,
        base=10,
        min=low_exp,
        max=high_exp,
        step=step,
        description=description,
        readout_format=readout_format,
        **SLIDER,
    )


#: Explorers not closed yet (weakly held): a new explorer trims the figure cache of the older
#: ones of its kind, which are usually left behind by re-running the cell that made them.
_OPEN_EXPLORERS: weakref.WeakSet[Explorer] = weakref.WeakSet()


def open_explorers() -> list[Explorer]:
    """The explorers created and not closed yet (e.g. to close every one at the end of a test)."""
    return list(_OPEN_EXPLORERS)


def option_values(control: widgets.Widget) -> list[Any]:
    """The values of a control with a list of options (a selection slider, toggle buttons, a dropdown), in
    order: each option is a value or a ``(label, value)`` pair."""
    return [option[1] if isinstance(option, tuple) else option for option in control.options]


def nearby_value(control: widgets.Widget) -> Any:
    """A value of ``control`` next to its current one that a user could choose: the other state of a
    checkbox, the next option of a selection (the previous one at the end), one step along a slider
    (one step back at the top). ``None`` when the control offers no other value."""
    if isinstance(control, widgets.Checkbox):
        return not control.value
    if hasattr(control, "options"):
        values = option_values(control)
        if len(values) < 2:
            return None
        index = values.index(control.value)
        return values[index + 1] if index + 1 < len(values) else values[index - 1]
    if isinstance(control, widgets.FloatLogSlider):
        exponent = math.log(control.value, control.base)
        up = exponent + control.step <= control.max + 1e-9
        return control.base ** (exponent + control.step if up else exponent - control.step)
    up = control.value + control.step <= control.max
    return control.value + control.step if up else control.value - control.step


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

    figsize: tuple[float, float] = (7.5, 3.6)
    #: Controls that change which values other controls offer (e.g. RoPE on/off changes the
    #: head counts on offer); ``update`` sets them before the rest.
    options_controls: tuple[str, ...] = ()

    def __init__(self, controls: dict[str, widgets.Widget], *, title: str) -> None:
        self.controls: dict[str, widgets.Widget] = dict(controls)
        self.data: dict[str, Any] = {}
        self.redraw_count = 0
        self._names = {id(widget): name for name, widget in self.controls.items()}
        self._syncing = False
        self._batch = 0
        self._layouts: OrderedDict[Hashable, _Layout] = OrderedDict()
        self._current: _Layout | None = None
        self._shown_dpi = 0
        self._sharpen_later: asyncio.TimerHandle | None = None
        self._image = widgets.Image(format="jpeg")
        self._image.add_class("mhsa-explorer-figure")
        self._caption = widgets.HTML(value="")
        self._caption.add_class("mhsa-explorer-caption")
        #: Widgets made here besides the controls, the rows and the children: closed with the explorer.
        self._parts: list[widgets.Widget] = []
        items = []
        for name, widget in self.controls.items():
            widget.add_class(f"mhsa-control-{name.replace('_', '-')}")
            items.append(self._with_readout(widget) if isinstance(widget, widgets.SelectionSlider) else widget)
            widget.observe(self._on_change, names="value")
        rows = [widgets.HBox(items[i : i + 3]) for i in range(0, len(items), 3)]
        self._title = title
        header = widgets.HTML(value=f"<b>{html.escape(title)}</b>")
        super().__init__(children=[header, *rows, self._caption, self._image])
        self.add_class("mhsa-explorer")
        self._closed = False
        self.redraw()
        self._prepare_quick()
        for other in list(_OPEN_EXPLORERS):
            if type(other) is type(self):
                other._trim_layouts(keep=1)
        _OPEN_EXPLORERS.add(self)

    # ------------------------------------------------------------ public

    @property
    def title(self) -> str:
        """The explorer's title, shown above its controls."""
        return self._title

    def values(self) -> dict[str, Any]:
        """The current value of every control, ``{name: value}``."""
        return {name: widget.value for name, widget in self.controls.items()}

    def accepts(self, **values: Any) -> bool:
        """Whether :meth:`update` would take these settings (the others as they are), without drawing."""
        try:
            self._check({**self.values(), **values})
        except (ValueError, TypeError):
            return False
        return True

    def update(self, **values: Any) -> Explorer:
        """Set several controls at once (checked first, one redraw at the end)::

        explorer.update(num_heads=4, seq_len=3)
        """
        self.set_values(**values)
        self._redraw(quick=True)
        return self

    def set_values(self, **values: Any) -> None:
        """Set several controls as :meth:`update` does (checked, the dependent controls following), without
        drawing: the figure and :attr:`data` keep the last drawn setting until the next :meth:`update` or
        :meth:`redraw`. For reading what the controls then offer, e.g. the heads a number of heads allows."""
        unknown = sorted(set(values) - set(self.controls))
        if unknown:
            raise ValueError(f"unknown setting(s) {unknown}: this explorer has {sorted(self.controls)}")
        self._check({**self.values(), **values})
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

    def redraw(self) -> None:
        """Recompute with the current control values and redraw the figure (sharp)."""
        self._redraw(quick=False)

    def sharpen(self) -> None:
        """Show the current figure at full resolution (:data:`DPI`) if the picture shown is the
        quick one of a move; a pending delayed sharpening is cancelled."""
        if self._sharpen_later is not None:
            self._sharpen_later.cancel()
            self._sharpen_later = None
        layout = self._current
        if self._closed or layout is None or self._shown_dpi == DPI:
            return
        self._show(layout, DPI)

    def _redraw(self, *, quick: bool) -> None:
        """Recompute and redraw: ``quick`` draws at :data:`CSS_DPI` and sharpens later (at once
        when no event loop runs to do it later)."""
        if self._closed:
            raise RuntimeError("this explorer was closed: create a new one to draw again")
        values = self.values()
        self._check(values)
        data = self._compute(values)
        layout = self._layout_for(data)
        self._update(layout.artists, data)
        data["panels"] = sum(1 for ax in layout.figure.axes if ax.images)
        layout.static_key = self._static(data)
        self._show(layout, CSS_DPI if quick else DPI)
        caption = self._caption_text(data)
        data["caption"] = caption
        self._caption.value = f"<span class='mhsa-caption-text'>{html.escape(caption)}</span>"
        self.data = data
        self.redraw_count += 1
        if quick:
            self._schedule_sharpen()
        elif self._sharpen_later is not None:
            self._sharpen_later.cancel()
            self._sharpen_later = None

    def _prepare_quick(self) -> None:
        """Draw the shown layout's background at CSS_DPI too, now, so that the first move only
        blits (its first full draw at a new resolution lays out every label again, mathtext
        included, which would make the first move the slowest). The canvas is left sharp."""
        layout = self._current
        dynamic = None if layout is None else self._dynamic(layout.artists)
        if layout is None or dynamic is None:
            return
        layout.draw(dynamic, CSS_DPI)
        layout.draw(dynamic, DPI)

    def _show(self, layout: _Layout, dpi: int) -> None:
        layout.draw(self._dynamic(layout.artists), dpi)
        self._image.value = layout.jpeg()
        self._shown_dpi = dpi
        # Shown at its natural size: one figure inch is CSS_DPI CSS pixels (a flex box would
        # otherwise stretch the image to the cell's width, blurring it).
        self._image.width = str(layout.css_width)

    def _schedule_sharpen(self) -> None:
        """Sharpen once the controls have been still for SHARPEN_AFTER seconds: on the kernel's
        event loop (each new move pushes it back), or at once where none runs."""
        if self._sharpen_later is not None:
            self._sharpen_later.cancel()
            self._sharpen_later = None
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.sharpen()
            return
        self._sharpen_later = loop.call_later(SHARPEN_AFTER, self.sharpen)

    def _figsize(self, data: dict[str, Any]) -> tuple[float, float]:
        """The figure's size in inches for this data's layout: :attr:`figsize` unless an explorer
        grows its figure with its content (e.g. rows of heads)."""
        return self.figsize

    def _layout_for(self, data: dict[str, Any]) -> _Layout:
        """The figure for this data's layout: built on first use, then kept (the last
        :data:`LAYOUT_CACHE` of them), since building axes costs more than drawing them."""
        key = self._layout(data)
        layout = self._layouts.get(key)
        if layout is None:
            figure = Figure(figsize=self._figsize(data), dpi=DPI)
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
    def shown_width(self) -> int:
        """The width the figure is shown at, in CSS pixels (its picture has :data:`PIXEL_RATIO` times as many)."""
        if self._current is None:
            raise RuntimeError("this explorer was closed: it holds no figure any more")
        return self._current.css_width

    @property
    def picture(self) -> bytes:
        """The JPEG bytes currently shown (after a move, the quick picture until it is sharpened)."""
        return bytes(self._image.value)

    def _repr_mimebundle_(self, **kwargs: Any) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """The live widget for a running kernel, plus its current picture for every renderer without
        one (GitHub, nbviewer, an HTML export, JupyterLab before the first run). A kernel-backed front
        end shows only the widget; the others fall back to the picture, whose last line says why its
        sliders do not move."""
        bundle = super()._repr_mimebundle_(**kwargs)
        if bundle is None or self._closed or self._current is None:
            return bundle
        bundle["text/plain"] = f"{self._title} — {STATIC_NOTE}"
        bundle["image/png"] = base64.b64encode(self.static_png()).decode("ascii")
        return bundle, {"image/png": {"width": self._current.css_width}}

    def sharp_pixels(self) -> np.ndarray:
        """The current figure at full resolution (:data:`DPI`), sharpened first if needed: its RGB pixels
        ``(height, width, 3)``, uint8, a view of the figure's canvas (copy it to keep it past the next draw)."""
        if self._current is None:
            raise RuntimeError("this explorer was closed: it holds no figure any more")
        self.sharpen()
        return np.asarray(cast(FigureCanvasAgg, self._current.figure.canvas).buffer_rgba())[..., :3]

    def static_png(self) -> bytes:
        """The current figure with the caption and a note that the controls need a running kernel
        below it: the picture shown where the widget cannot be (PNG bytes)."""
        picture = self.sharp_pixels()
        caption = self.data.get("caption", "")
        band = Figure(figsize=(picture.shape[1] / DPI, 0.5), dpi=DPI)
        FigureCanvasAgg(band)
        band.text(0.01, 0.7, caption, fontsize=7, va="center", wrap=True)
        band.text(0.01, 0.25, STATIC_NOTE, fontsize=7, style="italic", color="#555555", va="center")
        band.canvas.draw()
        text = np.asarray(cast(FigureCanvasAgg, band.canvas).buffer_rgba())[..., :3]
        buffer = io.BytesIO()
        PILImage.fromarray(np.ascontiguousarray(np.vstack([picture, text[:, : picture.shape[1]]]))).save(
            buffer, format="png"
        )
        return buffer.getvalue()

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
        if self._sharpen_later is not None:
            self._sharpen_later.cancel()
            self._sharpen_later = None
        for widget in self.controls.values():
            widget.unobserve(self._on_change, names="value")
        self._layouts.clear()
        self._current = None
        _OPEN_EXPLORERS.discard(self)
        # The children are the header, the rows of controls, the caption and the image. Each
        # widget made here has its own Layout (and Style) widget, registered like the widget.
        for widget in [*self.controls.values(), *self._parts, *self.children, self]:
            for part in (getattr(widget, "layout", None), getattr(widget, "style", None)):
                if isinstance(part, widgets.Widget):
                    part.close()
        for widget in [*self.controls.values(), *self._parts, *self.children]:
            widget.close()
        super().close()

    # ------------------------------------------------------------ internals

    def _with_readout(self, slider: widgets.SelectionSlider) -> widgets.HBox:
        """``slider`` with a read-only label of its value in place of its own readout, which
        ipywidgets 8 draws as editable text that ignores what is typed into it and goes blank."""
        slider.readout = False
        label = widgets.HTML(value=_readout_html(slider))
        label.add_class("mhsa-readout")
        slider.observe(lambda change: setattr(label, "value", _readout_html(change["owner"])), names="label")
        box = widgets.HBox([slider, label])
        self._parts += [label, box]
        return box

    def _on_change(self, change: dict[str, Any]) -> None:
        if self._syncing:
            return  # a control being adjusted by _sync; the redraw comes after
        self._syncing = True
        try:
            self._sync(self._names[id(change["owner"])])
        finally:
            self._syncing = False
        if not self._batch:
            self._redraw(quick=True)

    def _sync(self, changed: str) -> None:
        """Adjust dependent controls after ``changed`` moved (e.g. the head selector's range)."""

    def _check(self, values: dict[str, Any]) -> None:
        raise NotImplementedError

    def _compute(self, values: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def _layout(self, data: dict[str, Any]) -> Hashable:
        """Key of the figure's structure: the artists are rebuilt when it changes."""
        return None

    def _static(self, data: dict[str, Any]) -> Hashable:
        """Key of everything drawn that is not in ``_dynamic`` (axis labels, frames...)."""
        return self._layout(data)

    def _dynamic(self, artists: Any) -> list[Any] | None:
        """The artists that change between redraws of one layout (None: redraw everything)."""
        return None

    def _build(self, fig: Figure, data: dict[str, Any]) -> Any:
        raise NotImplementedError

    def _update(self, artists: Any, data: dict[str, Any]) -> None:
        raise NotImplementedError

    def _caption_text(self, data: dict[str, Any]) -> str:
        raise NotImplementedError


def _readout_html(slider: widgets.SelectionSlider) -> str:
    return f"<span class='mhsa-readout-text'>{html.escape(str(slider.label))}</span>"


class _Layout:
    """One figure with its artists, and the backgrounds the blitting pastes under them."""

    def __init__(self, figure: Figure, artists: Any) -> None:
        self.figure = figure
        self.artists = artists
        #: The width the figure is shown at, in CSS pixels.
        self.css_width = round(figure.get_size_inches()[0] * CSS_DPI)
        #: Key of what the background shows besides the dynamic artists (set before each draw).
        self.static_key: Hashable | None = None
        #: Per resolution: (the static key it was drawn for, the saved background).
        self.backgrounds: dict[float, tuple[Hashable, Any]] = {}

    def draw(self, dynamic: list[Any] | None, dpi: int) -> None:
        """Draw the figure into its canvas at ``dpi``. Drawing text is most of the cost, and the
        axis labels and titles rarely change: so the static part is drawn once per
        :attr:`static_key` (and resolution) and kept as a background, and each redraw pastes it
        and draws only the ``dynamic`` artists on top (matplotlib's blitting). ``dynamic=None``
        draws everything."""
        figure = self.figure
        if figure.dpi != dpi:
            figure.set_dpi(dpi)
        canvas = cast(FigureCanvasAgg, figure.canvas)
        if dynamic is None:
            canvas.draw()
            return
        for artist in dynamic:
            artist.set_animated(True)  # left out of canvas.draw(), i.e. of the background
        saved = self.backgrounds.get(dpi)
        if saved is None or saved[0] != self.static_key:
            canvas.draw()
            saved = (self.static_key, canvas.copy_from_bbox(figure.bbox))
            self.backgrounds[dpi] = saved
        else:
            canvas.restore_region(saved[1])
        # The dynamic artists' strings come back move after move: stamped (the background's
        # are drawn once per static key, so keeping their pictures would gain nothing).
        renderer = canvas.get_renderer()
        renderer.draw_text = _StampedText(renderer)
        try:
            for artist in dynamic:
                figure.draw_artist(artist)
        finally:
            del renderer.draw_text

    def jpeg(self) -> bytes:
        # A JPEG, not a PNG: at twice the displayed size a PNG takes 25-40 ms to encode (most of a
        # redraw), a JPEG 5-8 ms. At quality 90 without chroma subsampling its artefacts are finer
        # than a displayed pixel; the stored picture (static_png) stays lossless.
        canvas = cast(FigureCanvasAgg, self.figure.canvas)
        # Read as RGBX (the opaque alpha byte skipped by the encoder): copying out the RGB
        # channels would cost as much as encoding.
        image = PILImage.frombuffer("RGBX", canvas.get_width_height(), canvas.buffer_rgba(), "raw", "RGBX", 0, 1)
        buffer = io.BytesIO()
        image.save(buffer, format="jpeg", quality=90, subsampling=0)
        return buffer.getvalue()


#: Pictures of text kept by _StampedText (a few KB each).
_STAMPS: OrderedDict[Hashable, tuple[np.ndarray, int, int] | None] = OrderedDict()
_STAMPS_KEPT = 4096


class _StampedText:
    """A renderer's ``draw_text`` that draws each string once and stamps its picture afterwards.

    Most of a blitted redraw is text (the values written in heatmap cells, titles), and the
    same strings come back move after move ("0.25" in the same font and colour): laying out
    and rasterising their glyphs again each time is most of the cost. The first time a string
    (in one font, size, colour and resolution) is drawn, it is drawn by the renderer itself on
    a small transparent canvas and the inked pixels are kept; later it is pasted with
    ``draw_image``, through the same clipping. Rotated, mathtext or translucent text is drawn
    as usual."""

    def __init__(self, renderer: RendererAgg) -> None:
        self.renderer = renderer
        self.draw = type(renderer).draw_text.__get__(renderer)

    def __call__(self, gc, x, y, s, prop, angle, ismath=False, mtext=None) -> None:
        rgba = tuple(gc.get_rgb())
        if angle or ismath or rgba[3] != 1 or gc.get_alpha() != 1:
            self.draw(gc, x, y, s, prop, angle, ismath=ismath, mtext=mtext)
            return
        dpi = self.renderer.dpi
        key = (s, prop, rgba, bool(gc.get_antialiased()), dpi)
        if key in _STAMPS:
            stamp = _STAMPS[key]
        else:
            stamp = _STAMPS[key] = self._stamp(gc, s, prop, rgba, dpi)
            while len(_STAMPS) > _STAMPS_KEPT:
                _STAMPS.popitem(last=False)
        if stamp is not None:
            pixels, dx, dy = stamp
            self.renderer.draw_image(gc, round(x) + dx, self.renderer.height - round(y) + dy, pixels)

    def _stamp(self, gc, s, prop, rgba, dpi) -> tuple[np.ndarray, int, int] | None:
        width, height, descent = self.renderer.get_text_width_height_descent(s, prop, ismath=False)
        pad = math.ceil(height) + 4
        x0, y0 = pad, pad + math.ceil(descent)
        scratch = RendererAgg(math.ceil(width) + 2 * pad, math.ceil(height) + 2 * pad, dpi)
        scratch_gc = scratch.new_gc()
        scratch_gc.set_foreground(rgba, isRGBA=True)
        scratch_gc.set_antialiased(gc.get_antialiased())
        type(scratch).draw_text(scratch, scratch_gc, x0, y0, s, prop, 0.0)
        scratch_gc.restore()
        pixels = np.asarray(scratch.buffer_rgba())
        rows, cols = np.nonzero(pixels[..., 3])
        if rows.size == 0:
            return None
        top, bottom, left, right = rows.min(), rows.max() + 1, cols.min(), cols.max() + 1
        # draw_image takes the rows bottom first and the image's bottom-left corner counted from the
        # canvas's bottom, where draw_text's y (the baseline) is counted from the top.
        return (
            np.ascontiguousarray(pixels[top:bottom, left:right][::-1]),
            int(left - x0),
            int(y0 - bottom),
        )


def set_options(widget: widgets.Widget, options: Sequence[Any], value: Any) -> None:
    """Replace a selection widget's options and select ``value`` (setting options alone
    would jump to the first option)."""
    if tuple(widget.options) != tuple(options):
        widget.options = options
    widget.value = value
