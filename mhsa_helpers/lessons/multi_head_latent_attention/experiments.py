"""Notebook 13's experiment: notebook 07's two-layer model trained with four kinds of attention — multi-head (MHA),
grouped-query with 2 key/value heads (GQA), multi-query (MQA) and multi-head latent attention (MLA) — on the same task
and seeds, and what each one costs and learns.

Per kind and seed, :func:`train_kinds` reports what the cache holds per token and layer (read off a real cache after a
forward, :func:`cache_numbers`: MHA ``2 h d_head``, GQA ``2 g d_head``, MQA ``2 d_head``, MLA ``d_latent + d_rope``),
the attention's parameters, the loss curve on the repeated tokens, the step of the phase change
(:func:`~mhsa_helpers.teaching.induction.phase_change_step`) and the best induction score of the layer-1 heads on the
held-out batch (:func:`~mhsa_helpers.teaching.induction.evaluation_batch`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import nn

from ...checks import expect_int, expect_number
from ...kv_cache import KVCache
from ...mha import MultiHeadSelfAttention
from ...mla import LatentCache, MultiHeadLatentAttention
from ...rope import RotaryEmbedding
from ...teaching.induction.scores import induction_score
from ...teaching.induction.task import InductionBatch
from ...teaching.induction.training import (
    InductionConfig,
    TrainingRun,
    evaluation_batch,
    phase_change_step,
    split_losses,
    train_induction,
)

__all__ = [
    "KINDS",
    "NOTEBOOK_CONFIG",
    "AttentionKind",
    "KindResult",
    "attention_parameters",
    "cache_numbers",
    "measure_kind",
    "train_kinds",
]


@dataclass(frozen=True)
class AttentionKind:
    """One kind of attention: a learner-readable ``name`` and how its layers are built.

    * ``d_latent=None``: the package's ``MultiHeadSelfAttention`` as notebook 07's model builds it (causal, RoPE on
      ``d_head``), with ``num_kv_heads`` key/value heads (``None``: one per query head, MHA; 1: MQA);
    * ``d_latent`` set: :class:`~mhsa_helpers.mla.MultiHeadLatentAttention` with a latent of ``d_latent`` and a
      decoupled RoPE part of ``d_rope`` (even, or 0 for none), queries projected from ``x`` directly unless
      ``q_latent`` is given (as DeepSeek-V2-Lite).

    ``bias``: ``None`` for each module's own default — biases in ``MultiHeadSelfAttention`` (as notebook 07's model),
    none in latent attention (as DeepSeek-V2) — or ``False`` for a ``MultiHeadSelfAttention`` without them.

    :meth:`factory` gives the ``attention(d_model, num_heads)`` that
    :func:`~mhsa_helpers.teaching.induction.train_induction` calls once per layer."""

    name: str
    num_kv_heads: int | None = None
    d_latent: int | None = None
    d_rope: int = 0
    q_latent: int | None = None
    bias: bool | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"name must be a non-empty str, got {self.name!r}")
        if self.num_kv_heads is not None:
            expect_int("num_kv_heads", self.num_kv_heads)
        if self.bias is not None and not isinstance(self.bias, bool):
            raise TypeError(f"bias must be None (the module's default), True or False, got {self.bias!r}")
        if self.d_latent is None:
            if self.d_rope or self.q_latent is not None:
                raise ValueError(
                    f"d_rope and q_latent belong to latent attention: give d_latent too, got d_latent=None, "
                    f"d_rope={self.d_rope!r}, q_latent={self.q_latent!r}"
                )
            return
        expect_int("d_latent", self.d_latent)
        if self.bias:
            raise ValueError("bias=True: latent attention has no biases (as DeepSeek-V2); use bias=None or False")
        if self.num_kv_heads is not None:
            raise ValueError(
                f"num_kv_heads belongs to grouped-query attention; latent attention keeps one latent per token, "
                f"got num_kv_heads={self.num_kv_heads} with d_latent={self.d_latent}"
            )
        if expect_int("d_rope", self.d_rope, 0) % 2:
            raise ValueError(f"d_rope must be even (RoPE rotates pairs of dimensions), got d_rope={self.d_rope}")
        if self.q_latent is not None:
            expect_int("q_latent", self.q_latent)

    @property
    def latent(self) -> bool:
        """True for multi-head latent attention."""
        return self.d_latent is not None

    def factory(self, config: InductionConfig) -> Callable[[int, int], nn.Module]:
        """``attention(d_model, num_heads) -> nn.Module`` for ``config``'s model: one layer of this kind, causal, with
        its own RoPE table of ``config.seq_len`` positions when ``config.positions == "rope"`` (RoPE over ``d_head``
        for MHA/GQA/MQA, over the decoupled ``d_rope`` for MLA)."""
        if not isinstance(config, InductionConfig):
            raise TypeError(f"config must be an InductionConfig, got {type(config).__name__}")
        rotate = config.positions == "rope"

        def attention(d_model: int, num_heads: int) -> nn.Module:
            if self.d_latent is None:
                rope = RotaryEmbedding(d_model // num_heads, config.seq_len) if rotate else None
                bias = self.bias is None or self.bias  # the package's default: biases, as notebook 07's model
                return MultiHeadSelfAttention(
                    d_model, num_heads, num_kv_heads=self.num_kv_heads, causal=True, rope=rope, qkv_bias=bias,
                    out_bias=bias,
                )  # fmt: skip
            # With learned positions the model adds them to x; the latent layer then needs no position part.
            rope = RotaryEmbedding(self.d_rope, config.seq_len) if rotate and self.d_rope else None
            return MultiHeadLatentAttention(d_model, num_heads, self.d_latent, q_latent=self.q_latent, rope=rope)

        return attention

    def build(self, config: InductionConfig) -> nn.Module:
        """One attention layer of this kind for ``config``'s model (fresh random weights; the global random state is
        left as it was, so that counting a layer's numbers changes no later result)."""
        with torch.random.fork_rng(devices=[]):
            return self.factory(config)(config.d_model, config.num_heads)


