"""Notebook 03, causal masking: its exercise checkers (``exercises``)
its explorer (``explorer``) and its diagram (``diagrams``)."""

from .diagrams import causal_mask_diagram
from .exercises import (
    check_attention_dropout,
    check_cache_prediction,
    check_cached_causal_mask,
    check_causal_attention,
    check_masked_softmax,
    check_padded_causal_attention,
    check_padding_mask,
)
from .explorer import DROPOUT_SEED, JOURNEY_SEED, METHODS, journey_projections, masking_explorer
from .recall import check_recall

__all__ = [
    "DROPOUT_SEED",
    "JOURNEY_SEED",
    "METHODS",
    "causal_mask_diagram",
    "check_attention_dropout",
    "check_cache_prediction",
    "check_cached_causal_mask",
    "check_causal_attention",
    "check_masked_softmax",
    "check_padded_causal_attention",
    "check_padding_mask",
    "check_recall",
    "journey_projections",
    "masking_explorer",
]
