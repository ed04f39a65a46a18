"""Notebook 01, Q, K, V by hand: its exercise checkers (``exercises``)
its explorer (``explorer``) and its diagram (``diagrams``)."""

from .diagrams import one_head_diagram
from .exercises import check_linear_projection, check_paper_projection, check_scores
from .explorer import qkv_explorer

__all__ = [
    "check_linear_projection",
    "check_paper_projection",
    "check_scores",
    "one_head_diagram",
    "qkv_explorer",
]
