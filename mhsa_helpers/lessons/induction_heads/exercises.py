"""Checkers for notebook 07 (induction heads).

The attention patterns in the cases are random causal softmax rows, not hand-made one-hot
rows: on a one-hot previous-token pattern the main diagonal and the one below it would give
the same mean over a few positions by accident far less often than on random rows, and random
rows make every wrong diagonal, wrong target and wrong average give a different number.

Besides its teaching cases, each function checker draws four more for every answer (other batch sizes,
head counts, lengths and chunk placements), so an answer fitted to the teaching shapes meets shapes it
was not fitted to.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from ...teaching.checking import Case, CheckResult, Misconception, check_function, random_tensor
from ...teaching.induction.scores import induction_score, previous_token_score
from ...teaching.induction.task import InductionBatch, repeat_chunk
from ...teaching.predictions import check_prediction

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


def _integer(generator: torch.Generator, low: int, high: int) -> int:
    """A random whole number in ``low .. high`` (both included)."""
    return int(torch.randint(low, high + 1, (1,), generator=generator))


def _chunks(generator: torch.Generator, batch: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Random ``first_start (batch,)``, ``repeat_len (batch,)`` and a ``seq`` that holds both copies after BOS,
    with room to spare after the second copy."""
    repeat_len = torch.randint(2, 7, (batch,), generator=generator)
    seq = int(2 * repeat_len.max()) + _integer(generator, 2, 5)
    room = seq - 2 * repeat_len  # first_start may be 1 .. room
    first_start = 1 + (torch.rand(batch, generator=generator, dtype=torch.float64) * room).long()
    return first_start, repeat_len, seq


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


_PREVIOUS_FIX = "weights.diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=(0, 2)): key t - 1 of every query t >= 1."

PREVIOUS_TOKEN_MISCONCEPTIONS = (
    Misconception(
        "off-by-one diagonal: the token itself",
        _prev_main_diagonal,
        "The main diagonal holds each token's weight on itself; the previous token of query t is one key "
        "further left, key t - 1.",
        fix=_PREVIOUS_FIX,
        symptom="On a perfect previous-token pattern your score is 0.",
    ),
    Misconception(
        "off-by-one diagonal: two tokens back",
        _prev_two_back,
        "You read the weight two tokens back; the previous token is exactly one back.",
        fix=_PREVIOUS_FIX,
        symptom="On a perfect previous-token pattern your score is 0.",
    ),
    Misconception(
        "off-by-one diagonal: above the diagonal",
        _prev_above_diagonal,
        "Keys are the columns, and the diagonal above the main one holds the weight on the *next* token, which "
        "a causal head cannot see: the previous token sits below the main diagonal.",
        fix=_PREVIOUS_FIX,
        symptom="Your scores are 0 on every causal pattern.",
    ),
    Misconception(
        "averaged over undefined positions",
        _prev_with_query_zero,
        "Query 0 (BOS) has no previous token, so it has no previous-token weight to average: the mean runs "
        "over the seq - 1 queries t = 1 .. seq - 1.",
        fix="Divide by seq - 1, not seq: the diagonal at offset -1 has exactly those seq - 1 entries; take their mean.",
        symptom="On a perfect previous-token pattern of seq tokens your score is (seq - 1) / seq, not 1.",
    ),
    Misconception(
        "summed instead of averaged",
        _prev_summed,
        "A score is a mean weight, between 0 and 1, so that heads and sequence lengths compare.",
        fix="Take the mean over the seq - 1 queries and the batch, not their sum: " + _PREVIOUS_FIX,
        symptom="Your scores can be larger than 1: seq - 1 on a perfect previous-token pattern.",
    ),
    Misconception(
        "averaged over the heads too",
        _prev_over_heads,
        "The score is one number *per head*: each head has its own pattern.",
        fix="Average over the batch and the queries (axes 0 and 2) and keep axis 1, the heads.",
        symptom="All your heads get the same score.",
    ),
)


