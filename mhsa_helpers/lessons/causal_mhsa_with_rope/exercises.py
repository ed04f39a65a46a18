"""Checkers for notebook 06: decoding with a cache, and the learner's own causal module with RoPE.

Cached-decoding mistakes hide on the first step (nothing is cached yet: positions
start at 0 either way and the mask is an ordinary triangle) and some hide when
one token is decoded at a time. So every cached case here has something in the
cache, and several add more than one new token at once. The module checker and its
diagnosis are :mod:`mhsa_helpers.teaching.modules`'s, shared with notebooks 07 and 11.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from ... import (
    KVCache,
    MultiHeadSelfAttention,
    RotaryEmbedding,
    TransformerBlock,
    causal_mask,
    merge_heads,
    scaled_dot_product_attention,
    split_heads,
)
from ...teaching.checking import (
    AnswerRejected,
    Case,
    CheckResult,
    Misconception,
    Remembered,
    check_function,
    checking_state,
    escalate,
    judge_class,
    learner_line,
    noted,
    output_tensor,
    random_tensor,
    roughly_equal,
)
from ...teaching.modules import (
    CAUSAL_CONTRACT,
    CAUSAL_SETTINGS,
    CacheWithLengthAndAppend,
    check_module,
    load_package_weights,
    module_is_written,
)
from ...teaching.order_widget import OrderExercise
from ...teaching.ordering import MisOrder, OrderPuzzle, check_order
from ...teaching.predictions import check_prediction

__all__ = [
    "DECODING_PUZZLE",
    "check_attend_with_cache",
    "check_decoding_order",
    "check_kv_cache",
    "check_mask_prediction",
    "check_my_block",
    "check_my_causal_self_attention",
    "check_static_cache",
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


# ------------------------------------------------ the learner's own preallocated cache


@dataclass(frozen=True)
class _Driven:
    """What the property probes read of a cache driven with ``probe=True``: its length before the first append and
    after each (the refused one too), what each append that went through returned, and what an append raised."""

    lengths: list[Any]
    returned: list[Any]
    refused: Exception | None


def _pair(returned: Any) -> tuple[torch.Tensor, torch.Tensor]:
    if (
        isinstance(returned, (tuple, list))
        and len(returned) == 2
        and all(isinstance(t, torch.Tensor) for t in returned)
    ):
        return returned[0], returned[1]
    raise AnswerRejected("append must return two tensors, the keys and the values held so far")


def _static_driver(learner):
    """``learner``, a class made with ``max_len``, driven as notebook 06's module drives a cache (``length``, then
    ``append``): its lengths and what the last append returned, as :func:`_cache_driver` reads them. With ``probe``,
    a :class:`_Driven` instead, and an error raised by an append ends the appends rather than the run (an append
    past ``max_len`` must raise one)."""

    def drive(chunks, max_len, probe=False):
        cache = learner(max_len)
        lengths, returned, refused, held = [cache.length], [], None, 0
        for k, v in chunks:
            new = k.shape[-2]
            try:
                pair = cache.append(k, v)
            except Exception as error:
                if probe:
                    refused = error
                elif isinstance(error, ValueError) and held + new <= max_len:
                    raise AnswerRejected(
                        f"append refused {new} token(s) with {held} held and max_len={max_len} (ValueError: "
                        f"{error}{learner_line(error)}), but they fit: {held} + {new} = {held + new} is not more "
                        f"than {max_len}. Refuse only an append that would hold more than max_len tokens"
                    ) from error
                else:
                    raise
            held += new
            lengths.append(cache.length)
            if refused is not None:
                break
            returned.append(pair)
        if probe:
            return _Driven(lengths, returned, refused)
        keys, values = _pair(returned[-1])
        return torch.tensor(lengths), keys, values

    drive.__wrapped__ = learner  # type: ignore[attr-defined]  # read by the checker to find the learner's own code
    return drive


def _package_cache(max_len: int) -> KVCache:
    return KVCache(capacity=max_len)


#: The reference: the package's preallocated cache, driven as the learner's is.
_STATIC_REFERENCE = _static_driver(_package_cache)

#: The probes' appends: 3, 1 and 2 tokens, held 3, 4 and 6; batch 2, heads 3, d_head 5, all different from those.
_PROBE_SIZES = (3, 1, 2)
#: Room for the probes' appends (two rows left empty), and a max_len the third append (4 held, 2 new) overflows.
_PROBE_ROOM, _PROBE_FULL = 8, 5


def _probe_chunks() -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(606)
    return [(random_tensor(g, 2, 3, n, 5), random_tensor(g, 2, 3, n, 5)) for n in _PROBE_SIZES]


def _probe_numbers(run) -> tuple[list[int], torch.Tensor, torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
    """The learner's lengths, keys and values on the probes' appends, and the chunks appended."""
    chunks = _probe_chunks()
    lengths, keys, values = run(chunks, _PROBE_ROOM)
    return [int(n) for n in lengths], keys, values, chunks


def _returns_whole_buffer(run) -> bool:
    _, keys, values, chunks = _probe_numbers(run)
    held = sum(_PROBE_SIZES)
    return all(
        got.shape[-2] == _PROBE_ROOM and torch.equal(got[..., :held, :], _held([chunk[i] for chunk in chunks]))
        for i, got in enumerate((keys, values))
    )


def _writes_at_slot_0(run) -> bool:
    lengths, keys, _, chunks = _probe_numbers(run)
    newest = chunks[-1][0]
    right_length = lengths[-1] == sum(_PROBE_SIZES) == keys.shape[-2]
    return right_length and torch.equal(keys[..., : newest.shape[-2], :], newest)


def _counts_appends(run) -> bool:
    return _probe_numbers(run)[0] == list(range(len(_PROBE_SIZES) + 1))


def _returns_new_only(run) -> bool:
    _, keys, values, chunks = _probe_numbers(run)
    return torch.equal(keys, chunks[-1][0]) and torch.equal(values, chunks[-1][1])


def _past_max_len(run) -> tuple[bool, Exception | None, list[Any]]:
    """Whether the first two appends went through (4 tokens held of max_len 5), what the third (2 more) raised, and
    the lengths: evidence about the overflow only when the appends that fit went through."""
    driven = run(_probe_chunks(), _PROBE_FULL, probe=True)
    return len(driven.returned) >= len(_PROBE_SIZES) - 1, driven.refused, driven.lengths


def _takes_too_many(run) -> bool:
    fitted, refused, _ = _past_max_len(run)
    return fitted and refused is None


def _fails_but_not_with_value_error(run) -> bool:
    fitted, refused, _ = _past_max_len(run)
    return fitted and refused is not None and not isinstance(refused, ValueError)


def _refusal_changes_length(run) -> bool:
    fitted, refused, lengths = _past_max_len(run)
    return fitted and isinstance(refused, ValueError) and int(lengths[-1]) != int(lengths[-2])


def _returns_new_memory(run) -> bool:
    # Every tensor returned is kept until the end, so new memory cannot reuse a freed address.
    driven = run(_probe_chunks(), _PROBE_ROOM, probe=True)
    pairs = [_pair(returned) for returned in driven.returned]
    return any(len({pair[i].untyped_storage().data_ptr() for pair in pairs}) > 1 for i in (0, 1))


def _not_in_keys_dtype(run) -> bool:
    driven = run(_probe_chunks(), _PROBE_ROOM, probe=True)
    return any(t.dtype != torch.float64 for returned in driven.returned for t in _pair(returned))


_ROOM_FIX = (
    'First thing in append, before anything changes: if self.length + new > self.max_len: raise ValueError(f"the '
    'cache is full: it holds {self.length} tokens, {new} more would exceed max_len={self.max_len}").'
)

STATIC_CACHE_MISCONCEPTIONS = (
    # Wrong numbers, told by what the probes' appends (3, 1, 2 tokens into max_len 8) give back.
    Misconception(
        "the whole buffer returned",
        None,
        "The buffers have max_len rows so that nothing is made again; only the first `length` rows hold keys. The "
        "module attends to every key it is given: the empty rows (zeros, or whatever the memory held) would take "
        "weight too.",
        detect=_returns_whole_buffer,
        fix="Return the filled rows, a slice of each buffer: self.k[:, :, :self.length] (a view: nothing is copied).",
        symptom="What append returns has max_len rows along the sequence axis, whatever the cache holds: the held "
        "rows, then rows nothing was written to. Look at what append returns.",
    ),
    Misconception(
        "every chunk written at slot 0",
        None,
        "Each append writes after the rows already held, at rows length .. length + new - 1: written from row 0, "
        "it overwrites the first tokens, and rows after the newest chunk hold old or empty rows.",
        detect=_writes_at_slot_0,
        fix="Write at self.k[:, :, self.length : self.length + new], with the length read before it grows.",
        symptom="The first rows of what append returns are the latest chunk's keys, not the first tokens'. Look at "
        "where each chunk is written.",
    ),
    Misconception(
        "length counts the appends, not the tokens",
        None,
        "One append may bring several tokens (a prompt, a chunk): the length is the number of tokens held, so it "
        "grows by the number of new tokens.",
        detect=_counts_appends,
        fix="self.length += k.shape[-2] (or self.length = end, the row after the last one written).",
        symptom="Your length is right after appends of one token and wrong after a chunk of several. Look at how "
        "the length grows.",
    ),
    Misconception(
        "only the new keys and values returned",
        None,
        "append returns every key and value held so far: the new tokens attend over the past ones and their own.",
        detect=_returns_new_only,
        fix="Return the filled rows of each buffer, from row 0 to the new length.",
        symptom="What append returns has the size of the latest chunk, not of everything held. Look at what it "
        "returns.",
    ),
    # Properties every right answer has, probed on every answer. Their implementation is the reference: these
    # mistakes give the right numbers, so they are never offered as the cause of a wrong one.
    Misconception(
        "an append past max_len goes through",
        _STATIC_REFERENCE,
        "A cache of max_len rows has no room for more: one that drops, wraps or grows hands the module other keys "
        "than the tokens it saw, without a word. Check for room before writing, and refuse with a ValueError.",
        detect=_takes_too_many,
        fix=_ROOM_FIX,
        symptom="Appending 2 tokens to a cache that holds 4 with max_len=5 returns without an error. Look at what "
        "append checks before it writes.",
        always=True,
    ),
    Misconception(
        "an append past max_len left to torch's error",
        _STATIC_REFERENCE,
        "Writing past the end of a buffer fails with torch's error about sizes that do not match, which does not "
        "tell the caller that the cache is full, nor how full. Check, before writing, that the new tokens fit "
        "(length + new <= max_len), and raise a ValueError that gives the numbers.",
        detect=_fails_but_not_with_value_error,
        fix=_ROOM_FIX,
        symptom="Appending 2 tokens to a cache that holds 4 with max_len=5 fails, but not with a ValueError. Look "
        "at what append checks before it writes.",
        always=True,
    ),
    Misconception(
        "the refused append changed the length",
        _STATIC_REFERENCE,
        "A refused append leaves the cache as it was, so that what it holds can still be used: check for room "
        "first, then write, then count.",
        detect=_refusal_changes_length,
        fix="Move the check to the top of append, before self.length changes.",
        symptom="After refusing an append past max_len, your cache's length is no longer the 4 tokens it holds. "
        "Look at what append changes before it checks.",
        always=True,
    ),
    Misconception(
        "new memory at every append",
        _STATIC_REFERENCE,
        "A preallocated cache makes its two buffers once, at the first append, and writes each chunk into them; "
        "a slice of a buffer is a view of it, no copy. torch.cat, .clone(), .contiguous() or a buffer made again "
        "copy everything held at every step: the cost this cache is there to avoid.",
        detect=_returns_new_memory,
        fix="Make the buffers only when there are none yet (if self.k is None: ...), write with "
        "self.k[:, :, start:end] = k, and return the slice self.k[:, :, :end] as it is.",
        symptom="The keys or values your append returns sit in different memory from one append to the next. "
        "Look at where the buffers are made and at what append returns.",
        always=True,
    ),
    Misconception(
        "the buffers not made in the keys' dtype",
        _STATIC_REFERENCE,
        "torch.zeros(shape) makes float32 tensors (the default dtype) whatever the keys are: the values written "
        "into them are rounded to float32 (and on a GPU, a CPU buffer cannot take them at all). The buffers take "
        "the dtype and device of the first keys.",
        detect=_not_in_keys_dtype,
        fix="k.new_zeros(shape), or torch.zeros(shape, dtype=k.dtype, device=k.device).",
        symptom="Given float64 keys and values, your append returns tensors of another dtype. Look at how the "
        "buffers are made.",
        always=True,
    ),
)


def _static_case(g: torch.Generator, batch: int, heads: int, sizes: tuple[int, ...], d_head: int, max_len: int) -> Case:
    chunks = [(random_tensor(g, batch, heads, n, d_head), random_tensor(g, batch, heads, n, d_head)) for n in sizes]
    filled = " (fills it)" if sum(sizes) == max_len else ""
    text = (
        f"appends of {', '.join(map(str, sizes))} token(s), max_len={max_len}{filled}, batch={batch}, heads={heads}, "
        f"d_head={d_head}"
    )
    return Case((chunks, max_len), description=text)


def _static_cases() -> list[Case]:
    g = torch.Generator().manual_seed(67)
    # One token; a chunk of several after a first append; a cache filled to its last row; a prompt, then single
    # tokens. No two axes of what the last append returns have the same length.
    return [
        _static_case(g, 2, 3, (1,), 4, 5),
        _static_case(g, 3, 2, (3, 1, 2), 5, 9),
        _static_case(g, 1, 2, (4, 1, 2), 3, 7),
        _static_case(g, 2, 1, (5, 1, 1, 1), 6, 11),
    ]


def _draw_static(g: torch.Generator) -> list[Case]:
    def pick(low: int, high: int) -> int:
        return int(torch.randint(low, high + 1, (), generator=g))

    cases = []
    for _ in range(4):
        sizes = tuple(pick(1, 4) for _ in range(pick(2, 4)))
        cases.append(_static_case(g, pick(1, 3), pick(1, 4), sizes, pick(2, 8), sum(sizes) + pick(0, 3)))
    return cases


def check_static_cache(learner, *, verbose: bool = True) -> CheckResult:
    """Check the learner's class ``MyStaticCache(max_len)``: ``length`` and ``append(k, v)`` as for ``MyKVCache``
    (:func:`check_kv_cache`), held in a key and a value buffer ``(batch, heads, max_len, d_head)`` made once, at the
    first append, in the keys' dtype. ``append`` writes the new rows into them and returns the filled rows of each
    ``(batch, heads, length, d_head)``; an append past ``max_len`` raises a ``ValueError`` and leaves the length as it
    was. The reference is the package's ``KVCache(capacity=max_len)``, on appends of one and of several tokens (one
    filling the cache to its last row) and four drawn for the answer; then probes, run on every answer, append past
    ``max_len``, and watch that what ``append`` returns stays in the memory of one buffer, in the keys' dtype."""
    if not callable(learner):
        raise TypeError(f"learner must be a function or a class (your MyStaticCache), got {type(learner).__name__}")
    return check_function(
        "static_cache",
        _static_driver(learner),
        _STATIC_REFERENCE,
        _static_cases(),
        STATIC_CACHE_MISCONCEPTIONS,
        output_names=(
            "the lengths (before the first append and after each)",
            "the keys returned",
            "the values returned",
        ),
        shortcuts=("KVCache",),
        draw=_draw_static,
        verbose=verbose,
    )


