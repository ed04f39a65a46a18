"""Notebook 11's measuring tools on the real model: the model loaded once per process, a repeated
random sequence for the copying test, the loss on its second copy, the heads' scores (notebook
07's definitions) for every layer and head, and zeroing chosen heads (ablation).

Ablation here needs no change to the model: a forward *pre*-hook on a layer's output projection
``attn.out_proj`` (``W_O``) sees its input, the heads' outputs side by side
``(batch, seq, num_heads * d_head)`` (notebook 04's merge), and returns a copy with the chosen
heads' ``d_head`` columns set to zero. :func:`ablate_heads` is a context manager that always
removes its hooks, also when the code inside raises.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
import torch.nn.functional as F

from ...checks import expect_int
from ...real_model import CausalLM, ChatTokenizer, load_smollm2
from ...teaching.induction.scores import bos_score, induction_score, previous_token_score
from ...teaching.induction.task import InductionBatch, repeat_chunk

__all__ = [
    "FIRST_ORDINARY_TOKEN",
    "ablate_heads",
    "copy_loss",
    "copy_losses",
    "copying_test",
    "expect_heads",
    "first_copy_mask",
    "head_score_maps",
    "load_model",
    "random_repeated_batch",
    "sentence_loss",
    "top_heads",
]

#: Random tokens are drawn from ids >= this: the first ids of SmolLM2's vocabulary are special
#: tokens (<|endoftext|>, <|im_start|>, ...) and single bytes, which ordinary text rarely shows alone.
FIRST_ORDINARY_TOKEN = 1000


@functools.cache
def load_model() -> tuple[CausalLM, ChatTokenizer]:
    """:func:`~mhsa_helpers.real_model.load_smollm2`, once per process (the notebook, its explorer,
    its checkers and the tests share one copy: 540 MB of float32 weights)."""
    return load_smollm2()


def expect_heads(model: CausalLM, heads: object) -> list[tuple[int, int]]:
    """``heads`` as a list of ``(layer, head)`` pairs of ``model``; a ValueError/TypeError names a bad one."""
    if isinstance(heads, (str, bytes)) or not isinstance(heads, Sequence):
        raise TypeError(f"heads must be a sequence of (layer, head) pairs, got {type(heads).__name__}")
    config = model.config
    pairs = []
    for pair in heads:
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise TypeError(f"heads must hold (layer, head) pairs, got {pair!r}")
        layer = expect_int("layer", pair[0], 0, config.num_layers - 1, f" (the model has {config.num_layers} layers)")
        head = expect_int("head", pair[1], 0, config.num_heads - 1, f" (each layer has {config.num_heads} heads)")
        pairs.append((layer, head))
    return pairs


@contextmanager
def ablate_heads(model: CausalLM, heads: Sequence[tuple[int, int]]) -> Iterator[None]:
    """Inside the ``with`` block, every ``(layer, head)`` in ``heads`` outputs zeros: its ``d_head``
    columns of the input of that layer's ``W_O`` are set to zero, every other column is untouched.
    The hooks are removed on leaving the block, whatever happens inside it."""
    pairs = expect_heads(model, heads)
    d_head = model.config.d_head
    by_layer: dict[int, list[int]] = {}
    for layer, head in pairs:
        by_layer.setdefault(layer, []).append(head)
    handles = []

    def zero_heads(chosen: list[int]):
        def hook(module: torch.nn.Module, args: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
            merged = args[0].clone()  # (batch, seq, num_heads * d_head)
            for head in chosen:
                merged[..., head * d_head : (head + 1) * d_head] = 0
            return (merged, *args[1:])

        return hook

    try:
        for layer, chosen in by_layer.items():
            out_proj: torch.nn.Module = model.blocks[layer].attn.out_proj  # type: ignore[union-attr, assignment]  # a LlamaBlock's
            handles.append(out_proj.register_forward_pre_hook(zero_heads(chosen)))
        yield
    finally:
        for handle in handles:
            handle.remove()


def random_repeated_batch(
    batch: int, repeat_len: int, *, vocab_size: int, generator: torch.Generator | None = None
) -> InductionBatch:
    """``batch`` sequences of ``1 + 2 * repeat_len`` tokens: one random token, then ``repeat_len``
    random tokens, then the same ``repeat_len`` again (notebook 07's task with ``first_start = 1``).
    Tokens are drawn uniformly from ``[FIRST_ORDINARY_TOKEN, vocab_size)``. ``tokens (batch, seq)``."""
    expect_int("batch", batch, 1)
    expect_int("repeat_len", repeat_len, 2)
    expect_int("vocab_size", vocab_size, FIRST_ORDINARY_TOKEN + 2)
    noise = torch.randint(FIRST_ORDINARY_TOKEN, vocab_size, (batch, 1 + 2 * repeat_len), generator=generator)
    first_start = torch.ones(batch, dtype=torch.long)
    lengths = torch.full((batch,), repeat_len)
    tokens, mask = repeat_chunk(noise, first_start, lengths)
    return InductionBatch(tokens, mask, first_start, lengths)


def copying_test(vocab_size: int) -> InductionBatch:
    """Notebook 11's copying test: 2 sequences of one random token, 40 random tokens and the same 40
    again (``tokens (2, 81)``), always the same ones."""
    return random_repeated_batch(2, 40, vocab_size=vocab_size, generator=torch.Generator().manual_seed(11))


def first_copy_mask(data: InductionBatch) -> torch.Tensor:
    """``(batch, seq)`` bool: ``True`` at position ``t`` when token ``t + 1`` is in the first copy
    (``t = first_start .. first_start + repeat_len - 2``): random tokens, which no model can predict."""
    positions = torch.arange(data.tokens.shape[1])
    start, length = data.first_start[:, None], data.repeat_len[:, None]
    return (positions >= start) & (positions < start + length - 1)


def copy_losses(logits: torch.Tensor, data: InductionBatch) -> tuple[float, float]:
    """``logits (batch, seq, vocab)`` of ``data.tokens`` -> the mean cross-entropy (nats) of the first
    copy's tokens (random: unpredictable) and of the second copy's tokens that copying predicts
    (``data.induction_mask``)."""
    if logits.ndim != 3 or tuple(logits.shape[:2]) != tuple(data.tokens.shape):
        raise ValueError(
            f"logits must be (batch, seq, vocab) for tokens {tuple(data.tokens.shape)}, got shape {tuple(logits.shape)}"
        )
    losses = F.cross_entropy(logits[:, :-1].transpose(1, 2), data.tokens[:, 1:], reduction="none")
    first = float(losses[first_copy_mask(data)[:, :-1]].mean())
    return first, float(losses[data.induction_mask[:, :-1]].mean())


@torch.no_grad()
def copy_loss(
    model: CausalLM, data: InductionBatch, heads: Sequence[tuple[int, int]] = (), *, copy: str = "second"
) -> float:
    """Mean cross-entropy (nats) of the tokens of the ``copy="second"`` copy that copying predicts
    (``data.induction_mask``), or of the ``"first"`` copy's, with the ``heads`` zeroed."""
    if copy not in ("first", "second"):
        raise ValueError(f"copy must be 'first' or 'second', got {copy!r}")
    with ablate_heads(model, heads):
        logits = model(data.tokens)
    assert isinstance(logits, torch.Tensor)
    first, second = copy_losses(logits, data)
    return second if copy == "second" else first


@torch.no_grad()
def sentence_loss(model: CausalLM, ids: torch.Tensor) -> float:
    """Mean cross-entropy (nats) of predicting each token of ``ids (batch, seq)`` from the ones before it."""
    logits = model(ids)
    assert isinstance(logits, torch.Tensor)
    return float(F.cross_entropy(logits[:, :-1].transpose(1, 2), ids[:, 1:]))


def head_score_maps(weights: Sequence[torch.Tensor], data: InductionBatch) -> dict[str, torch.Tensor]:
    """One ``(batch, heads, seq, seq)`` attention tensor per layer -> ``{"first_token", "previous_token",
    "induction"}``, each ``(layers, heads)``: notebook 07's :func:`bos_score` (the weight on position 0,
    whatever token is there), :func:`previous_token_score` and :func:`induction_score`."""
    return {
        "first_token": torch.stack([bos_score(w) for w in weights]),
        "previous_token": torch.stack([previous_token_score(w) for w in weights]),
        "induction": torch.stack([induction_score(w, data) for w in weights]),
    }


def top_heads(scores: torch.Tensor, k: int) -> list[tuple[int, int]]:
    """The ``k`` ``(layer, head)`` pairs with the highest values of ``scores (layers, heads)``, best first."""
    expect_int("k", k, 1, scores.numel())
    heads = scores.shape[1]
    return [(int(i) // heads, int(i) % heads) for i in scores.reshape(-1).topk(k).indices]
