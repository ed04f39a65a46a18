"""The bug zoo of notebook 10: attention bugs that run without an error and give wrong results,
each run next to its fix on a tiny example.

Seven of them were reported in public projects: their :attr:`Bug.reports` link the issue or pull
request (:class:`Report`), so a learner can open what happened. Five link the pull request that
fixed the bug; one links an issue its maintainer confirmed and closed, one an issue still open. The
last one has no report cited here: it is an illustration of a failure, and says so
(:attr:`Bug.history` is False).

Every :class:`Bug` has a name, the symptom a user would have seen, and :meth:`Bug.run`, which
computes the buggy and the fixed result on the same small inputs and returns a
:class:`BugDemo` — two matrices to draw side by side (the attention weights of one head, or
an output ``(seq, features)``), and the measured size of the damage. :data:`BUGS` lists them
in the notebook's order; the explorer of notebook 10 and its table iterate it.

Each buggy version is a few lines written out here, next to the fixed one, so a learner can
read the difference. The fixed versions are checked against the package (``tests``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ...attention import attention_scores
from ...heads import merge_heads, split_heads
from ...masking import causal_mask
from ...rope import apply_rotary, rope_angles
from ...softmax import softmax

__all__ = ["BUGS", "Bug", "BugDemo", "Report", "bug", "bug_names"]

_TOKENS = ("Your", "journey", "starts", "with", "one", "step")


@dataclass(frozen=True)
class BugDemo:
    """What one bug did on its example.

    ``buggy`` and ``fixed`` are 2-D float tensors of one shape: attention weights
    ``(seq_q, seq_k)`` of one head when ``kind == "weights"``, an output ``(seq, features)``
    when ``kind == "output"``. ``rows``/``cols`` label their axes; ``damage`` is the largest
    absolute difference between them (NaN counts as infinitely far); ``symptom`` says in
    words what went wrong, with the measured numbers.
    """

    buggy: torch.Tensor
    fixed: torch.Tensor
    kind: str
    rows: tuple[str, ...]
    cols: tuple[str, ...]
    damage: float
    symptom: str


@dataclass(frozen=True)
class Report:
    """A public issue or pull request where a bug was reported or fixed: ``where`` (``owner/repo#number``),
    ``url`` (its GitHub address) and ``what`` (what it says, in a few words)."""

    where: str
    url: str
    what: str


@dataclass(frozen=True)
class Bug:
    """One bug: ``name``, ``mistake`` (what the code did), ``seen`` (the symptom), ``fix`` (one line),
    ``run()`` -> :class:`BugDemo`, and ``reports``: the public issues or pull requests where it was
    reported or fixed (empty for an illustration)."""

    name: str
    mistake: str
    seen: str
    fix: str
    run: Callable[[], BugDemo]
    reports: tuple[Report, ...] = ()

    @property
    def history(self) -> bool:
        """True when the bug links a public report; False for an illustration."""
        return bool(self.reports)

    @property
    def provenance(self) -> str:
        """One line for the learner: where it was reported (and fixed), or that it is an illustration."""
        if not self.reports:
            return "an illustration: no public report is cited for this one"
        return "reported: " + "; ".join(f"{r.where} ({r.what})" for r in self.reports)


def _damage(buggy: torch.Tensor, fixed: torch.Tensor) -> float:
    if torch.isnan(buggy).any() or torch.isnan(fixed).any():
        return math.inf
    return float((buggy - fixed).abs().max())


def _qkv(seq_q: int, seq_k: int, d: int, seed: int, *, heads: int = 1) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, heads, seq_q, d, generator=g)
    k = torch.randn(1, heads, seq_k, d, generator=g)
    v = torch.randn(1, heads, seq_k, d, generator=g)
    return q, k, v


def _weights(q: torch.Tensor, k: torch.Tensor, allowed: torch.Tensor | None = None) -> torch.Tensor:
    scores = attention_scores(q, k)
    if allowed is not None:
        scores = scores.masked_fill(~allowed, -math.inf)
    return softmax(scores)


def _labels(n: int, prefix: str = "") -> tuple[str, ...]:
    return tuple(f"{prefix}{i}" for i in range(n))


# --------------------------------------------------------------------------- the bugs


def _inverted_mask() -> BugDemo:
    # F.scaled_dot_product_attention reads a boolean mask as True = "may attend". Code written for
    # the opposite convention (True = blocked, as in masked_fill(mask, -inf)) passes its mask as is.
    q, k, v = _qkv(6, 6, 8, seed=1)
    blocked = torch.triu(torch.ones(6, 6, dtype=torch.bool), diagonal=1)
    allowed = causal_mask(6)
    buggy = _weights(q, k, blocked)[0, 0]
    fixed = _weights(q, k, allowed)[0, 0]
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=blocked)[0, 0]
    future = float(buggy[0, 1:].sum())
    return BugDemo(
        torch.nan_to_num(buggy),
        fixed,
        "weights",
        _TOKENS,
        _TOKENS,
        _damage(torch.nan_to_num(buggy), fixed),
        f"the first token puts {future:.2f} of its attention on later tokens; the last row has no key "
        f"left (F.scaled_dot_product_attention returns zeros there: largest |output| {float(out[-1].abs().max()):.1f})",
    )


def _large_negative_mask() -> BugDemo:
    # Masking by *adding* -10000 assumes every real score is far above (score of a blocked key - 10000).
    # Scores of large magnitude (large activations, no scaling, long vectors) break that: here query
    # "journey" scores its two visible keys at about -24000 and a future key at -9000.
    scores = torch.tensor(
        [
            [2.0, -1.0, 0.5, 3.0],
            [-24_000.0, -25_000.0, -9_000.0, -30_000.0],
            [1.0, 2.0, 0.5, -3.0],
            [0.5, -0.5, 1.0, 2.0],
        ]
    )
    allowed = causal_mask(4)
    buggy = softmax(scores + (~allowed) * -10_000.0)
    fixed = softmax(scores.masked_fill(~allowed, -math.inf))
    leaked = float((buggy * ~allowed).sum(-1).max())
    return BugDemo(
        buggy,
        fixed,
        "weights",
        _TOKENS[:4],
        _TOKENS[:4],
        _damage(buggy, fixed),
        f"'journey' scores its visible keys near -24000 and the future key 'starts' at -9000; after adding "
        f"-10000 the future key still wins: {leaked:.2f} of its weight goes to the future",
    )


def _rope_pairing() -> BugDemo:
    # Checkpoints whose rows were laid out for the "half_split" pairing (Hugging Face's rotate_half)
    # loaded into code that rotates interleaved pairs, or the other way round.
    q, k, _ = _qkv(6, 6, 8, seed=3)
    cos, sin = rope_angles(torch.arange(6), 8)
    fixed = softmax(attention_scores(apply_rotary(q, cos, sin, "half_split"), apply_rotary(k, cos, sin, "half_split")))
    buggy = softmax(
        attention_scores(apply_rotary(q, cos, sin, "interleaved"), apply_rotary(k, cos, sin, "interleaved"))
    )
    buggy, fixed = buggy[0, 0], fixed[0, 0]
    return BugDemo(
        buggy,
        fixed,
        "weights",
        _TOKENS,
        _TOKENS,
        _damage(buggy, fixed),
        f"no error, no NaN: plausible weights, off by up to {_damage(buggy, fixed):.2f}; through all the "
        "layers of a pretrained model that is enough for gibberish",
    )


def _cache_before_rope() -> BugDemo:
    # A decoder that caches keys *before* rotating them, then rotates the whole cache at the current
    # position each step: every cached key gets the newest position, so relative positions vanish.
    seq, d = 6, 8
    q, k, _ = _qkv(seq, seq, d, seed=4)
    cos, sin = rope_angles(torch.arange(seq), d)
    rq, rk = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
    fixed = _weights(rq, rk, causal_mask(seq))[0, 0]
    rows = []
    for t in range(seq):
        cached = k[..., : t + 1, :]  # unrotated
        now_cos, now_sin = cos[t : t + 1], sin[t : t + 1]
        keys = apply_rotary(cached, now_cos, now_sin)  # every key rotated as if it sat at position t
        query = apply_rotary(q[..., t : t + 1, :], now_cos, now_sin)
        row = softmax(attention_scores(query, keys))[0, 0, 0]
        rows.append(F.pad(row, (0, seq - t - 1)))
    buggy = torch.stack(rows)
    plain = _weights(q, k, causal_mask(seq))[0, 0]
    return BugDemo(
        buggy,
        fixed,
        "weights",
        _TOKENS,
        _TOKENS,
        _damage(buggy, fixed),
        f"decoding differs from the full forward pass by up to {_damage(buggy, fixed):.2f}; the weights equal "
        f"those of attention with no positions at all (largest difference {_damage(buggy, plain):.1e})",
    )


def _top_left_causal() -> BugDemo:
    # Decoding 3 new tokens after 3 cached ones with is_causal=True: PyTorch aligns that mask to the
    # top-left corner when seq_q != seq_k, so the new queries see only the first keys.
    q, k, _ = _qkv(3, 6, 8, seed=5)
    top_left = torch.ones(3, 6, dtype=torch.bool).tril()
    buggy = _weights(q, k, top_left)[0, 0]
    fixed = _weights(q, k, causal_mask(3, 6))[0, 0]
    return BugDemo(
        buggy,
        fixed,
        "weights",
        _TOKENS[3:],
        _TOKENS,
        _damage(buggy, fixed),
        f"the new token 'step' (position 5) sees only keys 0..2 instead of 0..5: it ignores "
        f"{int((fixed[-1] > 0).sum() - (buggy[-1] > 0).sum())} tokens it should read, itself included",
    )


def _missing_scale() -> BugDemo:
    q, k, _ = _qkv(6, 6, 64, seed=6)
    fixed = softmax(attention_scores(q, k))[0, 0]
    buggy = softmax(q @ k.transpose(-2, -1))[0, 0]
    return BugDemo(
        buggy,
        fixed,
        "weights",
        _TOKENS,
        _TOKENS,
        _damage(buggy, fixed),
        f"with d_k = 64 the rows collapse onto one key (largest weight {float(buggy.max(-1).values.min()):.2f} "
        f"in every row, against {float(fixed.max(-1).values.min()):.2f} when scaled): gradients vanish",
    )


def _missing_output_projection() -> BugDemo:
    g = torch.Generator().manual_seed(7)
    x = torch.randn(1, 6, 8, generator=g)
    w_qkv = torch.randn(24, 8, generator=g) / math.sqrt(8)
    w_o = torch.randn(8, 8, generator=g) / math.sqrt(8)
    q, k, v = (split_heads(t, 2) for t in (x @ w_qkv.T).chunk(3, dim=-1))
    merged = merge_heads(softmax(attention_scores(q, k)) @ v)
    buggy, fixed = merged[0], (merged @ w_o.T)[0]
    return BugDemo(
        buggy,
        fixed,
        "output",
        _TOKENS,
        _labels(8, "f"),
        _damage(buggy, fixed),
        "the shapes are right, so nothing fails, but each head's output stays in its own columns: "
        f"nothing mixes the heads, and the output differs from the module's by up to {_damage(buggy, fixed):.2f}",
    )


def _gqa_repeat() -> BugDemo:
    # Grouped-query attention: 4 query heads share 2 key/value heads. Heads 0, 1 belong to kv head 0
    # and heads 2, 3 to kv head 1: expand with repeat_interleave. repeat tiles instead (0, 1, 0, 1).
    g = torch.Generator().manual_seed(8)
    q = torch.randn(1, 4, 6, 8, generator=g)
    k = torch.randn(1, 2, 6, 8, generator=g)
    fixed = _weights(q, k.repeat_interleave(2, dim=1), causal_mask(6))[0, 1]
    buggy = _weights(q, k.repeat(1, 2, 1, 1), causal_mask(6))[0, 1]
    return BugDemo(
        buggy,
        fixed,
        "weights",
        _TOKENS,
        _TOKENS,
        _damage(buggy, fixed),
        "query head 1 reads key/value head 1 instead of head 0: it runs, the shapes are right, and heads 0 "
        f"and 3 are unaffected; head 1's weights are off by up to {_damage(buggy, fixed):.2f}",
    )


#: Every bug of the zoo, in the notebook's order.
BUGS: tuple[Bug, ...] = (
    Bug(
        "inverted boolean mask",
        "a True = blocked mask passed to F.scaled_dot_product_attention, which reads True = may attend",
        "a causal model that reads the future, and rows of zeros where nothing is left",
        "pass ~blocked (or build the mask as True = may attend, like causal_mask)",
        _inverted_mask,
        (
            Report(
                "rasbt/LLMs-from-scratch#1061",
                "https://github.com/rasbt/LLMs-from-scratch/issues/1061",
                "a torch.triu(...).bool() mask passed to F.scaled_dot_product_attention; confirmed and closed",
            ),
        ),
    ),
    Bug(
        "additive -10000 mask",
        "blocked scores masked by adding -10000, a constant that is not far enough below the real scores",
        "fine in tests, wrong once real scores fall below about -10000 (large activations, long training)",
        "keep the addition, change the constant: -inf, or the dtype's minimum torch.finfo(dtype).min",
        _large_negative_mask,
        (
            Report(
                "huggingface/transformers#14859",
                "https://github.com/huggingface/transformers/issues/14859",
                "training T5 from scratch, raw scores went below -1e4 and the mask no longer removed keys",
            ),
            Report(
                "huggingface/transformers#17306",
                "https://github.com/huggingface/transformers/pull/17306",
                "'Fix -1e4 as attn mask': the added constant becomes torch.finfo(dtype).min",
            ),
        ),
    ),
    Bug(
        "RoPE pairing mismatch",
        "weights laid out for half-split pairs rotated as interleaved pairs (or the reverse)",
        "a converted checkpoint that loads without error and generates gibberish",
        "use the checkpoint's convention, or permute the q/k rows (permute_rope_weight)",
        _rope_pairing,
        (
            Report(
                "jzhang38/TinyLlama#24",
                "https://github.com/jzhang38/TinyLlama/issues/24",
                "TinyLlama converted for llama.cpp generated gibberish: its q/k rows were permuted wrongly",
            ),
            Report(
                "ggml-org/llama.cpp#3364",
                "https://github.com/ggml-org/llama.cpp/pull/3364",
                "the converter's permute fixed for grouped-query models",
            ),
            Report(
                "ggml-org/llama.cpp#22611",
                "https://github.com/ggml-org/llama.cpp/pull/22611",
                "a conversion path that skipped the q/k permutation: perplexity 4419 instead of 44",
            ),
        ),
    ),
    Bug(
        "keys cached before RoPE",
        "unrotated keys cached and the whole cache rotated at the current position each step",
        "generation that ignores word order after the first token; decoding differs from the forward pass",
        "rotate each key once at its own position, then cache the rotated key",
        _cache_before_rope,
    ),
    Bug(
        "top-left causal mask with a cache",
        "is_causal=True (or a square tril) used when the queries are the last tokens of a longer sequence",
        "decoding with a cache, or prefilling in chunks, gives different results than one full pass",
        "align the mask bottom-right: query i sits at position seq_k - seq_q + i (causal_mask(seq_q, seq_k))",
        _top_left_causal,
        (
            Report(
                "EleutherAI/gpt-neox#1178",
                "https://github.com/EleutherAI/gpt-neox/pull/1178",
                "a KV cache with FlashAttention's causal=True gave inaccurate results",
            ),
            Report(
                "onnx/onnx#8068",
                "https://github.com/onnx/onnx/pull/8068",
                "the ONNX Attention operator's is_causal moved from top-left to bottom-right for KV-cache decoding",
            ),
        ),
    ),
    Bug(
        "missing 1/√d_k",
        "scores q·kᵀ used without dividing by √d_k",
        "over-peaked softmax: outputs far from the reference model's, and vanishing gradients in training",
        "divide by √d_k (scale=None in the package and in PyTorch)",
        _missing_scale,
        (
            Report(
                "mlc-ai/mlc-llm#3426",
                "https://github.com/mlc-ai/mlc-llm/pull/3426",
                "a fallback attention path used scale 1.0: BERT embeddings at cosine 0.862 to the reference",
            ),
        ),
    ),
    Bug(
        "missing output projection",
        "the merged heads returned without W_O",
        "outputs that do not match the reference module's, with the right shape",
        "apply W_O to the merged heads (out_proj)",
        _missing_output_projection,
        (
            Report(
                "Kyubyong/transformer#117",
                "https://github.com/Kyubyong/transformer/issues/117",
                "its multi-head attention concatenates the heads with no projection after them; still open",
            ),
        ),
    ),
    Bug(
        "GQA with repeat",
        "key/value heads expanded with repeat (tiling 0, 1, 0, 1) instead of repeat_interleave (0, 0, 1, 1)",
        "a grouped-query model that runs and is wrong in some of its heads (how many depends on the shape)",
        "k.repeat_interleave(groups, dim=1), or enable_gqa=True in F.scaled_dot_product_attention",
        _gqa_repeat,
        (
            Report(
                "ekzhang/jax-js#180",
                "https://github.com/ekzhang/jax-js/pull/180",
                "'Fix GQA semantics': key/value heads were tiled instead of repeated",
            ),
        ),
    ),
)


def bug_names() -> tuple[str, ...]:
    """The names of :data:`BUGS`, in order."""
    return tuple(item.name for item in BUGS)


def bug(name: str) -> Bug:
    """The bug called ``name`` (one of :func:`bug_names`)."""
    for item in BUGS:
        if item.name == name:
            return item
    raise ValueError(f"name must be one of {list(bug_names())}, got {name!r}")
