"""Matplotlib pictures of attention: weight heatmaps, masks, RoPE rotations, benchmarks.

Every function accepts torch tensors or numpy arrays (lists work too), draws with
explicit sizes and no randomness, and returns what it drew on (an ``Axes``, or a
``Figure`` for :func:`head_grid`). Pass ``ax=`` to draw into your own figure;
without it a new pyplot figure of a fixed size is made, which Jupyter shows below
the cell.

Heatmaps put **queries on the rows** and **keys on the columns**: row ``i`` is how
query ``i`` spreads its attention over the keys, so every row of a weight matrix
sums to 1.
"""

from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence, Tuple

import matplotlib
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Circle, Patch

from .rope import ROPE_CONVENTIONS, RotaryEmbedding, rope_frequencies

__all__ = [
    "attention_heatmap",
    "head_grid",
    "mask_heatmap",
    "rope_rotation_arrows",
    "rope_frequencies_plot",
    "rope_score_vs_distance",
    "benchmark_plot",
    "rotate_pair",
    "rope_scores",
]

#: Colormap of attention weights (white = 0, dark blue = 1).
WEIGHTS_CMAP = "Blues"
#: Blocked / allowed colours of :func:`mask_heatmap`.
MASK_COLORS = ("#d9d9d9", "#2171b5")
#: Values in heatmap cells are written out up to this many rows/columns.
ANNOTATE_MAX_SEQ = 8


# ----------------------------------------------------------------- input checks


def _as_array(name: str, value: object, *, dtype=np.float64) -> np.ndarray:
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


def _as_matrix(name: str, value: object, shape_hint: str, *, dtype=np.float64) -> np.ndarray:
    array = _as_array(name, value, dtype=dtype)
    if array.ndim != 2 or 0 in array.shape:
        raise ValueError(f"{name} must be a non-empty 2-D array {shape_hint}, got shape {array.shape}")
    return array


def _check_tokens(name: str, tokens: Optional[Sequence[str]], expected: int, what: str) -> Optional[List[str]]:
    if tokens is None:
        return None
    if isinstance(tokens, str):
        raise TypeError(f"{name} must be a list of strings, one per {what}, got the string {tokens!r}")
    tokens = [str(t) for t in tokens]
    if len(tokens) != expected:
        raise ValueError(f"{name} must hold one label per {what} ({expected}), got {len(tokens)}")
    return tokens


def _check_int(name: str, value: object, low: int, high: Optional[int] = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    value = int(value)
    if value < low or (high is not None and value > high):
        bounds = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"{name} must be {bounds}, got {value}")
    return value


def _new_axes(figsize: Tuple[float, float]) -> Axes:
    # pyplot (not a bare Figure) so that Jupyter's inline backend shows it.
    import matplotlib.pyplot as plt

    _, ax = plt.subplots(figsize=figsize)
    return ax


def _heatmap_figsize(seq_q: int, seq_k: int) -> Tuple[float, float]:
    return (min(9.0, 1.6 + 0.55 * seq_k), min(8.0, 1.3 + 0.5 * seq_q))


def _label_axes(ax: Axes, query_tokens, key_tokens, seq_q: int, seq_k: int, *, fontsize: float = 8) -> None:
    ax.set_xticks(range(seq_k))
    ax.set_yticks(range(seq_q))
    ax.set_xticklabels(key_tokens if key_tokens is not None else [str(j) for j in range(seq_k)],
                       rotation=90 if key_tokens is not None else 0, fontsize=fontsize)
    ax.set_yticklabels(query_tokens if query_tokens is not None else [str(i) for i in range(seq_q)],
                       fontsize=fontsize)
    ax.tick_params(length=0)


# ----------------------------------------------------------------- heatmaps


