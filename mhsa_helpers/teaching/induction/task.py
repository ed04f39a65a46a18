"""The task of notebook 07: random tokens in which a random chunk is repeated. Part of the induction
base (:mod:`mhsa_helpers.teaching.induction`): notebook 09 reads longer sequences of it, notebook 11 builds its
copying test from :func:`repeat_chunk`.

One sequence (``seq_len`` tokens)::

    BOS, noise ..., A, A, noise ...

``A`` is a chunk of ``repeat_len`` random tokens. The second copy of ``A`` can only be predicted
by looking back: find the earlier occurrence of the current token and copy the token that came
after it — the *induction* mechanism. Because the chunk's length and its start change from one
sequence to the next, no fixed position or fixed distance gives the answer away.

The ``fixed_offset=True`` variant puts the chunk at the same place, with the same length, in
every sequence: there the answer is always ``repeat_len - 1`` tokens back, and a model can
learn that distance instead of induction (the shortcut trap).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...checks import expect_int

__all__ = ["BOS", "InductionBatch", "expect_task_settings", "make_induction_batch", "repeat_chunk"]

#: Token 0 starts every sequence and never appears elsewhere.
BOS = 0


@dataclass(frozen=True)
class InductionBatch:
    """A batch of repeated-chunk sequences.

    Attributes:
        tokens: ``(batch, seq)`` int64 token ids; ``tokens[:, 0] == BOS``.
        induction_mask: ``(batch, seq)`` bool; ``True`` at position ``t`` when the *next* token
            ``tokens[:, t + 1]`` is predictable by induction (``t`` is in the second copy of the
            chunk, but not its last token).
        first_start: ``(batch,)`` position of the first copy's first token.
        repeat_len: ``(batch,)`` length of the chunk; the second copy starts at
            ``first_start + repeat_len``.
    """

    tokens: torch.Tensor
    induction_mask: torch.Tensor
    first_start: torch.Tensor
    repeat_len: torch.Tensor

    @property
    def second_start(self) -> torch.Tensor:
        """``(batch,)`` position of the second copy's first token."""
        return self.first_start + self.repeat_len

    def to(self, device: torch.device | str) -> InductionBatch:
        return InductionBatch(*(getattr(self, name).to(device) for name in self.__dataclass_fields__))


def expect_task_settings(vocab_size: int, seq_len: int, min_repeat: int, max_repeat: int) -> None:
    """Raise ``ValueError``/``TypeError`` naming the first impossible setting of the task."""
    # BOS plus at least two ordinary tokens: with one, every next token would be predictable.
    expect_int("vocab_size", vocab_size, 3)
    expect_int("min_repeat", min_repeat, 2)
    expect_int("max_repeat", max_repeat, 2)
    if max_repeat < min_repeat:
        raise ValueError(f"max_repeat must be >= min_repeat, got min_repeat={min_repeat}, max_repeat={max_repeat}")
    expect_int("seq_len", seq_len, 1)
    if seq_len < 1 + 2 * max_repeat:
        raise ValueError(
            f"seq_len must be >= 1 + 2 * max_repeat = {1 + 2 * max_repeat} (BOS and two copies of the chunk), "
            f"got seq_len={seq_len}, max_repeat={max_repeat}"
        )


