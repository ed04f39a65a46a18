"""Notebook 03, causal masking: its exercise checkers (``exercises``)
and its explorer (``explorer``)."""

from .exercises import check_causal_mask, check_masked_attention, check_masked_softmax
from .explorer import DROPOUT_SEED, METHODS, SEED_002_SEED, masking_explorer, seed_002_projections

__all__ = [
    "DROPOUT_SEED",
    "METHODS",
    "SEED_002_SEED",
    "check_causal_mask",
    "check_masked_attention",
    "check_masked_softmax",
    "masking_explorer",
    "seed_002_projections",
]
