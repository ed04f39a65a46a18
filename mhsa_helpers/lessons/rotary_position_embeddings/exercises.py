"""Checkers for notebook 05 (rotary position embeddings).

The cases use positions that do *not* start at 0 and heads of at least 6
features: at position 0 every rotation is the identity (so a wrong pairing
convention or a wrong direction would pass), and with ``d_head = 4`` the two
conversions between pairing conventions happen to be the same permutation.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from ... import RotaryEmbedding, apply_rotary, rope_frequencies, scaled_dot_product_attention
from ...teaching.checking import (
    AnswerRejected,
    Case,
    CheckResult,
    Misconception,
    answer_seed,
    check_function,
    learner_line,
    random_tensor,
)
from ...teaching.mine import package_apply_rope
from ...teaching.predictions import check_prediction

__all__ = [
    "check_apply_rope",
    "check_apply_rope_complex",
    "check_rope_attention",
    "check_rotary_embedding",
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
    result = _with_the_default_base("apply_rope", "my_apply_rope", learner, result)
    if verbose:
        print(result.message)
    return result


def _with_the_default_base(
    exercise: str, name: str, learner: Callable[..., torch.Tensor], result: CheckResult
) -> CheckResult:
    """``result``; but once every case is right, a call without ``base`` must also use 10000."""
    if not result.correct:
        return result
    default = check_function(
        exercise,
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
    if default.correct:
        return result
    detail = default.message.split("] ", 1)[-1].removeprefix("not yet: ")
    return replace(
        default,
        message=f"[{exercise}] not yet: every case with a base is right, but called without one "
        f"({name}(x, positions)) your function should use base=10000.0: {detail}",
    )


# ------------------------------------------------ applying RoPE as a complex multiplication
# Meta's Llama code reads each interleaved pair (x[2i], x[2i+1]) as x[2i] + i·x[2i+1] and multiplies it by
# e^(i·m·theta_i). The mistakes below are of that form; the reference is the same rotation as exercise 3's.


def _apply_halves_written_as_pairs(x, positions, base):
    # Features i and i + d/2 read as one complex number, the products then written back side by side.
    cos, sin = _rope(x.shape[-1], positions, base).angles_for(positions)
    first, second = x.chunk(2, dim=-1)
    return torch.stack((first * cos - second * sin, first * sin + second * cos), dim=-1).flatten(-2)


def _apply_polar_swapped(x, positions, base):
    # torch.polar(angles, ones): each pair stretched by its angle and turned by one radian.
    angles = positions.double()[:, None] * rope_frequencies(x.shape[-1], base, dtype=torch.float64)
    return apply_rotary(x, angles * math.cos(1.0), angles * math.sin(1.0))


def _stretches_the_rows(run: Callable[..., Any]) -> bool:
    """True when the answer changes the length of a row: no rotation of pairs, whichever pairs and however far,
    does."""
    x = random_tensor(torch.Generator().manual_seed(57), 2, 5, 8)
    out = run(x, torch.arange(3, 8), 100.0)
    return (
        isinstance(out, torch.Tensor)
        and out.shape == x.shape
        and not torch.allclose(out.detach().double().norm(dim=-1), x.norm(dim=-1), rtol=1e-3, atol=1e-4)
    )


_PAIRED = "Look at which two features make each complex number."
_STRETCHED = (
    "Your rows come out longer or shorter than they went in, though turning a pair never changes its length. "
    "Look at the numbers you multiply by."
)
_APPLY_BY_NAME = {mistake.name: mistake for mistake in APPLY_MISCONCEPTIONS}

COMPLEX_MISCONCEPTIONS = (
    Misconception(
        "the halves paired into complex numbers (half-split)",
        _apply_half_split,
        "Splitting the last axis as (2, d/2) and moving the 2 to the end makes x[i] + i·x[i + d/2] of each number: "
        "the half-split pairs of section 9. It is a rotation too, just of other pairs: right at position 0 and "
        "wrong after it.",
        fix="Split the last axis as (d/2, 2), so that the axis of 2 holds x[2i] and x[2i+1]: "
        "torch.view_as_complex(x.contiguous().unflatten(-1, (-1, 2))), and no axes moved.",
        symptom="Your rotation turns other pairs of features than the reference's. " + _PAIRED,
    ),
    Misconception(
        "the halves paired into complex numbers, written back as adjacent pairs",
        _apply_halves_written_as_pairs,
        "Splitting the last axis as (2, d/2) and moving the 2 to the end makes x[i] + i·x[i + d/2] of each number, "
        "and flattening view_as_real's output puts each product at features 2i, 2i + 1: the features are paired "
        "as halves and written back as neighbours.",
        fix="Split the last axis as (d/2, 2), so that the axis of 2 holds x[2i] and x[2i+1]: "
        "torch.view_as_complex(x.contiguous().unflatten(-1, (-1, 2))), and no axes moved.",
        symptom="Your rows hold rotations of other pairs of features than the reference's. " + _PAIRED,
    ),
    Misconception(
        "real and imaginary parts written back as two halves",
        _apply_written_as_halves,
        "torch.cat of all the real parts and then all the imaginary parts lays the results out as [all first members "
        "| all second members], the half-split layout. torch.view_as_real keeps each number's two parts together on "
        "a last axis of 2, which flattening puts back at features 2i and 2i + 1.",
        fix="torch.view_as_real(rotated).flatten(-2).",
        symptom="Your numbers are the right ones in the wrong places. Look at how the complex results are turned "
        "back into features.",
    ),
    Misconception(
        "rotated the wrong way (the conjugate)",
        _apply_wrong_direction,
        "Multiplying by e^(-i·m·theta_i), the conjugate of e^(i·m·theta_i) (a .conj(), or a minus in the angle), turns "
        "every pair the other way. The scores would still depend on the distance alone, with its sign flipped: a "
        "model trained one way would read three tokens back as three tokens ahead.",
        fix="torch.polar(torch.ones_like(angles), angles), with angles = positions[:, None] * theta as they are.",
        symptom="Each of your pairs turns through an angle of the right size and the opposite sign: a row at "
        "position m lands where the reference puts position -m.",
    ),
    Misconception(
        "torch.polar's arguments swapped",
        _apply_polar_swapped,
        "torch.polar(abs, angle) takes the length first and the angle second: torch.polar(angles, ones) makes numbers "
        "of length m·theta_i at an angle of one radian, which stretch the pairs instead of only turning them.",
        fix="torch.polar(torch.ones_like(angles), angles).",
        symptom=_STRETCHED,
    ),
    _APPLY_BY_NAME["positions ignored: counted from 0"],
    _APPLY_BY_NAME["positions shifted by one"],
    _APPLY_BY_NAME["frequencies with exponent -i/d"],
    _APPLY_BY_NAME["frequencies with a positive exponent"],
    _APPLY_BY_NAME["frequencies counted from pair 1"],
    _APPLY_BY_NAME["same frequency for every pair"],
    Misconception(
        "multiplied by numbers whose length is not 1",
        None,
        "Multiplying by a complex number of length 1, e^(i·phi) = cos(phi) + i·sin(phi), only turns a pair; a number "
        "of any other length stretches it too. Compare your result's row lengths (.norm(dim=-1)) with x's.",
        detect=_stretches_the_rows,
        fix="Make the multipliers of length 1: torch.polar(torch.ones_like(angles), angles), or "
        "torch.complex(angles.cos(), angles.sin()).",
        symptom=_STRETCHED,
    ),
)


class _Watch(TorchFunctionMode):
    """A mode that watches the learner's torch calls, and survives the checker's time limit: its alarm can
    land where torch has taken the mode off its stack for a moment (``_pop_mode_temporarily``, between the pop
    and the ``try`` that puts it back). Leaving the ``with`` then finds nothing to pop; the stop, already on
    its way, is what the learner must hear, not torch's "empty mode stack"."""

    def __exit__(self, exc_type: Any, exc_value: Any, traceback: Any) -> None:
        try:
            super().__exit__(exc_type, exc_value, traceback)
        except RuntimeError:
            if exc_type is None:
                raise


