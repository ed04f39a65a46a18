"""Training the attention-only Transformer on the repeated-chunk task, deterministically (notebook 07;
part of the induction base, :mod:`mhsa_helpers.teaching.induction`).

The loop notebook 07 shows::

    for step in range(steps):
        batch = make_induction_batch(..., generator=data_rng)
        logits, _ = model(batch.tokens)
        loss = cross_entropy(logits[:, :-1], batch.tokens[:, 1:])    # predict every next token
        optimizer.zero_grad(); loss.backward(); optimizer.step()

Recorded at every step: the loss on the tokens predictable by induction (the second copy of
the chunk) and on the others (random tokens: nothing better than ``log(vocab_size - 1)``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from mhsa_helpers import default_device

from .model import POSITIONS, AttentionOnlyTransformer
from .task import InductionBatch, expect_task_settings, make_induction_batch

__all__ = [
    "InductionConfig",
    "TrainingRun",
    "build_model",
    "evaluation_batch",
    "phase_change_step",
    "split_losses",
    "train_induction",
]


@dataclass(frozen=True)
class InductionConfig:
    """Every setting of a training run; impossible ones raise ``ValueError`` naming the setting.

    The defaults learn induction heads in a few hundred steps (a few seconds on two CPU cores).
    """

    vocab_size: int = 32
    seq_len: int = 32
    min_repeat: int = 6
    max_repeat: int = 15
    d_model: int = 64
    num_heads: int = 4
    positions: str = "rope"
    batch_size: int = 64
    steps: int = 320
    lr: float = 5e-3
    fixed_offset: bool = False

    def __post_init__(self) -> None:
        expect_task_settings(self.vocab_size, self.seq_len, self.min_repeat, self.max_repeat)
        for name in ("d_model", "num_heads", "batch_size", "steps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {name}={value}")
        if self.d_model % self.num_heads:
            raise ValueError(
                f"num_heads must divide d_model: expected d_model % num_heads == 0, "
                f"got d_model={self.d_model}, num_heads={self.num_heads}"
            )
        if self.positions not in POSITIONS:
            raise ValueError(f"positions must be one of {', '.join(map(repr, POSITIONS))}, got {self.positions!r}")
        if self.positions == "rope" and (self.d_model // self.num_heads) % 2:
            raise ValueError(
                f"d_model // num_heads must be even with positions='rope' (dimensions rotate in pairs), "
                f"got d_model={self.d_model}, num_heads={self.num_heads}"
            )
        if not isinstance(self.lr, (int, float)) or isinstance(self.lr, bool) or not self.lr > 0:
            raise ValueError(f"lr must be a positive number, got lr={self.lr!r}")

    def task(self) -> dict:
        """The keyword arguments of :func:`make_induction_batch` for this run (without ``batch_size``)."""
        return {
            "seq_len": self.seq_len,
            "vocab_size": self.vocab_size,
            "min_repeat": self.min_repeat,
            "max_repeat": self.max_repeat,
            "fixed_offset": self.fixed_offset,
        }


@dataclass
class TrainingRun:
    """What :func:`train_induction` returns.

    ``step``, ``loss``, ``induction_loss``, ``other_loss`` are per-step lists (``loss`` is what was
    minimised, over every next-token prediction). ``checkpoints`` maps a step to a state dict
    copied *before* that step's update (so step 0 is the initialisation).
    """

    model: AttentionOnlyTransformer
    config: InductionConfig
    seed: int
    step: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    induction_loss: list[float] = field(default_factory=list)
    other_loss: list[float] = field(default_factory=list)
    checkpoints: dict[int, dict[str, torch.Tensor]] = field(default_factory=dict)
    seconds: float = 0.0

    def history(self) -> dict[str, list]:
        return {
            "step": self.step,
            "loss": self.loss,
            "induction_loss": self.induction_loss,
            "other_loss": self.other_loss,
        }

    def config_dict(self) -> dict:
        return asdict(self.config)


def build_model(
    config: InductionConfig, seed: int = 0, *, attention: Callable[[int, int], nn.Module] | None = None
) -> AttentionOnlyTransformer:
    """A freshly initialised model for ``config``; the same ``seed`` gives the same weights.

    ``attention``: ``None`` (the package's attention) or a class such as notebook 06's
    ``MyCausalSelfAttention``, called as ``attention(d_model, num_heads)`` for each layer (see
    :class:`~.model.AttentionOnlyTransformer`). The global random state is left as it was."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return AttentionOnlyTransformer(
            config.vocab_size,
            config.d_model,
            config.num_heads,
            num_layers=2,
            max_seq_len=config.seq_len,
            positions=config.positions,
            attention=attention,
        )


