"""Exercise checkers for notebook 08 (attention at scale): one step of the online softmax, the
whole tiled softmax-attention of one row block, expanding key/value heads for grouped-query
attention, and the size of a KV cache. A wrong answer is told what still differs; the mistake it matches is
named on a repeat or on ``result.hint()``.

Besides its teaching cases, each checker draws four more for every answer: other numbers of queries,
keys and values, tile sizes that do not divide the number of keys, other head counts and model sizes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from ...heads import repeat_kv
from ...kv_cache_memory import kv_cache_bytes
from ...teaching.checking import Case, CheckResult, Misconception, check_function, random_tensor
from ...teaching.order_widget import OrderExercise
from ...teaching.ordering import MisOrder, OrderPuzzle, check_order
from ...tiled_attention import OnlineSoftmaxState, online_softmax_update

__all__ = [
    "ONLINE_ORDER_PUZZLE",
    "check_expand_kv",
    "check_kv_cache_bytes",
    "check_online_attention",
    "check_online_order",
    "check_online_update",
    "online_order_exercise",
]


def _integer(generator: torch.Generator, low: int, high: int) -> int:
    """A random whole number in ``low .. high`` (both included)."""
    return int(torch.randint(low, high + 1, (1,), generator=generator))


# ---------------------------------------------------------------- one online-softmax step


def _reference_update(running_max, normaliser, output, scores, values):
    state = online_softmax_update(OnlineSoftmaxState(running_max, normaliser, output), scores, values)
    return state.running_max, state.normaliser, state.output


def _update_case(generator, seq_q, tile, d_v, old_max, shift, description) -> Case:
    """A state whose running maximum is about ``old_max`` and a tile whose scores are about ``shift``."""
    running_max = torch.full((seq_q, 1), old_max, dtype=torch.float64) + random_tensor(generator, seq_q, 1, scale=0.1)
    normaliser = 1.0 + random_tensor(generator, seq_q, 1, scale=0.1).abs()
    output = random_tensor(generator, seq_q, d_v)
    scores = shift + random_tensor(generator, seq_q, tile)
    values = random_tensor(generator, tile, d_v)
    return Case((running_max, normaliser, output, scores, values), description=description)


def _update_cases() -> list[Case]:
    g = torch.Generator().manual_seed(801)
    return [
        _update_case(g, 3, 4, 2, old_max, shift, description)
        for description, old_max, shift in (
            ("the new tile raises the maximum", 0.5, 3.0),
            ("the new tile leaves the maximum", 4.0, 0.0),
            ("scores near -1000", -1000.0, -998.0),
        )
    ]


def _draw_update(generator: torch.Generator) -> list[Case]:
    cases = []
    for _ in range(4):
        seq_q, tile, d_v = _integer(generator, 2, 5), _integer(generator, 1, 5), _integer(generator, 1, 3)
        # Scores about 0.5 above the old maximum: the maximum grows in most rows, and stays in some.
        old_max = float(random_tensor(generator, 1, scale=3.0))
        description = f"seq_q={seq_q}, tile={tile}, d_v={d_v}, old maximum about {old_max:.1f}"
        cases.append(_update_case(generator, seq_q, tile, d_v, old_max, old_max + 0.5, description))
    return cases


def _new_max(m, s):
    return torch.maximum(m, s.amax(-1, keepdim=True))


def _update_no_rescale(m, norm, o, s, v):
    m2 = _new_max(m, s)
    w = torch.exp(s - m2)
    return m2, norm + w.sum(-1, keepdim=True), o + w @ v


def _update_output_only(m, norm, o, s, v):
    m2 = _new_max(m, s)
    w, r = torch.exp(s - m2), torch.exp(m - m2)
    return m2, norm + w.sum(-1, keepdim=True), o * r + w @ v


def _update_normaliser_only(m, norm, o, s, v):
    m2 = _new_max(m, s)
    w, r = torch.exp(s - m2), torch.exp(m - m2)
    return m2, norm * r + w.sum(-1, keepdim=True), o + w @ v


def _update_inverted(m, norm, o, s, v):
    m2 = _new_max(m, s)
    w, r = torch.exp(s - m2), torch.exp(m2 - m)
    return m2, norm * r + w.sum(-1, keepdim=True), o * r + w @ v


def _update_against_old_max(m, norm, o, s, v):
    w = torch.exp(s - m)
    return _new_max(m, s), norm + w.sum(-1, keepdim=True), o + w @ v


ONLINE_UPDATE_MISCONCEPTIONS = (
    Misconception(
        "the running sums are not rescaled when the maximum grows",
        _update_no_rescale,
        "The old normaliser and output count each earlier key as exp(score - old max), the new tile as "
        "exp(score - new max): once the maximum grows they are in different units and cannot be added.",
        fix="Multiply both running sums by rescale = torch.exp(running_max - new_max) before adding the tile.",
        symptom="new_max is right; new_normaliser and new_output differ in the rows whose maximum grew, and are "
        "right where it stayed.",
    ),
    Misconception(
        "the output is rescaled but not the normaliser",
        _update_output_only,
        "output / normaliser is a weighted mean only while both sums count the earlier keys in the same units; "
        "yours brings only one of them to the new maximum.",
        fix="normaliser * torch.exp(running_max - new_max) + weights.sum(-1, keepdim=True).",
        symptom="new_max and new_output are right; new_normaliser differs in the rows whose maximum grew.",
    ),
    Misconception(
        "the normaliser is rescaled but not the output",
        _update_normaliser_only,
        "The earlier values keep their old, too large weights: the output must shrink with the normaliser when "
        "the maximum grows.",
        fix="output * torch.exp(running_max - new_max) + weights @ values.",
        symptom="new_max and new_normaliser are right; new_output differs in the rows whose maximum grew.",
    ),
    Misconception(
        "the rescale factor is upside down",
        _update_inverted,
        "When the maximum grows, the earlier terms must shrink: the factor is exp(old max - new max), at most 1.",
        fix="rescale = torch.exp(running_max - new_max), not torch.exp(new_max - running_max).",
        symptom="new_max is right; the other two differ only in the rows whose maximum grew, and there your "
        "new_normaliser comes out too large.",
    ),
    Misconception(
        "the sums are measured against the old maximum",
        _update_against_old_max,
        "The running sums must be measured against the maximum you return, since the next tile rescales them "
        "from it. Yours stay measured against the old maximum: too large by exp(new max - old max), and a large "
        "jump of the maximum overflows.",
        fix="weights = torch.exp(scores - new_max), and rescale the old sums by torch.exp(running_max - new_max).",
        symptom="new_max is right; where the maximum grew, your new_normaliser and new_output are exactly "
        "exp(new_max - old max) times the reference's.",
    ),
)


def check_online_update(learner: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    """Exercise: ``learner(running_max, normaliser, output, scores, values)`` folds one tile of keys into
    the online softmax and returns ``(new_max, new_normaliser, new_output)``.

    Shapes: ``running_max``, ``normaliser`` ``(seq_q, 1)``; ``output`` ``(seq_q, d_v)`` (unnormalised);
    ``scores`` ``(seq_q, tile)``; ``values`` ``(tile, d_v)``."""
    return check_function(
        "online_update",
        learner,
        _reference_update,
        _update_cases(),
        ONLINE_UPDATE_MISCONCEPTIONS,
        output_names=("new_max", "new_normaliser", "new_output"),
        shortcuts=("online_softmax_update",),
        draw=_draw_update,
        verbose=verbose,
    )


# ---------------------------------------------------------------- online attention of one block of queries


def _reference_online_attention(scores: torch.Tensor, values: torch.Tensor, tile_size: int) -> torch.Tensor:
    return torch.softmax(scores, dim=-1) @ values


def _online(scores, values, tile_size, *, start_max=-math.inf, rescale=True, normalise=True):
    m = torch.full((scores.shape[0], 1), start_max, dtype=scores.dtype)
    norm = torch.zeros(scores.shape[0], 1, dtype=scores.dtype)
    out = torch.zeros(scores.shape[0], values.shape[1], dtype=scores.dtype)
    for start in range(0, scores.shape[1], tile_size):
        s, v = scores[:, start : start + tile_size], values[start : start + tile_size]
        m2 = torch.maximum(m, s.amax(-1, keepdim=True))
        r = torch.exp(m - m2) if rescale else torch.ones_like(m)
        w = torch.exp(s - m2)
        norm, out, m = norm * r + w.sum(-1, keepdim=True), out * r + w @ v, m2
    return out / norm if normalise else out


def _without_max(scores, values, tile_size):
    # No maximum at all: exp of the raw scores, summed tile by tile.
    weights = torch.exp(scores)
    return (weights @ values) / weights.sum(-1, keepdim=True)


def _overflows_on_large_scores(run: Callable[..., Any]) -> bool:
    """True when the answer gives NaN or inf where every score is near +1000 (a running maximum, started at 0 or
    at -inf, takes these in its stride; exp of the raw scores overflows)."""
    g = torch.Generator().manual_seed(804)
    scores, values = random_tensor(g, 3, 6) + 1000.0, random_tensor(g, 6, 2)
    return not bool(torch.isfinite(torch.as_tensor(run(scores, values, 2))).all())


def _softmax_per_tile(scores, values, tile_size):
    starts = range(0, scores.shape[1], tile_size)
    per_tile = [torch.softmax(scores[:, a : a + tile_size], dim=-1) @ values[a : a + tile_size] for a in starts]
    return sum(per_tile) / len(per_tile)


ONLINE_ATTENTION_MISCONCEPTIONS = (
    Misconception(
        "the running maximum starts at 0 instead of -inf",
        lambda s, v, t: _online(s, v, t, start_max=0.0),
        "The running maximum stands for the largest score seen so far; starting it at 0 claims a score of 0 was "
        "seen before any key. Scores far below 0 then all underflow, exp(-1000 - 0) = 0 for every key, and the "
        "result is 0 / 0.",
        fix="Start the running maximum at -inf: torch.full((seq_q, 1), float('-inf'), dtype=scores.dtype).",
        symptom="Your result is right on ordinary scores and on scores near +1000, and NaN where every score of a "
        "row is near -1000.",
        # exp of the raw scores gives the same numbers on the cases; scores near +1000 tell the two apart.
        detect=lambda run: not _overflows_on_large_scores(run),
    ),
    Misconception(
        "did not subtract the row's max",
        _without_max,
        "exp of a raw score underflows to 0 below about -745 and overflows to inf above about 709: the online "
        "softmax measures every score against the largest seen so far, so that the largest weight of a row is "
        "exp(0) = 1 and nothing overflows or vanishes.",
        fix="Carry a running maximum that starts at -inf, take exp(scores - new_max), and rescale the running sums "
        "by exp(old max - new max) when it grows (exercise 1).",
        symptom="Your result is right on ordinary scores, and NaN both where every score of a row is near -1000 "
        "and where every score is near +1000.",
        detect=_overflows_on_large_scores,
    ),
    Misconception(
        "the running sums are not rescaled when the maximum grows",
        lambda s, v, t: _online(s, v, t, rescale=False),
        "Each tile's weights are measured against the maximum at the time: when the maximum grows, the sums "
        "carried from the earlier tiles must be brought to the new one.",
        fix="Before adding a tile, multiply the normaliser and the output by exp(old max - new max), as in exercise 1.",
        symptom="Your result is right in the rows whose largest score lies in the first tile, and wrong in the others.",
    ),
    Misconception(
        "a softmax per tile, then averaged",
        _softmax_per_tile,
        "A softmax per tile normalises each tile on its own: a key in a small tile then weighs more than one in "
        "a large tile. The softmax of the whole row needs one maximum and one normaliser carried across the "
        "tiles.",
        fix="Keep running_max, normaliser and output across the tiles, update them with each tile (exercise 1), "
        "and divide once at the end.",
        symptom="Your result is right when one tile holds every key, and wrong as soon as there are two.",
    ),
    Misconception(
        "the output is not divided by the normaliser at the end",
        lambda s, v, t: _online(s, v, t, normalise=False),
        "The running output is a sum of exp(score - max) * value, whose weights add up to the normaliser, not to 1.",
        fix="Return output / normaliser once every tile is read.",
        symptom="With every value equal to 1 your output is above 1, though a weighted mean of ones is 1.",
    ),
)


def _online_attention_cases() -> list[Case]:
    g = torch.Generator().manual_seed(802)
    far_below = random_tensor(g, 3, 7) - 1000.0
    return [
        Case((random_tensor(g, 4, 10, scale=3.0), random_tensor(g, 10, 3), 3), description="seq_k=10, tile_size=3"),
        Case((random_tensor(g, 2, 8, scale=3.0), random_tensor(g, 8, 2), 8), description="one tile of 8"),
        Case((random_tensor(g, 3, 5, scale=3.0), random_tensor(g, 5, 2), 1), description="tile_size=1"),
        Case((far_below, random_tensor(g, 7, 2), 2), description="scores near -1000"),
    ]


def _draw_online_attention(generator: torch.Generator) -> list[Case]:
    cases = []
    for _ in range(4):
        seq_q, seq_k, d_v = _integer(generator, 2, 4), _integer(generator, 5, 13), _integer(generator, 1, 3)
        tile_size = _integer(generator, 2, seq_k - 1)
        while seq_k % tile_size == 0:  # a shorter last tile (seq_k - 1 never divides seq_k)
            tile_size += 1
        scores, values = random_tensor(generator, seq_q, seq_k, scale=3.0), random_tensor(generator, seq_k, d_v)
        description = f"seq_q={seq_q}, seq_k={seq_k}, d_v={d_v}, tile_size={tile_size}"
        cases.append(Case((scores, values, tile_size), description=description))
    return cases


def check_online_attention(learner: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    """Exercise: ``learner(scores, values, tile_size)`` returns ``softmax(scores) @ values`` computed
    tile by tile with the online softmax: ``scores (seq_q, seq_k)``, ``values (seq_k, d_v)`` ->
    ``(seq_q, d_v)``, reading ``tile_size`` keys at a time (the last tile may be shorter). A call of a
    softmax over the whole row is noted: it skips what the exercise is about."""
    return check_function(
        "online_attention",
        learner,
        _reference_online_attention,
        _online_attention_cases(),
        ONLINE_ATTENTION_MISCONCEPTIONS,
        shortcuts=("softmax", "online_softmax", "tiled_attention", "scaled_dot_product_attention"),
        draw=_draw_online_attention,
        verbose=verbose,
    )


# ---------------------------------------------------------------- expanding key/value heads

_EXPAND_FIX = "x.repeat_interleave(groups, dim=1): each head's copies side by side, along the heads axis."

EXPAND_KV_MISCONCEPTIONS = (
    Misconception(
        "heads tiled with repeat instead of repeat_interleave",
        lambda x, k: x.repeat(1, k, 1, 1),
        "Query heads come in groups of `groups`, and each group shares one key/value head, so the copies of a "
        "head must sit side by side. Tiling the heads pairs query heads with the wrong key/value head.",
        fix=_EXPAND_FIX + " x.repeat(1, groups, 1, 1) tiles them instead.",
        symptom="Your output has the right shape, but its heads come in the order 0, 1, ..., 0, 1, ...: query heads "
        "0 and 1 read different key/value heads.",
    ),
    Misconception(
        "repeated along the wrong axis",
        lambda x, k: x.repeat_interleave(k, dim=2),
        "The copies must make more *heads*; along the sequence axis they make more positions instead.",
        fix=_EXPAND_FIX,
        symptom="Your output has the input's number of heads; another axis grew.",
    ),
    Misconception(
        "repeated along the wrong axis",
        lambda x, k: x.repeat_interleave(k, dim=0),
        "The copies must make more *heads*; along the batch axis they make more sequences instead.",
        fix=_EXPAND_FIX,
        symptom="Your output has the input's number of heads; another axis grew.",
    ),
)


def _draw_expand_kv(generator: torch.Generator) -> list[Case]:
    cases = []
    for _ in range(4):
        # (batch, kv_heads, seq, d_head)
        shape = tuple(_integer(generator, low, high) for low, high in ((2, 3), (1, 3), (1, 4), (1, 3)))
        groups = _integer(generator, 2, 4)
        cases.append(Case((random_tensor(generator, *shape), groups), description=f"x {shape}, groups={groups}"))
    return cases


def check_expand_kv(learner: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    """Exercise: ``learner(x, groups)`` repeats each key/value head ``groups`` times in a row:
    ``(batch, kv_heads, seq, d_head)`` -> ``(batch, kv_heads * groups, seq, d_head)``, so that query
    head ``h`` reads key/value head ``h // groups``."""
    g = torch.Generator().manual_seed(803)
    cases = [
        Case((random_tensor(g, 2, 2, 5, 3), 4), description="x (2, 2, 5, 3), groups=4"),
        Case((random_tensor(g, 1, 4, 3, 2), 2), description="x (1, 4, 3, 2), groups=2"),
        Case((random_tensor(g, 1, 1, 6, 4), 8), description="one key/value head (multi-query), groups=8"),
    ]
    square = [Case((random_tensor(g, 2, 2, 2, 2), 2), description="every axis 2")]
    return check_function(
        "expand_kv",
        learner,
        lambda x, k: repeat_kv(x, k),
        cases,
        EXPAND_KV_MISCONCEPTIONS,
        square_cases=square,
        shortcuts=("repeat_kv",),
        draw=_draw_expand_kv,
        verbose=verbose,
    )


