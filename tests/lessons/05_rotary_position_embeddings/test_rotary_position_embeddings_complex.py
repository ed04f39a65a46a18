"""Notebook 05's exercise 4, RoPE as a complex multiplication (``check_apply_rope_complex``): the right answer is
accepted and is the rotation written out in real arithmetic (and Meta's Llama form); an answer without a complex
number is refused; each known slip is told by its symptom, then named."""

from __future__ import annotations

import math

import pytest
import torch

from mhsa_helpers.lessons.rotary_position_embeddings import check_apply_rope_complex
from mhsa_helpers.lessons.rotary_position_embeddings.exercises import COMPLEX_MISCONCEPTIONS


def angles_of(positions, d_head, base, *, exponent=2):
    """positions[j] * theta_i, (seq, d_head / 2), with theta_i = base ** (-exponent * i / d_head)."""
    theta = base ** (-exponent * torch.arange(d_head // 2, dtype=torch.float64) / d_head)
    return positions.double()[:, None] * theta


def complex_rope(x, positions, base=10000.0, *, pairs="adjacent", back="pairs", sign=1.0, polar="right", exponent=2):
    """The complex form, and each slip of it as a learner writes it."""
    if pairs == "adjacent":
        z = torch.view_as_complex(x.contiguous().unflatten(-1, (-1, 2)))
    else:  # the last axis split as (2, d/2), its 2 moved to the end: x[i] + i x[i + d/2]
        z = torch.view_as_complex(x.unflatten(-1, (2, -1)).transpose(-1, -2).contiguous())
    angles = sign * angles_of(positions, x.shape[-1], base, exponent=exponent)
    ones = torch.ones_like(angles)
    turns = torch.polar(ones, angles) if polar == "right" else torch.polar(angles, ones)
    rotated = z * turns.to(z.dtype)
    if back == "halves":
        return torch.cat((rotated.real, rotated.imag), dim=-1)
    if back == "transposed":
        return torch.view_as_real(rotated).transpose(-1, -2).flatten(-2)
    return torch.view_as_real(rotated).flatten(-2)


def real_rope(x, positions, base):
    """The recipe spelled out in real numbers: x'_2i = x_2i cos - x_2i+1 sin, x'_2i+1 = x_2i sin + x_2i+1 cos."""
    out = torch.empty_like(x, dtype=torch.float64)
    for j, m in enumerate(positions.tolist()):
        for i in range(x.shape[-1] // 2):
            c, s = math.cos(m * base ** (-2 * i / x.shape[-1])), math.sin(m * base ** (-2 * i / x.shape[-1]))
            a, b = x[..., j, 2 * i].double(), x[..., j, 2 * i + 1].double()
            out[..., j, 2 * i], out[..., j, 2 * i + 1] = a * c - b * s, a * s + b * c
    return out


def meta_llama_rope(x, positions, base):
    """Meta's precompute_freqs_cis and apply_rotary_emb, for x (..., seq, d_head): float32 inside, x's dtype out."""
    d = x.shape[-1]
    freqs = 1.0 / (base ** (torch.arange(0, d, 2)[: (d // 2)].float() / d))
    freqs_cis = torch.polar(torch.ones(len(positions), d // 2), torch.outer(positions.float(), freqs))
    x_ = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(x_ * freqs_cis).flatten(-2).type_as(x)


def test_the_right_answer_is_accepted_and_is_the_rotation_in_real_numbers():
    assert check_apply_rope_complex(complex_rope, verbose=False).correct
    x, positions = torch.randn(2, 3, 6, 8, dtype=torch.float64), torch.tensor([0, 4, 5, 9, 30, 31])
    torch.testing.assert_close(complex_rope(x, positions, 500.0), real_rope(x, positions, 500.0))
    x32 = x.float()
    torch.testing.assert_close(complex_rope(x32, positions, 500.0), meta_llama_rope(x32, positions, 500.0))


def test_an_answer_in_real_numbers_is_refused_though_its_numbers_are_right():
    result = check_apply_rope_complex(lambda x, positions, base=10000.0: real_rope(x, positions, base).to(x.dtype))
    assert result.status == "incorrect" and "without making a single complex number" in result.message


def test_pairs_apart_in_memory_stop_view_as_complex_at_the_transposed_case():
    def without_contiguous(x, positions, base=10000.0):
        z = torch.view_as_complex(x.unflatten(-1, (-1, 2)))  # x as it comes, its pairs wherever they lie
        angles = angles_of(positions, x.shape[-1], base)
        return torch.view_as_real(z * torch.polar(torch.ones_like(angles), angles).to(z.dtype)).flatten(-2)

    result = check_apply_rope_complex(without_contiguous, verbose=False)
    assert result.status == "error" and "stride 1" in result.message and "transposing" in result.message


def test_multipliers_in_complex128_for_float32_inputs_are_told_the_dtype():
    def float64_turns(x, positions, base=10000.0):
        z = torch.view_as_complex(x.contiguous().unflatten(-1, (-1, 2)))
        angles = angles_of(positions, x.shape[-1], base)
        return torch.view_as_real(z * torch.polar(torch.ones_like(angles), angles)).flatten(-2)

    result = check_apply_rope_complex(float64_turns, verbose=False)
    assert result.status == "incorrect" and "returned dtype torch.float64 for torch.float32 inputs" in result.message


@pytest.mark.parametrize(
    ("slip", "symptom", "name"),
    [
        ({"pairs": "halves"}, "rows hold rotations of other pairs",
         "the halves paired into complex numbers, written back as adjacent pairs"),
        ({"pairs": "halves", "back": "transposed"}, "turns other pairs of features",
         "the halves paired into complex numbers (half-split)"),
        ({"back": "halves"}, "right ones in the wrong places", "real and imaginary parts written back as two halves"),
        ({"sign": -1.0}, "the opposite sign", "rotated the wrong way (the conjugate)"),
        ({"polar": "swapped"}, "longer or shorter", "torch.polar's arguments swapped"),
        ({"exponent": 1}, "every later pair turns faster", "frequencies with exponent -i/d"),
    ],
    ids=["halves", "half-split", "cat", "conjugate", "polar", "i over d"],
)  # fmt: skip
def test_a_known_slip_is_told_by_its_symptom_then_named(slip, symptom, name):
    def answer(x, positions, base=10000.0):
        return complex_rope(x, positions, base, **slip)

    first = check_apply_rope_complex(answer, verbose=False)
    assert not first.correct and symptom in first.message and name not in first.message, first.message
    assert check_apply_rope_complex(answer, verbose=False).misconception == name


def test_positions_counted_from_zero_are_told_then_named():
    def answer(x, positions, base=10000.0):
        return complex_rope(x, torch.arange(x.shape[-2]), base)

    first = check_apply_rope_complex(answer, verbose=False)
    assert "right only where the positions start at 0" in first.message
    assert check_apply_rope_complex(answer, verbose=False).misconception == "positions ignored: counted from 0"


def test_multipliers_of_another_length_are_named_by_what_they_do():
    def real_exponential(x, positions, base=10000.0):  # e^angle, the i forgotten
        z = torch.view_as_complex(x.contiguous().unflatten(-1, (-1, 2)))
        return torch.view_as_real(z * angles_of(positions, x.shape[-1], base).exp().to(z.dtype)).flatten(-2)

    first = check_apply_rope_complex(real_exponential, verbose=False)
    assert "longer or shorter" in first.message and "length is not 1" not in first.message
    named = check_apply_rope_complex(real_exponential, verbose=False)
    assert named.misconception == "multiplied by numbers whose length is not 1"


def test_every_named_mistake_has_a_symptom_and_a_fix():
    assert all(m.symptom and m.fix for m in COMPLEX_MISCONCEPTIONS)
    assert len({m.name for m in COMPLEX_MISCONCEPTIONS}) == len(COMPLEX_MISCONCEPTIONS)


def test_a_call_without_base_must_use_10000():
    def other_default(x, positions, base=500.0):
        return complex_rope(x, positions, base)

    result = check_apply_rope_complex(other_default, verbose=False)
    assert not result.correct and "called without one (my_apply_rope_complex(x, positions))" in result.message


def test_the_learners_error_is_told_even_when_torch_had_taken_the_watch_off_its_stack():
    """What the checker's time limit can leave behind: its alarm lands where torch has popped the watching mode
    for a moment, so leaving the watch finds nothing to pop. The learner hears their own stop, not torch's."""

    def answer(x, positions, base=10000.0):
        torch._C._pop_torch_function_stack()  # the watch, gone from the stack as the alarm would leave it
        raise ValueError("stopped here")

    result = check_apply_rope_complex(answer, verbose=False)
    assert result.status == "error"
    assert "your function raised ValueError" in result.message
    assert "checker itself failed" not in result.message
