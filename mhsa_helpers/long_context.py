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
* **Stretching RoPE** (:class:`~mhsa_helpers.rope.RopeScaling`, :func:`~mhsa_helpers.rope.scaled_rope_frequencies`,
  which live with RoPE in :mod:`~mhsa_helpers.rope` and are re-exported here): each pair ``i``
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

import torch

from .checks import expect_floating, expect_int
from .masking import expect_seq_k, sliding_window_mask
from .rope import ROPE_SCALING_METHODS, RopeScaling, scaled_rope_frequencies

__all__ = [
    "ROPE_SCALING_METHODS",
    "RopeScaling",
    "alibi_bias",
    "alibi_slopes",
    "rope_wavelengths",
    "scaled_rope_frequencies",
    "sliding_window_mask",
]


def _power_of_two_slopes(n: int) -> list[float]:
    start = 2.0 ** (-8.0 / n)
    return [start ** (h + 1) for h in range(n)]


def alibi_slopes(num_heads: int) -> torch.Tensor:
    """ALiBi's slope per head, ``(num_heads,)`` float32: ``2^(-8 (h + 1) / n)`` for ``h = 0 .. n - 1``
    when ``n`` is a power of two (8 heads: 1/2, 1/4, ..., 1/256). Otherwise the slopes of the
    largest power of two below ``n``, followed by every other slope of twice that power, as in
    the paper's code."""
    expect_int("num_heads", num_heads)
    if math.log2(num_heads).is_integer():
        slopes = _power_of_two_slopes(num_heads)
    else:
        closest = 2 ** math.floor(math.log2(num_heads))
        slopes = _power_of_two_slopes(closest) + _power_of_two_slopes(2 * closest)[0::2][: num_heads - closest]
    return torch.tensor(slopes, dtype=torch.float32)


def alibi_bias(
    num_heads: int, seq_q: int, seq_k: int | None = None, *, device: str | torch.device | None = None
) -> torch.Tensor:
    """The additive ALiBi bias ``(num_heads, seq_q, seq_k)``: ``-slope_h * |p - j|`` for query
    position ``p`` (the last ``seq_q`` of ``seq_k`` positions, as in a cache) and key ``j``.

    Add it to the scores of a causal head ``(batch, num_heads, seq_q, seq_k)`` before the softmax
    (future keys are masked anyway): the further back a key, the lower its score, by a different
    rate in each head.
    """
    expect_int("num_heads", num_heads)
    seq_k = expect_seq_k(seq_q, seq_k)
    query_positions = torch.arange(seq_k - seq_q, seq_k, device=device)[:, None]
    distance = (query_positions - torch.arange(seq_k, device=device)[None, :]).abs().float()
    # "+ 0.0" turns the diagonal's -0.0 into 0.0, which prints without a minus sign.
    return -alibi_slopes(num_heads).to(device)[:, None, None] * distance + 0.0


def rope_wavelengths(theta: torch.Tensor) -> torch.Tensor:
    """Tokens per full turn of each pair, ``2 pi / theta_i``: ``(..., d_head // 2)`` -> same shape."""
    return 2 * math.pi / expect_floating("theta", theta)
