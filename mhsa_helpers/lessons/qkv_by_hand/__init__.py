"""Notebook 01, Q, K, V by hand: its exercise checkers (``exercises``)
and its explorer (``explorer``)."""

from .exercises import check_linear_projection, check_paper_projection, check_scores
from .explorer import qkv_explorer

__all__ = ["check_linear_projection", "check_paper_projection", "check_scores", "qkv_explorer"]
