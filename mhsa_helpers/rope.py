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

Stretching RoPE past the length it was trained on (:class:`RopeScaling`,
:func:`scaled_rope_frequencies`) is taught in notebook 09 (:mod:`~mhsa_helpers.long_context`);
it lives here because :class:`RotaryEmbedding` builds its table with it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from .checks import (
    checking,
    expect_broadcastable,
    expect_choice,
    expect_floating,
    expect_int,
    expect_integer_tensor,
    expect_number,
    expect_tensor,
)

__all__ = [
    "ROPE_CONVENTIONS",
    "ROPE_SCALING_METHODS",
    "RopeScaling",
    "RotaryEmbedding",
    "apply_rotary",
    "rope_angles",
    "rope_frequencies",
    "scaled_rope_frequencies",
]

#: The two ways of pairing a head's dimensions (see the module docstring).
ROPE_CONVENTIONS = ("interleaved", "half_split")
#: The ways :class:`RopeScaling` can stretch RoPE.
ROPE_SCALING_METHODS = ("linear", "ntk", "yarn")


def expect_even_d_head(d_head: object, what: str = "d_head", given: str = "") -> int:
    """RoPE rotates dimensions in pairs. ``what`` says where d_head comes from, ``given`` shows
    the caller's values (default ``d_head=<d_head>``)."""
    d_head = expect_int("d_head", d_head)
    if d_head % 2:
        raise ValueError(
            f"{what} must be even for RoPE (dimensions are rotated in pairs), got {given or f'd_head={d_head}'}"
        )
    return d_head


def expect_rope_base(base: object) -> float:
    return expect_number("base", base, 1.0, open_low=True, why=" (10000 in most models)")


def expect_positions_below(
    token_positions: torch.Tensor | None,
    max_seq_len: int,
    low: int = 0,
    high: int = -1,
    *,
    remedy: str = "build RotaryEmbedding with a larger max_seq_len",
    name: str = "token_positions",
) -> None:
    """Positions have a cached angle: those of ``token_positions`` (read from it), or ``low .. high``, counted on
    the host, when it is ``None`` or empty. A ``meta`` tensor has no values to check. ``remedy`` ends the message:
    what the caller can change (nothing, when empty); ``name`` is the argument the positions came as."""
    if token_positions is not None and token_positions.numel() and not token_positions.is_meta:
        low, high = int(token_positions.min()), int(token_positions.max())
    if low < 0 or high >= max_seq_len:
        raise ValueError(
            f"{name} must lie in [0, max_seq_len - 1] = [0, {max_seq_len - 1}], "
            f"got values from {low} to {high}" + (f"; {remedy}" if remedy else "")
        )


