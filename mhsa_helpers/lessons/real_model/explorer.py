"""Notebook 11's explorer: the real model's attention on a handful of sentences, any layer, any head.

The model runs once per sentence, when the explorer is made (every layer's weights at once), so
moving a slider only picks a stored ``(seq, seq)`` map and redraws it.
"""

from __future__ import annotations

import functools
from typing import Any

import ipywidgets as widgets
import numpy as np
import torch

from ...checks import expect_choice, expect_int
from ...teaching.explorer import SLIDER, Explorer
from ...teaching.figures import Heatmap
from .tools import load_model

__all__ = ["PRESET_SENTENCES", "attention_weights_of", "real_attention_explorer"]

#: The explorer's sentences: the series' examples, a sentence said twice (copying) and a line of code.
PRESET_SENTENCES = (
    "Your journey starts with one step.",
    "She loves cats, and the cats love her.",
    "Money in the bank grows every year.",
    "The red fox ran home. The red fox ran home.",
    "def add(a, b): return a + b",
)
_LABELS = ("journey", "cats", "bank", "said twice", "code")


@functools.cache
@torch.no_grad()
def attention_weights_of(sentence: str) -> tuple[tuple[str, ...], np.ndarray]:
    """The tokens of ``sentence`` and the real model's attention weights on it, every layer and head:
    ``(layers, heads, seq, seq)`` float32 (rows: queries, columns: keys). Computed once per sentence
    and kept (a new explorer reuses them): the arrays are read-only."""
    model, tokenizer = load_model()
    ids = torch.tensor([tokenizer.encode(sentence)])
    _, weights = model(ids, need_weights=True)
    stacked = torch.stack([w[0] for w in weights]).numpy()
    stacked.flags.writeable = False
    return tuple(tokenizer.tokens(ids[0])), stacked


def _label(token: str) -> str:
    # A leading space is part of a BPE token (" cats"); show it as a dot so that it stays visible.
    return token.replace(" ", "·").replace("\n", "⏎")


class _RealAttentionExplorer(Explorer):
    figsize = (6.4, 5.4)

    def __init__(self, sentence: str, layer: int, head: int) -> None:
        model, _ = load_model()
        self.num_layers, self.num_heads = model.config.num_layers, model.config.num_heads
        self.presets = {text: attention_weights_of(text) for text in PRESET_SENTENCES}
        controls = {
            "layer": widgets.IntSlider(value=layer, min=0, max=self.num_layers - 1, description="layer", **SLIDER),
            "head": widgets.IntSlider(value=head, min=0, max=self.num_heads - 1, description="head", **SLIDER),
            # Toggle buttons, not a dropdown: the keyboard drives them without moving JupyterLab's cell selection.
            "sentence": widgets.ToggleButtons(
                options=list(zip(_LABELS, PRESET_SENTENCES, strict=True)),
                value=sentence,
                description="sentence",
                style={"description_width": "initial", "button_width": "80px"},
            ),
        }
        super().__init__(controls, title="The real model's attention: pick a layer, a head and a sentence")

    def _check(self, values: dict[str, Any]) -> None:
        expect_int("layer", values["layer"], 0, self.num_layers - 1, f" (the model has {self.num_layers} layers)")
        expect_int("head", values["head"], 0, self.num_heads - 1, f" (each layer has {self.num_heads} heads)")
        expect_choice("sentence", values["sentence"], PRESET_SENTENCES)

    def _compute(self, values: dict[str, Any]) -> dict[str, Any]:
        layer, head, sentence = int(values["layer"]), int(values["head"]), values["sentence"]
        tokens, weights = self.presets[sentence]
        shown = weights[layer, head].astype(np.float64)
        return {
            "layer": layer,
            "head": head,
            "sentence": sentence,
            "tokens": list(tokens),
            "weights": shown,
            "first_token": float(shown[1:, 0].mean()),
            "previous_token": float(np.diagonal(shown, offset=-1).mean()),
        }

    def _layout(self, data: dict[str, Any]) -> Any:
        return data["sentence"]

    def _build(self, fig, data):
        ax = fig.add_axes((0.16, 0.2, 0.66, 0.68))
        labels = [_label(t) for t in data["tokens"]]
        return Heatmap(
            ax,
            data["weights"],
            row_labels=labels,
            col_labels=labels,
            cmap="Blues",
            vmin=0.0,
            vmax=1.0,
            annotate=False,
            fontsize=8,
            row_name="query",
            col_name="key",
            colorbar="attention weight",
        )

    def _update(self, artists, data):
        artists.set_values(data["weights"])
        artists.ax.set_title(f"layer {data['layer']}, head {data['head']}", fontsize=10)

    def _dynamic(self, artists):
        return [*artists.dynamic(), artists.ax.title]

    def _caption_text(self, data):
        return (
            f"layer {data['layer']}, head {data['head']} · mean weight on the first token "
            f"{data['first_token']:.2f} · on the previous token {data['previous_token']:.2f} · "
            f"“{data['sentence']}” ({len(data['tokens'])} tokens)"
        )


def real_attention_explorer(*, sentence: str = PRESET_SENTENCES[3], layer: int = 18, head: int = 6) -> Explorer:
    """The real model's attention weights ``(seq, seq)`` of head ``head`` of layer ``layer`` on one of
    :data:`PRESET_SENTENCES`, tokens on both axes. Opens on the sentence said twice and layer 18,
    head 6 (the notebook's strongest induction head). data: ``weights`` (seq, seq), ``tokens``,
    ``first_token`` and ``previous_token`` (that head's mean weight on each), ``layer``, ``head``, ``sentence``."""
    model, _ = load_model()
    config = model.config
    expect_int("layer", layer, 0, config.num_layers - 1, f" (the model has {config.num_layers} layers)")
    expect_int("head", head, 0, config.num_heads - 1, f" (each layer has {config.num_heads} heads)")
    expect_choice("sentence", sentence, PRESET_SENTENCES)
    return _RealAttentionExplorer(sentence, int(layer), int(head))
