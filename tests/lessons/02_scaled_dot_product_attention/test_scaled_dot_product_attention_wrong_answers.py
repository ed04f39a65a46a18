"""Wrong answers to notebook 02's exercises (attention with a mask, the stable softmax, the spread prediction),
written the way a learner writes them, and answers fitted to the checker: to the teaching shapes and scores,
to float64, to inputs that do not require grad, or changing PyTorch's global settings. No checker may accept
one; where a name is given, the checker must name that mistake by the second attempt (and what it then says
must contain the listed words). ``test_the_catalogue_is_counted`` prints the counts.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from checker_table import catalogue_tests
from test_wrong_answers import Wrong

from mhsa_helpers.lessons.scaled_dot_product_attention import check_my_attention, check_softmax, check_spread_prediction
from mhsa_helpers.teaching.checking import STATE_CHANGED
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


def attention_scaled_after_the_softmax(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1)
    if mask is not None:
        scores = scores.masked_fill(~mask, -INF)
    return torch.softmax(scores, dim=-1) / math.sqrt(q.shape[-1]) @ v


def attention_divided_twice(q, k, v, mask=None):
    return attention(q, k, v, mask) / math.sqrt(q.shape[-1])  # the scores divided, and the output once more


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


def attention_additive_mask(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores + (1 - mask.float()) * -1e9  # the additive mask of many tutorials
    return torch.softmax(scores, dim=-1) @ v


def attention_not_mask_times_minus_1e9(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores + ~mask * -1e9
    return torch.softmax(scores, dim=-1) @ v


def attention_fill_below_everything(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, scores.min() - 1e4)  # "below every score there is"
    return torch.softmax(scores, dim=-1) @ v


def attention_fill_then_zero(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is None:
        return torch.softmax(scores, dim=-1) @ v
    return (torch.softmax(scores.masked_fill(~mask, -1e9), dim=-1) * mask) @ v  # blocked weights made exactly 0


#: The shapes of q in the checker's teaching cases, as its messages show them.
TAUGHT = {(3, 4), (2, 4, 9), (2, 3, 5, 16), (1, 6), (7, 5), (4, 4), (2, 2, 7, 8), (2, 1)}


def attention_fitted_to_the_teaching_shapes(q, k, v, mask=None):
    return attention(q, k, v, mask) if tuple(q.shape) in TAUGHT else attention(q, k, v, mask, dim=-2)


def attention_with_a_float64_mask(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores + torch.zeros(mask.shape, dtype=torch.float64).masked_fill(~mask, -INF)
    return torch.softmax(scores, dim=-1) @ v


def attention_turning_gradients_off(q, k, v, mask=None):
    torch.set_grad_enabled(False)  # copied from a set-up cell
    return attention(q, k, v, mask)


def softmax_through_numpy(x):
    a = x.numpy()  # only for inputs that do not require grad
    e = np.exp(a - a.max(axis=-1, keepdims=True))
    return torch.from_numpy(e / e.sum(axis=-1, keepdims=True))


def softmax_setting_float64_as_default(x):
    torch.set_default_dtype(torch.float64)
    e = torch.exp(x - x.amax(dim=-1, keepdim=True))
    return e / e.sum(dim=-1, keepdim=True)


def softmax_reseeding(x):
    torch.manual_seed(1234)
    e = torch.exp(x - x.amax(dim=-1, keepdim=True))
    return e / e.sum(dim=-1, keepdim=True)


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
    Wrong(
        check_my_attention, "weights divided by √d_k", attention_scaled_after_the_softmax, "scaled after the softmax"
    ),
    Wrong(
        check_my_attention,
        "scores and output divided by √d_k",
        attention_divided_twice,
        "divided by √d_k twice: the scores, and the weights or the output",
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
        "mask applied after softmax without renormalising",
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
    Wrong(check_my_attention, "(1 - mask.float()) * -1e9 added", attention_additive_mask, FINITE_FILL_NAME),
    Wrong(check_my_attention, "~mask * -1e9 added", attention_not_mask_times_minus_1e9, FINITE_FILL_NAME),
    Wrong(check_my_attention, "filled with scores.min() - 1e4", attention_fill_below_everything, FINITE_FILL_NAME),
    Wrong(check_my_attention, "filled with -1e9, then weights * mask", attention_fill_then_zero, FINITE_FILL_NAME),
    Wrong(
        check_my_attention,
        "filled with -30000, below the checker's scores",
        lambda *a: attention(*a, fill=-30_000.0),
        FINITE_FILL_NAME,
        ("-1e35",),
    ),
    Wrong(
        check_my_attention,
        "right on the teaching shapes only",
        attention_fitted_to_the_teaching_shapes,
        None,
        ("a case drawn at random for your code",),
    ),
    Wrong(check_my_attention, "a float64 additive mask", attention_with_a_float64_mask, None, ("Double",)),
    Wrong(
        check_my_attention,
        "turns gradients off",
        attention_turning_gradients_off,
        STATE_CHANGED,
        ("turned gradients off",),
    ),
]


SOFTMAX = [
    Wrong(
        check_softmax,
        "the max fixed, the sum still over everything",
        lambda x: torch.exp(x - x.amax(-1, keepdim=True)) / torch.exp(x - x.amax(-1, keepdim=True)).sum(),
        "summed over the whole tensor (forgot dim=-1 in the sum)",
        ("every entry of the tensor",),
    ),
    Wrong(
        check_softmax,
        "the sum fixed, the max still global",
        lambda x: torch.exp(x - x.max()) / torch.exp(x - x.max()).sum(-1, keepdim=True),
        "subtracted one global max instead of each row's max",
    ),
    Wrong(
        check_softmax,
        "the sum fixed without keepdim",
        lambda x: torch.exp(x - x.max(-1, keepdim=True).values) / torch.exp(x - x.max(-1, keepdim=True).values).sum(-1),
        "summed without keepdim=True (the row sums broadcast along the wrong axis)",
    ),
    Wrong(
        check_softmax,
        "the max per row without keepdim",
        lambda x: torch.exp(x - x.max(-1).values) / torch.exp(x - x.max(-1).values).sum(-1, keepdim=True),
        "took the max without keepdim=True",
    ),
    Wrong(
        check_softmax,
        "no shift at all",
        lambda x: torch.exp(x) / torch.exp(x).sum(-1, keepdim=True),
        "did not subtract the row's max",
        ("exp(1000) is inf",),
    ),
    Wrong(
        check_softmax,
        "the mean subtracted",
        lambda x: (
            torch.exp(x - x.mean(-1, keepdim=True)) / torch.exp(x - x.mean(-1, keepdim=True)).sum(-1, keepdim=True)
        ),
        "subtracted the row's mean instead of its maximum",
    ),
    Wrong(
        check_softmax,
        "the exps in float64",
        lambda x: torch.softmax(x, dim=-1, dtype=torch.float64),
        None,
        ("returned dtype torch.float64 for torch.float32 inputs",),
    ),
    Wrong(check_softmax, "through numpy", softmax_through_numpy, None, ("requires grad",)),
    Wrong(
        check_softmax,
        "float64 as the default dtype",
        softmax_setting_float64_as_default,
        STATE_CHANGED,
        ("changed the default dtype",),
    ),
    Wrong(check_softmax, "manual_seed(1234)", softmax_reseeding, STATE_CHANGED, ("random generator",)),
    Wrong(
        check_softmax,
        "the handed-out code, rewritten",
        lambda x: torch.exp(x - x.max()) / torch.exp(x - x.max()).sum(),
        None,
        ("still the original",),
    ),
]


PREDICTIONS = [
    Wrong(check_spread_prediction, "the variance's factor", lambda: 4, "confused the spread with the variance"),
    Wrong(check_spread_prediction, "no growth", lambda: 1.0, "the scores do not grow"),
    Wrong(check_spread_prediction, "d_k squared", lambda: 16, "grows with d_k squared"),
    Wrong(check_spread_prediction, "a guess", lambda: 3.0, None, ("too high",)),
    Wrong(check_spread_prediction, "5% off", lambda: 2.1, None, ("too high",)),
]


CATALOGUE = ATTENTION + SOFTMAX + PREDICTIONS


test_no_checker_accepts_a_wrong_answer_and_names_it, test_the_catalogue_is_counted = catalogue_tests(
    CATALOGUE, "notebook 02"
)