class _Heatmap:
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
        row_labels: Optional[List[str]],
        col_labels: Optional[List[str]],
        cmap,
        vmin: Optional[float],
        vmax: Optional[float],
        annotate: bool,
        fmt: str = "{:.2f}",
        fontsize: float = 8,
        show_rows: bool = True,
        show_cols: bool = True,
        rotate_cols: Optional[bool] = None,
    ) -> None:
        self.ax = ax
        self.shape = values.shape
        self.fmt = fmt
        self.fontsize = fontsize
        self._fixed = (vmin, vmax)
        self.texts: List = []
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
            ax.set_yticklabels(row_labels if row_labels is not None else [str(i) for i in range(seq_q)],
                               fontsize=fontsize)
        else:
            ax.set_yticks([])
        ax.tick_params(length=0, pad=1.5)
        self.set_annotate(annotate)
        self.set_values(values)

    def dynamic(self) -> List:
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

    def set_values(self, values: np.ndarray) -> None:
        if values.shape != self.shape:
            raise ValueError(f"values must keep the heatmap's shape {self.shape}, got {values.shape}")
        self.image.set_data(values)
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
        for text, value in zip(self.texts, self.values.ravel()):
            text.set_text(self.fmt.format(value))
            # White text on the dark half of the colormap, black on the light half.
            dark = bool(np.isfinite(value)) and (value - low) / span > 0.55
            text.set_color("white" if dark else "black")


def attention_heatmap(
    weights,
    *,
    query_tokens: Optional[Sequence[str]] = None,
    key_tokens: Optional[Sequence[str]] = None,
    ax: Optional[Axes] = None,
    title: Optional[str] = None,
    annotate: Optional[bool] = None,
    vmin: Optional[float] = 0.0,
    vmax: Optional[float] = 1.0,
    cmap: str = WEIGHTS_CMAP,
    fmt: str = "{:.2f}",
    fontsize: float = 8,
) -> Axes:
    """Heatmap of one attention matrix ``weights (seq_q, seq_k)``: queries on rows, keys on columns.

    ``annotate`` writes each value in its cell (default: when both sides are at most
    8 long). ``vmin``/``vmax`` fix the colour range (0 to 1 suits weights; pass
    ``None`` for the data's own range, e.g. for raw scores). Returns the Axes.
    """
    heatmap = _heatmap(weights, query_tokens=query_tokens, key_tokens=key_tokens, ax=ax, annotate=annotate,
                       vmin=vmin, vmax=vmax, cmap=cmap, fmt=fmt, fontsize=fontsize)
    if title is not None:
        heatmap.ax.set_title(title, fontsize=fontsize + 1)
    return heatmap.ax


def _heatmap(
    weights,
    *,
    query_tokens=None,
    key_tokens=None,
    ax: Optional[Axes] = None,
    annotate: Optional[bool] = None,
    vmin: Optional[float] = 0.0,
    vmax: Optional[float] = 1.0,
    cmap=WEIGHTS_CMAP,
    fmt: str = "{:.2f}",
    fontsize: float = 8,
    name: str = "weights",
) -> _Heatmap:
    values = _as_matrix(name, weights, "(seq_q, seq_k)")
    seq_q, seq_k = values.shape
    query_tokens = _check_tokens("query_tokens", query_tokens, seq_q, "query (row)")
    key_tokens = _check_tokens("key_tokens", key_tokens, seq_k, "key (column)")
    if ax is None:
        ax = _new_axes(_heatmap_figsize(seq_q, seq_k))
    if annotate is None:
        annotate = max(seq_q, seq_k) <= ANNOTATE_MAX_SEQ
    return _Heatmap(ax, values, row_labels=query_tokens, col_labels=key_tokens, cmap=cmap, vmin=vmin,
                    vmax=vmax, annotate=annotate, fmt=fmt, fontsize=fontsize)


