"""The lessons: one folder per notebook, and :data:`LESSONS`, the one list of them.

Each folder ``mhsa_helpers/lessons/<slug>/`` holds what its notebook uses beyond the core; the slug is the
notebook's name without its number (``05_rotary_position_embeddings.ipynb`` → ``lessons/rotary_position_embeddings``):
``exercises.py`` (the checkers), ``explorer.py`` (the explorer) and, when its pictures are its
own, ``figures.py``. Tests, benchmarks, the Colab-like check and the README's table of the
series iterate :data:`LESSONS`; nothing else lists the notebooks.

Adding notebook 14 means: ``notebooks/14_<name>.ipynb``, its solutions notebook
``notebooks/solutions/14_<name>_solutions.ipynb``, a folder ``lessons/<name>/`` and one
:class:`Lesson` at the end of :data:`LESSONS`, which lists the notebook's exercises in their order, each
with its checker (registered here, not found by their names).

Each lesson also states its time, as ARENA does: every exercise is an :class:`Exercise` with its kind
(predict, debug, build or order), a difficulty from 1 to 3 and minutes read from :data:`EXERCISE_MINUTES`, and
the lesson's reading time is measured from its notebook (``tests/test_sources.py``: prose at 200 words a
minute, half a minute per code cell). ``python scripts/sync_notebooks.py`` writes the time line of each
notebook's first cell and the label under each exercise's heading from here.

``python -m mhsa_helpers.lessons --markdown`` prints the README's table of the series.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Literal

from . import (
    attention_at_scale,
    causal_masking,
    causal_mhsa_with_rope,
    induction_heads,
    long_context,
    mistakes_that_circulate,
    multi_head_attention,
    multi_head_latent_attention,
    qkv_by_hand,
    real_model,
    rotary_position_embeddings,
    scaled_dot_product_attention,
    sinks_and_gates,
)

__all__ = [
    "EXERCISE_MINUTES",
    "LESSONS",
    "PLANNED",
    "Exercise",
    "Lesson",
    "exercise_label",
    "lesson",
    "markdown_table",
    "time_line",
]

Kind = Literal["predict", "debug", "build", "order"]

#: Minutes an exercise takes, by its kind and difficulty (1, 2, 3): a prediction is worked out on paper, a debug
#: exercise read line by line against the notebook, a build written and revised until its checker agrees. Set
#: from a new learner's pass through notebooks 01–06 doing every exercise, which took 6 to 7.5 hours, reading
#: included (these notebooks had stated 4.2 hours: their reading time plus 5 minutes an exercise).
EXERCISE_MINUTES: dict[str, tuple[int, int, int]] = {
    "predict": (3, 5, 8),
    "debug": (10, 15, 20),
    "build": (10, 20, 30),
    "order": (10, 15, 20),
}


@dataclass(frozen=True)
class Exercise:
    """One exercise of a notebook: ``title`` as its heading reads after "Exercise N · ", its ``kind``, a
    ``difficulty`` from 1 to 3 and the ``checker`` its notebook calls (``None`` for one without)."""

    title: str
    kind: Kind
    difficulty: int
    checker: Callable[..., Any] | None = None

    @property
    def minutes(self) -> int:
        return EXERCISE_MINUTES[self.kind][self.difficulty - 1]


def exercise_label(exercise: Exercise) -> str:
    """The line under an exercise's heading: its kind, difficulty and minutes."""
    dots = "●" * exercise.difficulty + "○" * (3 - exercise.difficulty)
    return f"*{exercise.kind.capitalize()} · difficulty {dots} · about {exercise.minutes} minutes*"


