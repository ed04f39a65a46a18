"""Checkers for notebook 11 (a real model runs on your attention).

Every exercise works on sequences like the notebook's copying test: one token, then a chunk of
``repeat_len`` random tokens, then the same chunk again (``seq = 1 + 2 * repeat_len``; the first
copy starts at position 1). The attention patterns in the cases are random causal softmax rows, so
that every wrong diagonal, wrong set of queries and wrong axis gives a different number. Besides
the cases the messages name, each function checker draws four small cases for the answer (other
batches, head counts and lengths); none of them needs the real model, which only the prediction
checker runs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from ...teaching.checking import Case, CheckResult, Misconception, check_function
from ...teaching.induction.scores import induction_score
from ...teaching.induction.task import InductionBatch
from ...teaching.predictions import check_prediction
from .tools import copy_loss, copying_test, load_model

__all__ = [
    "PREDICTION_HEADS",
    "PREDICTION_RISE",
    "check_ablation_prediction",
    "check_copy_loss",
    "check_head_induction_score",
    "check_sink_heads",
    "handed_out_copy_loss",
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


def _pick(generator: torch.Generator, choices: tuple[int, ...]) -> int:
    return choices[int(torch.randint(len(choices), (1,), generator=generator))]


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


def _reads_first_copy(run: Callable[..., Any]) -> bool:
    """The score changes when only the rows of queries 0 .. repeat_len (the first token and the first copy)
    change: a right score reads the second copy's rows alone."""
    g = torch.Generator().manual_seed(7)
    weights, other = _causal_weights(g, 2, 3, 9, 9), _causal_weights(g, 2, 3, 9, 9)
    changed = weights.clone()
    changed[:, :, :5] = other[:, :, :5]
    before, after = (torch.as_tensor(run(w, 4)).detach().double() for w in (weights, changed))
    return before.shape != after.shape or not torch.allclose(before, after)


_READ_THE_TARGET = (
    "Read key t - repeat_len + 1 of each second-copy query t: with q = torch.arange(1 + repeat_len, 1 + 2 * "
    "repeat_len), weights[:, :, q, q - repeat_len + 1].mean(dim=(0, 2))."
)
_WRONG_KEY = "For the second-copy queries, your function reads the weight on another key than the reference's."
_FIRST_COPY_HINT = (
    "Queries of the first copy have no earlier occurrence to look back to: there, key t - repeat_len + 1 is "
    "just some earlier token. Only the repeat_len queries of the second copy can show induction."
)
_FIRST_COPY_FIX = (
    "Average over the queries t = 1 + repeat_len .. 2 * repeat_len only: q = torch.arange(1 + repeat_len, "
    "1 + 2 * repeat_len)."
)
_FIRST_COPY_SYMPTOM = (
    "Your score changes when only the weights of the first copy's queries change; the reference's reads the "
    "second copy's queries alone."
)

