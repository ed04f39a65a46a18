"""Notebook 03's exercise 6, attention over a padded batch under the causal and the padding masks
(``check_padded_causal_attention``): the right answer is accepted, through notebook 02's plain attention or the
package's, and gives what PyTorch gives: ``F.scaled_dot_product_attention`` with the combined mask on every row, and
each sequence's own causal attention, without its padding, on its real rows. Each known slip is told by its symptom,
then named."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import mhsa_helpers as mh
from mhsa_helpers.lessons.causal_masking import check_padded_causal_attention
from mhsa_helpers.lessons.causal_masking.exercises import padded_causal_attention


def attention(q, k, v, mask=None):  # notebook 02's attention: a row with no key gives NaN
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def causal(seq):
    return torch.ones(seq, seq, dtype=torch.bool).tril()


def real(lengths, seq):  # (batch, seq): True on each sequence's real tokens
    return torch.arange(seq) < lengths[:, None]


def padding(lengths, seq):  # exercise 5's mask, (batch, 1, 1, seq)
    return real(lengths, seq)[:, None, None, :]


def right(q, k, v, lengths):
    seq = q.shape[-2]
    return attention(q, k, v, causal(seq) & padding(lengths, seq))


def right_through_the_package(q, k, v, lengths):  # the package's attention standing in for the learner's
    seq = q.shape[-2]
    return mh.scaled_dot_product_attention(q, k, v, causal(seq) & padding(lengths, seq))


@pytest.mark.parametrize("answer", [right, right_through_the_package])
def test_the_right_answer_is_accepted_without_a_note(answer):
    result = check_padded_causal_attention(answer, verbose=False)
    assert result.correct and result.shortcuts == (), result.message


def test_the_right_answer_gives_what_pytorch_gives_on_every_row_and_each_sequence_alone_on_its_real_rows():
    torch.manual_seed(0)
    q, k, v = (torch.randn(3, 2, 6, 4, dtype=torch.float64) for _ in range(3))
    lengths = torch.tensor([6, 1, 4])
    # PyTorch's boolean attn_mask is True where a query may attend, as here.
    theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=causal(6) & padding(lengths, 6))
    for function in (right, padded_causal_attention):
        torch.testing.assert_close(function(q, k, v, lengths), theirs)
    for b, length in enumerate(lengths.tolist()):
        alone = F.scaled_dot_product_attention(*(x[b, :, :length] for x in (q, k, v)), is_causal=True)
        torch.testing.assert_close(theirs[b, :, :length], alone)
        # A padded query sees every real token of its sequence: all of them come before it.
        everything_real = F.scaled_dot_product_attention(q[b, :, length:], k[b, :, :length], v[b, :, :length])
        torch.testing.assert_close(theirs[b, :, length:], everything_real)


def test_combine_masks_is_accepted_with_a_note():
    def combined(q, k, v, lengths):
        seq = q.shape[-2]
        return attention(q, k, v, mh.combine_masks(causal(seq), padding(lengths, seq)))

    result = check_padded_causal_attention(combined, verbose=False)
    assert result.correct and result.shortcuts == ("mhsa_helpers.masking.combine_masks",)


def masked(make_mask, through=attention):
    def answer(q, k, v, lengths):
        return through(q, k, v, make_mask(lengths, q.shape[-2]))

    return answer


@pytest.mark.parametrize(
    ("wrong", "symptom", "name"),
    [
        (masked(lambda n, s: causal(s) | padding(n, s)),
         "real queries draw on the real tokens after them, and your padded queries on padding keys",
         "the two masks combined with OR"),
        (masked(padding), "padded queries' rows are right", "only the padding mask: the future is not hidden"),
        (masked(lambda n, s: causal(s)), "real queries' rows are right, but your padded queries draw on padding keys",
         "only the causal mask: the padding is not hidden"),
        (masked(lambda n, s: causal(s) & padding(n, s).transpose(-1, -2)), "padded queries get NaN",
         "every key hidden from the padded queries"),
        (masked(lambda n, s: causal(s) & padding(n, s).transpose(-1, -2), mh.scaled_dot_product_attention),
         "padded queries get zeros", "every key hidden from the padded queries"),
        (masked(lambda n, s: causal(s) & padding(n, s) & padding(n, s).transpose(-1, -2)), "padded queries get NaN",
         "every key hidden from the padded queries"),
        (masked(lambda n, s: causal(s) & ~padding(n, s)), "real queries get NaN",
         "the padding mask inverted (True on the padding)"),
    ],
    ids=["or", "padding only", "causal only", "along the queries", "along the queries, guarded", "pairs",
         "inverted"],
)  # fmt: skip
def test_a_known_slip_is_told_by_its_symptom_then_named(wrong, symptom, name):
    first = check_padded_causal_attention(wrong, verbose=False)
    assert not first.correct and symptom in first.message and name not in first.message, first.message
    second = check_padded_causal_attention(wrong, verbose=False)
    assert second.misconception == name and name in second.message, second.message


FLAT = "a padding mask without its axes of 1: its batch axis meets another axis of the scores"


@pytest.mark.parametrize(
    "flat",
    [lambda n, s: causal(s) & real(n, s), lambda n, s: causal(s) & real(n, s)[:, None, :]],
    ids=["(batch, seq)", "(batch, 1, seq)"],
)
def test_a_padding_mask_without_its_axes_of_1_is_shown_its_error_then_named(flat):
    wrong = masked(flat)
    first = check_padded_causal_attention(wrong, verbose=False)
    assert first.status == "misconception" and FLAT not in first.message, first.message
    assert "your function raised RuntimeError" in first.message and "On square inputs" in first.message
    second = check_padded_causal_attention(wrong, verbose=False)
    assert second.misconception == FLAT and FLAT in second.message, second.message
