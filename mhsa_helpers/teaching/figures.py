"""The figures every lesson uses: attention heatmaps, one panel per head, mask heatmaps,
and benchmark tables drawn as lines.

Every function accepts torch tensors or numpy arrays (lists work too), draws with
explicit sizes and no randomness, and returns what it drew on (an ``Axes``, or a
``Figure`` for :func:`head_grid`). Pass ``ax=`` to draw into your own figure;
without it a new pyplot figure of a fixed size is made, which Jupyter shows below
the cell.

Heatmaps put **queries on the rows** and **keys on the columns**: row ``i`` is how
query ``i`` spreads its attention over the keys, so every row of a weight matrix
sums to 1. :class:`Heatmap` and :class:`HeadGrid` update their pictures in place; the
explorers keep them and redraw only what changed.

Figures that belong to one lesson live in its folder (e.g. the RoPE pictures in
:mod:`mhsa_helpers.lessons.rotary_position_embeddings.figures`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from ..checks import expect_int

__all__ = [
    "ANNOTATE_MAX_SEQ",
    "MASK_COLORS",
    "ONE_SIGNED_CMAP",
    "SCORES_CMAP",
    "WEIGHTS_CMAP",
    "HeadGrid",
    "Heatmap",
    "as_array",
    "as_matrix",
    "attention_heatmap",
    "benchmark_plot",
    "expect_tokens",
    "head_grid",
    "induction_loss_curves",
    "mask_heatmap",
    "new_axes",
    "relative_luminance",
    "scores_heatmap",
    "symmetric_limit",
    "trailing_mean",
]


# ----------------------------------------------------------------- inputs


def as_array(name: str, value: object, *, dtype=np.float64) -> np.ndarray:
    """torch tensor / numpy array / nested list -> numpy array of ``dtype``."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        if value.dtype == torch.bfloat16:
            value = value.float()
        value = value.numpy()
    try:
        array = np.asarray(value, dtype=dtype)
    except (TypeError, ValueError):
        raise TypeError(
            f"{name} must be a torch tensor or numpy array of numbers, got {type(value).__name__}"
        ) from None
    return array


def trailing_mean(values: Sequence[float] | np.ndarray, window: int = 10) -> np.ndarray:
    """``values (steps,)`` -> ``(steps,)``: the mean of the last ``window`` values at each step (fewer at the start),
    as the loss curves of notebooks 07, 12 and 13 are smoothed."""
    values = as_array("values", values)
    if values.ndim != 1:
        raise ValueError(f"values must be a 1-D sequence of losses, got shape {values.shape}")
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be an int >= 1, got window={window!r}")
    sums = np.cumsum(np.concatenate([[0.0], values]))
    ends = np.arange(1, len(values) + 1)
    starts = np.maximum(0, ends - window)
    return (sums[ends] - sums[starts]) / (ends - starts)


