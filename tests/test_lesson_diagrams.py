"""Notebooks 01-06's schematic diagrams draw what they say: the blocked cells of a causal mask,
the angle of each RoPE pair, one block per head, the shapes of each product."""

import math

import matplotlib

matplotlib.use("Agg")

import pytest
from matplotlib.colors import to_hex
from matplotlib.patches import Circle, FancyArrowPatch, Rectangle

from mhsa_helpers import rope_frequencies
from mhsa_helpers.lessons.causal_masking import causal_mask_diagram
from mhsa_helpers.lessons.causal_mhsa_with_rope import kv_cache_diagram, transformer_block_diagram
from mhsa_helpers.lessons.multi_head_attention import split_merge_diagram
from mhsa_helpers.lessons.qkv_by_hand import one_head_diagram
from mhsa_helpers.lessons.rotary_position_embeddings import rotating_pairs_diagram
from mhsa_helpers.lessons.scaled_dot_product_attention import matrix_products_diagram
from mhsa_helpers.teaching.diagrams import ROLE_COLORS, head_colors


def texts(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def cells(fig, color: str) -> int:
    """How many unit cells are filled with ``color``."""
    want = to_hex(ROLE_COLORS.get(color, color))
    return sum(
        1
        for ax in fig.axes
        for p in ax.patches
        if isinstance(p, Rectangle) and p.get_fill() and to_hex(p.get_facecolor()) == want and p.get_width() == 1.0
    )


def test_one_head_names_every_tensor_and_the_words():
    drawn = texts(one_head_diagram(("Money", "Bank", "Grows"), d_k=3))
    for name in ("E", "Q", "K", "V", "scores", "weights", "C", "· W_Q", "· W_K", "· W_V", "Q Kᵀ / √d_k"):
        assert name in drawn
    # The words label E's rows, and the score table's rows and columns.
    assert drawn.count("Bank") == 3


@pytest.mark.parametrize(("seq", "d_k", "d_v"), [(6, 4, 3), (3, 5, 2)])
def test_matrix_products_show_each_shape_and_highlight_one_query(seq, d_k, d_v):
    fig = matrix_products_diagram(seq, d_k, d_v)
    drawn = " ".join(texts(fig))
    for shape in (f"({seq}, {d_k})", f"({d_k}, {seq})", f"({seq}, {seq})", f"({seq}, {d_v})"):
        assert shape in drawn
    # Row 0 of Q, S, A and the output: d_k + seq + seq + d_v highlighted cells.
    assert cells(fig, "new") == d_k + 2 * seq + d_v


@pytest.mark.parametrize("n", [1, 3, 6])
def test_causal_mask_blocks_exactly_the_later_keys(n):
    tokens = tuple(f"w{i}" for i in range(n))
    fig = causal_mask_diagram(tokens)
    blocked = n * (n - 1) // 2
    assert texts(fig).count("−∞") == blocked and texts(fig).count("0") == blocked
    assert cells(fig, "blocked") == 2 * blocked
    assert cells(fig, "scores") == n * n - blocked and cells(fig, "weights") == n * n - blocked


@pytest.mark.parametrize(("d_model", "heads"), [(8, 2), (12, 3), (8, 4)])
def test_split_merge_draws_one_block_per_head_in_its_colour(d_model, heads):
    seq = 3
    fig = split_merge_diagram(seq=seq, d_model=d_model, num_heads=heads)
    d_head = d_model // heads
    for color in head_colors(heads):
        # Its columns in Q and in the merged output, its block before and after attention.
        assert cells(fig, color) == 4 * seq * d_head
    assert [f"head {h + 1}" in texts(fig) for h in range(heads)] == [True] * heads


@pytest.mark.parametrize(("d_head", "base"), [(8, 10000.0), (6, 100.0)])
def test_rope_dials_point_at_position_times_frequency(d_head, base):
    positions = 4
    fig = rotating_pairs_diagram(d_head, base, positions)
    ax = fig.axes[0]
    dials = [p for p in ax.patches if isinstance(p, Circle)]
    hands = [p for p in ax.patches if isinstance(p, FancyArrowPatch)]
    assert len(dials) == len(hands) == positions * d_head // 2
    thetas = rope_frequencies(d_head, base=base).tolist()
    for index, hand in enumerate(hands):
        pair, m = divmod(index, positions)
        (x0, y0), (x1, y1) = hand._posA_posB  # the hand's two ends, as given
        assert math.isclose(
            math.atan2(y1 - y0, x1 - x0) % (2 * math.pi), (m * thetas[pair]) % (2 * math.pi), abs_tol=1e-9
        )


@pytest.mark.parametrize(("past", "new"), [(0, 1), (5, 2), (3, 4)])
def test_kv_cache_blocks_keys_after_each_new_query(past, new):
    fig = kv_cache_diagram(past, new)
    assert texts(fig).count("−∞") == new * (new - 1) // 2
    assert cells(fig, "past") == past and cells(fig, "new") == new
    assert f"tril(diagonal={past})" in " ".join(texts(fig))


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: matrix_products_diagram(seq=0), "seq"),
        (lambda: causal_mask_diagram(()), "tokens"),
        (lambda: one_head_diagram(("a", 3)), "tokens"),
        (lambda: split_merge_diagram(d_model=8, num_heads=3), "num_heads"),
        (lambda: rotating_pairs_diagram(d_head=7), "d_head"),
        (lambda: rotating_pairs_diagram(base=-1.0), "base"),
        (lambda: kv_cache_diagram(past=-1), "past"),
        (lambda: kv_cache_diagram(new=0), "new"),
    ],
)
def test_diagrams_refuse_what_they_cannot_draw(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_block_diagram_has_two_normed_sublayers_each_added_back():
    drawn = texts(transformer_block_diagram())
    assert drawn.count("LayerNorm") == 2 and drawn.count("+") == 2 and drawn.count("residual") == 2
    assert "causal MHSA + RoPE" in drawn and "MLP: d → 4d → d" in drawn
