"""Checkers for notebook 12, sinks and gates: a prediction of what a sink takes from a row, the learner's softmax
with a sink, and the learner's own module with a learned sink per head and a headwise output gate.

A sink (gpt-oss; softmax-plus-one is a sink fixed at 0) is one more logit in each row's softmax with no value
vector behind it: the keys keep ``softmax(scores) * sigmoid(logsumexp(scores) - sink)`` of the row, and a row
that sees no key gives everything to the sink. The output gate (Qiu et al., 2025) multiplies each head's output by
``sigmoid(x W_g + b_g)`` of the token's own input, before ``W_O``.

The module checker builds the learner's class with the weights of a package ``MultiHeadSelfAttention(...,
sink="learned", gate="headwise")`` copied in. Before it compares anything, it checks the class the learner's extends
(notebook 06's ``MyCausalSelfAttention``) on its own: when that already differs from the package's attention, the
learner is sent back to notebook 06's exercise 4 rather than told that the new lines are wrong.
"""

from __future__ import annotations

import copy
import functools
import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import nn

from ... import (
    MultiHeadSelfAttention,
    RotaryEmbedding,
    causal_mask,
    merge_heads,
    scaled_dot_product_attention,
    split_heads,
)
from ...rope import apply_rotary
from ...teaching.base_module import (
    ModuleSize,
    decoded,
    learners_parent,
    output_pair,
    package_outputs,
    parent_not_written,
    verify_parent,
)
from ...teaching.checking import (
    AnswerRejected,
    Case,
    CheckResult,
    Misconception,
    Remembered,
    check_function,
    escalate,
    judge_class,
    noted,
    output_tensor,
    random_tensor,
)
from ...teaching.modules import load_package_weights
from ...teaching.predictions import check_prediction

__all__ = [
    "PREDICTION_SCORES",
    "PREDICTION_SINK",
    "SINK_GATE_MISCONCEPTIONS",
    "SINK_SOFTMAX_MISCONCEPTIONS",
    "check_my_sink_gate_attention",
    "check_sink_prediction",
    "check_sink_softmax",
    "sink_softmax_reference",
]


# ---------------------------------------------------------------- exercise 1: predict where the weight goes

#: The prediction's row: two keys whose scaled scores are 0 and ln 3 (exps 1 and 3), and a sink logit ln 6 (exp 6).
PREDICTION_SCORES = (0.0, math.log(3.0))
PREDICTION_SINK = math.log(6.0)


def kept_weight() -> float:
    """The total weight the prediction's two keys keep, measured with the package's attention: a query of 1 against
    keys 0 and ln 3 (one feature, no scaling), with the sink logit ln 6."""
    q = torch.ones(1, 1, dtype=torch.float64)
    k = torch.tensor([[PREDICTION_SCORES[0]], [PREDICTION_SCORES[1]]], dtype=torch.float64)
    _, weights = scaled_dot_product_attention(
        q, k, k, need_weights=True, scale=1.0, sink=torch.tensor(PREDICTION_SINK, dtype=torch.float64)
    )
    return float(weights.sum())


def check_sink_prediction(answer: object, *, verbose: bool = True) -> CheckResult:
    """Prediction: the total weight two keys keep when their scaled scores are ``0`` and ``ln 3`` and the row's sink
    logit is ``ln 6``: ``(1 + 3) / (1 + 3 + 6)``. ``answer`` is the number (or a function returning it)."""
    mistakes = (
        Misconception(
            "a softmax's weights always sum to 1",
            lambda: 1.0,
            "With a sink the softmax runs over three logits, the keys' two and the sink's. The sink has no value "
            "vector, so its share is dropped, not handed back to the keys: what they keep sums to less than 1.",
            symptom="Where does the sink's share of the row go?",
        ),
        Misconception(
            "the sink's share instead of the keys'",
            lambda: 6.0 / 10.0,
            "The question asks for what the two keys keep. The sink's share is what they lose: the part of the row "
            "that goes nowhere.",
            symptom="Whose share did you add up: the keys' or the sink's?",
        ),
        Misconception(
            "the sink logit read as 0 (softmax-plus-one)",
            lambda: 4.0 / 5.0,
            "A sink logit of 0 adds e^0 = 1 to the denominator (softmax-plus-one, Miller 2023). This row's sink logit "
            "is ln 6, so it adds e^(ln 6) to the denominator.",
            symptom="What is e to the power of this sink's logit?",
        ),
        Misconception(
            "the sink's logit added without its exp",
            lambda: 4.0 / (4.0 + PREDICTION_SINK),
            "Every entry of a softmax's denominator is an exp: the keys bring e^0 and e^(ln 3), the sink e^(ln 6), "
            "not ln 6 itself.",
            symptom="The denominator adds up exps: is the sink's term one too?",
        ),
        Misconception(
            "each key against the sink alone",
            lambda: 1.0 / (1.0 + 6.0) + 3.0 / (3.0 + 6.0),
            "A sigmoid of each score against the sink lets each key compete with the sink only. In a softmax every "
            "key competes with the other keys too: one denominator, e^0 + e^(ln 3) + e^(ln 6), for the whole row.",
            symptom="Do the two keys share one denominator?",
        ),
    )
    return check_prediction(
        "sink_prediction",
        answer,
        kept_weight,
        "the weight two keys with scores 0 and ln 3 keep beside a sink logit ln 6",
        mistakes,
        explain="the softmax runs over e^0 = 1, e^(ln 3) = 3 and the sink's e^(ln 6) = 6, ten in all; the sink has no "
        "value vector, so its 6/10 are dropped and the keys keep 1/10 + 3/10",
        verbose=verbose,
    )


# ---------------------------------------------------------------- exercise 2: the sink softmax


def _sink_column(scores: torch.Tensor, sink: torch.Tensor) -> torch.Tensor:
    """The sink's logit as one more column of ``scores (..., seq_q, seq_k)``: ``(..., seq_q, 1)``."""
    return sink.to(scores.dtype).expand(scores.shape[:-1]).unsqueeze(-1)


def sink_softmax_reference(scores: torch.Tensor, sink: torch.Tensor) -> torch.Tensor:
    """The definition: the softmax of each row of ``scores (..., seq_q, seq_k)`` with the ``sink`` logit
    (broadcastable to ``(..., seq_q)``) as one more column, that column dropped afterwards: ``(..., seq_q, seq_k)``.
    A row of ``-inf`` (no key visible) gives zeros: the sink is finite, so the softmax always has a term."""
    return torch.softmax(torch.cat([scores, _sink_column(scores, sink)], dim=-1), dim=-1)[..., :-1]


def _row_max(scores: torch.Tensor, *, guarded: bool) -> torch.Tensor:
    """Each row's largest score ``(..., seq_q, 1)``; with ``guarded``, 0 where the row has none (all ``-inf``)."""
    top = scores.amax(dim=-1, keepdim=True)
    return torch.where(torch.isfinite(top), top, torch.zeros_like(top)) if guarded else top


def _plain_softmax(scores: torch.Tensor, sink: torch.Tensor, *, zeroed: bool = False) -> torch.Tensor:
    weights = torch.softmax(scores, dim=-1)  # a fully masked row is NaN
    return weights.nan_to_num(0.0) if zeroed else weights