def induction_loss_curves(
    histories: Mapping[str, Sequence[float]],
    *,
    vocab_size: int,
    colors: Sequence[str],
    styles: Sequence[str],
    level: float = 1.0,
    window: int = 10,
    ax: Axes | None = None,
) -> Axes:
    """Several runs' per-step losses on the repeated tokens of notebook 07's task (``histories``: name -> ``(steps,)``
    losses, a run's ``induction_loss``) on one axes, as notebooks 12 and 13 compare their variants: thin lines per
    step, thick lines their ``window``-step :func:`trailing_mean`, a dotted line at chance ``ln(vocab_size - 1)``
    (the tokens are drawn from ``vocab_size - 1`` ids) and a dashed one at 1.0, the level
    :func:`~mhsa_helpers.teaching.induction.phase_change_step` waits for (and one at ``level`` when it is another).
    ``colors``, ``styles``: one per run."""
    if not isinstance(histories, Mapping) or not histories:
        raise ValueError("histories must map at least one run's name to its losses")
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 3:
        raise ValueError(f"vocab_size must be an int >= 3 (BOS and two ordinary tokens), got {vocab_size!r}")
    if len(colors) < len(histories) or len(styles) < len(histories):
        raise ValueError(
            f"colors and styles must give one per run ({len(histories)}), got {len(colors)} and {len(styles)}"
        )
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not level > 0:
        raise ValueError(f"level must be a loss > 0 (nats), got level={level!r}")
    if ax is None:
        ax = new_axes((7.5, 3.6))
    chance = math.log(vocab_size - 1)
    longest = 0
    for (name, losses), color, style in zip(histories.items(), colors, styles, strict=False):
        values = as_array(name, losses)
        if values.ndim != 1 or not len(values):
            raise ValueError(f"histories must hold 1-D sequences of losses, got shape {values.shape} for {name!r}")
        steps = np.arange(len(values))
        ax.plot(steps, values, color=color, alpha=0.15, linewidth=0.7)
        ax.plot(steps, trailing_mean(values, window), color=color, linestyle=style, linewidth=1.8, label=name)
        longest = max(longest, len(values))
    ax.axhline(chance, color="black", linestyle=":", linewidth=1, label=f"chance: ln {vocab_size - 1} = {chance:.2f}")
    ax.axhline(1.0, color="0.4", linestyle="--", linewidth=0.8, label="1.0: the circuit has formed")
    if level != 1.0:
        ax.axhline(level, color="0.6", linestyle="--", linewidth=0.8, label=f"{level:g} nats")
    ax.set_xlim(0, longest)
    ax.set_ylim(0, max(4.0, chance + 0.5))
    ax.set_xlabel("training step", fontsize=9)
    ax.set_ylabel("loss on the repeated tokens (nats)", fontsize=9)
    ax.tick_params(labelsize=8)
    ax.legend(fontsize=7, loc="lower left", framealpha=0.9, ncol=2)
    return ax


def as_matrix(name: str, value: object, shape_hint: str, *, dtype=np.float64) -> np.ndarray:
    """Like :func:`as_array`, and the result must be a non-empty 2-D array (``shape_hint`` names its axes)."""
    array = as_array(name, value, dtype=dtype)
    if array.ndim != 2 or 0 in array.shape:
        raise ValueError(f"{name} must be a non-empty 2-D array {shape_hint}, got shape {array.shape}")
    return array


def expect_tokens(name: str, tokens: Sequence[str] | None, expected: int, what: str) -> list[str] | None:
    """``tokens`` as a list of ``expected`` strings, one per ``what`` (``None`` stays ``None``)."""
    if tokens is None:
        return None
    if isinstance(tokens, str):
        raise TypeError(f"{name} must be a list of strings, one per {what}, got the string {tokens!r}")
    tokens = [str(t) for t in tokens]
    if len(tokens) != expected:
        raise ValueError(f"{name} must hold one label per {what} ({expected}), got {len(tokens)}")
    return tokens


def new_axes(figsize: tuple[float, float]) -> Axes:
    """A new pyplot Axes of ``figsize`` inches."""
    # pyplot (not a bare Figure) so that Jupyter's inline backend shows it.
    import matplotlib.pyplot as plt

    _, ax = plt.subplots(figsize=figsize)
    return ax


# ----------------------------------------------------------------- heatmaps


#: Colormap of attention weights (white = 0, dark blue = 1).
WEIGHTS_CMAP = "Blues"
#: Diverging colormap of raw scores; always drawn with a range symmetric about 0, so white is 0.
SCORES_CMAP = "RdBu_r"
#: Sequential colormap of one-signed scores (e.g. ALiBi's biases, all <= 0), pale at 0 and dark at the far end;
#: :func:`scores_heatmap` with ``sequential=True`` runs it from 0 outwards, on the side the scores are.
ONE_SIGNED_CMAP = "magma_r"
#: Blocked / allowed colours of :func:`mask_heatmap`.
MASK_COLORS = ("#d9d9d9", "#2171b5")
#: Values in heatmap cells are written out up to this many rows/columns.
ANNOTATE_MAX_SEQ = 8


