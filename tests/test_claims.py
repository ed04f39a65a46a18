"""The notebooks' claim helpers print a check mark for a true statement and raise for a false one."""

import numpy as np
import pytest
import torch

from mhsa_helpers.teaching.claims import ClaimError, claim, claim_close


def test_true_claim_prints_the_statement_with_a_check_mark(capsys):
    claim("two is larger than one", 2 > 1)
    claim("every weight is positive", (torch.tensor([0.2, 0.8]) > 0).all())
    claim("numpy agrees", np.float64(1.0) == 1.0)
    assert capsys.readouterr().out.splitlines() == [
        "✓ two is larger than one",
        "✓ every weight is positive",
        "✓ numpy agrees",
    ]


def test_false_claim_raises_naming_the_statement(capsys):
    with pytest.raises(ClaimError, match="not true: one is larger than two"):
        claim("one is larger than two", 1 > 2)
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("holds", [torch.tensor([True, False]), 1, "yes", None])
def test_claim_refuses_anything_but_one_truth_value(holds):
    with pytest.raises(TypeError, match="holds must be"):
        claim("a statement", holds)


def test_claim_needs_a_sentence():
    with pytest.raises(TypeError, match="statement"):
        claim("  ", True)


def test_claim_close_reports_the_largest_difference(capsys):
    claim_close("the sums match", torch.tensor([1.0, 2.0]), [1.0, 2.0 + 1e-9])
    out = capsys.readouterr().out
    assert out.startswith("✓ the sums match (largest difference ")
    assert float(out.split("difference ")[1].rstrip(")\n")) == pytest.approx(1e-9, rel=0.1)


def test_claim_close_raises_with_the_difference_and_the_tolerance():
    with pytest.raises(ClaimError, match=r"largest difference 0\.5, tolerance atol=0\.01"):
        claim_close("they match", torch.tensor([1.0, 2.5]), torch.tensor([1.0, 2.0]), atol=0.01, rtol=0.0)


def test_claim_close_compares_shapes_and_nans():
    with pytest.raises(ClaimError, match=r"shape \(2,\) where \(3,\) was expected"):
        claim_close("same length", torch.zeros(2), torch.zeros(3))
    claim_close("NaN where expected", torch.tensor([float("nan"), 1.0]), [float("nan"), 1.0])
    with pytest.raises(ClaimError):
        claim_close("no NaN", torch.tensor([float("nan"), 1.0]), [0.0, 1.0])