def _previous_token_cases() -> list[Case]:
    g = torch.Generator().manual_seed(70)
    return [
        Case((_causal_weights(g, 2, 3, 6),), description="weights (batch=2, heads=3, seq=6, seq=6)"),
        Case((_causal_weights(g, 1, 4, 9),), description="weights (batch=1, heads=4, seq=9, seq=9)"),
        Case((_causal_weights(g, 5, 2, 4),), description="weights (batch=5, heads=2, seq=4, seq=4)"),
    ]


def _draw_previous_token(generator: torch.Generator) -> list[Case]:
    cases = []
    for _ in range(4):
        batch, heads, seq = _integer(generator, 2, 4), _integer(generator, 1, 3), _integer(generator, 3, 11)
        weights = _causal_weights(generator, batch, heads, seq)
        cases.append(Case((weights,), description=f"weights {tuple(weights.shape)}"))
    return cases


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
        draw=_draw_previous_token,
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


def _prev_on_copy(weights, first_start, repeat_len):
    total = torch.zeros(weights.shape[1], dtype=weights.dtype)
    count = 0
    for b, (s, length) in enumerate(zip(first_start.tolist(), repeat_len.tolist(), strict=True)):
        for t in range(s + length, s + 2 * length):
            total += weights[b, :, t, t - 1]
            count += 1
    return total / count


INDUCTION_MISCONCEPTIONS = (
    Misconception(
        "attended to the earlier token itself",
        lambda w, s, n: _induction_with_key(w, s, n, 0),
        "You scored the *earlier occurrence* of the current token. An induction head looks one further, at the "
        "token that came *after* it: that is the token to predict next.",
        fix="The target of query t is key t - repeat_len + 1, not t - repeat_len.",
        symptom="On a perfect induction pattern your score is 0.",
    ),
    Misconception(
        "previous-token pattern instead",
        lambda w, s, n: _prev_on_copy(w, s, n),
        "You scored the previous token. The induction target is the token after the earlier occurrence, "
        "repeat_len - 1 keys back.",
        fix="Read weights[b, :, t, t - repeat_len + 1], not weights[b, :, t, t - 1].",
        symptom="On a pattern where every query looks at the token just before it, your score is 1.",
    ),
    Misconception(
        "averaged over undefined positions",
        lambda w, s, n: _induction_with_key(w, s, n, 1, queries="all"),
        "Outside the second copy there is no earlier occurrence to look back to, so the pattern is undefined "
        "there: those queries must not count.",
        fix="Average only over the queries t = first_start + repeat_len .. first_start + 2 * repeat_len - 1 of "
        "each sequence.",
        symptom="Your score changes when the weights of queries outside the second copy change.",
    ),
    Misconception(
        "left out the last token of the copy",
        lambda w, s, n: _induction_with_key(w, s, n, 1, queries="second_but_last"),
        "Every token of the second copy has an earlier occurrence, the last one too: the token after its "
        "earlier occurrence is the first token of the second copy.",
        fix="Score all repeat_len queries of the second copy: range(s + n, s + 2 * n).",
        symptom="Your score does not change when the weights of the last query of each second copy change.",
    ),
    Misconception(
        "averaged per sequence first",
        _induction_per_sequence,
        "Each query counts once. Averaging each sequence first gives a short chunk's few queries as much say as "
        "a long chunk's many.",
        fix="Add up the weight on the target over every second-copy query of every sequence, and divide by the "
        "number of such queries.",
        symptom="Your score is right when every sequence has the same repeat_len, and off when the lengths differ.",
    ),
)


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


def _draw_induction(generator: torch.Generator) -> list[Case]:
    cases = []
    for _ in range(4):
        batch = _integer(generator, 2, 4)
        first_start, repeat_len, seq = _chunks(generator, batch)
        weights = _causal_weights(generator, batch, _integer(generator, 1, 3), seq)
        description = (
            f"weights {tuple(weights.shape)}, first_start {first_start.tolist()}, repeat_len {repeat_len.tolist()}"
        )
        cases.append(Case((weights, first_start, repeat_len), description=description))
    return cases


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
        draw=_draw_induction,
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


def _copy_backwards(noise, first_start, repeat_len):
    tokens = noise.clone()
    for b, (s, length) in enumerate(zip(first_start.tolist(), repeat_len.tolist(), strict=True)):
        tokens[b, s : s + length] = noise[b, s + length : s + 2 * length]
    return tokens