INDUCTION_MISCONCEPTIONS = (
    Misconception(
        "off-by-one diagonal: the earlier occurrence itself",
        lambda w, n: _on_key(w, n, 0),
        "Key t - repeat_len holds the earlier occurrence of the *same* token as query t. An induction head looks "
        "one further, at the token that came after it: the token to predict next.",
        fix=_READ_THE_TARGET,
        symptom=_WRONG_KEY,
    ),
    Misconception(
        "off-by-one diagonal: two after the earlier occurrence",
        lambda w, n: _on_key(w, n, 2),
        "Key t - repeat_len + 2 is two tokens after the earlier occurrence: one too far. The token to predict "
        "is the one right after it.",
        fix=_READ_THE_TARGET,
        symptom=_WRONG_KEY,
    ),
    Misconception(
        "previous-token pattern instead",
        lambda w, n: _on_key(w, n, n - 1),
        "Key t - 1 is the previous token, what a previous-token head looks at. The induction target is key "
        "t - repeat_len + 1, repeat_len - 1 keys back from t: the token right after the earlier occurrence.",
        fix=_READ_THE_TARGET,
        symptom=_WRONG_KEY,
    ),
    Misconception(
        "included the first copy",
        lambda w, n: _on_key(w, n, 1, range(n - 1, 1 + 2 * n)),
        _FIRST_COPY_HINT,
        fix=_FIRST_COPY_FIX,
        symptom=_FIRST_COPY_SYMPTOM,
    ),
    # Any other way of counting first-copy queries (a range from 1, negative keys that wrap around): a property
    # every right answer has.
    Misconception(
        "included the first copy",
        None,
        _FIRST_COPY_HINT,
        detect=_reads_first_copy,
        fix=_FIRST_COPY_FIX,
        symptom=_FIRST_COPY_SYMPTOM,
        always=True,
    ),
    Misconception(
        "left out the last token of the copy",
        lambda w, n: _on_key(w, n, 1, range(1 + n, 2 * n)),
        "Every query of the second copy has an earlier occurrence, the last one (t = 2 * repeat_len) too.",
        fix="Queries t = 1 + repeat_len .. 2 * repeat_len, both ends included: "
        "torch.arange(1 + repeat_len, 1 + 2 * repeat_len) (a range's end is excluded).",
        symptom="Your score does not change when only the weights of the last query, t = 2 * repeat_len, change; "
        "the reference's does.",
    ),
    Misconception(
        "averaged over the heads, not the batch",
        lambda w, n: torch.stack([w[:, :, t, t - n + 1] for t in range(1 + n, 1 + 2 * n)], -1).mean(dim=(1, 2)),
        "The score is one number per head, to compare the heads: the batch and the queries are what is averaged over.",
        fix="Average the picked (batch, heads, repeat_len) weights over axes 0 and 2, keeping axis 1: "
        ".mean(dim=(0, 2)).",
        symptom="Your result has one number per sequence of the batch, not one per head.",
    ),
)


def _induction_cases() -> list[Case]:
    g = torch.Generator().manual_seed(110)
    return [
        Case((_causal_weights(g, 2, 3, 9, 9), 4), description="weights (batch=2, heads=3, 9, 9), repeat_len 4"),
        Case((_causal_weights(g, 3, 5, 13, 13), 6), description="weights (batch=3, heads=5, 13, 13), repeat_len 6"),
        Case((_causal_weights(g, 1, 4, 7, 7), 3), description="weights (batch=1, heads=4, 7, 7), repeat_len 3"),
    ]


def _draw_induction(g: torch.Generator) -> list[Case]:
    """Four cases of other sizes: batches of 2 to 4, an odd number of heads, copies of 5, 7 or 8 tokens."""
    cases = []
    for _ in range(4):
        batch, heads, n = _pick(g, (2, 3, 4)), _pick(g, (1, 5, 7)), _pick(g, (5, 7, 8))
        seq = 1 + 2 * n
        cases.append(
            Case(
                (_causal_weights(g, batch, heads, seq, seq), n),
                description=f"weights (batch={batch}, heads={heads}, {seq}, {seq}), repeat_len {n}",
            )
        )
    return cases


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
        draw=_draw_induction,
        verbose=verbose,
    )


# ---------------------------------------------------------------- sink heads


def _sink_reference(weights: torch.Tensor, threshold: float) -> torch.Tensor:
    return weights[..., 1:, 0].mean(-1) > threshold


_MEAN_ABOVE = "weights[..., 1:, 0].mean(dim=-1) > threshold: column 0, queries 1 on, averaged, compared."