# ------------------------------------------------ the learner's own Transformer block


@dataclass(frozen=True)
class _BlockSize:
    """How a case builds the learner's block, ``MyBlock(d_model, num_heads)`` with ``d_ff`` and ``rope_base`` given
    only when set; ``seed`` draws the package block's weights, which the checker copies into the learner's."""

    d_model: int
    num_heads: int
    d_ff: int | None = None
    rope_base: float = 10000.0
    seed: int = 0

    @property
    def hidden(self) -> int:
        """The MLP's hidden width the package's block has at this size."""
        return 4 * self.d_model if self.d_ff is None else self.d_ff

    def keywords(self) -> dict[str, Any]:
        """The keyword arguments a notebook passes: only those that differ from the defaults."""
        given: dict[str, Any] = {} if self.d_ff is None else {"d_ff": self.d_ff}
        return given | ({} if self.rope_base == 10000.0 else {"rope_base": self.rope_base})

    def __repr__(self) -> str:  # how the messages show the call: MyBlock(12, 3, d_ff=20, rope_base=100)
        shown = [str(self.d_model), str(self.num_heads)] + [f"{k}={v:g}" for k, v in self.keywords().items()]
        return f"MyBlock({', '.join(shown)})"


@functools.lru_cache(maxsize=64)
def _package_block(
    d_model: int, num_heads: int, hidden: int, rope_base: float, seed: int, dtype: torch.dtype
) -> TransformerBlock:
    """The package's block holding weights drawn from ``seed`` (the same whatever ``rope_base``): LayerNorms far from
    their initial ones and random biases, so that a LayerNorm used twice, or a bias left out, shows."""
    with torch.random.fork_rng(devices=[]):  # building draws initial weights: the notebook's generator stays as it was
        block = TransformerBlock(d_model, num_heads, d_ff=hidden, rope_base=rope_base)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in block.named_parameters():
            noise = random_tensor(g, *parameter.shape)
            if name.startswith("ln_"):
                parameter.copy_((1.0 if name.endswith("weight") else 0.0) + 0.5 * noise)
            elif name.endswith("weight"):
                parameter.copy_(noise / parameter.shape[-1] ** 0.5 * 1.5)
            else:
                parameter.copy_(0.3 * noise)
    return block.to(dtype).requires_grad_(False)


