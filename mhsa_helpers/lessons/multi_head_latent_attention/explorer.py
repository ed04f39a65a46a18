"""Notebook 13's explorer: what latent attention caches, what it costs in parameters, and what one decoding step
costs on each of its two paths, for a small model and for DeepSeek-V2.

Every number is counted from the shapes of :class:`~mhsa_helpers.mla.MultiHeadLatentAttention` (no bias, as the
module): the tests check them against a real module (its parameters, what its
:class:`~mhsa_helpers.mla.LatentCache` holds, and ``torch.utils.flop_counter.FlopCounterMode`` on a decoding step
of each path)::

    cache per token and layer   MHA 2·h·d_head, GQA 2·g·d_head, MQA 2·d_head, MLA d_latent + d_rope
    one decoding step           (one new token after ``context`` cached ones: ``context + 1`` keys)
      projections               the new token's queries, latent, rotated key and W_O (the same on both paths)
      materialised              + every head's keys and values rebuilt from all the latents: 2·keys·d_latent·h·d_head
                                + scores over d_head + d_rope and a weighted sum over d_head, per head and key
      absorbed                  + the query taken into the latent space and the weighted latents taken up by W_UV:
                                  2·h·d_head·d_latent
                                + scores over d_latent + d_rope and a weighted sum over d_latent, per head and key
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any, NamedTuple

import ipywidgets as widgets
import numpy as np
from matplotlib.ticker import MaxNLocator

from ...checks import expect_bool, expect_choice, expect_int
from ...kv_cache_memory import DEEPSEEK_V2
from ...teaching.explorer import SLIDER, Explorer

__all__ = [
    "CONTEXTS",
    "D_LATENTS",
    "D_ROPES",
    "HEADS",
    "LATENT_PRESETS",
    "LatentShape",
    "StepCount",
    "attention_parameters",
    "cache_per_token",
    "decoding_multiply_adds",
    "latent_explorer",
]


@dataclass(frozen=True)
class LatentShape:
    """The shape of one latent-attention layer (the arguments of
    :class:`~mhsa_helpers.mla.MultiHeadLatentAttention`) and the number of layers of its model.

    ``q_latent`` is ``None`` when the queries are projected from ``x`` directly; ``d_rope`` 0 means no position
    part. ``source`` says where the numbers were published."""

    name: str
    d_model: int
    num_heads: int
    d_head: int
    d_latent: int
    d_rope: int
    q_latent: int | None = None
    num_layers: int = 1
    source: str = ""

    def __post_init__(self) -> None:
        for field in ("d_model", "num_heads", "d_head", "d_latent", "num_layers"):
            expect_int(field, getattr(self, field))
        expect_int("d_rope", self.d_rope, 0)
        if self.q_latent is not None:
            expect_int("q_latent", self.q_latent)


#: The explorer's models. DeepSeek-V2: the cache shape of :data:`~mhsa_helpers.kv_cache_memory.DEEPSEEK_V2`, with its
#: hidden_size=5120 and q_lora_rank=1536 (q_latent) from deepseek-ai/DeepSeek-V2's config.json. "small": notebook 07's
#: model (2 layers, d_model 64, 4 heads of 16) with the latent attention section 5 trains, 24 + 8 numbers per token.
LATENT_PRESETS: Mapping[str, LatentShape] = MappingProxyType(
    {
        "small": LatentShape(
            "small", d_model=64, num_heads=4, d_head=16, d_latent=24, d_rope=8, num_layers=2, source="notebook 07"
        ),
        "DeepSeek-V2": LatentShape(
            DEEPSEEK_V2.name,
            d_model=5120,
            num_heads=DEEPSEEK_V2.num_heads,
            d_head=DEEPSEEK_V2.head_dim,
            d_latent=DEEPSEEK_V2.d_latent,
            d_rope=DEEPSEEK_V2.d_rope,
            q_latent=1536,
            num_layers=DEEPSEEK_V2.num_layers,
            source=DEEPSEEK_V2.source,
        ),
    }
)
#: The settings each slider offers (both presets' values among them).
D_LATENTS = (8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 2048)
D_ROPES = (0, 4, 8, 16, 32, 64, 128)
HEADS = (1, 2, 4, 8, 16, 32, 64, 128)
#: Cached tokens before the decoding step.
CONTEXTS = (256, 1024, 4096, 16384, 32768, 131072)


def cache_per_token(shape: LatentShape, gqa_kv_heads: int | None = None) -> dict[str, int]:
    """Numbers cached per token and layer: ``{"MHA": 2·h·d_head, "GQA": 2·g·d_head, "MQA": 2·d_head, "MLA":
    d_latent + d_rope}``, the first three for attention with the same heads (``g = gqa_kv_heads``, default
    ``max(1, h // 4)``)."""
    heads = shape.num_heads
    groups = max(1, heads // 4) if gqa_kv_heads is None else expect_int("gqa_kv_heads", gqa_kv_heads, 1, heads)
    return {
        "MHA": 2 * heads * shape.d_head,
        "GQA": 2 * groups * shape.d_head,
        "MQA": 2 * shape.d_head,
        "MLA": shape.d_latent + shape.d_rope,
    }


def attention_parameters(shape: LatentShape) -> dict[str, int]:
    """Parameters of one attention layer, no bias: ``"MLA"``, the module's (``W_DQ`` with ``q_latent``, ``W_UQ``,
    ``W_QR``, ``W_DKV``, ``W_KR``, ``W_UK``, ``W_UV``, ``W_O``), and ``"MHA"``, multi-head attention with the same
    heads (``W_Q``, ``W_K``, ``W_V``: ``d_model × h·d_head`` each, and ``W_O``)."""
    width, rope = shape.num_heads * shape.d_head, shape.num_heads * shape.d_rope
    q_in = shape.d_model if shape.q_latent is None else shape.q_latent
    queries = (0 if shape.q_latent is None else shape.d_model * shape.q_latent) + q_in * (width + rope)
    keys_values = shape.d_model * (shape.d_latent + shape.d_rope) + 2 * shape.d_latent * width
    return {"MHA": 4 * shape.d_model * width, "MLA": queries + keys_values + width * shape.d_model}


class StepCount(NamedTuple):
    """Multiply-adds of one call, in three parts: ``projections`` (the new tokens' queries, latent and rotated key,
    and ``W_O``), ``keys_values`` (materialised: every head's keys and values rebuilt; absorbed: ``W_UK`` taken into
    the queries and ``W_UV`` after) and ``attention`` (scores and weighted sum)."""

    projections: int
    keys_values: int
    attention: int

    @property
    def total(self) -> int:
        return self.projections + self.keys_values + self.attention


def decoding_multiply_adds(shape: LatentShape, context: int, *, absorbed: bool, new: int = 1) -> StepCount:
    """Multiply-adds of ``new`` tokens (one: a decoding step) after ``context`` cached ones, on the materialised or
    the ``absorbed`` path: the counting of ``benchmarks/bench_mla.py``, with ``q_latent``. What
    ``FlopCounterMode`` counts, halved (it counts a multiply-add as 2 FLOPs); RoPE, the softmax and the
    concatenations are not matrix products and are not counted. Causal masking is not discounted."""
    context = expect_int("context", context, 0)
    new = expect_int("new", new)
    absorbed = expect_bool("absorbed", absorbed)
    heads, d_head, d_latent, d_rope = shape.num_heads, shape.d_head, shape.d_latent, shape.d_rope
    width, keys = heads * d_head, context + new
    if shape.q_latent is None:
        queries = shape.d_model * (width + heads * d_rope)
    else:
        queries = shape.d_model * shape.q_latent + shape.q_latent * (width + heads * d_rope)
    projections = new * (queries + shape.d_model * (d_latent + d_rope) + width * shape.d_model)
    if absorbed:
        return StepCount(projections, 2 * heads * new * d_head * d_latent, heads * new * keys * (2 * d_latent + d_rope))
    return StepCount(projections, 2 * keys * d_latent * width, heads * new * keys * (2 * d_head + d_rope))


def _shape(preset: str, d_latent: int, d_rope: int, heads: int) -> LatentShape:
    return replace(LATENT_PRESETS[preset], d_latent=d_latent, d_rope=d_rope, num_heads=heads)


#: The top of the cache and step panels, in percent of their reference bar: room for the number above it.
_TOP = 125.0
#: The parameter panel's tops, in percent of MHA's: the first that holds MLA's bar with room above it.
_PARAM_TOPS = (125.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0)


def _param_top(data: dict[str, Any]) -> float:
    ratio = 100.0 * data["parameters"]["MLA"] / data["parameters"]["MHA"]
    return next((top for top in _PARAM_TOPS if ratio * 1.2 <= top), ratio * 1.25)


def _short(n: float) -> str:
    """``69_036_515_328`` -> ``"69 bn"``: a bar's count in three digits (k thousand, M million, bn billion)."""
    for scale, unit in ((1e9, "bn"), (1e6, "M"), (1e3, "k")):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n):,}"


_CACHE_COLORS = ("#9ecae1", "#fdae6b", "#a1d99b", "#bcbddc")
_PART_COLORS = {"projections": "#d9d9d9", "keys_values": "#fd8d3c", "attention": "#6baed6"}
_PART_NAMES = {
    "projections": "projections of the new token",
    "keys_values": "keys and values rebuilt / W_UK, W_UV absorbed",
    "attention": "scores and weighted sum",
}


class _LatentExplorer(Explorer):
    figsize = (9.6, 3.6)
    options_controls = ("preset",)

    def __init__(self, preset: str, d_latent: int, d_rope: int, heads: int, context: int) -> None:
        controls = {
            "preset": widgets.ToggleButtons(options=list(LATENT_PRESETS), value=preset, description="model"),
            "d_latent": widgets.SelectionSlider(
                options=list(D_LATENTS), value=d_latent, description="d_latent", **SLIDER
            ),
            "d_rope": widgets.SelectionSlider(options=list(D_ROPES), value=d_rope, description="d_rope", **SLIDER),
            "heads": widgets.SelectionSlider(options=list(HEADS), value=heads, description="heads", **SLIDER),
            "context": widgets.SelectionSlider(
                options=list(CONTEXTS), value=context, description="cached tokens", **SLIDER
            ),
        }
        super().__init__(controls, title="Latent attention: the cache, the parameters and one decoding step")

    def _sync(self, changed: str) -> None:
        if changed == "preset":  # a model sets its own latent, position part and heads
            shape = LATENT_PRESETS[self.controls["preset"].value]
            self.controls["d_latent"].value = shape.d_latent
            self.controls["d_rope"].value = shape.d_rope
            self.controls["heads"].value = shape.num_heads

    def _check(self, values: dict[str, Any]) -> None:
        _check_settings(values["preset"], values["d_latent"], values["d_rope"], values["heads"], values["context"])

    def _compute(self, values: dict[str, Any]) -> dict[str, Any]:
        preset, context = values["preset"], int(values["context"])
        shape = _shape(preset, int(values["d_latent"]), int(values["d_rope"]), int(values["heads"]))
        cache = cache_per_token(shape)
        steps = {
            path: decoding_multiply_adds(shape, context, absorbed=path == "absorbed")
            for path in ("materialised", "absorbed")
        }
        own = LATENT_PRESETS[preset]
        return {
            "preset": preset,
            "d_latent": shape.d_latent,
            "d_rope": shape.d_rope,
            "heads": shape.num_heads,
            "context": context,
            "shape": shape,
            "as_published": (shape.d_latent, shape.d_rope, shape.num_heads)
            == (own.d_latent, own.d_rope, own.num_heads),
            "cache": cache,
            "gqa_kv_heads": cache["GQA"] // (2 * shape.d_head),
            "cache_ratio": cache["MHA"] / cache["MLA"],
            # The number of key/value heads GQA would need to cache as much as MLA (DeepSeek-V2: 2.25).
            "gqa_equivalent": cache["MLA"] / (2 * shape.d_head),
            "parameters": attention_parameters(shape),
            "steps": steps,
            "multiply_adds": {path: step.total for path, step in steps.items()},
            "step_ratio": steps["materialised"].total / steps["absorbed"].total,
        }

    def _build(self, fig, data):
        cache_ax = fig.add_axes((0.075, 0.32, 0.27, 0.52))
        param_ax = fig.add_axes((0.44, 0.32, 0.16, 0.52))
        step_ax = fig.add_axes((0.7, 0.32, 0.24, 0.52))
        cache_bars = cache_ax.bar(range(4), np.zeros(4), color=_CACHE_COLORS, width=0.7)
        cache_ax.set_xticks(range(4), list(data["cache"]), fontsize=8)
        cache_ax.set_ylabel("numbers cached per token and layer\n(% of MHA's)", fontsize=8)
        cache_ax.set_title("the cache", fontsize=9)
        param_bars = param_ax.bar(range(2), np.zeros(2), color=[_CACHE_COLORS[0], _CACHE_COLORS[3]], width=0.6)
        param_ax.set_xticks(range(2), ["MHA", "MLA"], fontsize=8)
        param_ax.set_ylabel("parameters of a layer (% of MHA's)", fontsize=8)
        param_ax.set_title("parameters", fontsize=9)
        parts = {}
        for part, color in _PART_COLORS.items():
            parts[part] = step_ax.bar(range(2), np.zeros(2), color=color, width=0.6, label=_PART_NAMES[part])
        step_ax.set_xticks(range(2), ["materialised", "absorbed"], fontsize=8)
        step_ax.set_ylabel("multiply-adds (% of materialised)", fontsize=8)
        # Under the step's axis, where no bar can reach.
        step_ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), frameon=False)
        for ax in (cache_ax, param_ax, step_ax):
            ax.set_ylim(0.0, _TOP)
            ax.yaxis.set_major_locator(MaxNLocator(5))  # few ticks: their text is most of a redraw
            ax.tick_params(labelsize=7)
            ax.grid(True, axis="y", alpha=0.3)
            ax.spines[["top", "right"]].set_visible(False)
        labels = {
            name: [ax.text(i, 0.0, "", ha="center", va="bottom", fontsize=7) for i in range(count)]
            for name, ax, count in (("cache", cache_ax, 4), ("params", param_ax, 2), ("step", step_ax, 2))
        }
        step_title = step_ax.text(0.5, 1.04, "", transform=step_ax.transAxes, ha="center", va="bottom", fontsize=9)
        title = fig.text(0.5, 0.985, "", ha="center", va="top", fontsize=9)
        return {
            "axes": (cache_ax, param_ax, step_ax),
            "cache": cache_bars,
            "params": param_bars,
            "parts": parts,
            "labels": labels,
            "titles": (title, step_title),
        }

    def _static(self, data: dict[str, Any]) -> Hashable:
        # Fixed axes (percentages of MHA's cache and parameters and of the materialised step): the frames, ticks and
        # names are drawn once, and a move redraws only the bars and their numbers. The parameter panel grows when
        # latent attention has more parameters than MHA.
        return _param_top(data)

    def _dynamic(self, artists):
        bars = [*artists["cache"], *artists["params"], *(bar for bars in artists["parts"].values() for bar in bars)]
        return [*bars, *(label for labels in artists["labels"].values() for label in labels), *artists["titles"]]

    def _update(self, artists, data):
        param_ax = artists["axes"][1]
        shape = data["shape"]
        # Linear axes, in percent of the panel's reference bar, so that lengths compare; each bar carries its count.
        cache = np.array(list(data["cache"].values()), dtype=float)
        kv = [f"\n{shape.num_heads} kv", f"\n{data['gqa_kv_heads']} kv", "\n1 kv", ""]
        for bar, label, value, heads in zip(artists["cache"], artists["labels"]["cache"], cache, kv, strict=True):
            bar.set_height(100.0 * value / cache[0])
            label.set_position((bar.get_x() + bar.get_width() / 2, bar.get_height()))
            label.set_text(f"{int(value):,}{heads}")
        param_ax.set_ylim(0.0, _param_top(data))
        params = np.array([data["parameters"]["MHA"], data["parameters"]["MLA"]], dtype=float)
        for bar, label, value in zip(artists["params"], artists["labels"]["params"], params, strict=True):
            bar.set_height(100.0 * value / params[0])
            label.set_position((bar.get_x() + bar.get_width() / 2, bar.get_height()))
            label.set_text(_short(value))
        totals = np.array([data["multiply_adds"]["materialised"], data["multiply_adds"]["absorbed"]], dtype=float)
        bottom = np.zeros(2)
        for part, bars in artists["parts"].items():
            heights = 100.0 * np.array([getattr(data["steps"][path], part) for path in ("materialised", "absorbed")])
            heights = heights / totals[0]
            for bar, base, height in zip(bars, bottom, heights, strict=True):
                bar.set_y(base)
                bar.set_height(height)
            bottom = bottom + heights
        for label, x, total in zip(artists["labels"]["step"], range(2), totals, strict=True):
            label.set_position((x, 100.0 * total / totals[0]))
            label.set_text(_short(total))
        title, step_title = artists["titles"]
        step_title.set_text(f"one decoding step after {data['context']:,} tokens")
        own = "" if data["as_published"] else " (sizes changed)"
        title.set_text(
            f"{data['preset']}{own}: d_model {shape.d_model}, {shape.num_heads} heads of {shape.d_head}, "
            f"d_latent {shape.d_latent}, d_rope {shape.d_rope}"
            + ("" if shape.q_latent is None else f", q_latent {shape.q_latent}")
        )

    def _caption_text(self, data: dict[str, Any]) -> str:
        cache, steps = data["cache"], data["multiply_adds"]
        return (
            f"MLA caches {cache['MLA']:,} numbers per token and layer (d_latent {data['d_latent']} + d_rope "
            f"{data['d_rope']}), MHA {cache['MHA']:,}: {data['cache_ratio']:.1f}× less, as much as GQA with "
            f"{data['gqa_equivalent']:.3g} key/value heads. One decoding step after {data['context']:,} tokens: "
            f"{steps['materialised']:,} multiply-adds materialised, {steps['absorbed']:,} absorbed "
            f"({data['step_ratio']:.1f}× fewer)."
        )


