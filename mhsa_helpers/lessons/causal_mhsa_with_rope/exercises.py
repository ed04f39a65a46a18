"""Checkers for notebook 06: decoding with a cache, and the learner's own causal module with RoPE.

Cached-decoding mistakes hide on the first step (nothing is cached yet: positions
start at 0 either way and the mask is an ordinary triangle) and some hide when
one token is decoded at a time. So every cached case here has something in the
cache, and several add more than one new token at once. The module checker and its
diagnosis are :mod:`mhsa_helpers.teaching.modules`'s, shared with notebooks 07 and 11.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

import torch

from ... import RotaryEmbedding, causal_mask, merge_heads, scaled_dot_product_attention, split_heads
from ...teaching.checking import Case, CheckResult, Misconception, check_function, random_tensor
from ...teaching.modules import CAUSAL_CONTRACT, CAUSAL_SETTINGS, CacheWithLengthAndAppend, check_module
from ...teaching.order_widget import OrderExercise
from ...teaching.ordering import MisOrder, OrderPuzzle, check_order
from ...teaching.predictions import check_prediction

__all__ = [
    "DECODING_PUZZLE",
    "check_attend_with_cache",
    "check_decoding_order",
    "check_kv_cache",
    "check_mask_prediction",
    "check_my_causal_self_attention",
    "decoding_order_exercise",
    "handed_out_attend_with_cache",
]


# ------------------------------------------------ masks for new tokens


def _mask_top_left(num_new: int, total: int) -> torch.Tensor:
    return torch.ones(num_new, total, dtype=torch.bool).tril()


def _mask_hides_self(num_new: int, total: int) -> torch.Tensor:
    return torch.ones(num_new, total, dtype=torch.bool).tril(diagonal=total - num_new - 1)


def _mask_one_ahead(num_new: int, total: int) -> torch.Tensor:
    return torch.ones(num_new, total, dtype=torch.bool).tril(diagonal=total - num_new + 1)


# ----------------------------------------------- one decoding step with a cache


def _step(
    q_new,
    k_new,
    v_new,
    cached_k,
    cached_v,
    rope,
    *,
    positions="continue",
    mask="bottom_right",
    rotate_cache=False,
    use_cache=True,
):
    past, new = cached_k.shape[-2], q_new.shape[-2]
    start = past if positions == "continue" else 0
    pos = torch.arange(start, start + new)
    q, k = rope(q_new, pos), rope(k_new, pos)
    if rotate_cache:
        # The cached keys were stored rotated; rotating everything again turns them twice.
        keys = rope(torch.cat((cached_k, k_new), dim=-2), torch.arange(past + new))
    else:
        keys = torch.cat((cached_k, k), dim=-2)
    values = torch.cat((cached_v, v_new), dim=-2)
    if not use_cache:
        keys, values = k, v_new
    total = keys.shape[-2]
    masks = {
        "bottom_right": causal_mask(new, total),
        "top_left": _mask_top_left(new, total),
        "hides_self": _mask_hides_self(new, total),
        "one_ahead": _mask_one_ahead(new, total),
        "none": None,
    }
    return scaled_dot_product_attention(q, keys, values, masks[mask])


def _step_reference(q_new, k_new, v_new, cached_k, cached_v, rope):
    return _step(q_new, k_new, v_new, cached_k, cached_v, rope)


def handed_out_attend_with_cache(q_new, k_new, v_new, cached_k, cached_v, rope):
    """The function exercise 2 hands out, with its bug: ``(batch, heads, new, d_head)``."""
    past, new = cached_k.shape[-2], q_new.shape[-2]
    positions = torch.arange(new)
    q, k = rope(q_new, positions), rope(k_new, positions)
    keys, values = torch.cat((cached_k, k), dim=-2), torch.cat((cached_v, v_new), dim=-2)
    return scaled_dot_product_attention(q, keys, values, causal_mask(new, past + new))


_MASK_LOOK = "Look at the mask of the new tokens."

STEP_MISCONCEPTIONS = (
    Misconception(
        "RoPE positions restart at 0",
        lambda *a: _step(*a, positions="restart"),
        "The new tokens continue the sequence: the cached keys were rotated at 0 .. past - 1, so the new tokens sit "
        "at past, past + 1, ...",
        fix="positions = torch.arange(past, past + new), past = cached_k.shape[-2].",
        symptom="The new tokens' scores against the cached keys are those of other distances than the real ones. "
        "Look at the positions the new tokens are rotated at.",
    ),
    Misconception(
        "the query cannot see itself",
        lambda *a: _step(*a, mask="hides_self"),
        "Key j is visible to new token i when j <= past + i: a token sees itself.",
        fix="causal_mask(new, past + new), i.e. tril(diagonal=past).",
        symptom="Each new token puts no weight on its own key. " + _MASK_LOOK,
    ),
    Misconception(
        "cache mask off by one: a token sees the next one",
        lambda *a: _step(*a, mask="one_ahead"),
        "New token i must not see the token right after it.",
        fix="tril(diagonal=past), not past + 1.",
        symptom="A new token puts weight on the key right after it. " + _MASK_LOOK,
    ),
    Misconception(
        "mask aligned to the first key",
        lambda *a: _step(*a, mask="top_left"),
        "With past cached keys the queries are the *last* rows: a plain tril() on the (new, past + new) rectangle "
        "(or is_causal=True in F.scaled_dot_product_attention) hides most of the cache.",
        fix="causal_mask(new, past + new) or tril(diagonal=past).",
        symptom="The new tokens put no weight on most of the cached keys. " + _MASK_LOOK,
    ),
    Misconception(
        "no mask among the new tokens",
        lambda *a: _step(*a, mask="none"),
        "When several tokens arrive at once, each may only see the ones before it (and itself).",
        fix="Apply causal_mask(new, past + new).",
        symptom="With one new token your output is right; with several, an earlier one sees the later ones. "
        + _MASK_LOOK,
    ),
    Misconception(
        "cached keys rotated again",
        lambda *a: _step(*a, rotate_cache=True),
        "The cache stores keys *after* RoPE: rotating the whole cache again turns the old keys twice.",
        fix="Rotate only the new keys (at their positions) and append them.",
        symptom="The scores against the cached keys differ; those among the new tokens are right. Look at what is "
        "rotated.",
    ),
    Misconception(
        "cache ignored",
        lambda *a: _step(*a, use_cache=False),
        "The new tokens attend over the cached keys and values *and* their own.",
        fix="torch.cat((cached_k, k), dim=-2) and the same for the values.",
        symptom="Your output does not depend on the cache at all.",
    ),
)


def _step_cases() -> list[Case]:
    g = torch.Generator().manual_seed(6)

    def case(batch, heads, past, new, d_head, base):
        rope = RotaryEmbedding(d_head, 64, base)
        shape = (batch, heads)
        cached_k = rope(torch.randn(*shape, past, d_head, generator=g))  # stored after RoPE, positions 0..past-1
        cached_v = torch.randn(*shape, past, d_head, generator=g)
        q_new, k_new, v_new = (torch.randn(*shape, new, d_head, generator=g) for _ in range(3))
        return Case(
            (q_new, k_new, v_new, cached_k, cached_v, rope),
            description=f"{new} new token(s) after {past} cached, heads={heads}, d_head={d_head}, base={base:g}",
        )

    # The last case reaches position 16: 17 positions, longer than a fixed (16, 16) mask or angle table.
    return [case(1, 2, 4, 1, 8, 100.0), case(2, 2, 3, 2, 8, 10000.0), case(1, 3, 14, 3, 6, 100.0)]


def _draw_step(g: torch.Generator) -> list[Case]:
    cases = []
    for batch, heads in ((2, 1), (1, 3), (3, 2), (1, 1)):
        past, new = int(torch.randint(1, 12, (1,), generator=g)), int(torch.randint(1, 5, (1,), generator=g))
        d_head = 2 * int(torch.randint(2, 5, (1,), generator=g))
        rope = RotaryEmbedding(d_head, 32, 100.0)
        shape = (batch, heads)
        cached_k = rope(random_tensor(g, *shape, past, d_head))
        cached_v = random_tensor(g, *shape, past, d_head)
        q_new, k_new, v_new = (random_tensor(g, *shape, new, d_head) for _ in range(3))
        text = f"{new} new token(s) after {past} cached, batch={batch}, heads={heads}, d_head={d_head}, base 100"
        cases.append(Case((q_new, k_new, v_new, cached_k, cached_v, rope), description=text))
    return cases


def check_attend_with_cache(learner: Callable[..., torch.Tensor], *, verbose: bool = True) -> CheckResult:
    """Debugging exercise: one cached decoding step (the notebook hands out :func:`handed_out_attend_with_cache`).

    ``learner(q_new, k_new, v_new, cached_k, cached_v, rope)``: ``q_new, k_new, v_new``
    ``(batch, heads, new, d_head)`` before RoPE; ``cached_k, cached_v`` ``(batch, heads, past, d_head)``,
    keys already rotated at positions ``0 .. past-1``; ``rope`` a :class:`RotaryEmbedding` called as
    ``rope(x, positions)``. Returns the new tokens' attention output ``(batch, heads, new, d_head)``.
    """
    return check_function(
        "attend_with_cache",
        learner,
        _step_reference,
        _step_cases(),
        STEP_MISCONCEPTIONS,
        draw=_draw_step,
        original=handed_out_attend_with_cache,
        verbose=verbose,
    )


# ------------------------------------------------- predict: what the new tokens see

#: The prediction exercise: tokens already in the cache, and new tokens decoded in one call.
PREDICTION_PAST, PREDICTION_NEW = 4, 3


def check_mask_prediction(answer: object, *, verbose: bool = True) -> CheckResult:
    """Check the predicted number of ``True`` entries of the mask when 3 new tokens are decoded in one
    call after 4 cached ones: new token ``i`` sits at position ``4 + i`` and sees keys ``0 .. 4 + i``."""
    past, new = PREDICTION_PAST, PREDICTION_NEW
    total = past + new
    mistakes = (
        Misconception(
            "mask aligned to the first key",
            lambda: int(_mask_top_left(new, total).sum()),
            "A plain triangle, 1 + 2 + 3, is the mask of 3 tokens with no cache. The new tokens are positions 4, 5, 6, "
            "and each sees all 4 cached keys as well.",
            symptom="Where do the 3 new tokens sit in the sequence?",
        ),
        Misconception(
            "no mask among the new tokens",
            lambda: new * total,
            "Each new token sees the cache and the new tokens up to itself, not the ones after it: the first new "
            "token sees 5 keys, not 7.",
            symptom="May the first new token see the two after it?",
        ),
        Misconception(
            "the query cannot see itself",
            lambda: int(_mask_hides_self(new, total).sum()),
            "A token attends to itself too: new token i (at position 4 + i) sees keys 0 .. 4 + i, 5 + i of them.",
            symptom="Does a token see its own key?",
        ),
        Misconception(
            "the whole (7, 7) triangle",
            lambda: int(causal_mask(total).sum()),
            "Only the 3 new tokens are queries in this call: the mask has 3 rows (one per new token) and 7 columns "
            "(4 cached keys + 3 new).",
            symptom="How many rows does the mask of this call have?",
        ),
    )
    return check_prediction(
        "mask_prediction",
        answer,
        lambda: int(causal_mask(new, total).sum()),
        f"{new} new tokens after {past} cached",
        mistakes,
        explain="the new tokens sit at positions 4, 5 and 6 and see 5, 6 and 7 keys",
        verbose=verbose,
    )


# ------------------------------------------------- the learner's own causal module


def check_my_causal_self_attention(learner, *, verbose: bool = True) -> CheckResult:
    """Check the learner's class ``MyCausalSelfAttention(d_model, num_heads, *, d_in=None, bias=True,
    rope_base=10000.0)`` (:data:`~mhsa_helpers.teaching.modules.CAUSAL_CONTRACT`).

    Built at the five sizes of :data:`~mhsa_helpers.teaching.modules.CAUSAL_SETTINGS` (1 to 4 heads, d_in !=
    d_model, no biases, base 100, a grouped model's weights) and two drawn for the answer (one in float64), with a
    package module's weights copied in, it must behave as a function of its input and give the package's outputs
    on full passes of 1 to 17 tokens, with need_weights=True, on chunks of uneven size through one cache, token
    by token and after another sequence; then a backward pass must reach every weight and bias.
    A wrong module is diagnosed by isolating each step (:func:`~mhsa_helpers.teaching.modules.diagnose`)."""
    return check_module(
        "my_causal_self_attention",
        learner,
        CAUSAL_CONTRACT,
        CAUSAL_SETTINGS,
        seed=6060,
        shortcuts=("multi_head_self_attention", "MultiHeadSelfAttention", "MultiheadAttention"),
        verbose=verbose,
    )


# ------------------------------------------------ the learner's own cache


def _held(chunks, *, new_first=False):
    """All the chunks so far along the sequence axis, the newest last unless ``new_first``."""
    held = chunks[0]
    for chunk in chunks[1:]:
        held = torch.cat((chunk, held) if new_first else (held, chunk), dim=-2)
    return held


def _use_cache(chunks, *, length="tokens", returned="all", new_first=False):
    """The known mistakes of a cache fed each ``(k, v)`` of ``chunks`` in turn, in the form :func:`check_kv_cache`
    reads a cache: its ``length`` before and after each append, and the keys and values the last append returned.
    ``length`` counting the appends or holding the last chunk's size, only the new chunk returned, the new tokens put
    first."""
    lengths, keys, values = [0], [], []
    for k, v in chunks:
        keys.append(k)
        values.append(v)
        counts = {"tokens": sum(t.shape[-2] for t in keys), "appends": len(keys), "last": k.shape[-2]}
        lengths.append(counts[length])
    if returned == "new":
        return torch.tensor(lengths), keys[-1], values[-1]
    return torch.tensor(lengths), _held(keys, new_first=new_first), _held(values, new_first=new_first)


def _cache_driver(learner):
    """``learner``, a class, driven as notebook 06's module drives a cache (``length``, then ``append``)."""

    def drive(chunks):
        cache = learner()
        lengths = [cache.length]
        for k, v in chunks:
            keys, values = cache.append(k, v)
            lengths.append(cache.length)
        return torch.tensor(lengths), keys, values

    drive.__wrapped__ = learner  # type: ignore[attr-defined]  # read by the checker to find the learner's own code
    return drive


CACHE_MISCONCEPTIONS = (
    Misconception(
        "length counts the appends, not the tokens",
        lambda chunks: _use_cache(chunks, length="appends"),
        "One append may bring several tokens (a prompt, a chunk): the length is the number of tokens held, the "
        "size of the held keys along their sequence axis.",
        fix="self.length = k.shape[-2] after the concatenation.",
        symptom="Your length is right after appends of one token and wrong after a chunk of several. Look at how "
        "the length grows.",
    ),
    Misconception(
        "length is the size of the last chunk",
        lambda chunks: _use_cache(chunks, length="last"),
        "The length counts every token held so far, not only those of the latest append.",
        fix="Read the length from the keys after the concatenation: k.shape[-2].",
        symptom="Your length after each append is the size of that append alone. Look at where the length is read.",
    ),
    Misconception(
        "only the new keys and values returned",
        lambda chunks: _use_cache(chunks, returned="new"),
        "append returns every key and value held so far: the new tokens attend over the past ones and their own.",
        fix="Concatenate first, keep the result, and return it.",
        symptom="What append returns has the size of the latest chunk, not of everything held. Look at what it "
        "returns.",
    ),
    Misconception(
        "the new tokens put first",
        lambda chunks: _use_cache(chunks, new_first=True),
        "The keys are held in the order of their positions: the past first, the new tokens after it (a causal mask "
        "counts on it).",
        fix="torch.cat((held, k), dim=-2), the held keys first.",
        symptom="The right keys, in the wrong order. Look at the order in the concatenation.",
    ),
)


def _cache_cases() -> list[Case]:
    g = torch.Generator().manual_seed(66)

    def case(batch, heads, sizes, d_head):
        chunks = [
            (torch.randn(batch, heads, n, d_head, generator=g), torch.randn(batch, heads, n, d_head, generator=g))
            for n in sizes
        ]
        text = f"appends of {', '.join(map(str, sizes))} token(s), batch={batch}, heads={heads}, d_head={d_head}"
        return Case((chunks,), description=text)

    # A chunk of several tokens after a first one, and sizes that differ from the batch, heads and d_head.
    return [case(1, 2, (1,), 4), case(2, 3, (3, 1, 2), 4), case(1, 2, (5, 1, 1, 4), 6)]


def check_kv_cache(learner, *, verbose: bool = True) -> CheckResult:
    """Check the learner's class ``MyKVCache()``: ``length`` (0 at first), the number of tokens held, and
    ``append(k, v)`` with ``k, v (batch, heads, new, d_head)``, which returns every key and value held so far,
    ``(batch, heads, length, d_head)`` each. Driven as notebook 06's module drives a cache, on appends of one and of
    several tokens; a known mistake is named when it gives the learner's lengths, keys and values."""
    if not callable(learner):
        raise TypeError(f"learner must be a function or a class (your MyKVCache), got {type(learner).__name__}")
    return check_function(
        "kv_cache",
        _cache_driver(learner),
        _cache_driver(CacheWithLengthAndAppend),  # the cache the module checker decodes with
        _cache_cases(),
        CACHE_MISCONCEPTIONS,
        output_names=(
            "the lengths (before the first append and after each)",
            "the keys returned",
            "the values returned",
        ),
        verbose=verbose,
    )


# ------------------------------------------------ one cached decoding step, in order


def _decoding_inputs(generator: torch.Generator) -> dict[str, object]:
    """Two new tokens after three cached ones (their keys rotated when they were appended); d_model 8, 2 heads,
    float64. Two new tokens, so that the mask's offset shows."""
    weights = {name: random_tensor(generator, 8, 8, scale=0.5) for name in ("w_q", "w_k", "w_v", "w_o")}
    return {
        "x_new": random_tensor(generator, 1, 2, 8),
        "k_cache": random_tensor(generator, 1, 2, 3, 4),
        "v_cache": random_tensor(generator, 1, 2, 3, 4),
        **weights,
        "num_heads": 2,
        "rope": RotaryEmbedding(d_head=4, max_seq_len=16),
        "mh": SimpleNamespace(
            split_heads=split_heads,
            merge_heads=merge_heads,
            causal_mask=causal_mask,
            scaled_dot_product_attention=scaled_dot_product_attention,
        ),
    }


#: One step of section 4's cached decoding, its eight lines shuffled.
DECODING_PUZZLE = OrderPuzzle(
    exercise="decoding_order",
    lines={
        "A": "k_cache, v_cache = torch.cat([k_cache, k], dim=-2), torch.cat([v_cache, v], dim=-2)",
        "B": "q, k = rope(q, positions), rope(k, positions)",
        "C": "out = mh.merge_heads(heads) @ w_o.T",
        "D": "past = k_cache.shape[-2]",
        "E": "mask = mh.causal_mask(x_new.shape[-2], past + x_new.shape[-2])",
        "F": "q, k, v = (mh.split_heads(x_new @ w.T, num_heads) for w in (w_q, w_k, w_v))",
        "G": "heads = mh.scaled_dot_product_attention(q, k_cache, v_cache, mask)",
        "H": "positions = torch.arange(past, past + x_new.shape[-2])",
    },
    solution=("D", "F", "H", "B", "A", "E", "G", "C"),
    inputs=_decoding_inputs,
    result="out",
    misorders=(
        MisOrder(
            "append before reading the offset",
            first="D",
            then="A",
            hint="`past` is the number of tokens cached *before* this step: the new tokens' positions start there and "
            "the mask is offset by it. Read after the append, it counts the new tokens too.",
            fix="Read `past = k_cache.shape[-2]` (line D) before appending to the cache (line A).",
        ),
        MisOrder(
            "append before rotating",
            first="B",
            then="A",
            hint="The cache keeps keys rotated at their own positions, once, when they are appended: a key appended "
            "before its rotation stays unrotated in the cache, at every later step too.",
            fix="Rotate q and k (line B) before appending k to the cache (line A).",
            symptom="The three cached tokens' keys are right, and the result is still wrong.",
        ),
        MisOrder(
            "attend before appending",
            first="A",
            then="G",
            hint="The new queries must see the new keys too (each new token sees itself and the new tokens before "
            "it): the cache is appended to first, then attended over.",
            fix="Append the new keys and values (line A) before the attention (line G).",
        ),
    ),
)


def check_decoding_order(answer: object, *, verbose: bool = True) -> CheckResult:
    """Exercise: the learner's order of :data:`DECODING_PUZZLE`'s lines (a list of labels, first line first), run
    on three drawn inputs and compared with the step in the solution's order
    (:func:`~mhsa_helpers.teaching.ordering.check_order`)."""
    return check_order(DECODING_PUZZLE, answer, verbose=verbose)


def decoding_order_exercise() -> OrderExercise:
    """The decoding step's lines to arrange with the mouse or the keyboard, checked by :func:`check_decoding_order`."""
    return OrderExercise(DECODING_PUZZLE, check_decoding_order)
