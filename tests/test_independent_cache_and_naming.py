"""The sliding-window cache's mask and the names of attention kinds, against their definitions.

Issue 37 found faults that survive where a test compares a module with its own parts: a
``SlidingWindowCache.mask_for`` that lets a query see a *later* sink (pinned for
``sliding_window_mask``, not for the cache), and a one-head model called "MQA". Here the expected
mask is built from first principles (StreamingLLM's rule: the sinks, plus the last ``window``
tokens, never a later one) out of the positions the cache was fed, and the expected names come
from the papers' definitions, written as literals; nothing expected is read from the cache's
``positions`` or from the naming code itself.
"""

from __future__ import annotations

import math

import pytest
import torch

from mhsa_helpers import MultiHeadSelfAttention, SlidingWindowCache
from mhsa_helpers.kv_cache_memory import ModelConfig
from mhsa_helpers.lessons.attention_at_scale.diagrams import head_groups_diagram
from mhsa_helpers.lessons.attention_at_scale.explorer import kv_heads_explorer

F64 = torch.float64

# ---------------------------------------------------------------- SlidingWindowCache.mask_for


def _visible(query: int, key: int, window: int, sinks: int) -> bool:
    """StreamingLLM's rule (Xiao et al., 2023) with a window: the query at stream position ``query``
    sees the key at ``key`` iff the key is not later than the query, and it is a sink (one of the
    first ``sinks`` tokens) or one of the ``window`` tokens ending at the query."""
    if key > query:
        return False  # never a later key, not even a sink
    return key < sinks or query - window < key


def _feed(cache: SlidingWindowCache, start: int, count: int) -> None:
    """Append ``count`` tokens at stream positions ``start ..``; each key row holds its own position,
    so what the cache keeps can be read back from the keys themselves."""
    keys = torch.arange(start, start + count, dtype=F64)[None, :, None]  # (heads=1, count, d=1)
    cache.append(keys, -keys)


# (window, sinks, the steps that fed the past, new tokens in the step whose mask is checked)
CASES = [
    (3, 4, [], 3),  # empty cache, 4 sinks, 3 new: the first tokens come before the sinks are complete
    (3, 4, [2], 3),  # sinks 0, 1 held; 2 and 3 are new sinks, and query 2 must not see sink 3
    (2, 3, [1, 1], 4),  # decoded one at a time, then a step that completes the sinks and passes them
    (2, 2, [6], 3),  # the middle evicted: held 0, 1 (sinks) and 5
    (4, 1, [3, 1, 1, 1, 1, 1, 1], 1),  # one token at a time, long past the window
    (1, 3, [5], 4),  # window 1: a token sees itself and the sinks only
    (5, 0, [4, 3], 6),  # no sinks; more new tokens than the window, so the last ones see no held key
    (3, 2, [9], 5),  # more new tokens than the cache holds
]


@pytest.mark.parametrize(("window", "sinks", "past_steps", "new"), CASES)
def test_mask_for_is_the_streaming_rule_over_the_held_positions(window, sinks, past_steps, new):
    """Kills a ``mask_for`` that lets a query see a sink after it (the precedence slip
    ``(behind >= 0) & (behind < window) | (key < sinks)``), a window one token too wide or narrow,
    a mask that numbers the held keys 0, 1, 2... instead of by their stream positions, and an
    eviction that keeps one row too many or too few.

    The mask's columns are the held keys, then the new ones; the held keys' positions are read
    from the keys (each holds its position), not from ``cache.positions``."""
    cache, seen = SlidingWindowCache(window, sinks), 0
    for step in past_steps:
        _feed(cache, seen, step)
        seen += step
    held = [] if cache.keys is None else [int(p) for p in cache.keys[0, :, 0].tolist()]
    # What the cache keeps is what the next token may see (the class docstring): the sinks and
    # the window - 1 tokens before it. Nothing else, since memory must stay sinks + window rows.
    assert held == [p for p in range(seen) if _visible(seen, p, window, sinks)]
    assert cache.length == seen

    queries = range(seen, seen + new)
    columns = held + list(queries)
    expected = torch.tensor([[_visible(q, k, window, sinks) for k in columns] for q in queries])
    mask = cache.mask_for(new)
    assert mask.dtype == torch.bool
    assert torch.equal(mask, expected), (window, sinks, held, list(queries))


def test_the_first_tokens_do_not_see_the_sinks_that_come_after_them():
    """The case a causal module hides: an empty cache with 4 sinks and a step of 3 tokens. Every
    new token is a sink, and each may see only the sinks up to itself: a lower triangle, written
    out. A mask that lets any query see every sink would fill the whole (3, 3) block."""
    mask = SlidingWindowCache(window=2, sinks=4).mask_for(3)
    assert mask.tolist() == [
        [True, False, False],
        [True, True, False],
        [True, True, True],
    ]


def test_a_step_that_completes_the_sinks_sees_no_later_sink():
    """Two tokens held (both sinks of 4), then 4 new tokens at positions 2..5 with window 2: the
    new sinks 2 and 3 are hidden from the queries before them; query 5 sees the sinks 0..3 and
    itself, and query 4 the sinks 0..3 and itself (3 is a sink and inside its window anyway)."""
    cache = SlidingWindowCache(window=2, sinks=4)
    _feed(cache, 0, 2)
    #            keys:  0     1      2      3      4      5
    assert cache.mask_for(4).tolist() == [
        [True, True, True, False, False, False],  # query 2
        [True, True, True, True, False, False],  # query 3
        [True, True, True, True, True, False],  # query 4
        [True, True, True, True, True, True],  # query 5
    ]