# ---------------------------------------------------------------- the size of a KV cache


def _reference_bytes(layers, heads, kv_heads, head_dim, tokens, batch, element):
    return kv_cache_bytes(
        num_layers=layers,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        tokens=tokens,
        batch=batch,
        bytes_per_element=element,
    )


_BYTES_FIX = "2 * num_layers * num_kv_heads * head_dim * tokens * batch * bytes_per_element."

KV_CACHE_BYTES_MISCONCEPTIONS = (
    Misconception(
        "forgot the factor 2 (keys and values)",
        lambda n, h, kv, d, t, b, e: n * kv * d * t * b * e,
        "Every layer caches two tensors for each token and key/value head: the keys *and* the values.",
        fix=_BYTES_FIX,
        symptom="Your number is exactly half the reference's.",
    ),
    Misconception(
        "counted the query heads instead of the key/value heads",
        lambda n, h, kv, d, t, b, e: 2 * n * h * d * t * b * e,
        "Only keys and values are cached, one pair per key/value head: with grouped-query attention there are "
        "fewer of them than query heads, and the queries are never cached.",
        fix="Use num_kv_heads where your formula has num_heads: " + _BYTES_FIX,
        symptom="Your number is right for GPT-2 small, 4 times the reference's for Llama-3.1-8B and 8 times "
        "for Llama-2-70B.",
    ),
    Misconception(
        "counted bits, not bytes",
        lambda n, h, kv, d, t, b, e: 2 * n * kv * d * t * b * e * 8,
        "bytes_per_element already counts bytes, not bits: there is nothing to convert.",
        fix="Drop the factor 8: " + _BYTES_FIX,
        symptom="Your number is exactly 8 times the reference's.",
    ),
    Misconception(
        "left out the batch",
        lambda n, h, kv, d, t, b, e: 2 * n * kv * d * t * e,
        "Each sequence of the batch has its own keys and values, so its own cache.",
        fix=_BYTES_FIX,
        symptom="Your number is right for Llama-3.1-8B, a quarter of the reference's for GPT-2 small and half "
        "of it for Llama-2-70B.",
    ),
    Misconception(
        "left out the layers",
        lambda n, h, kv, d, t, b, e: 2 * kv * d * t * b * e,
        "Every layer computes its own keys and values from its own input, and caches them.",
        fix=_BYTES_FIX,
        symptom="Your number is 32 times too small for Llama-3.1-8B, 12 times for GPT-2 small and 80 times for "
        "Llama-2-70B.",
    ),
)


