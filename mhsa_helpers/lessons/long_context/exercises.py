"""Exercise checkers for notebook 09 (long context): the sliding-window mask, ALiBi's biases and
NTK-aware RoPE frequencies. Each names the mistake a wrong answer matches."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from ...long_context import RopeScaling, alibi_bias, alibi_slopes, scaled_rope_frequencies, sliding_window_mask
from ...masking import causal_mask
from ...teaching.checking import Case, CheckResult, Misconception, check_function

__all__ = ["check_alibi_bias", "check_ntk_frequencies", "check_window_mask"]


# ---------------------------------------------------------------- window mask


def check_window_mask(learner: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    """Exercise: ``learner(seq_len, window)`` returns the boolean ``(seq_len, seq_len)`` mask in which
    query ``i`` may attend to key ``j`` when ``i - window < j <= i`` (itself and the ``window - 1``
    keys before it)."""
    cases = [
        Case((6, 3), description="seq_len=6, window=3"),
        Case((7, 1), description="seq_len=7, window=1 (each token sees only itself)"),
        Case((5, 5), description="seq_len=5, window=5 (the whole causal triangle)"),
        Case((17, 2), description="seq_len=17, window=2 (longer than a fixed (16, 16) buffer)"),
    ]

    def band(seq_len: int, window: int, low: int, high: int) -> torch.Tensor:
        behind = torch.arange(seq_len)[:, None] - torch.arange(seq_len)[None, :]
        return (behind >= low) & (behind <= high)

    misconceptions = [
        Misconception(
            "off by one: the window holds window + 1 keys",
            lambda n, w: band(n, w, 0, w),
            "Your mask lets query i see keys i - window .. i, one too many: with window=1 a token should see "
            "only itself. Keep i - window < j (strictly), i.e. i - j < window.",
        ),
        Misconception(
            "off by one: the query cannot see itself",
            lambda n, w: band(n, w, 1, w),
            "Your mask shifts the window back by one: query i sees keys i - window .. i - 1 but not itself, so "
            "the first query sees nothing at all (a NaN row). The window ends at the query itself.",
        ),
        Misconception(
            "forgot causality: the window reaches into the future",
            lambda n, w: band(n, w, -(w - 1), w - 1),
            "Your mask is a band on both sides of the diagonal: query i also sees keys after it. A decoder's "
            "window looks back only: combine it with the causal mask (j <= i).",
        ),
        Misconception(
            "mask polarity inverted (True = blocked)",
            lambda n, w: ~sliding_window_mask(n, window=w),
            "Your mask is True where the key is blocked: here True means *may attend*.",
        ),
    ]
    return check_function(
        "window_mask",
        learner,
        lambda n, w: sliding_window_mask(n, window=w),
        cases,
        misconceptions,
        shortcuts=("sliding_window_mask",),
        verbose=verbose,
    )


# ---------------------------------------------------------------- ALiBi


def _causal_part(function: Callable[..., Any]) -> Callable[..., Any]:
    # Future keys are masked anyway, so any value there is right: compare the past and the diagonal only.
    @functools.wraps(function)
    def wrapped(num_heads: int, seq_len: int) -> Any:
        bias = function(num_heads, seq_len)
        if isinstance(bias, torch.Tensor) and bias.shape[-2:] == (seq_len, seq_len):
            return bias.double().masked_fill(~causal_mask(seq_len), 0.0)
        return bias

    return wrapped


def _distance(seq_len: int) -> torch.Tensor:
    return (torch.arange(seq_len)[:, None] - torch.arange(seq_len)[None, :]).abs().float()


def check_alibi_bias(learner: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    """Exercise: ``learner(num_heads, seq_len)`` returns ALiBi's bias ``(num_heads, seq_len, seq_len)``:
    ``-m_h * (i - j)`` for query ``i`` and key ``j <= i``, with ``m_h = 2^(-8 (h + 1) / num_heads)``
    (``num_heads`` a power of two). Entries above the diagonal are not checked (a causal mask hides them)."""
    cases = [
        Case((8, 5), description="num_heads=8, seq_len=5"),
        Case((4, 17), description="num_heads=4, seq_len=17 (longer than a fixed (16, 16) buffer)"),
        Case((2, 3), description="num_heads=2, seq_len=3"),
    ]
    square = [Case((4, 4), description="num_heads=4, seq_len=4"), Case((8, 8), description="num_heads=8, seq_len=8")]
    misconceptions = [
        Misconception(
            "wrong sign: distant keys are favoured",
            lambda h, n: alibi_slopes(h)[:, None, None] * _distance(n),
            "Your bias grows with the distance, so every head prefers the keys furthest back. ALiBi *subtracts* "
            "slope × distance: bias = -m_h * (i - j).",
        ),
        Misconception(
            "slopes per position instead of per head",
            # (heads,) * (seq, seq): runs only when heads == seq, and then gives one (seq, seq) matrix.
            lambda h, n: -alibi_slopes(h) * _distance(n),
            "Your slopes run along the key axis: (heads,) times (seq, seq) broadcasts the slopes over the "
            "*keys*, and every head gets the same bias. Give the slopes their own axis first: "
            "slopes[:, None, None] * distance -> (heads, seq, seq).",
        ),
        Misconception(
            "slopes start at 1 (2^(-8h/n) from h = 0)",
            lambda h, n: -torch.tensor([2.0 ** (-8 * k / h) for k in range(h)])[:, None, None] * _distance(n),
            "Your first head has slope 1: the exponent counts heads from 1, m_h = 2^(-8 (h + 1) / n) for "
            "h = 0 .. n - 1, so 8 heads get 1/2, 1/4, ..., 1/256.",
        ),
    ]
    return check_function(
        "alibi_bias",
        _causal_part(learner) if callable(learner) else learner,
        _causal_part(lambda h, n: alibi_bias(h, n)),
        cases,
        [Misconception(m.name, _causal_part(m.implementation), m.hint) for m in misconceptions],  # type: ignore[arg-type]  # each has one
        square_cases=square,
        shortcuts=("alibi_bias",),
        verbose=verbose,
    )


# ---------------------------------------------------------------- NTK-aware frequencies


def _ntk_reference(d_head: int, base: float, factor: float) -> torch.Tensor:
    return scaled_rope_frequencies(d_head, base, RopeScaling("ntk", factor, 32))[0]


def _frequencies(d_head: int, base: float) -> torch.Tensor:
    return base ** -(torch.arange(0, d_head, 2, dtype=torch.float64) / d_head)


def check_ntk_frequencies(learner: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    """Exercise: ``learner(d_head, base, factor)`` returns RoPE's frequencies ``(d_head // 2,)`` after
    NTK-aware scaling for a context ``factor`` times longer: ``theta_i = base'^(-2i/d)`` with
    ``base' = base * factor^(d / (d - 2))``."""
    cases = [
        Case((16, 10000.0, 4.0), description="d_head=16, base=10000, factor=4"),
        Case((8, 10000.0, 2.0), description="d_head=8, base=10000, factor=2"),
        Case((64, 500000.0, 8.0), description="d_head=64, base=500000, factor=8"),
    ]
    misconceptions = [
        Misconception(
            "base scaled by the factor itself",
            lambda d, b, s: _frequencies(d, b * s),
            "Your base is base * factor. Then the slowest pair's frequency is divided by factor^((d-2)/d), "
            "a little less than the factor, and the longest wavelength falls short of the longer context. "
            "The base must grow by factor^(d/(d-2)).",
        ),
        Misconception(
            "every frequency divided by the factor (that is position interpolation)",
            lambda d, b, s: _frequencies(d, b) / s,
            "Dividing all frequencies by the factor squeezes the fast pairs too (position interpolation): "
            "neighbouring tokens then differ by a fraction of the angle the model learned. NTK-aware scaling "
            "changes the base instead, which leaves the fastest pair untouched.",
        ),
        Misconception(
            "exponent upside down: factor^((d-2)/d)",
            lambda d, b, s: _frequencies(d, b * s ** ((d - 2) / d)),
            "Your exponent is (d-2)/d; it is d/(d-2), so that the slowest pair, exponent (d-2)/d, is divided "
            "by exactly the factor.",
        ),
    ]
    return check_function(
        "ntk_frequencies",
        learner,
        _ntk_reference,
        cases,
        misconceptions,
        shortcuts=("scaled_rope_frequencies",),
        verbose=verbose,
    )