def make_induction_batch(
    batch_size: int,
    seq_len: int,
    vocab_size: int,
    *,
    min_repeat: int = 4,
    max_repeat: int = 12,
    fixed_offset: bool = False,
    generator: torch.Generator | None = None,
) -> InductionBatch:
    """Sample ``batch_size`` sequences ``BOS, noise..., A, A, noise...`` on the CPU.

    Args:
        batch_size: number of sequences.
        seq_len: tokens per sequence, at least ``1 + 2 * max_repeat``.
        vocab_size: token ids are ``0 .. vocab_size - 1``; ``0`` is BOS, the others are drawn
            uniformly (so at least 3: BOS and two ordinary tokens).
        min_repeat, max_repeat: the chunk length is uniform in ``[min_repeat, max_repeat]`` (at least 2,
            so that the second copy has a token predictable by induction).
        fixed_offset: every sequence gets a chunk of length ``max_repeat`` starting right after BOS
            (position 1) — the shortcut-trap data.
        generator: a seeded ``torch.Generator`` (CPU) for a reproducible batch.

    Returns an :class:`InductionBatch` with ``tokens (batch, seq)`` and ``induction_mask (batch, seq)``.
    """
    expect_int("batch_size", batch_size, 1)
    expect_task_settings(vocab_size, seq_len, min_repeat, max_repeat)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    tokens = torch.randint(1, vocab_size, (batch_size, seq_len), generator=generator)
    tokens[:, 0] = BOS
    if fixed_offset:
        repeat_len = torch.full((batch_size,), max_repeat)
        first_start = torch.ones(batch_size, dtype=torch.long)
    else:
        repeat_len = torch.randint(min_repeat, max_repeat + 1, (batch_size,), generator=generator)
        # First copy anywhere in [1, seq_len - 2 * repeat_len]: both copies fit after BOS.
        room = seq_len - 2 * repeat_len  # number of possible starts
        first_start = 1 + (torch.rand(batch_size, generator=generator) * room).long().clamp(max=room - 1)
    tokens, induction_mask = repeat_chunk(tokens, first_start, repeat_len)
    return InductionBatch(tokens, induction_mask, first_start, repeat_len)


def repeat_chunk(
    noise: torch.Tensor, first_start: torch.Tensor, repeat_len: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Copy each sequence's chunk right after itself, and mark the predictable next tokens.

    Args:
        noise: ``(batch, seq)`` int64 tokens (BOS first, then random ones).
        first_start: ``(batch,)`` where the chunk starts.
        repeat_len: ``(batch,)`` its length; ``first_start + 2 * repeat_len <= seq``.

    Returns ``(tokens (batch, seq), induction_mask (batch, seq) bool)``: ``tokens`` is ``noise``
    with positions ``first_start + repeat_len .. first_start + 2 * repeat_len - 1`` overwritten by
    the chunk, and ``induction_mask[b, t]`` is ``True`` when both ``t`` and ``t + 1`` are in the second
    copy (then ``tokens[b, t + 1]`` is predictable by looking back).
    """
    if not isinstance(noise, torch.Tensor) or noise.ndim != 2 or noise.is_floating_point():
        given = f"shape {tuple(noise.shape)}, dtype {noise.dtype}" if isinstance(noise, torch.Tensor) else noise
        raise TypeError(f"noise must be an integer tensor of shape (batch, seq), got {given!r}")
    batch_size, seq_len = noise.shape
    for name, value in (("first_start", first_start), ("repeat_len", repeat_len)):
        if not isinstance(value, torch.Tensor) or tuple(value.shape) != (batch_size,):
            given = f"shape {tuple(value.shape)}" if isinstance(value, torch.Tensor) else type(value).__name__
            raise ValueError(f"{name} must be a tensor of shape (batch,) = ({batch_size},), got {given}")
    if bool((first_start < 1).any() | (repeat_len < 1).any() | (first_start + 2 * repeat_len > seq_len).any()):
        raise ValueError(
            f"first_start and repeat_len must place both copies after BOS, inside seq={seq_len}: "
            f"1 <= first_start and first_start + 2 * repeat_len <= seq, got first_start={first_start.tolist()}, "
            f"repeat_len={repeat_len.tolist()}"
        )
    positions = torch.arange(seq_len)
    offset = positions - first_start[:, None]  # (batch, seq): index into the chunk for the first copy
    in_second = (offset >= repeat_len[:, None]) & (offset < 2 * repeat_len[:, None])
    # Copy: every position of the second copy takes the token repeat_len places back.
    source = (positions - repeat_len[:, None]).clamp(min=0)
    copied = torch.gather(noise, 1, source)
    tokens = torch.where(in_second, copied, noise)
    # The next token is predictable when it, too, is in the second copy.
    induction_mask = torch.zeros_like(in_second)
    induction_mask[:, :-1] = in_second[:, 1:] & in_second[:, :-1]
    return tokens, induction_mask
