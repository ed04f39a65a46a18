"""Interactive explorers: sliders and switches that recompute attention with the package and redraw.

Each function returns an :class:`Explorer`, an ``ipywidgets.VBox`` to display in a notebook::

    from mhsa_helpers.explorers import heads_explorer
    explorer = heads_explorer()
    explorer                                   # shows the controls, a caption and the figure
    explorer.controls["num_heads"].value = 4   # same as moving the control by hand
    explorer.data["weights"].shape             # (4, 6, 6): exactly what is drawn now

Every number drawn is computed by :mod:`mhsa_helpers` (never by a second copy of
the maths here). Figures are drawn by matplotlib into off-screen figures (one per
layout, reused) and sent as a PNG to one ``ipywidgets.Image``, whose picture is
replaced in place: no pyplot figure is opened (so none leaks, however often a slider
moves), nothing flickers, and only core widgets that exist in both ipywidgets 7.7.1
(Colab) and 8.x (JupyterLab 4) are used.

Controls only offer possible settings (heads that divide ``d_model``, sequence
lengths from 1, an even head size with RoPE); calling an explorer, or
:meth:`Explorer.update`, with an impossible setting raises ``ValueError`` naming it.
"""

from __future__ import annotations

import functools
import html
import io
import math
from collections import OrderedDict
from contextlib import contextmanager
from typing import Any, Dict, Hashable, Iterator, List, Optional, Sequence, Tuple

import ipywidgets as widgets
import numpy as np
import torch
import torch.nn.functional as F
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from PIL import Image as PILImage

from .attention import attention_scores, scaled_dot_product_attention
from .examples import (
    TELESCOPE_SENTENCE,
    money_bank_grows,
    sentence_embeddings,
    your_journey_starts_with_one_step,
)
from .masking import causal_mask, masked_softmax_neg_inf, masked_softmax_renormalize
from .mha import MultiHeadSelfAttention
from .plots import (
    MASK_COLORS,
    _Heatmap,
    _HeadGrid,
    rope_frequencies_plot,
    rope_rotation_arrows,
    rope_score_vs_distance,
    rope_scores,
    rotate_pair,
)
from .rope import rope_frequencies
from .softmax import softmax

__all__ = [
    "Explorer",
    "qkv_explorer",
    "scaling_explorer",
    "masking_explorer",
    "heads_explorer",
    "rope_explorer",
    "mhsa_explorer",
    "MODEL_SEED",
    "DROPOUT_SEED",
    "SCALING_SENTENCES",
    "HEADS_SENTENCE",
    "INPUT_SCALE",
]

#: Resolution of the explorers' figures (pixels per inch): small PNGs redraw fast.
DPI = 80
#: Figures kept per explorer, one per layout (e.g. per number of heads and sequence length).
LAYOUT_CACHE = 12
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


