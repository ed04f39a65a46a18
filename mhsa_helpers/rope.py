"""Rotary position embeddings (RoPE, Su et al. 2021, "RoFormer").

Taught in notebook 05: the frequencies in section 3 ("Many pairs, each with its own
frequency"), the rotation in section 4 ("RoPE from scratch"), positions that do not start at 0
in section 7, and the two pairing conventions in section 9. The weight permutation that
converts between the conventions is in :mod:`~mhsa_helpers.weight_layouts`.

Each pair of dimensions ``i = 0 .. d_head/2 - 1`` of a query or key at position
``m`` is rotated by the angle ``m * theta_i`` with ``theta_i = base^(-2i/d_head)``.
Because rotations compose, ``rope(q, m) . rope(k, n)`` depends on ``m - n`` only.
RoPE is applied to queries and keys, never to values.

Two pairing conventions exist in the wild and are **not** interchangeable:

* ``"interleaved"`` — pairs ``(x[2i], x[2i+1])``: the RoFormer paper, Meta's
  original LLaMA code, and the ``RoPE`` of Stanford's CS336;
* ``"half_split"`` — pairs ``(x[i], x[i + d/2])``: Hugging Face's ``rotate_half``.

They agree once the q/k projection rows of each head are permuted
(:func:`~mhsa_helpers.weight_layouts.permute_rope_weight`); mixing them without that
permutation gives the same result at position 0 and wrong results after it.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from . import checks
from .checks import ROPE_CONVENTIONS
from .long_context import RopeScaling, scaled_rope_frequencies

__all__ = ["ROPE_CONVENTIONS", "RotaryEmbedding", "apply_rotary", "rope_angles", "rope_frequencies"]


@checks.checked_by(checks.rope_frequencies_args)
def rope_frequencies(
    d_head: int,
    base: float = 10000.0,
    *,
    device: str | torch.device | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """``theta_i = base^(-2i/d_head)`` for ``i = 0 .. d_head/2 - 1``, shape ``(d_head // 2,)``.

    Pair 0 turns by one radian per position; the last pair turns slowest. Computed in float64,
    returned in ``dtype``.
    """
    exponents = torch.arange(0, d_head, 2, device=device, dtype=torch.float64) / d_head
    return (float(base) ** -exponents).to(dtype)


@checks.checked_by(checks.rope_angles_args)
def rope_angles(token_positions: torch.Tensor, d_head: int, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """``cos`` and ``sin`` of the angles ``m * theta_i``: integer positions ``(...)`` -> two float32
    tensors ``(..., d_head // 2)`` on the positions' device.

    Computed in float64, angles and ``theta_i`` both (``m * theta_i`` loses digits in float32 once
    ``m`` reaches the thousands), on the CPU, because some accelerators (Apple's mps) have no float64.
    """
    theta = rope_frequencies.unchecked(d_head, base, dtype=torch.float64)
    angles = token_positions.cpu().to(torch.float64)[..., None] * theta
    return angles.cos().float().to(token_positions.device), angles.sin().float().to(token_positions.device)


@checks.checked_by(checks.apply_rotary_args)
def apply_rotary(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, convention: str = "interleaved"
) -> torch.Tensor:
    """Rotate each pair of ``x`` by the angles whose cosines/sines are given.

    Shapes: ``x (..., seq, d_head)`` with ``d_head`` even; ``cos``/``sin`` broadcastable to
    ``(..., seq, d_head // 2)`` (one angle per pair). Returns a tensor shaped and typed like ``x``.
    """
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    if convention == "interleaved":
        x_even, x_odd = x[..., 0::2], x[..., 1::2]
        rotated = torch.stack((x_even * cos - x_odd * sin, x_even * sin + x_odd * cos), dim=-1)
        return rotated.flatten(-2)
    half = x.shape[-1] // 2
    x_first, x_second = x[..., :half], x[..., half:]
    return torch.cat((x_first * cos - x_second * sin, x_first * sin + x_second * cos), dim=-1)


class RotaryEmbedding(nn.Module):
    """RoPE for heads of size ``d_head`` with a precomputed cos/sin cache.

    Args:
        d_head: size of each head (even).
        max_seq_len: positions ``0 .. max_seq_len - 1`` are cached; a larger position
            raises ``ValueError`` naming ``token_positions``.
        base: the ``base`` in ``theta_i = base^(-2i/d_head)`` (10000 in the paper).
        convention: ``"interleaved"`` (default, the paper's pairs) or ``"half_split"``
            (Hugging Face's ``rotate_half``).
        scaling: ``None`` (RoPE as trained) or a :class:`~mhsa_helpers.long_context.RopeScaling`
            that stretches the frequencies for a longer context (notebook 09); YaRN's score
            factor is applied by multiplying cos and sin by its square root, so that
            ``q . k`` is scaled by it.

    Call: ``rope(x, token_positions=None)`` with ``x (..., seq, d_head)`` and
    ``token_positions`` integers, either ``(seq,)`` (shared by all leading dimensions) or with
    one dimension per dimension of ``x.shape[:-1]``, broadcastable to it: ``(batch, 1, seq)``
    against ``(batch, heads, seq, d_head)``. A ``(batch, seq)`` tensor is refused there: it would
    line its batch axis up with the heads axis. ``None`` means ``0 .. seq-1``.
    """

    cos_cached: torch.Tensor
    sin_cached: torch.Tensor

    def __init__(
        self,
        d_head: int,
        max_seq_len: int = 2048,
        base: float = 10000.0,
        convention: str = "interleaved",
        *,
        scaling: RopeScaling | None = None,
        device: str | torch.device | None = None,
    ) -> None:
        checks.rotary_embedding_args(d_head, max_seq_len, base, convention, device=device)
        checks.scaled_rope_frequencies_args(d_head, base, scaling)
        super().__init__()
        self.d_head = d_head
        self.max_seq_len = max_seq_len
        self.base = float(base)
        self.convention = convention
        self.scaling = scaling
        cos, sin = self.build_cache(device)
        # Not persistent: the cache is a pure function of the settings above.
        self.register_buffer("cos_cached", cos, persistent=False)
        self.register_buffer("sin_cached", sin, persistent=False)

    def build_cache(self, device: str | torch.device | None) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin for positions ``0 .. max_seq_len - 1``: two float32 ``(max_seq_len, d_head // 2)``."""
        if self.scaling is None:
            cos, sin = rope_angles.unchecked(torch.arange(self.max_seq_len), self.d_head, self.base)
            return cos.to(device), sin.to(device)
        theta, score_factor = scaled_rope_frequencies.unchecked(self.d_head, self.base, self.scaling)
        angles = torch.arange(self.max_seq_len, dtype=torch.float64)[:, None] * theta
        # cos and sin both times sqrt(factor): q and k are each scaled by it, their dot product by the factor.
        magnitude = math.sqrt(score_factor)
        return (magnitude * angles.cos()).float().to(device), (magnitude * angles.sin()).float().to(device)

    def _apply(self, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True) -> RotaryEmbedding:
        super()._apply(fn, recurse)  # type: ignore[no-untyped-call]  # nn.Module._apply is unannotated in torch
        # model.half() would round the cache to float16; rebuild it in float32.
        if self.cos_cached.dtype != torch.float32:
            self.cos_cached, self.sin_cached = self.build_cache(self.cos_cached.device)
        return self

    def extra_repr(self) -> str:
        scaling = "" if self.scaling is None else f", scaling={self.scaling}"
        return (
            f"d_head={self.d_head}, max_seq_len={self.max_seq_len}, base={self.base:g}, "
            f"convention={self.convention!r}{scaling}"
        )

    def angles_for(self, token_positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin for integer positions: ``(...)`` -> two ``(..., d_head // 2)`` tensors."""
        checks.rotary_positions_args(self, token_positions)
        positions = token_positions.to(self.cos_cached.device)
        return self.cos_cached[positions], self.sin_cached[positions]

    def forward(self, x: torch.Tensor, token_positions: torch.Tensor | None = None) -> torch.Tensor:
        """Rotate ``x (..., seq, d_head)`` by its positions; returns the same shape."""
        checks.rotary_call_args(self, x, token_positions)
        if token_positions is None:
            token_positions = torch.arange(x.shape[-2], device=x.device)
        return self.rotate_unchecked(x, token_positions)

    def rotate_unchecked(self, x: torch.Tensor, token_positions: torch.Tensor) -> torch.Tensor:
        """:meth:`forward` without its argument checks, for a caller that has made them
        (``MultiHeadSelfAttention.forward``). Shapes as in :meth:`forward`."""
        positions = token_positions.to(self.cos_cached.device)
        cos, sin = self.cos_cached[positions], self.sin_cached[positions]
        return apply_rotary.unchecked(x, cos, sin, self.convention)
