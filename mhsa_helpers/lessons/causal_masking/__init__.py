"""Notebook 03, causal masking: its exercise checkers (``exercises``)
and its explorer (``explorer``)."""

from .exercises import check_causal_mask, check_masked_attention, check_masked_softmax
from .explorer import DROPOUT_SEED, JOURNEY_SEED, METHODS, journey_projections, masking_explorer

__all__ = [
    "DROPOUT_SEED",
    "JOURNEY_SEED",
    "METHODS",
    "check_causal_mask",
    "check_masked_attention",
    "check_masked_softmax",
    "journey_projections",
    "masking_explorer",
]