def _reference_step(module, x, start, count, window, sinks):
    """The outputs of tokens ``start .. start + count - 1`` of ``x`` (batch, seq, d_model), attention
    written out per query and per head over the full stream: softmax(q K^T / sqrt(d_head)) V over
    the keys ``_visible`` says, each key and value recomputed from its token, then W_O."""
    d_head = module.d_head
    b_q, b_k, b_v = module.qkv_proj.bias.chunk(3)
    q = x @ module.q_weight.T + b_q
    k = x @ module.k_weight.T + b_k
    v = x @ module.v_weight.T + b_v
    rows = []
    for p in range(start, start + count):
        keys = [j for j in range(x.shape[1]) if _visible(p, j, window, sinks)]
        heads = []
        for h in range(module.num_heads):
            cols = slice(h * d_head, (h + 1) * d_head)
            # (batch, 1, d_head) @ (batch, d_head, n_keys) -> (batch, 1, n_keys)
            scores = q[:, p : p + 1, cols] @ k[:, keys, cols].transpose(-2, -1) / math.sqrt(d_head)
            heads.append(torch.softmax(scores, -1) @ v[:, keys, cols])  # (batch, 1, d_head)
        rows.append(torch.cat(heads, -1))
    return module.out_proj(torch.cat(rows, 1))


@pytest.mark.parametrize(("window", "sinks", "steps"), [(3, 4, [3, 2, 1, 4]), (2, 1, [4, 1, 3]), (4, 0, [2, 5, 1])])
def test_decoding_with_the_mask_alone_matches_attention_over_the_visible_keys(window, sinks, steps):
    """The mask is all that tells a non-causal module what a step may see: decoding in steps with
    ``mask=cache.mask_for(new)`` must give, token for token, attention over exactly the keys of
    the definition. With ``causal=True`` a later sink would be hidden by the causal mask; here a
    mask that shows it changes the outputs of the first tokens."""
    torch.manual_seed(0)
    module = MultiHeadSelfAttention(8, 2, causal=False, dtype=F64).eval()
    x = torch.randn(2, sum(steps), 8, dtype=F64)
    cache, seen = SlidingWindowCache(window, sinks), 0
    with torch.no_grad():
        for new in steps:
            out = module(x[:, seen : seen + new], mask=cache.mask_for(new), cache=cache)
            expected = _reference_step(module, x, seen, new, window, sinks)
            torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-12, msg=f"tokens {seen}..{seen + new - 1}")
            seen += new


# ---------------------------------------------------------------- naming attention kinds

# (query heads, key/value heads, kind). Shazeer (2019), "Fast Transformer Decoding: One Write-Head is
# All You Need": multi-query attention has many query heads that share a single key/value head.
# Ainslie et al. (2023), "GQA": grouped-query attention divides the query heads into groups, one
# key/value head per group, "interpolating" between multi-query (one group) and multi-head (as
# many groups as heads). One query head with its one key/value head shares nothing with anyone: it
# is plain single-head attention, which is multi-head attention with h = 1 (Vaswani et al., 2017),
# never MQA, whatever ``num_kv_heads == 1`` would suggest.
KINDS = [
    (1, 1, "MHA"),
    (8, 1, "MQA"),
    (8, 2, "GQA"),
    (8, 4, "GQA"),
    (8, 8, "MHA"),
    (2, 1, "MQA"),  # the smallest MQA: two query heads, one shared key/value head
    (2, 2, "MHA"),
]
WORDS = {"MHA": "multi-head", "MQA": "multi-query", "GQA": "grouped-query"}


@pytest.mark.parametrize(("num_heads", "num_kv_heads", "kind"), KINDS)
def test_model_config_names_the_kind_of_the_definitions(num_heads, num_kv_heads, kind):
    """Kills an ``attention`` property that asks ``num_kv_heads == 1`` before ``== num_heads``
    and so calls a one-head model "MQA" (or that swaps any two names)."""
    config = ModelConfig("toy", num_layers=2, num_heads=num_heads, num_kv_heads=num_kv_heads, head_dim=8)
    assert config.attention == kind


@pytest.mark.parametrize(("num_heads", "num_kv_heads", "kind"), KINDS)
def test_the_head_groups_diagram_names_the_kind_of_the_definitions(num_heads, num_kv_heads, kind):
    """Notebook 08's picture of which query heads read which key/value head: its title names the
    kind. The same one-head fault there would title one lone head "multi-query attention"."""
    title = head_groups_diagram(num_heads=num_heads, num_kv_heads=num_kv_heads).axes[0].get_title()
    assert title.startswith(f"{WORDS[kind]} attention:"), title
    # and counts in words: "1 query head", "8 query heads"
    heads = f"{num_heads} query head{'s' if num_heads > 1 else ''}"
    kv = f"{num_kv_heads} key/value head{'s' if num_kv_heads > 1 else ''}"
    assert title.endswith(f": {heads}, {kv}"), title


@pytest.mark.parametrize(("num_heads", "num_kv_heads", "kind"), KINDS)
def test_the_kv_heads_explorer_names_the_kind_of_the_definitions(num_heads, num_kv_heads, kind):
    """Notebook 08's explorer of the same picture: its caption names the kind, and says how many
    query heads read each key/value head (1 for MHA, all of them for MQA)."""
    explorer = kv_heads_explorer(num_heads=num_heads, num_kv_heads=num_kv_heads)
    try:
        caption = explorer.data["caption"]
    finally:
        explorer.close()
    assert caption.startswith(f"{WORDS[kind]} attention:"), caption
    assert f"each read by {num_heads // num_kv_heads} query head(s)" in caption
