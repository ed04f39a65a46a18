"""The ``expect_*`` argument checks (mhsa_helpers/checks.py): edges that mutation testing
(``make mutate``) showed unpinned.

Each check must accept exactly what its docstring promises and refuse the rest with the right
exception, in a message that names the argument, what was expected and the value given. The
messages are compared whole: a learner reads them, so their wording is behaviour.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from pinning import raises

from mhsa_helpers import checks

META = torch.device("meta")


# expect_tensor / expect_floating / expect_integer_tensor / expect_matrix ---------------------------


def test_expect_tensor_returns_the_same_tensor_and_accepts_exactly_min_ndim():
    x = torch.zeros(2, 3)
    assert checks.expect_tensor("x", x) is x
    assert checks.expect_tensor("x", x, min_ndim=2) is x
    assert checks.expect_tensor("s", torch.tensor(1.0)) is not None  # a 0-d tensor by default


def test_expect_tensor_messages():
    with raises(TypeError, "x must be a torch.Tensor, got list"):
        checks.expect_tensor("x", [1.0, 2.0])
    with raises(ValueError, "x must have at least 3 dimensions (batch, seq, d), got shape (2, 3)"):
        checks.expect_tensor("x", torch.zeros(2, 3), min_ndim=3, shape="(batch, seq, d)")


def test_expect_floating_accepts_every_float_dtype_and_refuses_integers():
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        x = torch.zeros(2, dtype=dtype)
        assert checks.expect_floating("x", x, min_ndim=1) is x
    with raises(
        TypeError,
        "q must have a floating-point dtype (float16, bfloat16, float32 or float64), got dtype torch.int64",
    ):
        checks.expect_floating("q", torch.zeros(2, 3, dtype=torch.long))
    with raises(TypeError, "q must be a torch.Tensor, got float"):
        checks.expect_floating("q", 1.5)


def test_by_default_any_number_of_dimensions_and_no_shape_description():
    scalar = torch.tensor(1.0)
    assert checks.expect_tensor("s", scalar) is scalar
    assert checks.expect_floating("s", scalar) is scalar
    # Without ``shape`` nothing stands between "dimensions" and the comma.
    for check in (checks.expect_tensor, checks.expect_floating):
        with pytest.raises(ValueError, match=r"^x must have at least 2 dimensions, got shape \(3,\)$"):
            check("x", torch.zeros(3), min_ndim=2)


def test_expect_floating_passes_min_ndim_and_shape_on():
    with raises(ValueError, "q must have at least 2 dimensions (seq, d), got shape (4,)"):
        checks.expect_floating("q", torch.zeros(4), min_ndim=2, shape="(seq, d)")


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64, torch.bool])
def test_expect_integer_tensor_refuses_non_integers(dtype):
    with raises(TypeError, f"lengths must be an integer tensor of token counts, got dtype {dtype}"):
        checks.expect_integer_tensor("lengths", torch.zeros(3, dtype=dtype), " of token counts")


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8])
def test_expect_integer_tensor_accepts_integers(dtype):
    t = torch.zeros(3, dtype=dtype)
    assert checks.expect_integer_tensor("positions", t) is t


def test_expect_integer_tensor_default_what_is_empty():
    with raises(TypeError, "ids must be an integer tensor, got dtype torch.float32"):
        checks.expect_integer_tensor("ids", torch.zeros(2))
    with raises(TypeError, "ids must be a torch.Tensor, got list"):
        checks.expect_integer_tensor("ids", [1, 2])


def test_expect_matrix():
    w = torch.zeros(3, 4)
    assert checks.expect_matrix("w", w) is w
    with raises(ValueError, "w must be a 2-D matrix, got shape (3,)"):
        checks.expect_matrix("w", torch.zeros(3))
    with raises(ValueError, "w must be a 2-D (d_out, d_in) matrix, got shape (1, 3, 4)"):
        checks.expect_matrix("w", torch.zeros(1, 3, 4), "(d_out, d_in) matrix")
    with pytest.raises(TypeError, match=r"^w must have a floating-point dtype"):
        checks.expect_matrix("w", torch.zeros(3, 4, dtype=torch.long))


def test_expect_shape():
    b = torch.zeros(4)
    assert checks.expect_shape("bias", b, (4,)) is b
    assert checks.expect_shape("bias", b, (4,), torch.float32) is b
    assert checks.expect_shape("bias", b.double(), (4,)) is not None  # no dtype asked: any float
    with raises(ValueError, "bias must have shape (5,), got shape (4,)"):
        checks.expect_shape("bias", b, (5,))
    with raises(TypeError, "bias must have the dtype of x (torch.float64), got torch.float32"):
        checks.expect_shape("bias", b, (4,), torch.float64)
    with pytest.raises(TypeError, match=r"^bias must have a floating-point dtype"):
        checks.expect_shape("bias", torch.zeros(4, dtype=torch.long), (4,))


def test_expect_dtype_of():
    k = torch.zeros(2, dtype=torch.float64)
    checks.expect_dtype_of("k", k, "q", torch.zeros(2, dtype=torch.float64))  # returns None, raises nothing
    with raises(TypeError, "k must have the same dtype as q (torch.float32), got torch.float64"):
        checks.expect_dtype_of("k", k, "q", torch.zeros(2))


# broadcasting ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shapes", "expected"),
    [
        (((2, 3),), (2, 3)),
        (((2, 3), (2, 3)), (2, 3)),
        (((1, 3), (2, 1)), (2, 3)),
        (((3,), (2, 1)), (2, 3)),
        (((4, 1, 5), (3, 1), (5,)), (4, 3, 5)),
        (((1,), (1, 1)), (1, 1)),
        (((1, 3), (1, 1)), (1, 3)),
        (((1, 1), (1,)), (1, 1)),
        (((2, 3), (3, 3)), None),
        (((2,), (3,), (1,)), None),
        (((2, 1), (1, 3), (4, 3)), None),
    ],
)
def test_broadcast_shape_agrees_with_numpy(shapes, expected):
    assert checks.broadcast_shape(*shapes) == expected
    try:
        numpy_shape = np.broadcast_shapes(*shapes)
    except ValueError:
        numpy_shape = None
    assert numpy_shape == expected


@pytest.mark.parametrize("shape", [(3, 4), (4,), (1, 4), (3, 1), (1,), (), (1, 1)])
def test_expect_broadcastable_accepts_what_keeps_the_target_shape(shape):
    assert checks.expect_broadcastable("m", torch.zeros(shape), (3, 4), "target") is None


@pytest.mark.parametrize("shape", [(1, 3, 4), (2, 4), (3, 2), (4, 3), (5,)])
def test_expect_broadcastable_refuses_what_grows_or_mismatches(shape):
    message = f"m must be broadcastable to (seq_q, seq_k) = (3, 4), got shape {shape}"
    with raises(ValueError, message):
        checks.expect_broadcastable("m", torch.zeros(shape), (3, 4), "(seq_q, seq_k)")


def test_expect_mask():
    mask = torch.ones(3, 4, dtype=torch.bool)
    assert checks.expect_mask("mask", mask, (2, 3, 4), "scores") is mask
    assert checks.expect_mask("mask", mask, (3, 4), "scores", device=torch.device("cpu")) is mask
    with raises(
        TypeError,
        "mask must be a boolean tensor where True means 'may attend', got dtype torch.int64; "
        "convert a 0/1 mask with mask.bool(), or a 'True = blocked' mask with ~mask",
    ):
        checks.expect_mask("mask", torch.ones(3, 4, dtype=torch.long), (3, 4), "scores")
    with raises(ValueError, "mask must be broadcastable to scores = (3, 4), got shape (4, 3)"):
        checks.expect_mask("mask", torch.ones(4, 3, dtype=torch.bool), (3, 4), "scores")
    with raises(
        ValueError,
        "mask must be on the device of the tensors it masks (meta), got device cpu; move it with .to('meta')",
    ):
        checks.expect_mask("mask", mask, (3, 4), "scores", device=META)
    with raises(TypeError, "mask must be a torch.Tensor, got NoneType"):
        checks.expect_mask("mask", None, (3, 4), "scores")


# numbers ---------------------------------------------------------------------------------------------


def test_expect_int_accepts_ints_and_numpy_ints_as_int():
    assert checks.expect_int("n", 1) == 1
    value = checks.expect_int("n", np.int64(7))
    assert value == 7 and type(value) is int
    assert checks.expect_int("n", 0, low=0) == 0
    assert checks.expect_int("n", 5, low=2, high=5) == 5
    assert checks.expect_int("n", 2, low=2, high=5) == 2


def test_expect_int_messages():
    with raises(TypeError, "n must be an int, got bool True (expected >= 1)"):
        checks.expect_int("n", True)
    with raises(TypeError, "n must be an int, got float 2.0 (expected in [0, 4] (one of the heads))"):
        checks.expect_int("n", 2.0, low=0, high=4, why=" (one of the heads)")
    with raises(ValueError, "n must be >= 1, got 0"):
        checks.expect_int("n", 0)
    with raises(ValueError, "n must be >= 2 (a pair), got 1"):
        checks.expect_int("n", 1, low=2, why=" (a pair)")
    with raises(ValueError, "n must be in [0, 4], got 5"):
        checks.expect_int("n", 5, low=0, high=4)
    with raises(ValueError, "n must be in [0, 4], got -1"):
        checks.expect_int("n", -1, low=0, high=4)


def test_expect_number_accepts_numbers_as_float():
    for value in (1, 1.5, np.int32(1), np.float32(0.5)):
        result = checks.expect_number("p", value)
        assert result == float(value) and type(result) is float
    assert checks.expect_number("p", 0.0, 0.0, 1.0) == 0.0  # closed bounds include their ends
    assert checks.expect_number("p", 1.0, 0.0, 1.0) == 1.0
    assert checks.expect_number("p", -1e300) == -1e300  # no bounds


@pytest.mark.parametrize(
    ("value", "kwargs", "kind", "message"),
    [
        (True, {"low": 0.0}, TypeError, "p must be a number >= 0, got bool True"),
        ("0.1", {}, TypeError, "p must be a number, got str '0.1'"),
        ("0.1", {"low": 0.0, "open_low": True}, TypeError, "p must be a number > 0, got str '0.1'"),
        (
            None,
            {"low": 0.0, "high": 1.0, "open_high": True, "why": " (a probability)"},
            TypeError,
            "p must be a number in [0, 1) (a probability), got NoneType None",
        ),
        (1.0, {"low": 0.0, "high": 1.0, "open_high": True}, ValueError, "p must be in [0, 1), got p=1.0"),
        (0.0, {"low": 0.0, "open_low": True}, ValueError, "p must be a finite number > 0, got p=0.0"),
        (-0.5, {"low": 0.0}, ValueError, "p must be a finite number >= 0, got p=-0.5"),
        (2.0, {"high": 1.0}, ValueError, "p must be in [-inf, 1], got p=2.0"),
        (0.0, {"low": 0.0, "high": 1.0, "open_low": True}, ValueError, "p must be in (0, 1], got p=0.0"),
        (math.inf, {}, ValueError, "p must be a finite number, got p=inf"),
        (math.nan, {"low": 0.0, "high": 1.0}, ValueError, "p must be in [0, 1], got p=nan"),
        (-math.inf, {"why": " (a scale)"}, ValueError, "p must be a finite number (a scale), got p=-inf"),
    ],
)
def test_expect_number_refusals(value, kwargs, kind, message):
    with raises(kind, message):
        checks.expect_number("p", value, **kwargs)


def test_expect_number_open_ends_accept_inside_values():
    assert checks.expect_number("p", 0.5, 0.0, 1.0, open_low=True, open_high=True) == 0.5
    assert checks.expect_number("p", 1.0, 0.0, 1.0, open_low=True) == 1.0
    assert checks.expect_number("p", 0.0, 0.0, 1.0, open_high=True) == 0.0


def test_expect_bool():
    assert checks.expect_bool("causal", True) is True
    assert checks.expect_bool("causal", False) is False
    value = checks.expect_bool("causal", np.bool_(True))
    assert value is True
    with raises(TypeError, "causal must be True or False, got int 1"):
        checks.expect_bool("causal", 1)
    with raises(TypeError, "causal must be True or False, got str 'no'"):
        checks.expect_bool("causal", "no")


def test_expect_choice():
    assert checks.expect_choice("kind", "b", ["a", "b"]) == "b"
    with raises(ValueError, "kind must be one of 'a', 'b', got 'c'"):
        checks.expect_choice("kind", "c", ["a", "b"])
    with raises(ValueError, "kind must be one of 'a', 'b', got 1"):
        checks.expect_choice("kind", 1, ["a", "b"])


def test_expect_divisible():
    assert checks.expect_divisible("d_model", 12, "num_heads", 4) == 3
    assert checks.expect_divisible("d_model", 12, "num_heads", 12) == 1
    with raises(
        ValueError,
        "num_heads must divide d_model: expected d_model % num_heads == 0, got d_model=10, num_heads=4",
    ):
        checks.expect_divisible("d_model", 10, "num_heads", 4)
    with raises(
        ValueError,
        "3 * num_heads must divide x: expected x % (3 * num_heads) == 0, got x=10, 3 * num_heads=6",
    ):
        checks.expect_divisible("x", 10, "3 * num_heads", 6)
