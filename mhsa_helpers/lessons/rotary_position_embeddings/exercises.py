"""Checkers for notebook 05 (rotary position embeddings).

The cases use positions that do *not* start at 0 and heads of at least 6
features: at position 0 every rotation is the identity (so a wrong pairing
convention or a wrong direction would pass), and with ``d_head = 4`` the two
conversions between pairing conventions happen to be the same permutation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import torch

from ... import RotaryEmbedding, apply_rotary, scaled_dot_product_attention
from ...teaching.checking import Case, CheckResult, Misconception, check_function
from ..multi_head_attention.learner import check_prediction

__all__ = [
    "check_apply_rope",
    "check_rope_attention",
    "check_score_prediction",
]


# ------------------------------------------------------------ applying RoPE
# The learner computes theta_i = base^(-2i/d_head) inside my_apply_rope; these are the usual ways it goes wrong.


def _freq_i_over_d(d_head: int, base: float) -> torch.Tensor:
    return base ** (-torch.arange(d_head // 2, dtype=torch.float64) / d_head)


def _freq_positive_exponent(d_head: int, base: float) -> torch.Tensor:
    return base ** (torch.arange(0, d_head, 2, dtype=torch.float64) / d_head)


def _freq_from_one(d_head: int, base: float) -> torch.Tensor:
    return base ** (-torch.arange(2, d_head + 1, 2, dtype=torch.float64) / d_head)


def _rope(d_head: int, positions: torch.Tensor, base: float, convention: str = "interleaved") -> RotaryEmbedding:
    return RotaryEmbedding(d_head, int(positions.max()) + 1, base, convention)


def _apply_reference(x, positions, base=10000.0):
    return _rope(x.shape[-1], positions, base)(x, positions)


def _apply_half_split(x, positions, base):
    return _rope(x.shape[-1], positions, base, "half_split")(x, positions)


def _apply_from_zero(x, positions, base):
    seq = x.shape[-2]
    return RotaryEmbedding(x.shape[-1], seq, base)(x)


def _apply_wrong_direction(x, positions, base):
    cos, sin = _rope(x.shape[-1], positions, base).angles_for(positions)
    return apply_rotary(x, cos, -sin)


def _apply_one_frequency(x, positions, base):
    angles = positions.double()[:, None].expand(-1, x.shape[-1] // 2)
    return apply_rotary(x, angles.cos().float(), angles.sin().float())


def _apply_with_frequencies(frequencies: Callable[[int, float], torch.Tensor]) -> Callable[..., torch.Tensor]:
    def apply(x, positions, base):
        angles = positions.double()[:, None] * frequencies(x.shape[-1], base)
        return apply_rotary(x, angles.cos().float(), angles.sin().float())

    return apply


def _apply_shifted(x, positions, base):
    return _rope(x.shape[-1], positions + 1, base)(x, positions + 1)


def _apply_written_as_halves(x, positions, base):
    # The interleaved pairs rotated correctly, then written back as [all first parts | all second parts].
    cos, sin = _rope(x.shape[-1], positions, base).angles_for(positions)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.cat((even * cos - odd * sin, even * sin + odd * cos), dim=-1)


_CONVENTION_HINT = (
    "This exercise uses the interleaved pairs (x[0], x[1]), (x[2], x[3]), ... (the RoFormer paper, "
    "Meta's original LLaMA code). You rotated the half-split pairs (x[i], x[i + d/2]) of Hugging Face's "
    "rotate_half: identical at position 0, different everywhere after."
)

APPLY_MISCONCEPTIONS = (
    Misconception("wrong pairing convention (half-split)", _apply_half_split, _CONVENTION_HINT),
    Misconception(
        "positions shifted by one",
        _apply_shifted,
        "Your rotation uses positions + 1: the token at position m must turn by m · θ_i (position 0 not at all).",
    ),
    Misconception(
        "rotated pairs written back as two halves (cat instead of interleaving)",
        _apply_written_as_halves,
        "You rotated each pair (x[2i], x[2i+1]) correctly but wrote the results back as [all first parts | "
        "all second parts] with torch.cat: that is the half-split layout. Put each rotated pair back in place: "
        "torch.stack((first, second), dim=-1).flatten(-2). Mixing the two layouts is a bug real checkpoint "
        "converters have shipped: the model loads and talks nonsense.",
    ),
    Misconception(
        "positions ignored: counted from 0",
        _apply_from_zero,
        "Rotate row j by the angle positions[j] * theta_i, not j * theta_i: a chunk that starts at "
        "position 5 (or a token decoded after 5 cached ones) must be rotated as position 5.",
    ),
    Misconception(
        "rotated the wrong way",
        _apply_wrong_direction,
        "A rotation by +angle maps (a, b) to (a cos - b sin, a sin + b cos); you have the signs of the "
        "sin terms swapped, which rotates by -angle.",
    ),
    Misconception(
        "same frequency for every pair",
        _apply_one_frequency,
        "Each pair i turns at its own speed theta_i = base**(-2i/d_head): the angle is "
        "position * theta_i, not the same position for every pair.",
    ),
    Misconception(
        "frequencies with exponent -i/d",
        _apply_with_frequencies(_freq_i_over_d),
        "theta_i = base**(-2i/d_head) for pair i (note the 2): torch.arange(0, d_head, 2) / d_head. "
        "With -i/d the slowest pair turns far too fast.",
    ),
    Misconception(
        "frequencies with a positive exponent",
        _apply_with_frequencies(_freq_positive_exponent),
        "theta_i = base ** (-2i/d_head): the minus sign makes the frequencies *fall* from 1 (pair 0, "
        "one radian per position) to nearly 0 (the last pair).",
    ),
    Misconception(
        "frequencies counted from pair 1",
        _apply_with_frequencies(_freq_from_one),
        "Count pairs from i = 0, so the first frequency is base**0 = 1: torch.arange(0, d_head, 2).",
    ),
)


def _apply_cases() -> list[Case]:
    g = torch.Generator().manual_seed(5)
    return [
        Case(
            (torch.randn(4, 8, generator=g), torch.tensor([5, 6, 7, 8]), 10000.0),
            description="x (seq=4, d_head=8), positions 5..8, base 10000",
        ),
        Case(
            (torch.randn(2, 3, 6, generator=g), torch.tensor([2, 7, 11]), 100.0),
            description="x (2, seq=3, d_head=6), positions [2, 7, 11], base 100",
        ),
        # 17 positions up to 19: more than a fixed table of 8 or 16 angles holds.
        Case(
            (torch.randn(1, 2, 17, 8, generator=g), torch.arange(3, 20), 10000.0),
            description="x (1, 2, seq=17, d_head=8), positions 3..19, base 10000",
        ),
        # A query decoded after a cache: one row at position 9.
        Case(
            (torch.randn(2, 3, 1, 8, generator=g), torch.tensor([9]), 10000.0),
            description="x (2, 3, 1, 8), position 9, base 10000",
        ),
    ]


def check_apply_rope(learner: Callable[..., torch.Tensor], *, verbose: bool = True) -> CheckResult:
    """Check ``learner(x (..., seq, d_head), positions (seq,), base=10000.0) -> (..., seq, d_head)``
    (interleaved pairs); once every case is right, a call without ``base`` must use 10000."""
    result = check_function(
        "apply_rope",
        learner,
        _apply_reference,
        _apply_cases(),
        APPLY_MISCONCEPTIONS,
        shortcuts=("RotaryEmbedding", "apply_rotary"),
        verbose=False,
    )
    if result.correct:
        default = check_function(
            "apply_rope",
            learner,
            _apply_reference,
            [
                Case(
                    (torch.randn(7, 6, generator=torch.Generator().manual_seed(50)), torch.arange(100, 107)),
                    description="x (seq=7, d_head=6), positions 100..106, base left out",
                )
            ],
            verbose=False,
        )
        if not default.correct:
            detail = default.message.split("] ", 1)[-1].removeprefix("not yet: ")
            result = replace(
                default,
                message="[apply_rope] not yet: every case with a base is right, but called without one "
                f"(my_apply_rope(x, positions)) your function should use base=10000.0: {detail}",
            )
    if verbose:
        print(result.message)
    return result


# -------------------------------------------- RoPE inside attention: q, k only


def _attention(q, k, v, positions, base, *, rotate=("q", "k"), convention="interleaved"):
    rope = _rope(q.shape[-1], positions, base, convention)
    q = rope(q, positions) if "q" in rotate else q
    k = rope(k, positions) if "k" in rotate else k
    v = rope(v, positions) if "v" in rotate else v
    return scaled_dot_product_attention(q, k, v)


def _attention_reference(q, k, v, positions, base):
    return _attention(q, k, v, positions, base)


ROPE_ATTENTION_MISCONCEPTIONS = (
    Misconception(
        "positions ignored (0 .. seq-1 used)",
        lambda q, k, v, p, b: _attention(q, k, v, torch.arange(q.shape[-2]), b),
        "Your rotation uses positions 0, 1, 2, ... instead of the positions you were given. Rotate q and k "
        "by `positions` (they need not start at 0 or be consecutive, e.g. after a cache).",
    ),
    Misconception(
        "RoPE applied to V",
        lambda q, k, v, p, b: _attention(q, k, v, p, b, rotate=("q", "k", "v")),
        "Rotate only the queries and keys: positions should change *who attends to whom* (the scores), "
        "not the content that is mixed. Rotated values make the output depend on absolute positions.",
    ),
    Misconception(
        "RoPE on the queries only",
        lambda q, k, v, p, b: _attention(q, k, v, p, b, rotate=("q",)),
        "Rotate the keys too: q_m . k_n depends on m - n only when *both* are rotated by their positions.",
    ),
    Misconception(
        "RoPE on the keys only",
        lambda q, k, v, p, b: _attention(q, k, v, p, b, rotate=("k",)),
        "Rotate the queries too: q_m . k_n depends on m - n only when *both* are rotated by their positions.",
    ),
    Misconception(
        "no RoPE at all",
        lambda q, k, v, p, b: _attention(q, k, v, p, b, rotate=()),
        "The result equals attention without positions: rotate q and k by their positions before the scores.",
    ),
    Misconception(
        "wrong pairing convention (half-split)",
        lambda q, k, v, p, b: _attention(q, k, v, p, b, convention="half_split"),
        _CONVENTION_HINT,
    ),
)


def _attention_cases() -> list[Case]:
    g = torch.Generator().manual_seed(55)

    def qkv(*shape):
        return tuple(torch.randn(*shape, generator=g) for _ in range(3))

    return [
        # 17 positions: more than a fixed table of 8 or 16 angles holds.
        Case((*qkv(17, 8), torch.arange(17), 100.0), description="q, k, v (seq=17, d_head=8), positions 0..16"),
        Case(
            (*qkv(2, 4, 6), torch.tensor([3, 4, 9, 10]), 10000.0),
            description="q, k, v (heads=2, seq=4, d_head=6), positions [3, 4, 9, 10]",
        ),
        Case(
            (*qkv(1, 2, 3, 8), torch.arange(6, 9), 10000.0),
            description="q, k, v (1, 2, seq=3, d_head=8), positions 6..8",
        ),
    ]


def check_rope_attention(learner: Callable[..., torch.Tensor], *, verbose: bool = True) -> CheckResult:
    """Check ``learner(q, k, v (..., seq, d_head), positions (seq,), base) -> (..., seq, d_head)``:
    attention (no mask, scale ``1/sqrt(d_head)``) with interleaved RoPE on queries and keys."""
    return check_function(
        "rope_attention",
        learner,
        _attention_reference,
        _attention_cases(),
        ROPE_ATTENTION_MISCONCEPTIONS,
        verbose=verbose,
    )


# ------------------------------------- predict: the score after both tokens move

#: The prediction exercise: q at position 2 and k at position 0 have this score; then q moves to
#: position 7 and k to position 5.
PREDICTION_SCORE = 1.25


def _moved_score() -> float:
    """The score of the prediction exercise, measured: q and k chosen so that rope(q, 2) . rope(k, 0) is
    PREDICTION_SCORE, then rotated to positions 7 and 5."""
    g = torch.Generator().manual_seed(505)
    rope = RotaryEmbedding(8, 16, 10000.0)
    q, k = torch.randn(8, generator=g, dtype=torch.float64), torch.randn(8, generator=g, dtype=torch.float64)

    def score(m: int, n: int) -> torch.Tensor:
        return rope(q[None], torch.tensor([m]))[0] @ rope(k[None], torch.tensor([n]))[0]

    q = q * PREDICTION_SCORE / score(2, 0)
    return round(float(score(7, 5)), 6)


def check_score_prediction(answer: object, *, verbose: bool = True) -> CheckResult:
    """Check the predicted score ``rope(q, 7) . rope(k, 5)`` given ``rope(q, 2) . rope(k, 0) = 1.25``."""
    mistakes = (
        Misconception(
            "the score grows with the positions",
            lambda: PREDICTION_SCORE * 7 / 2,
            "RoPE turns vectors; it never makes them longer. And the score depends on m - n only.",
        ),
        Misconception(
            "moving the tokens changes the score",
            lambda: 0.0,
            "Both tokens moved by 5, so their distance is still 2: (R_m q) . (R_n k) = q . R_(n-m) k depends on "
            "n - m only (section 6).",
        ),
    )
    return check_prediction(
        "score_prediction",
        answer,
        _moved_score,
        "rope(q, 7) . rope(k, 5), given rope(q, 2) . rope(k, 0) = 1.25",
        mistakes,
        verbose=verbose,
    )
