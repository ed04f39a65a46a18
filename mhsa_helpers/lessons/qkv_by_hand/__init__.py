"""Notebook 01, Q, K, V by hand: its exercise checkers (``exercises``)
its explorer (``explorer``) and its diagram (``diagrams``)."""

from .diagrams import one_head_diagram
from .exercises import (
    check_attention_head,
    check_context_vector,
    check_multi_head_output,
    check_uniform_prediction,
    check_weights_debug,
)
from .explorer import qkv_explorer

__all__ = [
    "check_attention_head",
    "check_context_vector",
    "check_multi_head_output",
    "check_uniform_prediction",
    "check_weights_debug",
    "one_head_diagram",
    "qkv_explorer",
]
