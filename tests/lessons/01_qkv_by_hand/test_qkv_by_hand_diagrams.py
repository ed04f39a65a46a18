"""Notebook 01's schematic diagram draws what it says: every tensor of one head, and the words."""

import matplotlib

matplotlib.use("Agg")

import pytest

from mhsa_helpers.lessons.qkv_by_hand import one_head_diagram


def texts(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def test_one_head_names_every_tensor_and_the_words():
    drawn = texts(one_head_diagram(("Money", "Bank", "Grows"), d_k=3))
    for name in ("E", "Q", "K", "V", "scores", "weights", "C", "· W_Q", "· W_K", "· W_V", "Q Kᵀ / √d_k"):
        assert name in drawn
    # The words label E's rows, and the score table's rows and columns.
    assert drawn.count("Bank") == 3


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: one_head_diagram(("a", 3)), "tokens"),
    ],
)
def test_diagrams_refuse_what_they_cannot_draw(make, message):
    with pytest.raises(ValueError, match=message):
        make()
