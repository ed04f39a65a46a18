"""Exercise checkers for notebook 03 (causal masking): a masked softmax that survives a fully masked
row (a debugging exercise), a prediction of what a cached query sees, the causal mask with an offset
for cached queries, causal attention through the learner's own attention of notebook 02, the padding mask,
attention over a padded batch under the causal and the padding masks together, and dropout on the attention
weights (a random function: checked by what every right answer does, whatever it draws).

Each checker runs the learner's function on the teaching cases and on cases drawn for that answer; a wrong
answer is told what differs first, the name of its mistake when the same mistake comes again, and the fix
on request (``result.hint()``, ``result.reveal()``).

Polarity, as everywhere in the package: a boolean mask, ``True`` = may attend.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, cast

import torch

from ... import causal_mask, masked_softmax_neg_inf, padding_mask, scaled_dot_product_attention
from ...teaching.checking import Case, CheckResult, Misconception, check_function, random_tensor
from ...teaching.gradients import compare_with_gradients
from ...teaching.misconceptions import (
    AFTER_SOFTMAX_HINT,
    AFTER_SOFTMAX_NAME,
    FINITE_FILL_HINT,
    FINITE_FILL_NAME,
    POLARITY_HINT,
    POLARITY_NAME,
    blocked_key_gets_weight,
    random_mask,
)
from ...teaching.predictions import check_prediction

__all__ = [
    "causal_attention",
    "check_attention_dropout",
    "check_cache_prediction",
    "check_cached_causal_mask",
    "check_causal_attention",
    "check_masked_softmax",
    "check_padded_causal_attention",
    "check_padding_mask",
    "dropout_expected",
    "padded_causal_attention",
]


def _sizes(generator: torch.Generator, count: int, low: int, high: int) -> list[int]:
    """``count`` whole numbers drawn from ``low`` to ``high`` (both included)."""
    return torch.randint(low, high + 1, (count,), generator=generator).tolist()


# ---------------------------------------------------------------- predict: cached queries


def first_query_keys() -> int:
    """How many keys the first of 3 new queries may see after 5 cached tokens (8 keys in all)."""
    return int(causal_mask(3, 8)[0].sum())


def check_cache_prediction(learner: Callable[[], Any], *, verbose: bool = True) -> CheckResult:
    """Prediction: ``learner()`` returns how many keys the *first* of 3 new queries may attend to when
    5 earlier tokens are cached (8 keys: the 5 cached ones and the 3 new ones)."""
    mistakes = [
        Misconception(
            "the first new query is the first word (top-left aligned)",
            lambda: 1,
            "Row 0 of a square causal mask sees one key, but this query is not the sentence's first word: 5 "
            "tokens came before it.",
            fix="It sits at position 5 and sees keys 0 to 5.",
            symptom="Where in the sequence does the first new query sit?",
        ),
        Misconception(
            "a cached query sees every key",
            lambda: 8,
            "The cache holds the *past*; the 3 new tokens are among the keys too, and the first new query must "
            "not see the two that come after it.",
            fix="Leave out the two new tokens after it: 8 - 2.",
            symptom="Some of the 8 keys come after the first new query.",
        ),
        Misconception(
            "the query does not see itself",
            lambda: 5,
            "A query sees the past *and itself*.",
            fix="The 5 cached keys plus its own.",
            symptom="Does a query see its own key?",
        ),
        Misconception(
            "the new queries see only the new keys",
            lambda: 3,
            "The cache is kept so that new tokens can attend to the earlier ones.",
            fix="The first new query sees the 5 cached keys and itself.",
            symptom="What is the cache kept for?",
        ),
    ]
    return check_prediction(
        "predict: keys seen by a cached query",
        learner,
        first_query_keys,
        "3 new queries after 5 cached tokens",
        mistakes,
        explain="the first new query sits at position 5, after the 5 cached tokens, and sees keys 0 to 5: the "
        "cached ones and its own",
        verbose=verbose,
    )


# ---------------------------------------------------------------- the causal mask with an offset

NUMBER_MASK_NAME = "returned a 0/1 number mask instead of a boolean one"
TOP_LEFT_NAME = "top-left aligned: no offset for the cached keys"
WRONG_SIGN_NAME = "offset with the wrong sign"
#: The mask that blocks each query's own key (the same name in notebook 10's decoding mask).
SELF_BLOCKED_NAME = "the query cannot see itself"
FUTURE_NAME = "an earlier output changes when a later token changes (the future leaks in)"
OFFSET_FIX = "`torch.ones(seq_q, seq_k, dtype=torch.bool).tril(diagonal=seq_k - seq_q)`."


def _as_number_mask(make_mask: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    def number_mask(*sizes: int) -> torch.Tensor:
        # Number answers (int or float) are compared by value, so float32 stands for all of them.
        return make_mask(*sizes).to(torch.float32)

    return number_mask


def _tril(seq_q: int, seq_k: int, diagonal: int) -> torch.Tensor:
    return torch.ones(seq_q, seq_k, dtype=torch.bool).tril(diagonal=diagonal)


def _offset_mistakes(*, attention: bool) -> list[Misconception]:
    """Wrong ``(seq_q, seq_k)`` causal masks, as functions of the two lengths; their symptoms as a mask shows
    them or, with ``attention``, as the outputs of attention through the mask show them."""
    cached = "right where seq_q = seq_k and wrong where keys are cached (seq_q < seq_k)"
    mistakes = [
        (
            TOP_LEFT_NAME,
            lambda q, k: _tril(q, k, 0),
            "With seq_q < seq_k the queries are the *last* seq_q positions: query i sits at position "
            "seq_k - seq_q + i and sees keys j <= seq_k - seq_q + i. A plain tril(ones(seq_q, seq_k)) aligns the "
            "mask to the top-left corner instead, as if the queries were the first words (PyTorch's "
            "F.scaled_dot_product_attention(..., is_causal=True) does the same).",
            "Shift the diagonal by the number of cached keys: `tril(diagonal=seq_k - seq_q)`.",
            f"Your mask is {cached}: there your queries see too few keys.",
            f"Your outputs are {cached}.",
        ),
        (
            WRONG_SIGN_NAME,
            lambda q, k: _tril(q, k, q - k),
            "The diagonal moves *up* by the number of cached keys, a positive offset; with seq_q - seq_k it moves "
            "the other way.",
            "`tril(diagonal=seq_k - seq_q)`.",
            f"Your mask is {cached}: there your first queries see nothing at all.",
            f"Your outputs are {cached}: there your first queries get zeros or NaN.",
        ),
        (
            POLARITY_NAME,
            lambda q, k: ~causal_mask(q, k),
            POLARITY_HINT,
            "Keep True where a query may attend, the lower triangle: `tril(diagonal=seq_k - seq_q)`.",
            "Your mask is True exactly where the reference's is False.",
            "Each query of yours draws on the keys after it, and the last one on none.",
        ),
        (
            SELF_BLOCKED_NAME,
            lambda q, k: _tril(q, k, k - q - 1),
            "Query i may see every key up to its own position, itself included; without it the first word has "
            "nothing to attend to.",
            "`tril(diagonal=seq_k - seq_q)`, without the - 1.",
            "Your queries do not see their own position: on a square mask the first query sees nothing.",
            "No query of yours draws on its own position; without a cache the first one gets zeros or NaN.",
        ),
        (
            "off by one: each token also sees the next one",
            lambda q, k: _tril(q, k, k - q + 1),
            "A query may see the keys up to its own position, not the one after it.",
            "`tril(diagonal=seq_k - seq_q)`, without the + 1.",
            "Each of your queries sees one key more than the reference's: the one right after it.",
            "Each of your queries also draws on the key right after it.",
        ),
        (
            "kept the upper triangle (every token sees the future)",
            lambda q, k: torch.ones(q, k, dtype=torch.bool).triu(k - q),
            "Row i is the query, column j the key; a causal query sees the past, the lower triangle.",
            "`torch.tril`, not `torch.triu`: `tril(diagonal=seq_k - seq_q)`.",
            "Your queries see their own position and the keys after it, not the keys before it.",
            "Your queries draw on their own position and the keys after it, not on the keys before it.",
        ),
        (
            "no mask at all (everything may attend)",
            lambda q, k: torch.ones(q, k, dtype=torch.bool),
            "A causal mask blocks every key after the query's own position.",
            OFFSET_FIX,
            "Your mask is True everywhere.",
            "Every query of yours draws on every key, the later ones too.",
        ),
    ]
    return [
        Misconception(name, implementation, hint, fix=fix, symptom=on_attention if attention else on_mask)
        for name, implementation, hint, fix, on_mask, on_attention in mistakes
    ]


def _draw_mask_sizes(generator: torch.Generator) -> list[Case]:
    """A square mask, one query, and two cached cases, two of them longer than a buffer of 16 or 32."""
    cases = []
    for kind, (low, high) in (("square", (2, 17)), ("one query", (18, 40)), ("cached", (33, 40)), ("cached", (2, 17))):
        (seq_k,) = _sizes(generator, 1, low, high)
        seq_q = {"square": seq_k, "one query": 1}.get(kind) or _sizes(generator, 1, 1, seq_k - 1)[0]
        cases.append(Case((seq_q, seq_k), description=f"seq_q={seq_q}, seq_k={seq_k}"))
    return cases


def check_cached_causal_mask(learner: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    """Exercise: ``learner(seq_q, seq_k)`` with ``seq_q <= seq_k`` must return the boolean ``(seq_q, seq_k)``
    causal mask of ``seq_q`` queries that are the *last* ``seq_q`` of ``seq_k`` positions (bottom-right
    aligned): ``True`` where key ``j <= seq_k - seq_q + i``. Square masks, one query after a cache, and
    lengths past 16 and 32 (longer than a fixed buffer) are checked."""
    sizes = [(1, 1), (3, 3), (17, 17), (1, 7), (3, 8), (5, 17), (4, 6)]
    cases = [Case(size, description=f"seq_q={size[0]}, seq_k={size[1]}") for size in sizes]
    mistakes = _offset_mistakes(attention=False)
    misconceptions = [
        *mistakes,
        Misconception(
            "rows and columns swapped: (seq_k, seq_q)",
            lambda q, k: _tril(k, q, q - k),
            "Rows are queries and columns keys.",
            fix="Build the mask with shape (seq_q, seq_k).",
            symptom="Your mask has one row per key and one column per query.",
        ),
        Misconception(
            "returned an additive 0/-inf float mask instead of a boolean one",
            lambda q, k: torch.zeros(q, k).masked_fill(~causal_mask(q, k), float("-inf")),
            "A mask of 0 and -inf is one to *add* to the scores; this exercise asks for the boolean form, True = "
            "may attend.",
            fix=f"Return booleans: {OFFSET_FIX}",
            symptom="Your mask holds 0 and -inf, not True and False.",
        ),
        # The same mistakes built from torch.ones without .bool(): a bool answer never matches a number one.
        *(
            replace(m, implementation=_as_number_mask(cast(Callable[..., torch.Tensor], m.implementation)))
            for m in mistakes
        ),
        Misconception(
            NUMBER_MASK_NAME,
            _as_number_mask(causal_mask),
            "The package's masks are boolean, True = may attend: `~mask` and `masked_fill` need True and False, "
            "not 1 and 0.",
            fix="Build it with `dtype=torch.bool`, or call `.bool()` on it.",
            symptom="Your mask has the right pattern, but it holds numbers, not True and False.",
        ),
    ]
    return check_function(
        "causal mask with an offset",
        learner,
        causal_mask,
        cases,
        misconceptions,
        shortcuts=("causal_mask",),
        draw=_draw_mask_sizes,
        verbose=verbose,
    )


# ---------------------------------------------------------------- causal attention through the learner's own


def _future_leaks(run: Callable[..., Any]) -> bool:
    """Change the last key and value: the output of every query before the last position must not move
    (beyond rounding: masking after the softmax and renormalising is right too, and rounds differently)."""
    g = torch.Generator().manual_seed(811)
    for seq_q, seq_k in ((5, 5), (3, 6)):
        q, k, v = (random_tensor(g, seq, 4) for seq in (seq_q, seq_k, seq_k))
        k2, v2 = k.clone(), v.clone()
        k2[-1], v2[-1] = random_tensor(g, 4) + 3.0, random_tensor(g, 4) + 3.0
        before, after = (torch.as_tensor(run(q, keys, values)[0]).double() for keys, values in ((k, v), (k2, v2)))
        # Only the last query sits at the last position; every other one comes before it.
        if not torch.allclose(before[:-1], after[:-1], rtol=1e-4, atol=1e-5):
            return True
    return False


CAUSAL_OUTPUTS = ("output",)
CAUSAL_INPUTS = ("q", "k", "v")


def _causal_cases() -> list:
    g = torch.Generator().manual_seed(821)

    def qkv(*shapes: tuple) -> tuple:
        return tuple(random_tensor(g, *shape) for shape in shapes)

    return [
        Case(qkv((5, 4), (5, 4), (5, 3)), description="no cache: q, k (5, 4), v (5, 3)"),
        Case(
            qkv((2, 3, 7, 8), (2, 3, 7, 8), (2, 3, 7, 2)),
            description="batch and heads: q, k (2, 3, 7, 8), v (2, 3, 7, 2)",
        ),
        Case(qkv((3, 4), (8, 4), (8, 4)), description="3 new queries after 5 cached tokens: q (3, 4), k, v (8, 4)"),
        Case(
            qkv((2, 3, 1, 16), (2, 3, 17, 16), (2, 3, 17, 5)),
            description="decoding one token after 16 cached: q (2, 3, 1, 16), k (2, 3, 17, 16), v (2, 3, 17, 5)",
        ),
        Case(qkv((1, 6), (1, 6), (1, 6)), description="one token: q, k, v (1, 6)"),
    ]


def _draw_causal(generator: torch.Generator) -> list[Case]:
    """No cache over a batch; cached keys over batch and heads; decoding one token; cached keys without a batch."""
    cases = []
    for axes, kind in ((1, "no cache"), (2, "cached"), (2, "one query"), (0, "cached")):
        batch = _sizes(generator, axes, 2, 3)
        (seq_k,), (d_k, d_v) = _sizes(generator, 1, 2, 9), _sizes(generator, 2, 1, 6)
        seq_q = {"no cache": seq_k, "one query": 1}.get(kind) or _sizes(generator, 1, 1, seq_k - 1)[0]
        q, k, v = (random_tensor(generator, *batch, s, d) for s, d in ((seq_q, d_k), (seq_k, d_k), (seq_k, d_v)))
        cases.append(Case((q, k, v), description=f"{kind}: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"))
    return cases


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The package's causal attention, bottom-right aligned: ``q (..., seq_q, d_k)``, ``k (..., seq_k, d_k)``,
    ``v (..., seq_k, d_v)`` -> ``(..., seq_q, d_v)``."""
    return cast(torch.Tensor, scaled_dot_product_attention(q, k, v, is_causal=True))


