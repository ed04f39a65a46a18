"""Notebook 03's exercise 5, the padding mask (``check_padding_mask``): the right mask is accepted, and is the mask
PyTorch's ``key_padding_mask`` means (with its polarity flipped); each known slip is told by its symptom, then
named."""

from __future__ import annotations

import pytest
import torch

from mhsa_helpers.lessons.causal_masking import check_padding_mask


def right(lengths, seq_len):
    return (torch.arange(seq_len) < lengths[:, None])[:, None, None, :]


def test_the_right_mask_is_accepted_and_hides_the_keys_pytorch_hides():
    assert check_padding_mask(right, verbose=False).correct
    torch.manual_seed(0)
    attention = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    x, lengths = torch.randn(2, 5, 8), torch.tensor([5, 3])
    _, theirs = attention(x, x, x, key_padding_mask=torch.arange(5) >= lengths[:, None], average_attn_weights=False)
    q, k = (
        torch.nn.functional.linear(x, w, b)
        for w, b in zip(attention.in_proj_weight.chunk(3)[:2], attention.in_proj_bias.chunk(3)[:2], strict=True)
    )
    scores = q.view(2, 5, 2, 4).transpose(1, 2) @ k.view(2, 5, 2, 4).transpose(1, 2).transpose(-2, -1) / 2
    mine = torch.softmax(scores.masked_fill(~right(lengths, 5), float("-inf")), dim=-1)
    torch.testing.assert_close(mine, theirs)


@pytest.mark.parametrize(
    ("wrong", "symptom", "name"),
    [
        (lambda lengths, n: torch.arange(n) < lengths[:, None], "the right values and too few axes",
         "the mask has no axes for the heads and the queries"),
        (lambda lengths, n: ~right(lengths, n), "True exactly where it should be False", "True on the padding"),
        (lambda lengths, n: (torch.arange(n) <= lengths[:, None])[:, None, None, :], "keeps one key more",
         "one key too many"),
        (lambda lengths, n: (torch.arange(n) < lengths[:, None])[:, None, :, None], "runs along the queries' axis",
         "the lengths laid along the queries"),
    ],
    ids=["flat", "polarity", "off by one", "queries"],
)  # fmt: skip
def test_a_known_slip_is_told_by_its_symptom_then_named(wrong, symptom, name):
    def answer(lengths, seq_len):
        return wrong(lengths, seq_len)

    first = check_padding_mask(answer, verbose=False)
    assert not first.correct and symptom in first.message and name not in first.message
    assert check_padding_mask(answer, verbose=False).misconception == name


def test_a_float_mask_is_refused_for_its_dtype():
    result = check_padding_mask(lambda lengths, n: right(lengths, n).float(), verbose=False)
    assert not result.correct and "returned dtype torch.float32, expected torch.bool" in result.message
