"""Wrong answers to notebook 01's exercises (the learner's own head, the debugging of the attention weights,
the uniform-weight prediction), written the way a learner writes them, and answers fitted to the checker:
to the teaching shapes, to float64, to inputs that require grad, or changing PyTorch's global settings. No
checker may accept one; where a name is given, the checker must name that mistake by the second attempt (and
what it then says must contain the listed words). ``test_the_catalogue_is_counted`` prints the counts.
"""

from __future__ import annotations

import math
import warnings

import torch
from checker_table import catalogue_tests
from test_wrong_answers import Wrong

from mhsa_helpers.lessons.qkv_by_hand import check_attention_head, check_uniform_prediction, check_weights_debug
from mhsa_helpers.lessons.qkv_by_hand.exercises import TRANSPOSED_SCORES_NAME
from mhsa_helpers.teaching.checking import STATE_CHANGED
from mhsa_helpers.teaching.gradients import GRADIENT_NAME
from mhsa_helpers.teaching.misconceptions import WRONG_AXES_NAME


def head(x, w_q, w_k, w_v, *, scale=None, dim=-1, key=lambda k: k.transpose(-2, -1), layout=lambda w: w):
    q, k, v = x @ layout(w_q), x @ layout(w_k), x @ layout(w_v)
    scores = q @ key(k) / (math.sqrt(q.shape[-1]) if scale is None else scale(q, x, v))
    weights = torch.softmax(scores, dim=dim)
    return weights @ v, weights


def head_detached(x, w_q, w_k, w_v):
    out, weights = head(x, w_q, w_k, w_v)
    return out.detach(), weights.detach()


def head_rebuilt_from_a_list(x, w_q, w_k, w_v):
    out, weights = head(x, w_q, w_k, w_v)
    return torch.tensor(out.tolist(), dtype=x.dtype), torch.tensor(weights.tolist(), dtype=x.dtype)


def head_without_value_projection(x, w_q, w_k, w_v):
    q, k = x @ w_q, x @ w_k
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
    return weights @ x, weights


def head_scores_k_q(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v  # the projections are right
    weights = torch.softmax(k @ q.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
    return weights @ v, weights


def head_softmax_without_dim(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyTorch warns that the implicit choice of an axis is deprecated
        weights = torch.nn.functional.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]))
    return weights @ v, weights


def head_under_no_grad(x, w_q, w_k, w_v):
    with torch.no_grad():
        return head(x, w_q, w_k, w_v)


#: The shapes of x in the checker's teaching cases, as its messages show them.
TAUGHT = {(3, 4), (2, 5, 6), (2, 3, 7, 5), (1, 6), (17, 8)}


def head_fitted_to_the_teaching_shapes(x, w_q, w_k, w_v):
    if tuple(x.shape) in TAUGHT:
        return head(x, w_q, w_k, w_v)
    return head(x, w_q, w_k, w_v, scale=lambda q, x, v: q.shape[-1])


def head_in_float64(x, w_q, w_k, w_v):
    return head(*(t.double() for t in (x, w_q, w_k, w_v)))  # "to be precise"


def head_keeping_the_weights_gradient(x, w_q, w_k, w_v):
    out, weights = head(x, w_q, w_k, w_v)
    weights.retain_grad()  # left over from looking at the gradients: needs inputs that require grad
    return out, weights


def head_turning_gradients_off(x, w_q, w_k, w_v):
    torch.set_grad_enabled(False)  # copied from a set-up cell
    return head(x, w_q, w_k, w_v)


def head_setting_float64_as_default(x, w_q, w_k, w_v):
    torch.set_default_dtype(torch.float64)
    return head(x, w_q, w_k, w_v)


def head_reseeding(x, w_q, w_k, w_v):
    torch.manual_seed(1234)
    return head(x, w_q, w_k, w_v)


