"""Notebook 04, multi-head attention: its exercise checkers (``exercises``)
its explorer (``explorer``) and its diagram (``diagrams``)."""

from .diagrams import split_merge_diagram
from .exercises import check_merge_heads, check_multi_head_attention, check_split_heads, check_stacked_to_per_head
from .explorer import HEADS_SENTENCE, INPUT_SCALE, MODEL_SEED, heads_explorer

__all__ = [
    "HEADS_SENTENCE",
    "INPUT_SCALE",
    "MODEL_SEED",
    "check_merge_heads",
    "check_multi_head_attention",
    "check_split_heads",
    "check_stacked_to_per_head",
    "heads_explorer",
    "split_merge_diagram",
]
