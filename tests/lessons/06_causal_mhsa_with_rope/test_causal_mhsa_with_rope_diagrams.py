"""Notebook 06's schematic diagrams draw what they say: the keys each new query sees in the cache, the block's
two sublayers."""

import matplotlib

matplotlib.use("Agg")

import pytest
from matplotlib.colors import to_hex
from matplotlib.patches import Rectangle

from mhsa_helpers.lessons.causal_mhsa_with_rope import kv_cache_diagram, transformer_block_diagram
from mhsa_helpers.teaching.diagrams import ROLE_COLORS


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


@pytest.mark.parametrize(("past", "new"), [(0, 1), (5, 2), (3, 4)])
def test_kv_cache_blocks_keys_after_each_new_query(past, new):
    fig = kv_cache_diagram(past, new)
    assert texts(fig).count("−∞") == new * (new - 1) // 2
    assert cells(fig, "past") == past and cells(fig, "new") == new
    assert f"tril(diagonal={past})" in " ".join(texts(fig))


@pytest.mark.parametrize(
    ("make", "message"),
    [
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