def _right_values_in_another_dtype(output: int) -> Callable[[Callable[..., Any]], bool]:
    """A probe: True when the answer's ``output`` (0: tokens, 1: the mask) holds the reference's values in a
    dtype other than the reference's (floats for tokens, numbers for the mask)."""

    def detect(run: Callable[..., Any]) -> bool:
        case = _repeat_cases()[0]
        got = run(*case.args)[output]  # an answer that returns no pair raises here: no evidence either way
        want = _repeat_reference(*case.args)[output]
        return got.dtype != want.dtype and torch.equal(got.to(want.dtype), want)

    return detect


REPEAT_MISCONCEPTIONS = (
    Misconception(
        "mask marks the whole second copy",
        lambda x, s, n: (_second_copy(x, s, n), _mask_from(s, n, x.shape[1], 0, 0)),
        "The mask marks positions whose *next* token is predictable. After the last token of the second copy "
        "comes random noise, so that position's next token is not.",
        fix="Mark repeat_len - 1 positions: mask[b, s + n : s + 2 * n - 1] = True.",
        symptom="Your mask has one True too many in every sequence, at the last position of the second copy.",
    ),
    Misconception(
        "mask one position early",
        lambda x, s, n: (_second_copy(x, s, n), _mask_from(s, n, x.shape[1], -1, -1)),
        "Position first_start + repeat_len - 1 is the last token of the *first* copy; the token after it starts "
        "the second copy, but nothing announces it yet (it could be any token). The first predictable next token "
        "follows position first_start + repeat_len.",
        fix="mask[b, s + n : s + 2 * n - 1] = True.",
        symptom="Your mask starts one position before the reference's, and ends one before it.",
    ),
    Misconception(
        "second copy one position late",
        lambda x, s, n: (_second_copy(x, s, n, shift=1), _right_mask(x, s, n)),
        "The second copy starts right after the first, with no gap.",
        fix="tokens[b, s + n : s + 2 * n] = noise[b, s : s + n].",
        symptom="Your second copy starts one position later than the reference's.",
    ),
    Misconception(
        "copied the second copy over the first",
        lambda x, s, n: (_copy_backwards(x, s, n), _right_mask(x, s, n)),
        "The chunk is what already stands at first_start .. first_start + repeat_len - 1: the model must read it "
        "there, then again right after.",
        fix="Write noise[b, s : s + n] into tokens[b, s + n : s + 2 * n], not the other way round.",
        symptom="Your tokens at the first copy's positions changed, and the positions after it still hold their noise.",
    ),
    Misconception(
        "tokens returned as floats",
        None,
        "Tokens are indices into the vocabulary: whole numbers. An embedding table takes an integer tensor "
        "(nn.Embedding raises on floats), and so does indexing.",
        detect=_right_values_in_another_dtype(0),
        fix="Start from noise.clone(), which keeps noise's integer dtype, or make new tensors with "
        "dtype=noise.dtype; no .float().",
        symptom="Your tokens hold the right values, in a floating dtype.",
    ),
    Misconception(
        "mask of 0/1 numbers, not booleans",
        None,
        "A mask of numbers is not a selection: tensor[mask] with 0/1 integers picks positions 0 and 1 again and "
        "again instead of the marked ones.",
        detect=_right_values_in_another_dtype(1),
        fix="Make the mask a bool tensor: torch.zeros(..., dtype=torch.bool), then set True.",
        symptom="Your induction_mask marks the right positions, with numbers instead of True and False.",
    ),
)


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


def _draw_repeat(generator: torch.Generator) -> list[Case]:
    cases = []
    for _ in range(4):
        batch = _integer(generator, 2, 4)
        first_start, repeat_len, seq = _chunks(generator, batch)
        noise = torch.randint(1, 30, (batch, seq), generator=generator)
        noise[:, 0] = 0
        description = f"{batch} x {seq} tokens, first_start {first_start.tolist()}, repeat_len {repeat_len.tolist()}"
        cases.append(Case((noise, first_start, repeat_len), description=description))
    return cases