HEAD = [
    Wrong(check_attention_head, "no scaling", lambda *a: head(*a, scale=lambda q, x, v: 1.0), "no √d_k scaling"),
    Wrong(
        check_attention_head,
        "divides by d_k",
        lambda *a: head(*a, scale=lambda q, x, v: q.shape[-1]),
        "scaled by d_k instead of √d_k",
    ),
    Wrong(
        check_attention_head,
        "divides by sqrt of the input width",
        lambda *a: head(*a, scale=lambda q, x, v: x.shape[-1] ** 0.5),
        "scaled by √d_in (the embedding width) instead of √d_k",
    ),
    Wrong(
        check_attention_head,
        "divides by sqrt(d_v)",
        lambda *a: head(*a, scale=lambda q, x, v: math.sqrt(v.shape[-1])),
        "scaled by √d_v (the value width) instead of √d_k",
    ),
    Wrong(
        check_attention_head,
        "divides by sqrt of the number of words",
        lambda *a: head(*a, scale=lambda q, x, v: math.sqrt(x.shape[-2])),
        "scaled by √seq (the number of words) instead of √d_k",
    ),
    Wrong(
        check_attention_head, "softmax over the queries", lambda *a: head(*a, dim=-2), "softmax over the queries axis"
    ),
    Wrong(
        check_attention_head,
        "F.softmax(scores) without dim",
        head_softmax_without_dim,
        "softmax without dim: PyTorch picks the axis",
    ),
    Wrong(check_attention_head, "softmax over dim=1", lambda *a: head(*a, dim=1), "softmax over the wrong axis"),
    Wrong(check_attention_head, "softmax over dim=0", lambda *a: head(*a, dim=0), "softmax over the wrong axis"),
    Wrong(check_attention_head, "k not transposed", lambda *a: head(*a, key=lambda k: k), "did not transpose K"),
    Wrong(
        check_attention_head, "k.transpose(0, 1)", lambda *a: head(*a, key=lambda k: k.transpose(0, 1)), WRONG_AXES_NAME
    ),
    Wrong(
        check_attention_head,
        "nn.Linear's layout, x @ w.T",
        lambda *a: head(*a, layout=lambda w: w.T),
        "used PyTorch's x·Wᵀ layout on paper (d_in, d_out) matrices",
        ("On other inputs",),
    ),
    Wrong(
        check_attention_head,
        "returns the scaled scores as weights",
        lambda x, w_q, w_k, w_v: (
            head(x, w_q, w_k, w_v)[0],
            (x @ w_q) @ (x @ w_k).transpose(-2, -1) / math.sqrt(w_q.shape[-1]),
        ),
        "returned the scores, not the weights",
    ),
    Wrong(check_attention_head, "averages x, not V", head_without_value_projection, "averaged x instead of V"),
    Wrong(
        check_attention_head,
        "W_Q and W_K swapped",
        lambda x, w_q, w_k, w_v: head(x, w_k, w_q, w_v),
        TRANSPOSED_SCORES_NAME,
    ),
    Wrong(check_attention_head, "right projections, scores K·Qᵀ", head_scores_k_q, TRANSPOSED_SCORES_NAME),
    Wrong(
        check_attention_head,
        "(weights, output)",
        lambda *a: head(*a)[::-1],
        "returned (weights, output) in the wrong order",
    ),
    Wrong(check_attention_head, "detached outputs", head_detached, GRADIENT_NAME, ("no gradient",)),
    Wrong(
        check_attention_head, "torch.tensor(out.tolist())", head_rebuilt_from_a_list, GRADIENT_NAME, ("no gradient",)
    ),
    Wrong(check_attention_head, "under torch.no_grad()", head_under_no_grad, GRADIENT_NAME, ("no gradient",)),
    Wrong(check_attention_head, "only the output", lambda *a: head(*a)[0], None, ("return 2 tensors",)),
    Wrong(
        check_attention_head,
        "right on the teaching shapes only",
        head_fitted_to_the_teaching_shapes,
        None,
        ("a case drawn at random for your code", "result.case"),
    ),
    Wrong(check_attention_head, "computes in float64", head_in_float64, None, ("returned dtype torch.float64",)),
    Wrong(
        check_attention_head,
        "retain_grad: needs inputs that require grad",
        head_keeping_the_weights_gradient,
        None,
        ("under torch.no_grad()", "weights.retain_grad()"),
    ),
    Wrong(
        check_attention_head,
        "turns gradients off",
        head_turning_gradients_off,
        STATE_CHANGED,
        ("turned gradients off",),
    ),
    Wrong(
        check_attention_head,
        "float64 as the default dtype",
        head_setting_float64_as_default,
        STATE_CHANGED,
        ("changed the default dtype",),
    ),
    Wrong(check_attention_head, "manual_seed(1234)", head_reseeding, STATE_CHANGED, ("random generator",)),
]


def weights(q, k, *, divide=lambda q: math.sqrt(q.shape[-1]), dim=-1):
    return torch.softmax(q @ k.transpose(-2, -1) / divide(q), dim=dim)


DEBUG = [
    Wrong(
        check_weights_debug,
        "nothing fixed (written anew)",
        lambda q, k: weights(q, k, divide=lambda q: q.shape[-1], dim=-2),
        None,
        ("still the original",),
    ),
    Wrong(
        check_weights_debug,
        "only the axis fixed",
        lambda q, k: weights(q, k, divide=lambda q: q.shape[-1]),
        "one bug left: the scale",
    ),
    Wrong(
        check_weights_debug,
        "only the scale fixed",
        lambda q, k: weights(q, k, dim=-2),
        "one bug left: the softmax's axis",
    ),
    Wrong(
        check_weights_debug,
        "the scale dropped instead of fixed",
        lambda q, k: weights(q, k, divide=lambda q: 1.0),
        "one bug left: the scale",
        ("scale is gone altogether",),
    ),
    Wrong(
        check_weights_debug,
        "scale dropped, axis untouched",
        lambda q, k: weights(q, k, divide=lambda q: 1.0, dim=-2),
        "two bugs",
    ),
    Wrong(
        check_weights_debug,
        "dim=1 instead of -1",
        lambda q, k: weights(q, k, dim=1),
        "one bug left: the softmax's axis",
    ),
    Wrong(
        check_weights_debug,
        "k.T on a batch",
        lambda q, k: torch.softmax(q @ k.permute(*range(k.ndim - 1, -1, -1)) / math.sqrt(q.shape[-1]), -1),
        WRONG_AXES_NAME,
    ),
    Wrong(
        check_weights_debug,
        "softmax asked for float64",
        lambda q, k: torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1, dtype=torch.float64),
        None,
        ("returned dtype torch.float64 for torch.float32 inputs",),
    ),
]


PREDICTIONS = [
    Wrong(check_uniform_prediction, "a zero score gives weight 0", lambda: 0.0, "a score of 0 gives a weight of 0"),
    Wrong(check_uniform_prediction, "e^0 = 1 each", lambda: 1, "every weight is 1"),
    Wrong(check_uniform_prediction, "rounded too far", lambda: 0.3, None, ("too low",)),
    Wrong(check_uniform_prediction, "two keys", lambda: 0.5, "the weights split between two words", ("its own",)),
]


CATALOGUE = HEAD + DEBUG + PREDICTIONS


test_no_checker_accepts_a_wrong_answer_and_names_it, test_the_catalogue_is_counted = catalogue_tests(
    CATALOGUE, "notebook 01"
)
