"""Notebook 04, multi-head attention: its exercise checkers (``exercises``)
its explorer (``explorer``) and its diagram (``diagrams``), and, from ``teaching.heads_explorer``, the
constants with which the notebook rebuilds what the explorer draws."""

from ...teaching.heads_explorer import HEADS_SENTENCE, INPUT_SCALE, MODEL_SEED
from .diagrams import split_merge_diagram
from .exercises import (
    check_heads_one_by_one,
    check_load_from_torch,
    check_multi_head_attention,
    check_my_multi_head_attention,
    check_parameter_prediction,
    check_recipe_order,
    check_split_heads,
    recipe_order_exercise,
)
from .explorer import heads_explorer
from .recall import check_recall

__all__ = [
    "HEADS_SENTENCE",
    "INPUT_SCALE",
    "MODEL_SEED",
    "check_heads_one_by_one",
    "check_load_from_torch",
    "check_multi_head_attention",
    "check_my_multi_head_attention",
    "check_parameter_prediction",
    "check_recall",
    "check_recipe_order",
    "check_split_heads",
    "heads_explorer",
    "recipe_order_exercise",
    "split_merge_diagram",
]
