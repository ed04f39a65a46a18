"""Notebook 12's experiments: notebook 07's two-layer model trained with five kinds of attention (plain softmax, a
learned sink, softmax-plus-one, a headwise and an elementwise output gate) and measured on its held-out batch; and
the real model of notebook 11, SmolLM2-135M, whose heads park on the first token.

Toy model: :func:`train_variants` trains each variant with notebook 07's loop
(:func:`~mhsa_helpers.teaching.induction.train_induction`, the package's ``MultiHeadSelfAttention`` with
``sink=``/``gate=``) and :func:`measure_variant` reads, per layer and head: the weight on BOS, the weight the keys
keep (the rest went to the sink), the mean gate, and notebook 07's induction and previous-token scores.

Real model: :func:`real_model_sinks` reads every head's weight on the first token, the first token's value norm, and
the loss when the first token's value vector is zeroed in every layer — with ordinary forward hooks on each layer's
``qkv_proj`` (nothing in the model is changed).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from ...checks import expect_int, expect_integer_tensor
from ...mha import GATES, SINKS, MultiHeadSelfAttention
from ...real_model import CausalLM, ChatTokenizer
from ...rope import RotaryEmbedding
from ...teaching.induction.scores import bos_score, induction_score, previous_token_score
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
    "NOTEBOOK_CONFIG",
    "REAL_PROMPTS",
    "VARIANTS",
    "RealModelSinks",
    "Variant",
    "VariantResult",
    "attention_factory",
    "copy_queries",
    "idle_queries",
    "measure_variant",
    "real_model_sinks",
    "sentence_losses",
    "train_variants",
    "zero_first_value",
]


@dataclass(frozen=True)
class Variant:
    """One kind of attention: a learner-readable ``name`` and the ``MultiHeadSelfAttention`` options ``sink``
    (``None``, ``"learned"``, ``"plus_one"``) and ``gate`` (``None``, ``"headwise"``, ``"elementwise"``)."""

    name: str
    sink: str | None = None
    gate: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"name must be a non-empty str, got {self.name!r}")
        if self.sink is not None and self.sink not in SINKS:
            raise ValueError(f"sink must be None or one of {SINKS}, got sink={self.sink!r}")
        if self.gate is not None and self.gate not in GATES:
            raise ValueError(f"gate must be None or one of {GATES}, got gate={self.gate!r}")


#: The five kinds of attention the notebook compares, in its order.
VARIANTS: tuple[Variant, ...] = (
    Variant("plain softmax"),
    Variant("learned sink", sink="learned"),
    Variant("softmax-plus-one", sink="plus_one"),
    Variant("headwise gate", gate="headwise"),
    Variant("elementwise gate", gate="elementwise"),
)

#: The notebook's training run: notebook 07's model and task with chunks of 12 to 15 tokens (more tokens to copy per
#: sequence, so the circuit forms sooner), a learning rate of 0.01 and 150 steps: the five variants train in 12 to 14
#: seconds on one CPU thread.
NOTEBOOK_CONFIG = InductionConfig(min_repeat=12, lr=0.01, steps=150)


def attention_factory(config: InductionConfig, variant: Variant) -> Callable[[int, int], nn.Module]:
    """``attention(d_model, num_heads)`` for :func:`~mhsa_helpers.teaching.induction.train_induction`: the package's
    causal ``MultiHeadSelfAttention`` with RoPE, as notebook 07's model builds it, with ``variant``'s sink and gate."""
    if not isinstance(config, InductionConfig):
        raise TypeError(f"config must be an InductionConfig, got {type(config).__name__}")
    if not isinstance(variant, Variant):
        raise TypeError(f"variant must be a Variant, got {type(variant).__name__}")

    def attention(d_model: int, num_heads: int) -> MultiHeadSelfAttention:
        rope = RotaryEmbedding(d_model // num_heads, config.seq_len) if config.positions == "rope" else None
        return MultiHeadSelfAttention(d_model, num_heads, causal=True, rope=rope, sink=variant.sink, gate=variant.gate)

    return attention


def idle_queries(batch: InductionBatch) -> torch.Tensor:
    """``(batch, seq)`` bool: the queries ``1 <= t < second_start``, before the second copy, where a layer-1 head has
    nothing to copy yet."""
    positions = torch.arange(batch.tokens.shape[1], device=batch.tokens.device)
    return (positions >= 1) & (positions < batch.second_start[:, None])


def copy_queries(batch: InductionBatch) -> torch.Tensor:
    """``(batch, seq)`` bool: the queries of the second copy, ``second_start <= t < second_start + repeat_len``, where
    an induction head has a token to copy (all but the last of them: that one's next token is noise)."""
    positions = torch.arange(batch.tokens.shape[1], device=batch.tokens.device)
    start = batch.second_start[:, None]
    return (positions >= start) & (positions < start + batch.repeat_len[:, None])


def _mean_over(values: torch.Tensor, where: torch.Tensor) -> torch.Tensor:
    """``values (batch, heads, seq)`` -> ``(heads,)``: the mean over the batch and the queries ``where (batch, seq)``
    marks."""
    return (values * where[:, None]).sum((0, 2)) / where.sum()


@torch.no_grad()
def measure_variant(model: nn.Module, batch: InductionBatch) -> dict[str, torch.Tensor]:
    """One pass of ``model`` (notebook 07's two-layer model, built with the package's attention) over
    ``batch.tokens (batch, seq)`` -> ``{name: (layers, heads)}``, means over the batch and the queries ``t >= 1``, or
    over the queries before the second copy (``*_idle``, :func:`idle_queries`) or in it (``*_copy``,
    :func:`copy_queries`):

    * ``"bos"``, ``"bos_idle"``, ``"bos_copy"``: the weight on BOS (``"bos"`` is notebook 07's :func:`bos_score`);
    * ``"kept"``, ``"kept_idle"``, ``"kept_copy"``: the weight the keys keep, the sum of each row (1 without a sink;
      the rest went to the sink);
    * ``"gate"``, ``"gate_idle"``, ``"gate_copy"``: the head's output gate, averaged over its channels (1 without a
      gate: nothing is scaled);
    * ``"induction"``, ``"previous_token"``: notebook 07's scores.

    And the scalars (0-d tensors) ``"loss"`` (every next token) and ``"in_context_loss"`` (the repeated tokens)."""
    if not isinstance(batch, InductionBatch):
        raise TypeError(f"batch must be an InductionBatch (evaluation_batch(config)), got {type(batch).__name__}")
    if not isinstance(getattr(model, "layers", None), nn.ModuleList):
        raise TypeError(f"model must be notebook 07's AttentionOnlyTransformer, got {type(model).__name__}")
    gates: dict[int, torch.Tensor] = {}
    handles = []
    for index, layer in enumerate(model.layers):  # type: ignore[arg-type]  # an AttentionOnlyTransformer's
        if not isinstance(layer, MultiHeadSelfAttention):
            raise TypeError(f"model's layers must be the package's MultiHeadSelfAttention, got {type(layer).__name__}")
        if layer.gate_proj is not None:

            def keep_gate(module: nn.Module, args: tuple, out: torch.Tensor, index: int = index) -> None:
                gates[index] = torch.sigmoid(out)  # (batch, seq, heads | d_model)

            handles.append(layer.gate_proj.register_forward_hook(keep_gate))
    try:
        logits, weights = model(batch.tokens)
    finally:
        for handle in handles:
            handle.remove()
    queries = {"": torch.arange(batch.tokens.shape[1]) >= 1, "_idle": idle_queries(batch), "_copy": copy_queries(batch)}
    queries[""] = queries[""].expand_as(queries["_idle"])
    names = [f"{kind}{where}" for kind in ("bos", "kept", "gate") for where in queries]
    per_layer: dict[str, list[torch.Tensor]] = {name: [] for name in names}
    for index, w in enumerate(weights):  # w: (batch, heads, seq, seq)
        batch_size, heads, seq, _ = w.shape
        if index in gates:
            # (batch, seq, heads | d_model) -> (batch, heads, seq): one value per head, or the mean of its d_head
            gate = gates[index].reshape(batch_size, seq, heads, -1).mean(-1).transpose(1, 2)
        else:
            gate = torch.ones(batch_size, heads, seq)
        per_query = {"bos": w[..., 0], "kept": w.sum(-1), "gate": gate}  # each (batch, heads, seq)
        for kind, values in per_query.items():
            for where, mask in queries.items():
                per_layer[f"{kind}{where}"].append(_mean_over(values, mask))
    loss, repeated, _ = split_losses(logits, batch)
    result = {name: torch.stack(values) for name, values in per_layer.items()}
    result["induction"] = torch.stack([induction_score(w, batch) for w in weights])
    result["previous_token"] = torch.stack([previous_token_score(w) for w in weights])
    result["loss"] = loss
    result["in_context_loss"] = repeated
    return result


class VariantResult(NamedTuple):
    """One variant trained on one seed: the training ``run`` (its per-step losses and model), the step at which its
    in-context loss first fell below 1 (``phase_change``, None: not within the run) and :func:`measure_variant`'s
    ``scores`` on the held-out batch."""

    variant: Variant
    seed: int
    run: TrainingRun
    phase_change: int | None
    scores: dict[str, torch.Tensor]


def train_variants(
    config: InductionConfig = NOTEBOOK_CONFIG,
    *,
    seeds: Sequence[int] = (0,),
    variants: Sequence[Variant] = VARIANTS,
    progress: Callable[[str, int, int], None] | None = None,
) -> dict[str, list[VariantResult]]:
    """Train notebook 07's model once per variant and seed (:func:`train_induction`, on the CPU) and measure it on
    :func:`~mhsa_helpers.teaching.induction.evaluation_batch` -> ``{variant name: [result per seed]}``. The same seed
    gives every variant the same batches, and the sink variants the plain model's initial weights too (a sink logit
    starts at 0 and draws no random numbers; a gate's weights do, so the gated models start elsewhere).
    ``progress(name, step, steps)`` is called after every step."""
    if not isinstance(config, InductionConfig):
        raise TypeError(f"config must be an InductionConfig, got {type(config).__name__}")
    seeds = list(seeds)
    if not seeds or any(isinstance(s, bool) or not isinstance(s, int) for s in seeds):
        raise ValueError(f"seeds must be a non-empty sequence of ints, got {seeds!r}")
    variants = list(variants)
    if not variants or any(not isinstance(v, Variant) for v in variants):
        raise TypeError(f"variants must be a non-empty sequence of Variant, got {variants!r:.80}")
    names = [v.name for v in variants]
    if len(set(names)) != len(names):
        raise ValueError(f"variants must have distinct names, got {names}")
    batch = evaluation_batch(config)
    results: dict[str, list[VariantResult]] = {}
    for variant in variants:
        for seed in seeds:
            report = None if progress is None else functools.partial(progress, variant.name)
            run = train_induction(
                config, seed=seed, device="cpu", attention=attention_factory(config, variant), progress=report
            )
            scores = measure_variant(run.model, batch)
            result = VariantResult(variant, seed, run, phase_change_step(run.induction_loss), scores)
            results.setdefault(variant.name, []).append(result)
    return results


# ---------------------------------------------------------------- the real model

#: The three texts the notebook reads with SmolLM2 (encoded without special tokens: position 0 is an ordinary word).
REAL_PROMPTS = (
    "The cat sat by the window and watched the rain fall on the garden. When the rain stopped, the sun came out "
    "and the birds began to sing.",
    "The Amazon is the largest rainforest on Earth. It covers parts of nine countries, and most of it lies in "
    "Brazil, where the river of the same name flows into the Atlantic Ocean.",
    "def mean(values):\n    total = 0\n    for v in values:\n        total += v\n    return total / len(values)\n",
)


@contextmanager
def zero_first_value(model: CausalLM, layers: Sequence[int] | None = None) -> Iterator[None]:
    """Inside the ``with`` block, the first token's value vector is zero in every layer of ``layers`` (default: all):
    a forward hook on the layer's ``attn.qkv_proj`` sets the value features (its last ``num_kv_heads * d_head``
    outputs) of position 0 to zero. Queries and keys are untouched, so every head gives the first token the weight
    it gave it before, and that weight now carries nothing. The hooks are removed on leaving the block."""
    if not isinstance(model, CausalLM):
        raise TypeError(f"model must be a CausalLM (load_smollm2()), got {type(model).__name__}")
    count = model.config.num_layers
    chosen = list(range(count)) if layers is None else [expect_int("layer", i, 0, count - 1) for i in layers]
    kv_dim = model.config.num_kv_heads * model.config.d_head

    def hook(module: nn.Module, args: tuple, out: torch.Tensor) -> torch.Tensor:
        out = out.clone()  # (batch, seq, d_model + 2 * kv_dim): [q | k | v] features of every position
        out[..., 0, -kv_dim:] = 0
        return out

    handles = []
    try:
        for i in chosen:
            qkv: nn.Module = model.blocks[i].attn.qkv_proj  # type: ignore[union-attr, assignment]  # a LlamaBlock's
            handles.append(qkv.register_forward_hook(hook))
        yield
    finally:
        for handle in handles:
            handle.remove()


def sentence_losses(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """``logits (batch, seq, vocab)`` of ``ids (batch, seq)`` -> ``(batch,)``: the mean cross-entropy (nats) of the
    tokens ``ids[:, 2:]``, each predicted from the tokens before it — every prediction but the one made at position 0,
    whose query sees nothing but the first token."""
    expect_integer_tensor("ids", ids, " of token ids (torch.long)")
    if ids.ndim != 2 or ids.shape[1] < 3:
        raise ValueError(f"ids must have shape (batch, seq) with seq >= 3, got shape {tuple(ids.shape)}")
    if not isinstance(logits, torch.Tensor) or logits.ndim != 3 or tuple(logits.shape[:2]) != tuple(ids.shape):
        given = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise ValueError(
            f"logits must have shape (batch, seq, vocab) with (batch, seq) = {tuple(ids.shape)}, got {given}"
        )
    losses = F.cross_entropy(logits[:, 1:-1].transpose(1, 2), ids[:, 2:], reduction="none")
    return losses.mean(-1)


class RealModelSinks(NamedTuple):
    """What :func:`real_model_sinks` measured, for ``prompts`` prompts of ``tokens`` tokens each:

    * ``first_token (prompts, layers, heads)``: each head's weight on position 0, mean over the queries ``t >= 1``;
    * ``value_ratio (prompts, layers)``: the first token's value-vector norm over the mean norm of the others',
      averaged over the key/value heads;
    * ``loss``, ``loss_zeroed`` ``(prompts,)``: :func:`sentence_losses` as the model is, and with the first token's
      value zeroed in every layer (:func:`zero_first_value`)."""

    tokens: tuple[int, ...]
    first_token: torch.Tensor
    value_ratio: torch.Tensor
    loss: torch.Tensor
    loss_zeroed: torch.Tensor


@torch.no_grad()
def real_model_sinks(
    model: CausalLM, tokenizer: ChatTokenizer, prompts: Sequence[str] = REAL_PROMPTS
) -> RealModelSinks:
    """Read ``prompts`` (texts, encoded without special tokens) with the real model: where its heads put their weight,
    how large the first token's value vectors are, and what zeroing them costs. Two passes per prompt (one with
    the attention weights, one with the first token's value zeroed)."""
    if not isinstance(model, CausalLM):
        raise TypeError(f"model must be a CausalLM (load_smollm2()), got {type(model).__name__}")
    if not isinstance(tokenizer, ChatTokenizer):
        raise TypeError(f"tokenizer must be a ChatTokenizer (load_smollm2()), got {type(tokenizer).__name__}")
    if isinstance(prompts, str) or not isinstance(prompts, Sequence) or not prompts:
        raise TypeError(f"prompts must be a non-empty sequence of texts, got {type(prompts).__name__}")
    if not all(isinstance(text, str) for text in prompts):
        raise TypeError(f"prompts must hold texts (str), got {[type(t).__name__ for t in prompts]}")
    config = model.config
    kv_dim = config.num_kv_heads * config.d_head
    first, ratios, base, zeroed, lengths = [], [], [], [], []
    for text in prompts:
        ids = torch.tensor([tokenizer.encode(text)])  # (1, seq)
        if ids.shape[1] < 3:
            raise ValueError(f"prompts must be at least 3 tokens long, got {ids.shape[1]} for {text!r:.40}")
        values: list[torch.Tensor] = []

        def keep_values(module: nn.Module, args: tuple, out: torch.Tensor, values: list = values) -> None:
            values.append(out[0, :, -kv_dim:].reshape(-1, config.num_kv_heads, config.d_head))  # (seq, kv, d_head)

        projections: list[nn.Module] = [block.attn.qkv_proj for block in model.blocks]  # type: ignore[union-attr, misc]  # LlamaBlocks
        handles = [projection.register_forward_hook(keep_values) for projection in projections]
        try:
            logits, weights = model(ids, need_weights=True)
        finally:
            for handle in handles:
                handle.remove()
        first.append(torch.stack([bos_score(w) for w in weights]))  # (layers, heads)
        norms = torch.stack([v.norm(dim=-1) for v in values])  # (layers, seq, kv)
        ratios.append((norms[:, 0] / norms[:, 1:].mean(1)).mean(-1))  # (layers,)
        base.append(sentence_losses(logits, ids)[0])
        with zero_first_value(model):
            zeroed.append(sentence_losses(model(ids), ids)[0])
        lengths.append(ids.shape[1])
    return RealModelSinks(
        tuple(lengths), torch.stack(first), torch.stack(ratios), torch.stack(base), torch.stack(zeroed)
    )