SINK_MISCONCEPTIONS = (
    Misconception(
        "counted query 0",
        lambda w, c: w[..., :, 0].mean(-1) > c,
        "Query 0 can only see key 0, so its weight there is always 1: it says nothing about the head, and "
        "counting it lifts every head's mean.",
        fix=_MEAN_ABOVE,
        symptom="Where your answer differs from the reference's, yours says True and the reference's False.",
    ),
    Misconception(
        "read row 0 instead of column 0",
        lambda w, c: w[..., 0, :].mean(-1) > c,
        "Rows are queries and columns keys: row 0 is what the first query looks at (only itself, in every head). "
        "The weight each query puts on the first token is column 0.",
        fix=_MEAN_ABOVE,
        symptom="Your answer is the same for every head, whatever its weights.",
    ),
    Misconception(
        "took the largest weight, not the mean",
        lambda w, c: w[..., 1:, 0].amax(-1) > c,
        "A sink head parks its weight on the first token at most queries; almost any head puts much weight "
        "there at *some* query, so the largest weight says little.",
        fix=_MEAN_ABOVE,
        symptom="Your answer says True for more heads than the reference's: also for heads that put much weight "
        "on the first token at a few queries only.",
    ),
    Misconception(
        "returned the weights, not a mask",
        lambda w, c: w[..., 1:, 0].mean(-1),
        "The answer is a yes or no per head: is its mean weight on the first token above the threshold?",
        fix=_MEAN_ABOVE,
        symptom="Your function returns numbers, not True/False.",
    ),
    Misconception(
        "0/1 numbers instead of booleans",
        lambda w, c: (w[..., 1:, 0].mean(-1) > c).to(w.dtype),
        "A yes or no is a boolean: a tensor of 0s and 1s is a tensor of numbers, which indexing and `~` treat "
        "as numbers.",
        fix=_MEAN_ABOVE + " (leave out .float() or .int())",
        symptom="Your answer has the right values, but as numbers (0 and 1), not True/False.",
    ),
    Misconception(
        "comparison the wrong way round",
        lambda w, c: w[..., 1:, 0].mean(-1) < c,
        "A sink head puts *more* than the threshold on the first token.",
        fix=_MEAN_ABOVE,
        symptom="Your answer is True exactly where the reference's is False.",
    ),
)


def _threshold_between(weights: torch.Tensor) -> float:
    """A threshold (a multiple of 0.01 in [0.3, 0.7]) that splits the heads by their mean weight on key 0 and
    stays as far as it can from every head's mean, largest weight and mean with query 0: float32 rounding
    then flips no comparison of the answer or of a known mistake."""
    column = weights[..., :, 0]
    values = torch.cat([column[..., 1:].mean(-1), column.mean(-1), column[..., 1:].amax(-1)], dim=-1).reshape(-1)
    means = column[..., 1:].mean(-1)
    candidates = [c / 100 for c in range(30, 71) if bool((means > c / 100).any() and (means < c / 100).any())]
    candidates = candidates or [0.5]
    return max(candidates, key=lambda c: float((values - c).abs().min()))


def _sink_case(g: torch.Generator, layers: int, heads: int, seq: int, threshold: float | None = None) -> Case:
    sink = torch.linspace(-2.0, 6.0, layers * heads)[torch.randperm(layers * heads, generator=g)]
    weights = _causal_weights(g, layers, heads, seq, seq, sink=sink.reshape(layers, heads))
    threshold = _threshold_between(weights) if threshold is None else threshold
    return Case(
        (weights, threshold), description=f"weights (layers={layers}, heads={heads}, {seq}, {seq}), {threshold}"
    )


def _sink_cases() -> list[Case]:
    g = torch.Generator().manual_seed(111)
    return [_sink_case(g, *sizes) for sizes in ((3, 4, 8, 0.5), (2, 6, 11, 0.4), (4, 3, 6, 0.6))]


def _draw_sinks(g: torch.Generator) -> list[Case]:
    """Four stacks of other sizes (1 to 5 layers, odd head counts, 5 to 13 tokens), each with a threshold
    that splits its heads."""
    return [_sink_case(g, _pick(g, (1, 2, 5)), _pick(g, (5, 7, 9)), _pick(g, (5, 7, 9, 12, 13))) for _ in range(4)]


def check_sink_heads(learner: Callable[..., torch.Tensor], *, verbose: bool = True) -> CheckResult:
    """Check ``learner(weights (layers, heads, seq, seq), threshold) -> bool (layers, heads)``: ``True``
    where the mean weight on key 0 over the queries ``t = 1 .. seq - 1`` is above ``threshold``."""
    return check_function(
        "sink_heads", learner, _sink_reference, _sink_cases(), SINK_MISCONCEPTIONS, draw=_draw_sinks, verbose=verbose
    )


# ---------------------------------------------------------------- the loss on the second copy