def _keys_summed_alone(scores: torch.Tensor, sink: torch.Tensor) -> torch.Tensor:
    """The sink's column placed and the row shifted by its max, the sink's included, but the keys' exps divided by
    their own sum: a plain softmax, and NaN (0 / 0) where every score lies far below the sink."""
    row = torch.cat([scores, _sink_column(scores, sink)], dim=-1)
    exps = torch.exp(row - row.amax(dim=-1, keepdim=True))[..., :-1]
    return exps / exps.sum(dim=-1, keepdim=True)


def _plus_one(scores: torch.Tensor, sink: torch.Tensor) -> torch.Tensor:
    return sink_softmax_reference(scores, torch.zeros((), dtype=scores.dtype))


def _sigmoid_per_score(scores: torch.Tensor, sink: torch.Tensor, *, against_sink: bool = True) -> torch.Tensor:
    return torch.sigmoid(scores - _sink_column(scores, sink)) if against_sink else torch.sigmoid(scores)


def _sinks_share(scores: torch.Tensor, sink: torch.Tensor, *, zeroed: bool = False) -> torch.Tensor:
    lse = torch.logsumexp(scores, dim=-1, keepdim=True)
    weights = torch.softmax(scores, dim=-1) * torch.sigmoid(_sink_column(scores, sink) - lse)
    return weights.nan_to_num(0.0) if zeroed else weights


def _wrong_column(scores: torch.Tensor, sink: torch.Tensor, *, sink_first: bool = False) -> torch.Tensor:
    column = _sink_column(scores, sink)
    if sink_first:
        return torch.softmax(torch.cat([column, scores], dim=-1), dim=-1)[..., :-1]
    return torch.softmax(torch.cat([scores, column], dim=-1), dim=-1)[..., 1:]


def _sink_unshifted(scores: torch.Tensor, sink: torch.Tensor, *, guarded: bool = True) -> torch.Tensor:
    exps = torch.exp(scores - _row_max(scores, guarded=guarded))
    return exps / (exps.sum(dim=-1, keepdim=True) + torch.exp(_sink_column(scores, sink)))


def _no_max(scores: torch.Tensor, sink: torch.Tensor) -> torch.Tensor:
    exps = torch.exp(scores)
    return exps / (exps.sum(dim=-1, keepdim=True) + torch.exp(_sink_column(scores, sink)))


def _unguarded(scores: torch.Tensor, sink: torch.Tensor) -> torch.Tensor:
    top = _row_max(scores, guarded=False)  # -inf for a fully masked row: -inf - (-inf) is NaN
    exps = torch.exp(scores - top)
    return exps / (exps.sum(dim=-1, keepdim=True) + torch.exp(_sink_column(scores, sink) - top))


def _no_key_axis(scores: torch.Tensor, sink: torch.Tensor) -> torch.Tensor:
    """The sink broadcast against ``(..., seq_q, 1)`` as it is, without a key axis of its own: its last axis lines up
    with the keys (a sink per query becomes a sink per key), its second to last with the queries."""
    lse = torch.logsumexp(scores, dim=-1, keepdim=True)
    return torch.exp(scores - torch.logaddexp(lse, sink.to(scores.dtype)))


_ONE_SOFTMAX = (
    "softmax over [scores, sink] along the last axis, then drop its last column: torch.softmax(torch.cat([scores, "
    "column], dim=-1), dim=-1)[..., :-1], with column the sink as (..., seq_q, 1)."
)
_SHIFT_FIX = (
    "Shift by a max that takes the sink in too, m = torch.maximum(scores.amax(-1, keepdim=True), column), then "
    "exp(scores - m) / (exp(scores - m).sum(-1, keepdim=True) + exp(column - m)); or torch.softmax over the row with "
    "the sink's column, which does it for you."
)
NO_MAX_NAME = "did not subtract the row's max: exp overflows"
NO_MAX_HINT = (
    "exp(1000) is inf, and inf / inf is NaN. A softmax subtracts each row's largest logit before exp, which changes "
    "nothing else: every exponent is then at most 0."
)
FULLY_MASKED_NAME = "a fully masked row gives NaN"
FULLY_MASKED_HINT = (
    "A query that sees no key has a row of -inf: its max is -inf, and -inf - (-inf) is NaN (so is softmax(scores) "
    "of that row, before any rescaling). With the sink's logit in the row the max is finite: the row gives "
    "everything to the sink, and the keys get zeros."
)


def _row_sums_to_one_when_plain(run: Callable[..., Any]) -> bool:
    """Whether the answer gives the right weights on an ordinary row (the gate of the two probes below)."""
    scores = torch.tensor([[0.5, -1.0, 2.0]], dtype=torch.float64)
    sink = torch.tensor(0.7, dtype=torch.float64)
    got = torch.as_tensor(run(scores, sink)).double()
    return got.shape == scores.shape and bool(torch.allclose(got, sink_softmax_reference(scores, sink), atol=1e-4))


def _large_scores_overflow(run: Callable[..., Any]) -> bool:
    """Right on an ordinary row, and a row of scores near +1000 comes out with NaN or inf."""
    scores = torch.tensor([[1000.0, 999.0, 998.5]], dtype=torch.float64)
    got = torch.as_tensor(run(scores, torch.tensor(0.7, dtype=torch.float64))).double()
    return _row_sums_to_one_when_plain(run) and not bool(torch.isfinite(got).all())


def _fully_masked_row_is_nan(run: Callable[..., Any]) -> bool:
    """Right on an ordinary row, and a row of -inf (nothing visible) comes out with NaN."""
    scores = torch.tensor([[0.5, -1.0, 2.0], [-math.inf, -math.inf, -math.inf]], dtype=torch.float64)
    got = torch.as_tensor(run(scores, torch.tensor(0.7, dtype=torch.float64))).double()
    return _row_sums_to_one_when_plain(run) and got.shape == scores.shape and bool(torch.isnan(got[1]).any())


_SQUARE_HINT = (
    "The sink is one logit per row, (..., seq_q): against the row's sum, kept as (..., seq_q, 1), it needs a key axis "
    "of its own first (sink.unsqueeze(-1), or sink[..., None]). Without it, its last axis lines up with the keys' "
    "axis, and its second to last with the queries'."
)

