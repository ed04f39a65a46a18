"""Notebook 12, sinks and gates: where attention goes when it has nowhere to go. The experiments on notebook
07's model and on the real model of notebook 11 (``experiments``), the exercise checkers (``exercises``), the
explorer (``explorer``), the pictures (``figures``) and the diagrams (``diagrams``). The mathematics is in
:func:`mhsa_helpers.attention.attend` (``sink=``) and :class:`mhsa_helpers.MultiHeadSelfAttention` (``sink=``,
``gate=``)."""

from ...teaching.base_module import NotSavedYet
from .exercises import check_my_sink_gate_attention, check_sink_prediction, check_sink_softmax
from .experiments import (
    NOTEBOOK_CONFIG,
    REAL_PROMPTS,
    VARIANTS,
    measure_variant,
    real_model_sinks,
    train_variants,
    zero_first_value,
)
from .explorer import sink_explorer
from .figures import first_token_map, variant_loss_curves, variant_maps
from .recall import check_recall

__all__ = [
    "NOTEBOOK_CONFIG",
    "REAL_PROMPTS",
    "VARIANTS",
    "NotSavedYet",
    "check_my_sink_gate_attention",
    "check_recall",
    "check_sink_prediction",
    "check_sink_softmax",
    "first_token_map",
    "measure_variant",
    "real_model_sinks",
    "sink_explorer",
    "train_variants",
    "variant_loss_curves",
    "variant_maps",
    "zero_first_value",
]
