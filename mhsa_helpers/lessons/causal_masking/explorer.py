"""Notebook 03's explorer: the causal mask of "Your journey starts with one step", its two ways of
applying it (``METHODS``) and training-mode dropout on the weights, on its own seeded projections."""

from __future__ import annotations

import ipywidgets as widgets
import torch
import torch.nn.functional as F
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch

from ...attention import attention_scores
from ...checks import expect_bool, expect_choice, expect_int, expect_number
from ...examples import your_journey_starts_with_one_step
from ...masking import causal_mask, masked_softmax_neg_inf, masked_softmax_renormalize
from ...teaching.explorer import SLIDER, Explorer, seeded, to_numpy
from ...teaching.figures import MASK_COLORS, Heatmap

__all__ = ["DROPOUT_SEED", "JOURNEY_SEED", "METHODS", "journey_projections", "masking_explorer"]

#: ``torch.manual_seed`` right before the masking explorer's training-mode dropout.
DROPOUT_SEED = 0
#: The ``torch.manual_seed`` before its three ``nn.Linear(3, 3, bias=False)`` (query, key, value).
JOURNEY_SEED = 789


#: The two ways to apply the mask: blocked scores to -inf before the softmax (notebook 03's
#: second method), or softmax, zero the blocked weights and divide by the row sum (its first).
METHODS = {"neg_inf": masked_softmax_neg_inf, "renormalize": masked_softmax_renormalize}


def journey_projections() -> tuple[tuple[str, ...], torch.Tensor, torch.Tensor, torch.Tensor]:
    """The 6 tokens of "Your journey starts with one step" projected by ``W_query, W_key, W_value``
    (``torch.manual_seed(789)``, then three ``nn.Linear(3, 3, bias=False)`` in that order, as notebooks 02
    and 03 build them): ``(tokens, q, k, v)``, each ``(6, 3)``."""
    tokens, inputs = your_journey_starts_with_one_step()
    with seeded(JOURNEY_SEED):
        w_query, w_key, w_value = (torch.nn.Linear(3, 3, bias=False) for _ in range(3))
    with torch.no_grad():
        return tokens, w_query(inputs), w_key(inputs), w_value(inputs)


class _MaskingExplorer(Explorer):
    figsize = (7.5, 3.3)

    def __init__(self, seq_len: int, causal: bool, method: str, dropout: float) -> None:
        self.tokens, self.q, self.k, self.v = journey_projections()
        controls = {
            "seq_len": widgets.IntSlider(value=seq_len, min=1, max=len(self.tokens), description="seq_len", **SLIDER),
            "causal": widgets.Checkbox(value=causal, description="causal mask", indent=False),
            # Toggle buttons, not a dropdown: the keyboard drives them without moving JupyterLab's cell selection.
            "method": widgets.ToggleButtons(
                options=list(METHODS), value=method, description="method", style={"description_width": "initial"}
            ),
            "dropout": widgets.FloatSlider(
                value=dropout, min=0.0, max=0.9, step=0.1, description="dropout", readout_format=".1f", **SLIDER
            ),
        }
        super().__init__(controls, title="Masking: which keys may each query see?")

    def _check(self, values):
        expect_int("seq_len", values["seq_len"], 1, len(self.tokens), " (words of the sentence)")
        expect_bool("causal", values["causal"])
        expect_choice("method", values["method"], tuple(METHODS))
        expect_number("dropout", values["dropout"], 0.0, 0.9)

    def _compute(self, values):
        n, p = values["seq_len"], round(float(values["dropout"]), 10)
        q, k, v = self.q[:n], self.k[:n], self.v[:n]
        scores = attention_scores(q, k)
        mask = causal_mask(n) if values["causal"] else torch.ones(n, n, dtype=torch.bool)
        weights = METHODS[values["method"]](scores, mask)
        dropped = weights
        if p > 0:
            with seeded(DROPOUT_SEED):  # training-mode dropout, the same every redraw
                dropped = F.dropout(weights, p=p, training=True)
        return {
            "tokens": list(self.tokens[:n]),
            "seq_len": n,
            "causal": bool(values["causal"]),
            "method": values["method"],
            "dropout": p,
            "scores": to_numpy(scores),
            "mask": mask.numpy().copy(),
            "weights_before_dropout": to_numpy(weights),
            "weights": to_numpy(dropped),
            "output": to_numpy(dropped @ v),
        }

    def _layout(self, data):
        return data["seq_len"]

    def _build(self, fig, data):
        tokens = data["tokens"]
        left = fig.add_axes((0.12, 0.2, 0.33, 0.62))
        right = fig.add_axes((0.62, 0.2, 0.33, 0.62))
        mask = Heatmap(
            left,
            data["mask"].astype(float),
            row_labels=tokens,
            col_labels=tokens,
            cmap=ListedColormap(list(MASK_COLORS)),
            vmin=0.0,
            vmax=1.0,
            annotate=False,
            fontsize=7,
            row_name="query",
            col_name="key",
        )
        left.legend(
            handles=[Patch(color=MASK_COLORS[1], label="may attend"), Patch(color=MASK_COLORS[0], label="blocked")],
            loc="lower center",
            bbox_to_anchor=(0.5, 1.0),
            ncol=2,
            fontsize=7,
            frameon=False,
            handlelength=1.0,
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
        return mask, weights

    def _update(self, artists, data):
        mask, weights = artists
        mask.set_values(data["mask"].astype(float))
        # Dropout scales the kept weights by 1/(1-p): widen the colour range to show them.
        top = max(1.0, float(data["weights"].max()))
        weights.set_range(0.0, top)
        weights.set_values(data["weights"])
        title = f"weights ({data['method']})" + (f", dropout {data['dropout']:.1f}" if data["dropout"] else "")
        weights.ax.set_title(title, fontsize=9)

    def _dynamic(self, artists):
        mask, weights = artists
        return [*mask.dynamic(), *weights.dynamic(), weights.ax.title]

    def _caption_text(self, data):
        sums = data["weights"].sum(axis=-1)
        return (
            f"seq {data['seq_len']} · {'causal' if data['causal'] else 'no'} mask · {data['method']} · "
            f"dropout {data['dropout']:.1f} · row sums {', '.join(f'{s:.2f}' for s in sums)}"
        )


def masking_explorer(
    *, seq_len: int = 6, causal: bool = True, method: str = "neg_inf", dropout: float = 0.0
) -> Explorer:
    """ "Your journey starts with one step" (its ``manual_seed(789)`` projections):
    the causal mask, the two ways to apply it (``"neg_inf"``: blocked scores to -inf before
    the softmax; ``"renormalize"``: softmax, zero, divide by the row sum — the same weights),
    and training-mode dropout on the weights (``torch.manual_seed(DROPOUT_SEED)`` first).

    data: ``tokens``, ``scores``, ``mask`` (bool, True = may attend), ``weights_before_dropout``,
    ``weights`` (after dropout), ``output``; matrices are ``(seq_len, seq_len)``.
    """
    expect_int("seq_len", seq_len, 1, 6, " (words of the sentence)")
    causal = expect_bool("causal", causal)
    expect_choice("method", method, tuple(METHODS))
    expect_number("dropout", dropout, 0.0, 0.9)
    return _MaskingExplorer(int(seq_len), causal, method, float(dropout))