def _heatmap_figsize(seq_q: int, seq_k: int) -> tuple[float, float]:
    return (min(9.0, 1.6 + 0.55 * seq_k), min(8.0, 1.3 + 0.5 * seq_q))


def _label_axes(ax: Axes, query_tokens, key_tokens, seq_q: int, seq_k: int, *, fontsize: float = 8) -> None:
    ax.set_xticks(range(seq_k))
    ax.set_yticks(range(seq_q))
    ax.set_xticklabels(
        key_tokens if key_tokens is not None else [str(j) for j in range(seq_k)],
        rotation=90 if key_tokens is not None else 0,
        fontsize=fontsize,
    )
    ax.set_yticklabels(query_tokens if query_tokens is not None else [str(i) for i in range(seq_q)], fontsize=fontsize)
    ax.tick_params(length=0)


class Heatmap:
    """One heatmap on an Axes whose values (and annotations) can be replaced in place.

    The explorers redraw many times a second; replacing an image's data and a few text
    strings costs a fraction of building the Axes again, so they keep these objects
    and only rebuild when the shape or the labels change.
    """

    def __init__(
        self,
        ax: Axes,
        values: np.ndarray,
        *,
        row_labels: list[str] | None,
        col_labels: list[str] | None,
        cmap,
        vmin: float | None,
        vmax: float | None,
        annotate: bool,
        fmt: str = "{:.2f}",
        fontsize: float = 8,
        show_rows: bool = True,
        show_cols: bool = True,
        rotate_cols: bool | None = None,
        row_name: str | None = None,
        col_name: str | None = None,
        colorbar: str | None = None,
        text_by_luminance: bool = False,
    ) -> None:
        self.ax = ax
        # False: the high end of the range (both ends of a diverging one) is taken as dark; True: each
        # written value is white or black by its cell's colour, for maps whose dark end is the low one.
        self.text_by_luminance = text_by_luminance
        self.shape = values.shape
        self.fmt = fmt
        self.fontsize = fontsize
        self._fixed = (vmin, vmax)
        self.texts: list = []
        self.image = ax.imshow(values, cmap=cmap, vmin=vmin, vmax=vmax, aspect="equal", interpolation="nearest")
        seq_q, seq_k = self.shape
        if show_cols:
            ax.set_xticks(range(seq_k))
            labels = col_labels if col_labels is not None else [str(j) for j in range(seq_k)]
            rotate = (col_labels is not None) if rotate_cols is None else rotate_cols
            ax.set_xticklabels(labels, rotation=90 if rotate else 0, fontsize=fontsize)
        else:
            ax.set_xticks([])
        if show_rows:
            ax.set_yticks(range(seq_q))
            ax.set_yticklabels(
                row_labels if row_labels is not None else [str(i) for i in range(seq_q)], fontsize=fontsize
            )
        else:
            ax.set_yticks([])
        ax.tick_params(length=0, pad=1.5)
        # The axes are named ("query", "key") so that nobody has to guess which way a row reads.
        if row_name and show_rows:
            ax.set_ylabel(row_name, fontsize=fontsize + 1)
        if col_name and show_cols:
            ax.set_xlabel(col_name, fontsize=fontsize + 1)
        self.colorbar = None
        if colorbar is not None:
            self.colorbar = ax.figure.colorbar(self.image, ax=ax, fraction=0.046, pad=0.03)
            self.colorbar.set_label(colorbar, fontsize=fontsize)
            self.colorbar.ax.tick_params(labelsize=fontsize - 1)
        self.set_annotate(annotate)
        self.set_values(values)

    def dynamic(self) -> list:
        """The artists that change when the values do: the image, the annotations, and
        the frame (drawn again so that the image does not cover it)."""
        return [self.image, *self.ax.spines.values(), *self.texts]

    def set_annotate(self, annotate: bool) -> None:
        if bool(self.texts) == bool(annotate):
            return
        for text in self.texts:
            text.remove()
        self.texts = []
        if annotate:
            seq_q, seq_k = self.shape
            self.texts = [
                self.ax.text(j, i, "", ha="center", va="center", fontsize=self.fontsize - 1)
                for i in range(seq_q)
                for j in range(seq_k)
            ]

    def set_range(self, vmin: float, vmax: float) -> None:
        """Fix the colour range to ``[vmin, vmax]`` (e.g. symmetric about 0, or widened after dropout)."""
        self._fixed = (vmin, vmax)
        self.image.set_clim(vmin, vmax)

    def set_values(self, values: np.ndarray) -> None:
        """Show ``values`` (the heatmap's shape); an unfixed end of the colour range follows the data."""
        if values.shape != self.shape:
            raise ValueError(f"values must keep the heatmap's shape {self.shape}, got {values.shape}")
        # Masked scores (-inf) and NaNs are left out of the colour map and drawn in its "bad" colour.
        self.image.set_data(np.ma.masked_invalid(values))
        vmin, vmax = self._fixed
        if vmin is None or vmax is None:
            finite = values[np.isfinite(values)]
            low = float(finite.min()) if finite.size else 0.0
            high = float(finite.max()) if finite.size else 1.0
            self.image.set_clim(low if vmin is None else vmin, high if vmax is None else vmax)
        self.values = values
        self._write_texts()

    def _write_texts(self) -> None:
        if not self.texts:
            return
        low, high = self.image.get_clim()
        span = (high - low) or 1.0
        diverging = low < 0 < high
        for text, value in zip(self.texts, self.values.ravel(), strict=True):
            text.set_text("−∞" if value == -np.inf else self.fmt.format(value))
            if self.text_by_luminance:
                colour = self.image.cmap(self.image.norm(value))
                text.set_color("white" if bool(np.isfinite(value)) and relative_luminance(colour) < 0.179 else "black")
                continue
            # White text on the dark part of the colormap (both ends of a diverging one), black elsewhere.
            strength = abs(value) / max(-low, high) if diverging else (value - low) / span
            dark = bool(np.isfinite(value)) and strength > 0.55
            text.set_color("white" if dark else "black")