class _HeadGrid:
    """A grid of per-head heatmaps in ``fig`` within ``rect`` (left, bottom, right, top in
    figure fractions), updatable in place; ``highlight`` (0-based) frames one head in red.
    Values are written in the cells only on grids of at most 4 heads of at most 8 tokens."""

    def __init__(
        self,
        fig: Figure,
        weights: np.ndarray,
        *,
        tokens: Optional[List[str]],
        ncols: int,
        title: Optional[str] = None,
        rect: Tuple[float, float, float, float] = (0.0, 0.0, 1.0, 1.0),
        annotate: str = "auto",
    ) -> None:
        heads, seq_q, seq_k = weights.shape
        self.heads = heads
        ncols = max(1, min(ncols, heads))
        nrows = math.ceil(heads / ncols)
        left, bottom, right, top = rect
        width, height = right - left, top - bottom
        label_room = 0.0 if tokens is None else 0.13
        grid = fig.add_gridspec(
            nrows, ncols,
            left=left + (0.05 + label_room) * width, right=right - 0.01 * width,
            bottom=bottom + (0.05 + 1.3 * label_room) * height,
            top=top - (0.14 if title else 0.08) * height,
            wspace=0.12, hspace=0.3,
        )
        self.small = heads > 4
        # "auto": values written in every panel of a small grid; "highlight": only in the
        # framed head's panel (each written value costs drawing time); "none".
        self.annotate = annotate
        self.can_annotate = annotate != "none" and max(seq_q, seq_k) <= ANNOTATE_MAX_SEQ and not self.small
        fontsize = 6 if self.small else 7
        self.panels: List[_Heatmap] = []
        for h in range(heads):
            row, col = divmod(h, ncols)
            ax = fig.add_subplot(grid[row, col])
            panel = _Heatmap(
                ax, weights[h], row_labels=tokens, col_labels=tokens, cmap=WEIGHTS_CMAP, vmin=0.0, vmax=1.0,
                annotate=self.can_annotate and annotate == "auto", fontsize=fontsize,
                show_rows=col == 0, show_cols=h + ncols >= heads,
            )
            self.panels.append(panel)
            ax.set_title(f"head {h + 1}", fontsize=fontsize + 1, pad=2)
        self.title = fig.text((left + right) / 2, top - 0.01 * height, title or "", ha="center", va="top", fontsize=9)
        self.highlight: Optional[int] = None

    def dynamic(self) -> List:
        return [artist for panel in self.panels for artist in panel.dynamic()]

    def set_values(self, weights: np.ndarray, highlight: Optional[int] = None) -> None:
        for panel, values in zip(self.panels, weights):
            panel.set_values(values)
        self.set_highlight(highlight)

    def set_highlight(self, highlight: Optional[int]) -> None:
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
    tokens: Optional[Sequence[str]] = None,
    ncols: int = 4,
    title: Optional[str] = None,
    figsize: Optional[Tuple[float, float]] = None,
    highlight: Optional[int] = None,
) -> Figure:
    """One heatmap per head: ``weights (heads, seq_q, seq_k)``, ``ncols`` heads per row.

    ``tokens`` label both axes (self-attention: seq_q == seq_k). ``highlight`` (0-based)
    frames one head in red. Returns the new Figure.
    """
    values = _as_array("weights", weights)
    if values.ndim != 3 or 0 in values.shape:
        raise ValueError(f"weights must be a non-empty 3-D array (heads, seq_q, seq_k), got shape {values.shape}")
    heads, seq_q, seq_k = values.shape
    ncols = _check_int("ncols", ncols, 1)
    if tokens is not None:
        if seq_q != seq_k:
            raise ValueError(
                f"tokens label both axes, so weights must be square (self-attention), got shape {values.shape}"
            )
        tokens = _check_tokens("tokens", tokens, seq_q, "position")
    if highlight is not None:
        highlight = _check_int("highlight", highlight, 0, heads - 1)
    cols = min(ncols, heads)
    rows = math.ceil(heads / cols)
    if figsize is None:
        cell = 0.32 * max(seq_q, seq_k) + 0.5
        figsize = (min(12.0, cols * cell + 1.2), min(12.0, rows * cell + 1.0))
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=figsize)
    _HeadGrid(fig, values, tokens=tokens, ncols=cols, title=title).set_values(values, highlight)
    return fig


def mask_heatmap(
    mask,
    *,
    query_tokens: Optional[Sequence[str]] = None,
    key_tokens: Optional[Sequence[str]] = None,
    ax: Optional[Axes] = None,
    title: Optional[str] = None,
) -> Axes:
    """Show a boolean ``mask (seq_q, seq_k)``: blue where the query may attend (``True``), grey where blocked."""
    if isinstance(mask, torch.Tensor) and mask.dtype != torch.bool:
        raise TypeError(f"mask must be boolean (True = may attend), got dtype {mask.dtype}")
    if isinstance(mask, np.ndarray) and mask.dtype != np.bool_:
        raise TypeError(f"mask must be boolean (True = may attend), got dtype {mask.dtype}")
    values = _as_matrix("mask", mask, "(seq_q, seq_k)", dtype=bool)
    seq_q, seq_k = values.shape
    query_tokens = _check_tokens("query_tokens", query_tokens, seq_q, "query (row)")
    key_tokens = _check_tokens("key_tokens", key_tokens, seq_k, "key (column)")
    if ax is None:
        ax = _new_axes(_heatmap_figsize(seq_q, seq_k))
    ax.imshow(values.astype(np.int64), cmap=ListedColormap(list(MASK_COLORS)), vmin=0, vmax=1,
              aspect="equal", interpolation="nearest")
    _label_axes(ax, query_tokens, key_tokens, seq_q, seq_k)
    ax.legend(
        handles=[Patch(color=MASK_COLORS[1], label="may attend (True)"), Patch(color=MASK_COLORS[0], label="blocked (False)")],
        loc="upper center", bbox_to_anchor=(0.5, -0.02 if key_tokens is None else -0.25),
        ncol=2, fontsize=7, frameon=False, handlelength=1.0,
    )
    if key_tokens is None:
        ax.xaxis.tick_top()
    if title is not None:
        ax.set_title(title, fontsize=9)
    return ax


