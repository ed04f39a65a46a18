"""Notebook 02's exercise 4, cross-attention with the learner's own attention (``check_cross_attention``): the right
answer is accepted and is what PyTorch computes; every case asks with another number of queries than the memory
has; each known slip is told by its symptom (a swap that raises, by its error and where to look), then named; and
only an error about shapes gets the advice on following the shapes."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from mhsa_helpers.lessons.scaled_dot_product_attention import check_cross_attention
from mhsa_helpers.teaching.misconceptions import POLARITY_NAME

ADVICE = "follow each through your lines, writing down the shape each step gives"


def attention(q, k, v, mask=None):
    """A learner's accepted attention of exercise 3: a query with no visible key gets NaN."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def pytorch_attention(q, k, v, mask=None):
    """Another accepted attention: PyTorch's, which gives a query with no visible key zeros."""
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def right(x, memory, w_q, w_k, w_v, memory_mask=None):
    q = x @ w_q
    k, v = memory @ w_k, memory @ w_v
    return attention(q, k, v, memory_mask)


def test_the_right_answer_is_accepted_and_is_what_pytorch_and_the_recipe_compute():
    assert check_cross_attention(right, verbose=False).correct
    g = torch.Generator().manual_seed(0)
    x, memory = torch.randn(2, 3, 5, generator=g), torch.randn(2, 6, 4, generator=g)
    w_q, w_k, w_v = torch.randn(5, 7, generator=g), torch.randn(4, 7, generator=g), torch.randn(4, 8, generator=g)
    mask = (torch.arange(6) < torch.tensor([[6], [4]]))[:, None, :]  # (2, 1, 6): the second memory is padded
    mine = right(x, memory, w_q, w_k, w_v, mask)
    pytorch = F.scaled_dot_product_attention(x @ w_q, memory @ w_k, memory @ w_v, attn_mask=mask)
    assert torch.allclose(mine, pytorch, atol=1e-5)
    # The recipe spelled out, query by query: weights over the 4 visible memory positions of sequence 1, times values.
    for i in range(3):
        scores = torch.stack([(x[1, i] @ w_q) @ (memory[1, j] @ w_k) for j in range(4)]) / math.sqrt(7)
        weights = torch.exp(scores - scores.max()) / torch.exp(scores - scores.max()).sum()
        expected = sum(weights[j] * (memory[1, j] @ w_v) for j in range(4))
        assert torch.allclose(mine[1, i], expected, atol=1e-5)


def test_pytorchs_attention_as_the_learners_own_is_accepted_with_a_note():
    def with_pytorch(x, memory, w_q, w_k, w_v, memory_mask=None):
        return F.scaled_dot_product_attention(x @ w_q, memory @ w_k, memory @ w_v, attn_mask=memory_mask)

    result = check_cross_attention(with_pytorch, verbose=False)
    assert result.correct and result.shortcuts == ("torch.nn.functional.scaled_dot_product_attention",)


def test_every_case_has_other_lengths_for_the_queries_and_the_memory():
    seen = []
    for variant in range(12):  # answers that differ draw other cases
        namespace = {"right": right, "seen": seen}
        exec(
            "def answer(x, memory, w_q, w_k, w_v, memory_mask=None):\n"
            f"    seen.append((x.shape, memory.shape, memory_mask is None, {variant}))\n"
            "    return right(x, memory, w_q, w_k, w_v, memory_mask)\n",
            namespace,
        )
        assert check_cross_attention(namespace["answer"], verbose=False).correct
    assert all(x[-2] != memory[-2] for x, memory, _, _ in seen)
    widths = {x[-1] == memory[-1] for x, memory, _, _ in seen}
    masked = {without for _, _, without, _ in seen}
    assert widths == {True, False} and masked == {True, False}


def queries_from_the_memory(x, memory, w_q, w_k, w_v, memory_mask=None):
    return attention(memory @ w_q, x @ w_k, x @ w_v, memory_mask)


def everything_from_the_memory(x, memory, w_q, w_k, w_v, memory_mask=None):
    return attention(memory @ w_q, memory @ w_k, memory @ w_v, memory_mask)


def keys_from_x(x, memory, w_q, w_k, w_v, memory_mask=None):
    return attention(x @ w_q, x @ w_k, memory @ w_v, memory_mask)


def values_from_x(x, memory, w_q, w_k, w_v, memory_mask=None):
    return attention(x @ w_q, memory @ w_k, x @ w_v, memory_mask)


def self_attention_on_x(x, memory, w_q, w_k, w_v, memory_mask=None):
    return attention(x @ w_q, x @ w_k, x @ w_v, memory_mask)


def mask_ignored(x, memory, w_q, w_k, w_v, memory_mask=None):
    return attention(x @ w_q, memory @ w_k, memory @ w_v)


def mask_inverted(x, memory, w_q, w_k, w_v, memory_mask=None):
    return attention(x @ w_q, memory @ w_k, memory @ w_v, None if memory_mask is None else ~memory_mask)


def along_the_queries(x, memory, w_q, w_k, w_v, memory_mask=None, attend=attention):
    if memory_mask is not None:
        memory_mask = memory_mask.transpose(1, 2)
    return attend(x @ w_q, memory @ w_k, memory @ w_v, memory_mask)


def along_the_queries_with_pytorch(x, memory, w_q, w_k, w_v, memory_mask=None):
    return along_the_queries(x, memory, w_q, w_k, w_v, memory_mask, attend=pytorch_attention)


RAISES = "it runs without an error and gives the numbers of a known mistake"


@pytest.mark.parametrize(
    ("answer", "symptom", "name"),
    [
        (queries_from_the_memory, RAISES, "queries taken from the memory"),
        (everything_from_the_memory, RAISES, "queries taken from the memory"),
        (keys_from_x, RAISES, "keys and values taken from different inputs"),
        (values_from_x, RAISES, "keys and values taken from different inputs"),
        (self_attention_on_x, RAISES, "keys and values taken from x (self-attention on x)"),
        (along_the_queries, RAISES, "the mask laid along the queries' axis"),
        (along_the_queries_with_pytorch, RAISES, "the mask laid along the queries' axis"),
        (mask_ignored, "right in every case without a mask and wrong in every case with one",
         "the memory mask was not used"),
        (mask_inverted, "draws on the memory positions it blocks", POLARITY_NAME),
    ],
    ids=["queries from memory", "all from memory", "keys from x", "values from x", "self-attention", "mask along",
         "mask along, zeros", "mask ignored", "mask inverted"],
)  # fmt: skip
def test_a_known_slip_is_told_by_its_symptom_then_named(answer, symptom, name):
    first = check_cross_attention(answer, verbose=False)
    assert not first.correct and symptom in first.message and name not in first.message, first.message
    assert (ADVICE in first.message) == (symptom == RAISES)
    assert check_cross_attention(answer, verbose=False).misconception == name


def test_a_shape_error_no_known_mistake_fits_gets_the_advice_and_another_error_does_not():
    def mask_given_a_new_axis(x, memory, w_q, w_k, w_v, memory_mask=None):
        return attention(x @ w_q, memory @ w_k, memory @ w_v, None if memory_mask is None else memory_mask[:, None])

    shape = check_cross_attention(mask_given_a_new_axis, verbose=False)
    assert shape.status == "error" and shape.misconception is None and ADVICE in shape.message

    def typo(x, memory, w_q, w_k, w_v, memory_mask=None):
        return right(x, memory, w_q, w_k, w_v, memory_mask).tranpose(0, 1)

    other = check_cross_attention(typo, verbose=False)
    assert other.status == "error" and "AttributeError" in other.message and ADVICE not in other.message