def relative_luminance(rgba) -> float:
    """The relative luminance of an sRGB colour (WCAG 2): 0 for black, 1 for white; below 0.179, white
    text reads better on it than black."""
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgba[:3]]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def attention_heatmap(
    weights,
    *,
    query_tokens: Sequence[str] | None = None,
    key_tokens: Sequence[str] | None = None,
    ax: Axes | None = None,
    title: str | None = None,
    annotate: bool | None = None,
    vmin: float | None = 0.0,
    vmax: float | None = 1.0,
    cmap: str = WEIGHTS_CMAP,
    fmt: str = "{:.2f}",
    fontsize: float = 8,
    colorbar: str | None = "attention weight",
    row_name: str | None = "query",
    col_name: str | None = "key",
) -> Axes:
    """Heatmap of one attention matrix ``weights (seq_q, seq_k)``: queries on rows, keys on columns.

    ``annotate`` writes each value in its cell (default: when both sides are at most
    8 long). ``vmin``/``vmax`` fix the colour range (0 to 1 suits weights, and panels
    that are compared must share it; pass ``None`` for the data's own range). A colour bar
    labelled ``colorbar`` (``None``: no bar) and the axis names ``row_name``/``col_name``
    say how to read it. Raw scores, which can be negative, belong in :func:`scores_heatmap`.
    Returns the Axes.
    """
    heatmap = _heatmap(
        weights,
        query_tokens=query_tokens,
        key_tokens=key_tokens,
        ax=ax,
        annotate=annotate,
        vmin=vmin,
        vmax=vmax,
        cmap=cmap,
        fmt=fmt,
        fontsize=fontsize,
        colorbar=colorbar,
        row_name=row_name,
        col_name=col_name,
    )
    if title is not None:
        heatmap.ax.set_title(title, fontsize=fontsize + 1)
    return heatmap.ax


