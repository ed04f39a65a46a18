"""The lessons: one folder per notebook, and :data:`LESSONS`, the one list of them.

Each folder ``mhsa_helpers/lessons/<slug>/`` holds what its notebook uses beyond the core; the slug is the
notebook's name without its number (``05_rotary_position_embeddings.ipynb`` → ``lessons/rotary_position_embeddings``):
``exercises.py`` (the checkers), ``explorer.py`` (the explorer) and, when its pictures are its
own, ``figures.py``. Tests, benchmarks, the Colab-like check and the README's table of the
series iterate :data:`LESSONS`; nothing else lists the notebooks.

Adding notebook 07 means: ``notebooks/07_<name>.ipynb``, its solutions notebook
``notebooks/solutions/07_<name>_solutions.ipynb``, a folder ``lessons/<name>/`` and one
:class:`Lesson` at the end of :data:`LESSONS`, which lists the notebook's checkers in the order of its
exercises (registered here, not found by their names).

``python -m mhsa_helpers.lessons --markdown`` prints the README's table of the series.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from . import (
    attention_at_scale,
    causal_masking,
    causal_mhsa_with_rope,
    induction_heads,
    long_context,
    mistakes_that_circulate,
    multi_head_attention,
    qkv_by_hand,
    real_model,
    rotary_position_embeddings,
    scaled_dot_product_attention,
)

__all__ = ["LESSONS", "PLANNED", "Lesson", "lesson", "markdown_table"]


@dataclass(frozen=True)
class Lesson:
    """One notebook of the series and the teaching pieces it uses.

    ``notebook`` and ``solutions`` are paths relative to the repository's root; ``explorer`` is
    a factory called without arguments (its defaults are the notebook's first view); ``checkers``
    are the notebook's exercise checkers in the order of its exercises. ``summary`` is the
    README's one-line description of the idea.
    """

    number: int
    slug: str
    title: str
    notebook: PurePosixPath
    solutions: PurePosixPath | None
    explorer: Callable[[], Any] | None
    checkers: tuple[Callable[..., Any], ...]
    summary: str = ""


def _lesson(
    number: int,
    name: str,
    title: str,
    module: Any,
    explorer: str,
    *,
    checkers: tuple[Callable[..., Any], ...],
    summary: str,
) -> Lesson:
    stem = f"{number:02d}_{name}"
    return Lesson(
        number=number,
        slug=name,
        title=title,
        notebook=PurePosixPath(f"notebooks/{stem}.ipynb"),
        solutions=PurePosixPath(f"notebooks/solutions/{stem}_solutions.ipynb"),
        explorer=getattr(module, explorer),
        checkers=checkers,
        summary=summary,
    )


#: Every lesson, in the order of the series (``number`` is 1, 2, ...).
LESSONS: tuple[Lesson, ...] = (
    _lesson(
        1,
        "qkv_by_hand",
        "Q, K, V by hand: “Money Bank Grows”",
        qkv_by_hand,
        "qkv_explorer",
        checkers=(
            qkv_by_hand.check_uniform_prediction,
            qkv_by_hand.check_weights_debug,
            qkv_by_hand.check_attention_head,
        ),
        summary=(
            "one query with no weights, then every number of two-head attention on a three-word sentence, "
            "computed as on paper; E·W versus x·Wᵀ"
        ),
    ),
    _lesson(
        2,
        "scaled_dot_product_attention",
        "Scaled dot-product attention",
        scaled_dot_product_attention,
        "scaling_explorer",
        checkers=(
            scaled_dot_product_attention.check_spread_prediction,
            scaled_dot_product_attention.check_softmax,
            scaled_dot_product_attention.check_my_attention,
        ),
        summary=(
            "dot products as similarity, why divide by √d_k, the stable softmax, batched shapes, "
            "cross-attention, equality with PyTorch"
        ),
    ),
    _lesson(
        3,
        "causal_masking",
        "Causal masking",
        causal_masking,
        "masking_explorer",
        checkers=(
            causal_masking.check_cache_prediction,
            causal_masking.check_masked_softmax,
            causal_masking.check_cached_causal_mask,
            causal_masking.check_causal_attention,
        ),
        summary=(
            "hiding the future: two equal masking methods, mask polarity, the fully-masked-row NaN trap, "
            "padding, dropout"
        ),
    ),
    _lesson(
        4,
        "multi_head_attention",
        "Multi-head attention",
        multi_head_attention,
        "heads_explorer",
        checkers=(
            multi_head_attention.check_split_heads,
            multi_head_attention.check_parameter_prediction,
            multi_head_attention.check_multi_head_attention,
            multi_head_attention.check_my_multi_head_attention,
        ),
        summary=(
            "splitting into heads (view *and* transpose), W_O, the 512/8/64 sizes; optional: fused QKV "
            "layouts, `nn.MultiheadAttention`"
        ),
    ),
    _lesson(
        5,
        "rotary_position_embeddings",
        "Rotary position embeddings (RoPE)",
        rotary_position_embeddings,
        "rope_explorer",
        checkers=(
            rotary_position_embeddings.check_score_prediction,
            rotary_position_embeddings.check_rope_attention,
            rotary_position_embeddings.check_apply_rope,
        ),
        summary=(
            "absolute positions (sinusoidal, learned) and why RoPE replaced them, rotating pairs of "
            "dimensions, scores that depend only on m−n, interleaved versus half-split pairing"
        ),
    ),
    _lesson(
        6,
        "causal_mhsa_with_rope",
        "Putting it together: causal multi-head self-attention with RoPE",
        causal_mhsa_with_rope,
        "mhsa_explorer",
        checkers=(
            causal_mhsa_with_rope.check_mask_prediction,
            causal_mhsa_with_rope.check_attend_with_cache,
            causal_mhsa_with_rope.check_my_causal_self_attention,
        ),
        summary=(
            "the whole attention layer, the functional and module interfaces, incremental decoding with a KV "
            "cache, cost versus length, the Transformer block around it"
        ),
    ),
    _lesson(
        7,
        "induction_heads",
        "Watch attention learn: induction heads",
        induction_heads,
        "training_explorer",
        checkers=(
            induction_heads.check_untrained_prediction,
            induction_heads.check_induction_score,
            induction_heads.check_repeat_chunk,
            induction_heads.check_ablate_head,
        ),
        summary=(
            "a two-layer attention-only model trained live on the CPU: the phase change, previous-token and "
            "induction heads found by score and ablation, the fixed-offset shortcut, attention sinks, learned "
            "positions compared"
        ),
    ),
    _lesson(
        8,
        "attention_at_scale",
        "Attention at scale: FlashAttention's online softmax, GQA/MQA and the KV cache's memory",
        attention_at_scale,
        "tiles_explorer",
        checkers=(
            attention_at_scale.check_online_update,
            attention_at_scale.check_online_attention,
            attention_at_scale.check_expand_kv,
            attention_at_scale.check_kv_cache_bytes,
        ),
        summary=(
            "the online softmax and tiled attention that never builds the (n, n) matrix, grouped- and "
            "multi-query attention, what the KV cache of real models costs, a preallocated cache"
        ),
    ),
    _lesson(
        9,
        "long_context",
        "Long context: sliding windows, attention sinks, ALiBi and stretching RoPE",
        long_context,
        "stretch_explorer",
        checkers=(
            long_context.check_window_mask,
            long_context.check_alibi_bias,
            long_context.check_ntk_frequencies,
        ),
        summary=(
            "notebook 07's model reads 4× its trained length: sliding windows and how far stacked windows "
            "reach, attention sinks at their original and at StreamingLLM's cache positions, ALiBi's biases, "
            "and RoPE stretched by interpolation, NTK-aware scaling and YaRN, with their trade-offs measured"
        ),
    ),
    _lesson(
        10,
        "mistakes_that_circulate",
        "Mistakes that circulate",
        mistakes_that_circulate,
        "bug_zoo_explorer",
        checkers=(
            mistakes_that_circulate.check_masked_weights,
            mistakes_that_circulate.check_decode_mask,
        ),
        summary=(
            "appendix: wrong versions of the formulas that get copied, written out and run, and a zoo of "
            "attention bugs in code (seven reported in public projects, linked; one illustration), each next "
            "to its fix"
        ),
    ),
    _lesson(
        11,
        "real_model",
        "A real model runs on your attention",
        real_model,
        "real_attention_explorer",
        checkers=(
            real_model.check_head_induction_score,
            real_model.check_sink_heads,
            real_model.check_copy_loss,
            real_model.check_ablation_prediction,
        ),
        summary=(
            "SmolLM2-135M, installed from PyPI and built from this package's parts: its configuration and KV "
            "cache, text generated token by token, the RoPE pairing that breaks it, and real attention sinks, "
            "previous-token and induction heads, measured and ablated"
        ),
    ),
)

#: Notebooks the series plans but does not have yet, as ``(number, title)``: the README's table lists
#: them, so that the numbering of the lessons has no unexplained gap.
PLANNED: tuple[tuple[int, str], ...] = ()


def lesson(number: int) -> Lesson:
    """The lesson of notebook ``number`` (1-based)."""
    for candidate in LESSONS:
        if candidate.number == number:
            return candidate
    raise ValueError(f"number must be one of {[c.number for c in LESSONS]}, got number={number!r}")


def markdown_table() -> str:
    """The README's table of the series: number, linked title and the idea, one row per lesson."""
    rows = {
        item.number: f"| {item.number:02d} | [{item.title}]({item.notebook}) | {item.summary} |" for item in LESSONS
    }
    rows.update({number: f"| {number:02d} | {title} | *planned* |" for number, title in PLANNED})
    return "\n".join(["| # | notebook | the idea |", "|---|---|---|", *(rows[n] for n in sorted(rows))])
