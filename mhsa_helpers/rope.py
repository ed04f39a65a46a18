"""Rotary position embeddings (RoPE, Su et al. 2021, "RoFormer").

Each pair of dimensions ``i = 0 .. d_head/2 - 1`` of a query or key at position
``m`` is rotated by the angle ``m * theta_i`` with ``theta_i = base^(-2i/d_head)``.
Because rotations compose, ``rope(q, m) . rope(k, n)`` depends on ``m - n`` only.
RoPE is applied to queries and keys, never to values.

Two pairing conventions exist in the wild and are **not** interchangeable:

* ``"interleaved"`` — pairs ``(x[2i], x[2i+1])``: the RoFormer paper, Meta's
  original LLaMA code, and the ``RoPE`` of seed 003 (CS336);
* ``"half_split"`` — pairs ``(x[i], x[i + d/2])``: Hugging Face's ``rotate_half``.

They agree once the q/k projection rows of each head are permuted
(:func:`permute_rope_weight`); mixing them without that permutation gives the
same result at position 0 and wrong results after it.
"""

from __future__ import annotations

from typing import Optional, Union

import torch
from torch import nn

from .checks import (
    check_broadcasts_to,
    check_choice,
    check_divisible,
    check_floating,
    check_ndim,
    check_positive_int,
    check_tensor,
)

__all__ = [
    "ROPE_CONVENTIONS",
    "rope_frequencies",
    "RotaryEmbedding",
    "apply_rotary",
    "rope_permutation",
    "permute_rope_weight",
]

ROPE_CONVENTIONS = ("interleaved", "half_split")


def _check_d_head(d_head: int) -> int:
    check_positive_int("d_head", d_head)
    if d_head % 2:
        raise ValueError(
            f"d_head must be even for RoPE (dimensions are rotated in pairs), got d_head={d_head}"
        )
    return d_head


def _check_base(base: float) -> float:
    if isinstance(base, bool) or not isinstance(base, (int, float)):
        raise TypeError(f"base must be a number > 1 (10000 in most models), got {type(base).__name__} {base!r}")
    if not base > 1:
        raise ValueError(f"base must be a number > 1 (10000 in most models), got {base!r}")
    return float(base)


def rope_frequencies(
    d_head: int, base: float = 10000.0, *, device: Optional[Union[str, torch.device]] = None
) -> torch.Tensor:
    """``theta_i = base^(-2i/d_head)`` for ``i = 0 .. d_head/2 - 1``, shape ``(d_head // 2,)``, float32.

    Pair 0 turns by one radian per position; the last pair turns slowest.
    """
    _check_d_head(d_head)
    return _frequencies_float64(d_head, _check_base(base), device).float()