def symmetric_limit(*arrays) -> float:
    """The largest absolute finite value over ``arrays`` (1.0 if there is none): the shared
    ``limit`` that gives several :func:`scores_heatmap` panels one colour scale (``[-limit, limit]``,
    or, with ``sequential=True``, ``[-limit, 0]`` for scores that are all ``<= 0``)."""
    largest = 0.0
    for index, value in enumerate(arrays):
        array = as_array(f"arrays[{index}]", value)
        finite = np.abs(array[np.isfinite(array)])
        if finite.size:
            largest = max(largest, float(finite.max()))
    return largest or 1.0


def scores_heatmap(
    scores,
    *,
    query_tokens: Sequence[str] | None = None,
    key_tokens: Sequence[str] | None = None,
    ax: Axes | None = None,
    title: str | None = None,
    annotate: bool | None = None,
    limit: float | None = None,
    fmt: str = "{:.2f}",
    fontsize: float = 8,
    colorbar: str | None = "score",
    sequential: bool = False,
) -> Axes:
    """Heatmap of raw scores ``(seq_q, seq_k)`` on a diverging map whose white is exactly 0:
    red is positive, blue negative, queries on rows and keys on columns.

    The colour range is ``[-limit, limit]``; by default ``limit`` is the largest absolute
    finite score. Panels that are compared should share one ``limit`` (see
    :func:`symmetric_limit`). Masked scores (``-inf``) are drawn in light grey.

    ``sequential=True`` is for one-signed scores, every finite one ``<= 0`` (such as ALiBi's
    biases) or every one ``>= 0``: a sequential map (:data:`ONE_SIGNED_CMAP`), pale at 0 and dark
    at ``limit`` from it, over ``[-limit, 0]`` (or ``[0, limit]``), so that no half of the colour
    bar goes unused. Scores of both signs raise ``ValueError``: they need the diverging map.
    """
    values = as_matrix("scores", scores, "(seq_q, seq_k)")
    if limit is None:
        limit = symmetric_limit(values)
    elif not isinstance(limit, (int, float)) or isinstance(limit, bool) or not math.isfinite(limit) or limit <= 0:
        raise ValueError(f"limit must be a positive finite number, got {limit!r}")
    if not isinstance(sequential, bool):
        raise TypeError(f"sequential must be True or False, got {sequential!r}")
    import matplotlib

    vmin, vmax = -float(limit), float(limit)
    if sequential:
        finite = values[np.isfinite(values)]
        negative = bool((finite <= 0).all())
        if not negative and not bool((finite >= 0).all()):
            raise ValueError(
                f"sequential=True needs scores of one sign (all <= 0 or all >= 0), got values from "
                f"{finite.min():g} to {finite.max():g}: draw them with sequential=False (a diverging map)"
            )
        base = matplotlib.colormaps[ONE_SIGNED_CMAP]
        # Pale at 0 either way: the map runs from 0 towards the side the scores are on.
        cmap = (base.reversed() if negative else base).with_extremes(bad=MASK_COLORS[0])
        vmin, vmax = (vmin, 0.0) if negative else (0.0, vmax)
    else:
        cmap = matplotlib.colormaps[SCORES_CMAP].with_extremes(bad=MASK_COLORS[0])
    heatmap = _heatmap(
        values,
        query_tokens=query_tokens,
        key_tokens=key_tokens,
        ax=ax,
        annotate=annotate,
        vmin=vmin,
        vmax=vmax,
        cmap=cmap,
        fmt=fmt,
        fontsize=fontsize,
        name="scores",
        colorbar=colorbar,
        row_name="query",
        col_name="key",
        text_by_luminance=sequential,
    )
    if title is not None:
        heatmap.ax.set_title(title, fontsize=fontsize + 1)
    return heatmap.ax


