"""Wrong answers to the exercises of notebooks 01-03 (the learner's own head, attention with a mask,
causal mask with an offset, causal attention, and the three predictions), written the way a learner
writes them. No checker may accept one; where a name is given, the checker must name that mistake
(and the message must contain the listed words). ``test_the_catalogue_is_counted`` prints the counts.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from test_wrong_answers import Wrong, verdict_counts

from mhsa_helpers.lessons.causal_masking import (
    check_cache_prediction,
    check_cached_causal_mask,
    check_causal_attention,
)
from mhsa_helpers.lessons.causal_masking.exercises import FINITE_FILL_NAME, FUTURE_NAME, POLARITY_NAME, TOP_LEFT_NAME
from mhsa_helpers.lessons.qkv_by_hand import check_attention_head, check_uniform_prediction, check_weights_debug
from mhsa_helpers.lessons.qkv_by_hand.exercises import GRADIENT_NAME, WRONG_AXES_NAME
from mhsa_helpers.lessons.scaled_dot_product_attention import check_my_attention, check_spread_prediction

INF = float("inf")


# ----------------------------------------------------------- 01: one head


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


def head_under_no_grad(x, w_q, w_k, w_v):
    with torch.no_grad():
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
    Wrong(check_attention_head, "softmax over the queries", lambda *a: head(*a, dim=-2), "softmax over the query axis"),
    Wrong(check_attention_head, "softmax over dim=1", lambda *a: head(*a, dim=1), "softmax over the query axis"),
    Wrong(check_attention_head, "k not transposed", lambda *a: head(*a, key=lambda k: k), "did not transpose K"),
    Wrong(
        check_attention_head, "k.transpose(0, 1)", lambda *a: head(*a, key=lambda k: k.transpose(0, 1)), WRONG_AXES_NAME
    ),
    Wrong(
        check_attention_head,
        "nn.Linear's layout, x @ w.T",
        lambda *a: head(*a, layout=lambda w: w.T),
        "used PyTorch's x·Wᵀ layout on paper (d_in, d_out) matrices",
        ("On rectangular inputs",),
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
        "swapped W_Q and W_K (rows are keys)",
    ),
    Wrong(
        check_attention_head,
        "(weights, output)",
        lambda *a: head(*a)[::-1],
        "returned (weights, output) in the wrong order",
    ),
    Wrong(check_attention_head, "detached outputs", head_detached, GRADIENT_NAME, ("no gradient", ".detach()")),
    Wrong(
        check_attention_head, "torch.tensor(out.tolist())", head_rebuilt_from_a_list, GRADIENT_NAME, ("no gradient",)
    ),
    Wrong(check_attention_head, "under torch.no_grad()", head_under_no_grad, GRADIENT_NAME, ("no gradient",)),
    Wrong(check_attention_head, "only the output", lambda *a: head(*a)[0], None, ("return 2 tensors",)),
]

# ----------------------------------------------------------- 01: the debugging exercise


def weights(q, k, *, divide=lambda q: math.sqrt(q.shape[-1]), dim=-1):
    return torch.softmax(q @ k.transpose(-2, -1) / divide(q), dim=dim)


DEBUG = [
    Wrong(
        check_weights_debug,
        "nothing fixed",
        lambda q, k: weights(q, k, divide=lambda q: q.shape[-1], dim=-2),
        "both bugs are still there",
        ("d_k instead of √d_k", "dim=-2"),
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
        ("do not drop it",),
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
]

# ----------------------------------------------------------- 02: attention with a mask


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

# ----------------------------------------------------------- 03: the causal mask with an offset

MASK_16 = torch.ones(16, 16, dtype=torch.bool).tril()

MASK = [
    Wrong(
        check_cached_causal_mask,
        "tril without offset",
        lambda q, k: torch.ones(q, k, dtype=torch.bool).tril(),
        TOP_LEFT_NAME,
    ),
    Wrong(
        check_cached_causal_mask,
        "offset seq_q - seq_k",
        lambda q, k: torch.ones(q, k, dtype=torch.bool).tril(q - k),
        "offset with the wrong sign",
    ),
    Wrong(
        check_cached_causal_mask,
        "True = blocked",
        lambda q, k: torch.ones(q, k, dtype=torch.bool).triu(k - q + 1),
        POLARITY_NAME,
    ),
    Wrong(
        check_cached_causal_mask,
        "diagonal blocked",
        lambda q, k: torch.ones(q, k, dtype=torch.bool).tril(k - q - 1),
        "blocked the diagonal (a token may attend to itself)",
    ),
    Wrong(
        check_cached_causal_mask,
        "one too many",
        lambda q, k: torch.ones(q, k, dtype=torch.bool).tril(k - q + 1),
        "off by one: each token also sees the next one",
    ),
    Wrong(
        check_cached_causal_mask,
        "all True",
        lambda q, k: torch.ones(q, k, dtype=torch.bool),
        "no mask at all (everything may attend)",
    ),
    Wrong(
        check_cached_causal_mask,
        "upper triangle",
        lambda q, k: torch.ones(q, k, dtype=torch.bool).triu(k - q),
        "kept the upper triangle (every token sees the future)",
    ),
    Wrong(
        check_cached_causal_mask,
        "(seq_k, seq_q)",
        lambda q, k: torch.ones(k, q, dtype=torch.bool).tril(q - k),
        "rows and columns swapped: (seq_k, seq_q)",
    ),
    Wrong(
        check_cached_causal_mask,
        "0/1 float mask",
        lambda q, k: torch.ones(q, k).tril(k - q),
        "returned a 0/1 number mask instead of a boolean one",
    ),
    Wrong(
        check_cached_causal_mask,
        "0/1 float mask, no offset",
        lambda q, k: torch.ones(q, k).tril(),
        TOP_LEFT_NAME,
    ),
    Wrong(
        check_cached_causal_mask,
        "additive 0/-inf mask",
        lambda q, k: torch.zeros(q, k).masked_fill(torch.ones(q, k, dtype=torch.bool).triu(k - q + 1), -INF),
        "returned an additive 0/-inf float mask instead of a boolean one",
    ),
    Wrong(check_cached_causal_mask, "a (16, 16) buffer", lambda q, k: MASK_16[k - q : k, :k]),
    Wrong(
        check_cached_causal_mask,
        "positions compared the wrong way",
        lambda q, k: torch.arange(k)[None, :] >= torch.arange(k - q, k)[:, None],
        "kept the upper triangle (every token sees the future)",
    ),
]

# ----------------------------------------------------------- 03: causal attention


def masked(q, k, v, mask):
    scores = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~mask, -INF)
    return torch.softmax(scores, dim=-1) @ v


def causal_leaking_one_step(q, k, v):
    """Sees one key too many only when there is a cache: no offset mistake of the list, a leak."""
    seq_q, seq_k = q.shape[-2], k.shape[-2]
    extra = 1 if seq_q < seq_k else 0
    return masked(q, k, v, torch.ones(seq_q, seq_k, dtype=torch.bool).tril(seq_k - seq_q + extra))


CAUSAL = [
    Wrong(
        check_causal_attention,
        "PyTorch's is_causal with a cache",
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        TOP_LEFT_NAME,
        ("top-left",),
    ),
    Wrong(
        check_causal_attention,
        "tril without offset",
        lambda q, k, v: masked(q, k, v, torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()),
        TOP_LEFT_NAME,
    ),
    Wrong(
        check_causal_attention,
        "triu mask used as may-attend",
        lambda q, k, v: masked(
            q, k, v, torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).triu(k.shape[-2] - q.shape[-2] + 1)
        ),
        POLARITY_NAME,
    ),
    Wrong(
        check_causal_attention,
        "no mask",
        lambda q, k, v: masked(q, k, v, torch.ones(1, dtype=torch.bool)),
        "no mask at all (everything may attend)",
    ),
    Wrong(check_causal_attention, "leaks one step with a cache", causal_leaking_one_step, FUTURE_NAME, ("the future",)),
    Wrong(
        check_causal_attention,
        "detached",
        lambda q, k, v: masked(
            q, k, v, torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril(k.shape[-2] - q.shape[-2])
        ).detach(),
        GRADIENT_NAME,
        ("no gradient",),
    ),
]

# ----------------------------------------------------------- predictions

PREDICTIONS = [
    Wrong(check_uniform_prediction, "a zero score gives weight 0", lambda: 0.0, "a score of 0 gives a weight of 0"),
    Wrong(check_uniform_prediction, "e^0 = 1 each", lambda: 1, "every weight is 1"),
    Wrong(check_uniform_prediction, "rounded too far", lambda: 0.3, None, ("expected 0.333",)),
    Wrong(check_spread_prediction, "the variance's factor", lambda: 4, "confused the spread with the variance"),
    Wrong(check_spread_prediction, "no growth", lambda: 1.0, "the scores do not grow"),
    Wrong(check_spread_prediction, "d_k squared", lambda: 16, "grows with d_k squared"),
    Wrong(check_spread_prediction, "a guess", lambda: 3.0, None),
    Wrong(
        check_cache_prediction,
        "row 0 of a square mask",
        lambda: 1,
        "the first new query is the first word (top-left aligned)",
    ),
    Wrong(check_cache_prediction, "everything", lambda: 8, "a cached query sees every key"),
    Wrong(check_cache_prediction, "only the cache", lambda: 5, "the query does not see itself"),
    Wrong(check_cache_prediction, "only the new tokens", lambda: 3, "the new queries see only the new keys"),
    Wrong(check_cache_prediction, "6.5", lambda: 6.5, None, ("expected the whole number 6",)),
]

CATALOGUE = HEAD + DEBUG + ATTENTION + MASK + CAUSAL + PREDICTIONS


@pytest.mark.filterwarnings("ignore:The use of `x.T`")
@pytest.mark.parametrize("wrong", CATALOGUE, ids=lambda w: f"{w.checker.__name__}: {w.name}")
def test_no_checker_accepts_a_wrong_answer_and_names_it(wrong):
    result = wrong.checker(wrong.function, verbose=False)
    assert result.status not in ("correct", "not_attempted"), f"accepted although wrong: {wrong.name}"
    if wrong.named is not None:
        assert result.status == "misconception" and result.misconception == wrong.named, result.message
    for words in wrong.says:
        assert words in result.message, result.message


@pytest.mark.filterwarnings("ignore:The use of `x.T`")
def test_the_catalogue_is_counted(capsys):
    counts = verdict_counts(CATALOGUE)
    with capsys.disabled():
        print(f"\nnotebooks 01-03: catalogue of {len(CATALOGUE)} wrong answers: {counts}")
    assert counts["accepted"] == 0
    assert counts["named"] >= 0.8 * len(CATALOGUE)
