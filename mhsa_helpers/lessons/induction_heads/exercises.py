"""Checkers for notebook 07 (induction heads).

The attention patterns in the cases are random causal softmax rows, not hand-made one-hot
rows: on a one-hot previous-token pattern the main diagonal and the one below it would give
the same mean over a few positions by accident far less often than on random rows, and random
rows make every wrong diagonal, wrong target and wrong average give a different number.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import torch

from ...teaching.checking import Case, CheckResult, Misconception, check_function
from .scores import induction_score, previous_token_score
from .task import InductionBatch, repeat_chunk

# check_previous_token_score is no longer an exercise of notebook 07 (its formula is given in the text, and the
# exercise became a prediction); it stays importable by name for the tests and for anyone who wants it.
__all__ = [
    "PREDICTION_SEQ",
    "check_ablate_head",
    "check_induction_score",
    "check_repeat_chunk",
    "check_untrained_prediction",
]


def _causal_weights(generator: torch.Generator, batch: int, heads: int, seq: int) -> torch.Tensor:
    """``(batch, heads, seq, seq)`` float64: random scores, causal mask, softmax over keys."""
    scores = torch.randn(batch, heads, seq, seq, generator=generator, dtype=torch.float64) * 2
    future = torch.ones(seq, seq, dtype=torch.bool).triu(1)
    return scores.masked_fill(future, float("-inf")).softmax(-1)


# ---------------------------------------------------------------- previous-token score


def _prev_main_diagonal(weights: torch.Tensor) -> torch.Tensor:
    return weights.diagonal(offset=0, dim1=-2, dim2=-1)[..., 1:].mean(dim=(0, 2))


def _prev_two_back(weights: torch.Tensor) -> torch.Tensor:
    return weights.diagonal(offset=-2, dim1=-2, dim2=-1).mean(dim=(0, 2))


def _prev_above_diagonal(weights: torch.Tensor) -> torch.Tensor:
    return weights.diagonal(offset=1, dim1=-2, dim2=-1).mean(dim=(0, 2))


def _prev_with_query_zero(weights: torch.Tensor) -> torch.Tensor:
    seq = weights.shape[-1]
    return weights.diagonal(offset=-1, dim1=-2, dim2=-1).sum(-1).mean(0) / seq


def _prev_summed(weights: torch.Tensor) -> torch.Tensor:
    return weights.diagonal(offset=-1, dim1=-2, dim2=-1).sum(-1).mean(0)


def _prev_over_heads(weights: torch.Tensor) -> torch.Tensor:
    return weights.diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=(0, 2)).mean().expand(weights.shape[1])


PREVIOUS_TOKEN_MISCONCEPTIONS = (
    Misconception(
        "off-by-one diagonal: the token itself",
        _prev_main_diagonal,
        "You read the main diagonal weights[..., t, t]: how much each token attends to *itself*. The "
        "previous token of query t is key t - 1, one below the diagonal: "
        "weights.diagonal(offset=-1, dim1=-2, dim2=-1).",
    ),
    Misconception(
        "off-by-one diagonal: two tokens back",
        _prev_two_back,
        "You read weights[..., t, t - 2]. The previous token is exactly one back: diagonal offset -1.",
    ),
    Misconception(
        "off-by-one diagonal: above the diagonal",
        _prev_above_diagonal,
        "diagonal(offset=+1) is weights[..., t, t + 1]: the *next* token, which a causal head cannot see (all "
        "zeros). Keys are the columns: the previous token sits below the diagonal, offset -1.",
    ),
    Misconception(
        "averaged over undefined positions",
        _prev_with_query_zero,
        "Query 0 (BOS) has no previous token, so it has no previous-token weight to average: divide by the "
        "seq - 1 queries t = 1 .. seq - 1, not by seq. The diagonal at offset -1 already has exactly those "
        "seq - 1 entries; take their mean.",
    ),
    Misconception(
        "summed instead of averaged",
        _prev_summed,
        "A score in [0, 1] is a mean: average the seq - 1 weights on the previous token (and the batch), "
        "don't add them up.",
    ),
    Misconception(
        "averaged over the heads too",
        _prev_over_heads,
        "The score is one number *per head*: average over the batch and the queries (axes 0 and 2), keep "
        "axis 1 (heads).",
    ),
)


def _previous_token_cases() -> list[Case]:
    g = torch.Generator().manual_seed(70)
    return [
        Case((_causal_weights(g, 2, 3, 6),), description="weights (batch=2, heads=3, seq=6, seq=6)"),
        Case((_causal_weights(g, 1, 4, 9),), description="weights (batch=1, heads=4, seq=9, seq=9)"),
        Case((_causal_weights(g, 5, 2, 4),), description="weights (batch=5, heads=2, seq=4, seq=4)"),
    ]


def check_previous_token_score(learner: Callable[..., torch.Tensor], *, verbose: bool = True) -> CheckResult:
    """Check ``learner(weights (batch, heads, seq, seq)) -> (heads,)``: the mean weight of query ``t`` on
    key ``t - 1``, over the batch and the queries ``t = 1 .. seq - 1``."""
    return check_function(
        "previous_token_score",
        learner,
        previous_token_score,
        _previous_token_cases(),
        PREVIOUS_TOKEN_MISCONCEPTIONS,
        shortcuts=("previous_token_score",),
        verbose=verbose,
    )


# ---------------------------------------------------------------- induction score


def _batch(first_start: torch.Tensor, repeat_len: torch.Tensor, seq: int) -> InductionBatch:
    # Only the positions matter to the score; the tokens are a placeholder of the right shape.
    tokens = torch.zeros(len(first_start), seq, dtype=torch.long)
    mask = torch.zeros(len(first_start), seq, dtype=torch.bool)
    return InductionBatch(tokens, mask, first_start, repeat_len)


def _induction_reference(weights, first_start, repeat_len):
    return induction_score(weights, _batch(first_start, repeat_len, weights.shape[-1]))


def _induction_with_key(weights, first_start, repeat_len, key_shift: int, queries: str = "second"):
    """Mean weight of query t on key t - repeat_len + key_shift, over the chosen queries."""
    total = torch.zeros(weights.shape[1], dtype=weights.dtype)
    count = 0
    seq = weights.shape[-1]
    for b, (s, length) in enumerate(zip(first_start.tolist(), repeat_len.tolist(), strict=True)):
        if queries == "second":
            ts = range(s + length, s + 2 * length)
        elif queries == "second_but_last":
            ts = range(s + length, s + 2 * length - 1)
        else:  # every query that has a key at that distance
            ts = range(max(0, length - key_shift), seq)
        for t in ts:
            key = t - length + key_shift
            if 0 <= key <= t:
                total += weights[b, :, t, key]
            count += 1
    return total / count


def _induction_per_sequence(weights, first_start, repeat_len):
    scores = [
        _induction_with_key(weights[b : b + 1], first_start[b : b + 1], repeat_len[b : b + 1], 1)
        for b in range(weights.shape[0])
    ]
    return torch.stack(scores).mean(0)


INDUCTION_MISCONCEPTIONS = (
    Misconception(
        "attended to the earlier token itself",
        lambda w, s, n: _induction_with_key(w, s, n, 0),
        "You scored key t - repeat_len: the *earlier occurrence* of the current token. An induction head "
        "looks one further, at the token that came *after* it (key t - repeat_len + 1): that is the token "
        "to predict next.",
    ),
    Misconception(
        "previous-token pattern instead",
        lambda w, s, n: _prev_on_copy(w, s, n),
        "You scored key t - 1, the previous token. The induction target is repeat_len - 1 keys back: "
        "t - repeat_len + 1.",
    ),
    Misconception(
        "averaged over undefined positions",
        lambda w, s, n: _induction_with_key(w, s, n, 1, queries="all"),
        "Outside the second copy there is no earlier occurrence to look back to, so the pattern is "
        "undefined there: average only over the queries t = first_start + repeat_len .. "
        "first_start + 2 * repeat_len - 1.",
    ),
    Misconception(
        "left out the last token of the copy",
        lambda w, s, n: _induction_with_key(w, s, n, 1, queries="second_but_last"),
        "Every token of the second copy has an earlier occurrence, the last one too (the token after its "
        "earlier occurrence is the first token of the second copy): score all repeat_len queries.",
    ),
    Misconception(
        "averaged per sequence first",
        _induction_per_sequence,
        "Pool the queries: add up the weight on the target over every second-copy query of every sequence "
        "and divide by the number of such queries. Averaging each sequence first gives a short chunk's "
        "queries more say than a long chunk's.",
    ),
)


def _prev_on_copy(weights, first_start, repeat_len):
    total = torch.zeros(weights.shape[1], dtype=weights.dtype)
    count = 0
    for b, (s, length) in enumerate(zip(first_start.tolist(), repeat_len.tolist(), strict=True)):
        for t in range(s + length, s + 2 * length):
            total += weights[b, :, t, t - 1]
            count += 1
    return total / count


def _induction_cases() -> list[Case]:
    g = torch.Generator().manual_seed(71)
    return [
        Case(
            (_causal_weights(g, 2, 3, 12), torch.tensor([2, 1]), torch.tensor([3, 5])),
            description="weights (2, 3, 12, 12), first_start [2, 1], repeat_len [3, 5]",
        ),
        Case(
            (_causal_weights(g, 3, 2, 16), torch.tensor([1, 4, 6]), torch.tensor([7, 4, 2])),
            description="weights (3, 2, 16, 16), first_start [1, 4, 6], repeat_len [7, 4, 2]",
        ),
        Case(
            (_causal_weights(g, 1, 4, 10), torch.tensor([3]), torch.tensor([3])),
            description="weights (1, 4, 10, 10), first_start [3], repeat_len [3]",
        ),
    ]


def check_induction_score(learner: Callable[..., torch.Tensor], *, verbose: bool = True) -> CheckResult:
    """Check ``learner(weights (batch, heads, seq, seq), first_start (batch,), repeat_len (batch,)) -> (heads,)``:
    the weight of each second-copy query ``t`` on key ``t - repeat_len + 1``, pooled over every such
    query of the batch."""
    return check_function(
        "induction_score",
        learner,
        _induction_reference,
        _induction_cases(),
        INDUCTION_MISCONCEPTIONS,
        shortcuts=("induction_score",),
        verbose=verbose,
    )


# ---------------------------------------------------------------- building the repeated batch


def _repeat_reference(noise, first_start, repeat_len):
    return repeat_chunk(noise, first_start, repeat_len)


def _second_copy(noise, first_start, repeat_len, shift: int = 0):
    tokens = noise.clone()
    for b, (s, length) in enumerate(zip(first_start.tolist(), repeat_len.tolist(), strict=True)):
        tokens[b, s + length + shift : s + 2 * length + shift] = noise[b, s : s + length][
            : tokens.shape[1] - s - length - shift
        ]
    return tokens


def _mask_from(first_start, repeat_len, seq: int, first: int, last: int) -> torch.Tensor:
    """True at t in [s + length + first, s + 2 * length + last) for each sequence."""
    mask = torch.zeros(len(first_start), seq, dtype=torch.bool)
    for b, (s, length) in enumerate(zip(first_start.tolist(), repeat_len.tolist(), strict=True)):
        mask[b, max(0, s + length + first) : s + 2 * length + last] = True
    return mask


def _right_mask(noise, s, n):
    return _mask_from(s, n, noise.shape[1], 0, -1)


REPEAT_MISCONCEPTIONS = (
    Misconception(
        "mask marks the whole second copy",
        lambda x, s, n: (_second_copy(x, s, n), _mask_from(s, n, x.shape[1], 0, 0)),
        "The mask marks positions whose *next* token is predictable. After the last token of the second "
        "copy comes random noise: leave that position out (the mask covers repeat_len - 1 positions).",
    ),
    Misconception(
        "mask one position early",
        lambda x, s, n: (_second_copy(x, s, n), _mask_from(s, n, x.shape[1], -1, -1)),
        "Position first_start + repeat_len - 1 is the last token of the *first* copy; the token after it starts "
        "the second copy, but nothing announces it yet (it could be any token). The first predictable next "
        "token follows position first_start + repeat_len.",
    ),
    Misconception(
        "second copy one position late",
        lambda x, s, n: (_second_copy(x, s, n, shift=1), _right_mask(x, s, n)),
        "The second copy starts right after the first, at first_start + repeat_len, with no gap.",
    ),
    Misconception(
        "copied the second copy over the first",
        lambda x, s, n: (_copy_backwards(x, s, n), _right_mask(x, s, n)),
        "Copy forwards: the tokens already at first_start .. first_start + repeat_len - 1 are the chunk, and "
        "they are written again over the next repeat_len positions.",
    ),
    Misconception(
        "mask of 0/1 numbers, not booleans",
        lambda x, s, n: (_second_copy(x, s, n), _right_mask(x, s, n).long()),
        "Return the mask as a bool tensor (e.g. torch.zeros(..., dtype=torch.bool)): 0/1 integers index a "
        "tensor as positions 0 and 1, not as a selection.",
    ),
)


def _copy_backwards(noise, first_start, repeat_len):
    tokens = noise.clone()
    for b, (s, length) in enumerate(zip(first_start.tolist(), repeat_len.tolist(), strict=True)):
        tokens[b, s : s + length] = noise[b, s + length : s + 2 * length]
    return tokens


def _repeat_cases() -> list[Case]:
    g = torch.Generator().manual_seed(72)

    def noise(batch: int, seq: int) -> torch.Tensor:
        tokens = torch.randint(1, 20, (batch, seq), generator=g)
        tokens[:, 0] = 0
        return tokens

    return [
        Case((noise(2, 12), torch.tensor([1, 3]), torch.tensor([4, 3])), description="2 x 12 tokens, chunks 4 and 3"),
        Case((noise(3, 16), torch.tensor([2, 1, 5]), torch.tensor([5, 7, 2])), description="3 x 16 tokens"),
        Case((noise(1, 9), torch.tensor([1]), torch.tensor([4])), description="1 x 9 tokens, chunk fills the row"),
    ]


def check_repeat_chunk(
    learner: Callable[..., tuple[torch.Tensor, torch.Tensor]], *, verbose: bool = True
) -> CheckResult:
    """Check ``learner(noise (batch, seq), first_start (batch,), repeat_len (batch,)) -> (tokens (batch, seq),
    induction_mask (batch, seq) bool)`` against :func:`~.task.repeat_chunk`."""
    return check_function(
        "repeat_chunk",
        learner,
        _repeat_reference,
        _repeat_cases(),
        REPEAT_MISCONCEPTIONS,
        output_names=("tokens", "induction_mask"),
        shortcuts=("repeat_chunk",),
        verbose=verbose,
    )


# ---------------------------------------------------------------- ablating a head


def _ablate_reference(merged: torch.Tensor, num_heads: int, head: int) -> torch.Tensor:
    d_head = merged.shape[-1] // num_heads
    out = merged.clone()
    out[..., head * d_head : (head + 1) * d_head] = 0
    return out


def _ablate_strided(merged, num_heads, head):
    out = merged.clone()
    out[..., head::num_heads] = 0
    return out


def _ablate_from_one(merged, num_heads, head):
    # Head 0 becomes the empty slice [-d_head:0]: nothing is zeroed.
    d_head = merged.shape[-1] // num_heads
    out = merged.clone()
    out[..., (head - 1) * d_head : head * d_head] = 0
    return out


def _ablate_keep_only(merged, num_heads, head):
    d_head = merged.shape[-1] // num_heads
    out = torch.zeros_like(merged)
    out[..., head * d_head : (head + 1) * d_head] = merged[..., head * d_head : (head + 1) * d_head]
    return out


def _ablate_d_head_at_head(merged, num_heads, head):
    d_head = merged.shape[-1] // num_heads
    out = merged.clone()
    out[..., head : head + d_head] = 0
    return out


ABLATE_MISCONCEPTIONS = (
    Misconception(
        "zeroed every num_heads-th feature",
        _ablate_strided,
        "The heads sit side by side, head h in features h * d_head .. (h + 1) * d_head - 1 (the merge of notebook "
        "04 puts them there); merged[..., head::num_heads] picks one feature of *every* head.",
    ),
    Misconception(
        "counted heads from 1",
        _ablate_from_one,
        "Heads are numbered from 0 here, as the scores table numbers them: head h starts at feature h * d_head.",
    ),
    Misconception(
        "kept only that head",
        _ablate_keep_only,
        "Ablating a head removes *its* contribution and keeps the others: zero its d_head features, leave "
        "the rest as they are.",
    ),
    Misconception(
        "started at feature `head`, not `head * d_head`",
        _ablate_d_head_at_head,
        "Head h's slice starts at h * d_head: merged[..., head * d_head : (head + 1) * d_head].",
    ),
)


def _ablate_cases() -> list[Case]:
    g = torch.Generator().manual_seed(73)
    return [
        Case((torch.randn(2, 5, 12, generator=g), 4, 2), description="merged (2, 5, 12), 4 heads of 3, head 2"),
        Case((torch.randn(1, 3, 16, generator=g), 4, 0), description="merged (1, 3, 16), 4 heads of 4, head 0"),
        Case((torch.randn(3, 4, 12, generator=g), 3, 1), description="merged (3, 4, 12), 3 heads of 4, head 1"),
    ]


def check_ablate_head(learner: Callable[..., torch.Tensor], *, verbose: bool = True) -> CheckResult:
    """Check ``learner(merged (batch, seq, num_heads * d_head), num_heads, head) -> same shape``: the heads'
    outputs side by side (the input of the output projection) with head ``head`` (0-based) set to zero."""
    return check_function(
        "ablate_head", learner, _ablate_reference, _ablate_cases(), ABLATE_MISCONCEPTIONS, verbose=verbose
    )


# ---------------------------------------------------------------- predict: the score of an untrained head

#: The sequences of the prediction exercise: notebook 07's 32 tokens.
PREDICTION_SEQ = 32


def _uniform_previous_token_score() -> float:
    """A head that spreads query ``t``'s weight evenly over the ``t + 1`` keys it may see puts ``1 / (t + 1)``
    on key ``t - 1``; the score averages that over ``t = 1 .. seq - 1``."""
    return sum(1 / (t + 1) for t in range(1, PREDICTION_SEQ)) / (PREDICTION_SEQ - 1)


UNTRAINED_MISCONCEPTIONS = (
    Misconception(
        "spread over every key, the future ones too",
        lambda: 1 / PREDICTION_SEQ,
        "1/32 would be right if every query shared its weight among all 32 keys. The causal mask lets query t "
        "see only t + 1 keys, so the early queries give the previous token a large share (1/2 at t = 1).",
    ),
    Misconception(
        "the share of the middle query",
        lambda: 1 / (PREDICTION_SEQ // 2 + 1),
        "1/(t + 1) at the middle query is not the mean of 1/(t + 1): the early queries, with few keys to share "
        "among, put far more on the previous token, and they pull the mean up.",
    ),
    Misconception(
        "counted query 0",
        lambda: sum(1 / (t + 1) for t in range(PREDICTION_SEQ)) / PREDICTION_SEQ,
        "Query 0 has no previous token: the score averages over the 31 queries t = 1 .. 31 only (notebook 07, "
        "section 7), not over all 32 with query 0's weight on itself.",
    ),
    Misconception(
        "an untrained head looks nowhere",
        lambda: 0.0,
        "Softmax rows sum to 1: even with random weights every query gives every key it may see some weight, "
        "the previous one included.",
    ),
)


def _measured_untrained_scores() -> torch.Tensor:
    """The 8 heads' previous-token scores at step 0 of the shipped run, on the held-out batch."""
    from .checkpoints import load_checkpoints  # the checkpoints import training; checkers load them lazily
    from .training import evaluation_batch

    checkpoints = load_checkpoints()
    batch = evaluation_batch(checkpoints.config, 128)
    with torch.no_grad():
        _, weights = checkpoints.model_at(0)(batch.tokens)
    return torch.stack([previous_token_score(w) for w in weights])


def check_untrained_prediction(learner: Callable[[], float], *, verbose: bool = True) -> CheckResult:
    """Check ``learner() -> float``: the previous-token score of a head that spreads each query's weight
    evenly over the keys it may see, on :data:`PREDICTION_SEQ`-token sequences (within 0.01). The
    message adds what the 8 heads of the shipped run scored at step 0."""
    result = check_function(
        "untrained_prediction",
        learner,
        _uniform_previous_token_score,
        [Case((), description="a head that spreads its weight evenly, 32 tokens")],
        UNTRAINED_MISCONCEPTIONS,
        atol=0.01,
        rtol=0.0,
        verbose=False,
    )
    if result.status in ("correct", "misconception", "incorrect"):
        measured = _measured_untrained_scores()
        result = replace(
            result,
            message=f"{result.message} Measured at step 0 of the shipped run: the 8 heads scored "
            f"{float(measured.min()):.3f} to {float(measured.max()):.3f} (even spreading: "
            f"{_uniform_previous_token_score():.3f}).",
        )
    if verbose:
        print(result.message)
    return result
