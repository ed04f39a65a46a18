"""Notebook 02, scaled dot-product attention: its exercise checkers (``exercises``)
and its explorer (``explorer``)."""

from .exercises import check_attention, check_softmax
from .explorer import SCALING_SENTENCES, scaling_explorer

__all__ = ["SCALING_SENTENCES", "check_attention", "check_softmax", "scaling_explorer"]