SINK_SOFTMAX_MISCONCEPTIONS = (
    Misconception(
        "the sink takes no share: every row sums to 1",
        _plain_softmax,
        "A plain softmax of the scores: the sink's logit never reached the denominator. Adding the sink to every "
        "score does that (a softmax ignores a shift of the whole row), and so does placing its column but leaving "
        "its exp out of the sum. The sink is one more term of the denominator: e^s beside the keys' e^(score).",
        fix=_ONE_SOFTMAX,
        symptom="Every row of your weights sums to 1, whatever the sink's logit: the sink takes nothing.",
    ),
    Misconception(
        "the sink takes no share: every row sums to 1",
        functools.partial(_plain_softmax, zeroed=True),
        "A plain softmax of the scores: the sink's logit never reached the denominator. The sink is one more term "
        "of the denominator: e^s beside the keys' e^(score).",
        fix=_ONE_SOFTMAX,
        symptom="Every row of your weights sums to 1, whatever the sink's logit: the sink takes nothing.",
    ),
    Misconception(
        "the sink takes no share: every row sums to 1",
        _keys_summed_alone,
        "The sink's column is in the row, but its exp is not in the sum the keys are divided by: the keys share the "
        "whole row among themselves. The sink is one more term of the denominator: e^s beside the keys' e^(score).",
        fix=_ONE_SOFTMAX,
        symptom="Every row of your weights sums to 1, whatever the sink's logit: the sink takes nothing.",
    ),
    Misconception(
        "softmax-plus-one: the sink read as 0",
        _plus_one,
        "Softmax-plus-one (Miller 2023) is a sink fixed at 0, a 1 in the denominator. Here each row has its own "
        "logit s, given in `sink`: the denominator gets e^s.",
        fix="Use the sink you are given as the extra column: " + _ONE_SOFTMAX,
        symptom="Your weights do not change when the sink's logit does: they are those of a sink logit of 0.",
    ),
    Misconception(
        "a sigmoid per score instead of one softmax over the row",
        _sigmoid_per_score,
        "sigmoid(score - s) = e^score / (e^score + e^s) sets each key against the sink alone. In the softmax every "
        "key shares one denominator with the other keys and the sink. (A sigmoid does appear in the right answer, "
        "once per row: softmax(scores) * sigmoid(logsumexp(scores) - s).)",
        fix=_ONE_SOFTMAX,
        symptom="A key's weight of yours does not change when another key's score does: each weight depends on its "
        "own score alone.",
    ),
    Misconception(
        "a sigmoid per score instead of one softmax over the row",
        functools.partial(_sigmoid_per_score, against_sink=False),
        "sigmoid(score) weighs each key on its own, against nothing. In the softmax every key shares one "
        "denominator with the other keys and the sink.",
        fix=_ONE_SOFTMAX,
        symptom="A key's weight of yours does not change when another key's score does: each weight depends on its "
        "own score alone.",
    ),
    Misconception(
        "the keys scaled by the sink's share",
        _sinks_share,
        "sigmoid(logsumexp(scores) - s) = Σ / (Σ + e^s) is the share the keys keep; sigmoid(s - logsumexp(scores)) = "
        "e^s / (Σ + e^s) is the sink's. The softmax of the scores is rescaled by the first.",
        fix="softmax(scores) * sigmoid(logsumexp(scores) - s), with s as (..., seq_q, 1); or " + _ONE_SOFTMAX,
        symptom="Your rows sum to the sink's share of the row, not to what the keys keep: where the sink takes "
        "most of a row, your keys get most of it.",
    ),
    Misconception(
        "the keys scaled by the sink's share",
        functools.partial(_sinks_share, zeroed=True),
        "sigmoid(logsumexp(scores) - s) = Σ / (Σ + e^s) is the share the keys keep; sigmoid(s - logsumexp(scores)) = "
        "e^s / (Σ + e^s) is the sink's. The softmax of the scores is rescaled by the first.",
        fix="softmax(scores) * sigmoid(logsumexp(scores) - s), with s as (..., seq_q, 1); or " + _ONE_SOFTMAX,
        symptom="Your rows sum to the sink's share of the row, not to what the keys keep: where the sink takes "
        "most of a row, your keys get most of it.",
    ),
    Misconception(
        "the wrong column dropped",
        _wrong_column,
        "The sink's column goes where you put it (torch.cat([scores, column]) puts it last), and that is the column "
        "to drop: the others are the keys', in their order.",
        fix="Put the sink's column last and keep [..., :-1]; " + _ONE_SOFTMAX,
        symptom="Your weights are shifted by one key: key j of yours has the weight the reference gives to the key "
        "after it, or before it.",
    ),
    Misconception(
        "the wrong column dropped",
        functools.partial(_wrong_column, sink_first=True),
        "The sink's column goes where you put it (torch.cat([column, scores]) puts it first), and that is the column "
        "to drop: the others are the keys', in their order.",
        fix="Put the sink's column last and keep [..., :-1]; " + _ONE_SOFTMAX,
        symptom="Your weights are shifted by one key: key j of yours has the weight the reference gives to the key "
        "after it, or before it.",
    ),
    Misconception(
        "the sink not shifted with the scores",
        _sink_unshifted,
        "Subtracting the row's max m from the scores divides every term of the softmax by e^m, the sink's too: its "
        "term becomes e^(s - m). Left as e^s, it is e^m times too large (or too small).",
        fix=_SHIFT_FIX,
        symptom="Your rows do not sum to the reference's: the sink's share of yours is off by a factor that grows "
        "with the row's largest score.",
    ),
    Misconception(
        "the sink not shifted with the scores",
        functools.partial(_sink_unshifted, guarded=False),
        "Subtracting the row's max m from the scores divides every term of the softmax by e^m, the sink's too: its "
        "term becomes e^(s - m). Left as e^s, it is e^m times too large (or too small).",
        fix=_SHIFT_FIX,
        symptom="Your rows do not sum to the reference's: the sink's share of yours is off by a factor that grows "
        "with the row's largest score.",
    ),
    Misconception(
        NO_MAX_NAME,
        _no_max,
        NO_MAX_HINT,
        fix=_SHIFT_FIX,
        symptom="Your row of scores near +1000 comes out as NaN; the other rows are right.",
    ),
    Misconception(
        FULLY_MASKED_NAME,
        _unguarded,
        FULLY_MASKED_HINT,
        fix=_SHIFT_FIX,
        symptom="A query that sees no key (a row of -inf) gets a row of NaN, not zeros; the other rows are right.",
    ),
    Misconception(
        "the sink without a key axis",
        _no_key_axis,
        _SQUARE_HINT,
        fix="column = sink.unsqueeze(-1), broadcast against (..., seq_q, 1); " + _ONE_SOFTMAX,
        symptom="Look at how the sink's shape lines up with the scores'.",
    ),
    # Known by their symptom alone: close variants that no implementation above gives exactly.
    Misconception(
        NO_MAX_NAME,
        None,
        NO_MAX_HINT,
        detect=_large_scores_overflow,
        fix=_SHIFT_FIX,
        symptom="A row of scores near +1000 comes out with NaN or inf, while an ordinary row is right.",
    ),
    Misconception(
        FULLY_MASKED_NAME,
        None,
        FULLY_MASKED_HINT,
        detect=_fully_masked_row_is_nan,
        fix=_SHIFT_FIX,
        symptom="A query that sees no key (a row of -inf) gets NaN, while an ordinary row is right.",
    ),
)


def _masked(g: torch.Generator, scores: torch.Tensor, *, full_row: int | None = None) -> torch.Tensor:
    """``scores`` with some keys blocked (``-inf``): each row keeps at least one key, except row ``full_row`` (of the
    last matrix), which sees none."""
    blocked = torch.rand(tuple(scores.shape), generator=g, dtype=torch.float64) < 0.3
    blocked[..., 0] = False  # every row keeps its first key
    if full_row is not None:
        blocked.reshape(-1, *scores.shape[-2:])[-1, full_row] = True
    return scores.masked_fill(blocked, -math.inf)


