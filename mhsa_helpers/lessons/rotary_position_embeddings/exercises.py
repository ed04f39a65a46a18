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
from ...teaching.checking import Case, CheckResult, Misconception, check_function, random_tensor
from ...teaching.mine import package_apply_rope
from ...teaching.predictions import check_prediction

__all__ = [
    "check_apply_rope",
    "check_rope_attention",
    "check_score_prediction",
    "handed_out_rope_attention",
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
    "This exercise uses the interleaved pairs (x[0], x[1]), (x[2], x[3]), ... (the RoFormer paper, Meta's original "
    "LLaMA code); the half-split pairs (x[i], x[i + d/2]) of Hugging Face's rotate_half are identical at position 0 "
    "and different everywhere after."
)
_CONVENTION_FIX = "Pair x[..., 0::2] with x[..., 1::2], and put each rotated pair back in place."
_ANGLES = "Look at the angle each pair turns by."

APPLY_MISCONCEPTIONS = (
    Misconception(
        "wrong pairing convention (half-split)",
        _apply_half_split,
        _CONVENTION_HINT,
        fix=_CONVENTION_FIX,
        symptom="Your rotation turns other pairs of features than the reference's. Look at which features are paired.",
    ),
    Misconception(
        "positions shifted by one",
        _apply_shifted,
        "The token at position m must turn by m · θ_i (position 0 not at all).",
        fix="Use positions as given: angles = positions[:, None] * theta.",
        symptom="Every row is turned further than the reference's: pair i by exactly θ_i more, in every row. "
        + _ANGLES,
    ),
    Misconception(
        "rotated pairs written back as two halves (cat instead of interleaving)",
        _apply_written_as_halves,
        "Each pair (x[2i], x[2i+1]) is rotated correctly but written back as [all first parts | all second parts]: "
        "that is the half-split layout. Mixing the two layouts is a bug real checkpoint converters have shipped: the "
        "model loads and talks nonsense.",
        fix="Put each rotated pair back in place: torch.stack((first, second), dim=-1).flatten(-2).",
        symptom="Your numbers are the right ones in the wrong places. Look at how the rotated pairs are put back.",
    ),
    Misconception(
        "positions ignored: counted from 0",
        _apply_from_zero,
        "Row j turns by positions[j] * theta_i, not j * theta_i: a chunk that starts at position 5 (or a token decoded "
        "after 5 cached ones) must be rotated as position 5.",
        fix="angles = positions[:, None] * theta, with the positions you were given.",
        symptom="Your rotation is right only where the positions start at 0. " + _ANGLES,
    ),
    Misconception(
        "rotated the wrong way",
        _apply_wrong_direction,
        "A rotation by +angle maps (a, b) to (a cos - b sin, a sin + b cos); with the signs of the sin terms swapped "
        "it rotates by -angle.",
        fix="first * cos - second * sin, then first * sin + second * cos.",
        symptom="Each of your pairs turns through an angle of the right size and the opposite sign: a row at "
        "position m lands where the reference puts position -m.",
    ),
    Misconception(
        "same frequency for every pair",
        _apply_one_frequency,
        "Each pair i turns at its own speed theta_i = base**(-2i/d_head): the angle is position * theta_i.",
        fix="theta = base ** (-torch.arange(0, d_head, 2) / d_head); angles = positions[:, None] * theta.",
        symptom="Within a row, all your pairs turn by the same angle, pair 0's; the reference's later pairs turn by "
        "less. " + _ANGLES,
    ),
    Misconception(
        "frequencies with exponent -i/d",
        _apply_with_frequencies(_freq_i_over_d),
        "theta_i = base**(-2i/d_head) for pair i (note the 2); with -i/d the slowest pair turns far too fast.",
        fix="torch.arange(0, d_head, 2) / d_head as the exponent.",
        symptom="Pair 0 is right; every later pair turns faster than the reference's. " + _ANGLES,
    ),
    Misconception(
        "frequencies with a positive exponent",
        _apply_with_frequencies(_freq_positive_exponent),
        "The minus sign makes the frequencies *fall* from 1 (pair 0, one radian per position) to nearly 0 (the last "
        "pair).",
        fix="theta = base ** (-torch.arange(0, d_head, 2) / d_head).",
        symptom="Pair 0 is right; later pairs spin ever faster instead of slower. " + _ANGLES,
    ),
    Misconception(
        "frequencies counted from pair 1",
        _apply_with_frequencies(_freq_from_one),
        "Pairs count from i = 0, so the first frequency is base**0 = 1.",
        fix="torch.arange(0, d_head, 2), which starts at 0.",
        symptom="Every pair turns at the speed of the pair after it. " + _ANGLES,
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


def _draw_apply(g: torch.Generator) -> list[Case]:
    cases = []
    for lead in ((3,), (), (2, 2), (1, 3)):
        seq, d_head = int(torch.randint(1, 9, (1,), generator=g)), 2 * int(torch.randint(3, 6, (1,), generator=g))
        first = int(torch.randint(0, 40, (1,), generator=g))
        positions = first + torch.randint(0, 3, (seq,), generator=g).cumsum(0)
        base = float((10000.0, 500.0, 100.0)[int(torch.randint(3, (1,), generator=g))])
        shape = (*lead, seq, d_head)
        text = f"x {shape}, positions {positions.tolist()}, base {base:g}"
        cases.append(Case((random_tensor(g, *shape), positions, base), description=text))
    return cases


def check_apply_rope(learner: Callable[..., torch.Tensor], *, verbose: bool = True) -> CheckResult:
    """Check ``learner(x (..., seq, d_head), positions (seq,), base=10000.0) -> (..., seq, d_head)``
    (interleaved pairs); once every case is right, a call without ``base`` must use 10000."""
    result = check_function(
        "apply_rope",
        learner,
        package_apply_rope,  # notebook 05's signature on the package's rotation, the stand-in of later notebooks
        _apply_cases(),
        APPLY_MISCONCEPTIONS,
        shortcuts=("RotaryEmbedding", "apply_rotary"),
        draw=_draw_apply,
        verbose=False,
    )
    if result.correct:
        default = check_function(
            "apply_rope",
            learner,
            package_apply_rope,  # notebook 05's signature on the package's rotation, the stand-in of later notebooks
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


def handed_out_rope_attention(q, k, v, positions, base):
    """The function exercise 2 hands out, with its bug: ``q, k, v (..., seq, d_head)``, ``positions (seq,)``."""
    rope = RotaryEmbedding(q.shape[-1], int(positions.max()) + 1, base)
    q, k, v = rope(q, positions), rope(k, positions), rope(v, positions)
    return scaled_dot_product_attention(q, k, v)


_BOTH = "q_m · k_n depends on m - n only when *both* are rotated by their positions."
_WHICH = "Look at which tensors are rotated."

ROPE_ATTENTION_MISCONCEPTIONS = (
    Misconception(
        "RoPE applied to V",
        handed_out_rope_attention,
        "Positions should change *who attends to whom* (the scores), not the content that is mixed: rotated values "
        "make the output depend on absolute positions.",
        fix="Rotate only the queries and keys: q, k = rope(q, positions), rope(k, positions); leave v as it is.",
        symptom="Your output changes when every position moves by the same amount, although no distance changed. "
        + _WHICH,
    ),
    Misconception(
        "positions ignored (0 .. seq-1 used)",
        lambda q, k, v, p, b: _attention(q, k, v, torch.arange(q.shape[-2]), b),
        "The rotation must use the positions given, which need not start at 0 or be consecutive (e.g. after a cache).",
        fix="Rotate q and k by `positions`, not by torch.arange(seq).",
        symptom="Your output is right only where the positions are 0, 1, 2, ...",
    ),
    Misconception(
        "RoPE on the queries only",
        lambda q, k, v, p, b: _attention(q, k, v, p, b, rotate=("q",)),
        _BOTH,
        fix="Rotate the keys too.",
        symptom="Your scores do not depend on the keys' positions. " + _WHICH,
    ),
    Misconception(
        "RoPE on the keys only",
        lambda q, k, v, p, b: _attention(q, k, v, p, b, rotate=("k",)),
        _BOTH,
        fix="Rotate the queries too.",
        symptom="Your scores do not depend on the queries' positions. " + _WHICH,
    ),
    Misconception(
        "no RoPE at all",
        lambda q, k, v, p, b: _attention(q, k, v, p, b, rotate=()),
        "The result equals attention without positions.",
        fix="Rotate q and k by their positions before the scores.",
        symptom="Your output does not depend on the positions at all.",
    ),
    Misconception(
        "wrong pairing convention (half-split)",
        lambda q, k, v, p, b: _attention(q, k, v, p, b, convention="half_split"),
        _CONVENTION_HINT,
        fix="RotaryEmbedding(d_head, max_len, base) pairs interleaved features by default: do not pass 'half_split'.",
        symptom="Your rotation turns other pairs of features than the reference's.",
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


def _draw_attention(g: torch.Generator) -> list[Case]:
    cases = []
    for lead in ((2,), (), (1, 3), (2, 2)):
        seq, d_head = int(torch.randint(2, 9, (1,), generator=g)), 2 * int(torch.randint(2, 5, (1,), generator=g))
        positions = int(torch.randint(0, 30, (1,), generator=g)) + torch.randint(1, 3, (seq,), generator=g).cumsum(0)
        shape = (*lead, seq, d_head)
        qkv = tuple(random_tensor(g, *shape) for _ in range(3))
        cases.append(Case((*qkv, positions, 100.0), description=f"q, k, v {shape}, positions {positions.tolist()}"))
    return cases


def check_rope_attention(learner: Callable[..., torch.Tensor], *, verbose: bool = True) -> CheckResult:
    """Debugging exercise: ``learner(q, k, v (..., seq, d_head), positions (seq,), base) -> (..., seq, d_head)``,
    attention (no mask, scale ``1/sqrt(d_head)``) with interleaved RoPE on queries and keys. The notebook hands
    out :func:`handed_out_rope_attention`."""
    return check_function(
        "rope_attention",
        learner,
        _attention_reference,
        _attention_cases(),
        ROPE_ATTENTION_MISCONCEPTIONS,
        draw=_draw_attention,
        original=handed_out_rope_attention,
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
            symptom="Does a rotation make a vector longer?",
        ),
        Misconception(
            "moving the tokens changes the score",
            lambda: 0.0,
            "Both tokens moved by 5, so their distance is still 2: (R_m q) . (R_n k) = q . R_(n-m) k depends on "
            "n - m only (section 6).",
            symptom="What changed between the two pairs of positions, and what did not?",
        ),
    )
    return check_prediction(
        "score_prediction",
        answer,
        _moved_score,
        "rope(q, 7) . rope(k, 5), given rope(q, 2) . rope(k, 0) = 1.25",
        mistakes,
        explain="both tokens moved by 5, their distance is still 2, and the score depends on the distance only",
        verbose=verbose,
    )