# ----------------------------------------------------------------- RoPE


def rotate_pair(vector, *, base: float, d_head: int, pair_index: int, positions: Sequence[int]) -> np.ndarray:
    """Where RoPE moves a 2-D ``vector`` placed in pair ``pair_index`` of a ``d_head`` query,
    at each of ``positions``: returns ``(len(positions), 2)``, computed by
    :class:`~mhsa_helpers.rope.RotaryEmbedding` (interleaved pairs)."""
    vec = _as_array("vector", vector)
    if vec.shape != (2,):
        raise ValueError(f"vector must have shape (2,) (one pair of features), got shape {vec.shape}")
    d_head = _check_int("d_head", d_head, 2)
    if d_head % 2:
        raise ValueError(f"d_head must be even for RoPE (features are rotated in pairs), got d_head={d_head}")
    pair_index = _check_int("pair_index", pair_index, 0, d_head // 2 - 1)
    positions = _check_positions(positions)
    rope = RotaryEmbedding(d_head, max_seq_len=max(positions) + 1, base=base)
    x = torch.zeros(len(positions), d_head, dtype=torch.float64)
    x[:, 2 * pair_index] = float(vec[0])
    x[:, 2 * pair_index + 1] = float(vec[1])
    rotated = rope(x, torch.tensor(positions))
    return rotated[:, 2 * pair_index : 2 * pair_index + 2].numpy()


def _check_positions(positions: Sequence[int]) -> List[int]:
    if isinstance(positions, torch.Tensor):
        positions = positions.tolist()
    try:
        positions = list(positions)
    except TypeError:
        raise TypeError(f"positions must be a list of ints, got {type(positions).__name__}") from None
    if not positions:
        raise ValueError("positions must hold at least one position, got an empty list")
    return [_check_int(f"positions[{i}]", p, 0) for i, p in enumerate(positions)]


def rope_rotation_arrows(
    vector,
    *,
    base: float,
    d_head: int,
    pair_index: int,
    positions: Sequence[int],
    ax: Optional[Axes] = None,
) -> Axes:
    """Arrows of one feature pair of a query after RoPE, one arrow per position.

    ``vector (2,)`` is the pair ``(x[2i], x[2i+1])`` with ``i = pair_index``; at position
    ``m`` it is turned by ``m * theta_i`` with ``theta_i = base^(-2i/d_head)``. The arrows are
    a quiver (``ax.collections[0]``, components ``U``, ``V``), labelled ``m=...``.
    """
    positions = _check_positions(positions)
    rotated = rotate_pair(vector, base=base, d_head=d_head, pair_index=pair_index, positions=positions)
    theta = float(rope_frequencies(d_head, base)[pair_index])
    if ax is None:
        ax = _new_axes((3.4, 3.4))
    radius = float(np.hypot(*rotated[0])) or 1.0
    colors = matplotlib.colormaps["viridis"](np.linspace(0.0, 0.9, len(positions)))
    ax.add_patch(Circle((0.0, 0.0), radius, fill=False, color="#bbbbbb", linestyle="--", linewidth=0.8))
    ax.quiver(np.zeros(len(positions)), np.zeros(len(positions)), rotated[:, 0], rotated[:, 1],
              color=colors, angles="xy", scale_units="xy", scale=1.0, width=0.012)
    for (x, y), m, color in zip(rotated, positions, colors):
        ax.text(1.12 * x, 1.12 * y, f"m={m}", fontsize=7, ha="center", va="center", color=color)
    limit = 1.35 * radius
    ax.set_xlim(-limit, limit)
    ax.set_ylim(-limit, limit)
    ax.set_aspect("equal")
    ax.axhline(0, color="#bbbbbb", linewidth=0.6)
    ax.axvline(0, color="#bbbbbb", linewidth=0.6)
    ax.set_xlabel(f"feature {2 * pair_index}", fontsize=8)
    ax.set_ylabel(f"feature {2 * pair_index + 1}", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.set_title(f"pair {pair_index}: θ = {theta:.3g} rad per position", fontsize=9)
    return ax


def rope_frequencies_plot(d_head: int, base: float, *, ax: Optional[Axes] = None, highlight: Optional[int] = None) -> Axes:
    """``theta_i = base^(-2i/d_head)`` for each pair ``i`` on a log scale (one line, ``ax.lines[0]``).

    ``highlight`` marks one pair in red.
    """
    thetas = rope_frequencies(d_head, base).double().numpy()
    if ax is None:
        ax = _new_axes((3.6, 2.8))
    pairs = np.arange(len(thetas))
    ax.plot(pairs, thetas, marker="o", markersize=3, color="#2171b5")
    if highlight is not None:
        highlight = _check_int("highlight", highlight, 0, len(thetas) - 1)
        ax.plot([highlight], [thetas[highlight]], marker="o", markersize=7, color="#d62728", linestyle="none")
    ax.set_yscale("log")
    ax.set_xlabel("pair i", fontsize=8)
    ax.set_ylabel("θ_i (rad / position)", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.set_title(f"RoPE frequencies, base {base:,.0f}", fontsize=9)
    return ax


def rope_scores(
    q, k, *, base: float, max_distance: int, convention: str = "interleaved", offset: int = 0
) -> Tuple[np.ndarray, np.ndarray]:
    """``(distances, scores)``: ``scores[d] = rope(q, offset + d) . rope(k, offset)`` for
    ``d = 0 .. max_distance``, computed with :class:`~mhsa_helpers.rope.RotaryEmbedding`
    in float64. Shapes: ``q, k (d_head,)`` -> two ``(max_distance + 1,)`` arrays."""
    q_arr = _as_array("q", q)
    k_arr = _as_array("k", k)
    if q_arr.ndim != 1 or q_arr.size == 0:
        raise ValueError(f"q must be a 1-D vector (d_head,), got shape {q_arr.shape}")
    if k_arr.shape != q_arr.shape:
        raise ValueError(f"k must have the shape of q {q_arr.shape}, got shape {k_arr.shape}")
    d_head = q_arr.size
    if d_head % 2:
        raise ValueError(f"q must have an even size d_head for RoPE (pairs of features), got d_head={d_head}")
    max_distance = _check_int("max_distance", max_distance, 0)
    offset = _check_int("offset", offset, 0)
    if convention not in ROPE_CONVENTIONS:
        raise ValueError(f"convention must be one of {ROPE_CONVENTIONS}, got {convention!r}")
    rope = RotaryEmbedding(d_head, max_seq_len=offset + max_distance + 1, base=base, convention=convention)
    distances = np.arange(max_distance + 1)
    q_rot = rope(torch.from_numpy(q_arr).expand(max_distance + 1, d_head), torch.from_numpy(offset + distances))
    k_rot = rope(torch.from_numpy(k_arr)[None], torch.tensor([offset]))
    return distances, (q_rot @ k_rot[0]).numpy()


def rope_score_vs_distance(
    q,
    k,
    *,
    base: float,
    max_distance: int,
    convention: str = "interleaved",
    ax: Optional[Axes] = None,
    offset: int = 0,
) -> Axes:
    """The RoPE score ``rope(q, m) . rope(k, n)`` against the distance ``m - n = 0 .. max_distance``
    (key at position ``offset``). It depends on the distance only, so ``offset`` changes nothing.
    One line (``ax.lines[0]``); shapes ``q, k (d_head,)``."""
    distances, scores = rope_scores(q, k, base=base, max_distance=max_distance, convention=convention, offset=offset)
    if ax is None:
        ax = _new_axes((4.2, 2.8))
    ax.plot(distances, scores, color="#2171b5", linewidth=1.4)
    ax.axhline(0, color="#bbbbbb", linewidth=0.6)
    ax.set_xlabel("distance m − n", fontsize=8)
    ax.set_ylabel("q·k after RoPE", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.set_title(f"score vs distance, base {base:,.0f}", fontsize=9)
    return ax


# ----------------------------------------------------------------- benchmarks


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
