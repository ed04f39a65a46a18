"""Notebook 07's schematic diagrams show the circuit they describe."""

import matplotlib

matplotlib.use("Agg")

from matplotlib.patches import FancyArrowPatch

from mhsa_helpers.lessons.induction_heads import induction_circuit_diagram, residual_stream_diagram


def texts(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def test_the_circuit_diagram_has_three_rows_of_the_repeated_sequence():
    fig = induction_circuit_diagram()
    drawn = texts(fig)
    assert {"tokens", "layer 0", "layer 1"} <= set(drawn)
    # The sequence BOS x A B C D y A B, once per row: B appears twice in each of the three rows.
    assert drawn.count("B") == 6 and drawn.count("BOS") == 3
    assert "next: C" in drawn
    # 9 arrows up from the tokens, 9 from layer 0, 2 previous-token arcs and 1 induction arc.
    arrows = [p for ax in fig.axes for p in ax.patches if isinstance(p, FancyArrowPatch)]
    assert len(arrows) == 9 + 9 + 2 + 1


def test_the_residual_stream_diagram_names_both_layers_and_the_shapes():
    drawn = " ".join(texts(residual_stream_diagram()))
    for piece in ("MHSA 0", "MHSA 1", "embed", "unembed", "(batch, seq, d_model)", "(batch, seq, vocab)"):
        assert piece in drawn