#: The four kinds the notebook compares, in its order. MLA caches ``d_latent + d_rope = 24 + 8 = 32`` numbers per
#: token and layer, MQA's 32: matched cache size.
KINDS: tuple[AttentionKind, ...] = (
    AttentionKind("MHA"),
    AttentionKind("GQA", num_kv_heads=2),
    AttentionKind("MQA", num_kv_heads=1),
    AttentionKind("MLA", d_latent=24, d_rope=8),
)

#: The notebook's training run, the same for every kind and the same as notebook 12's: notebook 07's model and task with
#: chunks of 12 to 15 tokens, a learning rate of 0.01 and 150 steps (the four kinds train in 20-27 seconds on one
#: thread of a 2-core machine shared with other jobs, 33-45 ms a step). Measured on seeds 0-8 before the notebook's
#: sentences were written: the copying loss (10-step mean) fell below 2.5 nats within 36-51 steps for MHA, GQA and
#: MQA and after 83-115 for MLA, at least 1.6 times as many as each of the others on every seed. Neither MLA's small
#: cache nor its missing biases explain it: MLA with a 64-wide latent (seeds 0-2) was as slow, MHA and MQA without
#: biases (seeds 0-2) as fast as with them. The full phase change (below 1.0) varies from seed to seed for every
#: kind: within 150 steps MHA formed the circuit on 7 of the 9 seeds, GQA on 6, MQA on 4, MLA on none.
NOTEBOOK_CONFIG = InductionConfig(min_repeat=12, lr=0.01, steps=150)


def _expect_kind(kind: object) -> AttentionKind:
    if not isinstance(kind, AttentionKind):
        raise TypeError(f"kind must be an AttentionKind (one of KINDS), got {type(kind).__name__}")
    return kind


@torch.no_grad()
def cache_numbers(kind: AttentionKind, config: InductionConfig = NOTEBOOK_CONFIG) -> int:
    """The numbers one layer of ``kind`` caches per token: a fresh layer reads ``seq = 3`` tokens of a batch of 2
    into an empty cache (a ``KVCache``, or a ``LatentCache`` for MLA) and the cache's tensors are counted —
    ``keys (batch, kv_heads, seq, d_head)`` and ``values`` alike, or ``latents (batch, seq, d_latent)`` and
    ``rope_keys (batch, seq, d_rope)`` — divided by ``batch * seq``."""
    kind = _expect_kind(kind)
    if not isinstance(config, InductionConfig):
        raise TypeError(f"config must be an InductionConfig, got {type(config).__name__}")
    layer = kind.build(config)
    cache = LatentCache() if kind.latent else KVCache()
    batch, seq = 2, 3
    layer(torch.zeros(batch, seq, config.d_model), cache=cache)
    keys, values = cache.keys, cache.values
    if keys is None or values is None:  # the layer wrote nothing: not a kind this lesson knows
        raise RuntimeError(f"{kind.name}'s layer left its cache empty")
    return (keys.numel() + values.numel()) // (batch * seq)


def attention_parameters(kind: AttentionKind, config: InductionConfig = NOTEBOOK_CONFIG) -> int:
    """The parameters (weights and biases) of one attention layer of ``kind`` in ``config``'s model; the model has
    two such layers, and the same embedding and unembedding for every kind."""
    kind = _expect_kind(kind)
    if not isinstance(config, InductionConfig):
        raise TypeError(f"config must be an InductionConfig, got {type(config).__name__}")
    return sum(p.numel() for p in kind.build(config).parameters())


