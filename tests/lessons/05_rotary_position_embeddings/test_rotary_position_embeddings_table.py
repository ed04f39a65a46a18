"""Notebook 05's exercise 5, the angle table computed once (``check_rotary_embedding``): the right module is accepted
and gives the recipe's numbers (spelled out, and Meta's Llama formula); each known slip is told by its symptom, then
named: the wrong rows read, other pairs, and the properties the numbers cannot show (cos and sin computed in forward,
tables that ``.to()`` does not reach, spoils or that ``state_dict()`` holds, a result in another dtype, a position
past the table let through or refused with the wrong error or message)."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from torch import nn

from mhsa_helpers.lessons.rotary_position_embeddings import check_rotary_embedding
from mhsa_helpers.lessons.rotary_position_embeddings.exercises import ROTARY_MISCONCEPTIONS


class Table(nn.Module):
    """The module as the exercise asks for it; a subclass changes one of the class attributes to make a slip."""

    keep = "buffers"  # or "persistent", "parameters", "plain"
    rows = "positions"  # or "first" (rows 0 .. seq-1), "consecutive" (from positions[0] on)
    pairs = "adjacent"  # or "halves"
    cast = "x"  # or "none", "float32"
    bound = "value_error"  # or "none", "clamp", "mute" (a ValueError without numbers), "early" (refuses the last row)
    recompute = False  # cos and sin computed in forward, from the positions
    frequencies = "2i/d"  # or "i/d", "positive", "from pair 1", "one" (pair 0's for every pair)
    first_row = 0  # the table's first row is this position
    sign = 1.0  # -1.0: rotated the wrong way
    back = "in place"  # or "halves": the rotated pairs written back as [all first members | all second members]

    def __init__(self, d_head, max_seq_len, base=10000.0):
        super().__init__()
        self.max_seq_len = max_seq_len
        two_i = torch.arange(0, d_head, 2, dtype=torch.float64)
        theta = {
            "2i/d": base ** (-two_i / d_head),
            "i/d": base ** (-two_i / 2 / d_head),
            "positive": base ** (two_i / d_head),
            "from pair 1": base ** (-(two_i + 2) / d_head),
            "one": torch.ones_like(two_i),
        }[self.frequencies]
        rows = torch.arange(self.first_row, self.first_row + max_seq_len, dtype=torch.float64)
        angles = torch.outer(rows, theta)
        cos, sin = angles.cos().float(), self.sign * angles.sin().float()
        self.register_buffer("theta", theta, persistent=False)
        if self.keep == "buffers":
            self.register_buffer("cos", cos, persistent=False)
            self.register_buffer("sin", sin, persistent=False)
        elif self.keep == "persistent":
            self.register_buffer("cos", cos)
            self.register_buffer("sin", sin)
        elif self.keep == "parameters":
            self.cos, self.sin = nn.Parameter(cos, requires_grad=False), nn.Parameter(sin, requires_grad=False)
        else:
            self.cos, self.sin = cos, sin

    def forward(self, x, positions):
        top = int(positions.max())
        if self.bound == "early" and top >= self.max_seq_len - 1:
            raise ValueError(f"position {top} too large for max_seq_len={self.max_seq_len}")
        if self.bound == "value_error" and top >= self.max_seq_len:
            raise ValueError(f"position {top} is past the table: max_seq_len={self.max_seq_len}")
        if self.bound == "mute" and top >= self.max_seq_len:
            raise ValueError("a position is too large")
        if self.bound == "clamp":
            positions = positions.clamp(max=self.max_seq_len - 1)
        seq = x.shape[-2]
        rows = {"positions": positions, "first": torch.arange(seq), "consecutive": positions[0] + torch.arange(seq)}
        rows = rows[self.rows]
        if self.recompute:
            angles = torch.outer(rows.double(), self.theta)
            cos, sin = angles.cos(), angles.sin()
        else:
            cos, sin = self.cos[rows], self.sin[rows]
        if self.cast == "x":
            cos, sin = cos.to(x.dtype), sin.to(x.dtype)
        elif self.cast == "float32":
            cos, sin = cos.float(), sin.float()
        if self.pairs == "halves":
            first, second = x.chunk(2, dim=-1)
            return torch.cat((first * cos - second * sin, first * sin + second * cos), dim=-1)
        first, second = x[..., 0::2], x[..., 1::2]
        if self.back == "halves":
            return torch.cat((first * cos - second * sin, first * sin + second * cos), dim=-1)
        return torch.stack((first * cos - second * sin, first * sin + second * cos), dim=-1).flatten(-2)


def slip(**changes):
    return type("Slip", (Table,), changes)


def spelled_out(x, positions, base):
    """The recipe in plain numbers: x'_2i = x_2i cos - x_2i+1 sin, x'_2i+1 = x_2i sin + x_2i+1 cos, at m theta_i."""
    out = torch.empty_like(x, dtype=torch.float64)
    d = x.shape[-1]
    for j, m in enumerate(positions.tolist()):
        for i in range(d // 2):
            c, s = math.cos(m * base ** (-2 * i / d)), math.sin(m * base ** (-2 * i / d))
            a, b = x[..., j, 2 * i].double(), x[..., j, 2 * i + 1].double()
            out[..., j, 2 * i], out[..., j, 2 * i + 1] = a * c - b * s, a * s + b * c
    return out


def meta_llama(x, positions, base, max_seq_len):
    """Meta's precompute_freqs_cis, once, and apply_rotary_emb on the rows of the positions: float32 inside."""
    d = x.shape[-1]
    freqs = 1.0 / (base ** (torch.arange(0, d, 2)[: (d // 2)].float() / d))
    freqs_cis = torch.polar(torch.ones(max_seq_len, d // 2), torch.outer(torch.arange(max_seq_len).float(), freqs))
    x_ = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(x_ * freqs_cis[positions]).flatten(-2).type_as(x)


def test_the_right_module_is_accepted_and_gives_the_recipes_numbers():
    assert check_rotary_embedding(Table, verbose=False).correct
    x, positions = torch.randn(2, 3, 6, 8, dtype=torch.float64), torch.tensor([0, 4, 5, 9, 30, 31])
    rope = Table(8, 32, 500.0)
    torch.testing.assert_close(rope(x, positions), spelled_out(x, positions, 500.0), atol=1e-6, rtol=1e-5)
    x32 = x.float()
    torch.testing.assert_close(rope(x32, positions), meta_llama(x32, positions, 500.0, 32))


@pytest.mark.parametrize(
    ("changes", "symptom", "name"),
    [
        ({"rows": "first"}, "right only where the positions are 0, 1, 2", "positions ignored: the first seq rows read"),
        ({"rows": "consecutive"}, "wrong where they jump", "positions taken as consecutive from the first"),
        ({"pairs": "halves"}, "turns other pairs of features", "wrong pairing convention (half-split)"),
        ({"back": "halves"}, "right ones in the wrong places",
         "rotated pairs written back as two halves (cat instead of interleaving)"),
        ({"first_row": 1}, "turned further than the reference's", "positions shifted by one"),
        ({"sign": -1.0}, "the opposite sign", "rotated the wrong way"),
        ({"frequencies": "one"}, "all your pairs turn by the same angle", "same frequency for every pair"),
        ({"frequencies": "i/d"}, "every later pair turns faster", "frequencies with exponent -i/d"),
        ({"frequencies": "positive"}, "spin ever faster", "frequencies with a positive exponent"),
        ({"frequencies": "from pair 1"}, "at the speed of the pair after it", "frequencies counted from pair 1"),
        ({"recompute": True}, "it computes cosines or sines", "the table computed again at every call"),
        ({"keep": "plain"}, "leaves some of your module's tensors as they were",
         "the tables kept as plain tensor attributes"),
        ({"keep": "persistent"}, "state_dict() holds tensors", "the tables saved in the state_dict"),
        ({"keep": "parameters"}, "state_dict() holds tensors", "the tables saved in the state_dict"),
        ({"cast": "none"}, "not always in x's dtype", "the result not in x's dtype"),
        ({"cast": "float32"}, "not always in x's dtype", "the result not in x's dtype"),
        ({"bound": "clamp"}, "without an error", "a position past the table goes through"),
        ({"bound": "none"}, "fails, but not with a ValueError", "a position past the table left to torch's error"),
        ({"bound": "mute"}, "does not give both the largest position, 13, and max_seq_len, 10",
         "the ValueError without its numbers"),
    ],
    ids=["first rows", "consecutive", "half-split", "cat", "shifted", "wrong way", "one frequency", "i over d",
         "positive", "from pair 1", "recomputed", "plain", "persistent", "parameters", "no cast",
         "float32", "clamped", "IndexError", "no numbers"],
)  # fmt: skip
def test_a_known_slip_is_told_by_its_symptom_then_named(changes, symptom, name):
    module = slip(**changes)
    first = check_rotary_embedding(module, verbose=False)
    assert not first.correct and symptom in first.message and name not in first.message, first.message
    assert check_rotary_embedding(module, verbose=False).misconception == name


def test_a_refusal_of_the_last_row_is_told_with_the_numbers():
    result = check_rotary_embedding(slip(bound="early"), verbose=False)
    assert result.status == "incorrect", result.message
    assert "forward raised ValueError (position 19 too large for max_seq_len=20)" in result.message
    assert "a row for every position from 0 to 19, so only a position of 20 or more is past it" in result.message


def test_the_stub_is_not_attempted_and_an_error_in_init_is_told_at_its_line():
    class Stub(nn.Module):
        def __init__(self, d_head, max_seq_len, base=10000.0):
            super().__init__()
            raise NotImplementedError  # your code here

        def forward(self, x, positions):
            raise NotImplementedError

    assert check_rotary_embedding(Stub, verbose=False).status == "not_attempted"

    class Typo(Table):
        def __init__(self, d_head, max_seq_len, base=10000.0):
            super().__init__(d_head, max_seq_len, base)
            self.half = self.cos.tranpose(0, 1)

    result = check_rotary_embedding(Typo, verbose=False)
    assert result.status == "error" and "AttributeError" in result.message
    assert "(in __init__, line" in result.message and "self.cos.tranpose(0, 1)" in result.message


def test_a_module_made_from_the_class_is_turned_back_and_a_non_class_refused():
    result = check_rotary_embedding(Table(8, 16), verbose=False)
    assert result.status == "error" and "pass the class itself, Table" in result.message
    with pytest.raises(TypeError, match="learner must be a function or a class"):
        check_rotary_embedding("MyRotaryEmbedding", verbose=False)


def test_a_complex_table_that_module_to_spoils_is_told_then_named():
    class ComplexTable(nn.Module):  # Meta's freqs_cis as a buffer: module.to(torch.float64) keeps only its real part
        def __init__(self, d_head, max_seq_len, base=10000.0):
            super().__init__()
            self.max_seq_len = max_seq_len
            theta = base ** (-torch.arange(0, d_head, 2, dtype=torch.float64) / d_head)
            angles = torch.outer(torch.arange(max_seq_len, dtype=torch.float64), theta)
            self.register_buffer("freqs_cis", torch.polar(torch.ones_like(angles), angles).cfloat(), persistent=False)

        def forward(self, x, positions):
            if int(positions.max()) >= self.max_seq_len:
                raise ValueError(f"position {int(positions.max())} is past the table: max_seq_len={self.max_seq_len}")
            z = torch.view_as_complex(x.float().contiguous().unflatten(-1, (-1, 2)))
            return torch.view_as_real(z * self.freqs_cis[positions]).flatten(-2).type_as(x)

    with warnings.catch_warnings():
        # Casting the complex table to float64 discards its imaginary part, with a warning (given once per process).
        warnings.simplefilter("ignore", UserWarning)
        first = check_rotary_embedding(ComplexTable, verbose=False)
        named = check_rotary_embedding(ComplexTable, verbose=False)
    assert "after module.to(torch.float64), your module no longer gives the reference's numbers" in first.message
    assert named.misconception == "the tables spoiled by module.to(...)"


def test_writing_into_x_is_named_with_its_name():
    class IntoX(Table):
        def forward(self, x, positions):
            out = super().forward(x, positions)
            x.mul_(2)
            return out

    result = check_rotary_embedding(IntoX, verbose=False)
    assert result.misconception == "changed an argument in place" and "argument `x`" in result.message


def test_every_named_mistake_has_a_symptom_and_a_fix():
    assert all(m.symptom and m.fix for m in ROTARY_MISCONCEPTIONS)
    assert len({m.name for m in ROTARY_MISCONCEPTIONS}) == len(ROTARY_MISCONCEPTIONS)