def _with_mask(make_mask: Callable[[int, int], torch.Tensor], guarded: bool) -> Callable[..., torch.Tensor]:
    def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        mask = make_mask(q.shape[-2], k.shape[-2])
        if guarded:  # the package's attention: a fully masked row gives zeros
            return cast(torch.Tensor, scaled_dot_product_attention(q, k, v, mask))
        scores = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~mask, float("-inf"))
        return torch.softmax(scores, dim=-1) @ v  # plain -inf: a fully masked row gives NaN

    return attention


def check_causal_attention(learner: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    """Exercise: ``learner(q, k, v)`` must return causal attention with the queries aligned to the *last*
    keys (query i at position seq_k - seq_q + i), like the package's
    ``scaled_dot_product_attention(q, k, v, is_causal=True)``: without a cache, with cached keys, when
    decoding one token, with batch and head axes, and on cases drawn for the answer. Values and the gradients
    reaching q, k and v are compared; every answer must also keep each earlier output unchanged when the last
    token changes."""
    misconceptions = [
        replace(m, implementation=_with_mask(cast(Callable[[int, int], torch.Tensor], m.implementation), guarded))
        for m in _offset_mistakes(attention=True)
        for guarded in (True, False)
    ]
    misconceptions.append(
        Misconception(
            FUTURE_NAME,
            None,
            "An earlier query can see a later token: the mask lets the future in somewhere.",
            detect=_future_leaks,
            fix="Build the mask from positions: query i sits at seq_k - seq_q + i and may see the keys j <= that "
            f"position: {OFFSET_FIX}",
            symptom="Changing the last key and value moves the output of an earlier query.",
            always=True,
        )
    )
    return compare_with_gradients(
        "causal attention with a cache",
        learner,
        causal_attention,
        _causal_cases(),
        misconceptions,
        CAUSAL_OUTPUTS,
        CAUSAL_INPUTS,
        draw=_draw_causal,
        verbose=verbose,
    )


# ---------------------------------------------------------------- masked softmax (a debugging exercise)


def handed_out_safe_masked_softmax(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The buggy masked softmax notebook 03 hands out, as it is there: ``scores (..., seq_q, seq_k)``, ``mask``
    broadcastable -> ``(..., seq_q, seq_k)``, filling where the mask allows and leaving fully masked rows NaN."""
    scores = scores.masked_fill(mask, float("-inf"))
    return torch.softmax(scores, dim=-1)


def _masked_softmax_cases() -> list:
    g = torch.Generator().manual_seed(701)
    one_row = random_mask(g, 4, 5)
    one_row[2] = False  # a query with nothing to attend to
    # Left padding with a causal mask: sequence 0 starts with two pad tokens, so its
    # first two queries see only padding -- fully masked rows that occur in practice.
    causal = torch.ones(4, 4, dtype=torch.bool).tril()
    real = torch.tensor([[False, False, True, True], [True, True, True, True]])
    left_padded = causal[None] & real[:, None, :]
    # Scores far apart: exp overflows without the max subtracted, and a query whose visible keys score
    # near -24000 while a blocked key scores -9000 defeats "add -10000 to blocked scores".
    wide = torch.tensor(
        [[1000.0, 2.0, -3.0, 1.0], [-24000.0, -25000.0, -9000.0, -30000.0], [0.5, 800.0, -1.0, 3.0]],
        dtype=torch.float64,
    )
    wide_mask = torch.ones(3, 4, dtype=torch.bool).tril()
    return [
        Case((random_tensor(g, 4, 5, scale=2.0), one_row), description="scores (4, 5), row 2 fully masked"),
        Case((random_tensor(g, 2, 4, 4, scale=2.0), left_padded), description="left padding + causal (2, 4, 4)"),
        Case(
            (random_tensor(g, 2, 3, 6, scale=2.0), random_mask(g, 2, 3, 6)),
            description="scores (2, 3, 6), no fully masked row",
        ),
        Case((wide, wide_mask), description="scores (3, 4) far apart: near +1000 and a row near -24000"),
    ]


def _draw_masked_softmax(generator: torch.Generator) -> list[Case]:
    """A mask per batch element; one mask shared by batch and heads; no batch; left padding with a causal mask.
    Each has a fully masked row, and the scores of a row lie at most a few dozen apart."""
    cases = []
    for axes, kind in ((1, "mask"), (2, "shared mask"), (0, "mask"), (1, "left padding + causal")):
        batch = _sizes(generator, axes, 2, 3)
        seq_q, seq_k = _sizes(generator, 2, 2, 7)
        if kind == "left padding + causal":
            seq_q = seq_k
            pads = torch.randint(1, seq_k, (batch[0], 1, 1), generator=generator)
            mask = causal_mask(seq_k) & (torch.arange(seq_k) >= pads)
        else:
            mask = random_mask(generator, *(batch if kind == "mask" else []), seq_q, seq_k)
            mask.reshape(-1, seq_q, seq_k)[-1, _sizes(generator, 1, 0, seq_q - 1)[0]] = False
        scores = random_tensor(generator, *batch, seq_q, seq_k, scale=2.0)
        scores = scores + random_tensor(generator, *batch, seq_q, 1, scale=5.0)
        cases.append(Case((scores, mask), description=f"scores {tuple(scores.shape)}, {kind} {tuple(mask.shape)}"))
    return cases


MAX_CLAMPED_NAME = "the row's max clamped at 0 (or a constant), not taken over the visible scores"
MAX_CLAMPED_HINT = (
    "The max you subtract must be the row's largest *visible* score: clamp_min(0), or a fixed number, turns a "
    "row maximum of -24000 into 0, and exp(-24000) underflows to 0, so the whole row vanishes. Only a fully "
    "masked row, whose max is -inf, needs a replacement."
)
MAX_CLAMPED_FIX = "Replace only an infinite max: `torch.where(row_max == float('-inf'), 0, row_max)`."
MAX_CLAMPED_SYMPTOM = "A row whose visible scores all lie far below 0 (near -1000, or -24000) comes out as zeros."
BLOCKED_IN_MAX_NAME = "blocked scores reach exp before the mask removes them"
BLOCKED_IN_MAX_HINT = (
    "A blocked score took part in exp (or in the row's max) before the mask removed it, and exp left the range "
    "of floating-point numbers: overflow to inf, or every visible key underflowing to 0. The blocked scores "
    "must be out of the row *before* the max and the exp."
)
BLOCKED_IN_MAX_FIX = (
    "Fill the blocked scores with -inf first, `scores.masked_fill(~mask, float('-inf'))`, then take the max and "
    "the exp."
)
BLOCKED_IN_MAX_SYMPTOM = (
    "A row with a blocked score far above the visible ones (like -9000 against visible scores near -24000) comes "
    "out as zeros or NaN."
)
NO_MAX_NAME = "did not subtract the row's max"
NO_MAX_HINT = (
    "exp(1000) is inf, and inf / inf is NaN; exp(-1000) is 0, so a row whose scores all lie that low vanishes. A "
    "shift by the row's largest visible score keeps every exponent <= 0 and the largest at exp(0) = 1, and changes "
    "nothing else."
)
NO_MAX_FIX = (
    "Subtract each row's largest visible score before exp, replaced by 0 where the row has none: "
    "`row_max = scores.amax(dim=-1, keepdim=True)`, then `torch.where(torch.isfinite(row_max), row_max, 0)`."
)
FULLY_MASKED_NAME = "a fully masked row gives NaN"
FULLY_MASKED_SYMPTOM = "A query whose keys are all blocked gets a row of NaN."
FULLY_MASKED_FIX = (
    "Guard that row: subtract 0 instead of an infinite max (`torch.where(torch.isfinite(row_max), row_max, 0)`), "
    "and divide by 1 where the row's sum is 0, so it comes out as zeros."
)
FILL = "Fill the blocked scores with -inf: `scores.masked_fill(~mask, float('-inf'))`."


def _given_a_softmax(
    probe: Callable[[Callable[..., Any]], bool], *, far: bool = False
) -> Callable[[Callable[..., Any]], bool]:
    """``probe``, taken as evidence only when the answer gives the softmax of an ordinary row with nothing
    blocked: an answer wrong for another reason (a softmax over the queries, say) is not told the probe's
    mistake. With ``far`` (a probe of scores near -1e35), not from an answer computing in float16 either,
    which turns such scores into -inf."""

    def probe_of_a_softmax(run: Callable[..., Any]) -> bool:
        scores = torch.tensor([[0.5, -1.0, 2.0]], dtype=torch.float64)
        weights = torch.as_tensor(run(scores, torch.ones(1, 3, dtype=torch.bool)))
        if far and weights.dtype == torch.float16:
            return False
        return bool(torch.allclose(weights.double(), torch.softmax(scores, dim=-1), atol=1e-3)) and probe(run)

    return probe_of_a_softmax


def _visible_row_far_below_zero_fails(run: Callable[..., Any]) -> bool:
    """Nothing blocked, every score near -1000: a max over the visible scores gives a row summing to 1."""
    scores = torch.tensor([[-1000.0, -1001.0, -1002.0, -999.5]], dtype=torch.float64)
    total = torch.as_tensor(run(scores, torch.ones(1, 4, dtype=torch.bool))).double().sum()
    return not bool(torch.isclose(total, torch.tensor(1.0, dtype=torch.float64), atol=1e-3))


def _large_scores_overflow(run: Callable[..., Any]) -> bool:
    """Nothing blocked, every score near +1000: exp of scores not shifted by the row's max overflows to inf
    (inf / inf is NaN); shifted, the row sums to 1."""
    scores = torch.tensor([[1000.0, 999.0, 998.0, 1000.5]], dtype=torch.float64)
    total = torch.as_tensor(run(scores, torch.ones(1, 4, dtype=torch.bool))).double().sum()
    return not bool(torch.isclose(total, torch.tensor(1.0, dtype=torch.float64), atol=1e-3))


def _unless_exp_overflows(probe: Callable[[Callable[..., Any]], bool]) -> Callable[[Callable[..., Any]], bool]:
    """``probe``, taken as evidence only from an answer that keeps exp in range on large scores: an answer that
    subtracts no max at all also loses a row of low scores (exp underflows to 0), and is told that mistake."""

    def probe_of_a_shifted_exp(run: Callable[..., Any]) -> bool:
        return not _large_scores_overflow(run) and probe(run)

    return probe_of_a_shifted_exp


def _blocked_score_reaches_exp(run: Callable[..., Any]) -> bool:
    """Visible scores near 0 and one blocked score of 1000: if the blocked score takes part in the max or
    in exp, the visible weights vanish (or become NaN)."""
    scores = torch.tensor([[0.0, 1.0, 1000.0, 2.0]], dtype=torch.float64)
    weights = torch.as_tensor(run(scores, torch.tensor([[True, True, False, True]]))).double()
    visible = weights[0, [0, 1, 3]].sum()
    return not bool(torch.isclose(visible, torch.tensor(1.0, dtype=torch.float64), atol=1e-3))


def _visible_keys_lose_weight(run: Callable[..., Any]) -> bool:
    """Visible keys scoring -1e35 and a blocked key scoring 0: with -inf the two visible keys share all the
    weight. A finite fill hands it to the blocked key, even when the weights are zeroed by the mask afterwards."""
    scores = torch.tensor([[-1e35, -1e35, 0.0]], dtype=torch.float64)
    weights = torch.as_tensor(run(scores, torch.tensor([[True, True, False]]))).double()
    return not bool(torch.isclose(weights[0, :2].sum(), torch.tensor(1.0, dtype=torch.float64), atol=1e-3))


def _fully_masked_row_is_nan(run: Callable[..., Any]) -> bool:
    scores = torch.tensor([[0.5, -1.0, 2.0], [1.0, 0.0, -1.0]], dtype=torch.float64)
    mask = torch.tensor([[False, False, False], [True, False, True]])
    return bool(torch.isnan(torch.as_tensor(run(scores, mask)).double()[0]).any())


def check_masked_softmax(learner: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    """Debugging exercise: ``learner(scores, mask)`` must return the softmax of ``scores (..., seq_q, seq_k)``
    over the keys that ``mask`` allows (``True`` = may attend), zeros elsewhere, and a row of
    zeros -- never NaN -- for a query whose keys are all blocked. The notebook hands out
    :func:`handed_out_safe_masked_softmax`; handed back unchanged it is told so, and a fix of one bug is told what
    still differs. Every answer must also give blocked keys no weight at all, and keep exp in range, whatever the
    scores."""
    cases = _masked_softmax_cases()

    def fill_then_softmax(scores, mask, fill=float("-inf")):
        return torch.softmax(scores.masked_fill(~mask, fill), dim=-1)

    def no_max(scores, mask):
        e = torch.exp(scores) * mask
        return e / e.sum(dim=-1, keepdim=True)

    def no_max_guarded(scores, mask):
        e = torch.exp(scores.masked_fill(~mask, float("-inf")))
        total = e.sum(dim=-1, keepdim=True)
        return e / torch.where(total == 0, torch.ones_like(total), total)

    def renormalised(scores, mask):
        weights = torch.softmax(scores, dim=-1) * mask
        return weights / weights.sum(dim=-1, keepdim=True)

    def global_row_max(scores, mask):
        weights = torch.exp(scores - scores.amax(dim=-1, keepdim=True)) * mask
        total = weights.sum(dim=-1, keepdim=True)
        return weights / torch.where(total == 0, torch.ones_like(total), total)

    def clamped_max(scores, mask):
        filled = scores.masked_fill(~mask, float("-inf"))
        weights = torch.exp(filled - filled.amax(dim=-1, keepdim=True).clamp_min(0.0))
        total = weights.sum(dim=-1, keepdim=True)
        return weights / torch.where(total == 0, torch.ones_like(total), total)

    misconceptions = [
        Misconception(
            FULLY_MASKED_NAME,
            fill_then_softmax,
            "When every score of a row is -inf, its max is -inf too, and -inf - (-inf) is NaN.",
            fix=FULLY_MASKED_FIX,
            symptom=FULLY_MASKED_SYMPTOM,
        ),
        Misconception(
            FULLY_MASKED_NAME,
            renormalised,
            "Renormalising after the softmax divides a fully masked row's sum, 0, by 0.",
            fix="Divide by 1 where the row's sum is 0: `weights / torch.where(total == 0, 1, total)`.",
            symptom=FULLY_MASKED_SYMPTOM,
        ),
        Misconception(
            MAX_CLAMPED_NAME,
            clamped_max,
            MAX_CLAMPED_HINT,
            detect=_visible_row_far_below_zero_fails,
            fix=MAX_CLAMPED_FIX,
            symptom=MAX_CLAMPED_SYMPTOM,
        ),
        Misconception(
            BLOCKED_IN_MAX_NAME,
            global_row_max,
            BLOCKED_IN_MAX_HINT,
            detect=_blocked_score_reaches_exp,
            fix=BLOCKED_IN_MAX_FIX,
            symptom=BLOCKED_IN_MAX_SYMPTOM,
        ),
        Misconception(
            "used a large negative number instead of -inf (a fully masked row becomes uniform)",
            lambda scores, mask: fill_then_softmax(scores, mask, -1e9),
            "A large negative fill hides the NaN, but a query with nothing to see then spreads its weight evenly "
            "over the blocked keys: it attends to padding.",
            fix="Fill with -inf, and guard the fully masked row so that it comes out as zeros.",
            symptom="A query whose keys are all blocked gets equal weight on every key, not zeros.",
        ),
        Misconception(
            AFTER_SOFTMAX_NAME,
            lambda scores, mask: torch.softmax(scores, dim=-1) * mask,
            AFTER_SOFTMAX_HINT,
            fix="Fill the blocked scores with -inf before the softmax, and guard the fully masked row.",
            symptom="Blocked keys get weight 0, but the weights of a row sum to less than 1.",
        ),
        Misconception(
            POLARITY_NAME,
            lambda scores, mask: masked_softmax_neg_inf(scores, ~mask),
            POLARITY_HINT,
            fix="Fill where the mask is False: `scores.masked_fill(~mask, float('-inf'))`.",
            symptom="Your weights go to the keys the mask blocks, and none to those it allows.",
        ),
        Misconception(
            "blocked scores set to 0 instead of -inf",
            lambda scores, mask: fill_then_softmax(scores, mask, 0.0),
            "A blocked score of 0 still gets weight exp(0) relative to the others; only -inf gives exp(-inf) = 0.",
            fix=FILL,
            symptom="Blocked keys still get weight: measure one.",
        ),
        Misconception(
            NO_MAX_NAME,
            no_max,
            NO_MAX_HINT,
            fix=NO_MAX_FIX,
            symptom="Your rows with a score near +1000 come out as NaN, and so does a row whose keys are all blocked.",
        ),
        Misconception(
            NO_MAX_NAME,
            no_max_guarded,
            NO_MAX_HINT,
            fix=NO_MAX_FIX,
            symptom="Your rows with a score near +1000 come out as NaN, and a row whose visible scores all lie near "
            "-24000 comes out as zeros.",
        ),
        Misconception(
            "blocked scores pushed down by adding -10000 instead of -inf",
            lambda scores, mask: torch.softmax(scores - 10_000.0 * (~mask), dim=-1) * mask.any(-1, keepdim=True),
            "Adding -10000 blocks a key only while every visible score is far above it.",
            fix=FILL,
            symptom="The query whose visible keys score near -24000 puts its weight on a blocked key at -9000.",
        ),
        Misconception(
            "added the boolean mask to the scores",
            lambda scores, mask: torch.softmax(scores + mask, dim=-1),
            "scores + mask adds 1 to every allowed score and 0 to every blocked one: nothing is blocked.",
            fix=f"Select with the mask instead. {FILL}",
            symptom="Blocked keys keep their weight; the allowed ones are only a little favoured.",
        ),
        Misconception(
            "multiplied -inf by (1 - mask): 0 × inf is NaN",
            lambda scores, mask: torch.softmax(scores + (1 - mask.to(scores.dtype)) * float("-inf"), dim=-1),
            "(1 - mask) * -inf is -inf where the mask is 0, but 0 × -inf = NaN where it is 1.",
            fix=f"Use masked_fill, which never multiplies by infinity. {FILL}",
            symptom="Every weight of yours is NaN.",
        ),
        # Properties every right answer has, probed on every answer (so close variants are named too), and
        # taken as evidence only from an answer that is a softmax over the keys at all. Exp out of range on large
        # scores comes first: without a max, low scores underflow too, which the two probes after it look for.
        Misconception(
            NO_MAX_NAME,
            None,
            NO_MAX_HINT,
            detect=_given_a_softmax(_large_scores_overflow),
            fix=NO_MAX_FIX,
            symptom="A row of scores near +1000, with nothing blocked, comes out as NaN or does not sum to 1.",
            always=True,
        ),
        Misconception(
            MAX_CLAMPED_NAME,
            None,
            MAX_CLAMPED_HINT,
            detect=_given_a_softmax(_unless_exp_overflows(_visible_row_far_below_zero_fails)),
            fix=MAX_CLAMPED_FIX,
            symptom=MAX_CLAMPED_SYMPTOM,
            always=True,
        ),
        Misconception(
            FINITE_FILL_NAME,
            None,
            FINITE_FILL_HINT,
            detect=_given_a_softmax(blocked_key_gets_weight, far=True),
            fix=FILL,
            symptom="A blocked key still takes weight when the visible keys score far below it (near -1e35).",
            always=True,
        ),
        Misconception(
            FINITE_FILL_NAME,
            None,
            "A finite fill (-10000, -1e9, or one below the row's minimum) blocks a key only while every visible "
            "score stays far above it: when the visible keys score -1e35, a blocked key at 0 takes their weight, "
            "and zeroing it afterwards leaves the visible keys almost nothing.",
            detect=_given_a_softmax(_unless_exp_overflows(_visible_keys_lose_weight), far=True),
            fix=FILL,
            symptom="When the visible keys score far below a blocked one (near -1e35), your visible weights do not "
            "sum to 1.",
            always=True,
        ),
        Misconception(
            BLOCKED_IN_MAX_NAME,
            None,
            BLOCKED_IN_MAX_HINT,
            detect=_given_a_softmax(_blocked_score_reaches_exp),
            fix=BLOCKED_IN_MAX_FIX,
            symptom=BLOCKED_IN_MAX_SYMPTOM,
            always=True,
        ),
        Misconception(
            FULLY_MASKED_NAME,
            None,
            "A row whose keys are all blocked has max -inf (and -inf - (-inf) is NaN) or sum 0 (and 0 / 0 is NaN).",
            detect=_given_a_softmax(_fully_masked_row_is_nan),
            fix=FULLY_MASKED_FIX,
            symptom=FULLY_MASKED_SYMPTOM,
            always=True,
        ),
    ]
    return check_function(
        "masked softmax",
        learner,
        masked_softmax_neg_inf,
        cases,
        misconceptions,
        shortcuts=("masked_softmax_neg_inf", "masked_softmax_renormalize"),
        draw=_draw_masked_softmax,
        original=handed_out_safe_masked_softmax,
        verbose=verbose,
    )


# ------------------------------------------------------------------ build: the padding mask


def _padding(lengths: torch.Tensor, seq_len: int, *, keep="real", shape="keys", last=False) -> torch.Tensor:
    """The padding mask and its known slips: ``keep="pads"`` (True on the padding), ``last`` (one key too many,
    ``<=``), ``shape="flat"`` (``(batch, seq_len)``, no axes for the heads and the queries) or ``"queries"`` (the
    lengths laid along the queries' axis)."""
    positions = torch.arange(seq_len)
    real = positions <= lengths[:, None] if last else positions < lengths[:, None]
    mask = ~real if keep == "pads" else real
    return {"keys": mask[:, None, None, :], "flat": mask, "queries": mask[:, None, :, None]}[shape]


PADDING_MISCONCEPTIONS = (
    Misconception(
        "the mask has no axes for the heads and the queries",
        lambda lengths, seq_len: _padding(lengths, seq_len, shape="flat"),
        "The mask meets scores (batch, heads, seq_q, seq_k): broadcasting lines axes up from the right, so a (batch, "
        "seq_len) mask would pair its batch axis with the queries' axis.",
        fix="Index the (batch, seq_len) mask with [:, None, None, :]: (batch, 1, 1, seq_len).",
        symptom="Your mask has the right values and too few axes. Look at which axes of the scores it must meet.",
    ),
    Misconception(
        "True on the padding",
        lambda lengths, seq_len: _padding(lengths, seq_len, keep="pads"),
        "This series' masks are True where a key may be seen: the real tokens, positions j < lengths[b].",
        fix="positions < lengths[:, None], not >=.",
        symptom="Your mask is True exactly where it should be False. Look at which keys it keeps.",
    ),
    Misconception(
        "one key too many",
        lambda lengths, seq_len: _padding(lengths, seq_len, last=True),
        "A sequence of length L holds the keys 0 .. L - 1: key L is the first pad.",
        fix="positions < lengths[:, None] (strictly less).",
        symptom="Each sequence's mask keeps one key more than its length. Look at the comparison.",
    ),
    Misconception(
        "the lengths laid along the queries",
        lambda lengths, seq_len: _padding(lengths, seq_len, shape="queries"),
        "A key-padding mask hides keys: its last axis is the keys' axis, so every query sees the same keys.",
        fix="(batch, 1, 1, seq_len), the positions on the last axis.",
        symptom="Your mask runs along the queries' axis, not the keys'. Look at where its length-seq_len axis sits.",
    ),
)


def _padding_cases() -> list[Case]:
    def case(lengths, seq_len):
        return Case((torch.tensor(lengths), seq_len), description=f"lengths {lengths}, seq_len={seq_len}")

    # Lengths from 0 (all padding) to seq_len (none), and a batch of one; no batch size equals seq_len.
    return [case([3, 5], 5), case([6, 1, 0], 7), case([4], 6)]


def check_padding_mask(learner: Callable[..., torch.Tensor], *, verbose: bool = True) -> CheckResult:
    """Check ``learner(lengths (batch,), seq_len) -> (batch, 1, 1, seq_len)`` bool, True where key ``j`` is a real
    token (``j < lengths[b]``): the key-padding mask of this notebook, ready to broadcast over the scores
    ``(batch, heads, seq_q, seq_k)``. The reference is :func:`mhsa_helpers.padding_mask`."""
    return check_function(
        "padding_mask",
        learner,
        padding_mask,
        _padding_cases(),
        PADDING_MISCONCEPTIONS,
        shortcuts=("padding_mask",),
        verbose=verbose,
    )


# ------------------------------------------------------------------ build: a padded batch, causal


def padded_causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """The package's attention over a batch padded at the end, under the causal mask AND the padding mask: ``q``,
    ``k``, ``v`` ``(batch, heads, seq, d_head)``, ``lengths (batch,)`` -> ``(batch, heads, seq, d_head)``. A padded
    query (position ``>= lengths[b]``) sees every real token of its sequence, since they all come before it; with a
    length of 0 it would see nothing and get zeros, which the checker's cases never ask for."""
    seq = q.shape[-2]
    return cast(torch.Tensor, scaled_dot_product_attention(q, k, v, causal_mask(seq) & padding_mask(lengths, seq)))


def _padded_mask(lengths: torch.Tensor, seq: int, slip: str) -> torch.Tensor:
    """The mask a known slip of the padded-batch exercise builds (``slip`` a key of :data:`PADDED_MISTAKES`)."""
    causal, keys, flat = causal_mask(seq), _padding(lengths, seq), _padding(lengths, seq, shape="flat")
    # Built on demand: the flat masks broadcast only where batch == seq (or heads) and raise everywhere else.
    masks: dict[str, Callable[[], torch.Tensor]] = {
        "or": lambda: causal | keys,
        "padding only": lambda: keys,
        "causal only": lambda: causal,
        "queries": lambda: causal & _padding(lengths, seq, shape="queries"),
        "inverted": lambda: causal & _padding(lengths, seq, keep="pads"),
        "flat": lambda: causal & flat,  # (seq, seq): the batch axis meets the queries'
        "flat over heads": lambda: causal & flat[:, None, :],  # (batch, seq, seq): the batch axis meets the heads'
    }
    return masks[slip]()


def _padded_slip(slip: str, guarded: bool) -> Callable[..., torch.Tensor]:
    def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        mask = _padded_mask(lengths, q.shape[-2], slip)
        if guarded:  # the package's attention standing in for the learner's: a row with no key gives zeros
            return cast(torch.Tensor, scaled_dot_product_attention(q, k, v, mask))
        scores = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~mask, float("-inf"))
        return torch.softmax(scores, dim=-1) @ v  # notebook 02's attention: a row with no key gives NaN

    return attention


PADDED_FIX = (
    "pass `my_causal_mask(seq, seq) & my_padding_mask(lengths, seq)` (with `seq = q.shape[-2]`) to your attention."
)
PADDED_FLAT_NAME = "a padding mask without its axes of 1: its batch axis meets another axis of the scores"

#: Each known slip of the padded-batch exercise: its mask (a key of :func:`_padded_mask`), its name, what the answer
#: does (the symptom; ``{empty}`` is what a row without keys gives, zeros or NaN), the idea behind it (the hint) and
#: the fix.
PADDED_MISTAKES = (
    (
        "or",
        "the two masks combined with OR",
        "Your real queries draw on the real tokens after them, and your padded queries on padding keys.",
        "Each mask is True where a key *may* be seen, so a key may be seen only where both are True. Where either "
        "one is enough, the padding mask lets every real query see the real tokens after it, and the causal mask "
        "lets every padded query see the pads up to its own position.",
        f"True only where both masks are True: {PADDED_FIX}",
    ),
    (
        "padding only",
        "only the padding mask: the future is not hidden",
        "Your real queries draw on the real tokens after them; your padded queries' rows are right.",
        "The padding mask hides the pads from every query but says nothing about order: without the causal mask, "
        "each real token sees the real tokens after it.",
        f"Combine it with your causal mask: {PADDED_FIX}",
    ),
    (
        "causal only",
        "only the causal mask: the padding is not hidden",
        "Your real queries' rows are right, but your padded queries draw on padding keys.",
        "With the padding at the end, every key before a real query is real, so the causal mask alone gets the real "
        "queries right. A padded query at position i sees keys 0 to i under it, among them the pads from the "
        "sequence's length up to i: the padding mask is what hides those.",
        f"Combine it with your padding mask: {PADDED_FIX}",
    ),
    (
        "queries",
        "every key hidden from the padded queries",
        "Your real queries' rows are right, but your padded queries get {empty}: they see no key at all, where the "
        "two rules leave them the real tokens of their sequence.",
        "The padding mask hides padded *keys*: its length-seq axis is the keys' axis, the last one. Laid along the "
        "queries' axis, a (batch, 1, seq, 1) mask (or one asking that the query be real too) hides a padded query's "
        "whole row, and a row with nothing to attend to gives NaN through a plain softmax, zeros through a guarded "
        "one (zeroing their outputs afterwards gives the same zeros). The rules are about keys only: a padded query "
        "sees the real tokens of its sequence, which all come before it.",
        f"Keep `my_padding_mask(lengths, seq)` as it comes, (batch, 1, 1, seq): {PADDED_FIX}",
    ),
    (
        "inverted",
        "the padding mask inverted (True on the padding)",
        "Your real queries get {empty}, and your padded queries draw on padding keys only.",
        "`my_padding_mask` is True on the real tokens, as the causal mask is True where a key may be seen: both "
        "already say 'may attend', so neither needs `~`. Inverted, the padding mask keeps the pads and hides the "
        "real tokens.",
        f"Without the `~`: {PADDED_FIX}",
    ),
)


def _padded_misconceptions() -> list[Misconception]:
    mistakes = [
        Misconception(
            name,
            _padded_slip(slip, guarded),
            hint,
            fix=fix,
            symptom=symptom.format(empty="zeros" if guarded else "NaN"),
        )
        for slip, name, symptom, hint, fix in PADDED_MISTAKES
        for guarded in (True, False)
    ]
    flat_hint = (
        "Broadcasting lines axes up from the right. A (batch, seq) padding mask against the (seq, seq) causal mask "
        "pairs its batch axis with the queries' axis: an error when batch and seq differ and, when they are equal, "
        "query i of every sequence gets the padding of sequence i. A (batch, 1, seq) one pairs it with the heads' "
        "axis instead. The batch axis must stay first, with an axis of 1 for the heads and one for the queries."
    )
    flat_fix = (
        "Use `my_padding_mask(lengths, seq)`, (batch, 1, 1, seq), or index a (batch, seq) mask with "
        "`[:, None, None, :]`."
    )
    for slip in ("flat", "flat over heads"):
        mistakes += [
            Misconception(
                PADDED_FLAT_NAME,
                _padded_slip(slip, guarded),
                flat_hint,
                fix=flat_fix,
                symptom="Your queries take their padding from another sequence of the batch.",
            )
            for guarded in (True, False)
        ]
    return mistakes


def _padded_case(generator: torch.Generator, lengths: list[int], heads: int, seq: int, d_head: int) -> Case:
    q, k, v = (random_tensor(generator, len(lengths), heads, seq, d_head) for _ in range(3))
    return Case(
        (q, k, v, torch.tensor(lengths)),
        description=f"lengths {lengths}, q, k, v {tuple(q.shape)}",
    )


def _padded_cases() -> list[Case]:
    g = torch.Generator().manual_seed(1301)
    # No two axes of the same length; a sequence without padding, one with a single real token, a batch of one.
    return [
        _padded_case(g, [5, 2], heads=3, seq=5, d_head=4),
        _padded_case(g, [1, 4, 3], heads=2, seq=6, d_head=4),
        _padded_case(g, [4], heads=2, seq=7, d_head=5),
    ]


def _padded_square_cases() -> list[Case]:
    """Every axis of length 4: a (batch, seq) or (batch, 1, seq) padding mask runs here without an error."""
    return [_padded_case(torch.Generator().manual_seed(1302), [4, 1, 3, 2], heads=4, seq=4, d_head=4)]


def _draw_padded(generator: torch.Generator) -> list[Case]:
    """Four batches of drawn sizes; every length at least 1, and the last sequence padded."""
    cases = []
    for _ in range(4):
        (batch,), (heads,), (seq,), (d_head,) = (_sizes(generator, 1, *r) for r in ((2, 4), (1, 3), (3, 8), (2, 6)))
        lengths = _sizes(generator, batch - 1, 1, seq) + _sizes(generator, 1, 1, seq - 1)
        cases.append(_padded_case(generator, lengths, heads, seq, d_head))
    return cases


def check_padded_causal_attention(learner: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    """Check ``learner(q, k, v, lengths)``: attention over a batch padded at the end, ``q``, ``k``, ``v`` ``(batch,
    heads, seq, d_head)`` and ``lengths (batch,)`` (at least 1) -> ``(batch, heads, seq, d_head)``, where every
    query, a padded one too, sees no key after its own position and no padding key. Every row is compared with
    :func:`padded_causal_attention`: a real query's with the causal attention of its sequence alone, a padded
    query's with the attention over all its sequence's real tokens (no row is empty, so a right answer gives no NaN).

    With the padding at the end, the causal mask alone already gets every real query right: the padded queries'
    rows are what tell the padding mask's absence, and the checker compares them too."""
    return check_function(
        "padded causal attention",
        learner,
        padded_causal_attention,
        _padded_cases(),
        _padded_misconceptions(),
        square_cases=_padded_square_cases(),
        shortcuts=("combine_masks",),
        draw=_draw_padded,
        verbose=verbose,
    )


# ------------------------------------------------------------------ build: dropout on the attention weights

#: The probes' weights: (batch, heads, seq_q, seq_k), no two axes of the same length, 10 800 weights in all.
DROPOUT_PROBE_SHAPE = (3, 4, 20, 45)
#: The two dropout probabilities the probes use: p and 1 - p differ at both, as do the shares a mistake drops.
DROPOUT_PROBE_PS = (0.25, 0.6)
#: How far the share of zeroed weights may stray from p, in standard deviations of the binomial count. A right
#: answer strays further with probability about 2e-9 at each p (the count of 10 800 independent draws is close to
#: normal; Hoeffding's bound, which needs no approximation, still gives below 3e-6); every share a known mistake
#: drops lies more than 15 standard deviations away.
DROPOUT_SIGMAS = 6.0

DROPOUT_REVERSED = "the training switch reversed"
DROPOUT_IN_EVALUATION = "dropout also in evaluation"
DROPOUT_SCALED_AT_TEST = "scaled in evaluation instead of in training"
DROPOUT_NOTHING_DROPPED = "nothing dropped in training"
DROPOUT_NOT_RESCALED = "survivors not rescaled"
DROPOUT_TIMES_KEEP = "multiplied by 1 - p instead of dividing"
DROPOUT_RENORMALISED = "rows renormalised after dropping"
DROPOUT_SHARED = "one mask for every sequence or head"
DROPOUT_BLOCKS = "weights dropped in blocks, not one by one"
DROPOUT_SAME_DRAW = "the same weights dropped at every call"
DROPOUT_KEEP_PROBABILITY = "p taken as the probability of keeping"
DROPOUT_RANDN = "normal numbers (randn) instead of uniform ones (rand)"
DROPOUT_SHARE = "the share dropped is not p"


def _softmax_weights(generator: torch.Generator, *shape: int) -> torch.Tensor:
    """Attention weights of ``shape``: the softmax of random scores, every weight above 0 (so a zero is a drop)."""
    return torch.softmax(random_tensor(generator, *shape, scale=2.0), dim=-1)


def dropout_expected(weights: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """What the dropout checker compares with: ``weights`` in evaluation (and with ``p = 0``, where ``1 - p`` is 1),
    ``weights / (1 - p)`` in training. A right answer's output, with each weight it dropped filled in by its
    ``weight / (1 - p)``, is exactly this, whichever weights it drew."""
    return weights / (1 - p) if training else weights.clone()


def _kept_filled(output: Any, weights: Any, p: float, training: bool) -> Any:
    """In training with ``p > 0``: ``output`` with its zeros filled in by ``weights / (1 - p)``, which takes the chance
    out of a right answer (any other output is handed on as it is, for the comparison to describe)."""
    if not (training and p > 0 and isinstance(output, torch.Tensor) and isinstance(weights, torch.Tensor)):
        return output
    if output.shape != weights.shape or not output.is_floating_point():
        return output
    return torch.where(output == 0, (weights / (1 - p)).to(output.dtype), output)


def _seeded_dropout(learner: Callable[..., Any], raw: list[Any]) -> Callable[..., Any]:
    """``learner`` as the checker calls it. Each call draws from PyTorch's generator seeded afresh from a generator
    of the checker's own, and gives the generator back as it was: the check is the same run after run, two calls
    draw two masks, and drawing (what dropout is for) is no change of the notebook's settings. The learner's own
    output is put in ``raw``; in training with ``p > 0`` the call returns it with its zeros filled in
    (:func:`_kept_filled`)."""
    seeds = torch.Generator().manual_seed(9103)

    @functools.wraps(learner)
    def seeded(weights: Any, p: float, training: bool) -> Any:
        before = weights.detach().clone() if isinstance(weights, torch.Tensor) else weights
        seed = int(torch.randint(2**62, (1,), generator=seeds))
        with torch.random.fork_rng(devices=[]):
            torch.default_generator.manual_seed(seed)
            output = learner(weights, p, training)
        raw.append(output)
        return _kept_filled(output, before, p, training)

    return seeded


@dataclass(frozen=True)
class _DropoutDraws:
    """The learner's outputs on the probes' weights (float64): in evaluation and in training at each p of
    :data:`DROPOUT_PROBE_PS`, and a second training call at the first p."""

    weights: torch.Tensor
    evaluation: tuple[torch.Tensor, ...]
    training: tuple[torch.Tensor, ...]
    again: torch.Tensor


def _dropout_draws(run: Callable[..., Any], raw: list[Any]) -> _DropoutDraws | None:
    """The learner's outputs on the probes' weights, or None when a call gives no floating tensor of their shape
    (the cases have told what is wrong then)."""
    weights = _softmax_weights(torch.Generator().manual_seed(9104), *DROPOUT_PROBE_SHAPE)

    def output(p: float, training: bool) -> torch.Tensor:
        run(weights, p, training)
        got = raw[-1]
        if not (isinstance(got, torch.Tensor) and got.shape == weights.shape and got.is_floating_point()):
            raise ValueError("not the weights' shape")
        return got.detach().to(torch.float64)

    try:
        evaluation = tuple(output(p, False) for p in DROPOUT_PROBE_PS)
        training = tuple(output(p, True) for p in DROPOUT_PROBE_PS)
        again = output(DROPOUT_PROBE_PS[0], True)
    except Exception:  # the learner's code failed on the probes: no evidence either way
        return None
    return _DropoutDraws(weights, evaluation, training, again)


def _equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    # Within float32's rounding of a factor such as 1 / 0.75, far from every other factor a mistake gives.
    return bool(torch.allclose(a, b, rtol=1e-6, atol=1e-12))


def _scaled_by(output: torch.Tensor, weights: torch.Tensor, factor: float) -> bool:
    """Some weights kept, some dropped, and every kept one is its weight times ``factor``."""
    kept = output != 0
    return bool(kept.any()) and not bool(kept.all()) and _equal(output[kept], weights[kept] * factor)


def _repeats_along(kept: torch.Tensor, axes: tuple[int, ...]) -> bool:
    """The keep mask is the same at every index of one of ``axes``."""
    return any(bool((kept == kept.narrow(axis, 0, 1)).all()) for axis in axes)


def _normal_below(p: float) -> float:
    """The probability that a standard normal number is below ``p``."""
    return 0.5 * (1 + math.erf(p / math.sqrt(2)))


def _share_near(share: float, centre: float, count: int) -> bool:
    return abs(share - centre) <= DROPOUT_SIGMAS * math.sqrt(centre * (1 - centre) / count)


def _dropout_mistake(draws: _DropoutDraws | None) -> str | None:
    """The one known mistake the learner's outputs show, or None. The mistakes are looked for in this order, and the
    first one found is named: each is named only when its own evidence is there, and an answer with two of them
    is told the first, then the second once it is fixed."""
    if draws is None:
        return None
    w, ps = draws.weights, DROPOUT_PROBE_PS
    drops_in_evaluation = any(bool((out == 0).any()) for out in draws.evaluation)  # w has no zero
    unchanged_in_training = all(_equal(out, w) for out in draws.training)
    if drops_in_evaluation:
        return DROPOUT_REVERSED if unchanged_in_training else DROPOUT_IN_EVALUATION
    if all(_equal(out, w * (1 - p)) for out, p in zip(draws.evaluation, ps, strict=True)):
        return DROPOUT_SCALED_AT_TEST
    if unchanged_in_training:
        return DROPOUT_NOTHING_DROPPED
    if all(_scaled_by(out, w, 1.0) for out in draws.training):
        return DROPOUT_NOT_RESCALED
    if all(_scaled_by(out, w, 1 - p) for out, p in zip(draws.training, ps, strict=True)):
        return DROPOUT_TIMES_KEEP
    rows_of_one = [
        bool((out != 0).any(-1).any()) and _equal(out.sum(-1)[(out != 0).any(-1)], torch.ones(()).double())
        for out in draws.training
    ]
    if all(rows_of_one) and not all(bool((out != 0).all()) for out in draws.training):
        return DROPOUT_RENORMALISED
    # A right answer repeats its mask along an axis, drops as many weights in every row, or draws the same mask
    # twice with probability below 1e-100: each needs hundreds of its independent draws to agree.
    kept = draws.training[0] != 0
    if 0 < float(kept.double().mean()) < 1:  # a mask that keeps all or nothing repeats everywhere: its share tells
        if _repeats_along(kept, (0, 1)):
            return DROPOUT_SHARED
        dropped_per_row = (~kept).sum(-1)
        if _repeats_along(kept, (2, 3)) or bool((dropped_per_row == dropped_per_row.flatten()[0]).all()):
            return DROPOUT_BLOCKS
        if torch.equal(kept, draws.again != 0):
            return DROPOUT_SAME_DRAW
    shares = [float((out == 0).double().mean()) for out in draws.training]
    if all(_share_near(share, 1 - p, w.numel()) for share, p in zip(shares, ps, strict=True)):
        return DROPOUT_KEEP_PROBABILITY
    if all(_share_near(share, _normal_below(p), w.numel()) for share, p in zip(shares, ps, strict=True)):
        return DROPOUT_RANDN
    if not all(_share_near(share, p, w.numel()) for share, p in zip(shares, ps, strict=True)):
        return DROPOUT_SHARE
    return None


#: Each known mistake of the dropout exercise: its name, what the answer does (the symptom), the idea behind it
#: (the hint) and the fix.
DROPOUT_MISTAKES = (
    (
        DROPOUT_REVERSED,
        "With training=False your output has zeros where the weights have none, and with training=True it is the "
        "weights unchanged.",
        "Dropout acts only while the model trains (training=True); in evaluation it leaves the weights alone. Your "
        "condition does the opposite.",
        "Return the weights unchanged when `not training`, and drop only otherwise.",
    ),
    (
        DROPOUT_IN_EVALUATION,
        "With training=False your output has zeros where the weights have none.",
        "Dropout is noise for training only: in evaluation (model.eval(), training=False) every weight passes "
        "unchanged, or two runs on the same input give two answers. F.dropout(weights, p) without its training "
        "argument, and an nn.Dropout never switched with .eval(), drop in every call: both default to training.",
        "Begin with `if not training: return weights`.",
    ),
    (
        DROPOUT_SCALED_AT_TEST,
        "With training=False your output is the weights times (1 - p), not the weights themselves.",
        "That is dropout as first published (Srivastava et al., 2014): the survivors kept as they are in training, "
        "every weight multiplied by 1 - p at test time. PyTorch, and this notebook, use inverted dropout: the "
        "survivors are divided by 1 - p in training, so that evaluation has nothing to do.",
        "Return the weights unchanged in evaluation, and divide the survivors by (1 - p) in training.",
    ),
    (
        DROPOUT_NOTHING_DROPPED,
        "With training=True and p > 0 your output is the weights unchanged.",
        "In training each weight is zeroed with probability p: the random mask is the whole point of dropout.",
        "Draw a keep mask with the weights' shape, `torch.rand_like(weights) >= p`, and apply it in training.",
    ),
    (
        DROPOUT_NOT_RESCALED,
        "In training the weights you keep are the weights themselves: on average a row of yours sums to 1 - p, not 1.",
        "Zeroing a share p of the weights lowers each one's expected value to (1 - p) × weight. Dividing the "
        "survivors by 1 - p brings it back, so that what comes after sees weights of the same size in training "
        "and in evaluation.",
        "Divide what you keep by (1 - p): `weights * keep / (1 - p)`.",
    ),
    (
        DROPOUT_TIMES_KEEP,
        "In training the weights you keep are smaller than the weights, by a factor 1 - p.",
        "Dropping a share p leaves (1 - p) × weight on average; to bring the expected value back up to the weight, "
        "the survivors are divided by 1 - p (made larger), not multiplied by it.",
        "`/ (1 - p)` instead of `* (1 - p)`.",
    ),
    (
        DROPOUT_RENORMALISED,
        "In training every row of yours that keeps a weight sums to exactly 1.",
        "Renormalising looks natural, since attention weights sum to 1, but it is not dropout: a survivor's scale "
        "then depends on which other weights of its row were dropped, so its expected value is no longer its "
        "weight (and a row that loses every weight divides 0 by 0). Dropout divides every survivor by the same "
        "1 - p: each weight keeps its expected value, and a row sums to 1 only on average.",
        "Divide by (1 - p), not by the row's sum.",
    ),
    (
        DROPOUT_SHARED,
        "In training your output drops the same positions in every sequence of the batch, or in every head.",
        "Each weight is dropped independently of all the others. A mask drawn with the shape of the last axes only, "
        "(seq_q, seq_k), broadcasts over the batch and the heads: every sequence and every head loses the same "
        "weights, and noise that should differ from one to the next is the same everywhere.",
        "Draw the mask with the weights' own shape: `torch.rand_like(weights)`.",
    ),
    (
        DROPOUT_BLOCKS,
        "In training your output drops whole rows or columns at once, or the same number of weights in every row.",
        "Dropout decides for each weight on its own: whether one weight is dropped says nothing about its "
        "neighbours. One draw per row or column, or a fixed number dropped in each row, is another kind of noise.",
        "One uniform number per weight, `torch.rand_like(weights)`, compared with p.",
    ),
    (
        DROPOUT_SAME_DRAW,
        "Two calls in training on the same weights drop exactly the same positions.",
        "The mask is drawn afresh at every call from PyTorch's random generator as it stands. Seeding it inside the "
        "function (torch.manual_seed), a generator of your own seeded the same way, or a fixed pattern drops the "
        "same weights every time: the model would learn around that one mask.",
        "Leave the generator alone inside the function; draw with `torch.rand_like(weights)`.",
    ),
    (
        DROPOUT_KEEP_PROBABILITY,
        "In training your output zeroes about a share 1 - p of the weights, not p: three in four with p = 0.25.",
        "p is the probability of *dropping* a weight (as in nn.Dropout(p) and F.dropout): a weight survives with "
        "probability 1 - p. A uniform number is below p with probability p, so a mask that keeps the weights where "
        "it is below p keeps a share p of them.",
        "Keep where the uniform number is at least p: `torch.rand_like(weights) >= p`.",
    ),
    (
        DROPOUT_RANDN,
        "In training your output zeroes a share of the weights that is neither p nor 1 - p: about 60% with p = 0.25 "
        "and 73% with p = 0.6.",
        "torch.randn draws normal numbers (mean 0, spread 1), which lie below p with a probability that is not p. "
        "Only a uniform number in [0, 1), from torch.rand, is below p with probability exactly p.",
        "`torch.rand_like(weights)`, not `torch.randn_like(weights)`.",
    ),
    (
        DROPOUT_SHARE,
        "In training the share of the weights your output zeroes is far from p: more than 6 standard deviations "
        "of a fair draw away.",
        "Each weight is dropped with probability exactly p, so that over many weights a share p of them is zero.",
        "One uniform number per weight, kept where it is at least p: `torch.rand_like(weights) >= p`.",
    ),
)


def _dropout_case_said(weights: torch.Tensor, p: float, training: bool) -> str:
    said = f"{'training' if training else 'evaluation'}, p={p:g}, weights {tuple(weights.shape)}"
    # In training the reference is no draw: what every right answer gives once its zeros are filled in.
    return said + (", kept weights against weight / (1 - p)" if training and p > 0 else "")


def _dropout_cases() -> list[Case]:
    g = torch.Generator().manual_seed(9101)
    small, large = _softmax_weights(g, 2, 3, 4, 5), _softmax_weights(g, *DROPOUT_PROBE_SHAPE)

    def case(weights: torch.Tensor, p: float, training: bool) -> Case:
        return Case((weights, p, training), description=_dropout_case_said(weights, p, training))

    # Training first: the first case is where a call of F.dropout is noticed, and an answer may call it there only.
    return [
        case(small, 0.25, True),
        case(small, 0.25, False),
        case(small, 0.0, True),
        case(large, DROPOUT_PROBE_PS[1], True),
        case(large, DROPOUT_PROBE_PS[1], False),
    ]


def _draw_dropout(generator: torch.Generator) -> list[Case]:
    """Weights of drawn sizes, in training, in evaluation, in training again and with p = 0."""
    cases = []
    for training, nothing in ((True, False), (False, False), (True, False), (True, True)):
        shape = _sizes(generator, 1, 1, 3) + _sizes(generator, 1, 1, 4) + _sizes(generator, 1, 1, 6)
        shape += _sizes(generator, 1, 2, 9)
        p = 0.0 if nothing else (0.1, 0.2, 0.3, 0.5, 0.7)[_sizes(generator, 1, 0, 4)[0]]
        weights = _softmax_weights(generator, *shape)
        cases.append(Case((weights, p, training), description=_dropout_case_said(weights, p, training)))
    return cases


def check_attention_dropout(learner: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    """Check ``learner(weights, p, training)``, dropout on attention weights ``(batch, heads, seq_q, seq_k)``: in
    training each weight zeroed with probability ``p`` and the survivors divided by ``1 - p`` (inverted dropout, as
    ``torch.nn.functional.dropout`` does); in evaluation, or with ``p = 0``, the weights unchanged.

    The output is random, and an answer may draw its mask in any way: the checker compares no draw with a
    reference. Each call draws from PyTorch's generator seeded by the checker (and given back afterwards), so the
    verdict is the same run after run. On the cases, evaluation and ``p = 0`` must give the weights, and in
    training every weight kept must be ``weight / (1 - p)`` (:func:`dropout_expected`). On 10 800 weights, the share
    zeroed must be near ``p``, the weights dropped independently (not the same in every sequence, head, row or
    column) and anew at every call; each known mistake is named by what it does there
    (:func:`_dropout_mistake`)."""
    if not callable(learner):
        raise TypeError(f"learner must be a function, got {type(learner).__name__}")
    raw: list[Any] = []
    seen: dict[int, str | None] = {}

    def mistake(run: Callable[..., Any]) -> str | None:
        # One set of draws per check (the probes of every mistake read the same outputs).
        if id(run) not in seen:
            seen[id(run)] = _dropout_mistake(_dropout_draws(run, raw))
        return seen[id(run)]

    def shows(name: str) -> Callable[[Callable[..., Any]], bool]:
        return lambda run: mistake(run) == name

    misconceptions = [
        Misconception(name, None, hint, detect=shows(name), fix=fix, symptom=symptom, always=True)
        for name, symptom, hint, fix in DROPOUT_MISTAKES
    ]
    return check_function(
        "attention_dropout",
        _seeded_dropout(learner, raw),
        dropout_expected,
        _dropout_cases(),
        misconceptions,
        shortcuts=("dropout",),
        draw=_draw_dropout,
        verbose=verbose,
    )