def _draw_bytes(generator: torch.Generator) -> list[Case]:
    cases = []
    for _ in range(4):
        layers, kv_heads, groups = _integer(generator, 2, 6), _integer(generator, 1, 4), _integer(generator, 1, 4)
        head_dim, tokens, batch = _integer(generator, 2, 160), _integer(generator, 1, 5000), _integer(generator, 1, 4)
        element = (1, 2, 4)[_integer(generator, 0, 2)]
        description = (
            f"{layers} layers, {kv_heads * groups} heads, {kv_heads} key/value heads of {head_dim}, {tokens} tokens, "
            f"batch {batch}, {element} bytes per number"
        )
        cases.append(
            Case((layers, kv_heads * groups, kv_heads, head_dim, tokens, batch, element), description=description)
        )
    return cases


def check_kv_cache_bytes(learner: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    """Exercise: ``learner(num_layers, num_heads, num_kv_heads, head_dim, tokens, batch, bytes_per_element)``
    returns the bytes a full KV cache takes (a whole number, compared exactly: a numpy integer, or a float
    like ``2.0 * ...``, counts as well)."""
    cases = [
        # 131072 tokens: one token too many is off by a relative 8e-6, so bytes are compared exactly.
        Case((32, 32, 8, 128, 131072, 1, 2), description="Llama-3.1-8B, 131072 tokens (its full context), bfloat16"),
        Case((12, 12, 12, 64, 1024, 4, 4), description="GPT-2 small, 1024 tokens, batch 4, float32"),
        Case((80, 64, 8, 128, 4096, 2, 2), description="Llama-2-70B, 4096 tokens, batch 2, float16"),
    ]
    return check_function(
        "kv_cache_bytes",
        learner,
        _reference_bytes,
        cases,
        KV_CACHE_BYTES_MISCONCEPTIONS,
        shortcuts=("kv_cache_bytes",),
        draw=_draw_bytes,
        verbose=verbose,
    )


# ---------------------------------------------------------------- the online-softmax update, in order


def _online_order_inputs(generator: torch.Generator) -> dict[str, object]:
    """Three queries' scores over 9 keys that grow from tile to tile (so the running maximum moves), read in
    tiles of 3; values of size 2; float64."""
    return {
        "all_scores": random_tensor(generator, 3, 9) + torch.arange(9, dtype=torch.float64) * 0.5,
        "all_values": random_tensor(generator, 9, 2),
        "tile_size": 3,
    }


#: The loop of section 2 over tiles of keys; the learner orders the six lines of its body.
ONLINE_ORDER_PUZZLE = OrderPuzzle(
    exercise="online_order",
    lines={
        "A": "normaliser = normaliser * rescale + weights.sum(dim=-1, keepdim=True)",
        "B": "running_max = new_max",
        "C": "new_max = torch.maximum(running_max, scores.amax(dim=-1, keepdim=True))",
        "D": "weights = torch.exp(scores - new_max)",
        "E": "output = output * rescale + weights @ values",
        "F": "rescale = torch.exp(running_max - new_max)",
    },
    solution=("C", "F", "D", "A", "E", "B"),
    inputs=_online_order_inputs,
    result="result",
    template="""\
running_max = torch.full((all_scores.shape[0], 1), -math.inf, dtype=torch.float64)
normaliser = torch.zeros(all_scores.shape[0], 1, dtype=torch.float64)
output = torch.zeros(all_scores.shape[0], all_values.shape[1], dtype=torch.float64)
for start in range(0, all_scores.shape[1], tile_size):
    scores, values = all_scores[:, start : start + tile_size], all_values[start : start + tile_size]
    {lines}
result = output / normaliser
""",
    misorders=(
        MisOrder(
            "the maximum moves before the rescale",
            first="F",
            then="B",
            hint="The rescale re-measures the sums so far, counted against the old maximum, against the new one: "
            "exp(old max - new max). Once `running_max` already holds the new maximum, that factor is exp(0) = 1 "
            "and nothing is rescaled.",
            fix="Compute `rescale` (line F) while `running_max` still holds the old maximum, and move the maximum "
            "on (line B) after it.",
            symptom="The result is right while the maximum stays where the first tile put it.",
        ),
    ),
)


def check_online_order(answer: object, *, verbose: bool = True) -> CheckResult:
    """Exercise: the learner's order of :data:`ONLINE_ORDER_PUZZLE`'s lines, the body of the loop over tiles
    (a list of labels, first line first), run on three drawn inputs and compared with ``softmax(scores) @ values``
    computed tile by tile in the solution's order (:func:`~mhsa_helpers.teaching.ordering.check_order`)."""
    return check_order(ONLINE_ORDER_PUZZLE, answer, verbose=verbose)


def online_order_exercise() -> OrderExercise:
    """The update's lines to arrange with the mouse or the keyboard, checked by :func:`check_online_order`."""
    return OrderExercise(ONLINE_ORDER_PUZZLE, check_online_order)
