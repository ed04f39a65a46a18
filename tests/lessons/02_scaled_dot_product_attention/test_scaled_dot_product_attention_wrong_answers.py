"""Wrong answers to notebook 02's exercises (attention with a mask, the spread prediction), written the way
a learner writes them. No checker may accept one; where a name is given, the checker must name that mistake
(and the message must contain the listed words). ``test_the_catalogue_is_counted`` prints the counts.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from checker_table import catalogue_tests
from test_wrong_answers import Wrong

from mhsa_helpers.lessons.scaled_dot_product_attention import check_my_attention, check_spread_prediction
from mhsa_helpers.teaching.gradients import GRADIENT_NAME
from mhsa_helpers.teaching.misconceptions import FINITE_FILL_NAME, POLARITY_NAME, WRONG_AXES_NAME

INF = float("inf")


def attention(q, k, v, mask=None, *, divide=None, dim=-1, fill=-INF, invert=False, key=None):
    scores = q @ (k.transpose(-2, -1) if key is None else key(k))
    scores = scores / (math.sqrt(q.shape[-1]) if divide is None else divide(q, k, v))
    if mask is not None:
        scores = scores.masked_fill(mask if invert else ~mask, fill)
    return torch.softmax(scores, dim=dim) @ v


def attention_mask_after_softmax(q, k, v, mask=None):
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
    return (w if mask is None else w * mask) @ v


def attention_scores_times_mask(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores * mask
    return torch.softmax(scores, dim=-1) @ v


def attention_adds_minus_10000(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores - 10_000.0 * (~mask)
    return torch.softmax(scores, dim=-1) @ v


ATTENTION = [
    Wrong(check_my_attention, "no scaling", lambda *a: attention(*a, divide=lambda q, k, v: 1.0), "no √d_k scaling"),
    Wrong(
        check_my_attention,
        "divides by d_k",
        lambda *a: attention(*a, divide=lambda q, k, v: q.shape[-1]),
        "scaled by d_k instead of √d_k",
    ),
    Wrong(
        check_my_attention,
        "divides by sqrt(seq_k)",
        lambda *a: attention(*a, divide=lambda q, k, v: math.sqrt(k.shape[-2])),
        "scaled by √seq_k (the number of keys) instead of √d_k",
    ),
    Wrong(
        check_my_attention,
        "divides by sqrt(d_v)",
        lambda *a: attention(*a, divide=lambda q, k, v: math.sqrt(v.shape[-1])),
        "scaled by √d_v (the value width) instead of √d_k",
    ),
    Wrong(
        check_my_attention,
        "softmax over the queries",
        lambda *a: attention(*a, dim=-2),
        "softmax over the wrong dimension",
    ),
    Wrong(
        check_my_attention, "softmax over dim 0", lambda *a: attention(*a, dim=0), "softmax over the wrong dimension"
    ),
    Wrong(check_my_attention, "k not transposed", lambda *a: attention(*a, key=lambda k: k), "did not transpose K"),
    Wrong(
        check_my_attention,
        "k.transpose(1, 2)",
        lambda *a: attention(*a, key=lambda k: k.transpose(1, 2)),
        WRONG_AXES_NAME,
    ),
    Wrong(
        check_my_attention,
        "reshapes K",
        lambda *a: attention(*a, key=lambda k: k.reshape(*k.shape[:-2], k.shape[-1], k.shape[-2])),
        "reshaped K instead of transposing it",
    ),
    Wrong(check_my_attention, "mask inverted", lambda *a: attention(*a, invert=True), POLARITY_NAME),
    Wrong(
        check_my_attention,
        "F.sdpa given the blocked positions",
        lambda q, k, v, mask=None: F.scaled_dot_product_attention(q, k, v, attn_mask=None if mask is None else ~mask),
        POLARITY_NAME,
    ),
    Wrong(check_my_attention, "mask ignored", lambda q, k, v, mask=None: attention(q, k, v), "the mask was not used"),
    Wrong(
        check_my_attention,
        "fills with 0",
        lambda *a: attention(*a, fill=0.0),
        "blocked scores set to 0 instead of -inf",
    ),
    Wrong(check_my_attention, "scores * mask", attention_scores_times_mask, "blocked scores set to 0 instead of -inf"),
    Wrong(
        check_my_attention,
        "zeroes after the softmax",
        attention_mask_after_softmax,
        "mask applied after softmax without renormalizing",
    ),
    Wrong(check_my_attention, "fills with -1e4", lambda *a: attention(*a, fill=-1e4), FINITE_FILL_NAME),
    Wrong(check_my_attention, "adds -10000", attention_adds_minus_10000, FINITE_FILL_NAME),
    Wrong(
        check_my_attention,
        "returns the weights",
        lambda q, k, v, mask=None: attention(q, k, torch.eye(k.shape[-2], dtype=q.dtype), mask),
        "returned the weights instead of weights @ V",
    ),
    Wrong(
        check_my_attention,
        "softmax after multiplying by V",
        lambda q, k, v, mask=None: torch.softmax(q @ k.mT / math.sqrt(q.shape[-1]) @ v, dim=-1),
        None,
    ),
    Wrong(
        check_my_attention,
        "detached",
        lambda *a: attention(*a).detach(),
        GRADIENT_NAME,
        ("no gradient",),
    ),
    Wrong(check_my_attention, "no mask parameter", lambda q, k, v: attention(q, k, v), None, ("takes (q, k, v)",)),
]


PREDICTIONS = [
    Wrong(check_spread_prediction, "the variance's factor", lambda: 4, "confused the spread with the variance"),
    Wrong(check_spread_prediction, "no growth", lambda: 1.0, "the scores do not grow"),
    Wrong(check_spread_prediction, "d_k squared", lambda: 16, "grows with d_k squared"),
    Wrong(check_spread_prediction, "a guess", lambda: 3.0, None),
]


CATALOGUE = ATTENTION + PREDICTIONS


test_no_checker_accepts_a_wrong_answer_and_names_it, test_the_catalogue_is_counted = catalogue_tests(
    CATALOGUE, "notebook 02"
)
