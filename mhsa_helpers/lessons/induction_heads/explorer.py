"""Notebook 07's explorer: scrub through training (the shipped checkpoints) and watch one head's
attention, the loss curves and every head's scores change.

Nothing is trained here: the weights come from
:func:`~mhsa_helpers.teaching.induction.checkpoints.load_checkpoints`, so the explorer opens at once. Each
step's forward pass (on :func:`~mhsa_helpers.teaching.induction.training.evaluation_batch`) is computed on
first view and kept (not ahead of time in another thread: building a model seeds torch's global random
generator, which the notebook's own cells use meanwhile). The figure is built once: a move replaces the
heatmap's values, the bars' heights, the step's line and the titles.
"""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets
import numpy as np
import torch
from matplotlib.patches import Rectangle

from ...checks import expect_int
from ...teaching.explorer import SLIDER, Explorer, to_numpy
from ...teaching.induction.checkpoints import CHECKPOINT_STEPS, Checkpoints, load_checkpoints
from ...teaching.induction.scores import head_scores
from ...teaching.induction.task import InductionBatch
from ...teaching.induction.training import evaluation_batch
from .figures import loss_curves, mark_copies, score_bars

__all__ = ["example_index", "training_explorer"]


def example_index(batch: InductionBatch) -> int:
    """The row of ``batch`` the explorer draws: the first one with the longest chunk (the clearest stripe)."""
    return int(torch.argmax(batch.repeat_len))


class _TrainingExplorer(Explorer):
    figsize = (10.5, 4.6)

    def __init__(self, checkpoints: Checkpoints, step: int, layer: int, head: int) -> None:
        self.checkpoints = checkpoints
        self.batch = evaluation_batch(checkpoints.config)
        self.row = example_index(self.batch)
        self._cache: dict[int, tuple[list[torch.Tensor], dict[str, torch.Tensor]]] = {}
        heads = checkpoints.config.num_heads
        controls = {
            "step": widgets.SelectionSlider(
                options=list(checkpoints.steps), value=step, description="training step", **SLIDER
            ),
            # Toggle buttons, not dropdowns: the keyboard drives them without moving JupyterLab's cell selection.
            "layer": widgets.ToggleButtons(
                options=[("layer 0", 0), ("layer 1", 1)],
                value=layer,
                description="layer",
                style={"button_width": "70px"},
            ),
            "head": widgets.ToggleButtons(
                options=[(f"head {h}", h) for h in range(heads)],
                value=head,
                description="head",
                style={"button_width": "70px"},
            ),
        }
        super().__init__(
            controls, title="Scrub through training: one head's attention, the losses, every head's scores"
        )

    def _check(self, values: dict[str, Any]) -> None:
        steps = list(self.checkpoints.steps)
        step = values["step"]
        if isinstance(step, bool) or not isinstance(step, (int, np.integer)):
            raise TypeError(f"step must be an int, one of the saved steps {steps}, got {type(step).__name__} {step!r}")
        if step not in steps:
            raise ValueError(f"step must be one of the saved steps {steps}, got step={step!r}")
        expect_int("layer", values["layer"], 0, 1, " (the model has 2 layers)")
        expect_int("head", values["head"], 0, self.checkpoints.config.num_heads - 1, " (one of the heads)")

    def _weights_and_scores(self, step: int) -> tuple[list[torch.Tensor], dict[str, torch.Tensor]]:
        if step not in self._cache:
            model = self.checkpoints.model_at(step)
            with torch.no_grad():
                _, weights = model(self.batch.tokens)
            self._cache[step] = (weights, head_scores(weights, self.batch))
        return self._cache[step]

    def _compute(self, values: dict[str, Any]) -> dict[str, Any]:
        step, layer, head = int(values["step"]), int(values["layer"]), int(values["head"])
        weights, scores = self._weights_and_scores(step)
        history = self.checkpoints.history
        return {
            "step": step,
            "layer": layer,
            "head": head,
            "row": self.row,
            "tokens": self.batch.tokens[self.row].tolist(),
            "first_start": int(self.batch.first_start[self.row]),
            "repeat_len": int(self.batch.repeat_len[self.row]),
            "weights": to_numpy(weights[layer][self.row, head]),
            "scores": {name: to_numpy(value) for name, value in scores.items()},
            "induction_loss": float(np.mean(history["induction_loss"][max(0, step - 10) : step]))
            if step
            else float(history["induction_loss"][0]),
        }

    def _layout(self, data: dict[str, Any]) -> Any:
        return "one"

    def _build(self, fig, data):
        seq = len(data["tokens"])
        grid = fig.add_gridspec(
            2, 2, width_ratios=(1.0, 1.25), left=0.06, right=0.98, bottom=0.2, top=0.9, hspace=0.7, wspace=0.42
        )
        heat = fig.add_subplot(grid[:, 0])
        image = heat.imshow(data["weights"], cmap="Blues", vmin=0.0, vmax=1.0, interpolation="nearest")
        heat.set_xlabel("key position", fontsize=10)
        heat.set_ylabel("query position", fontsize=10)
        ticks = list(range(0, seq, 4))
        heat.set_xticks(ticks)
        heat.set_yticks(ticks)
        heat.tick_params(labelsize=8)
        mark_copies(heat, data["first_start"], data["repeat_len"], seq)
        colorbar = fig.colorbar(image, ax=heat, fraction=0.046, pad=0.03)
        colorbar.set_label("attention weight", fontsize=9)
        colorbar.ax.tick_params(labelsize=8)
        # The loss curves are drawn once; a move shifts only the black line at the step.
        loss_ax = fig.add_subplot(grid[0, 1])
        loss_curves(
            self.checkpoints.history,
            vocab_size=self.checkpoints.config.vocab_size,
            ax=loss_ax,
            step=data["step"],
            fontsize=8,
        )
        loss_ax.set_title("loss during training (black line: this step)", fontsize=10)
        step_line = loss_ax.lines[-1]  # loss_curves draws the step's line last
        # Drawn again over the step line, as in a full draw (the legend and the phase-change
        # label sit above the curves).
        above_step = [artist for artist in (loss_ax.get_legend(), *loss_ax.texts) if artist is not None]
        # The bars are drawn once and given each step's heights; the shaded head is a patch of
        # our own (what score_bars' highlight draws), moved along the axis.
        score_ax = fig.add_subplot(grid[1, 1])
        scores = {name: torch.from_numpy(value) for name, value in data["scores"].items()}
        score_bars(scores, ax=score_ax, fontsize=8)
        index = data["layer"] * self.checkpoints.config.num_heads + data["head"]
        shade = Rectangle(
            (index - 0.45, 0.0), 0.9, 1.0, transform=score_ax.get_xaxis_transform(), color="#ffe082", zorder=0
        )
        score_ax.add_patch(shade)
        return {
            "heat": heat,
            "image": image,
            "step_line": step_line,
            "above_step": above_step,
            "score_ax": score_ax,
            "bars": list(score_ax.containers),
            "shade": shade,
        }

    def _update(self, artists, data):
        artists["image"].set_data(data["weights"])
        artists["heat"].set_title(
            f"layer {data['layer']}, head {data['head']} at step {data['step']}\n"
            f"(green: first copy, orange: second copy)",
            fontsize=10,
        )
        artists["step_line"].set_xdata([data["step"], data["step"]])
        heads = self.checkpoints.config.num_heads
        for container, name in zip(artists["bars"], ("previous_token", "induction", "bos"), strict=True):
            for bar, height in zip(container, data["scores"][name].reshape(-1), strict=True):
                bar.set_height(float(height))
        artists["shade"].set_x(data["layer"] * heads + data["head"] - 0.45)
        artists["score_ax"].set_title(
            f"every head's scores at step {data['step']} (shaded: the drawn head)", fontsize=10
        )

    def _dynamic(self, artists):
        heat, score_ax = artists["heat"], artists["score_ax"]
        return [
            artists["image"],
            *heat.spines.values(),
            heat.title,
            artists["step_line"],
            *artists["above_step"],
            artists["shade"],
            *(bar for container in artists["bars"] for bar in container),
            # Over the shade, as in a full draw: the line between the layers and their names.
            *score_ax.lines,
            *score_ax.texts,
            *score_ax.spines.values(),
            score_ax.title,
        ]

    def _caption_text(self, data):
        prev = data["scores"]["previous_token"][0].max()
        ind = data["scores"]["induction"][1].max()
        return (
            f"step {data['step']} · layer {data['layer']}, head {data['head']} · best previous-token score in "
            f"layer 0: {prev:.2f} · best induction score in layer 1: {ind:.2f} · repeated-token loss "
            f"(last 10 steps): {data['induction_loss']:.2f}"
        )