def evaluation_batch(config: InductionConfig, batch_size: int = 256, seed: int = 1234) -> InductionBatch:
    """A fixed held-out batch (its own generator) for scores and ablations: ``tokens (batch, seq)``."""
    return make_induction_batch(batch_size, generator=torch.Generator().manual_seed(seed), **config.task())


def split_losses(logits: torch.Tensor, batch: InductionBatch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``logits (batch, seq, vocab)`` -> ``(loss, induction_loss, other_loss)``, three scalars:
    mean next-token cross-entropy over all, the induction, and the other predictions."""
    losses = F.cross_entropy(logits[:, :-1].transpose(1, 2), batch.tokens[:, 1:], reduction="none")
    mask = batch.induction_mask[:, :-1]
    return losses.mean(), losses[mask].mean(), losses[~mask].mean()


def phase_change_step(losses: list[float], below: float = 1.0, window: int = 10) -> int | None:
    """The first step at which the mean of the last ``window`` losses is below ``below`` (None: never).

    With ``run.induction_loss`` this is when the model has learned to copy (the loss starts near
    ``log(vocab_size - 1)`` and falls below 1.0 within a few dozen steps once the circuit forms)."""
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be an int >= 1, got window={window!r}")
    for step in range(window, len(losses) + 1):
        if sum(losses[step - window : step]) / window < below:
            return step
    return None


def train_induction(
    config: InductionConfig | None = None,
    *,
    seed: int = 0,
    device: torch.device | str | None = None,
    checkpoint_steps: Iterable[int] = (),
    progress: Callable[[int, int], None] | None = None,
    attention: Callable[[int, int], nn.Module] | None = None,
) -> TrainingRun:
    """Train a fresh two-layer model on ``config``'s task for ``config.steps`` steps (Adam).

    Deterministic given ``seed`` on one machine (weights and data come from their own seeded
    generators; other CPUs may differ in the last bits of float sums). ``device`` defaults to
    :func:`mhsa_helpers.default_device`. ``progress(step, steps)`` is called after every step
    (a notebook's progress bar). Returns a :class:`TrainingRun`; ``checkpoint_steps`` (each in
    ``0 .. steps``) get float32 CPU copies of the weights. ``attention`` swaps the attention
    module of both layers ("train your own module": :func:`build_model`); the loop is the same.
    """
    config = InductionConfig() if config is None else config
    if not isinstance(config, InductionConfig):
        raise TypeError(f"config must be an InductionConfig, got {type(config).__name__}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {type(seed).__name__} {seed!r}")
    wanted = sorted(set(checkpoint_steps))
    bad = [s for s in wanted if not isinstance(s, int) or not 0 <= s <= config.steps]
    if bad:
        raise ValueError(f"checkpoint_steps must be ints in [0, steps={config.steps}], got {bad}")
    device = default_device() if device is None else torch.device(device)
    model = build_model(config, seed, attention=attention).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    data_rng = torch.Generator().manual_seed(seed)
    run = TrainingRun(model=model, config=config, seed=seed)

    def snapshot(step: int) -> None:
        if step in wanted:
            run.checkpoints[step] = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}

    start = time.perf_counter()
    model.train()
    for step in range(config.steps):
        snapshot(step)
        batch = make_induction_batch(config.batch_size, generator=data_rng, **config.task()).to(device)
        logits, _ = model(batch.tokens)
        loss, induction, other = split_losses(logits, batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        run.step.append(step)
        run.loss.append(loss.item())
        run.induction_loss.append(induction.item())
        run.other_loss.append(other.item())
        if progress is not None:
            progress(step + 1, config.steps)
    snapshot(config.steps)
    run.seconds = time.perf_counter() - start
    model.eval()
    return run
