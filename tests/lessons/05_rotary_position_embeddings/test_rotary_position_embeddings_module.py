"""The learner's own my_apply_rope of notebook 05, its checker and the score prediction.

The learner's pieces here are written out as a learner would write them; ``MIDDLE_WRONG`` lists the wrong
ones with the misconception each checker must name.
"""

from __future__ import annotations

import pytest
import torch
from test_wrong_answers import Wrong

from mhsa_helpers.lessons.rotary_position_embeddings import check_apply_rope, check_score_prediction


def rotate(x, positions, base=10000.0, *, half_split=False):
    d = x.shape[-1]
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = positions.to(torch.float64)[:, None] * theta
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    if half_split:
        a, b = x[..., : d // 2], x[..., d // 2 :]
        return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)


def my_apply_rope(x, positions, base=10000.0):
    return rotate(x, positions, base)


MIDDLE_WRONG = [
    Wrong(check_score_prediction, "the score moves", lambda: 0.0, named="moving the tokens changes the score"),
]


@pytest.mark.parametrize("wrong", MIDDLE_WRONG, ids=lambda w: f"{w.checker.__name__}: {w.name}")
def test_the_learners_slips_are_rejected_and_named(wrong):
    result = wrong.checker(wrong.function, verbose=False)
    assert result.status not in ("correct", "not_attempted"), result.message
    if wrong.named is not None:
        assert result.misconception == wrong.named, result.message
    for words in wrong.says:
        assert words in result.message, result.message


def test_the_right_prediction_is_accepted():
    assert check_score_prediction(1.25, verbose=False).correct


@pytest.mark.parametrize("checker", [check_score_prediction])
def test_an_empty_prediction_is_not_attempted(checker):
    assert checker(None, verbose=False).status == "not_attempted"
    assert "replace None" in checker(None, verbose=False).message


def test_apply_rope_must_default_to_base_10000():
    def without_default(x, positions, base):
        return rotate(x, positions, base)

    def other_default(x, positions, base=500.0):
        return rotate(x, positions, base)

    assert check_apply_rope(my_apply_rope, verbose=False).correct
    for answer in (without_default, other_default):
        result = check_apply_rope(answer, verbose=False)
        assert not result.correct and "base=10000.0" in result.message
