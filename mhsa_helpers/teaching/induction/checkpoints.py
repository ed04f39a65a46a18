"""The shipped checkpoints: the weights of one training run at a few steps around the phase change,
and the final weights of the same run with learned positions instead of RoPE. Part of the induction base
(:mod:`mhsa_helpers.teaching.induction`): notebook 07 watches the run, notebook 09 reads longer sequences
with its last step.

``scripts/make_induction_checkpoints.py`` writes them with :func:`make_checkpoints` (the default
:class:`~.training.InductionConfig`, seed :data:`CHECKPOINT_SEED`, on the CPU) and stores them as
float16 to keep the files small; :func:`load_checkpoints` opens them without training.
``--positions learned`` writes :data:`LEARNED_CHECKPOINT_FILE`: the same settings with
``positions="learned"``, only its last step (:data:`LEARNED_CHECKPOINT_STEPS`), which notebook 07
compares with the RoPE run without training a second model.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from .model import AttentionOnlyTransformer
from .training import InductionConfig, build_model, train_induction

__all__ = [
    "CHECKPOINT_FILE",
    "CHECKPOINT_SEED",
    "CHECKPOINT_STEPS",
    "LEARNED_CHECKPOINT_FILE",
    "LEARNED_CHECKPOINT_STEPS",
    "Checkpoints",
    "load_checkpoints",
    "make_checkpoints",
    "save_checkpoints",
]

CHECKPOINT_FILE = Path(__file__).resolve().parent / "checkpoints" / "induction_steps.pt"
CHECKPOINT_SEED = 0
#: Before, during and after the phase change of the default run (its induction loss falls between
#: steps ~200 and ~300).
CHECKPOINT_STEPS = (0, 100, 200, 230, 260, 290, 320)
#: The run with ``InductionConfig(positions="learned")``, same seed and steps: its last step only.
LEARNED_CHECKPOINT_FILE = CHECKPOINT_FILE.with_name("learned_positions.pt")
LEARNED_CHECKPOINT_STEPS = (CHECKPOINT_STEPS[-1],)


@dataclass
class Checkpoints:
    """A training run's weights at ``steps`` (float16 state dicts) and its per-step loss curves.

    ``history`` holds the lists ``step``, ``loss``, ``induction_loss`` and ``other_loss``.
    """

    config: InductionConfig
    seed: int
    steps: tuple[int, ...]
    state_dicts: dict[int, dict[str, torch.Tensor]]
    history: dict[str, list]

    def model_at(self, step: int) -> AttentionOnlyTransformer:
        """A float32 model with the weights saved at ``step`` (one of ``steps``), in eval mode."""
        if step not in self.state_dicts:
            raise ValueError(f"step must be one of the saved steps {list(self.steps)}, got step={step!r}")
        model = build_model(self.config, self.seed)
        model.load_state_dict({k: v.float() for k, v in self.state_dicts[step].items()})
        return model.eval()


def make_checkpoints(
    steps: tuple[int, ...] = CHECKPOINT_STEPS, seed: int = CHECKPOINT_SEED, config: InductionConfig | None = None
) -> Checkpoints:
    """Train on the CPU for ``max(steps)`` steps and keep float16 weights at ``steps``.

    Weights are kept in float32 by :func:`train_induction`; rounding to float16 here halves
    the file (≈75 kB per step for the default model)."""
    config = InductionConfig() if config is None else config
    last = max(steps)
    if last != config.steps:
        config = InductionConfig(**{**asdict(config), "steps": last})
    run = train_induction(config, seed=seed, device="cpu", checkpoint_steps=steps)
    halves = {s: {k: v.half() for k, v in run.checkpoints[s].items()} for s in sorted(steps)}
    return Checkpoints(config, seed, tuple(sorted(steps)), halves, run.history())


def save_checkpoints(checkpoints: Checkpoints, path: str | Path = CHECKPOINT_FILE) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "config": asdict(checkpoints.config),
        "seed": checkpoints.seed,
        "steps": list(checkpoints.steps),
        "state_dicts": {str(s): sd for s, sd in checkpoints.state_dicts.items()},
        "history": checkpoints.history,
    }
    torch.save(payload, path)
    return path


def load_checkpoints(path: str | Path = CHECKPOINT_FILE) -> Checkpoints:
    """Open the checkpoints written by :func:`save_checkpoints` (the shipped ones by default)."""
    payload = torch.load(Path(path), map_location="cpu", weights_only=True)
    return Checkpoints(
        config=InductionConfig(**payload["config"]),
        seed=int(payload["seed"]),
        steps=tuple(payload["steps"]),
        state_dicts={int(s): sd for s, sd in payload["state_dicts"].items()},
        history=payload["history"],
    )