def training_explorer(step: int = CHECKPOINT_STEPS[-1], *, layer: int = 0, head: int | None = None) -> Explorer:
    """Scrub through the shipped training run
    (:func:`~mhsa_helpers.teaching.induction.checkpoints.load_checkpoints`): the attention of head ``head`` of
    layer ``layer`` on one sequence of :func:`~mhsa_helpers.teaching.induction.training.evaluation_batch` (the
    row :func:`example_index`), the loss curves with a line at ``step``, and the scores of every head.

    ``step`` is one of the saved steps; ``head`` defaults to the previous-token head of layer 0 at
    the last step. data: ``weights`` (seq, seq) of the drawn head, ``scores`` ({name: (layers, heads)}),
    ``tokens``, ``first_start``, ``repeat_len``, ``step``, ``layer``, ``head``.
    """
    checkpoints = load_checkpoints()
    steps = list(checkpoints.steps)
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)):
        raise TypeError(f"step must be an int, one of the saved steps {steps}, got {type(step).__name__} {step!r}")
    if step not in steps:
        raise ValueError(f"step must be one of the saved steps {steps}, got step={step!r}")
    expect_int("layer", layer, 0, 1, " (the model has 2 layers)")
    if head is None:
        model = checkpoints.model_at(steps[-1])
        batch = evaluation_batch(checkpoints.config)
        with torch.no_grad():
            _, weights = model(batch.tokens)
        head = int(head_scores(weights, batch)["previous_token"][0].argmax())
    expect_int("head", head, 0, checkpoints.config.num_heads - 1, " (one of the heads)")
    return _TrainingExplorer(checkpoints, int(step), int(layer), int(head))
