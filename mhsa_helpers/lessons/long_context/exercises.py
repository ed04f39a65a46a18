"""Exercise checkers for notebook 09 (long context): the sliding-window mask, ALiBi's biases and
NTK-aware RoPE frequencies. A wrong answer is told what still differs; the mistake it matches is named on a
repeat or on ``result.hint()``.

Besides its teaching cases, each checker draws four more for every answer: other lengths and windows,
other head counts, other head sizes, bases and factors.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch

from ...long_context import RopeScaling, alibi_bias, alibi_slopes, scaled_rope_frequencies, sliding_window_mask
from ...masking import causal_mask
from ...teaching.checking import Case, CheckResult, Misconception, check_function

__all__ = ["check_alibi_bias", "check_ntk_frequencies", "check_window_mask"]


def _integer(generator: torch.Generator, low: int, high: int) -> int:
    """A random whole number in ``low .. high`` (both included)."""
    return int(torch.randint(low, high + 1, (1,), generator=generator))


# ---------------------------------------------------------------- window mask


def _band(seq_len: int, low: int, high: int) -> torch.Tensor:
    """``(seq_len, seq_len)``: True where ``low <= i - j <= high`` for query ``i`` and key ``j``."""
    behind = torch.arange(seq_len)[:, None] - torch.arange(seq_len)[None, :]
    return (behind >= low) & (behind <= high)


_WINDOW_FIX = "Keep key j for query i when 0 <= i - j < window: behind = i - j, then (behind >= 0) & (behind < window)."

_FUTURE_HINT = "A decoder's window looks back only: a key after the query stays blocked, whatever the window."
_FUTURE_SYMPTOM = "Your mask has True above the diagonal."


def _sees_the_future(run: Callable[..., Any]) -> bool:
    """True when the answer's mask is right on and below the diagonal and lets some key above it in."""
    mask = torch.as_tensor(run(6, 3)).bool()
    past = torch.ones(6, 6, dtype=torch.bool).tril()
    return bool(torch.equal(mask[past], sliding_window_mask(6, window=3)[past]) and mask[~past].any())


WINDOW_MISCONCEPTIONS = (
    Misconception(
        "off by one: the window holds window + 1 keys",
        lambda n, w: _band(n, 0, w),
        "The window holds the query itself and the window - 1 keys before it: with window=1 a token sees only itself.",
        fix=_WINDOW_FIX,
        symptom="Your mask has one True too many in every row that reaches back far enough: with window=1 a query "
        "sees two keys.",
    ),
    Misconception(
        "the query cannot see itself",
        lambda n, w: _band(n, 1, w),
        "The window ends at the query itself: a token always sees itself, and the first token sees only itself "
        "(with nothing to attend to, its softmax row would be NaN).",
        fix=_WINDOW_FIX,
        symptom="Your mask's diagonal is False, and its first row has no True at all.",
    ),
    Misconception(
        "forgot causality: the window reaches into the future",
        lambda n, w: _band(n, -(w - 1), w - 1),
        _FUTURE_HINT,
        fix=_WINDOW_FIX,
        symptom=_FUTURE_SYMPTOM,
    ),
    # Any other mask that is right up to the diagonal and lets some future key in (a band open upwards, say).
    Misconception(
        "forgot causality: the window reaches into the future",
        None,
        _FUTURE_HINT,
        detect=_sees_the_future,
        fix=_WINDOW_FIX,
        symptom=_FUTURE_SYMPTOM,
    ),
    Misconception(
        "mask polarity inverted (True = blocked)",
        lambda n, w: ~sliding_window_mask(n, window=w),
        "Here True means *may attend*, as in torch's scaled_dot_product_attention; a mask that marks the blocked "
        "keys must be inverted before it is used.",
        fix="Return the mask of allowed keys: " + _WINDOW_FIX,
        symptom="Every entry of your mask is the opposite of the reference's.",
    ),
)


