"""Notebook 02, scaled dot-product attention: its exercise checkers (``exercises``)
its explorer (``explorer``) and its diagram (``diagrams``)."""

from .diagrams import matrix_products_diagram
from .exercises import check_cross_attention, check_my_attention, check_softmax, check_spread_prediction
from .explorer import SCALING_SENTENCES, scaling_explorer
from .recall import check_recall

__all__ = [
    "SCALING_SENTENCES",
    "check_cross_attention",
    "check_my_attention",
    "check_recall",
    "check_softmax",
    "check_spread_prediction",
    "matrix_products_diagram",
    "scaling_explorer",
]
