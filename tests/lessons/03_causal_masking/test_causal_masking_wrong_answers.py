"""Wrong answers to notebook 03's exercises (the causal mask with an offset, causal attention, the cache
prediction), written the way a learner writes them. No checker may accept one; where a name is given, the
checker must name that mistake (and the message must contain the listed words).
``test_the_catalogue_is_counted`` prints the counts.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from checker_table import catalogue_tests
from test_wrong_answers import Wrong

from mhsa_helpers.lessons.causal_masking import (
    check_cache_prediction,
    check_cached_causal_mask,
    check_causal_attention,
)
from mhsa_helpers.lessons.causal_masking.exercises import FUTURE_NAME, TOP_LEFT_NAME
from mhsa_helpers.teaching.gradients import GRADIENT_NAME
from mhsa_helpers.teaching.misconceptions import POLARITY_NAME

INF = float("inf")


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


PREDICTIONS = [
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


CATALOGUE = MASK + CAUSAL + PREDICTIONS


test_no_checker_accepts_a_wrong_answer_and_names_it, test_the_catalogue_is_counted = catalogue_tests(
    CATALOGUE, "notebook 03"
)