def _divisors(n: int) -> List[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _check_int(name: str, value: object, low: int, high: int, why: str = "") -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an int in [{low}, {high}]{why}, got {type(value).__name__} {value!r}")
    if not low <= int(value) <= high:
        raise ValueError(f"{name} must be in [{low}, {high}]{why}, got {name}={value}")
    return int(value)


def _check_float(name: str, value: object, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise ValueError(f"{name} must be a number in [{low:g}, {high:g}], got {type(value).__name__} {value!r}")
    if not (math.isfinite(float(value)) and low <= float(value) <= high):
        raise ValueError(f"{name} must be in [{low:g}, {high:g}], got {name}={value}")
    return float(value)


def _check_choice(name: str, value: object, choices: Sequence[Any]) -> Any:
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(repr(c) for c in choices)}, got {name}={value!r}")
    return value


def _numpy(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().double().numpy()


def _log_slider(
    description: str, value: float, low_exp: float, high_exp: float, step: float, readout_format: str
) -> widgets.FloatLogSlider:
    # readout_format is a d3-format string, read by the browser.
    return widgets.FloatLogSlider(value=value, base=10, min=low_exp, max=high_exp, step=step,
                                  description=description, readout_format=readout_format, **_SLIDER)


class Explorer(widgets.VBox):
    """A row of controls, a caption and a figure that is redrawn whenever a control changes.

    Attributes:
        controls: ``{name: widget}``; set ``controls[name].value`` from Python to move one.
        data: what the last redraw drew, e.g. ``data["weights"]`` (numpy arrays and plain values).
        redraw_count: how many times the figure was drawn.

    Subclasses provide ``_check`` (validate a full set of values), ``_compute`` (values ->
    data, with the package), ``_layout`` (a key: one figure is built per key and reused),
    ``_build``/``_update`` (draw the data), ``_static``/``_dynamic`` (what to redraw) and
    ``_caption_text``.
    """

    figsize: Tuple[float, float] = (7.5, 3.6)

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
        self.redraw()

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
            # In the controls' own order, so that e.g. num_heads widens the head selector first.
            for name in self.controls:
                if name in values:
                    self.controls[name].value = values[name]
        finally:
            self._batch -= 1
        self.redraw()
        return self

    def redraw(self) -> None:
        """Recompute with the current control values and redraw the figure."""
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
            while len(self._layouts) > LAYOUT_CACHE:
                self._layouts.popitem(last=False)
        self._layouts.move_to_end(key)
        self._current = layout
        return layout

    @property
    def figure(self) -> Figure:
        """The off-screen matplotlib Figure of the last redraw (for tests and saving)."""
        assert self._current is not None
        return self._current.figure

    @property
    def png(self) -> bytes:
        """The PNG bytes currently shown."""
        return bytes(self._image.value)

    def close(self) -> None:
        for widget in [*self.controls.values(), self._image, self._caption, *self.children]:
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


# ===================================================================== nb01: Q, K, V


class _QKVExplorer(Explorer):
    figsize = (6.4, 2.9)

    def __init__(self, head: int, score_scale: float) -> None:
        self.example = money_bank_grows()
        controls = {
            "head": widgets.ToggleButtons(options=[("head 1", 1), ("head 2", 2)], value=head, description="head",
                                          style={"description_width": "initial", "button_width": "70px"}),
            "score_scale": _log_slider("score ×", score_scale, -1.0, 3.0, 0.05, ",.2f"),
        }
        super().__init__(controls, title="Money Bank Grows: Q·Kᵀ/√d_k, then softmax")

    def _check(self, values):
        _check_choice("head", values["head"], (1, 2))
        _check_float("score_scale", values["score_scale"], 0.1, 1000.0)

    def _compute(self, values):
        ex, h, scale = self.example, values["head"] - 1, float(values["score_scale"])
        q = ex.embeddings @ ex.w_q[h]  # seed 001 writes E @ W with W (d_in, d_head)
        k = ex.embeddings @ ex.w_k[h]
        v = ex.embeddings @ ex.w_v[h]
        d_k = q.shape[-1]
        scaled = scale / math.sqrt(d_k)
        output, weights = scaled_dot_product_attention(q, k, v, scale=scaled, return_weights=True)
        return {
            "tokens": list(ex.tokens), "head": values["head"], "score_scale": scale,
            "q": _numpy(q), "k": _numpy(k), "v": _numpy(v),
            "scores": _numpy(attention_scores(q, k, scale=scaled)),
            "weights": _numpy(weights), "output": _numpy(output),
        }

    def _build(self, fig, data):
        tokens = data["tokens"]
        left = fig.add_axes((0.13, 0.12, 0.33, 0.7))
        right = fig.add_axes((0.63, 0.12, 0.33, 0.7))
        scores = _Heatmap(left, data["scores"], row_labels=tokens, col_labels=tokens, cmap="Oranges",
                          vmin=None, vmax=None, annotate=True, fmt="{:.3f}", rotate_cols=False)
        weights = _Heatmap(right, data["weights"], row_labels=tokens, col_labels=tokens, cmap="Blues",
                           vmin=0.0, vmax=1.0, annotate=True, fmt="{:.3f}", rotate_cols=False)
        right.set_title("weights = softmax (rows sum to 1)", fontsize=9)
        return scores, weights

    def _update(self, artists, data):
        scores, weights = artists
        scores.set_values(data["scores"])
        weights.set_values(data["weights"])
        scores.ax.set_title(f"scores × {data['score_scale']:.3g} / √3", fontsize=9)

    def _dynamic(self, artists):
        scores, weights = artists
        return [*scores.dynamic(), *weights.dynamic(), scores.ax.title]

    def _caption_text(self, data):
        return (f"head {data['head']} · score × {data['score_scale']:.3g} · largest weight "
                f"{data['weights'].max():.3f} (uniform: 0.333)")


def qkv_explorer(*, head: int = 1, score_scale: float = 1.0) -> Explorer:
    """Seed 001's "Money Bank Grows" in one head (``head`` 1 or 2): scores ``Q Kᵀ / √d_k``
    multiplied by ``score_scale`` (0.1 to 1000), and the softmax weights.

    The seed's tiny weights give almost uniform attention; raising ``score_scale`` shows
    it sharpen. data: ``tokens``, ``q``, ``k``, ``v`` (3, 3), ``scores`` (3, 3) (after scaling),
    ``weights`` (3, 3), ``output`` (3, 3).
    """
    _check_choice("head", head, (1, 2))
    _check_float("score_scale", score_scale, 0.1, 1000.0)
    return _QKVExplorer(head, float(score_scale))


# ===================================================================== nb02: scaling


class _ScalingExplorer(Explorer):
    figsize = (7.5, 3.3)

    def __init__(self, d_k: int, sentence: str, scaled: bool) -> None:
        controls = {
            "d_k": widgets.IntSlider(value=d_k, min=1, max=512, step=1, description="d_k", **_SLIDER),
            "sentence": widgets.Dropdown(options=list(SCALING_SENTENCES), value=sentence, description="sentence",
                                         style={"description_width": "initial"}),
            "scaled": widgets.Checkbox(value=scaled, description="divide by √d_k", indent=False),
        }
        super().__init__(controls, title="Why divide the scores by √d_k?")

    def _check(self, values):
        _check_int("d_k", values["d_k"], 1, 512)
        _check_choice("sentence", values["sentence"], SCALING_SENTENCES)
        if not isinstance(values["scaled"], bool):
            raise ValueError(f"scaled must be True or False, got {values['scaled']!r}")

    def _compute(self, values):
        d_k, sentence, scaled = values["d_k"], values["sentence"], values["scaled"]
        # Query and key vectors with independent unit-variance entries, fixed per word.
        tokens, q = sentence_embeddings(sentence, d_k, seed=1)
        _, k = sentence_embeddings(sentence, d_k, seed=2)
        scores = attention_scores(q, k, scale=None if scaled else 1.0)
        weights = softmax(scores)
        return {
            "tokens": list(tokens), "d_k": d_k, "sentence": sentence, "scaled": scaled,
            "q": _numpy(q), "k": _numpy(k), "scores": _numpy(scores), "weights": _numpy(weights),
            "score_std": float(scores.double().std(correction=0)),
            # Var(q.k) = d_k for unit-variance entries; dividing by sqrt(d_k) brings it back to 1.
            "expected_std": 1.0 if scaled else math.sqrt(d_k),
        }

    def _layout(self, data):
        return data["sentence"]

    def _build(self, fig, data):
        tokens = data["tokens"]
        left = fig.add_axes((0.14, 0.2, 0.33, 0.62))
        right = fig.add_axes((0.64, 0.2, 0.33, 0.62))
        scores = _Heatmap(left, data["scores"], row_labels=tokens, col_labels=tokens, cmap="coolwarm",
                          vmin=None, vmax=None, annotate=False, fontsize=7)
        weights = _Heatmap(right, data["weights"], row_labels=tokens, col_labels=tokens, cmap="Blues",
                           vmin=0.0, vmax=1.0, annotate=True, fmt="{:.2f}", fontsize=7)
        right.set_title("weights (softmax of each row)", fontsize=9)
        return scores, weights

    def _update(self, artists, data):
        scores, weights = artists
        # A colour range symmetric about 0 keeps white = 0 whatever d_k is.
        bound = float(np.abs(data["scores"]).max()) or 1.0
        scores._fixed = (-bound, bound)
        scores.image.set_clim(-bound, bound)
        scores.set_values(data["scores"])
        weights.set_values(data["weights"])
        what = "q·k / √d_k" if data["scaled"] else "q·k (not scaled)"
        scores.ax.set_title(f"scores {what}: from {data['scores'].min():.1f} to {data['scores'].max():.1f}", fontsize=9)

    def _dynamic(self, artists):
        scores, weights = artists
        return [*scores.dynamic(), *weights.dynamic(), scores.ax.title]

    def _caption_text(self, data):
        how = "divided by √d_k" if data["scaled"] else "not scaled"
        return (f"d_k = {data['d_k']} · {how} · score std {data['score_std']:.2f} "
                f"(expected about {data['expected_std']:.2f}) · largest weight {data['weights'].max():.2f}")


def scaling_explorer(*, d_k: int = 64, sentence: str = SCALING_SENTENCES[1], scaled: bool = True) -> Explorer:
    """Random queries and keys with ``d_k`` unit-variance features (fixed per word): the
    spread of ``q·k`` grows like ``√d_k`` and saturates the softmax unless divided by ``√d_k``.

    data: ``tokens``, ``q``, ``k`` (seq, d_k), ``scores`` and ``weights`` (seq, seq),
    ``score_std`` (population std of the scores), ``expected_std`` (``√d_k`` or 1).
    """
    _check_int("d_k", d_k, 1, 512)
    _check_choice("sentence", sentence, SCALING_SENTENCES)
    if not isinstance(scaled, bool):
        raise ValueError(f"scaled must be True or False, got {scaled!r}")
    return _ScalingExplorer(int(d_k), sentence, scaled)


# ===================================================================== nb03: masking


METHODS = {"neg_inf": masked_softmax_neg_inf, "renormalize": masked_softmax_renormalize}


def seed_002_projections() -> Tuple[Tuple[str, ...], torch.Tensor, torch.Tensor, torch.Tensor]:
    """Seed 002's 6 tokens projected by its ``W_query, W_key, W_value`` (``torch.manual_seed(789)``,
    three ``nn.Linear(3, 3, bias=False)`` in that order): ``(tokens, q, k, v)``, each ``(6, 3)``."""
    tokens, inputs = your_journey_starts_with_one_step()
    with _seeded(SEED_002_SEED):
        w_query, w_key, w_value = (torch.nn.Linear(3, 3, bias=False) for _ in range(3))
    with torch.no_grad():
        return tokens, w_query(inputs), w_key(inputs), w_value(inputs)


class _MaskingExplorer(Explorer):
    figsize = (7.5, 3.3)

    def __init__(self, seq_len: int, causal: bool, method: str, dropout: float) -> None:
        self.tokens, self.q, self.k, self.v = seed_002_projections()
        controls = {
            "seq_len": widgets.IntSlider(value=seq_len, min=1, max=len(self.tokens), description="seq_len", **_SLIDER),
            "causal": widgets.Checkbox(value=causal, description="causal mask", indent=False),
            "method": widgets.Dropdown(options=list(METHODS), value=method, description="method",
                                       style={"description_width": "initial"}),
            "dropout": widgets.FloatSlider(value=dropout, min=0.0, max=0.9, step=0.1, description="dropout",
                                           readout_format=".1f", **_SLIDER),
        }
        super().__init__(controls, title="Masking: which keys may each query see?")

    def _check(self, values):
        _check_int("seq_len", values["seq_len"], 1, len(self.tokens), " (words of the sentence)")
        _check_choice("method", values["method"], tuple(METHODS))
        _check_float("dropout", values["dropout"], 0.0, 0.9)

    def _compute(self, values):
        n, p = values["seq_len"], round(float(values["dropout"]), 10)
        q, k, v = self.q[:n], self.k[:n], self.v[:n]
        scores = attention_scores(q, k)
        mask = causal_mask(n) if values["causal"] else torch.ones(n, n, dtype=torch.bool)
        weights = METHODS[values["method"]](scores, mask)
        dropped = weights
        if p > 0:
            with _seeded(DROPOUT_SEED):  # training-mode dropout, the same every redraw
                dropped = F.dropout(weights, p=p, training=True)
        return {
            "tokens": list(self.tokens[:n]), "seq_len": n, "causal": bool(values["causal"]),
            "method": values["method"], "dropout": p,
            "scores": _numpy(scores), "mask": mask.numpy().copy(),
            "weights_before_dropout": _numpy(weights), "weights": _numpy(dropped),
            "output": _numpy(dropped @ v),
        }

    def _layout(self, data):
        return data["seq_len"]

    def _build(self, fig, data):
        tokens = data["tokens"]
        left = fig.add_axes((0.12, 0.2, 0.33, 0.62))
        right = fig.add_axes((0.62, 0.2, 0.33, 0.62))
        mask = _Heatmap(left, data["mask"].astype(float), row_labels=tokens, col_labels=tokens,
                        cmap=ListedColormap(list(MASK_COLORS)), vmin=0.0, vmax=1.0, annotate=False, fontsize=7)
        left.legend(handles=[Patch(color=MASK_COLORS[1], label="may attend"), Patch(color=MASK_COLORS[0], label="blocked")],
                    loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=2, fontsize=7, frameon=False, handlelength=1.0)
        weights = _Heatmap(right, data["weights"], row_labels=tokens, col_labels=tokens, cmap="Blues",
                           vmin=0.0, vmax=1.0, annotate=True, fmt="{:.2f}", fontsize=7)
        return mask, weights

    def _update(self, artists, data):
        mask, weights = artists
        mask.set_values(data["mask"].astype(float))
        # Dropout scales the kept weights by 1/(1-p): widen the colour range to show them.
        top = max(1.0, float(data["weights"].max()))
        weights._fixed = (0.0, top)
        weights.image.set_clim(0.0, top)
        weights.set_values(data["weights"])
        title = f"weights ({data['method']})" + (f", dropout {data['dropout']:.1f}" if data["dropout"] else "")
        weights.ax.set_title(title, fontsize=9)

    def _dynamic(self, artists):
        mask, weights = artists
        return [*mask.dynamic(), *weights.dynamic(), weights.ax.title]

    def _caption_text(self, data):
        sums = data["weights"].sum(axis=-1)
        return (f"seq {data['seq_len']} · {'causal' if data['causal'] else 'no'} mask · {data['method']} · "
                f"dropout {data['dropout']:.1f} · row sums {', '.join(f'{s:.2f}' for s in sums)}")


def masking_explorer(*, seq_len: int = 6, causal: bool = True, method: str = "neg_inf", dropout: float = 0.0) -> Explorer:
    """Seed 002's "Your journey starts with one step" (its ``manual_seed(789)`` projections):
    the causal mask, the two ways to apply it (``"neg_inf"``: blocked scores to -inf before
    the softmax; ``"renormalize"``: softmax, zero, divide by the row sum — the same weights),
    and training-mode dropout on the weights (``torch.manual_seed(DROPOUT_SEED)`` first).

    data: ``tokens``, ``scores``, ``mask`` (bool, True = may attend), ``weights_before_dropout``,
    ``weights`` (after dropout), ``output``; matrices are ``(seq_len, seq_len)``.
    """
    _check_int("seq_len", seq_len, 1, 6, " (words of the sentence)")
    _check_choice("method", method, tuple(METHODS))
    _check_float("dropout", dropout, 0.0, 0.9)
    return _MaskingExplorer(int(seq_len), bool(causal), method, float(dropout))


# ===================================================================== nb04 / nb06: heads


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


class _HeadsExplorer(Explorer):
    figsize = (7.5, 3.9)

    def __init__(self, d_model: int, num_heads: int, seq_len: int, head: int) -> None:
        self.d_model = d_model
        self.tokens, self.inputs = _heads_inputs(d_model)
        controls = {
            "num_heads": widgets.SelectionSlider(options=_divisors(d_model), value=num_heads, description="heads",
                                                 **_SLIDER),
            "seq_len": widgets.IntSlider(value=seq_len, min=1, max=len(self.tokens), description="seq_len", **_SLIDER),
            "head": widgets.Dropdown(options=[(f"head {i}", i) for i in range(1, num_heads + 1)], value=head,
                                     description="framed", style={"description_width": "initial"}),
        }
        super().__init__(controls, title=f"Splitting d_model = {d_model} into heads")

    def _sync(self, changed):
        if changed == "num_heads":
            heads = self.controls["num_heads"].value
            head = min(self.controls["head"].value, heads)
            _set_options(self.controls["head"], [(f"head {i}", i) for i in range(1, heads + 1)], head)

    def _check(self, values):
        _check_heads("num_heads", values["num_heads"], self.d_model)
        _check_int("seq_len", values["seq_len"], 1, len(self.tokens), f" (words of {HEADS_SENTENCE!r})")
        _check_int("head", values["head"], 1, values["num_heads"], " (one of the heads)")

    def _compute(self, values):
        heads, n = values["num_heads"], values["seq_len"]
        module = _seeded_module(self.d_model, heads)
        with torch.no_grad():
            output, weights = module(self.inputs[:n], need_weights=True)
        return {
            "tokens": list(self.tokens[:n]), "num_heads": heads, "seq_len": n, "d_head": self.d_model // heads,
            "head": values["head"], "weights": _numpy(weights), "output": _numpy(output),
            "head_weights": _numpy(weights[values["head"] - 1]),
        }

    def _layout(self, data):
        return data["num_heads"], data["seq_len"]

    def _build(self, fig, data):
        return _HeadGrid(fig, data["weights"], tokens=data["tokens"], ncols=_heads_columns(data["num_heads"]),
                         title="attention weights of each head (rows: queries, columns: keys)", annotate="highlight")

    def _update(self, grid, data):
        grid.set_values(data["weights"], highlight=data["head"] - 1)

    def _dynamic(self, grid):
        return grid.dynamic()

    def _caption_text(self, data):
        return (f"{data['num_heads']} heads, seq {data['seq_len']} · d_head {data['d_head']} · "
                f"{data['panels']} heatmaps · head {data['head']} framed")


def _check_heads(name: str, num_heads: object, d_model: int, *, rope: bool = False) -> int:
    options = _divisors(d_model)
    if isinstance(num_heads, bool) or not isinstance(num_heads, (int, np.integer)) or num_heads not in options:
        raise ValueError(
            f"{name} must divide d_model={d_model} (choose from {', '.join(map(str, options))}), got {name}={num_heads!r}"
        )
    if rope and (d_model // num_heads) % 2:
        raise ValueError(
            f"RoPE rotates pairs of features, so d_head = d_model / num_heads must be even: "
            f"{name}={num_heads} gives d_head={d_model // num_heads}"
        )
    return int(num_heads)


def _check_d_model(d_model: object) -> int:
    if isinstance(d_model, bool) or not isinstance(d_model, (int, np.integer)) or not 1 <= d_model <= 64:
        raise ValueError(f"d_model must be an int in [1, 64], got d_model={d_model!r}")
    return int(d_model)


def heads_explorer(d_model: int = 12, *, num_heads: int = 2, seq_len: int = 6, head: int = 1) -> Explorer:
    """The attention weights of every head of :class:`MultiHeadSelfAttention` ``(d_model, num_heads)``
    (built right after ``torch.manual_seed(MODEL_SEED)``, eval mode) on the first ``seq_len`` words of
    "The man saw the astronomer with the telescope" (inputs
    ``INPUT_SCALE * sentence_embeddings(HEADS_SENTENCE, d_model, seed=MODEL_SEED)[1]``).

    ``num_heads`` offers only the divisors of ``d_model``; ``head`` (1-based) frames one head.
    data: ``tokens``, ``weights`` (num_heads, seq_len, seq_len), ``head_weights`` (seq_len, seq_len),
    ``output`` (seq_len, d_model).
    """
    d_model = _check_d_model(d_model)
    num_heads = _check_heads("num_heads", num_heads, d_model)
    _check_int("seq_len", seq_len, 1, len(HEADS_SENTENCE.split()), f" (words of {HEADS_SENTENCE!r})")
    _check_int("head", head, 1, num_heads, " (one of the heads)")
    return _HeadsExplorer(d_model, num_heads, int(seq_len), int(head))


# ===================================================================== nb05: RoPE


class _RopeExplorer(Explorer):
    figsize = (9.0, 3.0)

    def __init__(self, d_head: int, base: float, offset: int, pair_index: int, num_positions: int, max_distance: int):
        self.d_head, self.num_positions, self.max_distance = d_head, num_positions, max_distance
        # All-ones q = k, as in RoFormer's long-term-decay figure: the score falls with distance.
        self.q = torch.ones(d_head, dtype=torch.float64)
        self.k = torch.ones(d_head, dtype=torch.float64)
        controls = {
            "base": _log_slider("base", base, 1.0, 6.0, 0.1, ",.0f"),
            "offset": widgets.IntSlider(value=offset, min=0, max=256, description="offset", **_SLIDER),
            "pair_index": widgets.IntSlider(value=pair_index, min=0, max=d_head // 2 - 1, description="pair",
                                            **_SLIDER),
        }
        super().__init__(controls, title=f"Rotary position embeddings (d_head = {d_head})")

    def _check(self, values):
        _check_float("base", values["base"], 10.0, 1e6)
        _check_int("offset", values["offset"], 0, 256)
        _check_int("pair_index", values["pair_index"], 0, self.d_head // 2 - 1, f" (d_head={self.d_head} has {self.d_head // 2} pairs)")

    def _compute(self, values):
        base, offset, pair = float(values["base"]), values["offset"], values["pair_index"]
        frequencies = rope_frequencies(self.d_head, base).double().numpy()
        positions = list(range(offset, offset + self.num_positions))
        rotated = rotate_pair([1.0, 0.0], base=base, d_head=self.d_head, pair_index=pair, positions=positions)
        distances, scores = rope_scores(self.q, self.k, base=base, max_distance=self.max_distance, offset=offset)
        return {
            "base": base, "offset": offset, "pair_index": pair, "d_head": self.d_head,
            "frequencies": frequencies, "positions": np.array(positions),
            "angles": np.array(positions, dtype=np.float64) * frequencies[pair],
            "rotated": rotated, "distances": distances, "scores": scores,
        }

    def _build(self, fig, data):
        # Drawn once with the plotting functions; later redraws move their artists in place.
        freq_ax = fig.add_axes((0.07, 0.17, 0.25, 0.7))
        arrow_ax = fig.add_axes((0.4, 0.17, 0.2, 0.7))
        score_ax = fig.add_axes((0.7, 0.17, 0.28, 0.7))
        rope_frequencies_plot(self.d_head, data["base"], ax=freq_ax, highlight=data["pair_index"])
        rope_rotation_arrows([1.0, 0.0], base=data["base"], d_head=self.d_head, pair_index=data["pair_index"],
                             positions=list(data["positions"]), ax=arrow_ax)
        rope_score_vs_distance(self.q, self.k, base=data["base"], max_distance=self.max_distance,
                               offset=data["offset"], ax=score_ax)
        # Fixed ranges keep the axes (the costly part to draw) the same for every setting:
        # theta_i lies in [base^-1, 1] with base <= 1e6, and |q.k| <= |q||k| = d_head.
        freq_ax.set_ylim(5e-7, 2.0)
        score_ax.set_ylim(-1.05 * self.d_head, 1.05 * self.d_head)
        arrow_ax.set_xlabel("x[2i]", fontsize=8)
        arrow_ax.set_ylabel("x[2i+1]", fontsize=8)
        return freq_ax, arrow_ax, score_ax

    def _dynamic(self, axes):
        freq_ax, arrow_ax, score_ax = axes
        return [*freq_ax.lines, freq_ax.title, arrow_ax.collections[0], *arrow_ax.texts, arrow_ax.title,
                score_ax.lines[0], score_ax.title]

    def _update(self, axes, data):
        freq_ax, arrow_ax, score_ax = axes
        frequencies, pair = data["frequencies"], data["pair_index"]
        line, marker = freq_ax.lines[0], freq_ax.lines[1]
        line.set_ydata(frequencies)
        marker.set_data([pair], [frequencies[pair]])
        freq_ax.set_title(f"RoPE frequencies, base {data['base']:,.0f}", fontsize=9)
        rotated = data["rotated"]
        arrow_ax.collections[0].set_UVC(rotated[:, 0], rotated[:, 1])
        for text, (x, y), m in zip(arrow_ax.texts, rotated, data["positions"]):
            text.set_position((1.12 * x, 1.12 * y))
            text.set_text(f"m={m}")
        arrow_ax.set_title(f"pair {pair}: θ = {frequencies[pair]:.3g} rad per position", fontsize=9)
        score_ax.lines[0].set_ydata(data["scores"])
        score_ax.set_title(f"score vs distance (keys at {data['offset']}+)", fontsize=9)

    def _caption_text(self, data):
        return (f"base {data['base']:,.0f} · positions {data['offset']}–{data['offset'] + self.num_positions - 1} · "
                f"pair {data['pair_index']} turns {data['frequencies'][data['pair_index']]:.3g} rad per position · "
                f"score at distance 0: {data['scores'][0]:.2f}")


def rope_explorer(
    d_head: int = 16, *, base: float = 10000.0, offset: int = 0, pair_index: int = 0,
    num_positions: int = 6, max_distance: int = 48,
) -> Explorer:
    """RoPE's frequencies ``theta_i = base^(-2i/d_head)``, the rotation of pair ``pair_index`` at
    positions ``offset .. offset + num_positions - 1``, and the score ``rope(q, offset+d)·rope(k, offset)``
    of all-ones ``q = k`` against the distance ``d`` — unchanged by ``offset``: RoPE scores depend on
    relative positions only.

    data: ``frequencies`` (d_head/2,), ``positions``, ``angles`` (radians, ``positions * theta``),
    ``rotated`` (num_positions, 2), ``distances``, ``scores`` (max_distance + 1,).
    """
    if isinstance(d_head, bool) or not isinstance(d_head, (int, np.integer)) or not 2 <= d_head <= 256 or d_head % 2:
        raise ValueError(f"d_head must be an even int in [2, 256] (RoPE rotates pairs of features), got d_head={d_head!r}")
    _check_float("base", base, 10.0, 1e6)
    _check_int("offset", offset, 0, 256)
    _check_int("pair_index", pair_index, 0, d_head // 2 - 1, f" (d_head={d_head} has {d_head // 2} pairs)")
    _check_int("num_positions", num_positions, 1, 16)
    _check_int("max_distance", max_distance, 1, 1024)
    return _RopeExplorer(int(d_head), float(base), int(offset), int(pair_index), int(num_positions), int(max_distance))


# ===================================================================== nb06: the whole block


class _MHSAExplorer(Explorer):
    figsize = (8.5, 3.9)

    def __init__(self, d_model: int, num_heads: int, seq_len: int, rope: bool, base: float, causal: bool) -> None:
        self.d_model = d_model
        self.tokens, self.inputs = _heads_inputs(d_model)
        rope_possible = bool(self._head_options(True))
        controls = {
            "num_heads": widgets.SelectionSlider(options=self._head_options(rope), value=num_heads,
                                                 description="heads", **_SLIDER),
            "seq_len": widgets.IntSlider(value=seq_len, min=1, max=len(self.tokens), description="seq_len", **_SLIDER),
            "causal": widgets.Checkbox(value=causal, description="causal", indent=False),
            "rope": widgets.Checkbox(value=rope, description="RoPE", indent=False, disabled=not rope_possible),
            "base": _log_slider("RoPE base", base, 1.0, 6.0, 0.1, ",.0f"),
        }
        controls["base"].disabled = not rope
        super().__init__(controls, title=f"Multi-head self-attention, d_model = {d_model}")

    def _head_options(self, rope: bool) -> List[int]:
        return [h for h in _divisors(self.d_model) if not rope or (self.d_model // h) % 2 == 0]

    def _sync(self, changed):
        if changed == "rope":
            rope = self.controls["rope"].value
            options = self._head_options(rope)
            current = self.controls["num_heads"].value
            # Keep the head count if RoPE allows it, else the nearest count that gives an even d_head.
            value = current if current in options else min(options, key=lambda h: (abs(h - current), h))
            _set_options(self.controls["num_heads"], options, value)
            self.controls["base"].disabled = not rope

    def _check(self, values):
        _check_heads("num_heads", values["num_heads"], self.d_model, rope=bool(values["rope"]))
        _check_int("seq_len", values["seq_len"], 1, len(self.tokens), f" (words of {HEADS_SENTENCE!r})")
        _check_float("base", values["base"], 10.0, 1e6)

    def _compute(self, values):
        heads, n, rope, causal = values["num_heads"], values["seq_len"], bool(values["rope"]), bool(values["causal"])
        base = float(values["base"])
        module = _seeded_module(self.d_model, heads, causal=causal, rope=rope, rope_base=base,
                                max_seq_len=len(self.tokens))
        with torch.no_grad():
            output, weights = module(self.inputs[:n], need_weights=True)
        return {
            "tokens": list(self.tokens[:n]), "num_heads": heads, "seq_len": n, "d_head": self.d_model // heads,
            "rope": rope, "base": base, "causal": causal,
            "weights": _numpy(weights), "output": _numpy(output),
        }

    def _layout(self, data):
        return data["num_heads"], data["seq_len"]

    def _build(self, fig, data):
        grid = _HeadGrid(fig, data["weights"], tokens=data["tokens"], ncols=_heads_columns(data["num_heads"]),
                         title="attention weights per head", rect=(0.0, 0.0, 0.7, 1.0), annotate="none")
        ax = fig.add_axes((0.8, 0.22, 0.17, 0.62))
        output = _Heatmap(ax, data["output"], row_labels=data["tokens"], col_labels=None, cmap="coolwarm",
                          vmin=None, vmax=None, annotate=False, fontsize=6, show_cols=False)
        ax.set_aspect("auto")
        ax.set_title("output (seq, d_model)", fontsize=8)
        return grid, output

    def _update(self, artists, data):
        grid, output = artists
        grid.set_values(data["weights"])
        bound = float(np.abs(data["output"]).max()) or 1.0
        output._fixed = (-bound, bound)
        output.image.set_clim(-bound, bound)
        output.set_values(data["output"])
        rope = f"RoPE base {data['base']:,.0f}" if data["rope"] else "no RoPE"
        grid.title.set_text(f"attention weights per head ({rope}, {'causal' if data['causal'] else 'not causal'})")

    def _dynamic(self, artists):
        grid, output = artists
        return [*grid.dynamic(), *output.dynamic(), grid.title]

    def _caption_text(self, data):
        rope = f"RoPE base {data['base']:,.0f}" if data["rope"] else "no RoPE"
        return (f"{data['num_heads']} heads, seq {data['seq_len']} · d_head {data['d_head']} · {rope} · "
                f"{'causal' if data['causal'] else 'not causal'} · {data['panels'] - 1} heatmaps + output")


def mhsa_explorer(
    d_model: int = 16, *, num_heads: int = 4, seq_len: int = 6, rope: bool = False, base: float = 10000.0,
    causal: bool = False,
) -> Explorer:
    """The whole block: :class:`MultiHeadSelfAttention` ``(d_model, num_heads, causal=, rope=, rope_base=)``
    (built right after ``torch.manual_seed(MODEL_SEED)``, eval mode) on the first ``seq_len`` words of
    "The man saw the astronomer with the telescope" (the inputs of :func:`heads_explorer`).

    With RoPE on, ``num_heads`` offers only counts that leave an even ``d_head``.
    data: ``tokens``, ``weights`` (num_heads, seq_len, seq_len), ``output`` (seq_len, d_model).
    """
    d_model = _check_d_model(d_model)
    num_heads = _check_heads("num_heads", num_heads, d_model, rope=bool(rope))
    _check_int("seq_len", seq_len, 1, len(HEADS_SENTENCE.split()), f" (words of {HEADS_SENTENCE!r})")
    _check_float("base", base, 10.0, 1e6)
    return _MHSAExplorer(d_model, num_heads, int(seq_len), bool(rope), float(base), bool(causal))