@dataclass(frozen=True)
class Lesson:
    """One notebook of the series and the teaching pieces it uses.

    ``notebook`` and ``solutions`` are paths relative to the repository's root; ``explorer`` is
    a factory called without arguments (its defaults are the notebook's first view); ``exercises``
    are the notebook's exercises in their order, ``reading_minutes`` the time its text and cells take
    without them (rounded to 5). ``summary`` is the README's one-line description of the idea; ``recall`` checks
    the questions on the earlier notebooks that open it (every notebook but the first).
    """

    number: int
    slug: str
    title: str
    notebook: PurePosixPath
    solutions: PurePosixPath | None
    explorer: Callable[[], Any] | None
    exercises: tuple[Exercise, ...]
    reading_minutes: int
    summary: str = ""
    recall: Callable[..., Any] | None = None

    @property
    def checkers(self) -> tuple[Callable[..., Any], ...]:
        """The notebook's exercise checkers, in the order of its exercises."""
        return tuple(exercise.checker for exercise in self.exercises if exercise.checker is not None)

    @property
    def exercise_minutes(self) -> int:
        return sum(exercise.minutes for exercise in self.exercises)


def time_line(item: Lesson) -> str:
    """The sentence of a notebook's first cell that states its time."""
    count = len(item.exercises)
    return (
        f"Time: about {item.reading_minutes} minutes to read and run, and about {item.exercise_minutes} for the "
        f"{count} exercise{'s' if count > 1 else ''} (each labelled with its kind, difficulty and minutes)."
    )


def _lesson(
    number: int,
    name: str,
    title: str,
    module: Any,
    explorer: str,
    *,
    exercises: tuple[Exercise, ...],
    reading_minutes: int,
    summary: str,
    recall: Callable[..., Any] | None = None,
) -> Lesson:
    stem = f"{number:02d}_{name}"
    return Lesson(
        number=number,
        slug=name,
        title=title,
        notebook=PurePosixPath(f"notebooks/{stem}.ipynb"),
        solutions=PurePosixPath(f"notebooks/solutions/{stem}_solutions.ipynb"),
        explorer=getattr(module, explorer),
        exercises=exercises,
        reading_minutes=reading_minutes,
        summary=summary,
        recall=recall,
    )


