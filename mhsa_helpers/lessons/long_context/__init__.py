"""Notebook 09, long context: the experiments on notebook 07's model (``experiments``), how far
stacked windows reach (``reach``), the exercise checkers (``exercises``), the explorers
(``explorer``) and the diagrams (``diagrams``). The mathematics is in :mod:`mhsa_helpers.long_context`."""

from .exercises import check_alibi_bias, check_ntk_frequencies, check_window_mask
from .experiments import (
    TRAINED_LENGTH,
    PositionLosses,
    long_batch,
    position_losses,
    split_losses_with_mask,
    streaming_losses,
    stretched_model,
)
from .explorer import stretch_explorer, window_explorer
from .reach import window_reach
from .recall import check_recall

__all__ = [
    "TRAINED_LENGTH",
    "PositionLosses",
    "check_alibi_bias",
    "check_ntk_frequencies",
    "check_recall",
    "check_window_mask",
    "long_batch",
    "position_losses",
    "split_losses_with_mask",
    "streaming_losses",
    "stretch_explorer",
    "stretched_model",
    "window_explorer",
    "window_reach",
]