def _heatmap(
    weights,
    *,
    query_tokens=None,
    key_tokens=None,
    ax: Axes | None = None,
    annotate: bool | None = None,
    vmin: float | None = 0.0,
    vmax: float | None = 1.0,
    cmap=WEIGHTS_CMAP,
    fmt: str = "{:.2f}",
    fontsize: float = 8,
    name: str = "weights",
    colorbar: str | None = None,
    row_name: str | None = None,
    col_name: str | None = None,
    text_by_luminance: bool = False,
) -> Heatmap:
    values = as_matrix(name, weights, "(seq_q, seq_k)")
    seq_q, seq_k = values.shape
    query_tokens = expect_tokens("query_tokens", query_tokens, seq_q, "query (row)")
    key_tokens = expect_tokens("key_tokens", key_tokens, seq_k, "key (column)")
    if ax is None:
        ax = new_axes(_heatmap_figsize(seq_q, seq_k))
    if annotate is None:
        annotate = max(seq_q, seq_k) <= ANNOTATE_MAX_SEQ
    return Heatmap(
        ax,
        values,
        row_labels=query_tokens,
        col_labels=key_tokens,
        cmap=cmap,
        vmin=vmin,
        vmax=vmax,
        annotate=annotate,
        fmt=fmt,
        fontsize=fontsize,
        colorbar=colorbar,
        row_name=row_name,
        col_name=col_name,
        text_by_luminance=text_by_luminance,
    )


class HeadGrid:
    """A grid of per-head heatmaps in ``fig`` within ``rect`` (left, bottom, right, top in
    figure fractions), updatable in place; ``highlight`` (0-based) frames one head in red.
    Values are written in the cells only on grids of at most 4 heads of at most 8 tokens."""

    def __init__(
        self,
        fig: Figure,
        weights: np.ndarray,
        *,
        tokens: list[str] | None,
        ncols: int,
        title: str | None = None,
        rect: tuple[float, float, float, float] = (0.0, 0.0, 1.0, 1.0),
        annotate: str = "auto",
        colorbar: str | None = None,
        names: tuple[str, str] | None = ("query", "key"),
    ) -> None:
        heads, seq_q, seq_k = weights.shape
        self.heads = heads
        ncols = max(1, min(ncols, heads))
        nrows = math.ceil(heads / ncols)
        left, bottom, right, top = rect
        width, height = right - left, top - bottom
        label_room = 0.0 if tokens is None else 0.13
        name_room = 0.0 if names is None else 0.03
        bar_room = 0.0 if colorbar is None else 0.1
        grid_left = left + (0.05 + label_room + name_room) * width
        grid_right = right - (0.01 + bar_room) * width
        grid_bottom = bottom + (0.05 + 1.3 * label_room + name_room) * height
        grid_top = top - (0.14 if title else 0.08) * height
        grid = fig.add_gridspec(
            nrows,
            ncols,
            left=grid_left,
            right=grid_right,
            bottom=grid_bottom,
            top=grid_top,
            wspace=0.12,
            hspace=0.3,
        )
        self.small = heads > 4
        # "auto": values written in every panel of a small grid; "highlight": only in the
        # framed head's panel (each written value costs drawing time); "none".
        self.annotate = annotate
        self.can_annotate = annotate != "none" and max(seq_q, seq_k) <= ANNOTATE_MAX_SEQ and not self.small
        fontsize = 6 if self.small else 7
        self.panels: list[Heatmap] = []
        for h in range(heads):
            row, col = divmod(h, ncols)
            ax = fig.add_subplot(grid[row, col])
            panel = Heatmap(
                ax,
                weights[h],
                row_labels=tokens,
                col_labels=tokens,
                cmap=WEIGHTS_CMAP,
                vmin=0.0,
                vmax=1.0,
                annotate=self.can_annotate and annotate == "auto",
                fontsize=fontsize,
                show_rows=col == 0,
                show_cols=h + ncols >= heads,
                row_name=names[0] if names else None,
                col_name=names[1] if names else None,
            )
            self.panels.append(panel)
            ax.set_title(f"head {h + 1}", fontsize=fontsize + 1, pad=2)
        self.title = fig.text((left + right) / 2, top - 0.01 * height, title or "", ha="center", va="top", fontsize=9)
        self.colorbar = None
        if colorbar is not None:
            # One bar for every panel: they share the range 0..1, so they are compared on one scale.
            bar_ax = fig.add_axes((right - 0.095 * width, grid_bottom, 0.015 * width, (grid_top - grid_bottom) * 0.9))
            self.colorbar = fig.colorbar(self.panels[0].image, cax=bar_ax)
            self.colorbar.set_label(colorbar, fontsize=fontsize + 1)
            self.colorbar.ax.tick_params(labelsize=fontsize)
        self.highlight: int | None = None

    def dynamic(self) -> list:
        return [artist for panel in self.panels for artist in panel.dynamic()]

    def set_values(self, weights: np.ndarray, highlight: int | None = None) -> None:
        for panel, values in zip(self.panels, weights, strict=True):
            panel.set_values(values)
        self.set_highlight(highlight)

    def set_highlight(self, highlight: int | None) -> None:
        # Only frames and annotations change (both among the dynamic artists), so moving
        # the highlight needs no new background.
        if highlight == self.highlight:
            return
        for h, panel in enumerate(self.panels):
            chosen = h == highlight
            for spine in panel.ax.spines.values():
                spine.set_edgecolor("#d62728" if chosen else "black")
                spine.set_linewidth(2.5 if chosen else 0.8)
            if self.annotate == "highlight":
                panel.set_annotate(chosen and self.can_annotate)
                panel._write_texts()
        self.highlight = highlight


