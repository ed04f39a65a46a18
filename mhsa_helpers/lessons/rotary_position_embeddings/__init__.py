"""Notebook 05, rotary position embeddings: its exercise checkers (``exercises``), its figures (``figures``),
its explorer (``explorer``) and its diagram (``diagrams``)."""

from .diagrams import rotating_pairs_diagram
from .exercises import (
    check_apply_rope,
    check_apply_rope_complex,
    check_rope_attention,
    check_rotary_embedding,
    check_score_prediction,
)
from .explorer import rope_explorer
from .figures import rope_frequencies_plot, rope_rotation_arrows, rope_score_vs_distance, rope_scores, rotate_pair
from .recall import check_recall

__all__ = [
    "check_apply_rope",
    "check_apply_rope_complex",
    "check_recall",
    "check_rope_attention",
    "check_rotary_embedding",
    "check_score_prediction",
    "rope_explorer",
    "rope_frequencies_plot",
    "rope_rotation_arrows",
    "rope_score_vs_distance",
    "rope_scores",
    "rotate_pair",
    "rotating_pairs_diagram",
]
