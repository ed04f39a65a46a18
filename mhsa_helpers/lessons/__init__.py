"""The lessons: one folder per notebook, and :data:`LESSONS`, the one list of them.

Each folder ``mhsa_helpers/lessons/<slug>/`` holds what its notebook uses beyond the core:
``exercises.py`` (the checkers), ``explorer.py`` (the explorer) and, when its pictures are its
own, ``figures.py``. Tests, benchmarks, the Colab-like check and the README's table of the
series iterate :data:`LESSONS`; nothing else lists the notebooks.

Adding notebook 07 means: ``notebooks/07_<name>.ipynb``, its solutions notebook
``notebooks/solutions/07_<name>_solutions.ipynb``, a folder ``lessons/<slug>/`` and one
:class:`Lesson` at the end of :data:`LESSONS`.

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
    causal_mhsa,
    circulating_mistakes,
    induction_heads,
    long_context,
    multi_head,
    qkv_by_hand,
    real_model,
    rope,
    scaled_attention,
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


def _lesson(number: int, slug: str, name: str, title: str, module: Any, explorer: str, summary: str) -> Lesson:
    stem = f"{number:02d}_{name}"
    return Lesson(
        number=number,
        slug=slug,
        title=title,
        notebook=PurePosixPath(f"notebooks/{stem}.ipynb"),
        solutions=PurePosixPath(f"notebooks/solutions/{stem}_solutions.ipynb"),
        explorer=getattr(module, explorer),
        checkers=tuple(
            getattr(module.exercises, name) for name in module.exercises.__all__ if name.startswith("check_")
        ),
        summary=summary,
    )


#: Every lesson, in the order of the series (``number`` is 1, 2, ...).
LESSONS: tuple[Lesson, ...] = (
    _lesson(
        1,
        "qkv_by_hand",
        "qkv_by_hand",
        "Q, K, V by hand: “Money Bank Grows”",
        qkv_by_hand,
        "qkv_explorer",
        "one query with no weights, then every number of two-head attention on a three-word sentence, computed as on "
        "paper; E·W versus x·Wᵀ",
    ),
    _lesson(
        2,
        "scaled_attention",
        "scaled_dot_product_attention",
        "Scaled dot-product attention",
        scaled_attention,
        "scaling_explorer",
        "dot products as similarity, why divide by √d_k, the stable softmax, batched shapes, cross-attention, "
        "equality with PyTorch",
    ),
    _lesson(
        3,
        "causal_masking",
        "causal_masking",
        "Causal masking",
        causal_masking,
        "masking_explorer",
        "hiding the future: two equal masking methods, mask polarity, the fully-masked-row NaN trap, padding, dropout",
    ),
    _lesson(
        4,
        "multi_head",
        "multi_head_attention",
        "Multi-head attention",
        multi_head,
        "heads_explorer",
        "splitting into heads (view *and* transpose), W_O, the 512/8/64 sizes; optional: fused QKV layouts, "
        "`nn.MultiheadAttention`",
    ),
    _lesson(
        5,
        "rope",
        "rotary_position_embeddings",
        "Rotary position embeddings (RoPE)",
        rope,
        "rope_explorer",
        "absolute positions (sinusoidal, learned) and why RoPE replaced them, rotating pairs of dimensions, scores "
        "that depend only on m−n, interleaved versus half-split pairing",
    ),
    _lesson(
        6,
        "causal_mhsa",
        "causal_mhsa_with_rope",
        "Putting it together: causal multi-head self-attention with RoPE",
        causal_mhsa,
        "mhsa_explorer",
        "the whole attention layer, the functional and module interfaces, incremental decoding with a KV cache, "
        "cost versus length, the Transformer block around it",
    ),
    _lesson(
        7,
        "induction_heads",
        "induction_heads",
        "Watch attention learn: induction heads",
        induction_heads,
        "training_explorer",
        "a two-layer attention-only model trained live on the CPU: the phase change, previous-token and induction "
        "heads found by score and ablation, the fixed-offset shortcut, attention sinks, learned positions compared",
    ),
    _lesson(
        8,
        "attention_at_scale",
        "attention_at_scale",
        "Attention at scale: FlashAttention's online softmax, GQA/MQA and the KV cache's memory",
        attention_at_scale,
        "tiles_explorer",
        "the online softmax and tiled attention that never builds the (n, n) matrix, grouped- and multi-query "
        "attention, what the KV cache of real models costs, a preallocated cache",
    ),
    _lesson(
        9,
        "long_context",
        "long_context",
        "Long context: sliding windows, attention sinks, ALiBi and stretching RoPE",
        long_context,
        "stretch_explorer",
        "notebook 07's model reads 4× its trained length: sliding windows and how far stacked windows reach, "
        "attention sinks at their original and at StreamingLLM's cache positions, ALiBi's biases, and RoPE "
        "stretched by interpolation, NTK-aware scaling and YaRN, with their trade-offs measured",
    ),
    _lesson(
        10,
        "circulating_mistakes",
        "mistakes_that_circulate",
        "Mistakes that circulate",
        circulating_mistakes,
        "bug_zoo_explorer",
        "appendix: wrong versions of the formulas that get copied, written out and run, and a zoo of attention "
        "bugs in code (seven reported in public projects, linked; one illustration), each next to its fix",
    ),
    _lesson(
        11,
        "real_model",
        "real_model",
        "A real model runs on your attention",
        real_model,
        "real_attention_explorer",
        "SmolLM2-135M, installed from PyPI and built from this package's parts: its configuration and KV cache, "
        "text generated token by token, the RoPE pairing that breaks it, and real attention sinks, previous-token "
        "and induction heads, measured and ablated",
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