def head_grid(
    weights,
    *,
    tokens: Sequence[str] | None = None,
    ncols: int = 4,
    title: str | None = None,
    figsize: tuple[float, float] | None = None,
    highlight: int | None = None,
    annotate: bool = True,
) -> Figure:
    """One heatmap per head: ``weights (heads, seq_q, seq_k)``, ``ncols`` heads per row.

    ``tokens`` label both axes (self-attention: seq_q == seq_k). ``highlight`` (0-based)
    frames one head in red. ``annotate=False`` leaves the cells without numbers (the
    colour bar reads them); with ``True`` they are written where the grid is small enough
    for them (see :class:`HeadGrid`). Returns the new Figure.
    """
    values = as_array("weights", weights)
    if values.ndim != 3 or 0 in values.shape:
        raise ValueError(f"weights must be a non-empty 3-D array (heads, seq_q, seq_k), got shape {values.shape}")
    heads, seq_q, seq_k = values.shape
    ncols = expect_int("ncols", ncols, 1)
    if tokens is not None:
        if seq_q != seq_k:
            raise ValueError(
                f"tokens label both axes, so weights must be square (self-attention), got shape {values.shape}"
            )
        tokens = expect_tokens("tokens", tokens, seq_q, "position")
    if highlight is not None:
        highlight = expect_int("highlight", highlight, 0, heads - 1)
    cols = min(ncols, heads)
    rows = math.ceil(heads / cols)
    if figsize is None:
        cell = 0.32 * max(seq_q, seq_k) + 0.5
        figsize = (min(13.0, cols * cell + 2.2), min(12.0, rows * cell + 1.2))
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=figsize)
    if not isinstance(annotate, bool):
        raise TypeError(f"annotate must be True or False, got {annotate!r}")
    grid = HeadGrid(
        fig,
        values,
        tokens=tokens,
        ncols=cols,
        title=title,
        colorbar="attention weight",
        annotate="auto" if annotate else "none",
    )
    grid.set_values(values, highlight)
    return fig