def check_repeat_chunk(
    learner: Callable[..., tuple[torch.Tensor, torch.Tensor]], *, verbose: bool = True
) -> CheckResult:
    """Check ``learner(noise (batch, seq), first_start (batch,), repeat_len (batch,)) -> (tokens (batch, seq),
    induction_mask (batch, seq) bool)`` against :func:`~mhsa_helpers.teaching.induction.task.repeat_chunk`.
    Tokens are compared with their dtype: the same values as floats are not tokens."""
    return check_function(
        "repeat_chunk",
        learner,
        _repeat_reference,
        _repeat_cases(),
        REPEAT_MISCONCEPTIONS,
        output_names=("tokens", "induction_mask"),
        shortcuts=("repeat_chunk",),
        draw=_draw_repeat,
        verbose=verbose,
    )


# ---------------------------------------------------------------- ablating a head


def _ablate_reference(merged: torch.Tensor, num_heads: int, head: int) -> torch.Tensor:
    d_head = merged.shape[-1] // num_heads
    out = merged.clone()
    out[..., head * d_head : (head + 1) * d_head] = 0
    return out


def _handed_out_ablate_head(merged, num_heads, head):
    # The code notebook 07 hands out, bug included: an answer that still gives its numbers is told so.
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


def _ablate_num_heads_wide(merged, num_heads, head):
    out = merged.clone()
    out[..., head * num_heads : (head + 1) * num_heads] = 0
    return out


_ABLATE_FIX = (
    "d_head = merged.shape[-1] // num_heads; zero merged[..., head * d_head : (head + 1) * d_head] in a copy "
    "(merged.clone())."
)

ABLATE_MISCONCEPTIONS = (
    Misconception(
        "counted heads from 1",
        _ablate_from_one,
        "Heads are numbered from 0 here, as the scores table numbers them: head 0 owns the first d_head features.",
        fix=_ABLATE_FIX,
        symptom="Your function zeroes the features of the head before the one asked for, and for head 0 nothing "
        "at all.",
    ),
    Misconception(
        "kept only that head",
        _ablate_keep_only,
        "Ablating a head removes *its* contribution and keeps every other head's: the model runs without that "
        "one head.",
        fix=_ABLATE_FIX,
        symptom="In your output the asked head's features are kept and every other feature is 0.",
    ),
    Misconception(
        "started at feature `head`, not `head * d_head`",
        _ablate_d_head_at_head,
        "Head h's features start after the h heads before it, each d_head features wide.",
        fix=_ABLATE_FIX,
        symptom="Your function zeroes d_head features in a row: the right ones for head 0, the wrong ones for any "
        "other head.",
    ),
    Misconception(
        "slices num_heads features wide",
        _ablate_num_heads_wide,
        "num_heads counts the heads; each head is d_head = merged.shape[-1] // num_heads features wide, and the "
        "two are equal only by chance.",
        fix=_ABLATE_FIX,
        symptom="Your function is right when num_heads equals d_head, and zeroes the wrong features otherwise.",
    ),
)


def _ablate_cases() -> list[Case]:
    g = torch.Generator().manual_seed(73)
    return [
        Case((torch.randn(2, 5, 12, generator=g), 4, 2), description="merged (2, 5, 12), 4 heads of 3, head 2"),
        Case((torch.randn(1, 3, 16, generator=g), 4, 0), description="merged (1, 3, 16), 4 heads of 4, head 0"),
        Case((torch.randn(3, 4, 12, generator=g), 3, 1), description="merged (3, 4, 12), 3 heads of 4, head 1"),
    ]


def _draw_ablate(generator: torch.Generator) -> list[Case]:
    cases = []
    for _ in range(4):
        num_heads, d_head = _integer(generator, 2, 5), _integer(generator, 2, 5)
        head = _integer(generator, 0, num_heads - 1)
        merged = random_tensor(generator, _integer(generator, 2, 3), _integer(generator, 1, 4), num_heads * d_head)
        description = f"merged {tuple(merged.shape)}, {num_heads} heads of {d_head}, head {head}"
        cases.append(Case((merged, num_heads, head), description=description))
    return cases