def _sink_softmax_cases() -> list[Case]:
    g = torch.Generator().manual_seed(1201)
    # Causal scores of 4 new queries after 2 cached keys (query i sees keys 0 .. 2 + i), a sink per head.
    causal = random_tensor(g, 2, 3, 4, 6, scale=2.0).masked_fill(~causal_mask(4, 6), -math.inf)
    # A fully masked row, and a sink per query.
    masked = _masked(g, random_tensor(g, 4, 7, scale=2.0), full_row=1)
    # One row near +1000 (exp overflows unless the max is subtracted), one near -1000.
    large = random_tensor(g, 2, 3, 5, scale=2.0)
    large[0, 1] += 1000.0
    large[1, 2] -= 1000.0
    return [
        Case((random_tensor(g, 3, 5, scale=2.0), torch.tensor(1.5, dtype=torch.float64)), description="scores (3, 5), "
             "one sink logit for every row, sink ()"),
        Case((causal, torch.tensor([[-0.5], [1.2], [2.5]], dtype=torch.float64)), description="causal scores "
             "(2, 3, 4, 6) of 4 queries after 2 cached keys, a sink per head (3, 1)"),
        Case((masked, torch.tensor([0.8, -1.0, 2.0, 0.3], dtype=torch.float64)), description="scores (4, 7) with "
             "row 1 fully masked, a sink per query (4,)"),
        Case((large, torch.tensor([[1.0], [-0.7]], dtype=torch.float64)), description="scores (2, 3, 5) with a row "
             "near +1000 and one near -1000, a sink per head (2, 1)"),
    ]  # fmt: skip


def _sink_softmax_square_cases() -> list[Case]:
    g = torch.Generator().manual_seed(1202)
    return [
        Case((random_tensor(g, 3, 3, 3, scale=2.0), torch.tensor([[0.5], [-1.0], [1.8]], dtype=torch.float64)),
             description="square scores (3, 3, 3), a sink per head (3, 1)"),
        Case((random_tensor(g, 4, 4, scale=2.0), torch.tensor([1.1, -0.4, 0.9, 2.2], dtype=torch.float64)),
             description="square scores (4, 4), a sink per query (4,)"),
    ]  # fmt: skip


def _distinct(g: torch.Generator, count: int, low: int, high: int) -> list[int]:
    """``count`` different whole numbers in ``low .. high``."""
    return [low + int(i) for i in torch.randperm(high - low + 1, generator=g)[:count]]


def _draw_sink_softmax(g: torch.Generator) -> list[Case]:
    """No batch; heads; batch and heads; heads again. No two axes of the same length, each with a fully masked row,
    a row's scores a few dozen apart at most, and the sink one logit for all, per head, per query or per row."""
    cases = []
    for leading, kind in ((0, "per query"), (1, "per head"), (2, "per row"), (1, "one for all")):
        *batch, seq_q, seq_k = _distinct(g, leading + 2, 2, 8)
        scores = random_tensor(g, *batch, seq_q, seq_k, scale=2.0) + random_tensor(g, *batch, seq_q, 1, scale=5.0)
        scores = _masked(g, scores, full_row=int(torch.randint(seq_q, (), generator=g)))
        shape = {
            "per query": (seq_q,),
            "per head": (batch[-1], 1) if batch else (seq_q,),
            "per row": (*batch, seq_q),
            "one for all": (),
        }[kind]
        sink = torch.randn(shape, generator=g, dtype=torch.float64) * 1.5 + 0.5
        text = f"scores {tuple(scores.shape)} with a fully masked row, a sink {kind} {tuple(sink.shape)}"
        cases.append(Case((scores, sink), description=text))
    return cases


def _columns_told(learner: Callable[..., Any]) -> Callable[..., Any]:
    """``learner``, whose weights with one column more than there are keys (the sink's kept) are told so plainly."""

    @functools.wraps(learner)
    def wrapped(scores: Any, sink: Any) -> Any:
        weights = learner(scores, sink)
        if (
            isinstance(weights, torch.Tensor)
            and isinstance(scores, torch.Tensor)
            and weights.ndim == scores.ndim
            and weights.shape[:-1] == scores.shape[:-1]
            and weights.shape[-1] == scores.shape[-1] + 1
        ):
            seq_k = scores.shape[-1]
            raise AnswerRejected(
                f"your weights have {seq_k + 1} columns for {seq_k} keys, shape {tuple(weights.shape)}: one per key, "
                f"and one more. The weights the keys keep are (..., seq_q, seq_k), {tuple(scores.shape)} here"
            )
        return weights

    return wrapped