def mask_heatmap(
    mask,
    *,
    query_tokens: Sequence[str] | None = None,
    key_tokens: Sequence[str] | None = None,
    ax: Axes | None = None,
    title: str | None = None,
) -> Axes:
    """Show a boolean ``mask (seq_q, seq_k)``: blue where the query may attend (``True``), grey where blocked."""
    if isinstance(mask, torch.Tensor) and mask.dtype != torch.bool:
        raise TypeError(f"mask must be boolean (True = may attend), got dtype {mask.dtype}")
    if isinstance(mask, np.ndarray) and mask.dtype != np.bool_:
        raise TypeError(f"mask must be boolean (True = may attend), got dtype {mask.dtype}")
    values = as_matrix("mask", mask, "(seq_q, seq_k)", dtype=bool)
    seq_q, seq_k = values.shape
    query_tokens = expect_tokens("query_tokens", query_tokens, seq_q, "query (row)")
    key_tokens = expect_tokens("key_tokens", key_tokens, seq_k, "key (column)")
    if ax is None:
        ax = new_axes(_heatmap_figsize(seq_q, seq_k))
    ax.imshow(
        values.astype(np.int64),
        cmap=ListedColormap(list(MASK_COLORS)),
        vmin=0,
        vmax=1,
        aspect="equal",
        interpolation="nearest",
    )
    _label_axes(ax, query_tokens, key_tokens, seq_q, seq_k)
    ax.set_ylabel("query", fontsize=9)
    if key_tokens is None:
        ax.xaxis.set_label_position("top")
    ax.set_xlabel("key", fontsize=9)
    ax.legend(
        handles=[
            Patch(color=MASK_COLORS[1], label="may attend (True)"),
            Patch(color=MASK_COLORS[0], label="blocked (False)"),
        ],
        # Where nothing else is: below the axes when the key numbers sit on top, and above the
        # axes (under the title) when word labels hang below them, whatever their length.
        loc="upper center" if key_tokens is None else "lower center",
        bbox_to_anchor=(0.5, -0.02) if key_tokens is None else (0.5, 1.0),
        ncol=2,
        fontsize=7,
        frameon=False,
        handlelength=1.0,
    )
    if key_tokens is None:
        ax.xaxis.tick_top()
    if title is not None:
        # Above the key numbers and the "key" label when they sit on top, else above the legend.
        ax.set_title(title, fontsize=9, pad=20 if key_tokens is not None else 30)
    return ax


# ----------------------------------------------------------------- benchmarks


def benchmark_plot(
    rows: Sequence[dict[str, object]],
    *,
    x: str = "n",
    y: str = "median_ms",
    group: str = "implementation",
    ax: Axes | None = None,
    logy: bool = True,
    logx: bool | None = None,
) -> Axes:
    """One line per ``group`` of ``rows`` (e.g. a benchmark table), ``y`` against ``x``.

    Groups keep the order in which they first appear; points are sorted by ``x``.
    ``logx`` defaults to a log axis when every ``x`` is positive and they span 16x or more.
    """
    if isinstance(rows, dict) or not isinstance(rows, Sequence) or len(rows) == 0:
        raise ValueError(f"rows must be a non-empty list of dicts, got {type(rows).__name__} {rows!r:.60}")
    series: dict[object, list[tuple[float, float]]] = {}
    for index, row in enumerate(rows):
        if not isinstance(row, dict):
            raise TypeError(f"rows[{index}] must be a dict, got {type(row).__name__}")
        missing = [key for key in (x, y, group) if key not in row]
        if missing:
            raise ValueError(f"rows[{index}] must have the keys {x!r}, {y!r} and {group!r}, missing {missing}")
        series.setdefault(row[group], []).append((float(row[x]), float(row[y])))  # type: ignore[arg-type]  # numbers, checked by float()
    if ax is None:
        ax = new_axes((5.0, 3.4))
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
