"""Notebook 09's experiments on the tiny model of notebook 07 (the shipped weights at its last
step, trained on sequences of 32 tokens): read longer sequences with RoPE as trained or
stretched, with a sliding window with or without an attention sink, and streamed token by token
through a :class:`~mhsa_helpers.kv_cache.SlidingWindowCache` that puts its keys at their
original positions or at their slots in the cache (StreamingLLM)."""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

from ...checks import expect_int
from ...kv_cache import SlidingWindowCache
from ...long_context import RopeScaling
from ...rope import RotaryEmbedding
from ...teaching.induction import AttentionOnlyTransformer, InductionBatch, load_checkpoints, make_induction_batch

__all__ = [
    "TRAINED_LENGTH",
    "PositionLosses",
    "long_batch",
    "position_losses",
    "split_losses_with_mask",
    "streaming_losses",
    "stretched_model",
]

#: The sequence length the model of notebook 07 was trained on.
TRAINED_LENGTH = 32


def stretched_model(seq_len: int, scaling: RopeScaling | None = None) -> AttentionOnlyTransformer:
    """Notebook 07's trained model, able to read ``seq_len`` tokens: every layer's RoPE is rebuilt
    for positions ``0 .. seq_len - 1``, stretched by ``scaling`` (``None``: RoPE as trained)."""
    expect_int("seq_len", seq_len, 2)
    shipped = load_checkpoints()
    model = shipped.model_at(shipped.steps[-1])
    model.max_seq_len = seq_len
    for layer in model.layers:
        layer.rope = RotaryEmbedding(layer.d_head, max_seq_len=seq_len, scaling=scaling)  # type: ignore[arg-type]  # an int
    return model.eval()


def long_batch(seq_len: int, batch_size: int = 256, *, max_repeat: int | None = None, seed: int = 5) -> InductionBatch:
    """A held-out batch of notebook 07's task at ``seq_len`` tokens: ``tokens (batch, seq_len)``.

    The repeated chunk is 6 to ``max_repeat`` tokens long (default: 15 tokens per 32, as in
    training), so its two copies can lie further apart than anything seen in training."""
    expect_int("seq_len", seq_len, 13)
    if max_repeat is None:
        max_repeat = min(15 * seq_len // TRAINED_LENGTH, (seq_len - 1) // 2)
    return make_induction_batch(
        batch_size,
        seq_len,
        32,
        min_repeat=6,
        max_repeat=max_repeat,
        generator=torch.Generator().manual_seed(seed),
    )


@torch.no_grad()
def _token_losses(model: AttentionOnlyTransformer, batch: InductionBatch, mask: torch.Tensor | None) -> torch.Tensor:
    logits, _ = model(batch.tokens, mask=mask)
    return F.cross_entropy(logits[:, :-1].transpose(1, 2), batch.tokens[:, 1:], reduction="none")


def split_losses_with_mask(
    model: AttentionOnlyTransformer, batch: InductionBatch, mask: torch.Tensor | None = None
) -> dict[str, float]:
    """Mean next-token loss over all tokens, the repeated ones (predictable by induction) and the
    others, with every layer restricted by ``mask (seq, seq)`` (True = may attend) on top of causality."""
    return _split(_token_losses(model, batch, mask), batch)


def _split(losses: torch.Tensor, batch: InductionBatch) -> dict[str, float]:
    repeated = batch.induction_mask[:, :-1]
    return {
        "all": float(losses.mean()),
        "repeated": float(losses[repeated].mean()),
        "other": float(losses[~repeated].mean()),
    }


@torch.no_grad()
def streaming_losses(
    model: AttentionOnlyTransformer,
    batch: InductionBatch,
    *,
    window: int,
    sinks: int = 0,
    rope_positions: str = "original",
) -> dict[str, float]:
    """:func:`split_losses_with_mask`'s three losses when the model reads ``batch.tokens (batch, seq)``
    one token at a time, every layer with its own ``SlidingWindowCache(window, sinks,
    rope_positions=...)``. With ``"original"`` this equals the full pass with
    ``sliding_window_mask(seq, window, sinks)``; with ``"cache"`` each key is rotated by its slot in
    the cache (StreamingLLM). The model must use RoPE (``positions="rope"``)."""
    SlidingWindowCache(window, sinks, rope_positions=rope_positions)  # its settings are checked first
    if model.positions != "rope":
        raise ValueError(f"model must use RoPE (positions='rope') to stream, got positions={model.positions!r}")
    caches = [SlidingWindowCache(window, sinks, rope_positions=rope_positions) for _ in model.layers]
    logits = []
    for t in range(batch.tokens.shape[1]):
        x = model.embed(batch.tokens[:, t : t + 1])  # (batch, 1, d_model): the new token
        for layer, cache in zip(model.layers, caches, strict=True):
            x = x + layer(x, cache=cache)
        logits.append(model.unembed(x))
    stacked = torch.cat(logits, dim=1)  # (batch, seq, vocab)
    losses = F.cross_entropy(stacked[:, :-1].transpose(1, 2), batch.tokens[:, 1:], reduction="none")
    return _split(losses, batch)


class PositionLosses(NamedTuple):
    """The loss on repeated tokens: ``centres (bins,)`` of the bins of positions, their mean
    ``losses (bins,)`` (NaN where a bin holds no repeated token), and the ``mean`` over all of them."""

    centres: torch.Tensor
    losses: torch.Tensor
    mean: float


def position_losses(model: AttentionOnlyTransformer, batch: InductionBatch, *, bin_size: int = 8) -> PositionLosses:
    """The loss on repeated tokens by position, averaged over the batch in bins of ``bin_size``
    positions, and over every repeated token (one forward pass for both)."""
    expect_int("bin_size", bin_size, 1)
    losses = _token_losses(model, batch, None)
    repeated = batch.induction_mask[:, :-1].float()
    seq = losses.shape[-1]
    starts = torch.arange(0, seq, bin_size)
    sums = torch.stack([(losses * repeated)[:, s : s + bin_size].sum() for s in starts.tolist()])
    counts = torch.stack([repeated[:, s : s + bin_size].sum() for s in starts.tolist()])
    centres = starts.float() + (torch.clamp(seq - starts, max=bin_size).float() - 1) / 2 + 1
    binned = torch.where(counts > 0, sums / counts.clamp(min=1), torch.nan)
    return PositionLosses(centres, binned, float(losses[repeated.bool()].mean()))
