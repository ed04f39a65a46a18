"""The induction base: notebook 07's task, model, training, head scores and shipped checkpoints, which
notebook 07 teaches and notebooks 09 and 11 build on.

* :mod:`~mhsa_helpers.teaching.induction.task` — random tokens in which a random chunk is repeated;
* :mod:`~mhsa_helpers.teaching.induction.model` — the two-layer attention-only Transformer;
* :mod:`~mhsa_helpers.teaching.induction.training` — its deterministic training loop;
* :mod:`~mhsa_helpers.teaching.induction.scores` — a head's job read off its attention weights, and ablation;
* :mod:`~mhsa_helpers.teaching.induction.checkpoints` — the weights of one run around its phase change
  (``checkpoints/*.pt``), opened without training.

Notebook 07's own checkers, explorer and pictures are in :mod:`mhsa_helpers.lessons.induction_heads`, which
re-exports these names for the notebook; notebook 09 (:mod:`mhsa_helpers.lessons.long_context`) reads longer
sequences with the trained model, notebook 11 (:mod:`mhsa_helpers.lessons.real_model`) scores a real model's
heads.
"""

from .checkpoints import (
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
from .model import POSITIONS, AttentionOnlyTransformer, output_projection
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
from .task import BOS, InductionBatch, expect_task_settings, make_induction_batch, repeat_chunk
from .training import (
    InductionConfig,
    TrainingRun,
    build_model,
    evaluation_batch,
    phase_change_step,
    split_losses,
    train_induction,
)

__all__ = [
    "BOS",
    "CHECKPOINT_FILE",
    "CHECKPOINT_SEED",
    "CHECKPOINT_STEPS",
    "LEARNED_CHECKPOINT_FILE",
    "LEARNED_CHECKPOINT_STEPS",
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
    "evaluation_batch",
    "expect_task_settings",
    "find_induction_circuit",
    "head_scores",
    "in_context_loss",
    "induction_score",
    "induction_targets",
    "load_checkpoints",
    "make_checkpoints",
    "make_induction_batch",
    "output_projection",
    "phase_change_step",
    "previous_token_score",
    "repeat_chunk",
    "save_checkpoints",
    "split_losses",
    "train_induction",
]
