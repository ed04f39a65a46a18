"""Notebook 07, watch attention learn: induction heads.

The exercise checkers (``exercises``), the pictures (``figures``), the explorer over training steps
(``explorer``) and the schematic diagrams (``diagrams``); from ``teaching.induction``, the base that notebooks
09 and 11 build on too: the task (``task``), the two-layer attention-only model (``model``), the training loop
(``training``), the head scores and ablations (``scores``) and the shipped checkpoints (``checkpoints``); and,
from ``teaching.modules``, the check that the learner's own attention module is written and, when it fails,
why ("train your own module").
"""

from ...teaching.induction.checkpoints import (
    CHECKPOINT_FILE,
    CHECKPOINT_SEED,
    CHECKPOINT_STEPS,
    LEARNED_CHECKPOINT_FILE,
    LEARNED_CHECKPOINT_STEPS,
    Checkpoints,
    load_checkpoints,
    make_checkpoints,
    save_checkpoints,
)
from ...teaching.induction.model import POSITIONS, AttentionOnlyTransformer
from ...teaching.induction.scores import (
    SCORE_NAMES,
    ablation_losses,
    attention_entropy,
    bos_score,
    find_induction_circuit,
    head_scores,
    in_context_loss,
    induction_score,
    induction_targets,
    previous_token_score,
)
from ...teaching.induction.task import BOS, InductionBatch, expect_task_settings, make_induction_batch, repeat_chunk
from ...teaching.induction.training import (
    InductionConfig,
    TrainingRun,
    build_model,
    evaluation_batch,
    phase_change_step,
    split_losses,
    train_induction,
)
from ...teaching.modules import explained, module_is_written
from .diagrams import induction_circuit_diagram, residual_stream_diagram
from .exercises import (
    PREDICTION_SEQ,
    check_ablate_head,
    check_induction_score,
    check_previous_token_score,
    check_repeat_chunk,
    check_untrained_prediction,
)
from .explorer import example_index, training_explorer
from .figures import ablation_bars, layer_heatmaps, loss_curves, mark_copies, score_bars
from .recall import check_recall

__all__ = [
    "BOS",
    "CHECKPOINT_FILE",
    "CHECKPOINT_SEED",
    "CHECKPOINT_STEPS",
    "LEARNED_CHECKPOINT_FILE",
    "LEARNED_CHECKPOINT_STEPS",
    "POSITIONS",
    "PREDICTION_SEQ",
    "SCORE_NAMES",
    "AttentionOnlyTransformer",
    "Checkpoints",
    "InductionBatch",
    "InductionConfig",
    "TrainingRun",
    "ablation_bars",
    "ablation_losses",
    "attention_entropy",
    "bos_score",
    "build_model",
    "check_ablate_head",
    "check_induction_score",
    "check_previous_token_score",
    "check_recall",
    "check_repeat_chunk",
    "check_untrained_prediction",
    "evaluation_batch",
    "example_index",
    "expect_task_settings",
    "explained",
    "find_induction_circuit",
    "head_scores",
    "in_context_loss",
    "induction_circuit_diagram",
    "induction_score",
    "induction_targets",
    "layer_heatmaps",
    "load_checkpoints",
    "loss_curves",
    "make_checkpoints",
    "make_induction_batch",
    "mark_copies",
    "module_is_written",
    "phase_change_step",
    "previous_token_score",
    "repeat_chunk",
    "residual_stream_diagram",
    "save_checkpoints",
    "score_bars",
    "split_losses",
    "train_induction",
    "training_explorer",
]