def rope_frequencies(
    d_head: int,
    base: float = 10000.0,
    *,
    device: str | torch.device | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """``theta_i = base^(-2i/d_head)`` for ``i = 0 .. d_head/2 - 1``, shape ``(d_head // 2,)``.

    Pair 0 turns by one radian per position; the last pair turns slowest. Computed in float64,
    returned in ``dtype``. The one place this formula is written.
    """
    expect_even_d_head(d_head)
    exponents = torch.arange(0, d_head, 2, device=device, dtype=torch.float64) / d_head
    return (expect_rope_base(base) ** -exponents).to(dtype)


def rope_angles(token_positions: torch.Tensor, d_head: int, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """``cos`` and ``sin`` of the angles ``m * theta_i``: integer positions ``(...)`` -> two float32
    tensors ``(..., d_head // 2)`` on the positions' device.

    Computed in float64, angles and ``theta_i`` both (``m * theta_i`` loses digits in float32 once
    ``m`` reaches the thousands), where the positions are, or on the CPU for a device without float64
    (Apple's mps).
    """
    expect_integer_tensor("token_positions", token_positions)
    if token_positions.numel() and not token_positions.is_meta and int(token_positions.min()) < 0:
        raise ValueError(f"token_positions must be >= 0, got values from {int(token_positions.min())}")
    device = torch.device("cpu") if token_positions.device.type == "mps" else token_positions.device
    theta = rope_frequencies(d_head, base, device=device, dtype=torch.float64)
    angles = token_positions.to(device, torch.float64)[..., None] * theta
    return angles.cos().float().to(token_positions.device), angles.sin().float().to(token_positions.device)


def apply_rotary(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, convention: str = "interleaved"
) -> torch.Tensor:
    """Rotate each pair of ``x`` by the angles whose cosines/sines are given.

    Shapes: ``x (..., seq, d_head)`` with ``d_head`` even; ``cos``/``sin`` broadcastable to
    ``(..., seq, d_head // 2)`` (one angle per pair). Returns a tensor shaped and typed like ``x``.
    """
    if checking():
        expect_floating("x", x, min_ndim=2, shape="(..., seq, d_head)")
        if x.shape[-1] % 2:
            raise ValueError(
                "x's last dimension d_head must be even for RoPE (dimensions are rotated in pairs), "
                f"got x of shape {tuple(x.shape)}"
            )
        pairs = (*x.shape[:-1], x.shape[-1] // 2)
        for name, value in (("cos", cos), ("sin", sin)):
            expect_broadcastable(name, expect_tensor(name, value), pairs, "(..., seq, d_head // 2)")
        expect_choice("convention", convention, ROPE_CONVENTIONS)
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    if convention == "interleaved":
        x_even, x_odd = x[..., 0::2], x[..., 1::2]
        rotated = torch.stack((x_even * cos - x_odd * sin, x_even * sin + x_odd * cos), dim=-1)
        return rotated.flatten(-2)
    half = x.shape[-1] // 2
    x_first, x_second = x[..., :half], x[..., half:]
    return torch.cat((x_first * cos - x_second * sin, x_first * sin + x_second * cos), dim=-1)


@dataclass(frozen=True)
class RopeScaling:
    """How to stretch RoPE to ``factor`` times the ``original_max_seq_len`` it was trained on (notebook 09).

    ``method`` is ``"linear"`` (position interpolation), ``"ntk"`` (NTK-aware base scaling) or
    ``"yarn"``; ``beta_fast``/``beta_slow`` are YaRN's bounds, in turns per
    ``original_max_seq_len`` tokens, of the ramp between keeping and interpolating a pair.
    """

    method: str
    factor: float
    original_max_seq_len: int
    beta_fast: float = 32.0
    beta_slow: float = 1.0

    def __post_init__(self) -> None:
        expect_choice("method", self.method, ROPE_SCALING_METHODS)
        expect_number("factor", self.factor, 1.0, why=" (how many times longer the context is)")
        expect_int("original_max_seq_len", self.original_max_seq_len)
        slow = expect_number("beta_slow", self.beta_slow, 0.0, open_low=True)
        fast = expect_number("beta_fast", self.beta_fast, 0.0, open_low=True)
        if not fast > slow:
            raise ValueError(f"beta_fast must be > beta_slow, got beta_fast={fast:g}, beta_slow={slow:g}")


def scaled_rope_frequencies(
    d_head: int, base: float = 10000.0, scaling: RopeScaling | None = None
) -> tuple[torch.Tensor, float]:
    """The frequencies ``theta_i`` of RoPE stretched by ``scaling``, ``(d_head // 2,)`` float64, and the
    factor by which the scores are to be multiplied (1.0 except for YaRN: ``(0.1 ln s + 1)^2``).

    * ``None``: ``theta_i = base^(-2i/d)``, RoPE as trained;
    * ``"linear"``: ``theta_i / s`` — every position divided by ``s``;
    * ``"ntk"``: the base becomes ``base * s^(d/(d-2))`` — the slowest pair's frequency is divided
      by exactly ``s``, the fastest is unchanged;
    * ``"yarn"``: with ``r_i = L / wavelength_i`` turns in the original length ``L``, the ramp
      ``gamma_i = clamp((r_i - beta_slow) / (beta_fast - beta_slow), 0, 1)`` and
      ``theta_i' = (1 - gamma_i) theta_i / s + gamma_i theta_i``.
    """
    if scaling is not None and not isinstance(scaling, RopeScaling):
        raise TypeError(f"scaling must be a RopeScaling or None, got {type(scaling).__name__}")
    if d_head == 2 and scaling is not None and scaling.method == "ntk":
        raise ValueError("d_head must be > 2 for method='ntk' (the base is scaled by factor^(d/(d-2))), got d_head=2")
    theta = rope_frequencies(d_head, base, dtype=torch.float64)
    if scaling is None:
        return theta, 1.0
    s = float(scaling.factor)
    if scaling.method == "linear":
        return theta / s, 1.0
    if scaling.method == "ntk":
        return rope_frequencies(d_head, float(base) * s ** (d_head / (d_head - 2)), dtype=torch.float64), 1.0
    turns = scaling.original_max_seq_len * theta / (2 * math.pi)
    ramp = ((turns - scaling.beta_slow) / (scaling.beta_fast - scaling.beta_slow)).clamp(0.0, 1.0)
    temperature = 0.1 * math.log(s) + 1.0 if s > 1 else 1.0
    return (1 - ramp) * theta / s + ramp * theta, temperature**2


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
        super().__init__()
        self.d_head = expect_even_d_head(d_head)
        self.max_seq_len = expect_int("max_seq_len", max_seq_len)
        self.base = expect_rope_base(base)
        self.convention = expect_choice("convention", convention, ROPE_CONVENTIONS)
        scaled_rope_frequencies(d_head, base, scaling)  # checks scaling against d_head
        self.scaling = scaling
        cos, sin = self.build_cache(device)
        # Not persistent: the cache is a pure function of the settings above.
        self.register_buffer("cos_cached", cos, persistent=False)
        self.register_buffer("sin_cached", sin, persistent=False)

    def build_cache(self, device: str | torch.device | None) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin for positions ``0 .. max_seq_len - 1``: two float32 ``(max_seq_len, d_head // 2)``."""
        theta, score_factor = scaled_rope_frequencies(self.d_head, self.base, self.scaling)
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

    def angles_at(self, start: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin for the positions ``start .. start + length - 1``, counted on the host (after a cache's
        ``length`` tokens, say): checked as integers, so that nothing is read back from the device. Two
        ``(length, d_head // 2)`` tensors."""
        expect_positions_below(None, self.max_seq_len, start, start + length - 1)
        return self.cos_cached[start : start + length], self.sin_cached[start : start + length]

    def angles_for(self, token_positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin for integer positions a caller gives: ``(...)`` -> two ``(..., d_head // 2)`` tensors."""
        expect_positions_below(expect_integer_tensor("token_positions", token_positions), self.max_seq_len)
        positions = token_positions.to(self.cos_cached.device)
        return self.cos_cached[positions], self.sin_cached[positions]

    def moved_back(self, x: torch.Tensor, shifts: torch.Tensor) -> torch.Tensor:
        """``x (..., seq, d_head)``, rotated at some positions, rotated back by ``shifts (seq,)`` (integers
        ``>= 0``, one per row): rotations compose, ``R(p) = R(-s) R(p + s)``, so a key held at position ``p + s``
        is then held at ``p`` (a cache that moves its keys to lower slots,
        :class:`~mhsa_helpers.kv_cache.SlidingWindowCache`). A pure rotation: a scaling's magnitude (YaRN) is not
        applied again."""
        expect_positions_below(expect_integer_tensor("shifts", shifts), self.max_seq_len, remedy="", name="shifts")
        # Row 0 of the table holds cos 0 = 1 times the magnitude: dividing by it leaves the rotation alone.
        magnitude = self.cos_cached[0]
        index = shifts.to(self.cos_cached.device)
        cos, sin = self.cos_cached[index] / magnitude, self.sin_cached[index] / magnitude
        return apply_rotary(x, cos.to(x.device), -sin.to(x.device), self.convention)

    def forward(self, x: torch.Tensor, token_positions: torch.Tensor | None = None) -> torch.Tensor:
        """Rotate ``x (..., seq, d_head)`` by its positions; returns the same shape."""
        expect_floating("x", x, min_ndim=2, shape="(..., seq, d_head)")
        if x.shape[-1] != self.d_head:
            raise ValueError(f"x must have last dimension d_head={self.d_head}, got shape {tuple(x.shape)}")
        if token_positions is None:
            token_positions = torch.arange(x.shape[-2], device=x.device)
        elif expect_tensor("token_positions", token_positions).ndim > 1 and token_positions.ndim != x.ndim - 1:
            raise ValueError(
                f"token_positions must be (seq,) or have x.ndim - 1 = {x.ndim - 1} dimensions, one per "
                f"dimension of x.shape[:-1] = {tuple(x.shape[:-1])} (for x (batch, heads, seq, d_head) pass "
                f"positions[:, None, :], shaped (batch, 1, seq)), got shape {tuple(token_positions.shape)}"
            )
        # Strict: positions that broadcast x up to a bigger shape are a mistake, not a feature.
        expect_broadcastable("token_positions", token_positions, x.shape[:-1], "x.shape[:-1]")
        cos, sin = self.angles_for(token_positions)
        return apply_rotary(x, cos, sin, self.convention)
