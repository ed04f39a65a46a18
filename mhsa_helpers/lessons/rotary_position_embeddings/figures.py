"""Notebook 05's figures: pictures of rotary position embeddings (RoPE): one feature pair turning with the position,
the frequency of each pair, and the score of a query and a key against their distance.
The numbers come from :class:`~mhsa_helpers.rope.RotaryEmbedding`."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.patches import Circle

from ...checks import expect_int
from ...rope import ROPE_CONVENTIONS, RotaryEmbedding, rope_frequencies
from ...teaching.figures import as_array, new_axes

__all__ = [
    "arrow_label_position",
    "rope_frequencies_plot",
    "rope_rotation_arrows",
    "rope_score_vs_distance",
    "rope_scores",
    "rotate_pair",
]


def rotate_pair(vector, *, base: float, d_head: int, pair_index: int, positions: Sequence[int]) -> np.ndarray:
    """Where RoPE moves a 2-D ``vector`` placed in pair ``pair_index`` of a ``d_head`` query,
    at each of ``positions``: returns ``(len(positions), 2)``, computed by
    :class:`~mhsa_helpers.rope.RotaryEmbedding` (interleaved pairs)."""
    vec = as_array("vector", vector)
    if vec.shape != (2,):
        raise ValueError(f"vector must have shape (2,) (one pair of features), got shape {vec.shape}")
    d_head = expect_int("d_head", d_head, 2)
    if d_head % 2:
        raise ValueError(f"d_head must be even for RoPE (features are rotated in pairs), got d_head={d_head}")
    pair_index = expect_int("pair_index", pair_index, 0, d_head // 2 - 1)
    positions = _check_positions(positions)
    rope = RotaryEmbedding(d_head, max_seq_len=max(positions) + 1, base=base)
    x = torch.zeros(len(positions), d_head, dtype=torch.float64)
    x[:, 2 * pair_index] = float(vec[0])
    x[:, 2 * pair_index + 1] = float(vec[1])
    rotated = rope(x, torch.tensor(positions))
    return rotated[:, 2 * pair_index : 2 * pair_index + 2].numpy()


def _check_positions(positions: Sequence[int]) -> list[int]:
    if isinstance(positions, torch.Tensor):
        positions = positions.tolist()
    try:
        positions = list(positions)
    except TypeError:
        raise TypeError(f"positions must be a list of ints, got {type(positions).__name__}") from None
    if not positions:
        raise ValueError("positions must hold at least one position, got an empty list")
    return [expect_int(f"positions[{i}]", p, 0) for i, p in enumerate(positions)]


def arrow_label_position(x: float, y: float) -> tuple[float, float]:
    """Where the label of the arrow ``(x, y)`` goes: inside the circle, beside the arrow's shaft (on its
    counter-clockwise side), so it neither covers the arrow head nor leaves the panel."""
    return 0.62 * x - 0.16 * y, 0.62 * y + 0.16 * x


def rope_rotation_arrows(
    vector,
    *,
    base: float,
    d_head: int,
    pair_index: int,
    positions: Sequence[int],
    ax: Axes | None = None,
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
        ax = new_axes((3.4, 3.4))
    radius = float(np.hypot(*rotated[0])) or 1.0
    colors = matplotlib.colormaps["viridis"](np.linspace(0.0, 0.9, len(positions)))
    ax.add_patch(Circle((0.0, 0.0), radius, fill=False, color="#bbbbbb", linestyle="--", linewidth=0.8))
    ax.quiver(
        np.zeros(len(positions)),
        np.zeros(len(positions)),
        rotated[:, 0],
        rotated[:, 1],
        color=colors,
        angles="xy",
        scale_units="xy",
        scale=1.0,
        width=0.012,
    )
    for (x, y), m, color in zip(rotated, positions, colors, strict=True):
        ax.text(*arrow_label_position(x, y), f"m={m}", fontsize=7, ha="center", va="center", color=color)
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


def rope_frequencies_plot(d_head: int, base: float, *, ax: Axes | None = None, highlight: int | None = None) -> Axes:
    """``theta_i = base^(-2i/d_head)`` for each pair ``i`` on a log scale (one line, ``ax.lines[0]``).

    ``highlight`` marks one pair in red.
    """
    thetas = rope_frequencies(d_head, base).double().numpy()
    if highlight is not None:  # checked before a figure is opened, so bad input leaves none behind
        highlight = expect_int("highlight", highlight, 0, len(thetas) - 1)
    if ax is None:
        ax = new_axes((3.6, 2.8))
    pairs = np.arange(len(thetas))
    ax.plot(pairs, thetas, marker="o", markersize=3, color="#2171b5")
    if highlight is not None:
        ax.plot([highlight], [thetas[highlight]], marker="o", markersize=7, color="#d62728", linestyle="none")
    ax.set_yscale("log")
    ax.set_xlabel("pair i", fontsize=8)
    ax.set_ylabel("θ_i (rad / position)", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.set_title(f"RoPE frequencies, base {base:,.0f}", fontsize=9)
    return ax


def rope_scores(
    q, k, *, base: float, max_distance: int, convention: str = "interleaved", offset: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """``(distances, scores)``: ``scores[d] = rope(q, offset + d) . rope(k, offset)`` for
    ``d = 0 .. max_distance``, computed with :class:`~mhsa_helpers.rope.RotaryEmbedding`
    in float64. Shapes: ``q, k (d_head,)`` -> two ``(max_distance + 1,)`` arrays."""
    q_arr = as_array("q", q)
    k_arr = as_array("k", k)
    if q_arr.ndim != 1 or q_arr.size == 0:
        raise ValueError(f"q must be a 1-D vector (d_head,), got shape {q_arr.shape}")
    if k_arr.shape != q_arr.shape:
        raise ValueError(f"k must have the shape of q {q_arr.shape}, got shape {k_arr.shape}")
    d_head = q_arr.size
    if d_head % 2:
        raise ValueError(f"q must have an even size d_head for RoPE (pairs of features), got d_head={d_head}")
    max_distance = expect_int("max_distance", max_distance, 0)
    offset = expect_int("offset", offset, 0)
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
    ax: Axes | None = None,
    offset: int = 0,
) -> Axes:
    """The RoPE score ``rope(q, m) . rope(k, n)`` against the distance ``m - n = 0 .. max_distance``
    (key at position ``offset``). It depends on the distance only, so ``offset`` changes nothing.
    One line (``ax.lines[0]``); shapes ``q, k (d_head,)``."""
    distances, scores = rope_scores(q, k, base=base, max_distance=max_distance, convention=convention, offset=offset)
    if ax is None:
        ax = new_axes((4.2, 2.8))
    ax.plot(distances, scores, color="#2171b5", linewidth=1.4)
    ax.axhline(0, color="#bbbbbb", linewidth=0.6)
    ax.set_xlabel("distance m − n", fontsize=8)
    ax.set_ylabel("q·k after RoPE", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.set_title(f"score vs distance, base {base:,.0f}", fontsize=9)
    return ax