def handed_out_copy_loss(logits: torch.Tensor, tokens: torch.Tensor, repeat_len: int) -> torch.Tensor:
    """The code exercise 3 hands out, bug included: ``(batch, seq, vocab), (batch, seq), int -> ()``."""
    n = repeat_len
    predictions = logits[:, n + 1 : 2 * n + 1]
    targets = tokens[:, n + 1 : 2 * n + 1]
    return F.cross_entropy(predictions.transpose(1, 2), targets)


def _copy_reference(logits: torch.Tensor, tokens: torch.Tensor, repeat_len: int) -> torch.Tensor:
    n = repeat_len
    return F.cross_entropy(logits[:, n + 1 : 2 * n].transpose(1, 2), tokens[:, n + 2 : 2 * n + 1])


def _loss(logits: torch.Tensor, tokens: torch.Tensor, positions: slice, shift: int = 1) -> torch.Tensor:
    start, stop = positions.start, positions.stop
    return F.cross_entropy(logits[:, start:stop].transpose(1, 2), tokens[:, start + shift : stop + shift])


def _scores_own_tokens(run: Callable[..., Any]) -> bool:
    """Logits that point each position at its own token score lower than logits that predict each next token
    perfectly (a right loss is near 0 for these)."""
    tokens = torch.tensor([[0, 1, 2, 3, 4, 1, 2, 3, 4]])  # no token follows itself
    own = 20.0 * F.one_hot(tokens, 7).double()
    following = 20.0 * F.one_hot(torch.cat([tokens[:, 1:], tokens[:, -1:]], dim=1), 7).double()
    return float(run(own, tokens, 4)) < float(run(following, tokens, 4))


_SECOND_COPY = (
    "Score the predictions made at positions 1 + repeat_len .. 2 * repeat_len - 1 against the tokens after them: "
    "logits[:, n + 1 : 2 * n] against tokens[:, n + 2 : 2 * n + 1], with n = repeat_len."
)

COPY_MISCONCEPTIONS = (
    # On whatever positions (those of the code handed out are told "still the original" first): found by
    # logits built to tell the two readings apart.
    Misconception(
        "no shift: each position scored on its own token",
        None,
        "The logits at position t predict the *next* token: a language model is trained to say what comes after "
        "what it has read, so they are scored against tokens[:, t + 1], not the token at t itself.",
        detect=_scores_own_tokens,
        fix=_SECOND_COPY,
        symptom="Your loss is near 0 for logits that point each position at its own token, and large for logits "
        "that predict each next token perfectly.",
    ),
    Misconception(
        "included the first token of the second copy",
        lambda x, y, n: _loss(x, y, slice(n, 2 * n)),
        "The first token of the second copy (position 1 + repeat_len) is predicted at position repeat_len, the "
        "end of the first copy: nothing there says the chunk starts again, so copying cannot predict it.",
        fix=_SECOND_COPY,
        symptom="Your loss changes when only the logits at position repeat_len change; the reference's does not.",
    ),
    Misconception(
        "scored the first copy",
        lambda x, y, n: _loss(x, y, slice(1, n)),
        "The first copy is random tokens: no model can predict them. Copying helps only in the second copy.",
        fix=_SECOND_COPY,
        symptom="Your loss changes when the logits of the first copy change, and not when those of the second copy do.",
    ),
    Misconception(
        "scored the whole sequence",
        lambda x, y, n: _loss(x, y, slice(0, 2 * n)),
        "Average only where copying predicts the next token: inside the second copy, not over the random first "
        "copy as well.",
        fix=_SECOND_COPY,
        symptom="Your loss changes when the logits of any position but the last change, those of the first copy too.",
    ),
    Misconception(
        "left out the last token of the copy",
        lambda x, y, n: _loss(x, y, slice(n + 1, 2 * n - 1)),
        "The last token of the second copy, at position 2 * repeat_len, can be copied too: it is predicted at "
        "position 2 * repeat_len - 1.",
        fix=_SECOND_COPY,
        symptom="Your loss does not change when only the logits at position 2 * repeat_len - 1 change; the "
        "reference's does.",
    ),
    Misconception(
        "summed, not averaged",
        lambda x, y, n: F.cross_entropy(x[:, n + 1 : 2 * n].transpose(1, 2), y[:, n + 2 : 2 * n + 1], reduction="sum"),
        "A loss is the mean over the predictions scored, so that it means the same for any batch and any length: "
        "nats per token.",
        fix="Keep F.cross_entropy's default reduction='mean' (or divide the sum by the number of predictions).",
        symptom="Your loss grows with the batch and with the length of the copy; the reference's does not.",
    ),
)