#: Every lesson, in the order of the series (``number`` is 1, 2, ...).
LESSONS: tuple[Lesson, ...] = (
    _lesson(
        1,
        "qkv_by_hand",
        "Q, K, V by hand: “Money Bank Grows”",
        qkv_by_hand,
        "qkv_explorer",
        exercises=(
            Exercise("Predict: a head whose keys are all zero", "predict", 1, qkv_by_hand.check_uniform_prediction),
            Exercise("Debug: two bugs in the attention weights", "debug", 2, qkv_by_hand.check_weights_debug),
            Exercise("One word's context vector", "build", 1, qkv_by_hand.check_context_vector),
            Exercise("Your own attention head", "build", 2, qkv_by_hand.check_attention_head),
            Exercise("Two heads and W_O", "build", 1, qkv_by_hand.check_multi_head_output),
        ),
        reading_minutes=35,
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
        exercises=(
            Exercise(
                "Predict: how fast do the scores grow?",
                "predict",
                1,
                scaled_dot_product_attention.check_spread_prediction,
            ),
            Exercise("Debug: a softmax that still overflows", "debug", 2, scaled_dot_product_attention.check_softmax),
            Exercise(
                "Your own scaled dot-product attention, with a mask",
                "build",
                2,
                scaled_dot_product_attention.check_my_attention,
            ),
            Exercise(
                "Cross-attention with your own attention",
                "build",
                2,
                scaled_dot_product_attention.check_cross_attention,
            ),
        ),
        reading_minutes=30,
        summary=(
            "dot products as similarity, why divide by √d_k, the stable softmax, batched shapes, "
            "cross-attention, equality with PyTorch"
        ),
        recall=scaled_dot_product_attention.check_recall,
    ),
    _lesson(
        3,
        "causal_masking",
        "Causal masking",
        causal_masking,
        "masking_explorer",
        exercises=(
            Exercise("Predict: what does a cached query see?", "predict", 1, causal_masking.check_cache_prediction),
            Exercise("Debug: a masked softmax that gives NaN", "debug", 2, causal_masking.check_masked_softmax),
            Exercise("The causal mask for cached queries", "build", 2, causal_masking.check_cached_causal_mask),
            Exercise("Causal attention through your own attention", "build", 2, causal_masking.check_causal_attention),
            Exercise("The padding mask", "build", 1, causal_masking.check_padding_mask),
            Exercise("A padded batch, causal", "build", 1, causal_masking.check_padded_causal_attention),
            Exercise("Dropout on the weights", "build", 2, causal_masking.check_attention_dropout),
        ),
        reading_minutes=35,
        summary=(
            "hiding the future: two equal masking methods, mask polarity, the fully-masked-row NaN trap, "
            "padding, dropout"
        ),
        recall=causal_masking.check_recall,
    ),
    _lesson(
        4,
        "multi_head_attention",
        "Multi-head attention",
        multi_head_attention,
        "heads_explorer",
        exercises=(
            Exercise("Split into heads", "build", 1, multi_head_attention.check_split_heads),
            Exercise("Order the multi-head recipe", "order", 2, multi_head_attention.check_recipe_order),
            Exercise("Predict the size of your module", "predict", 1, multi_head_attention.check_parameter_prediction),
            Exercise("Find the bug", "debug", 2, multi_head_attention.check_multi_head_attention),
            Exercise("Heads one at a time", "build", 2, multi_head_attention.check_heads_one_by_one),
            Exercise(
                "Your own multi-head attention module", "build", 3, multi_head_attention.check_my_multi_head_attention
            ),
            Exercise(
                "Load weights from `nn.MultiheadAttention`", "build", 2, multi_head_attention.check_load_from_torch
            ),
        ),
        reading_minutes=35,
        summary=(
            "splitting into heads (view *and* transpose), W_O, the 512/8/64 sizes; optional: fused QKV "
            "layouts, `nn.MultiheadAttention`"
        ),
        recall=multi_head_attention.check_recall,
    ),
    _lesson(
        5,
        "rotary_position_embeddings",
        "Rotary position embeddings (RoPE)",
        rotary_position_embeddings,
        "rope_explorer",
        exercises=(
            Exercise("Predict a score", "predict", 2, rotary_position_embeddings.check_score_prediction),
            Exercise("Find the bug", "debug", 2, rotary_position_embeddings.check_rope_attention),
            Exercise("Your `my_apply_rope`", "build", 2, rotary_position_embeddings.check_apply_rope),
            Exercise(
                "RoPE as a complex multiplication", "build", 2, rotary_position_embeddings.check_apply_rope_complex
            ),
            Exercise("The angle table, computed once", "build", 2, rotary_position_embeddings.check_rotary_embedding),
        ),
        reading_minutes=40,
        summary=(
            "absolute positions (sinusoidal, learned) and why RoPE replaced them, rotating pairs of "
            "dimensions, scores that depend only on m−n, interleaved versus half-split pairing, the complex-number "
            "form, the angle table computed once"
        ),
        recall=rotary_position_embeddings.check_recall,
    ),
    _lesson(
        6,
        "causal_mhsa_with_rope",
        "Putting it together: causal multi-head self-attention with RoPE",
        causal_mhsa_with_rope,
        "mhsa_explorer",
        exercises=(
            Exercise("Predict the mask", "predict", 1, causal_mhsa_with_rope.check_mask_prediction),
            Exercise("Order a cached decoding step", "order", 2, causal_mhsa_with_rope.check_decoding_order),
            Exercise("Find the bug", "debug", 3, causal_mhsa_with_rope.check_attend_with_cache),
            Exercise(
                "Your own causal self-attention with RoPE and a cache",
                "build",
                3,
                causal_mhsa_with_rope.check_my_causal_self_attention,
            ),
            Exercise("Your own KV cache", "build", 1, causal_mhsa_with_rope.check_kv_cache),
            Exercise("A preallocated cache", "build", 2, causal_mhsa_with_rope.check_static_cache),
            Exercise("Your own Transformer block", "build", 2, causal_mhsa_with_rope.check_my_block),
        ),
        reading_minutes=45,
        summary=(
            "the whole attention layer, the functional and module interfaces, incremental decoding with a KV "
            "cache (grown and preallocated), cost versus length, the Transformer block around it"
        ),
        recall=causal_mhsa_with_rope.check_recall,
    ),
    _lesson(
        7,
        "induction_heads",
        "Watch attention learn: induction heads",
        induction_heads,
        "training_explorer",
        exercises=(
            Exercise(
                "Predict: the score of a head that has learned nothing",
                "predict",
                2,
                induction_heads.check_untrained_prediction,
            ),
            Exercise("The induction score", "build", 2, induction_heads.check_induction_score),
            Exercise("Build the repeated batch", "build", 2, induction_heads.check_repeat_chunk),
            Exercise("Debug: ablate a head", "debug", 1, induction_heads.check_ablate_head),
            Exercise("Train your own module", "build", 1),
        ),
        reading_minutes=30,
        summary=(
            "a two-layer attention-only model trained live on the CPU: the phase change, previous-token and "
            "induction heads found by score and ablation, the fixed-offset shortcut, attention sinks, learned "
            "positions compared"
        ),
        recall=induction_heads.check_recall,
    ),
    _lesson(
        8,
        "attention_at_scale",
        "Attention at scale: FlashAttention's online softmax, GQA/MQA and the KV cache's memory",
        attention_at_scale,
        "tiles_explorer",
        exercises=(
            Exercise("Order the online-softmax update", "order", 1, attention_at_scale.check_online_order),
            Exercise("One online-softmax step", "build", 2, attention_at_scale.check_online_update),
            Exercise("Attention, tile by tile", "build", 2, attention_at_scale.check_online_attention),
            Exercise("Expanding key/value heads", "build", 1, attention_at_scale.check_expand_kv),
            Exercise("The size of a KV cache", "build", 1, attention_at_scale.check_kv_cache_bytes),
        ),
        reading_minutes=25,
        summary=(
            "the online softmax and tiled attention that never builds the (n, n) matrix, grouped- and "
            "multi-query attention, what the KV cache of real models costs, a preallocated cache"
        ),
        recall=attention_at_scale.check_recall,
    ),
    _lesson(
        9,
        "long_context",
        "Long context: sliding windows, attention sinks, ALiBi and stretching RoPE",
        long_context,
        "stretch_explorer",
        exercises=(
            Exercise("The window mask", "build", 1, long_context.check_window_mask),
            Exercise("ALiBi's bias", "build", 1, long_context.check_alibi_bias),
            Exercise("NTK-aware frequencies", "build", 1, long_context.check_ntk_frequencies),
        ),
        reading_minutes=30,
        summary=(
            "notebook 07's model reads 4× its trained length: sliding windows and how far stacked windows "
            "reach, attention sinks at their original and at StreamingLLM's cache positions, ALiBi's biases, "
            "and RoPE stretched by interpolation, NTK-aware scaling and YaRN, with their trade-offs measured"
        ),
        recall=long_context.check_recall,
    ),
    _lesson(
        10,
        "mistakes_that_circulate",
        "Mistakes that circulate",
        mistakes_that_circulate,
        "bug_zoo_explorer",
        exercises=(
            Exercise("The masked weights", "build", 2, mistakes_that_circulate.check_masked_weights),
            Exercise("The mask of a decoding step", "build", 1, mistakes_that_circulate.check_decode_mask),
        ),
        reading_minutes=25,
        summary=(
            "appendix: wrong versions of the formulas that get copied, written out and run, and a zoo of "
            "attention bugs in code (seven reported in public projects, linked; one illustration), each next "
            "to its fix"
        ),
        recall=mistakes_that_circulate.check_recall,
    ),
    _lesson(
        11,
        "real_model",
        "A real model runs on your attention",
        real_model,
        "real_attention_explorer",
        exercises=(
            Exercise("A head's induction score", "build", 2, real_model.check_head_induction_score),
            Exercise("Find the sink heads", "build", 1, real_model.check_sink_heads),
            Exercise("Debug: the loss on the second copy", "debug", 2, real_model.check_copy_loss),
            Exercise("Predict, then measure", "predict", 2, real_model.check_ablation_prediction),
        ),
        reading_minutes=25,
        summary=(
            "SmolLM2-135M, installed from PyPI and built from this package's parts: its configuration and KV "
            "cache, text generated token by token, the RoPE pairing that breaks it, and real attention sinks, "
            "previous-token and induction heads, measured and ablated"
        ),
        recall=real_model.check_recall,
    ),
    _lesson(
        12,
        "sinks_and_gates",
        "Where attention goes when it has nowhere to go: sinks, softmax-plus-one and gated attention",
        sinks_and_gates,
        "sink_explorer",
        exercises=(
            Exercise("Predict: where does the weight go?", "predict", 1, sinks_and_gates.check_sink_prediction),
            Exercise("The sink softmax", "build", 2, sinks_and_gates.check_sink_softmax),
            Exercise("Sinks and gates in your own module", "build", 3, sinks_and_gates.check_my_sink_gate_attention),
        ),
        reading_minutes=30,
        summary=(
            "a sink logit per head (gpt-oss), softmax-plus-one and output gates (Qwen3-Next): the weight a head may "
            "give to nothing, proven equal to a rescaled softmax, trained side by side, and measured in the real model"
        ),
        recall=sinks_and_gates.check_recall,
    ),
    _lesson(
        13,
        "multi_head_latent_attention",
        "Multi-head latent attention: a cache of one small vector per token",
        multi_head_latent_attention,
        "latent_explorer",
        exercises=(
            Exercise(
                "Predict: what does a token cost in the cache?",
                "predict",
                1,
                multi_head_latent_attention.check_latent_prediction,
            ),
            Exercise("Absorbed scores", "build", 2, multi_head_latent_attention.check_absorbed_scores),
            Exercise(
                "Latent attention in your own module", "build", 3, multi_head_latent_attention.check_my_latent_attention
            ),
        ),
        reading_minutes=30,
        summary=(
            "DeepSeek-V2's latent cache (576 numbers per token and layer against MHA's 32,768), absorption proven and "
            "counted per decoding step, why RoPE needs a decoupled key, and latent attention trained beside MHA, GQA "
            "and MQA"
        ),
        recall=multi_head_latent_attention.check_recall,
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
    """The README's table of the series: number, linked title, the idea and the time (reading, and the
    exercises with their count), one row per lesson, and the sums."""
    rows = {
        item.number: f"| {item.number:02d} | [{item.title}]({item.notebook}) | {item.summary} | "
        f"{item.reading_minutes} min | {item.exercise_minutes} min ({len(item.exercises)}) |"
        for item in LESSONS
    }
    rows.update({number: f"| {number:02d} | {title} | *planned* | | |" for number, title in PLANNED})
    reading = sum(item.reading_minutes for item in LESSONS)
    exercises = sum(item.exercise_minutes for item in LESSONS)
    count = sum(len(item.exercises) for item in LESSONS)
    return "\n".join(
        [
            "| # | notebook | the idea | reading | exercises |",
            "|---|---|---|---|---|",
            *(rows[n] for n in sorted(rows)),
            f"| | **all {len(LESSONS)}** | {_hours(reading + exercises)} in all | {_hours(reading)} | "
            f"{_hours(exercises)} ({count}) |",
        ]
    )


def _hours(minutes: int) -> str:
    return f"{minutes // 60} h {minutes % 60:02d} min"
