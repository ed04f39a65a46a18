"""Notebook 07, watch attention learn: induction heads.

The task (``task``), the two-layer attention-only model (``model``), the training loop
(``training``), the head scores and ablations (``scores``) and the shipped checkpoints
(``checkpoints``).
"""

from .checkpoints import (
    CHECKPOINT_FILE,
    CHECKPOINT_SEED,
    CHECKPOINT_STEPS,
    Checkpoints,
    load_checkpoints,
    make_checkpoints,
    save_checkpoints,
)
from .model import POSITIONS, AttentionOnlyTransformer
from .scores import (
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
from .task import BOS, InductionBatch, check_task_settings, make_induction_batch
from .training import InductionConfig, TrainingRun, build_model, evaluation_batch, split_losses, train_induction

__all__ = [
    "BOS",
    "CHECKPOINT_FILE",
    "CHECKPOINT_SEED",
    "CHECKPOINT_STEPS",
    "POSITIONS",
    "SCORE_NAMES",
    "AttentionOnlyTransformer",
    "Checkpoints",
    "InductionBatch",
    "InductionConfig",
    "TrainingRun",
    "ablation_losses",
    "attention_entropy",
    "bos_score",
    "build_model",
    "check_task_settings",
    "evaluation_batch",
    "find_induction_circuit",
    "head_scores",
    "in_context_loss",
    "induction_score",
    "induction_targets",
    "load_checkpoints",
    "make_checkpoints",
    "make_induction_batch",
    "previous_token_score",
    "save_checkpoints",
    "split_losses",
    "train_induction",
]
