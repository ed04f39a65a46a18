"""Long context: attention that looks back only ``window`` tokens, linear position biases
(ALiBi), and stretching RoPE past the length it was trained on.

Taught in notebook 09 ("Long context"):

* **Sliding-window attention** (:func:`~mhsa_helpers.masking.sliding_window_mask`, with the
  other masks): query ``i`` sees the keys
  ``i - window + 1 .. i`` — and, with ``sinks > 0``, the first ``sinks`` tokens as well, the
  *attention sinks* that streaming models keep (Xiao et al., 2023, "StreamingLLM"). Decoding with
  :class:`~mhsa_helpers.kv_cache.SlidingWindowCache` gives the same; with its
  ``rope_positions="cache"`` the kept keys are rotated by their slots in the cache instead, as
  StreamingLLM does, so that the sinks stay at distances seen in training.
* **ALiBi** (Press et al., 2022, "Train short, test long"): no position embedding at all; each
  head adds ``-slope_h * distance`` to its scores, with slopes a geometric sequence
  (:func:`alibi_slopes`, :func:`alibi_bias`).
* **Stretching RoPE** (:class:`RopeScaling`, :func:`scaled_rope_frequencies`): each pair ``i``
  turns by ``theta_i`` per token, one full turn every ``2 pi / theta_i`` tokens (its
  *wavelength*, :func:`rope_wavelengths`). A model trained on ``L`` tokens has seen slow pairs
  turn less than once; beyond ``L`` they reach angles it never saw. Position interpolation
  (Chen et al., 2023) divides every frequency by the factor ``s``; NTK-aware scaling multiplies
  the base by ``s^(d/(d-2))``, which stretches the slow pairs by ``s`` and leaves the fast ones
  almost alone; YaRN (Peng et al., 2023) interpolates only the pairs that turn fewer than
  ``beta_slow`` times in ``L`` tokens, keeps those that turn more than ``beta_fast`` times, ramps
  linearly in between, and scales the scores by ``(0.1 ln s + 1)^2``.

Masks are boolean, ``True`` = may attend, like every mask of :mod:`mhsa_helpers.masking`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from . import checks
from .masking import sliding_window_mask

__all__ = [
    "ROPE_SCALING_METHODS",
    "RopeScaling",
    "alibi_bias",
    "alibi_slopes",
    "rope_wavelengths",
    "scaled_rope_frequencies",
    "sliding_window_mask",
]

#: The ways :class:`RopeScaling` can stretch RoPE.
ROPE_SCALING_METHODS = checks.ROPE_SCALING_METHODS


def _power_of_two_slopes(n: int) -> list[float]:
    start = 2.0 ** (-8.0 / n)
    return [start ** (h + 1) for h in range(n)]


@checks.checked_by(checks.alibi_slopes_args)
def alibi_slopes(num_heads: int) -> torch.Tensor:
    """ALiBi's slope per head, ``(num_heads,)`` float32: ``2^(-8 (h + 1) / n)`` for ``h = 0 .. n - 1``
    when ``n`` is a power of two (8 heads: 1/2, 1/4, ..., 1/256). Otherwise the slopes of the
    largest power of two below ``n``, followed by every other slope of twice that power, as in
    the paper's code."""
    if math.log2(num_heads).is_integer():
        slopes = _power_of_two_slopes(num_heads)
    else:
        closest = 2 ** math.floor(math.log2(num_heads))
        slopes = _power_of_two_slopes(closest) + _power_of_two_slopes(2 * closest)[0::2][: num_heads - closest]
    return torch.tensor(slopes, dtype=torch.float32)


@checks.checked_by(checks.alibi_bias_args)
def alibi_bias(
    num_heads: int, seq_q: int, seq_k: int | None = None, *, device: str | torch.device | None = None
) -> torch.Tensor:
    """The additive ALiBi bias ``(num_heads, seq_q, seq_k)``: ``-slope_h * |p - j|`` for query
    position ``p`` (the last ``seq_q`` of ``seq_k`` positions, as in a cache) and key ``j``.

    Add it to the scores of a causal head ``(batch, num_heads, seq_q, seq_k)`` before the softmax
    (future keys are masked anyway): the further back a key, the lower its score, by a different
    rate in each head.
    """
    seq_k = seq_q if seq_k is None else seq_k
    query_positions = torch.arange(seq_k - seq_q, seq_k, device=device)[:, None]
    distance = (query_positions - torch.arange(seq_k, device=device)[None, :]).abs().float()
    # "+ 0.0" turns the diagonal's -0.0 into 0.0, which prints without a minus sign.
    return -alibi_slopes.unchecked(num_heads).to(device)[:, None, None] * distance + 0.0


@dataclass(frozen=True)
class RopeScaling:
    """How to stretch RoPE to ``factor`` times the ``original_max_seq_len`` it was trained on.

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
        checks.rope_scaling_args(self)


@checks.checked_by(checks.scaled_rope_frequencies_args)
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
    exponents = torch.arange(0, d_head, 2, dtype=torch.float64) / d_head
    if scaling is None:
        return float(base) ** -exponents, 1.0
    s = float(scaling.factor)
    if scaling.method == "linear":
        return float(base) ** -exponents / s, 1.0
    if scaling.method == "ntk":
        return (float(base) * s ** (d_head / (d_head - 2))) ** -exponents, 1.0
    theta = float(base) ** -exponents
    turns = scaling.original_max_seq_len * theta / (2 * math.pi)
    ramp = ((turns - scaling.beta_slow) / (scaling.beta_fast - scaling.beta_slow)).clamp(0.0, 1.0)
    temperature = 0.1 * math.log(s) + 1.0 if s > 1 else 1.0
    return (1 - ramp) * theta / s + ramp * theta, temperature**2


def rope_wavelengths(theta: torch.Tensor) -> torch.Tensor:
    """Tokens per full turn of each pair, ``2 pi / theta_i``: ``(..., d_head // 2)`` -> same shape."""
    return 2 * math.pi / checks.check_floating("theta", theta)