def _frequencies_float64(d_head: int, base: float, device: Optional[Union[str, torch.device]]) -> torch.Tensor:
    exponents = torch.arange(0, d_head, 2, device=device, dtype=torch.float64) / d_head
    return base ** -exponents


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, convention: str = "interleaved") -> torch.Tensor:
    """Rotate each pair of ``x`` by the angles whose cosines/sines are given.

    Shapes: ``x (..., seq, d_head)`` with ``d_head`` even; ``cos``/``sin`` broadcastable to
    ``(..., seq, d_head // 2)`` (one angle per pair). Returns a tensor shaped and typed like ``x``.
    """
    check_floating("x", x)
    check_ndim("x", x, 2, "(..., seq, d_head)")
    if x.shape[-1] % 2:
        raise ValueError(
            f"x must have an even last dimension d_head (dimensions are rotated in pairs), "
            f"got shape {tuple(x.shape)}"
        )
    pairs_shape = (*x.shape[:-1], x.shape[-1] // 2)
    for name, value in (("cos", cos), ("sin", sin)):
        check_tensor(name, value)
        check_broadcasts_to(name, value, pairs_shape, "(..., seq, d_head // 2)")
    check_choice("convention", convention, ROPE_CONVENTIONS)
    return _rotate(x, cos, sin, convention)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, convention: str) -> torch.Tensor:
    cos = cos.to(x.dtype)
    sin = sin.to(x.dtype)
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
        device: Optional[Union[str, torch.device]] = None,
    ) -> None:
        super().__init__()
        self.d_head = _check_d_head(d_head)
        self.max_seq_len = check_positive_int("max_seq_len", max_seq_len)
        self.base = _check_base(base)
        self.convention = check_choice("convention", convention, ROPE_CONVENTIONS)
        cos, sin = self._build_cache(device)
        # Not persistent: the cache is a pure function of the settings above.
        self.register_buffer("cos_cached", cos, persistent=False)
        self.register_buffer("sin_cached", sin, persistent=False)

    def _build_cache(self, device: Optional[Union[str, torch.device]]) -> "tuple[torch.Tensor, torch.Tensor]":
        # float64 angles: m * theta_i loses digits in float32 once m reaches the thousands.
        # Built on the CPU because some accelerators (Apple's mps) have no float64.
        positions = torch.arange(self.max_seq_len, dtype=torch.float64)
        # theta_i in float64 too: a float32 theta_i is off by ~1e-8 * theta_i, an error m times larger in m * theta_i.
        inv_freq = _frequencies_float64(self.d_head, self.base, "cpu")
        angles = torch.outer(positions, inv_freq)
        return angles.cos().float().to(device), angles.sin().float().to(device)

    def _apply(self, fn, recurse: bool = True):  # type: ignore[override]
        super()._apply(fn, recurse)
        # model.half() would round the cache to float16; rebuild it in float32.
        if self.cos_cached.dtype != torch.float32:
            cos, sin = self._build_cache(self.cos_cached.device)
            self.cos_cached, self.sin_cached = cos, sin
        return self

    def extra_repr(self) -> str:
        return (
            f"d_head={self.d_head}, max_seq_len={self.max_seq_len}, base={self.base:g}, "
            f"convention={self.convention!r}"
        )

    def angles_for(self, token_positions: torch.Tensor) -> "tuple[torch.Tensor, torch.Tensor]":
        """cos and sin for integer positions: ``(...)`` -> two ``(..., d_head // 2)`` tensors."""
        check_tensor("token_positions", token_positions)
        if token_positions.is_floating_point() or token_positions.dtype == torch.bool:
            raise TypeError(f"token_positions must be an integer tensor, got dtype {token_positions.dtype}")
        if token_positions.numel():
            low, high = int(token_positions.min()), int(token_positions.max())
            if low < 0 or high >= self.max_seq_len:
                raise ValueError(
                    f"token_positions must lie in [0, max_seq_len - 1] = [0, {self.max_seq_len - 1}], "
                    f"got values from {low} to {high}; build RotaryEmbedding with a larger max_seq_len"
                )
        positions = token_positions.to(self.cos_cached.device)
        return self.cos_cached[positions], self.sin_cached[positions]

    def forward(self, x: torch.Tensor, token_positions: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Rotate ``x (..., seq, d_head)`` by its positions; returns the same shape."""
        check_floating("x", x)
        check_ndim("x", x, 2, "(..., seq, d_head)")
        if x.shape[-1] != self.d_head:
            raise ValueError(
                f"x must have last dimension d_head={self.d_head}, got shape {tuple(x.shape)}"
            )
        if token_positions is None:
            token_positions = torch.arange(x.shape[-2], device=x.device)
        else:
            check_tensor("token_positions", token_positions)
            if token_positions.ndim > 1 and token_positions.ndim != x.ndim - 1:
                raise ValueError(
                    f"token_positions must be (seq,) or have x.ndim - 1 = {x.ndim - 1} dimensions, one per "
                    f"dimension of x.shape[:-1] = {tuple(x.shape[:-1])} (for x (batch, heads, seq, d_head) pass "
                    f"positions[:, None, :], shaped (batch, 1, seq)), got shape {tuple(token_positions.shape)}"
                )
            # Strict: positions that broadcast x up to a bigger shape are a mistake, not a feature.
            check_broadcasts_to("token_positions", token_positions, x.shape[:-1], "x.shape[:-1]")
        cos, sin = self.angles_for(token_positions)
        return _rotate(x, cos, sin, self.convention)


def rope_permutation(d_head: int, source: str, target: str) -> torch.Tensor:
    """Index ``perm`` with ``rope_target(x[..., perm]) == rope_source(x)[..., perm]``.

    Reordering a head's q/k features by ``perm`` turns a model trained with the
    ``source`` pairing into one that uses the ``target`` pairing with identical scores.
    Shape ``(d_head,)``, int64.
    """
    _check_d_head(d_head)
    check_choice("source", source, ROPE_CONVENTIONS)
    check_choice("target", target, ROPE_CONVENTIONS)
    if source == target:
        return torch.arange(d_head)
    interleaved_to_half = torch.cat((torch.arange(0, d_head, 2), torch.arange(1, d_head, 2)))
    if source == "interleaved":
        return interleaved_to_half
    return torch.argsort(interleaved_to_half)


def permute_rope_weight(weight: torch.Tensor, num_heads: int, source: str, target: str) -> torch.Tensor:
    """Reorder the output rows of a q or k projection from one RoPE pairing to the other.

    Shapes: ``weight (num_heads * d_head, d_in)`` in PyTorch's ``(d_out, d_in)`` layout,
    or a bias ``(num_heads * d_head,)``; same shape out. Apply it to ``W_Q`` and ``W_K``
    (never ``W_V``); attention scores and outputs are unchanged.
    """
    check_tensor("weight", weight)
    if weight.ndim not in (1, 2):
        raise ValueError(
            f"weight must be a (num_heads * d_head, d_in) matrix or a (num_heads * d_head,) bias, "
            f"got shape {tuple(weight.shape)}"
        )
    check_positive_int("num_heads", num_heads)
    d_head = check_divisible("weight.shape[0]", weight.shape[0], "num_heads", num_heads)
    perm = rope_permutation(d_head, source, target).to(weight.device)
    heads = weight.reshape(num_heads, d_head, *weight.shape[1:])
    return heads[:, perm].reshape(weight.shape)
