"""Checkers for notebook 11 (a real model runs on your attention).

Every exercise works on sequences like the notebook's copying test: one token, then a chunk of
``repeat_len`` random tokens, then the same chunk again (``seq = 1 + 2 * repeat_len``; the first
copy starts at position 1). The attention patterns in the cases are random causal softmax rows, so
that every wrong diagonal, wrong set of queries and wrong axis gives a different number.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import replace

import torch
import torch.nn.functional as F

from ...teaching.checking import Case, CheckResult, Misconception, check_function
from ..induction_heads.scores import induction_score
from ..induction_heads.task import InductionBatch
from .tools import copy_loss, copying_test, load_model

__all__ = [
    "PREDICTION_HEADS",
    "PREDICTION_RISE",
    "check_ablation_prediction",
    "check_copy_loss",
    "check_head_induction_score",
    "check_sink_heads",
    "measured_rises",
]


def _causal_weights(generator: torch.Generator, *shape: int, sink: torch.Tensor | None = None) -> torch.Tensor:
    """``(*batch_dims, seq, seq)`` float64 causal softmax rows; ``sink`` (broadcast over the leading
    dims) adds to every score of key 0, so some heads park much weight on the first token."""
    seq = shape[-1]
    scores = torch.randn(*shape, generator=generator, dtype=torch.float64) * 1.5
    if sink is not None:
        scores[..., 0] += sink.to(torch.float64).reshape(*sink.shape, 1)
    future = torch.ones(seq, seq, dtype=torch.bool).triu(1)
    return scores.masked_fill(future, float("-inf")).softmax(-1)


# ---------------------------------------------------------------- one head's induction score


def _induction_reference(weights: torch.Tensor, repeat_len: int) -> torch.Tensor:
    batch = weights.shape[0]
    data = InductionBatch(
        torch.zeros(batch, weights.shape[-1], dtype=torch.long),
        torch.zeros(batch, weights.shape[-1], dtype=torch.bool),
        torch.ones(batch, dtype=torch.long),
        torch.full((batch,), repeat_len),
    )
    return induction_score(weights, data)


def _on_key(weights: torch.Tensor, repeat_len: int, shift: int, queries: range | None = None) -> torch.Tensor:
    """Mean over the batch and ``queries`` (default: the second copy) of the weight on key
    ``t - repeat_len + shift``."""
    n = repeat_len
    queries = range(1 + n, 1 + 2 * n) if queries is None else queries
    picked = [weights[:, :, t, t - n + shift] for t in queries if 0 <= t - n + shift <= t]
    return torch.stack(picked, dim=-1).mean(dim=(0, 2))


INDUCTION_MISCONCEPTIONS = (
    Misconception(
        "off-by-one diagonal: the earlier occurrence itself",
        lambda w, n: _on_key(w, n, 0),
        "You scored key t - repeat_len: the earlier occurrence of the *same* token. An induction head looks one "
        "further, at the token that came after it, key t - repeat_len + 1: that is the token to predict next.",
    ),
    Misconception(
        "off-by-one diagonal: two after the earlier occurrence",
        lambda w, n: _on_key(w, n, 2),
        "You scored key t - repeat_len + 2. The token after the earlier occurrence is key t - repeat_len + 1.",
    ),
    Misconception(
        "previous-token pattern instead",
        lambda w, n: _on_key(w, n, n - 1),
        "You scored key t - 1, the previous token. The induction target is repeat_len - 1 keys back: "
        "t - repeat_len + 1.",
    ),
    Misconception(
        "included the first copy",
        lambda w, n: _on_key(w, n, 1, range(n - 1, 1 + 2 * n)),
        "Queries of the first copy have no earlier occurrence to look back to: in the first copy, key "
        "t - repeat_len + 1 is just some earlier token. Average only over the second copy, queries "
        "t = 1 + repeat_len .. 2 * repeat_len.",
    ),
    Misconception(
        "left out the last token of the copy",
        lambda w, n: _on_key(w, n, 1, range(1 + n, 2 * n)),
        "Every query of the second copy has an earlier occurrence, the last one too: average over all "
        "repeat_len queries t = 1 + repeat_len .. 2 * repeat_len.",
    ),
    Misconception(
        "averaged over the heads, not the batch",
        lambda w, n: torch.stack([w[:, :, t, t - n + 1] for t in range(1 + n, 1 + 2 * n)], -1).mean(dim=(1, 2)),
        "The score is one number per head: average over the batch (axis 0) and the queries, keep axis 1 "
        "(heads). Your result has one number per sequence.",
    ),
)


def _induction_cases() -> list[Case]:
    g = torch.Generator().manual_seed(110)
    return [
        Case((_causal_weights(g, 2, 3, 9, 9), 4), description="weights (batch=2, heads=3, 9, 9), repeat_len 4"),
        Case((_causal_weights(g, 3, 5, 13, 13), 6), description="weights (batch=3, heads=5, 13, 13), repeat_len 6"),
        Case((_causal_weights(g, 1, 4, 7, 7), 3), description="weights (batch=1, heads=4, 7, 7), repeat_len 3"),
    ]


def check_head_induction_score(learner: Callable[..., torch.Tensor], *, verbose: bool = True) -> CheckResult:
    """Check ``learner(weights (batch, heads, seq, seq), repeat_len) -> (heads,)`` on sequences
    ``[token, chunk, chunk]`` (``seq = 1 + 2 * repeat_len``): the weight of each second-copy query ``t``
    on key ``t - repeat_len + 1``, averaged over the batch and those ``repeat_len`` queries."""
    return check_function(
        "head_induction_score",
        learner,
        _induction_reference,
        _induction_cases(),
        INDUCTION_MISCONCEPTIONS,
        verbose=verbose,
    )


# ---------------------------------------------------------------- sink heads


def _sink_reference(weights: torch.Tensor, threshold: float) -> torch.Tensor:
    return weights[..., 1:, 0].mean(-1) > threshold


SINK_MISCONCEPTIONS = (
    Misconception(
        "counted query 0",
        lambda w, c: w[..., :, 0].mean(-1) > c,
        "Query 0 can only see key 0, so its weight there is always 1: it says nothing about the head. Average "
        "the weight on key 0 over the queries t = 1 .. seq - 1 only: weights[..., 1:, 0].",
    ),
    Misconception(
        "read row 0 instead of column 0",
        lambda w, c: w[..., 0, :].mean(-1) > c,
        "Rows are queries, columns keys: the weight every query puts on the first token is column 0, "
        "weights[..., :, 0], not row 0 (what the first query looks at).",
    ),
    Misconception(
        "took the largest weight, not the mean",
        lambda w, c: w[..., 1:, 0].amax(-1) > c,
        "A sink head parks its weight on the first token at most queries, so take the mean over the queries; "
        "the largest weight is high for almost any head at some query.",
    ),
    Misconception(
        "returned the weights, not a mask",
        lambda w, c: w[..., 1:, 0].mean(-1),
        "Return a bool tensor (layers, heads): True where the mean weight on the first token is above the "
        "threshold (compare with > threshold).",
    ),
    Misconception(
        "comparison the wrong way round",
        lambda w, c: w[..., 1:, 0].mean(-1) < c,
        "A sink head puts *more* than the threshold on the first token: mean > threshold.",
    ),
)


def _sink_cases() -> list[Case]:
    g = torch.Generator().manual_seed(111)
    cases = []
    for layers, heads, seq, threshold in ((3, 4, 8, 0.5), (2, 6, 11, 0.4), (4, 3, 6, 0.6)):
        sink = torch.linspace(-2.0, 6.0, layers * heads)[torch.randperm(layers * heads, generator=g)]
        weights = _causal_weights(g, layers, heads, seq, seq, sink=sink.reshape(layers, heads))
        cases.append(
            Case(
                (weights, threshold), description=f"weights (layers={layers}, heads={heads}, {seq}, {seq}), {threshold}"
            )
        )
    return cases


def check_sink_heads(learner: Callable[..., torch.Tensor], *, verbose: bool = True) -> CheckResult:
    """Check ``learner(weights (layers, heads, seq, seq), threshold) -> bool (layers, heads)``: ``True``
    where the mean weight on key 0 over the queries ``t = 1 .. seq - 1`` is above ``threshold``."""
    return check_function("sink_heads", learner, _sink_reference, _sink_cases(), SINK_MISCONCEPTIONS, verbose=verbose)


# ---------------------------------------------------------------- the loss on the second copy


def _copy_reference(logits: torch.Tensor, tokens: torch.Tensor, repeat_len: int) -> torch.Tensor:
    n = repeat_len
    return F.cross_entropy(logits[:, n + 1 : 2 * n].transpose(1, 2), tokens[:, n + 2 : 2 * n + 1])


def _loss(logits: torch.Tensor, tokens: torch.Tensor, positions: slice, shift: int = 1) -> torch.Tensor:
    start, stop = positions.start, positions.stop
    return F.cross_entropy(logits[:, start:stop].transpose(1, 2), tokens[:, start + shift : stop + shift])


COPY_MISCONCEPTIONS = (
    Misconception(
        "no shift: each position scored on its own token",
        lambda x, y, n: _loss(x, y, slice(n + 1, 2 * n + 1), shift=0),
        "The logits at position t predict the *next* token, tokens[:, t + 1]: compare logits[:, t] with "
        "tokens[:, t + 1], not with tokens[:, t].",
    ),
    Misconception(
        "included the first token of the second copy",
        lambda x, y, n: _loss(x, y, slice(n, 2 * n)),
        "The first token of the second copy (position 1 + repeat_len) is predicted at position repeat_len, the "
        "end of the first copy: nothing there says the chunk starts again. Score the predictions made at "
        "positions 1 + repeat_len .. 2 * repeat_len - 1.",
    ),
    Misconception(
        "scored the first copy",
        lambda x, y, n: _loss(x, y, slice(1, n)),
        "The first copy is random tokens: no model can predict them. Copying helps only in the second copy, "
        "predictions made at positions 1 + repeat_len .. 2 * repeat_len - 1.",
    ),
    Misconception(
        "scored the whole sequence",
        lambda x, y, n: _loss(x, y, slice(0, 2 * n)),
        "Average only where copying predicts the next token: the predictions made inside the second copy "
        "(positions 1 + repeat_len .. 2 * repeat_len - 1), not over every position.",
    ),
)


def _copy_cases() -> list[Case]:
    g = torch.Generator().manual_seed(112)
    cases = []
    for batch, n, vocab in ((2, 4, 11), (3, 6, 17), (1, 5, 9)):
        chunk = torch.randint(0, vocab, (batch, n), generator=g)
        tokens = torch.cat([torch.randint(0, vocab, (batch, 1), generator=g), chunk, chunk], dim=1)
        logits = torch.randn(batch, 1 + 2 * n, vocab, generator=g, dtype=torch.float64) * 2
        cases.append(Case((logits, tokens, n), description=f"logits ({batch}, {1 + 2 * n}, {vocab}), repeat_len {n}"))
    return cases


def check_copy_loss(learner: Callable[..., torch.Tensor], *, verbose: bool = True) -> CheckResult:
    """Check ``learner(logits (batch, seq, vocab), tokens (batch, seq), repeat_len) -> scalar tensor``: the
    mean cross-entropy of the second copy's tokens that copying can predict — the predictions made at
    positions ``1 + repeat_len .. 2 * repeat_len - 1`` of the next tokens."""
    return check_function("copy_loss", learner, _copy_reference, _copy_cases(), COPY_MISCONCEPTIONS, verbose=verbose)


# ---------------------------------------------------------------- predict, then measure an ablation

#: The heads of the prediction exercise, in this order: the sharpest previous-token head (layer 16,
#: head 0), the strongest induction head (18, 6), another strong induction head (17, 4) and another
#: strong previous-token head (11, 1), as the notebook's scores rank them.
PREDICTION_HEADS = ((16, 0), (18, 6), (17, 4), (11, 1))
#: A head "matters" when zeroing it alone raises the loss on the second copy by more than this (nats).
PREDICTION_RISE = 1.0


@functools.cache
def measured_rises() -> tuple[float, ...]:
    """How much zeroing each of :data:`PREDICTION_HEADS` alone raises the loss on the second copy of the
    notebook's copying test (nats); measured on the real model once per process."""
    model, _ = load_model()
    data = copying_test(model.config.vocab_size)
    baseline = copy_loss(model, data)
    return tuple(copy_loss(model, data, [head]) - baseline for head in PREDICTION_HEADS)