def _theirs(
    size: _BlockSize, dtype: torch.dtype, *, hidden: int | None = None, rope_base: float | None = None
) -> TransformerBlock:
    """The package's block of ``size`` in ``dtype``, with another hidden width or RoPE base where given."""
    base = size.rope_base if rope_base is None else rope_base
    return _package_block(
        size.d_model, size.num_heads, size.hidden if hidden is None else hidden, base, size.seed, dtype
    )


def _decoded(module: Callable[..., Any], x: torch.Tensor) -> torch.Tensor:
    """``module`` run token by token through one package cache, its outputs joined along the sequence."""
    cache = KVCache()
    return torch.cat([module(x[:, t : t + 1], cache=cache) for t in range(x.shape[1])], dim=1)


#: What the package's blocks and known mistakes gave, by case: the given cases are the same at every check, and an
#: answer checked again meets the same drawn ones.
_remembered = Remembered(4096)


def _both(step: Callable[..., torch.Tensor], x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """What a block whose forward is ``step(x, cache)`` gives: the full pass, and token by token through a cache."""
    with torch.no_grad():
        return step(x, None), _decoded(lambda t, cache: step(t, cache), x)


def _as_decoded(step: Callable[..., torch.Tensor], x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """What :func:`_both` gives for a known mistake, in one pass: every mistake below but the forgotten cache keeps
    the block causal and its positions continuing, so decoding through a cache gives its full pass (to rounding)."""
    with torch.no_grad():
        full = step(x, None)
    return full, full


def _pre_norm(b, x, cache):
    """The package's block itself, pre-norm: the reference, and the block a mistake of another size is built as."""
    return b(x, cache=cache)


def _block_reference(x: torch.Tensor, size: _BlockSize) -> tuple[torch.Tensor, ...]:
    theirs = _theirs(size, x.dtype)
    return _remembered(("reference", size), x, lambda: _both(lambda t, cache: _pre_norm(theirs, t, cache), x))


def _block_mistake(forward: Callable[..., torch.Tensor], **build: Any) -> Callable[..., Any]:
    """A known mistake: ``forward(block, x, cache)`` on the package's block (built with ``build``'s changes)."""

    def mistaken(x: torch.Tensor, size: _BlockSize) -> tuple[torch.Tensor, ...]:
        theirs = _theirs(size, x.dtype, **build)
        return _remembered((mistaken, size), x, lambda: _as_decoded(lambda t, cache: forward(theirs, t, cache), x))

    return mistaken


def _mlp_with(b, h, act):
    return b.mlp[2](act(b.mlp[0](h)))


def _post_norm(b, x, cache):
    x = b.ln_1(x + b.attn(x, cache=cache))
    return b.ln_2(x + b.mlp(x))


def _no_residual(b, x, cache, *, attn=False, mlp=False):
    attended = b.attn(b.ln_1(x), cache=cache)
    x = attended if attn else x + attended
    return b.mlp(b.ln_2(x)) if mlp else x + b.mlp(b.ln_2(x))


def _normed_added(b, x, cache, *, attn=True, mlp=True):
    h = b.ln_1(x)
    x = (h if attn else x) + b.attn(h, cache=cache)
    h = b.ln_2(x)
    return (h if mlp else x) + b.mlp(h)


def _one_norm(b, x, cache, *, norm):
    ln = getattr(b, norm)
    x = x + b.attn(ln(x), cache=cache)
    return x + b.mlp(ln(x))


def _parallel(b, x, cache):
    return x + b.attn(b.ln_1(x), cache=cache) + b.mlp(b.ln_2(x))


def _activation(b, x, cache, *, act):
    x = x + b.attn(b.ln_1(x), cache=cache)
    return x + _mlp_with(b, b.ln_2(x), act)


def _gelu_last(b, x, cache):
    x = x + b.attn(b.ln_1(x), cache=cache)
    return x + F.gelu(b.mlp[2](b.mlp[0](b.ln_2(x))))


def _cache_kept(x: torch.Tensor, size: _BlockSize) -> tuple[torch.Tensor, ...]:
    """The block that keeps the cache from its attention: right in one pass; token by token, each token alone at
    position 0, which is the full pass of a batch of one-token sequences."""
    theirs = _theirs(size, x.dtype)

    def compute() -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            alone = _pre_norm(theirs, x.reshape(-1, 1, x.shape[-1]), None).reshape(x.shape)
            return _pre_norm(theirs, x, None), alone

    return _remembered(("cache kept", size), x, compute)


def _built(run: Callable[..., Any], size: _BlockSize) -> dict[str, Any]:
    """What the learner's block is made of when built at ``size`` (the driver's ``probe``)."""
    return run(torch.zeros(1, 2, size.d_model, dtype=torch.float64), size, probe=True)


def _default_d_ff_wrong(run) -> bool:
    return _built(run, _BlockSize(8, 2))["hidden"] != 32


def _d_ff_ignored(run) -> bool:
    return _built(run, _BlockSize(8, 2, d_ff=20))["hidden"] != 20


def _rope_base_not_passed(run) -> bool:
    # Only the attention's own rope_base tells the block's slip from the attention's (which exercise 4 checks).
    kept = _built(run, _BlockSize(8, 2, rope_base=100.0))["rope_base"]
    return kept is not None and float(kept) == 10000.0


_ADDED_TO = "Look at what each sub-layer's output is added to."
_MLP_LAYERS = "nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))"
_D_FF_FIX = "d_ff = 4 * d_model if d_ff is None else d_ff, then " + _MLP_LAYERS + "."

BLOCK_MISCONCEPTIONS = (
    Misconception(
        "post-norm: the LayerNorm after the addition",
        _block_mistake(_post_norm),
        "The original Transformer (2017) normalised after each addition, x = LN(x + sublayer(x)). GPT-2 and the "
        "package's block are pre-norm: each sub-layer reads LN(x) and its output is added to x itself, so the "
        "residual stream goes through the block without being normalised (and trains more stably in deep stacks).",
        fix="x = x + self.attn(self.ln_1(x), cache=cache), then x = x + self.mlp(self.ln_2(x)).",
        symptom="Your block returns what a LayerNorm gives, not its input with the two sub-layers' outputs added to "
        "it. Look at where the LayerNorms sit.",
    ),
    Misconception(
        "no residual around the attention",
        _block_mistake(functools.partial(_no_residual, attn=True)),
        "Each sub-layer's output is added to the stream it read: x = x + attn(ln_1(x)). Without the addition the "
        "attention replaces the stream instead of refining it, and a deep stack loses the direct path its "
        "gradients take.",
        fix="x = x + self.attn(self.ln_1(x), cache=cache).",
        symptom="Your output keeps nothing of the block's input but what goes through the attention. " + _ADDED_TO,
    ),
    Misconception(
        "no residual around the MLP",
        _block_mistake(functools.partial(_no_residual, mlp=True)),
        "The MLP's output is added to the stream too: x = x + mlp(ln_2(x)). Without it the block returns the MLP's "
        "output alone, and what the attention added is lost.",
        fix="return x + self.mlp(self.ln_2(x)).",
        symptom="Your output is the MLP's output alone: nothing is added to it. " + _ADDED_TO,
    ),
    Misconception(
        "no residual around either sub-layer",
        _block_mistake(functools.partial(_no_residual, attn=True, mlp=True)),
        "Each sub-layer's output is added to the stream it read: x = x + attn(ln_1(x)), then x = x + mlp(ln_2(x)). "
        "Without the additions each layer replaces the stream instead of refining it.",
        fix="x = x + self.attn(self.ln_1(x), cache=cache), then return x + self.mlp(self.ln_2(x)).",
        symptom="Your output is the MLP's output alone, and the MLP reads nothing of the block's input but what "
        "went through the attention. " + _ADDED_TO,
    ),
    *(
        Misconception(
            "the normalised input added back",
            _block_mistake(functools.partial(_normed_added, attn=attn, mlp=mlp)),
            "The residual is the stream itself, x, not its LayerNorm: with h = ln_1(x), x = h + attn(h) replaces the "
            "stream by a normalised copy, and what earlier layers wrote into its scale is lost.",
            fix="Add to x: x = x + self.attn(self.ln_1(x), cache=cache), and the same with ln_2 and the MLP.",
            symptom="A sub-layer's output is added to a normalised vector, not to the stream the sub-layer read. "
            + _ADDED_TO,
        )
        for attn, mlp in ((True, True), (True, False), (False, True))
    ),
    *(
        Misconception(
            "one LayerNorm for both sub-layers",
            _block_mistake(functools.partial(_one_norm, norm=norm)),
            "A block has two LayerNorms, each with its own learned weight and bias: ln_1 before the attention, ln_2 "
            "before the MLP. One module for both (self.ln_2 = self.ln_1), or ln_1 called twice, ties together what "
            "training keeps apart.",
            fix="self.ln_1 = nn.LayerNorm(d_model) and self.ln_2 = nn.LayerNorm(d_model), two modules; the "
            "attention reads self.ln_1(x), the MLP self.ln_2(x).",
            symptom="Your two sub-layers read their inputs normalised with the same weight and bias. Look at which "
            "LayerNorm each one reads.",
        )
        for norm in ("ln_1", "ln_2")
    ),
    Misconception(
        "the MLP reads the block's input",
        _block_mistake(_parallel),
        "In this block the sub-layers run one after the other: the MLP reads the stream after the attention's output "
        "was added to it. (GPT-J and PaLM run them side by side, both on the block's input: another design.)",
        fix="x = x + self.attn(self.ln_1(x), cache=cache) first, then x + self.mlp(self.ln_2(x)) on that x.",
        symptom="What your MLP adds does not depend on what the attention added. Look at what the MLP reads.",
    ),
    Misconception(
        "ReLU instead of GELU",
        _block_mistake(functools.partial(_activation, act=F.relu)),
        "The package's block, like GPT-2, bends the MLP's hidden features with GELU, x·Φ(x): smooth, and slightly "
        "negative for negative inputs. ReLU, the original Transformer's, cuts them to 0.",
        fix=_MLP_LAYERS + ".",
        symptom="Your MLP's hidden features are exactly 0 wherever they would be negative. Look at the nonlinearity "
        "between the two linear layers.",
    ),
    Misconception(
        "GELU's tanh approximation",
        _block_mistake(functools.partial(_activation, act=functools.partial(F.gelu, approximate="tanh"))),
        "nn.GELU(approximate='tanh') is the approximation GPT-2's code used; the package's block, with nn.GELU()'s "
        "default, computes GELU exactly, x·Φ(x). The two differ by up to about 5e-4 on a hidden feature.",
        fix="nn.GELU() with no argument.",
        symptom="Your block comes within about 1e-3 of the package's, no nearer: the MLP's nonlinearity is close to "
        "the package's, not the same. Look at its options.",
    ),
    Misconception(
        "no nonlinearity in the MLP",
        _block_mistake(functools.partial(_activation, act=lambda h: h)),
        "Two linear layers in a row are one linear layer: the GELU between them is what lets the MLP compute "
        "anything a single matrix cannot.",
        fix=_MLP_LAYERS + ".",
        symptom="Your MLP gives what one linear layer could give: nothing bends its hidden features. Look at what "
        "sits between its two linear layers.",
    ),
    Misconception(
        "the nonlinearity after the second layer",
        _block_mistake(_gelu_last),
        "The MLP widens, bends, and narrows back: Linear(d_model, d_ff), GELU on the d_ff hidden features, then "
        "Linear(d_ff, d_model), whose output is added to the stream as it is.",
        fix=_MLP_LAYERS + ".",
        symptom="What your MLP adds to the stream is bent: it is not a linear map of the MLP's hidden features. Look "
        "at the order of the MLP's layers.",
    ),
    Misconception(
        "d_ff's default is not 4 × d_model",
        None,
        "Left out, d_ff is 4 * d_model, as in the original Transformer (512 → 2048) and GPT-2 (768 → 3072): the MLP "
        "widens each token four times and narrows it back.",
        detect=_default_d_ff_wrong,
        fix=_D_FF_FIX,
        symptom="Built without d_ff, your block's MLP has another hidden width than the package's TransformerBlock. "
        "Look at what d_ff is when it is not given.",
    ),
    Misconception(
        "d_ff ignored",
        None,
        "A d_ff that is given is the MLP's hidden width: nn.Linear(d_model, d_ff), then nn.Linear(d_ff, d_model).",
        detect=_d_ff_ignored,
        fix=_D_FF_FIX,
        symptom="Built with d_ff=20, your block's MLP does not have 20 hidden features. Look at where d_ff is used.",
    ),
    Misconception(
        "rope_base not passed to the attention",
        _block_mistake(_pre_norm, rope_base=10000.0),
        "The block's rope_base is its attention's: built without it, the attention rotates with the default base "
        "10000 whatever the block was given.",
        detect=_rope_base_not_passed,
        fix="self.attn = MyCausalSelfAttention(d_model, num_heads, rope_base=rope_base).",
        symptom="Your block is right with rope_base left at its default, and differs when another is given. Look at "
        "how the attention is built.",
    ),
    Misconception(
        "the cache not passed to the attention",
        _cache_kept,
        "The block keeps no cache of its own: the cache it is given goes to its attention, the one layer where "
        "tokens meet, so that a new token sees the cached keys and values and its position continues. The "
        "LayerNorms and the MLP work on each token alone and need none.",
        fix="self.attn(self.ln_1(x), cache=cache).",
        symptom="Your full pass is right; token by token through a cache, each token comes out as if it were alone, "
        "the first of its sequence. Look at what the attention is called with.",
    ),
)

#: The submodules the checker copies the package block's weights into, named as ``mh.TransformerBlock``'s.
BLOCK_PARTS = ("ln_1", "attn", "ln_2", "mlp")

_BLOCK = "my_block"
_EXERCISE_4 = "check_my_causal_self_attention(MyCausalSelfAttention)"


def _attention_not_written(where: str, error: NotImplementedError) -> str:
    """What to tell the learner when ``where``, code of theirs outside the block (their attention of exercise 4, as a
    rule), still raises ``error``."""
    return (
        f"your block is written, but {where} still raises NotImplementedError{learner_line(error)}. Your block's "
        "attention is your MyCausalSelfAttention of exercise 4: write it there, check it with "
        f"{_EXERCISE_4}, then run this cell again."
    )


def _attention_unwritten(learner: Any) -> bool:
    """Whether the notebook's ``MyCausalSelfAttention``, which the block's attention is, still raises
    NotImplementedError (False when the learner's namespace has none: nothing to say then)."""
    function = vars(learner).get("__init__") if isinstance(learner, type) else learner
    attention = getattr(function, "__globals__", {}).get("MyCausalSelfAttention")
    if attention is None:
        return False
    with checking_state(), contextlib.redirect_stdout(io.StringIO()):  # its own one-line advice is for notebook 07
        try:
            return not module_is_written(attention)
        except Exception:  # written, but wrong: the attention check says so once the block is written
            return False


def _part(mine: nn.Module, name: str) -> nn.Module:
    part = getattr(mine, name, None)
    if not isinstance(part, nn.Module):
        raise AnswerRejected(
            f"your block has no submodule `{name}`: the checker copies the package block's weights into self.ln_1, "
            "self.attn, self.ln_2 and self.mlp, named as in mh.TransformerBlock"
        )
    return part


def _mlp_layers(mlp: nn.Module, d_model: int) -> tuple[nn.Linear, nn.Linear]:
    """The MLP's two ``nn.Linear`` layers, the widening one first."""
    layers = [m for m in mlp.modules() if isinstance(m, nn.Linear)]
    if len(layers) != 2:
        raise AnswerRejected(
            f"block.mlp holds {len(layers)} nn.Linear layer(s); the package's MLP holds two, d_model -> d_ff and "
            "d_ff -> d_model"
        )
    up, down = layers
    if up.in_features != d_model and down.in_features == d_model:  # defined in the other order
        up, down = down, up
    if (up.in_features, down.out_features, up.out_features) != (d_model, d_model, down.in_features):
        raise AnswerRejected(
            f"block.mlp's linear layers map {up.in_features} -> {up.out_features} and {down.in_features} -> "
            f"{down.out_features} features; with d_model={d_model} they must map d_model -> d_ff, then d_ff -> d_model"
        )
    if up.bias is None or down.bias is None:
        raise AnswerRejected(
            "block.mlp's linear layers need their biases (nn.Linear's default, bias=True), as the package's have"
        )
    return up, down


def _copy_block(
    mine: nn.Module, theirs: TransformerBlock, parts: dict[str, nn.Module], mlp: tuple[nn.Linear, nn.Linear]
) -> None:
    """The package block's weights into the learner's: the LayerNorms whole, the MLP layer by layer, the attention
    as exercise 4's checker copies it (``ln_1`` first: a LayerNorm shared by both sub-layers ends with ``ln_2``'s)."""
    for name in ("ln_1", "ln_2"):
        try:
            parts[name].load_state_dict(getattr(theirs, name).state_dict())
        except RuntimeError as error:
            held = {key: tuple(value.shape) for key, value in parts[name].state_dict().items()}
            raise AnswerRejected(
                f"block.{name} holds {held or 'no weights'}, where nn.LayerNorm(d_model) holds a weight and a bias of "
                f"shape ({theirs.ln_1.weight.shape[0]},): make it nn.LayerNorm(d_model)"
            ) from error
    with torch.no_grad():
        for layer, index in zip(mlp, (0, 2), strict=True):
            package = cast(nn.Linear, theirs.mlp[index])
            layer.weight.copy_(package.weight)
            cast(torch.Tensor, layer.bias).copy_(package.bias)
    try:
        if isinstance(parts["attn"], MultiHeadSelfAttention):
            parts["attn"].load_state_dict(theirs.attn.state_dict())
        else:
            load_package_weights(parts["attn"], theirs.attn)
    except (ValueError, TypeError, RuntimeError) as error:
        raise AnswerRejected(
            f"block.attn cannot take the package attention's weights ({str(error).strip().rstrip('.')}): it must be "
            "your MyCausalSelfAttention of exercise 4, built with the block's d_model and num_heads"
        ) from error


def _attention_check(attn: nn.Module, size: _BlockSize, hidden: int, x: torch.Tensor) -> None:
    """Before the block is compared: does its attention alone, holding the package attention's weights, give what
    the package's attention gives, in a full pass and token by token? Built without the block's rope_base, it is
    compared at the default base, which is then the block's mistake, not the attention's."""
    kept = getattr(attn, "rope_base", None)
    bases = [float(kept)] if isinstance(kept, (int, float)) else list(dict.fromkeys((size.rope_base, 10000.0)))
    try:
        with torch.no_grad():
            full = output_tensor(attn(x), "your block's attention, called as attn(x),")
            steps = _decoded(lambda t, cache: output_tensor(attn(t, cache=cache), "your block's attention"), x)
    except (NotImplementedError, AnswerRejected):
        raise
    except Exception as error:
        raise AnswerRejected(
            f"your block's attention, called alone as the package's is (attn(x), then token by token with a cache), "
            f"raised {type(error).__name__}: {error}{learner_line(error)}. Run exercise 4's checker on it, "
            f"{_EXERCISE_4}, fix what it finds, then run this cell again"
        ) from error
    differs = ""
    for base in bases:
        package = _theirs(size, x.dtype, hidden=hidden, rope_base=base).attn

        def compute(package: nn.Module = package) -> tuple[torch.Tensor, torch.Tensor]:
            with torch.no_grad():
                return package(x), _decoded(package, x)

        want_full, want_steps = _remembered(("attention", size, base), x, compute)
        differs = (
            "in a full pass"
            if not roughly_equal(full, want_full)
            else "token by token"
            if not roughly_equal(steps, want_steps)
            else ""
        )
        if not differs:
            return
    raise AnswerRejected(
        f"your block's attention (block.attn, a {type(attn).__name__}) holding the package attention's weights "
        f"already gives other numbers than the package's attention {differs}, before any line of your block runs: "
        f"the block is not to blame. Run exercise 4's checker, {_EXERCISE_4}, fix what it finds, then run this cell "
        "again"
    )


def _drive(learner: Any, x: torch.Tensor, size: _BlockSize, probe: bool | None, told: dict[str, str]) -> Any:
    """``learner``, the class, built at a case's size with the package block's weights copied in, run on the case's
    ``x`` in a full pass and token by token through a package cache; with ``probe``, what it is made of."""
    mine = learner(size.d_model, size.num_heads, **size.keywords())
    if not isinstance(mine, nn.Module):
        raise AnswerRejected(f"{size!r} gave {type(mine).__name__}, not an nn.Module")
    if isinstance(mine, TransformerBlock):  # a subclass is built by the package: the watch on calls cannot see it
        told["shortcut"] = "mhsa_helpers.block.TransformerBlock"
    parts = {name: _part(mine, name) for name in BLOCK_PARTS}
    mlp = _mlp_layers(parts["mlp"], size.d_model)
    dropout = next((m for m in mine.modules() if isinstance(m, nn.Dropout) and m.p > 0), None)
    if dropout is not None:
        raise AnswerRejected(
            f"your block holds {dropout}: it draws random numbers, so the same input gives other outputs at every "
            "call. The package block's Dropout(p=0.0) does nothing: leave it out"
        )
    if probe:
        return {"hidden": mlp[0].out_features, "rope_base": getattr(parts["attn"], "rope_base", None)}
    signature = inspect.signature(mine.forward)
    try:
        signature.bind(x, cache=None)
    except TypeError:
        raise AnswerRejected(
            f"your forward takes {signature}; it must take the cache too: forward(self, x, cache=None)"
        ) from None
    mine.to(x.dtype)
    theirs = _theirs(size, x.dtype, hidden=mlp[0].out_features)
    _copy_block(mine, theirs, parts, mlp)
    _attention_check(parts["attn"], size, mlp[0].out_features, x)
    before = x.detach().clone()
    full = mine(x)
    if full is None:  # told as a forgotten `return`
        return None
    full = output_tensor(full, "your forward")
    if not torch.equal(x.detach(), before):
        raise AnswerRejected(
            "your forward changed its input x in place (`x += ...`, say), so the caller's tensor changed too: write "
            "x = x + ..., which makes a new tensor"
        )
    steps, cache = [], KVCache()
    for t in range(x.shape[1]):
        step = output_tensor(mine(x[:, t : t + 1], cache=cache), "token by token, your forward")
        if step.shape != x[:, t : t + 1].shape:
            raise AnswerRejected(
                f"token by token, your block returned shape {tuple(step.shape)} for one new token "
                f"{tuple(x[:, t : t + 1].shape)}: it must keep the shape (batch, new, d_model)"
            )
        steps.append(step)
    return full, torch.cat(steps, dim=1)


def _block_case(x: torch.Tensor, size: _BlockSize) -> Case:
    return Case((x, size), description=f"{size!r} on x {tuple(x.shape)}")


def _block_cases() -> list[Case]:
    g = torch.Generator().manual_seed(607)
    # d_ff left out and given (not 4 * d_model), rope_base left out and given; no two axes of x of the same length,
    # none equal to the heads or d_head.
    return [
        _block_case(random_tensor(g, 3, 5, 8), _BlockSize(8, 2, seed=6071)),
        _block_case(random_tensor(g, 2, 6, 12), _BlockSize(12, 3, d_ff=20, rope_base=100.0, seed=6072)),
    ]


def _draw_blocks(seed: int) -> list[Case]:
    g = torch.Generator().manual_seed(seed)

    def pick(options: Sequence[Any]) -> Any:
        return options[int(torch.randint(len(options), (), generator=g))]

    cases = []
    for _ in range(3):  # called as drawn, in float32 with inputs that require grad, under torch.no_grad()
        heads, d_head = pick((1, 2, 3, 4)), pick((2, 4, 6))
        d_model = heads * d_head
        d_ff = pick((None, None, d_model + 3, 2 * d_model + 1, 3 * d_model - 1))
        weights = int(torch.randint(2**31 - 1, (), generator=g))
        size = _BlockSize(d_model, heads, d_ff, pick((10000.0, 500.0)), seed=weights)
        cases.append(_block_case(random_tensor(g, pick((1, 2, 3)), pick((2, 3, 4, 5)), d_model), size))
    return cases


def check_my_block(learner, *, verbose: bool = True) -> CheckResult:
    """Check the learner's class ``MyBlock(d_model, num_heads, *, d_ff=None, rope_base=10000.0)``: submodules ``ln_1``,
    ``attn`` (their ``MyCausalSelfAttention``), ``ln_2`` and ``mlp`` (two ``nn.Linear`` layers), and ``forward(x,
    cache=None)`` ``(batch, seq, d_model) -> (batch, seq, d_model)``.

    Built at two sizes (``d_ff`` and ``rope_base`` left out, then given) and three drawn for the answer, with the
    weights of a package :class:`~mhsa_helpers.TransformerBlock` of the same sizes copied in, it must give that
    block's outputs in a full pass and token by token through a package :class:`~mhsa_helpers.KVCache`. Before the
    block is compared, its attention alone must give the package attention's outputs: when it does not, the
    message sends the learner to exercise 4's checker instead of blaming the block; when it still raises
    NotImplementedError, the block is not attempted yet and the message says which code raises it."""
    result, told = judge_class(
        _BLOCK,
        learner,
        "MyBlock",
        _drive,
        _attention_not_written,
        _block_reference,
        _block_cases(),
        BLOCK_MISCONCEPTIONS,
        # The block's own code: its class's methods and those of every class of the learner's it extends.
        inherited=True,
        made="block",
        output_names=("the full pass", "token by token through a cache"),
        shortcuts=("TransformerBlock", "MultiHeadSelfAttention"),
        draw=_draw_blocks,
    )
    if result.status == "not_attempted" and "not written" not in told and _attention_unwritten(learner):
        result = replace(
            result,
            message=f"{result.message} Its attention, your MyCausalSelfAttention of exercise 4, is not written "
            "yet either: write and check it first.",
        )
    elif "shortcut" in told and result.status in ("correct", "misconception", "incorrect"):
        note = (
            " Note: your block is the package's `TransformerBlock`, which does what this exercise asks you to "
            "write yourself; write it from section 7's two lines to see how it works."
        )
        result = noted(result, note, (*result.shortcuts, told["shortcut"]))
    result = escalate(result)
    if verbose:
        print(result.message)
    return result


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
