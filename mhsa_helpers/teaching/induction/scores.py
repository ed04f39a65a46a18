"""Reading a head's job off its attention weights, and testing it by ablation: the scores that notebook 07
defines (part of the induction base, :mod:`mhsa_helpers.teaching.induction`), which notebook 09 reads off the
stretched model's heads and notebook 11 off a real model's.

Every score takes attention weights ``(batch, heads, seq, seq)`` (rows: queries, columns: keys,
causal, rows summing to 1) and returns one number per head, ``(heads,)``, averaged over the
batch and over the query positions where the pattern is defined:

* previous-token score: the weight from position ``t`` on ``t - 1`` (queries ``t >= 1``);
* induction score: the weight from a token of the second copy on the token *after* its
  earlier occurrence, ``t - repeat_len + 1`` (queries in the second copy only);
* BOS score: the weight parked on position 0 (queries ``t >= 1``; query 0 can only see BOS);
* entropy: ``-Σ p log p`` of each row in nats (queries ``t >= 1``); 0 for a head that looks
  at one token, ``log(t + 1)`` for one that spreads evenly over the ``t + 1`` it can see.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .task import InductionBatch

__all__ = [
    "SCORE_NAMES",
    "ablation_losses",
    "attention_entropy",
    "bos_score",
    "find_induction_circuit",
    "head_scores",
    "in_context_loss",
    "induction_score",
    "induction_targets",
    "previous_token_score",
]

SCORE_NAMES = ("previous_token", "induction", "bos", "entropy")


def _check_weights(weights: object) -> torch.Tensor:
    if not isinstance(weights, torch.Tensor) or not weights.is_floating_point():
        given = f"dtype {weights.dtype}" if isinstance(weights, torch.Tensor) else type(weights).__name__
        raise TypeError(f"weights must be a floating-point tensor (batch, heads, seq, seq), got {given}")
    if weights.ndim != 4 or weights.shape[-1] != weights.shape[-2] or weights.shape[-1] < 2:
        raise ValueError(
            f"weights must have shape (batch, heads, seq, seq) with seq >= 2, got shape {tuple(weights.shape)}"
        )
    return weights


def previous_token_score(weights: torch.Tensor) -> torch.Tensor:
    """``weights (batch, heads, seq, seq)`` -> ``(heads,)``: mean of ``weights[..., t, t - 1]`` over ``t >= 1``."""
    _check_weights(weights)
    return weights.diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=(0, 2))


def bos_score(weights: torch.Tensor) -> torch.Tensor:
    """``weights (batch, heads, seq, seq)`` -> ``(heads,)``: mean of ``weights[..., t, 0]`` over ``t >= 1``."""
    _check_weights(weights)
    return weights[..., 1:, 0].mean(dim=(0, 2))


def attention_entropy(weights: torch.Tensor) -> torch.Tensor:
    """``weights (batch, heads, seq, seq)`` -> ``(heads,)``: mean row entropy in nats over queries ``t >= 1``."""
    _check_weights(weights)
    rows = weights[..., 1:, :]
    # xlogy gives 0 * log 0 = 0 for the masked (future) keys.
    return -torch.special.xlogy(rows, rows).sum(-1).mean(dim=(0, 2))


def induction_targets(batch: InductionBatch) -> torch.Tensor:
    """``(batch, seq, seq)`` bool: ``True`` at ``(t, t - repeat_len + 1)`` for every ``t`` in the second copy.

    That key is the token after the earlier occurrence of token ``t`` — the one to copy.
    """
    seq = batch.tokens.shape[1]
    positions = torch.arange(seq, device=batch.tokens.device)
    start, length = batch.second_start[:, None], batch.repeat_len[:, None]
    in_second = (positions >= start) & (positions < start + length)  # (batch, seq)
    key = positions - length + 1  # (batch, seq)
    targets = key[:, :, None] == positions[None, None, :]
    return targets & in_second[:, :, None]


def induction_score(weights: torch.Tensor, batch: InductionBatch) -> torch.Tensor:
    """``weights (batch, heads, seq, seq)`` -> ``(heads,)``: mean weight on the induction target
    (:func:`induction_targets`) over the queries of the second copy."""
    _check_weights(weights)
    targets = induction_targets(batch)
    if tuple(targets.shape) != (weights.shape[0], *weights.shape[2:]):
        raise ValueError(
            f"weights (batch, heads, seq, seq) must match the batch's tokens {tuple(batch.tokens.shape)}, "
            f"got shape {tuple(weights.shape)}"
        )
    on_target = (weights * targets[:, None].to(weights.dtype)).sum(dim=(-2, -1))  # (batch, heads)
    return (on_target.sum(0) / targets.sum()).to(weights.dtype)


def head_scores(weights: list[torch.Tensor], batch: InductionBatch) -> dict[str, torch.Tensor]:
    """One attention tensor ``(batch, heads, seq, seq)`` per layer -> ``{name: (layers, heads)}``
    for every name in :data:`SCORE_NAMES`."""
    if not isinstance(weights, (list, tuple)) or not weights:
        raise TypeError(
            f"weights must be a list of (batch, heads, seq, seq) tensors, one per layer, got {weights!r:.80}"
        )
    return {
        "previous_token": torch.stack([previous_token_score(w) for w in weights]),
        "induction": torch.stack([induction_score(w, batch) for w in weights]),
        "bos": torch.stack([bos_score(w) for w in weights]),
        "entropy": torch.stack([attention_entropy(w) for w in weights]),
    }


def find_induction_circuit(scores: dict[str, torch.Tensor]) -> tuple[tuple[int, int], tuple[int, int]]:
    """``scores`` from :func:`head_scores` -> ``((0, h0), (1, h1))``: the layer-0 head with the highest
    previous-token score and the layer-1 head with the highest induction score."""
    prev, ind = scores["previous_token"], scores["induction"]
    if prev.ndim != 2 or prev.shape[0] < 2:
        raise ValueError(f"scores must be (layers, heads) with at least 2 layers, got shape {tuple(prev.shape)}")
    return (0, int(prev[0].argmax())), (1, int(ind[1].argmax()))


@torch.no_grad()
def in_context_loss(model: nn.Module, batch: InductionBatch, ablate: tuple[tuple[int, int], ...] = ()) -> float:
    """Mean cross-entropy on the tokens predictable by induction (``batch.induction_mask``), with the
    ``(layer, head)`` pairs in ``ablate`` zeroed. ``batch.tokens`` is ``(batch, seq)``."""
    device = next(model.parameters()).device
    batch = batch.to(device)
    logits, _ = model(batch.tokens, ablate=ablate)
    losses = F.cross_entropy(logits[:, :-1].transpose(1, 2), batch.tokens[:, 1:], reduction="none")
    return float(losses[batch.induction_mask[:, :-1]].mean())


@torch.no_grad()
def ablation_losses(model: nn.Module, batch: InductionBatch) -> torch.Tensor:
    """``(layers, heads)``: the in-context loss with each head zeroed in turn (compare with
    ``in_context_loss(model, batch)``, nothing zeroed)."""
    layers, heads = len(model.layers), int(model.num_heads)  # type: ignore[arg-type]  # an AttentionOnlyTransformer
    return torch.tensor(
        [[in_context_loss(model, batch, ablate=((layer, head),)) for head in range(heads)] for layer in range(layers)]
    )