def _measured() -> torch.Tensor:
    return torch.tensor([rise > PREDICTION_RISE for rise in measured_rises()])


def _constant(*values: bool) -> Callable[[], torch.Tensor]:
    return lambda: torch.tensor(values)


PREDICTION_MISCONCEPTIONS = (
    Misconception(
        "a high score means the model needs the head",
        _constant(True, True, True, True),
        "A score says where a head looks, not whether the model needs it: when several heads do the same job, "
        "zeroing one of them alone costs little. Two of these four heads can go almost for free.",
    ),
    Misconception(
        "no single head matters",
        _constant(False, False, False, False),
        "Most heads can be zeroed alone at little cost, but not all: a head whose job nobody else does is a "
        "single point of failure. One of these four costs several nats.",
    ),
    Misconception(
        "only induction heads matter",
        _constant(False, True, True, False),
        "The induction heads find the token after the earlier occurrence through what a previous-token head "
        "wrote into it (notebook 07's circuit): zeroing the sharpest previous-token head breaks copying too.",
    ),
    Misconception(
        "only previous-token heads matter",
        _constant(True, False, False, True),
        "Zeroing the strongest induction head alone also costs more than a nat: the other induction heads "
        "make up for only part of it.",
    ),
)


def check_ablation_prediction(learner: Callable[[], torch.Tensor], *, verbose: bool = True) -> CheckResult:
    """Check ``learner() -> bool (4,)``: for each head of :data:`PREDICTION_HEADS`, ``True`` when zeroing it
    alone raises the real model's loss on the second copy by more than :data:`PREDICTION_RISE` nats.
    The truth is measured on the model (:func:`measured_rises`) once the learner has answered; the
    measured rises are added to the message."""
    result = check_function(
        "ablation_prediction",
        learner,
        _measured,
        [Case((), description="the 4 heads")],
        PREDICTION_MISCONCEPTIONS,
        verbose=False,
    )
    if result.status in ("correct", "misconception", "incorrect"):
        rises = ", ".join(
            f"L{layer}H{head} {rise:+.1f}"
            for (layer, head), rise in zip(PREDICTION_HEADS, measured_rises(), strict=True)
        )
        result = replace(result, message=f"{result.message} Measured rises (nats): {rises}.")
    if verbose:
        print(result.message)
    return result