def _check_settings(preset: object, d_latent: object, d_rope: object, heads: object, context: object) -> None:
    expect_choice("preset", preset, tuple(LATENT_PRESETS))
    for name, value, options in (
        ("d_latent", d_latent, D_LATENTS),
        ("d_rope", d_rope, D_ROPES),
        ("heads", heads, HEADS),
        ("context", context, CONTEXTS),
    ):
        expect_int(name, value, 0)
        expect_choice(name, str(value), [str(option) for option in options])


def latent_explorer(
    *,
    preset: str = "DeepSeek-V2",
    d_latent: int | None = None,
    d_rope: int | None = None,
    heads: int | None = None,
    context: int = 4096,
) -> Explorer:
    """A model's latent attention (``preset``: ``"small"`` or ``"DeepSeek-V2"``, :data:`LATENT_PRESETS`) with its
    ``d_latent``, ``d_rope`` and ``heads`` (default: the model's own) and a decoding step after ``context`` cached
    tokens. Left: numbers cached per token and layer by MHA, GQA (a quarter of the heads), MQA and MLA; middle: the
    parameters of one attention layer, MHA and MLA; right: the multiply-adds of one decoding step on the
    materialised and the absorbed path, by part.

    data: ``cache`` (``{"MHA", "GQA", "MQA", "MLA"}``: numbers per token and layer), ``parameters`` (``{"MHA",
    "MLA"}``), ``multiply_adds`` (``{"materialised", "absorbed"}``) and ``steps`` (their :class:`StepCount`),
    ``cache_ratio`` (MHA / MLA), ``gqa_equivalent`` (the key/value heads GQA would need to cache as much as MLA),
    ``step_ratio`` (materialised / absorbed), ``gqa_kv_heads``, ``shape`` (the :class:`LatentShape`), and each
    control's value."""
    expect_choice("preset", preset, tuple(LATENT_PRESETS))
    own = LATENT_PRESETS[preset]
    d_latent = own.d_latent if d_latent is None else d_latent
    d_rope = own.d_rope if d_rope is None else d_rope
    heads = own.num_heads if heads is None else heads
    _check_settings(preset, d_latent, d_rope, heads, context)
    return _LatentExplorer(preset, int(d_latent), int(d_rope), int(heads), int(context))