def _copy_case(g: torch.Generator, batch: int, n: int, vocab: int) -> Case:
    chunk = torch.randint(0, vocab, (batch, n), generator=g)
    tokens = torch.cat([torch.randint(0, vocab, (batch, 1), generator=g), chunk, chunk], dim=1)
    logits = torch.randn(batch, 1 + 2 * n, vocab, generator=g, dtype=torch.float64) * 2
    return Case((logits, tokens, n), description=f"logits ({batch}, {1 + 2 * n}, {vocab}), repeat_len {n}")


def _copy_cases() -> list[Case]:
    g = torch.Generator().manual_seed(112)
    return [_copy_case(g, *sizes) for sizes in ((2, 4, 11), (3, 6, 17), (1, 5, 9))]


def _draw_copies(g: torch.Generator) -> list[Case]:
    """Four batches of other sizes: 1 to 4 sequences, copies of 3, 7 or 8 tokens, 5 to 19 token ids."""
    return [_copy_case(g, _pick(g, (1, 2, 4)), _pick(g, (3, 7, 8)), _pick(g, (5, 13, 19))) for _ in range(4)]


def check_copy_loss(learner: Callable[..., torch.Tensor], *, verbose: bool = True) -> CheckResult:
    """Check ``learner(logits (batch, seq, vocab), tokens (batch, seq), repeat_len) -> scalar tensor``: the
    mean cross-entropy of the second copy's tokens that copying can predict — the predictions made at
    positions ``1 + repeat_len .. 2 * repeat_len - 1`` of the next tokens. A debugging exercise: the code
    handed out is :func:`handed_out_copy_loss`."""
    return check_function(
        "copy_loss",
        learner,
        _copy_reference,
        _copy_cases(),
        COPY_MISCONCEPTIONS,
        draw=_draw_copies,
        original=handed_out_copy_loss,
        verbose=verbose,
    )


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
        "zeroing one of them alone costs little.",
        symptom="You answered True for all four heads.",
    ),
    Misconception(
        "no single head matters",
        _constant(False, False, False, False),
        "Most heads can be zeroed alone at little cost, but not all: a head whose job no other head does is a "
        "single point of failure.",
        symptom="You answered False for all four heads.",
    ),
    Misconception(
        "only induction heads matter",
        _constant(False, True, True, False),
        "The induction heads find the token after the earlier occurrence through what a previous-token head wrote "
        "into it (notebook 07's circuit): a previous-token head that no other head backs up is part of copying "
        "as much as they are.",
        symptom="You answered True for the two induction heads and False for the two previous-token heads.",
    ),
    Misconception(
        "only previous-token heads matter",
        _constant(True, False, False, True),
        "Several induction heads share the copying, but not equally: whether the others make up for one of them "
        "depends on how much of the work it did.",
        symptom="You answered True for the two previous-token heads and False for the two induction heads.",
    ),
)


def check_ablation_prediction(learner: object, *, verbose: bool = True) -> CheckResult:
    """Check ``learner() -> bool (4,)`` (or the tensor itself): for each head of :data:`PREDICTION_HEADS`,
    ``True`` when zeroing it alone raises the real model's loss on the second copy by more than
    :data:`PREDICTION_RISE` nats. The truth is measured on the model (:func:`measured_rises`); the
    measured rises are shown with the value, once the prediction is right, after a few wrong tries or on
    ``result.reveal()``."""

    def explain() -> str:  # measured only when the value is shown (once per process)
        rises = zip(PREDICTION_HEADS, measured_rises(), strict=True)
        shown = ", ".join(f"L{layer}H{head} {rise:+.1f}" for (layer, head), rise in rises)
        return f"measured rises of the loss (nats), each head zeroed alone: {shown}"

    return check_prediction(
        "ablation_prediction",
        learner,
        _measured,
        "your four answers",
        PREDICTION_MISCONCEPTIONS,
        explain=explain,
        verbose=verbose,
    )
