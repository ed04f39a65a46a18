"""Notebook 01's explorer: "Money Bank Grows" — the scores ``Q Kᵀ / √d_k`` of
one head, multiplied by a slider, and the softmax weights they give."""

from __future__ import annotations

import math

import ipywidgets as widgets

from ...attention import attention_scores, scaled_dot_product_attention
from ...checks import expect_int, expect_number
from ...examples import money_bank_grows
from ...teaching.explorer import Explorer, log_slider, to_numpy
from ...teaching.figures import Heatmap

__all__ = ["qkv_explorer"]


#: One format for the score factor on the slider, in the title and in the caption (1,000, not 1e+03).
SCALE_FORMAT = ",.4g"


class _QKVExplorer(Explorer):
    figsize = (6.4, 2.9)

    def __init__(self, head: int, score_scale: float) -> None:
        self.example = money_bank_grows()
        controls = {
            "head": widgets.ToggleButtons(
                options=[("head 1", 1), ("head 2", 2)],
                value=head,
                description="head",
                style={"description_width": "initial", "button_width": "70px"},
            ),
            "score_scale": log_slider("score ×", score_scale, -1.0, 3.0, 0.05, SCALE_FORMAT),
        }
        super().__init__(controls, title="Money Bank Grows: Q·Kᵀ/√d_k, then softmax")

    def _check(self, values):
        expect_int("head", values["head"], 1, 2, " (the example has two heads)")
        expect_number("score_scale", values["score_scale"], 0.1, 1000.0)

    def _compute(self, values):
        ex, h, scale = self.example, values["head"] - 1, float(values["score_scale"])
        q = ex.embeddings @ ex.w_q[h]  # the example writes E @ W with W (d_in, d_head)
        k = ex.embeddings @ ex.w_k[h]
        v = ex.embeddings @ ex.w_v[h]
        d_k = q.shape[-1]
        scaled = scale / math.sqrt(d_k)
        output, weights = scaled_dot_product_attention(q, k, v, scale=scaled, need_weights=True)
        return {
            "tokens": list(ex.tokens),
            "head": values["head"],
            "score_scale": scale,
            "q": to_numpy(q),
            "k": to_numpy(k),
            "v": to_numpy(v),
            "scores": to_numpy(attention_scores(q, k, scale=scaled)),
            "weights": to_numpy(weights),
            "output": to_numpy(output),
        }

    def _build(self, fig, data):
        tokens = data["tokens"]
        left = fig.add_axes((0.12, 0.16, 0.3, 0.66))
        right = fig.add_axes((0.6, 0.16, 0.3, 0.66))
        scores = Heatmap(
            left,
            data["scores"],
            row_labels=tokens,
            col_labels=tokens,
            cmap="Oranges",
            vmin=None,
            vmax=None,
            annotate=True,
            fmt="{:.3f}",
            rotate_cols=False,
            row_name="query",
            col_name="key",
            colorbar="score",
        )
        weights = Heatmap(
            right,
            data["weights"],
            row_labels=tokens,
            col_labels=tokens,
            cmap="Blues",
            vmin=0.0,
            vmax=1.0,
            annotate=True,
            fmt="{:.3f}",
            rotate_cols=False,
            row_name="query",
            col_name="key",
            colorbar="attention weight",
        )
        right.set_title("weights = softmax (rows sum to 1)", fontsize=9)
        return scores, weights

    def _update(self, artists, data):
        scores, weights = artists
        scores.set_values(data["scores"])
        weights.set_values(data["weights"])
        scores.ax.set_title(f"scores × {data['score_scale']:{SCALE_FORMAT}} / √3", fontsize=9)

    def _dynamic(self, artists):
        scores, weights = artists
        return [*scores.dynamic(), *weights.dynamic(), scores.ax.title]

    def _caption_text(self, data):
        return (
            f"head {data['head']} · score × {data['score_scale']:{SCALE_FORMAT}} · largest weight "
            f"{data['weights'].max():.3f} (uniform: 0.333)"
        )


def qkv_explorer(*, head: int = 1, score_scale: float = 1.0) -> Explorer:
    """ "Money Bank Grows" in one head (``head`` 1 or 2): scores ``Q Kᵀ / √d_k``
    multiplied by ``score_scale`` (0.1 to 1000), and the softmax weights.

    The seed's tiny weights give almost uniform attention; raising ``score_scale`` shows
    it sharpen. data: ``tokens``, ``q``, ``k``, ``v`` (3, 3), ``scores`` (3, 3) (after scaling),
    ``weights`` (3, 3), ``output`` (3, 3).
    """
    head = expect_int("head", head, 1, 2, " (the example has two heads)")
    expect_number("score_scale", score_scale, 0.1, 1000.0)
    return _QKVExplorer(head, float(score_scale))