def _draw_window(generator: torch.Generator) -> list[Case]:
    cases = []
    for _ in range(4):
        seq_len = _integer(generator, 2, 20)
        window = _integer(generator, 1, seq_len + 2)
        cases.append(Case((seq_len, window), description=f"seq_len={seq_len}, window={window}"))
    return cases


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
    return check_function(
        "window_mask",
        learner,
        lambda n, w: sliding_window_mask(n, window=w),
        cases,
        WINDOW_MISCONCEPTIONS,
        shortcuts=("sliding_window_mask",),
        draw=_draw_window,
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


_ALIBI_FIX = (
    "slopes = 2 ** (-8 * (torch.arange(num_heads) + 1) / num_heads), then -slopes[:, None, None] * distance "
    "with distance = i - j, (seq_len, seq_len)."
)

ALIBI_MISCONCEPTIONS = (
    Misconception(
        "wrong sign: distant keys are favoured",
        lambda h, n: alibi_slopes(h)[:, None, None] * _distance(n),
        "ALiBi *lowers* a key's score the further back it is, so that each head prefers recent keys, at its own rate.",
        fix="Subtract slope × distance: " + _ALIBI_FIX,
        symptom="Your bias is positive below the diagonal, and the larger the further back a key is.",
    ),
    Misconception(
        "slopes per position instead of per head",
        # (heads,) * (seq, seq): runs only when heads == seq, and then gives one (seq, seq) matrix.
        lambda h, n: -alibi_slopes(h) * _distance(n),
        "(heads,) times (seq, seq) broadcasts the slopes along the last axis, the keys: one slope per key, and "
        "one bias for every head. Each head needs its own (seq, seq) matrix, scaled by its own slope.",
        fix="Give the slopes their own axis first: slopes[:, None, None] * distance -> (heads, seq, seq).",
        symptom="Every head of yours gets the same bias.",
    ),
    Misconception(
        "slopes start at 1 (2^(-8h/n) from h = 0)",
        lambda h, n: -torch.tensor([2.0 ** (-8 * k / h) for k in range(h)])[:, None, None] * _distance(n),
        "The exponent counts heads from 1: m_h = 2^(-8 (h + 1) / n) for h = 0 .. n - 1, so 8 heads get 1/2, "
        "1/4, ..., 1/256 and no head has slope 1.",
        fix=_ALIBI_FIX,
        symptom="Your first head's slope is 1, and every slope of yours is the same multiple of the reference's: "
        "2 times with 8 heads, 4 times with 4 heads, 16 times with 2 heads.",
    ),
    Misconception(
        "the slopes of 8 heads, whatever the number of heads",
        lambda h, n: -torch.tensor([2.0 ** -(k + 1) for k in range(h)])[:, None, None] * _distance(n),
        "The slopes depend on the number of heads: with n heads they fall from 2^(-8/n) to 2^(-8), so the last "
        "head's slope is 1/256 whatever n is.",
        fix=_ALIBI_FIX,
        symptom="Your slopes are right for 8 heads and wrong for any other number of heads.",
    ),
)


def _draw_alibi(generator: torch.Generator) -> list[Case]:
    cases = []
    for _ in range(4):
        num_heads, seq_len = 2 ** _integer(generator, 1, 4), _integer(generator, 2, 19)
        cases.append(Case((num_heads, seq_len), description=f"num_heads={num_heads}, seq_len={seq_len}"))
    return cases


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
    return check_function(
        "alibi_bias",
        _causal_part(learner) if callable(learner) else learner,
        _causal_part(lambda h, n: alibi_bias(h, n)),
        cases,
        [replace(m, implementation=_causal_part(m.implementation)) for m in ALIBI_MISCONCEPTIONS],  # type: ignore[arg-type]  # each has one
        square_cases=square,
        shortcuts=("alibi_bias",),
        draw=_draw_alibi,
        verbose=verbose,
    )


# ---------------------------------------------------------------- NTK-aware frequencies


def _ntk_reference(d_head: int, base: float, factor: float) -> torch.Tensor:
    return scaled_rope_frequencies(d_head, base, RopeScaling("ntk", factor, 32))[0]


def _frequencies(d_head: int, base: float) -> torch.Tensor:
    return base ** -(torch.arange(0, d_head, 2, dtype=torch.float64) / d_head)


_NTK_FIX = (
    "new_base = base * factor ** (d_head / (d_head - 2)), then new_base ** -(torch.arange(0, d_head, 2, "
    "dtype=torch.float64) / d_head)."
)

NTK_MISCONCEPTIONS = (
    Misconception(
        "base scaled by the factor itself",
        lambda d, b, s: _frequencies(d, b * s),
        "NTK-aware scaling stretches the slowest pair by exactly the factor, so that its wavelength covers the "
        "longer context. A base grown by the factor itself stretches it by factor^((d-2)/d), a little less.",
        fix=_NTK_FIX,
        symptom="Your fastest frequency is right, and your slowest is divided by factor^((d-2)/d) instead of by "
        "the factor.",
    ),
    Misconception(
        "every frequency divided by the factor (that is position interpolation)",
        lambda d, b, s: _frequencies(d, b) / s,
        "Dividing every frequency by the factor squeezes the fast pairs too (position interpolation): neighbouring "
        "tokens then differ by a fraction of the angle the model learned. NTK-aware scaling changes the base "
        "instead, which leaves the fastest pair as it was.",
        fix="Scale the base, not the frequencies: " + _NTK_FIX,
        symptom="Your fastest frequency is below 1, where the reference's stays at 1: every one of your frequencies, "
        "the fastest too, is the unscaled one times the same number (a quarter with factor=4).",
    ),
    Misconception(
        "exponent upside down: factor^((d-2)/d)",
        lambda d, b, s: _frequencies(d, b * s ** ((d - 2) / d)),
        "The slowest pair's exponent is (d-2)/d: for the base's growth to divide its frequency by exactly the "
        "factor, the base must grow by the inverse power, factor^(d/(d-2)).",
        fix=_NTK_FIX,
        symptom="Your fastest frequency is right, and your slowest is divided by factor^(((d-2)/d)^2) instead of "
        "by the factor.",
    ),
)


def _draw_ntk(generator: torch.Generator) -> list[Case]:
    cases = []
    for _ in range(4):
        d_head = 2 * _integer(generator, 2, 20)
        base = (100.0, 10000.0, 500000.0)[_integer(generator, 0, 2)]
        factor = round(1.5 + 14.5 * float(torch.rand(1, generator=generator, dtype=torch.float64)), 2)
        cases.append(Case((d_head, base, factor), description=f"d_head={d_head}, base={base:g}, factor={factor:g}"))
    return cases


def check_ntk_frequencies(learner: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    """Exercise: ``learner(d_head, base, factor)`` returns RoPE's frequencies ``(d_head // 2,)`` after
    NTK-aware scaling for a context ``factor`` times longer: ``theta_i = base'^(-2i/d)`` with
    ``base' = base * factor^(d / (d - 2))``."""
    cases = [
        Case((16, 10000.0, 4.0), description="d_head=16, base=10000, factor=4"),
        Case((8, 10000.0, 2.0), description="d_head=8, base=10000, factor=2"),
        Case((64, 500000.0, 8.0), description="d_head=64, base=500000, factor=8"),
    ]
    return check_function(
        "ntk_frequencies",
        learner,
        _ntk_reference,
        cases,
        NTK_MISCONCEPTIONS,
        shortcuts=("scaled_rope_frequencies",),
        draw=_draw_ntk,
        verbose=verbose,
    )