class _ComplexWatch(_Watch):
    """Notes whether any torch function returns a complex tensor while it is active."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if isinstance(out, torch.Tensor) and out.is_complex():
            self.seen = True
        return out


def _through_complex_numbers(learner: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """``learner``, refused when it returns a tensor without having made a complex number: exercise 3 wrote the
    real form already, and this exercise is the complex one."""

    @functools.wraps(learner)
    def call(*args: Any, **kwargs: Any) -> torch.Tensor:
        # The mode is entered here, in the thread that runs the learner, whichever that is.
        with _ComplexWatch() as watch:
            out = learner(*args, **kwargs)
        if isinstance(out, torch.Tensor) and not watch.seen:
            raise AnswerRejected(
                "your function gives a tensor without making a single complex number. This exercise asks for the "
                "rotation as a complex multiplication: each pair read as one complex number with "
                "`torch.view_as_complex`, times numbers made with `torch.polar`, and back with `torch.view_as_real`"
            )
        return out

    return call


def _complex_cases() -> list[Case]:
    g = torch.Generator().manual_seed(56)
    return [
        *_apply_cases(),
        # Its features are not side by side in memory, which torch.view_as_complex needs.
        Case(
            (torch.randn(8, 5, generator=g).t(), torch.arange(3, 8), 10000.0),
            description="x (seq=5, d_head=8) made by transposing a (d_head, seq) tensor, positions 3..7, base 10000",
        ),
    ]


def check_apply_rope_complex(learner: Callable[..., torch.Tensor], *, verbose: bool = True) -> CheckResult:
    """Check ``learner(x (..., seq, d_head), positions (seq,), base=10000.0) -> (..., seq, d_head)``, exercise 3's
    rotation computed as a complex multiplication (Meta's Llama code): the same numbers as
    :func:`mhsa_helpers.teaching.mine.package_apply_rope`, and an answer that makes no complex number is refused.
    Once every case is right, a call without ``base`` must use 10000."""
    if not callable(learner):
        raise TypeError(f"learner must be a function, got {type(learner).__name__}")
    watched = _through_complex_numbers(learner)
    result = check_function(
        "apply_rope_complex",
        watched,
        package_apply_rope,
        _complex_cases(),
        COMPLEX_MISCONCEPTIONS,
        shortcuts=("RotaryEmbedding", "apply_rotary"),
        draw=_draw_apply,
        verbose=False,
    )
    result = _with_the_default_base("apply_rope_complex", "my_apply_rope_complex", watched, result)
    if verbose:
        print(result.message)
    return result


# ------------------------------------------------ the angle table, computed once
# The learner's class MyRotaryEmbedding(d_head, max_seq_len, base) keeps the cos and sin of positions
# 0 .. max_seq_len - 1 as buffers and looks rows up in forward(x, positions). The checker builds it for each case (the
# sizes change from case to case) and calls it; the probes below measure what the numbers cannot show.

#: The names under which torch computes a cosine or a sine: functions, tensor methods and their in-place forms.
_TRIGONOMETRY = frozenset({"cos", "sin", "cos_", "sin_", "polar"})


class _TrigonometryWatch(_Watch):
    """Lists the torch functions that compute a cosine or a sine (or e^(i·angle)) while it is active."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        of_complex = any(isinstance(a, torch.Tensor) and a.is_complex() for a in args)
        if name in _TRIGONOMETRY or (name in ("exp", "exp_") and of_complex):
            self.calls.append(name)
        return func(*args, **(kwargs or {}))


def _plain_tensors(module: torch.nn.Module) -> list[str]:
    """The attributes of ``module`` that hold tensors (also in a list, tuple or dict) without being its parameters or
    buffers: nn.Module's ``.to()``, ``.double()`` and ``.cuda()`` do not reach them."""
    found = []
    for name, value in vars(module).items():
        if name in ("_parameters", "_buffers", "_modules"):
            continue  # nn.Module's own registers, which .to() does reach
        held = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else (value,)
        if any(isinstance(v, torch.Tensor) for v in held):
            found.append(name)
    return found


class _Rotating:
    """The learner's class as the checker calls it: built with ``d_head``, ``max_seq_len`` and ``base``, then called on
    ``x`` at ``positions``, every argument by keyword (an argument changed in place is named so). With ``probe``, what
    a property probe reads instead of the rotation.

    It holds none of the learner's code where the checker looks for it, so that every line outside the package counts
    as the learner's: an error or an endless loop in ``__init__`` is told at its line, as one in ``forward`` is."""

    def __init__(self, learner: Callable[..., Any]) -> None:
        self.learner = learner
        self.name = getattr(learner, "__name__", "your class")

    def build(self, d_head: int, max_seq_len: int, base: float) -> torch.nn.Module:
        module = self.learner(d_head, max_seq_len, base)
        made = f"{self.name}({d_head}, {max_seq_len}, {base:g})"
        if module is None:
            raise AnswerRejected(f"{made} gave None — did you forget `return`?")
        if not isinstance(module, torch.nn.Module):
            raise AnswerRejected(f"{made} gave a {type(module).__name__}, not an nn.Module")
        if type(module).forward is torch.nn.Module.forward:
            raise AnswerRejected(
                f"your module {type(module).__name__} has no `forward` method: PyTorch calls "
                "`forward(self, x, positions)` when the module is called"
            )
        return module

    def __call__(
        self,
        *,
        d_head: int,
        max_seq_len: int,
        base: float,
        x: torch.Tensor,
        positions: torch.Tensor,
        probe: str | None = None,
    ) -> Any:
        module = self.build(d_head, max_seq_len, base)
        if probe is None:
            return _rotated(module, x, positions, max_seq_len)
        if probe == "trigonometry":
            with _TrigonometryWatch() as watch:
                module(x, positions)
            return watch.calls
        if probe == "plain":
            module.to(torch.float64)
            return _plain_tensors(module)
        if probe == "saved":
            return list(module.state_dict())
        if probe == "moved":
            module.to(torch.float64)
            return module(x.double(), positions)
        if probe == "dtype":
            # x in float64 and in bfloat16 (a model's usual dtype) through the module as built, then float32 through
            # the module moved to float64.
            as_built = [module(x.to(dtype), positions).dtype for dtype in (torch.float64, torch.bfloat16)]
            module.to(torch.float64)
            return [*as_built, module(x.float(), positions).dtype]
        if probe == "past":
            try:
                module(x, positions)
            except Exception as error:  # which error, if any, is what the probe reads
                return error
            return None
        raise ValueError(f"no probe named {probe!r}")


def _rotated(module: torch.nn.Module, x: torch.Tensor, positions: torch.Tensor, max_seq_len: int) -> Any:
    """``module(x, positions)``; a ValueError for positions that all have a row is the learner's bound check
    refusing too early, told as such."""
    try:
        return module(x, positions)
    except ValueError as error:
        top = int(positions.max())
        if top >= max_seq_len:
            raise
        raise AnswerRejected(
            f"forward raised ValueError ({error}){learner_line(error)} for positions up to {top}, with "
            f"max_seq_len={max_seq_len}: the table has a row for every position from 0 to {max_seq_len - 1}, so "
            f"only a position of {max_seq_len} or more is past it"
        ) from error


def _rotary_reference(*, d_head: int, max_seq_len: int, base: float, x: torch.Tensor, positions: torch.Tensor):
    return package_apply_rope(x, positions, base)


def _on_the_module(apply: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """A mistake of exercise 3's rotation, ``apply(x, positions, base)``, called as the checker calls the module."""

    def rotate(*, d_head: int, max_seq_len: int, base: float, x: torch.Tensor, positions: torch.Tensor):
        return apply(x, positions, base)

    return rotate


def _first_rows(x, positions, base):
    return package_apply_rope(x, torch.arange(x.shape[-2]), base)


def _consecutive_from_first(x, positions, base):
    return package_apply_rope(x, int(positions[0]) + torch.arange(x.shape[-2]), base)


#: The module every probe builds: 10 rows, d_head 6, base 100.
_PROBE_ROWS = 10
#: Positions the probes rotate: three with a row each; up to the first missing row; one well past the last.
_INSIDE, _AT_THE_END, _BEYOND = (4, 7, 9), (7, 9, 10), (5, 8, 13)


def _probe_x(seq: int) -> torch.Tensor:
    return random_tensor(torch.Generator().manual_seed(515), 2, seq, 6).float()


def _probe(run: Callable[..., Any], probe: str, positions: tuple[int, ...] = _INSIDE) -> Any:
    x = _probe_x(len(positions))
    return run(d_head=6, max_seq_len=_PROBE_ROWS, base=100.0, x=x, positions=torch.tensor(positions), probe=probe)


def _computes_trigonometry(run: Callable[..., Any]) -> bool:
    return bool(_probe(run, "trigonometry"))


def _keeps_plain_tensors(run: Callable[..., Any]) -> bool:
    return bool(_probe(run, "plain"))


def _saves_the_tables(run: Callable[..., Any]) -> bool:
    return bool(_probe(run, "saved"))


def _spoiled_by_to(run: Callable[..., Any]) -> bool:
    got = _probe(run, "moved")
    expected = package_apply_rope(_probe_x(len(_INSIDE)).double(), torch.tensor(_INSIDE), 100.0)
    return isinstance(got, torch.Tensor) and (
        got.shape != expected.shape or not torch.allclose(got.detach().double(), expected, atol=1e-4)
    )


def _not_in_x_dtype(run: Callable[..., Any]) -> bool:
    return _probe(run, "dtype") != [torch.float64, torch.bfloat16, torch.float32]


def _past_the_table(run: Callable[..., Any]) -> list[Exception | None]:
    """What the module raises, if anything, for positions up to the first missing row and well past the last."""
    return [_probe(run, "past", positions) for positions in (_AT_THE_END, _BEYOND)]


def _goes_through(run: Callable[..., Any]) -> bool:
    return any(error is None for error in _past_the_table(run))


def _other_error(run: Callable[..., Any]) -> bool:
    errors = _past_the_table(run)
    return all(e is not None for e in errors) and any(not isinstance(e, ValueError) for e in errors)


def _without_the_numbers(run: Callable[..., Any]) -> bool:
    beyond = _past_the_table(run)[1]
    said = str(beyond)
    return isinstance(beyond, ValueError) and not all(
        re.search(rf"\b{number}\b", said) for number in (max(_BEYOND), _PROBE_ROWS)
    )


_ROWS = "Look at which rows of the table each token gets."
_LOOKUP_FIX = "Index the tables with the positions: self.cos[positions] and self.sin[positions], (seq, d_head/2) each."
_BOUND_FIX = (
    'First thing in forward: if int(positions.max()) >= self.max_seq_len: raise ValueError(f"position '
    '{int(positions.max())} is past the table: max_seq_len={self.max_seq_len}").'
)
_BEFORE_READING = "Look at what forward checks before it reads the table."
_ON_MODULE = {
    name: replace(mistake, implementation=_on_the_module(mistake.implementation), fix=fix or mistake.fix)
    for name, fix in (
        ("wrong pairing convention (half-split)", ""),
        ("rotated pairs written back as two halves (cat instead of interleaving)", ""),
        (
            "positions shifted by one",
            "Row m of the table holds position m's angles: build it from torch.arange(max_seq_len), and read the rows "
            "positions as they are.",
        ),
        ("rotated the wrong way", ""),
        (
            "same frequency for every pair",
            "theta = base ** (-torch.arange(0, d_head, 2) / d_head), and the table's angles "
            "torch.arange(max_seq_len)[:, None] * theta.",
        ),
        ("frequencies with exponent -i/d", ""),
        ("frequencies with a positive exponent", ""),
        ("frequencies counted from pair 1", ""),
    )
    for mistake in [_APPLY_BY_NAME[name]]
    if mistake.implementation is not None
}

ROTARY_MISCONCEPTIONS = (
    Misconception(
        "positions ignored: the first seq rows read",
        _on_the_module(_first_rows),
        "Row j of x sits at position positions[j], not at j: a chunk that starts at position 5 (or a token decoded "
        "after 5 cached ones) needs rows 5, 6, … of the table. The first seq rows are positions 0 .. seq-1, whatever "
        "was asked.",
        fix=_LOOKUP_FIX,
        symptom="Your rotation is right only where the positions are 0, 1, 2, …. " + _ROWS,
    ),
    Misconception(
        "positions taken as consecutive from the first",
        _on_the_module(_consecutive_from_first),
        "A slice of the table from positions[0] on reads rows positions[0], positions[0] + 1, …: right for a chunk "
        "whose positions follow one another, wrong where they jump or restart (several documents packed into one "
        "sequence restart at 0 where each begins). An index tensor reads exactly the rows asked for, in its order.",
        fix=_LOOKUP_FIX,
        symptom="Your rotation is right where the positions follow one another (5, 6, 7) and wrong where they jump "
        "(2, 7, 11, 19). " + _ROWS,
    ),
    *_ON_MODULE.values(),
    # Properties every right answer has, probed on every answer. Their implementation is the reference: these
    # mistakes give the right numbers, so they are never offered as the cause of a wrong one.
    Misconception(
        "the table computed again at every call",
        _rotary_reference,
        "Every layer's rotary module is called at every step, with angles that never change: compute cos and sin "
        "once, in __init__, for positions 0 .. max_seq_len - 1, and only look rows up in forward. Meta's Llama code "
        "computes its table once, when the model is made (precompute_freqs_cis).",
        detect=_computes_trigonometry,
        fix="In __init__: the angles torch.arange(max_seq_len)[:, None] * theta, then their cos and sin registered as "
        "buffers; in forward: self.cos[positions] and self.sin[positions], no cos or sin computed.",
        symptom="While your module rotates x, it computes cosines or sines (torch.cos, torch.sin, torch.polar, or the "
        "tensor methods .cos(), .sin()). Look at what forward computes and what __init__ keeps.",
        always=True,
    ),
    Misconception(
        "the tables kept as plain tensor attributes",
        _rotary_reference,
        "A tensor assigned as self.cos = … is a plain attribute: nn.Module's .to(), .double() and .cuda() move only "
        "parameters and buffers, so a model moved to a GPU would leave its table on the CPU. (Meta's Llama code keeps "
        "its table so, and moves it by hand at every forward pass.) self.register_buffer(name, tensor) makes a "
        "buffer, which moves with the module.",
        detect=_keeps_plain_tensors,
        fix='self.register_buffer("cos", angles.cos(), persistent=False), and the same for sin, instead of '
        "self.cos = angles.cos().",
        symptom="module.to(torch.float64) leaves some of your module's tensors as they were: .to(...), .double() or "
        ".cuda() would not move them with the rest of a model. Look at how __init__ keeps the tables.",
        always=True,
    ),
    Misconception(
        "the tables saved in the state_dict",
        _rotary_reference,
        "A buffer registered without persistent=False (or an nn.Parameter, which the optimizer would also train) is "
        "part of state_dict(): every checkpoint stores the table, though d_head, max_seq_len and base give it back, "
        "and a checkpoint saved with another max_seq_len no longer loads. persistent=False keeps a buffer out of "
        "state_dict(); .to() still moves it.",
        detect=_saves_the_tables,
        fix='self.register_buffer("cos", angles.cos(), persistent=False), and the same for sin.',
        symptom="Your module's state_dict() holds tensors: every checkpoint of a model made with it would store them. "
        "Look at how the tables are registered.",
        always=True,
    ),
    Misconception(
        "the tables spoiled by module.to(...)",
        _rotary_reference,
        "module.to(dtype) casts every floating and complex buffer to dtype: a complex table (e^(i·m·theta_i), as in "
        "exercise 4) cast to a real dtype keeps its real parts, the cosines, and loses the sines, with only a warning "
        "(model.to(torch.bfloat16) does the same). Keep the cos and the sin as two real buffers. (Meta's Llama code "
        "keeps its complex table as a plain attribute instead, and moves it by hand.)",
        detect=_spoiled_by_to,
        fix='self.register_buffer("cos", angles.cos(), persistent=False) and the same for sin; in forward, rotate '
        "with the rows of both as in exercise 3.",
        symptom="After module.to(torch.float64), your module no longer gives the reference's numbers (on a float64 x "
        f"at positions {list(_INSIDE)}). Look at what .to() does to the tables your module keeps.",
        always=True,
    ),
    Misconception(
        "the result not in x's dtype",
        _rotary_reference,
        "The tables have their dtype, x has its own, and PyTorch gives a product the wider of the two: bfloat16 "
        "queries (a model's usual dtype) times float32 tables come out in float32, float32 ones times float64 tables "
        "in float64, which the next layer does not expect. Convert the rows you read to x's dtype (not to a fixed "
        "one) before multiplying.",
        detect=_not_in_x_dtype,
        fix="cos, sin = self.cos[positions].to(x.dtype), self.sin[positions].to(x.dtype).",
        symptom="Your result is not always in x's dtype: a float64 or a bfloat16 x through the module as built, or "
        "a float32 x through the module after module.to(torch.float64), comes back in another dtype. Look at the "
        "dtype of what you multiply x by.",
        always=True,
    ),
    Misconception(
        "a position past the table goes through",
        _rotary_reference,
        "A table of max_seq_len rows has no angle for a later position: a position clamped to the last row, wrapped "
        "around or read from rows that were never meant for it rotates its token by another position's angle, "
        "without a word. Refuse it with a ValueError.",
        detect=_goes_through,
        fix=_BOUND_FIX,
        symptom=f"Your module, built with max_seq_len={_PROBE_ROWS} (rows for positions 0 to {_PROBE_ROWS - 1}), "
        f"rotates positions {list(_AT_THE_END)} or {list(_BEYOND)} without an error. " + _BEFORE_READING,
        always=True,
    ),
    Misconception(
        "a position past the table left to torch's error",
        _rotary_reference,
        "Reading a row the table lacks fails with torch's IndexError about an index out of bounds, which does not tell "
        "the caller that the module was built too short (and on a GPU it is a device-side assert, which may be "
        "reported at a later line). Check the largest position against max_seq_len first, and raise a ValueError "
        "that gives both numbers.",
        detect=_other_error,
        fix=_BOUND_FIX,
        symptom=f"Given positions {list(_AT_THE_END)} or {list(_BEYOND)} with max_seq_len={_PROBE_ROWS}, your module "
        "fails, but not with a ValueError. " + _BEFORE_READING,
        always=True,
    ),
    Misconception(
        "the ValueError without its numbers",
        _rotary_reference,
        "Whoever meets the error needs to know by how much the table is too short: the largest position asked for and "
        "max_seq_len, so that they build the module with a larger max_seq_len, or find the position that ran away.",
        detect=_without_the_numbers,
        fix='raise ValueError(f"position {int(positions.max())} is past the table: max_seq_len={self.max_seq_len}").',
        symptom=f"For positions {list(_BEYOND)} with max_seq_len={_PROBE_ROWS}, the message of your ValueError does "
        f"not give both the largest position, {max(_BEYOND)}, and max_seq_len, {_PROBE_ROWS}. Look at the message.",
        always=True,
    ),
)


def _rotary_case(
    g: torch.Generator, lead: tuple[int, ...], d_head: int, max_seq_len: int, base: float, positions: list[int]
) -> dict[str, Any]:
    x = torch.randn(*lead, len(positions), d_head, generator=g)
    return {"d_head": d_head, "max_seq_len": max_seq_len, "base": base, "x": x, "positions": torch.tensor(positions)}


def _rotary_cases() -> list[Case]:
    g = torch.Generator().manual_seed(58)
    # No two axes of x, nor of a table (max_seq_len, d_head/2), have the same length; the positions start after 0,
    # jump in one case, and reach the table's last row in three.
    return [
        Case(
            (),
            _rotary_case(g, (), 8, 12, 10000.0, [5, 6, 7]),
            description="max_seq_len 12, x (seq=3, d_head=8), positions 5..7, base 10000",
        ),
        Case(
            (),
            _rotary_case(g, (2,), 6, 20, 100.0, [2, 7, 11, 19]),
            description="max_seq_len 20, x (2, seq=4, d_head=6), positions [2, 7, 11, 19], base 100",
        ),
        Case(
            (),
            _rotary_case(g, (1, 2), 8, 24, 10000.0, list(range(7, 24))),
            description="max_seq_len 24, x (1, 2, seq=17, d_head=8), positions 7..23, base 10000",
        ),
        # A token decoded at the table's last row.
        Case(
            (),
            _rotary_case(g, (2, 3), 10, 16, 500.0, [15]),
            description="max_seq_len 16, x (2, 3, 1, d_head=10), position 15, base 500",
        ),
    ]


def _draw_rotary(g: torch.Generator) -> list[Case]:
    def pick(low: int, high: int) -> int:
        return int(torch.randint(low, high + 1, (), generator=g))

    cases = []
    for lead in ((3,), (), (2, 2), (1, 3)):
        seq, d_head = pick(1, 8), 2 * pick(3, 6)
        positions = (pick(0, 30) + torch.randint(1, 4, (seq,), generator=g).cumsum(0)).tolist()
        max_seq_len = positions[-1] + 1 + pick(0, 4)
        base = float((10000.0, 500.0, 100.0)[pick(0, 2)])
        shape = (*lead, seq, d_head)
        case = {"d_head": d_head, "max_seq_len": max_seq_len, "base": base}
        case |= {"x": random_tensor(g, *shape), "positions": torch.tensor(positions)}
        text = f"max_seq_len {max_seq_len}, x {shape}, positions {positions}, base {base:g}"
        cases.append(Case((), case, description=text))
    return cases


def check_rotary_embedding(learner: Callable[..., torch.nn.Module], *, verbose: bool = True) -> CheckResult:
    """Check the learner's class ``MyRotaryEmbedding(d_head, max_seq_len, base=10000.0)``: an ``nn.Module`` that
    computes the cos and sin of the angles of positions ``0 .. max_seq_len - 1`` once, keeps them as buffers left out
    of ``state_dict()``, and whose ``forward(x (..., seq, d_head), positions (seq,))`` rotates the interleaved pairs of
    row j by ``positions[j] * theta_i`` from those tables, in x's dtype; a position of ``max_seq_len`` or more raises a
    ValueError that gives the largest position and ``max_seq_len``.

    Built for each of four cases and four drawn for the answer, it must give
    :func:`mhsa_helpers.teaching.mine.package_apply_rope`'s numbers; then probes, run on every answer, watch that
    forward computes no cosine or sine, that ``module.to(torch.float64)`` reaches every tensor it holds, that its
    ``state_dict()`` is empty, the dtype of its result, and positions past the table."""
    exercise = "rotary_embedding"
    if isinstance(learner, torch.nn.Module):
        result = CheckResult(
            exercise,
            "error",
            f"[{exercise}] not yet: you passed a module made from your class; pass the class itself, "
            f"{type(learner).__name__}: the checker builds it with other sizes for each case.",
        )
        if verbose:
            print(result.message)
        return result
    if not callable(learner):
        raise TypeError(f"learner must be a function or a class (your MyRotaryEmbedding), got {type(learner).__name__}")
    seed = answer_seed(learner)  # the learner's class, not the wrapper the checker calls: a changed class draws anew
    return check_function(
        exercise,
        _Rotating(learner),
        _rotary_reference,
        _rotary_cases(),
        ROTARY_MISCONCEPTIONS,
        shortcuts=("RotaryEmbedding", "apply_rotary"),
        draw=lambda _: _draw_rotary(torch.Generator().manual_seed(seed)),
        verbose=verbose,
    )


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
