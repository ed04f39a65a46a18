"""Notebook 08's explorers: the online softmax tile by tile (tile-size slider), which query heads
share which key/value head (a slider over ``num_kv_heads``), and what the KV cache of a published
model costs (context, batch, dtype)."""

from __future__ import annotations

import ipywidgets as widgets
import numpy as np
import torch

from ...checks import expect_bool, expect_choice, expect_int
from ...kv_cache_memory import BYTES_PER_ELEMENT, PRESETS, format_bytes, kv_cache_variants
from ...teaching.diagrams import head_colors
from ...teaching.explorer import SLIDER, Explorer, divisors, to_numpy
from ...teaching.figures import Heatmap
from ...tiled_attention import online_softmax_trace, tile_kinds

__all__ = ["CONTEXTS", "cache_explorer", "kv_heads_explorer", "tiles_explorer"]

#: The row of scores the tiles explorer reads: 16 scores, the largest ones late, so the maximum grows.
_ROW = torch.tensor(
    [0.2, -1.0, 0.8, 0.1, 1.5, -0.3, 0.9, 2.6, 0.4, -2.0, 1.1, 3.4, 0.0, 1.7, -0.6, 2.2], dtype=torch.float64
)


#: The normaliser axis's top: the largest normaliser any tile size reaches on _ROW, plus a margin,
#: so that moving the slider moves the line, never the axis.
_NORMALISER_TOP = 1.15 * max(float(online_softmax_trace(_ROW, tile).normaliser.max()) for tile in range(1, 17))