@torch.no_grad()
def measure_kind(model: nn.Module, batch: InductionBatch) -> tuple[torch.Tensor, float]:
    """One pass of ``model`` (notebook 07's two-layer model) over ``batch.tokens (batch, seq)`` -> ``(induction
    (layers, heads), in_context_loss)``: notebook 07's induction score of every head, and the loss on the repeated
    tokens (nats)."""
    if not isinstance(batch, InductionBatch):
        raise TypeError(f"batch must be an InductionBatch (evaluation_batch(config)), got {type(batch).__name__}")
    if not isinstance(getattr(model, "layers", None), nn.ModuleList):
        raise TypeError(f"model must be notebook 07's AttentionOnlyTransformer, got {type(model).__name__}")
    was_training = model.training
    model.eval()
    try:
        logits, weights = model(batch.tokens)  # weights: [(batch, heads, seq, seq)] * layers
    finally:
        model.train(was_training)
    _, repeated, _ = split_losses(logits, batch)
    return torch.stack([induction_score(w, batch) for w in weights]), float(repeated)


class KindResult(NamedTuple):
    """One kind trained on one seed.

    * ``run``: the :class:`~mhsa_helpers.teaching.induction.TrainingRun` (per-step losses, the trained model);
    * ``cache_numbers``: numbers cached per token and layer (:func:`cache_numbers`);
    * ``parameters``: parameters of one attention layer (:func:`attention_parameters`);
    * ``phase_change``: the first step at which the 10-step mean loss on the repeated tokens is below 1 (None: not
      within the run, :func:`~mhsa_helpers.teaching.induction.phase_change_step`);
    * ``induction``: ``(layers, heads)`` induction scores on the held-out batch; ``best_induction`` the best layer-1
      head's;
    * ``in_context_loss``: the trained model's loss on the repeated tokens of the held-out batch (nats)."""

    kind: AttentionKind
    seed: int
    run: TrainingRun
    cache_numbers: int
    parameters: int
    phase_change: int | None
    induction: torch.Tensor
    in_context_loss: float

    @property
    def best_induction(self) -> float:
        """The highest induction score among the layer-1 heads (0 to 1)."""
        return float(self.induction[1].max())

    def steps_below(self, loss: float = 1.0) -> int | None:
        """The first step at which the 10-step mean loss on the repeated tokens is below ``loss`` nats (None: not
        within the run); ``steps_below(1.0)`` is ``phase_change``. The early drop (below 2.5 or 2.0 nats, from
        chance ``ln 31 = 3.43``) comes at a steadier step from seed to seed than the full phase change."""
        expect_number("loss", loss, 0.0, open_low=True)
        return phase_change_step(self.run.induction_loss, below=loss)


def train_kinds(
    config: InductionConfig = NOTEBOOK_CONFIG,
    *,
    seeds: Sequence[int] = (0,),
    kinds: Sequence[AttentionKind] = KINDS,
    progress: Callable[[str, int, int], None] | None = None,
) -> dict[str, list[KindResult]]:
    """Train notebook 07's model once per kind and seed (:func:`train_induction`, on the CPU) and measure it on
    :func:`~mhsa_helpers.teaching.induction.evaluation_batch` -> ``{kind name: [result per seed]}``, in the order of
    ``kinds`` and ``seeds``. The same seed gives every kind the same batches and the same embeddings (the attention
    layers' weights differ: they have different shapes). ``progress(name, step, steps)`` is called after every
    step."""
    if not isinstance(config, InductionConfig):
        raise TypeError(f"config must be an InductionConfig, got {type(config).__name__}")
    if isinstance(seeds, (str, bytes)) or not isinstance(seeds, Sequence):
        raise TypeError(f"seeds must be a sequence of ints, e.g. (0,), got {type(seeds).__name__}")
    seeds = list(seeds)
    if not seeds or any(isinstance(s, bool) or not isinstance(s, int) for s in seeds):
        raise ValueError(f"seeds must be a non-empty sequence of ints, got {seeds!r}")
    if isinstance(kinds, (str, bytes)) or not isinstance(kinds, Sequence):
        raise TypeError(f"kinds must be a sequence of AttentionKind, got {type(kinds).__name__}")
    kinds = list(kinds)
    if not kinds or any(not isinstance(k, AttentionKind) for k in kinds):
        raise TypeError(f"kinds must be a non-empty sequence of AttentionKind, got {kinds!r:.80}")
    names = [k.name for k in kinds]
    if len(set(names)) != len(names):
        raise ValueError(f"kinds must have distinct names, got {names}")
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be None or a function progress(name, step, steps), got {progress!r:.60}")
    batch = evaluation_batch(config)
    results: dict[str, list[KindResult]] = {}
    for kind in kinds:
        cached, parameters = cache_numbers(kind, config), attention_parameters(kind, config)
        for seed in seeds:
            report = None if progress is None else functools.partial(progress, kind.name)
            run = train_induction(config, seed=seed, device="cpu", attention=kind.factory(config), progress=report)
            induction, repeated = measure_kind(run.model, batch)
            result = KindResult(
                kind, seed, run, cached, parameters, phase_change_step(run.induction_loss), induction, repeated
            )
            results.setdefault(kind.name, []).append(result)
    return results
