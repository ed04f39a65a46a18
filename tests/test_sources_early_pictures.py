"""The picture fixes of issue 21 in notebooks 01-06: arrows end on what they point at, mask
legends never sit on the axis label, dense head grids can drop their numbers, one row of heads
is not drawn in a tall figure, and no notebook shows a stray ``Text(...)`` repr."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import nbformat
import pytest
import torch
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle

from mhsa_helpers.lessons.causal_mhsa_with_rope import mhsa_explorer
from mhsa_helpers.lessons.multi_head_attention import split_merge_diagram
from mhsa_helpers.lessons.multi_head_latent_attention import absorption_diagram, latent_diagram
from mhsa_helpers.lessons.qkv_by_hand import one_head_diagram
from mhsa_helpers.teaching import figures

ROOT = Path(__file__).resolve().parent.parent


def boxes(fig) -> list[tuple[float, float, float, float]]:
    """(x0, y0, x1, y1) of every tensor outline and operation box of a diagram."""
    found = []
    for p in fig.axes[0].patches:
        if (isinstance(p, Rectangle) and not p.get_fill()) or isinstance(p, FancyBboxPatch):
            found.append((p.get_x(), p.get_y(), p.get_x() + p.get_width(), p.get_y() + p.get_height()))
    return found


def on_an_edge(point, box, tol=1e-9) -> bool:
    x, y = point
    x0, y0, x1, y1 = box
    inside = x0 - tol <= x <= x1 + tol and y0 - tol <= y <= y1 + tol
    return inside and min(abs(x - x0), abs(x - x1), abs(y - y0), abs(y - y1)) <= tol


@pytest.mark.parametrize(
    "make",
    [
        lambda: one_head_diagram(("Money", "Bank", "Grows"), d_k=3),
        lambda: one_head_diagram(("a", "b", "c", "d"), d_k=2),
        lambda: split_merge_diagram(seq=4, d_model=8, num_heads=2),
        lambda: split_merge_diagram(seq=3, d_model=12, num_heads=3),
        latent_diagram,  # notebook 13
        absorption_diagram,
    ],
)
def test_every_arrow_starts_and_ends_on_a_box(make):
    fig = make()
    drawn = boxes(fig)
    arrows = [p for p in fig.axes[0].patches if isinstance(p, FancyArrowPatch)]
    assert arrows
    for arrow in arrows:
        start, end = arrow._posA_posB  # the two ends, as given
        assert any(on_an_edge(start, b) for b in drawn), f"an arrow starts in empty space at {start}"
        assert any(on_an_edge(end, b) for b in drawn), f"an arrow ends in empty space at {end}"


def test_split_merge_draws_the_output_that_w_o_makes():
    texts = [t.get_text() for t in split_merge_diagram().axes[0].texts]
    assert "output" in texts and "· W_Oᵀ" in texts
    assert not any(t.endswith("→\n(seq, d_model)") or "→" in t for t in texts)


def test_one_head_diagram_mixes_the_values_in_an_operation():
    texts = [t.get_text() for t in one_head_diagram().axes[0].texts]
    assert "weights · V" in texts


@pytest.mark.parametrize(
    "tokens", [["The", "cat", "sat"], ["The", "cat", "<pad>"], ["a-long-token", "another-long-one", "x"]]
)
def test_mask_legend_never_overlaps_the_key_label(tokens):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(3.6, 3.4))
    figures.mask_heatmap(
        torch.ones(3, 3, dtype=torch.bool).tril(), query_tokens=tokens, key_tokens=tokens, ax=ax, title="t"
    )
    fig.tight_layout()
    renderer = fig.canvas.get_renderer()
    legend = ax.get_legend().get_window_extent(renderer)
    label = ax.xaxis.label.get_window_extent(renderer)
    ticks = [t.get_window_extent(renderer) for t in ax.get_xticklabels()]
    title = ax.title.get_window_extent(renderer)
    assert not legend.overlaps(label)
    assert not any(legend.overlaps(t) for t in ticks)
    assert not legend.overlaps(title)


def test_head_grid_without_numbers():
    weights = torch.softmax(torch.randn(2, 8, 8, generator=torch.Generator().manual_seed(0)), dim=-1)
    with_numbers = figures.head_grid(weights, tokens=[str(i) for i in range(8)], ncols=2)
    without = figures.head_grid(weights, tokens=[str(i) for i in range(8)], ncols=2, annotate=False)
    assert sum(len(ax.texts) for ax in with_numbers.axes) == 128
    assert sum(len(ax.texts) for ax in without.axes) == 0
    with pytest.raises(TypeError, match="annotate"):
        figures.head_grid(weights, annotate="no")


def test_one_row_of_heads_gets_a_lower_explorer_figure():
    explorer = mhsa_explorer(d_model=16)
    try:
        explorer.update(num_heads=4)
        one_row = explorer.figure.get_size_inches()[1]
        explorer.update(num_heads=8)
        two_rows = explorer.figure.get_size_inches()[1]
        explorer.update(num_heads=2)
        two_heads = explorer.figure.get_size_inches()[1]
    finally:
        explorer.close()
    assert one_row < two_heads <= two_rows


@pytest.mark.parametrize("path", sorted((ROOT / "notebooks").glob("0[1-6]_*.ipynb")), ids=lambda p: p.stem)
def test_no_stray_text_repr_under_a_figure(path):
    for index, cell in enumerate(nbformat.read(path, as_version=4).cells):
        for output in cell.get("outputs", []):
            plain = output.get("data", {}).get("text/plain", "")
            assert not plain.startswith(("Text(", "[<matplotlib")), f"{path.name} cell {index} shows {plain!r}"