def check_ablate_head(learner: Callable[..., torch.Tensor], *, verbose: bool = True) -> CheckResult:
    """Check ``learner(merged (batch, seq, num_heads * d_head), num_heads, head) -> same shape``: the heads'
    outputs side by side (the input of the output projection) with head ``head`` (0-based) set to zero.
    The code notebook 07 hands out, returned unchanged, is told it is still the original."""
    return check_function(
        "ablate_head",
        learner,
        _ablate_reference,
        _ablate_cases(),
        ABLATE_MISCONCEPTIONS,
        draw=_draw_ablate,
        original=_handed_out_ablate_head,
        verbose=verbose,
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
        symptom="Your number gives every query the same share: does query 1 share its weight among as many keys "
        "as query 31?",
    ),
    Misconception(
        "the share of the middle query",
        lambda: 1 / (PREDICTION_SEQ // 2 + 1),
        "1/(t + 1) at the middle query is not the mean of 1/(t + 1): the early queries, with few keys to share "
        "among, put far more on the previous token, and they pull the mean up.",
        symptom="Your number is the share of a single query.",
    ),
    Misconception(
        "counted query 0",
        lambda: sum(1 / (t + 1) for t in range(PREDICTION_SEQ)) / PREDICTION_SEQ,
        "Query 0 has no previous token: the score averages over the 31 queries t = 1 .. 31 only (section 7), not "
        "over all 32 with query 0's weight on itself.",
        symptom="Your mean has 32 terms, and its first is large.",
    ),
    Misconception(
        "divided by 32 queries, not 31",
        lambda: sum(1 / (t + 1) for t in range(1, PREDICTION_SEQ)) / PREDICTION_SEQ,
        "The score is a mean over the queries that have a previous token, t = 1 .. 31: 31 of them, not the 32 tokens.",
        symptom="Your sum runs over the right queries; look at what it is divided by.",
    ),
    Misconception(
        "forgot that a query sees itself",
        lambda: sum(1 / t for t in range(1, PREDICTION_SEQ)) / (PREDICTION_SEQ - 1),
        "A causal query sees the keys before it *and itself*: query t spreads its weight over t + 1 keys, so "
        "its previous token gets 1/(t + 1).",
        symptom="Your number fits a share of 1/t at query t: how many keys may query t see?",
    ),
    Misconception(
        "an untrained head looks nowhere",
        lambda: 0.0,
        "Softmax rows sum to 1: even with random weights every query gives every key it may see some weight, the "
        "previous one included.",
        symptom="Your number is 0, though every softmax row sums to 1.",
    ),
)


@functools.cache
def _measured_untrained_scores() -> tuple[float, float]:
    """The lowest and highest previous-token score of the 8 heads at step 0 of the shipped run, on the
    held-out batch (read once: the checkpoints do not change)."""
    # The checkpoints import training; checkers load them lazily.
    from ...teaching.induction.checkpoints import load_checkpoints
    from ...teaching.induction.training import evaluation_batch

    checkpoints = load_checkpoints()
    batch = evaluation_batch(checkpoints.config, 128)
    with torch.no_grad():
        _, weights = checkpoints.model_at(0)(batch.tokens)
    scores = torch.stack([previous_token_score(w) for w in weights])
    return float(scores.min()), float(scores.max())


def check_untrained_prediction(learner: Callable[[], float], *, verbose: bool = True) -> CheckResult:
    """Check ``learner() -> float`` (or the number itself): the previous-token score of a head that spreads each
    query's weight evenly over the keys it may see, on :data:`PREDICTION_SEQ`-token sequences. Told too high or
    too low first; the value, with what the 8 heads of the shipped run scored at step 0, once it is right or
    after a few tries."""
    low, high = _measured_untrained_scores()
    explain = (
        f"1/(t + 1), the even share of query t, averaged over the {PREDICTION_SEQ - 1} queries t = 1 .. "
        f"{PREDICTION_SEQ - 1}. Measured at step 0 of the shipped run, the 8 heads scored {low:.3f} to {high:.3f}: "
        "random heads spread almost evenly"
    )
    return check_prediction(
        "untrained_prediction",
        learner,
        _uniform_previous_token_score,
        "a head that spreads its weight evenly, 32 tokens",
        UNTRAINED_MISCONCEPTIONS,
        explain=explain,
        verbose=verbose,
    )