class _TilesExplorer(Explorer):
    figsize = (8.0, 3.5)

    def __init__(self, tile_size: int, causal: bool) -> None:
        controls = {
            "tile_size": widgets.IntSlider(value=tile_size, min=1, max=16, description="tile size", **SLIDER),
            "causal": widgets.Checkbox(value=causal, description="causal", indent=False),
        }
        super().__init__(controls, title="Online softmax: one tile of keys at a time")

    def _check(self, values):
        expect_int("tile_size", values["tile_size"], 1, 16)
        expect_bool("causal", values["causal"])

    def _compute(self, values):
        tile, causal = int(values["tile_size"]), bool(values["causal"])
        trace = online_softmax_trace(_ROW, tile)
        kinds = tile_kinds(16, 16, tile_size=tile, causal=causal)
        code = {"computed": 1.0, "masked": 0.5, "skipped": 0.0}
        blocks = np.array([[code[kinds[i // tile][j // tile]] for j in range(16)] for i in range(16)])
        ends = [stop for _, stop in trace.tiles]
        return {
            "tile_size": tile,
            "causal": causal,
            "blocks": blocks,
            "ends": ends,
            "running_max": to_numpy(trace.running_max),
            "normaliser": to_numpy(trace.normaliser),
            "final_normaliser": float(torch.exp(_ROW - _ROW.max()).sum()),
            "computed_fraction": float((blocks > 0).mean()),
        }

    def _layout(self, data):
        return None  # one figure for every tile size: a move redraws the tiles, the steps and the title

    def _build(self, fig, data):
        from matplotlib.collections import LineCollection
        from matplotlib.colors import ListedColormap

        left = fig.add_axes((0.06, 0.14, 0.34, 0.76))
        cmap = ListedColormap(["#f0f0f0", "#fcbba1", "#9ecae1"])
        blocks = Heatmap(
            left,
            data["blocks"],
            row_labels=None,
            col_labels=None,
            cmap=cmap,
            vmin=0.0,
            vmax=1.0,
            annotate=False,
            fontsize=6,
            row_name="query",
            col_name="key",
        )
        # The tiles' edges, one segment each, replaced when the tile size changes.
        edges = LineCollection([], colors="black", linewidths=1.2)
        left.add_collection(edges, autolim=False)
        # Right: the row's scores with the running maximum (top) and the normaliser (bottom), each
        # on its own labelled axis. Each tile's value is drawn across the keys of that tile.
        top = fig.add_axes((0.52, 0.53, 0.44, 0.37))
        top.plot(range(1, 17), to_numpy(_ROW), "o", color="0.6", markersize=3, label="scores of the row")
        (maximum,) = top.step([], [], where="pre", color="#d62728", label="running max m")
        (max_ends,) = top.plot([], [], "s", color="#d62728", markersize=3)
        top.set_xlim(0.5, 16.5)
        top.set_ylim(-2.5, 4.0)
        top.set_ylabel("score", fontsize=8)
        top.tick_params(labelsize=7, labelbottom=False)
        top.legend(fontsize=7, loc="upper left")
        top.grid(True, alpha=0.3)
        bottom = fig.add_axes((0.52, 0.14, 0.44, 0.34), sharex=top)
        (normaliser,) = bottom.step([], [], where="pre", color="#2171b5")
        (normaliser_ends,) = bottom.plot([], [], "s", color="#2171b5", markersize=3)
        bottom.set_ylim(0.0, _NORMALISER_TOP)
        bottom.set_ylabel("normaliser ℓ", fontsize=8)
        bottom.set_xlabel("keys read so far", fontsize=8)
        bottom.tick_params(labelsize=7)
        bottom.grid(True, alpha=0.3)
        return {
            "blocks": blocks,
            "edges": edges,
            "steps": (maximum, max_ends, normaliser, normaliser_ends),
            "left": left,
            "legend": top.get_legend(),
        }

    def _update(self, artists, data):
        artists["blocks"].set_values(data["blocks"])
        tile = data["tile_size"]
        artists["edges"].set_segments(
            [[(edge - 0.5, -0.5), (edge - 0.5, 15.5)] for edge in range(0, 17, tile)]
            + [[(-0.5, edge - 0.5), (15.5, edge - 0.5)] for edge in range(0, 17, tile)]
        )
        ends = data["ends"]
        xs = [0.5] + [end + 0.5 for end in ends]
        maximum, max_ends, normaliser, normaliser_ends = artists["steps"]
        maximum.set_data(xs, [data["running_max"][0], *data["running_max"]])
        max_ends.set_data(ends, data["running_max"])
        normaliser.set_data(xs, [data["normaliser"][0], *data["normaliser"]])
        normaliser_ends.set_data(ends, data["normaliser"])
        artists["left"].set_title(f"{data['computed_fraction']:.0%} of the scores computed", fontsize=8)

    def _dynamic(self, artists):
        # The steps, then the legend over them (as in a full draw).
        return [
            *artists["blocks"].dynamic(),
            artists["edges"],
            artists["left"].title,
            *artists["steps"],
            artists["legend"],
        ]

    def _caption_text(self, data):
        return (
            f"blocks: blue computed, orange masked inside, grey skipped · "
            f"tile size {data['tile_size']}: the running maximum jumps when a tile holds a larger score, and the "
            f"normaliser is rescaled by exp(old max - new max); after the last tile it is "
            f"{data['normaliser'][-1]:.3f} = Σ exp(score - max)"
        )


def tiles_explorer(*, tile_size: int = 4, causal: bool = True) -> Explorer:
    """Left: which ``(tile, tile)`` blocks of a 16-token score matrix tiled attention computes, masks
    or skips. Right: one row of 16 scores read ``tile_size`` at a time, with the running maximum and
    normaliser after each tile. data: ``blocks`` (16, 16) as 1 / 0.5 / 0, ``ends`` (keys read after
    each tile), ``running_max``, ``normaliser`` (one per tile), ``computed_fraction``."""
    expect_int("tile_size", tile_size, 1, 16)
    return _TilesExplorer(int(tile_size), expect_bool("causal", causal))


class _KVHeadsExplorer(Explorer):
    figsize = (8.0, 2.0)

    def __init__(self, num_heads: int, num_kv_heads: int) -> None:
        self.num_heads = num_heads
        controls = {
            "num_kv_heads": widgets.SelectionSlider(
                options=divisors(num_heads), value=num_kv_heads, description="key/value heads", **SLIDER
            )
        }
        super().__init__(controls, title=f"Which of {num_heads} query heads share which key/value head")

    def _check(self, values):
        expect_choice("num_kv_heads", str(values["num_kv_heads"]), [str(d) for d in divisors(self.num_heads)])

    def _compute(self, values):
        kv = int(values["num_kv_heads"])
        groups = self.num_heads // kv
        return {
            "num_kv_heads": kv,
            "groups": groups,
            "reads": [h // groups for h in range(self.num_heads)],
            "cache_fraction": kv / self.num_heads,
        }

    def _layout(self, data):
        return data["num_kv_heads"]

    def _build(self, fig, data):
        ax = fig.add_axes((0.02, 0.02, 0.96, 0.96))
        ax.set_xlim(-0.5, self.num_heads - 0.5)
        ax.set_ylim(-0.4, 1.4)
        ax.axis("off")
        colors = head_colors(data["num_kv_heads"])
        for h, g in enumerate(data["reads"]):
            ax.add_patch(_square(h, 1.0, colors[g]))
            ax.text(h, 1.0, f"q{h}", ha="center", va="center", fontsize=8)
            centre = (g + 0.5) * self.num_heads / data["num_kv_heads"] - 0.5
            ax.annotate("", xy=(centre, 0.25), xytext=(h, 0.75), arrowprops={"arrowstyle": "-|>", "color": "0.3"})
        for g in range(data["num_kv_heads"]):
            centre = (g + 0.5) * self.num_heads / data["num_kv_heads"] - 0.5
            ax.add_patch(_square(centre, 0.0, colors[g]))
            ax.text(centre, 0.0, f"kv{g}", ha="center", va="center", fontsize=8)
        return ()

    def _update(self, artists, data):
        pass

    def _dynamic(self, artists):
        # Nothing changes within a layout (one per num_kv_heads): its kept picture is pasted.
        return []

    def _caption_text(self, data):
        kind = (
            "multi-head attention"
            if data["groups"] == 1
            else "multi-query attention"
            if data["num_kv_heads"] == 1
            else "grouped-query attention"
        )
        return (
            f"{kind}: {data['num_kv_heads']} key/value head(s), each read by {data['groups']} query head(s); "
            f"the KV cache is {data['cache_fraction']:.0%} of multi-head attention's"
        )


def _square(x: float, y: float, color: str):
    from matplotlib.patches import Rectangle

    return Rectangle((x - 0.35, y - 0.3), 0.7, 0.6, facecolor=color, edgecolor="black")


def kv_heads_explorer(*, num_heads: int = 8, num_kv_heads: int = 2) -> Explorer:
    """Query heads (top) and the key/value heads they read (bottom) for ``num_kv_heads`` dividing
    ``num_heads``. data: ``reads`` (the key/value head of each query head), ``groups``, ``cache_fraction``."""
    num_heads = expect_int("num_heads", num_heads, 1, 16)
    expect_choice("num_kv_heads", str(num_kv_heads), [str(d) for d in divisors(num_heads)])
    return _KVHeadsExplorer(num_heads, int(num_kv_heads))


#: Context lengths of the cache explorer.
CONTEXTS = (1024, 4096, 8192, 32768, 131072)


class _CacheExplorer(Explorer):
    figsize = (7.5, 3.2)

    def __init__(self, model: str, tokens: int, batch: int, dtype: str) -> None:
        controls = {
            "model": widgets.ToggleButtons(options=list(PRESETS), value=model, description="model"),
            "tokens": widgets.SelectionSlider(options=list(CONTEXTS), value=tokens, description="context", **SLIDER),
            "batch": widgets.IntSlider(value=batch, min=1, max=64, description="batch", **SLIDER),
            "dtype": widgets.ToggleButtons(options=list(BYTES_PER_ELEMENT), value=dtype, description="dtype"),
        }
        super().__init__(controls, title="What the KV cache costs: MHA, GQA and MQA for the same model")

    def _check(self, values):
        expect_choice("model", values["model"], tuple(PRESETS))
        expect_choice("tokens", str(values["tokens"]), [str(t) for t in CONTEXTS])
        expect_int("batch", values["batch"], 1, 64)
        expect_choice("dtype", values["dtype"], tuple(BYTES_PER_ELEMENT))

    def _compute(self, values):
        model = PRESETS[values["model"]]
        # A model that is MHA itself is compared with 4 key/value heads as its GQA variant.
        gqa = model.num_kv_heads if model.num_kv_heads < model.num_heads else max(1, model.num_heads // 4)
        variants = kv_cache_variants(
            model, tokens=int(values["tokens"]), batch=int(values["batch"]), dtype=values["dtype"], gqa_kv_heads=gqa
        )
        return {
            "model": model.name,
            "own_kv_heads": model.num_kv_heads,
            "names": [f"{v.name}\n({v.num_kv_heads} kv head{'' if v.num_kv_heads == 1 else 's'})" for v in variants],
            "gib": np.array([v.bytes / 2**30 for v in variants]),
            "tokens": int(values["tokens"]),
            "batch": int(values["batch"]),
            "dtype": values["dtype"],
        }

    def _layout(self, data):
        return tuple(data["names"])

    def _build(self, fig, data):
        ax = fig.add_axes((0.12, 0.2, 0.84, 0.68))
        # A linear axis, so that bar lengths compare: MQA's bar is 1/num_heads of MHA's. The axis
        # follows the largest bar (MHA's), and each bar carries its value.
        bars = ax.bar(range(3), data["gib"], color=["#9ecae1", "#fdae6b", "#a1d99b"])
        ax.set_xticks(range(3), data["names"], fontsize=8)
        ax.set_ylabel("GiB", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(True, axis="y", alpha=0.3)
        labels = [ax.text(i, 0.0, "", ha="center", va="bottom", fontsize=8) for i in range(3)]
        return bars, labels, ax

    def _update(self, artists, data):
        bars, labels, ax = artists
        for bar, label, height in zip(bars, labels, data["gib"], strict=True):
            bar.set_height(height)
            label.set_position((bar.get_x() + bar.get_width() / 2, height))
            label.set_text(format_bytes(int(float(height) * 2**30 + 0.5)))
        ax.set_ylim(0.0, 1.18 * float(data["gib"].max()))
        ax.set_title(f"{data['model']} · {data['tokens']} tokens · batch {data['batch']} · {data['dtype']}", fontsize=9)

    def _dynamic(self, artists):
        return None

    def _caption_text(self, data):
        mha, gqa, mqa = data["gib"]
        return (
            f"MHA {mha:.2f} GiB, GQA {gqa:.2f} GiB, MQA {mqa:.3f} GiB: only key/value heads are cached, "
            f"so the cache shrinks by num_heads / num_kv_heads ({data['model']} has {data['own_kv_heads']})"
        )


def cache_explorer(
    *, model: str = "Llama-3-8B", tokens: int = 8192, batch: int = 1, dtype: str = "bfloat16"
) -> Explorer:
    """The KV cache of a published model (:data:`~mhsa_helpers.kv_cache_memory.PRESETS`) as MHA, GQA and MQA,
    for a context of ``tokens``, a ``batch`` and a ``dtype``. data: ``names``, ``gib`` (3,), ``model``."""
    expect_choice("model", model, tuple(PRESETS))
    expect_choice("tokens", str(tokens), [str(t) for t in CONTEXTS])
    expect_int("batch", batch, 1, 64)
    expect_choice("dtype", dtype, tuple(BYTES_PER_ELEMENT))
    return _CacheExplorer(model, int(tokens), int(batch), dtype)
