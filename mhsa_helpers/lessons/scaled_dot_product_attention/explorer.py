"""Notebook 02's explorer: why the scores are divided by ``√d_k`` — the spread of ``q·k``
grows with ``d_k`` and saturates the softmax unless scaled."""

from __future__ import annotations

import math

import ipywidgets as widgets

from ...attention import attention_scores
from ...checks import expect_bool, expect_choice, expect_int
from ...examples import sentence_embeddings
from ...softmax import softmax
from ...teaching.explorer import SLIDER, Explorer, to_numpy
from ...teaching.figures import SCORES_CMAP, Heatmap

__all__ = ["SCALING_SENTENCES", "SCORE_LIMIT", "scaling_explorer"]

#: Sentences of the scaling explorer.
SCALING_SENTENCES = ("She loves cats", "Your journey starts with one step")

#: The scores panel's colour range, fixed for every d_k so that a score of 50 looks saturated
#: next to a score of 2 (a range that follows the data would make them look alike).
SCORE_LIMIT = 8.0


class _ScalingExplorer(Explorer):
    figsize = (7.5, 3.3)

    def __init__(self, d_k: int, sentence: str, scaled: bool) -> None:
        controls = {
            "d_k": widgets.IntSlider(value=d_k, min=1, max=512, step=1, description="d_k", **SLIDER),
            # Toggle buttons, not a dropdown: the keyboard drives them without moving JupyterLab's cell selection.
            "sentence": widgets.ToggleButtons(
                options=list(SCALING_SENTENCES),
                value=sentence,
                description="sentence",
                style={"description_width": "initial", "button_width": "230px"},
            ),
            "scaled": widgets.Checkbox(value=scaled, description="divide by √d_k", indent=False),
        }
        super().__init__(controls, title="Why divide the scores by √d_k?")

    def _check(self, values):
        expect_int("d_k", values["d_k"], 1, 512)
        expect_choice("sentence", values["sentence"], SCALING_SENTENCES)
        expect_bool("scaled", values["scaled"])

    def _compute(self, values):
        d_k, sentence, scaled = values["d_k"], values["sentence"], values["scaled"]
        # Query and key vectors with independent unit-variance entries, fixed per word.
        tokens, q = sentence_embeddings(sentence, d_k, seed=1)
        _, k = sentence_embeddings(sentence, d_k, seed=2)
        scores = attention_scores(q, k, scale=None if scaled else 1.0)
        weights = softmax(scores)
        return {
            "tokens": list(tokens),
            "d_k": d_k,
            "sentence": sentence,
            "scaled": scaled,
            "q": to_numpy(q),
            "k": to_numpy(k),
            "scores": to_numpy(scores),
            "weights": to_numpy(weights),
            "score_std": float(scores.double().std(correction=0)),
            # Var(q.k) = d_k for unit-variance entries; dividing by sqrt(d_k) brings it back to 1.
            "expected_std": 1.0 if scaled else math.sqrt(d_k),
        }

    def _layout(self, data):
        return data["sentence"]

    def _build(self, fig, data):
        tokens = data["tokens"]
        left = fig.add_axes((0.12, 0.22, 0.3, 0.6))
        right = fig.add_axes((0.6, 0.22, 0.3, 0.6))
        scores = Heatmap(
            left,
            data["scores"],
            row_labels=tokens,
            col_labels=tokens,
            cmap=SCORES_CMAP,
            vmin=-SCORE_LIMIT,
            vmax=SCORE_LIMIT,
            annotate=False,
            fontsize=7,
            row_name="query",
            col_name="key",
            colorbar=f"score (white = 0, colours stop at ±{SCORE_LIMIT:g})",
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
            fmt="{:.2f}",
            fontsize=7,
            row_name="query",
            col_name="key",
            colorbar="attention weight",
        )
        right.set_title("weights (softmax of each row)", fontsize=9)
        return scores, weights

    def _update(self, artists, data):
        scores, weights = artists
        scores.set_values(data["scores"])
        weights.set_values(data["weights"])
        what = "q·k / √d_k" if data["scaled"] else "q·k (not scaled)"
        scores.ax.set_title(f"scores {what}: from {data['scores'].min():.1f} to {data['scores'].max():.1f}", fontsize=9)

    def _dynamic(self, artists):
        scores, weights = artists
        return [*scores.dynamic(), *weights.dynamic(), scores.ax.title]

    def _caption_text(self, data):
        how = "divided by √d_k" if data["scaled"] else "not scaled"
        return (
            f"d_k = {data['d_k']} · {how} · score std {data['score_std']:.2f} "
            f"(expected about {data['expected_std']:.2f}) · largest weight {data['weights'].max():.2f}"
        )


def scaling_explorer(*, d_k: int = 64, sentence: str = SCALING_SENTENCES[1], scaled: bool = True) -> Explorer:
    """Random queries and keys with ``d_k`` unit-variance features (fixed per word): the
    spread of ``q·k`` grows like ``√d_k`` and saturates the softmax unless divided by ``√d_k``.

    data: ``tokens``, ``q``, ``k`` (seq, d_k), ``scores`` and ``weights`` (seq, seq),
    ``score_std`` (population std of the scores), ``expected_std`` (``√d_k`` or 1).
    """
    expect_int("d_k", d_k, 1, 512)
    expect_choice("sentence", sentence, SCALING_SENTENCES)
    scaled = expect_bool("scaled", scaled)
    return _ScalingExplorer(int(d_k), sentence, scaled)
