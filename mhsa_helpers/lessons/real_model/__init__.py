"""Notebook 11, a real model runs on your attention: SmolLM2-135M-Instruct built from the package's
parts (:mod:`mhsa_helpers.real_model`).

The measuring tools (``tools``: the model loaded once, the copying test, notebook 07's scores for
every head, zeroing heads), the pictures (``figures``), the schematic (``diagrams``), the explorer
over layers, heads and sentences (``explorer``), the exercise checkers (``exercises``), and the
model with the learner's attention module in every layer (``swap``).
"""

from ...teaching.modules import explained, module_is_written
from .diagrams import real_model_diagram
from .exercises import (
    PREDICTION_HEADS,
    PREDICTION_RISE,
    check_ablation_prediction,
    check_copy_loss,
    check_head_induction_score,
    check_sink_heads,
    measured_rises,
)
from .explorer import PRESET_SENTENCES, attention_weights_of, real_attention_explorer
from .figures import ablation_loss_bars, layer_head_maps
from .recall import check_recall
from .swap import YourAttention, copy_gqa_weights, with_attention
from .tools import (
    FIRST_ORDINARY_TOKEN,
    ablate_heads,
    copy_loss,
    copy_losses,
    copying_test,
    expect_heads,
    first_copy_mask,
    head_score_maps,
    load_model,
    random_repeated_batch,
    sentence_loss,
    top_heads,
)

__all__ = [
    "FIRST_ORDINARY_TOKEN",
    "PREDICTION_HEADS",
    "PREDICTION_RISE",
    "PRESET_SENTENCES",
    "YourAttention",
    "ablate_heads",
    "ablation_loss_bars",
    "attention_weights_of",
    "check_ablation_prediction",
    "check_copy_loss",
    "check_head_induction_score",
    "check_recall",
    "check_sink_heads",
    "copy_gqa_weights",
    "copy_loss",
    "copy_losses",
    "copying_test",
    "expect_heads",
    "explained",
    "first_copy_mask",
    "head_score_maps",
    "layer_head_maps",
    "load_model",
    "measured_rises",
    "module_is_written",
    "random_repeated_batch",
    "real_attention_explorer",
    "real_model_diagram",
    "sentence_loss",
    "top_heads",
    "with_attention",
]
