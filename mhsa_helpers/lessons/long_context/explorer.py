"""Notebook 09's explorers: what each way of stretching RoPE does to every pair's wavelength, and
how far information travels through stacked sliding-window layers."""

from __future__ import annotations

import ipywidgets as widgets
import numpy as np

from ...checks import expect_choice, expect_int
from ...long_context import ROPE_SCALING_METHODS, RopeScaling, rope_wavelengths, scaled_rope_frequencies
from ...teaching.explorer import SLIDER, Explorer, to_numpy
from ...teaching.figures import MASK_COLORS, Heatmap
from .reach import window_reach

__all__ = ["FACTORS", "HEAD_SIZES", "ORIGINAL_LENGTHS", "stretch_explorer", "window_explorer"]

#: The choices of the stretch explorer.
METHODS = ("none", *ROPE_SCALING_METHODS)
FACTORS = (1, 2, 4, 8, 16, 32)
ORIGINAL_LENGTHS = (32, 128, 512, 2048, 4096)
HEAD_SIZES = (16, 32, 64, 128)


class _StretchExplorer(Explorer):
    figsize = (8.0, 3.6)

    def __init__(self, method: str, factor: int, original_len: int, d_head: int) -> None:
        controls = {
            "method": widgets.ToggleButtons(
                options=list(METHODS), value=method, description="method", style={"button_width": "70px"}
            ),
            "factor": widgets.SelectionSlider(options=list(FACTORS), value=factor, description="factor s", **SLIDER),
            "original_len": widgets.SelectionSlider(
                options=list(ORIGINAL_LENGTHS), value=original_len, description="trained length L", **SLIDER
            ),
            "d_head": widgets.SelectionSlider(options=list(HEAD_SIZES), value=d_head, description="d_head", **SLIDER),
        }
        super().__init__(controls, title="Stretching RoPE: each pair's wavelength, before and after")

    def _check(self, values):
        expect_choice("method", values["method"], METHODS)
        expect_int("factor", values["factor"], 1, max(FACTORS))
        expect_int("original_len", values["original_len"], 1)
        expect_choice("d_head", str(values["d_head"]), [str(d) for d in HEAD_SIZES])

    def _compute(self, values):
        method, s, length, d_head = (
            values["method"],
            int(values["factor"]),
            int(values["original_len"]),
            values["d_head"],
        )
        trained, _ = scaled_rope_frequencies(d_head)
        scaling = None if method == "none" or s == 1 else RopeScaling(method, float(s), length)
        stretched, score_factor = scaled_rope_frequencies(d_head, 10000.0, scaling)
        before, after = to_numpy(rope_wavelengths(trained)), to_numpy(rope_wavelengths(stretched))
        return {
            "method": method,
            "factor": s,
            "original_len": length,
            "d_head": d_head,
            "before": before,
            "after": after,
            "stretch": after / before,
            "score_factor": score_factor,
            # Pairs that turn less than once in the trained length: the model never saw them wrap around.
            "unseen_before": int((before > length).sum()),
            "kept": int(np.isclose(after / before, 1.0).sum()),
        }

    def _layout(self, data):
        return data["d_head"]

    def _build(self, fig, data):
        pairs = np.arange(data["d_head"] // 2)
        left = fig.add_axes((0.09, 0.17, 0.38, 0.68))
        right = fig.add_axes((0.6, 0.17, 0.37, 0.68))
        left.set_yscale("log")
        # Fixed ranges: moving a slider moves the lines, never the axes.
        left.set_ylim(1, 1e8)
        right.set_ylim(0.5, max(FACTORS) * 1.5)
        right.set_yscale("log", base=2)
        (before,) = left.plot(pairs, data["before"], "o-", color="0.6", markersize=3, label="as trained")
        (after,) = left.plot(pairs, data["after"], "o-", color="#d62728", markersize=3, label="stretched")
        trained = left.axhline(data["original_len"], color="black", lw=0.8, ls="--")
        target = left.axhline(data["original_len"] * data["factor"], color="#d62728", lw=0.8, ls=":")
        left.set_xlabel("pair i (fast → slow)", fontsize=8)
        left.set_ylabel("wavelength (tokens per turn)", fontsize=8)
        left.legend(fontsize=7, loc="upper left")
        (stretch,) = right.plot(pairs, data["stretch"], "o-", color="#d62728", markersize=3)
        factor_line = right.axhline(data["factor"], color="black", lw=0.8, ls=":")
        right.axhline(1.0, color="0.6", lw=0.8)
        right.set_xlabel("pair i (fast → slow)", fontsize=8)
        right.set_ylabel("wavelength after / before", fontsize=8)
        right.set_yticks([1, 2, 4, 8, 16, 32])
        right.set_yticklabels(["1 (kept)", "2", "4", "8", "16", "32"])
        for ax in (left, right):
            ax.tick_params(labelsize=7)
            ax.grid(True, alpha=0.3)
        return before, after, trained, target, stretch, factor_line, left

    def _update(self, artists, data):
        before, after, trained, target, stretch, factor_line, left = artists
        before.set_ydata(data["before"])
        after.set_ydata(data["after"])
        trained.set_ydata([data["original_len"]] * 2)
        target.set_ydata([data["original_len"] * data["factor"]] * 2)
        stretch.set_ydata(data["stretch"])
        factor_line.set_ydata([data["factor"]] * 2)
        left.set_title(
            f"dashed: trained length L = {data['original_len']}; dotted: s·L = {data['original_len'] * data['factor']}",
            fontsize=8,
        )

    def _dynamic(self, artists):
        # The axes are fixed (see _build): a move redraws the lines and the title over the kept
        # background, then the legend, which sits above the lines as in a full draw.
        *lines, left = artists
        return [*lines, left.title, left.get_legend()]

    def _caption_text(self, data):
        how = {
            "none": "RoPE as trained",
            "linear": "position interpolation: every wavelength × s",
            "ntk": "NTK-aware: the base grows by s^(d/(d-2)); the slowest pair × s, the fastest kept",
            "yarn": "YaRN: pairs turning more than 32 times in L kept, less than once interpolated, a ramp between",
        }[data["method"]]
        factor = f" · scores × {data['score_factor']:.2f}" if data["score_factor"] != 1.0 else ""
        return (
            f"{how}{factor} · {data['unseen_before']} of {data['d_head'] // 2} pairs turn less than once in "
            f"L = {data['original_len']} tokens · {data['kept']} pairs kept as trained"
        )


def stretch_explorer(*, method: str = "yarn", factor: int = 8, original_len: int = 2048, d_head: int = 64) -> Explorer:
    """RoPE's wavelength per pair, as trained and stretched by ``method`` for a context ``factor``
    times the trained length ``original_len``. data: ``before``/``after`` (``d_head // 2``,) in tokens
    per turn, ``stretch`` (their ratio), ``score_factor`` (YaRN's), ``unseen_before``, ``kept``."""
    expect_choice("method", method, METHODS)
    expect_choice("factor", str(factor), [str(f) for f in FACTORS])
    expect_choice("original_len", str(original_len), [str(n) for n in ORIGINAL_LENGTHS])
    expect_choice("d_head", str(d_head), [str(d) for d in HEAD_SIZES])
    return _StretchExplorer(method, int(factor), int(original_len), int(d_head))


class _WindowExplorer(Explorer):
    figsize = (8.0, 3.8)

    def __init__(self, window: int, layers: int, seq_len: int) -> None:
        controls = {
            "window": widgets.IntSlider(value=window, min=1, max=16, description="window w", **SLIDER),
            "layers": widgets.IntSlider(value=layers, min=1, max=6, description="layers", **SLIDER),
        }
        self.seq_len = seq_len
        super().__init__(controls, title="Sliding windows: what one layer sees, what stacked layers reach")

    def _check(self, values):
        expect_int("window", values["window"], 1, 16)
        expect_int("layers", values["layers"], 1, 6)

    def _compute(self, values):
        window, layers = int(values["window"]), int(values["layers"])
        mask, reach = window_reach(self.seq_len, window, layers)
        last = reach[-1]
        return {
            "window": window,
            "layers": layers,
            "mask": to_numpy(mask).astype(float),
            "reach": to_numpy(reach).astype(float),
            "furthest_back": int(self.seq_len - 1 - int(np.argmax(to_numpy(last)))),
        }

    def _layout(self, data):
        return self.seq_len

    def _build(self, fig, data):
        from matplotlib.colors import ListedColormap

        cmap = ListedColormap(list(MASK_COLORS))
        panels = []
        titles = ("one layer: blue = may attend", "after all layers: blue = can influence")
        for left, title in zip((0.07, 0.55), titles, strict=True):
            ax = fig.add_axes((left, 0.15, 0.38, 0.68))
            panel = Heatmap(
                ax,
                data["mask"],
                row_labels=None,
                col_labels=None,
                cmap=cmap,
                vmin=0.0,
                vmax=1.0,
                annotate=False,
                fontsize=6,
                row_name="query (position)",
                col_name="key (position)",
            )
            ticks = list(range(0, self.seq_len, 4))
            ax.set_xticks(ticks, [str(t) for t in ticks], fontsize=7)
            ax.set_yticks(ticks, [str(t) for t in ticks], fontsize=7)
            ax.set_title(title, fontsize=9)
            panels.append(panel)
        return panels

    def _update(self, artists, data):
        artists[0].set_values(data["mask"])
        artists[1].set_values(data["reach"])

    def _dynamic(self, artists):
        return [artist for panel in artists for artist in panel.dynamic()]

    def _caption_text(self, data):
        return (
            f"window w = {data['window']}, {data['layers']} layer(s): one layer looks back "
            f"w - 1 = {data['window'] - 1} tokens; the last token is reached from {data['furthest_back']} tokens back "
            f"(layers × (w - 1) = {data['layers'] * (data['window'] - 1)}, capped by the sequence)"
        )


def window_explorer(*, window: int = 4, layers: int = 2, seq_len: int = 24) -> Explorer:
    """The sliding-window mask of one layer (left) and, after ``layers`` such layers, which tokens
    can have influenced which (right; blue = reached). data: ``mask`` and ``reach`` (seq, seq) as
    0/1, ``furthest_back`` (how far back the last token is reached)."""
    expect_int("window", window, 1, 16)
    expect_int("layers", layers, 1, 6)
    expect_int("seq_len", seq_len, 2, 64)
    return _WindowExplorer(int(window), int(layers), int(seq_len))