def check_sink_softmax(learner: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    """Exercise: ``learner(scores, sink)`` returns the weights the keys keep when each row of ``scores (..., seq_q,
    seq_k)`` (``-inf`` for a blocked key) gets the ``sink`` logit (broadcastable to ``(..., seq_q)``) as one more
    entry of its softmax: the softmax of ``[scores, sink]`` with the sink's column dropped, ``(..., seq_q, seq_k)``.
    Each row sums to less than 1; a row that sees no key gives zeros, never NaN; scores near +1000 do not overflow.

    The reference is that definition with ``torch.softmax`` in float64 (:func:`sink_softmax_reference`), on four
    teaching cases (one sink for all, one per head, one per query with a fully masked row, rows near ±1000) and four
    drawn for the answer. An answer that crashes where the sink's axes meet the scores' is run again on square
    inputs, where a sink without a key axis of its own runs and is named."""
    if not callable(learner):
        raise TypeError(f"learner must be a function (your my_sink_softmax), got {type(learner).__name__}")
    return check_function(
        "sink_softmax",
        _columns_told(learner),
        sink_softmax_reference,
        _sink_softmax_cases(),
        SINK_SOFTMAX_MISCONCEPTIONS,
        square_cases=_sink_softmax_square_cases(),
        shortcuts=("scaled_dot_product_attention",),
        draw=_draw_sink_softmax,
        verbose=verbose,
    )


# ---------------------------------------------------------------- exercise 3: sinks and gates in the learner's module

_EXERCISE = "my_sink_gate_attention"
_NAME = "MySinkGateAttention"

#: Each head's sink logit in the package modules the checker copies: far from 0 and from one another, drawn in turn.
_SINKS = (-1.2, 0.6, 1.9, -0.4, 2.6, 1.1)


class _Size(ModuleSize):
    """How a case builds the learner's module, ``MySinkGateAttention(d_model, num_heads, **keywords)`` with ``d_in``,
    ``bias`` and ``rope_base`` given only where set; ``seed`` draws the package module's weights."""

    def __repr__(self) -> str:
        return self.call(_NAME)


@functools.lru_cache(maxsize=64)
def _package(size: _Size, dtype: torch.dtype) -> MultiHeadSelfAttention:
    """The package's module at ``size`` in ``dtype``, with weights drawn from ``size.seed``: causal, RoPE, a learned
    sink per head (drawn from :data:`_SINKS`, none 0, no two alike) and a headwise gate with a bias far from 0. (The
    class the learner's extends is checked against the package's plain attention,
    :func:`~mhsa_helpers.teaching.base_module.plain_attention`.)"""
    with torch.random.fork_rng(devices=[]):  # building draws initial weights: the notebook's generator stays as it was
        module = MultiHeadSelfAttention(
            size.d_model, size.num_heads, d_in=size.features, qkv_bias=size.bias, out_bias=size.bias, causal=True,
            rope=RotaryEmbedding(size.d_model // size.num_heads, 64, size.rope_base), sink="learned", gate="headwise",
        )  # fmt: skip
        full = MultiHeadSelfAttention(size.d_model, size.num_heads, d_in=size.features, sink="learned", gate="headwise")
    g = torch.Generator().manual_seed(size.seed)
    with torch.no_grad():
        # Every parameter drawn in one order, whatever `bias` leaves out, so that turning it off changes nothing else.
        drawn = {}
        for name, parameter in full.named_parameters():
            noise = random_tensor(g, *parameter.shape)
            if name == "sink":
                order = torch.randperm(len(_SINKS), generator=g)[: size.num_heads]
                drawn[name] = torch.tensor(_SINKS, dtype=torch.float64)[order]
            elif name == "gate_proj.bias":
                drawn[name] = noise.sign() * (0.4 + 0.4 * noise.abs().clamp(max=1.5))
            elif name.endswith("weight"):
                drawn[name] = noise / parameter.shape[-1] ** 0.5 * 1.5
            else:
                drawn[name] = 0.3 * noise
        for name, parameter in module.named_parameters():
            parameter.copy_(drawn[name])
    return module.to(dtype).requires_grad_(False)


def _theirs(size: _Size, dtype: torch.dtype) -> MultiHeadSelfAttention:
    return _package(size, dtype)


#: What the package's modules and the known mistakes gave, by case: the given cases are the same at every check, and
#: an answer checked again meets the same drawn ones.
_remembered = Remembered(2048)


def _module_reference(x: torch.Tensor, size: _Size, probe: Any = None) -> tuple[torch.Tensor, ...]:
    theirs = _theirs(size, x.dtype)
    return _remembered(("reference", size), x, lambda: package_outputs(theirs, x))


# ------------------------------------------------ the recipe, written out with its known mistakes


@dataclass(frozen=True)
class _Slip:
    """One known mistake of the module, as a step of :func:`_attend` done another way (the defaults are right).

    ``weights``: ``"sink"``; ``"plain"`` (no sink), ``"plus_one"`` (the sink at 0), ``"sigmoid"`` (sigmoid(score -
    sink) per key), ``"sinks_share"`` (the softmax rescaled by the sink's share). ``plain_when``: where the sink is
    left out: ``"cache"`` (with a cache), ``"weights"`` (with need_weights=True), ``"fast"`` (without it). ``gate``:
    ``"heads"`` (each head's output, right); ``"q"``, ``"k"``, ``"v"`` (before the attention), ``"after_w_o"``,
    ``"tiled"`` (spread over the merged channels with repeat), ``"from_output"`` (read from the attention's output).
    ``gate_values``: ``"sigmoid"``; ``"linear"`` (no sigmoid), ``"shared"`` (head 0's gate for every head)."""

    weights: str = "sink"
    plain_when: str = ""
    gate: str = "heads"
    gate_values: str = "sigmoid"


def _attend(
    theirs: MultiHeadSelfAttention,
    x: torch.Tensor,
    held: tuple[torch.Tensor, torch.Tensor] | None,
    slip: _Slip,
    *,
    cached: bool = False,
    need_weights: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """One call of the module on ``x (batch, new, d_in)`` after the keys and values ``held`` (None: nothing cached),
    from ``theirs``' weights with ``slip``: the output, the weights, and the keys and values held after it."""
    heads, d_head, d_model = theirs.num_heads, theirs.d_head, theirs.d_model
    past, new = (0 if held is None else held[0].shape[-2]), x.shape[-2]
    q, k, v = (split_heads(t, heads) for t in theirs.qkv_proj(x).split((d_model, d_model, d_model), dim=-1))
    rope = cast(Any, theirs.rope)
    cos, sin = rope.angles_at(past, new)
    q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
    gate_proj = cast(nn.Linear, theirs.gate_proj)
    raw = gate_proj(x)  # (batch, new, heads)
    gates = {"sigmoid": torch.sigmoid(raw), "linear": raw, "shared": torch.sigmoid(raw[..., :1]).expand_as(raw)}
    gate = split_heads(gates[slip.gate_values], heads)  # (batch, heads, new, 1)
    if slip.gate == "q":
        q = q * gate
    elif slip.gate == "k":
        k = k * gate
    elif slip.gate == "v":
        v = v * gate
    if held is not None:
        k, v = torch.cat((held[0], k), dim=-2), torch.cat((held[1], v), dim=-2)
    scores = (q @ k.transpose(-2, -1) / math.sqrt(d_head)).masked_fill(~causal_mask(new, past + new), -math.inf)
    sink = cast(torch.Tensor, theirs.sink).view(-1, 1)  # (heads, 1): one logit per head, every row
    kind = slip.weights
    if {"cache": cached, "weights": need_weights, "fast": not need_weights}.get(slip.plain_when, False):
        kind = "plain"
    weights = {
        "sink": sink_softmax_reference,
        "plain": _plain_softmax,
        "plus_one": _plus_one,
        "sigmoid": _sigmoid_per_score,
        "sinks_share": _sinks_share,
    }[kind](scores, sink)
    attended = weights @ v  # (batch, heads, new, d_head)
    if slip.gate == "heads":
        attended = attended * gate
    elif slip.gate == "from_output":
        attended = attended * split_heads(torch.sigmoid(gate_proj(merge_heads(attended))), heads)
    merged = merge_heads(attended)
    if slip.gate == "tiled":
        merged = merged * gates[slip.gate_values].repeat(1, 1, d_head)
    out = theirs.out_proj(merged)
    if slip.gate == "after_w_o":
        out = out * gates[slip.gate_values].repeat_interleave(d_head, dim=-1)
    return out, weights, (k, v)


def _slipped(theirs: MultiHeadSelfAttention, x: torch.Tensor, slip: _Slip) -> tuple[torch.Tensor, ...]:
    """What a module with ``slip`` gives in the four calls the checker makes."""
    with torch.no_grad():
        out, weights, _ = _attend(theirs, x, None, slip, need_weights=True)
        # need_weights changes nothing but where a path of forward leaves the sink out.
        full = _attend(theirs, x, None, slip)[0] if slip.plain_when in ("weights", "fast") else out
        held: list[tuple[torch.Tensor, torch.Tensor] | None] = [None]

        def step(chunk: torch.Tensor, cache: Any) -> torch.Tensor:
            result, _, held[0] = _attend(theirs, chunk, held[0], slip, cached=True)
            return result

        steps = decoded(step, x)
    return full, out, weights, steps


def _mistake(slip: _Slip) -> Callable[..., tuple[torch.Tensor, ...]]:
    """A known mistake as the checker's cases see it: ``(x, size) ->`` the four outputs."""

    def mistaken(x: torch.Tensor, size: _Size, probe: Any = None) -> tuple[torch.Tensor, ...]:
        theirs = _theirs(size, x.dtype)
        return _remembered((slip, size), x, lambda: _slipped(theirs, x, slip))

    return mistaken


# ------------------------------------------------ probes of the learner's module


#: A size and an input for the probes: 2 heads of 4, batch 2, 5 tokens.
_PROBE_SIZE = _Size(8, 2, seed=1230)


def _probe_x() -> torch.Tensor:
    return random_tensor(torch.Generator().manual_seed(1231), 2, 5, 8)


def _sink_carries_a_value(run: Callable[..., Any]) -> bool:
    """With every value zero (``W_V``, its bias and ``W_O``'s bias zero), a right module outputs zeros whatever the
    sinks. Something that grows with the sink's share and reaches the output is a value vector of the sink's."""
    x = _probe_x()
    low = torch.as_tensor(run(x, _PROBE_SIZE, ("values zero", -30.0))).double()
    high = torch.as_tensor(run(x, _PROBE_SIZE, ("values zero", 30.0))).double()
    return bool(low.abs().max() < 1e-6) and bool(high.abs().max() > 1e-4)


def _one_gate_for_every_head(run: Callable[..., Any]) -> bool:
    return bool(run(_probe_x(), _PROBE_SIZE, ("built",))["gates"] == 1)


def _no_gradient_reaches(run: Callable[..., Any]) -> bool:
    """After a backward pass from the full pass's output, no gradient (or a zero one) on the sinks or the gate's
    weight."""
    reached = run(_probe_x(), _PROBE_SIZE, ("gradients",))
    return not all(reached.values())


_SINK_FIX = (
    "scores (batch, heads, new, past + new), masked with -inf; column = self.sink.view(1, -1, 1, 1).expand(*scores."
    "shape[:-1], 1); weights = torch.softmax(torch.cat([scores, column], dim=-1), dim=-1)[..., :-1] (your "
    "my_sink_softmax(scores, self.sink.view(-1, 1)) of exercise 2 does the same)."
)
_GATE_FIX = (
    "gate = torch.sigmoid(self.w_g(x)) (batch, new, heads) -> gate.transpose(1, 2).unsqueeze(-1) (batch, heads, new, "
    "1); heads = (weights @ v) * gate; then merge and self.w_o."
)
_GATE_HINT = (
    "The output gate (Qiu et al., 2025) scales what each head found, after its attention and before W_O mixes the "
    "heads: head h's output at token t times sigmoid(x_t W_g + b_g)[h], from the token's own input."
)
_ONE_PATH = "Look at where the sink enters each path of your forward (need_weights=True, or not)."

SINK_GATE_MISCONCEPTIONS = (
    Misconception(
        "the sink takes no share: every row sums to 1",
        _mistake(_Slip(weights="plain")),
        "A plain softmax of the scores: the sink's logit never reached the denominator. Adding it to every score "
        "does that (a softmax ignores a shift of the whole row), and so does leaving its exp out of the sum. The "
        "sink is one more term of each row's denominator, e^s beside the keys' exps, with no value behind it.",
        fix=_SINK_FIX,
        symptom="Every row of your weights sums to 1, and your module gives the numbers of one without a sink: the "
        "sink takes nothing. Look at where its logit enters the softmax.",
    ),
    Misconception(
        "softmax-plus-one: the learned sink not used",
        _mistake(_Slip(weights="plus_one")),
        "Softmax-plus-one (Miller 2023) is a sink fixed at 0. Here each head has its own learned logit, self.sink[h] "
        "(gpt-oss): the denominator of head h's rows gets e^sink[h].",
        fix=_SINK_FIX,
        symptom="Your weights are those of a sink logit of 0 in every head, whatever the module's sink holds. Look at "
        "which logit goes into each head's softmax.",
    ),
    Misconception(
        "a sigmoid per score instead of one softmax over the row",
        _mistake(_Slip(weights="sigmoid")),
        "sigmoid(score - s) sets each key against the sink alone. In the softmax every key shares one denominator "
        "with the other keys and the sink. (A sigmoid does appear in the right answer, once per row: softmax(scores) "
        "* sigmoid(logsumexp(scores) - s).)",
        fix=_SINK_FIX,
        symptom="A key's weight of yours does not depend on the other keys' scores: each weight is a function of its "
        "own score alone. Look at how the weights are normalised.",
    ),
    Misconception(
        "the keys scaled by the sink's share",
        _mistake(_Slip(weights="sinks_share")),
        "sigmoid(logsumexp(scores) - s) is the share the keys keep; sigmoid(s - logsumexp(scores)) is the sink's. The "
        "softmax of the scores is rescaled by the first.",
        fix=_SINK_FIX,
        symptom="Your rows sum to the sink's share of the row, not to what the keys keep. Look at the rescaling.",
    ),
    Misconception(
        "the sink carries a value",
        None,
        "The sink has no value vector: its share of the row goes nowhere. A sink written as one more key and value "
        "is right only while that value is zero; a learned (or random) value adds the sink's share of it to every "
        "head's output.",
        detect=_sink_carries_a_value,
        fix="Drop the sink's column after the softmax, before the weights meet v: " + _SINK_FIX,
        symptom="With every value zero (W_V and the biases of W_V and W_O zero), your output is not zero, and it "
        "grows with the sink's logit: something reaches the output from the sink's share. Look at what the sink's "
        "weight is multiplied by.",
    ),
    Misconception(
        "the sink in one path of forward only",
        _mistake(_Slip(plain_when="fast")),
        "forward has two paths, with need_weights=True and without, and both compute the same attention: the sink "
        "belongs in each (or write the weights once, and return them only when asked).",
        fix=_SINK_FIX,
        symptom="With need_weights=True your module is right; without it (the full pass, and through a cache) it "
        "gives the numbers of a module without a sink. " + _ONE_PATH,
    ),
    Misconception(
        "the sink in one path of forward only",
        _mistake(_Slip(plain_when="weights")),
        "forward has two paths, with need_weights=True and without, and both compute the same attention: the sink "
        "belongs in each (or write the weights once, and return them only when asked).",
        fix=_SINK_FIX,
        symptom="Without need_weights your module is right; with need_weights=True it gives the output and weights "
        "of no sink. " + _ONE_PATH,
    ),
    Misconception(
        "the sink dropped when a cache is used",
        _mistake(_Slip(plain_when="cache")),
        "Decoding through a cache is the same attention, over the cached keys and the new ones: the sink's logit "
        "goes into every row's softmax there too (gpt-oss generates so).",
        fix=_SINK_FIX,
        symptom="Your full pass is right; decoded through a cache, your outputs are those of no sink. Look at the "
        "path your forward takes when a cache is given.",
    ),
    *(
        Misconception(
            "the gate applied before the attention",
            _mistake(_Slip(gate=where)),
            _GATE_HINT + " Gating q, k or v changes the attention itself: which keys a head weighs, or what it "
            "averages over the other tokens' gates.",
            fix=_GATE_FIX,
            symptom="Your heads' outputs are not their attention's outputs scaled by the token's own gate: your gate "
            "acts inside the attention. Look at where the gate multiplies.",
        )
        for where in ("q", "k", "v")
    ),
    Misconception(
        "the gate applied after W_O",
        _mistake(_Slip(gate="after_w_o")),
        _GATE_HINT + " After W_O the channels no longer belong to heads, and W_O's bias is scaled too.",
        fix=_GATE_FIX,
        symptom="Your gate scales the output's features after W_O has mixed the heads (W_O's bias with them). Look "
        "at where the gate multiplies.",
    ),
    Misconception(
        "the gate's heads tiled across the channels",
        _mistake(_Slip(gate="tiled")),
        _GATE_HINT + " Merged, head h owns the channels h * d_head .. (h + 1) * d_head - 1: spread over them with "
        "repeat_interleave (each gate d_head times in a row), not repeat (the gates one after the other, again "
        "and again).",
        fix=_GATE_FIX + " Or, after merging: merged * gate.repeat_interleave(d_head, dim=-1).",
        symptom="A merged channel of yours is scaled by another head's gate: channel c gets gate c mod num_heads. "
        "Look at how the gates are spread over the channels.",
    ),
    Misconception(
        "the gate read from the attention's output",
        _mistake(_Slip(gate="from_output")),
        _GATE_HINT + " The gate reads x, what the layer was given, not what the attention made of it.",
        fix=_GATE_FIX,
        symptom="Your gates depend on the attention's output, not on the token's input alone. Look at what the "
        "gate's layer reads.",
    ),
    Misconception(
        "the gate without its sigmoid",
        _mistake(_Slip(gate_values="linear")),
        _GATE_HINT + " The sigmoid keeps each gate between 0 (the head says nothing) and 1 (it passes as it is).",
        fix=_GATE_FIX,
        symptom="Your gates are not between 0 and 1: some heads are scaled by negative numbers or by more than 1. "
        "Look at what turns w_g's output into a gate.",
    ),
    *(
        Misconception(
            "one gate for every head",
            implementation,
            _GATE_HINT + " Headwise, each head has its own gate: w_g maps d_in features to num_heads gates, not one.",
            detect=_one_gate_for_every_head,
            fix="self.w_g = nn.Linear(d_in, num_heads); " + _GATE_FIX,
            symptom="At each token every head of yours is scaled by the same gate (your w_g gives one; the checker "
            "copied head 0's gate into it). Look at the gate's layer.",
        )
        # Its numbers; or, when nothing else fits, the layer alone (another slip may come with it).
        for implementation in (_mistake(_Slip(gate_values="shared")), None)
    ),
    Misconception(
        "the sink or the gate cut off from the gradient",
        _module_reference,
        "The sink logits and the gate's weights are learned: the gradient of the output must reach them. A tensor "
        "made from them with torch.tensor(...), .item(), .detach() or .data carries their values without the "
        "way back, and a buffer is never trained: nothing would change them.",
        detect=_no_gradient_reaches,
        fix="Use self.sink and self.w_g in the computation as they are (self.sink.view(...), self.w_g(x)).",
        symptom="After a backward pass from your output, your sink logits or the gate's weight get no gradient. "
        "Look at how forward reads them.",
        always=True,
    ),
)


# ------------------------------------------------ driving the learner's module


def _sink_of(mine: nn.Module, size: _Size) -> torch.Tensor:
    sink = getattr(mine, "sink", None)
    if not isinstance(sink, torch.Tensor):
        raise AnswerRejected(
            f"your module has no tensor `sink`, where the checker copies the package's sink logits: one per head, "
            f"self.sink = nn.Parameter(torch.zeros(num_heads)) ({size.num_heads} heads here)"
        )
    if tuple(sink.shape) != (size.num_heads,):
        raise AnswerRejected(
            f"your self.sink has shape {tuple(sink.shape)}; with {size.num_heads} heads it holds one logit per head, "
            f"shape ({size.num_heads},): nn.Parameter(torch.zeros(num_heads))"
        )
    return sink


def _gate_of(mine: nn.Module, size: _Size) -> nn.Linear:
    layer = getattr(mine, "w_g", None)
    if not isinstance(layer, nn.Linear):
        raise AnswerRejected(
            f"your module has no nn.Linear `w_g` (got {type(layer).__name__}), where the checker copies the package's "
            "gate: self.w_g = nn.Linear(d_in, num_heads), one gate per head read from the token's input"
        )
    if layer.in_features != size.features:
        raise AnswerRejected(
            f"your self.w_g reads {layer.in_features} features, but the gate reads the token's input x, d_in="
            f"{size.features} features here (d_in={size.features}, d_model={size.d_model}): nn.Linear(d_in, "
            "num_heads), with d_in the one your MyCausalSelfAttention's w_q reads"
        )
    if layer.out_features not in (size.num_heads, 1):
        raise AnswerRejected(
            f"your self.w_g gives {layer.out_features} gates per token; the headwise gate gives one per head, "
            f"{size.num_heads} here: nn.Linear(d_in, num_heads) (one per channel, d_model of them, is the elementwise "
            "gate, another variant)"
        )
    if layer.bias is None:
        raise AnswerRejected(
            "your self.w_g has no bias; the gate's layer has one, as nn.Linear has by default: sigmoid(x W_g + b_g)"
        )
    return layer


def _source(theirs: MultiHeadSelfAttention, probe: Any) -> MultiHeadSelfAttention:
    """The package module whose weights are copied in: ``theirs``, or for the probe ``("values zero", s)`` a copy with
    every value zero (W_V, its bias, W_O's bias) and every sink logit ``s``."""
    if not (isinstance(probe, tuple) and probe and probe[0] == "values zero"):
        return theirs
    source = copy.deepcopy(theirs)
    with torch.no_grad():
        source.qkv_proj.weight[2 * source.d_model :] = 0.0
        if source.qkv_proj.bias is not None:
            source.qkv_proj.bias[2 * source.d_model :] = 0.0
        if source.out_proj.bias is not None:
            source.out_proj.bias.zero_()
        cast(torch.Tensor, source.sink).fill_(float(probe[1]))
    return source


@torch.no_grad()
def _copy(mine: nn.Module, theirs: MultiHeadSelfAttention, size: _Size) -> None:
    """The package's weights into the learner's module: the four projections as notebook 06's checker copies them,
    the sinks into ``sink`` and the gate's layer into ``w_g`` (head 0's gate into a ``w_g`` that gives one)."""
    if isinstance(mine, MultiHeadSelfAttention):
        mine.load_state_dict(theirs.state_dict())
        return
    try:
        load_package_weights(mine, theirs)
    except (ValueError, TypeError) as error:
        raise AnswerRejected(
            f"your module cannot take the package's projections ({str(error).strip().rstrip('.')}): it must keep "
            "your MyCausalSelfAttention's w_q, w_k, w_v and w_o, built by super().__init__(d_model, num_heads, "
            "**kwargs)"
        ) from error
    sink, layer = _sink_of(mine, size), _gate_of(mine, size)
    gate_proj = cast(nn.Linear, theirs.gate_proj)
    sink.copy_(cast(torch.Tensor, theirs.sink))
    rows = slice(0, layer.out_features)
    layer.weight.copy_(gate_proj.weight[rows])
    cast(torch.Tensor, layer.bias).copy_(gate_proj.bias[rows])


def _drive(learner: Any, x: torch.Tensor, size: _Size, probe: Any, told: dict[str, str]) -> Any:
    """``learner``, the class, built at a case's size with the package module's weights copied in, run on the case's
    ``x`` in the four calls the checker compares; with ``probe``, what a probe reads of it."""
    # The class the learner's extends is checked first, before the learner's own __init__ runs on top of it.
    parent = learners_parent(learner) if isinstance(learner, type) else None
    checked = probe != ("built",) and verify_parent(parent, x, size)
    mine = learner(size.d_model, size.num_heads, **size.keywords())
    if not isinstance(mine, nn.Module):
        raise AnswerRejected(f"{size!r} gave {type(mine).__name__}, not an nn.Module")
    packaged = isinstance(mine, MultiHeadSelfAttention)
    if packaged:  # a subclass is built by the package: the watch on calls cannot see it
        told["shortcut"] = "mhsa_helpers.mha.MultiHeadSelfAttention"
    signature = inspect.signature(mine.forward)
    try:
        signature.bind(x, cache=None, need_weights=True)
    except TypeError:
        raise AnswerRejected(
            f"your forward takes {signature}; it must take what your MyCausalSelfAttention's takes: forward(self, x, "
            "cache=None, need_weights=False)"
        ) from None
    mine.to(x.dtype)
    theirs = _theirs(size, x.dtype)
    _copy(mine, _source(theirs, probe), size)
    if probe == ("built",):
        return {"gates": _gate_of(mine, size).out_features if not packaged else size.num_heads}
    if not (checked or packaged):  # a function that builds the module: its class is known now
        verify_parent(learners_parent(type(mine)), x, size)
    if isinstance(probe, tuple) and probe[:1] == ("values zero",):
        with torch.no_grad():
            return output_tensor(mine(x), "your forward")
    if probe == ("gradients",):
        mine.requires_grad_(True)
        output_tensor(mine(x), "your forward").sum().backward()
        named = {"sink": "sink", "w_g.weight": "gate_proj.weight" if packaged else "w_g.weight"}
        parameters = dict(mine.named_parameters())
        return {
            mine_name: parameters.get(name) is not None
            and parameters[name].grad is not None
            and bool(cast(torch.Tensor, parameters[name].grad).abs().sum() > 0)
            for mine_name, name in named.items()
        }
    full = output_tensor(mine(x), "your forward")
    out, weights = output_pair(mine(x, need_weights=True))
    steps = decoded(lambda chunk, cache: mine(chunk, cache=cache), x, "through a cache, your forward")
    return full, out, weights, steps


def _module_case(x: torch.Tensor, size: _Size) -> Case:
    return Case((x, size), description=f"{size!r} on x {tuple(x.shape)}")


def _module_cases() -> list[Case]:
    g = torch.Generator().manual_seed(1240)
    # d_in left out and given, biases on and off, two bases; no two axes of x of the same length, none equal to the
    # heads or d_head.
    return [
        _module_case(random_tensor(g, 3, 5, 8), _Size(8, 2, seed=1241)),
        _module_case(random_tensor(g, 2, 6, 10), _Size(12, 3, d_in=10, rope_base=100.0, seed=1242)),
        _module_case(random_tensor(g, 4, 3, 12), _Size(12, 2, bias=False, seed=1243)),
    ]


def _module_square_cases() -> list[Case]:
    g = torch.Generator().manual_seed(1244)
    # Inputs whose three axes have one length, and d_in = d_model.
    return [
        _module_case(random_tensor(g, 4, 4, 4), _Size(4, 2, seed=1245)),
        _module_case(random_tensor(g, 6, 6, 6), _Size(6, 3, seed=1246)),
    ]


def _draw_modules(seed: int) -> list[Case]:
    """Three sizes and inputs in which no two of batch, sequence, heads, d_head, d_in and d_model have one length."""
    g = torch.Generator().manual_seed(seed)

    def pick(options: Sequence[Any], *, taken: Sequence[Any] = ()) -> Any:
        left = [option for option in options if option not in taken]
        return left[int(torch.randint(len(left), (), generator=g))]

    cases = []
    for _ in range(3):  # called as drawn, in float32 with inputs that require grad, under torch.no_grad()
        heads = pick((2, 3, 4))
        d_head = pick((2, 4, 6), taken=(heads,))
        d_model = heads * d_head
        d_in = pick((None, None, d_model + 2, d_model - 2))
        size = _Size(d_model, heads, d_in, pick((True, True, False)), pick((10000.0, 500.0)),
                     seed=int(torch.randint(2**31 - 1, (), generator=g)))  # fmt: skip
        taken = (heads, d_head, d_model, size.features)
        batch = pick((1, 2, 3, 5), taken=taken)
        x = random_tensor(g, batch, pick((3, 4, 5, 6, 7), taken=(*taken, batch)), size.features)
        cases.append(_module_case(x, size))
    return cases


def check_my_sink_gate_attention(learner: Any, *, verbose: bool = True) -> CheckResult:
    """Check the learner's class ``MySinkGateAttention(d_model, num_heads, **kwargs)``, which extends their notebook-06
    ``MyCausalSelfAttention`` (``w_q, w_k, w_v, w_o``, the keywords ``d_in``, ``bias`` and ``rope_base``) with
    ``sink``, one logit per head ``(num_heads,)``, and ``w_g = nn.Linear(d_in, num_heads)``; its ``forward(x,
    cache=None, need_weights=False)`` keeps the parent's contract: ``x (batch, seq, d_in) -> (batch, seq, d_model)``,
    or ``(out, weights (batch, heads, seq, past + seq))``, each head's softmax with its sink logit as one more entry
    (no value vector), and each head's output times ``sigmoid(w_g(x))`` of its head before ``w_o``.

    Built at three sizes (``d_in`` left out and given, biases off, two RoPE bases) and three drawn for the answer,
    with the weights of a package ``MultiHeadSelfAttention(..., causal=True, rope=RotaryEmbedding(d_head),
    sink="learned", gate="headwise")`` copied in (sinks non-zero and different per head, gate biases far from 0), it
    must give the package's full pass, its output and weights with ``need_weights=True``, and its outputs decoded
    through a package ``KVCache`` (a prompt of 2 tokens, then one at a time). First, the class it extends, built
    alone, must give the package's plain attention: when it does not, the message sends the learner to notebook 06's
    exercise 4 instead of blaming the new lines. A probe with every value zero names a sink that carries a value; a
    backward pass must reach the sinks and the gate's weight."""
    result, told = judge_class(
        _EXERCISE,
        learner,
        _NAME,
        _drive,
        parent_not_written,
        _module_reference,
        _module_cases(),
        SINK_GATE_MISCONCEPTIONS,
        square_cases=_module_square_cases(),
        output_names=(
            "the full pass",
            "the output with need_weights=True",
            "the weights with need_weights=True",
            "decoded through a cache, 2 tokens then one at a time",
        ),
        shortcuts=("MultiHeadSelfAttention", "multi_head_self_attention", "scaled_dot_product_attention"),
        draw=_draw_modules,
    )
    if (
        "shortcut" in told
        and told["shortcut"] not in result.shortcuts  # its own __init__ calling the package's: noted already
        and result.status in ("correct", "misconception", "incorrect")
    ):
        note = (
            " Note: your module is the package's `MultiHeadSelfAttention`, which does what this exercise asks "
            "you to write yourself; write the sink and the gate into your own MyCausalSelfAttention to see how "
            "they work."
        )
        result = noted(result, note, (*result.shortcuts, told["shortcut"]))
    result = escalate(result)
    if verbose:
        print(result.message)
    return result
