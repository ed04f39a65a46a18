"""Notebook 07's explorer: scrub through training (the shipped checkpoints) and watch one head's
attention, the loss curves and every head's scores change.

Nothing is trained here: the weights come from :func:`~.checkpoints.load_checkpoints`, so the
explorer opens at once. Each step's forward pass (on :func:`~.training.evaluation_batch`) is
computed on first view and kept.
"""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets
import numpy as np
import torch

from ...checks import expect_int
from ...teaching.explorer import SLIDER, Explorer, to_numpy
from .checkpoints import CHECKPOINT_STEPS, Checkpoints, load_checkpoints
from .figures import loss_curves, mark_copies, score_bars
from .scores import head_scores
from .task import InductionBatch
from .training import evaluation_batch

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
        return {"fig": fig, "grid": grid, "heat": heat, "image": image}

    def _update(self, artists, data):
        artists["image"].set_data(data["weights"])
        artists["heat"].set_title(
            f"layer {data['layer']}, head {data['head']} at step {data['step']}\n"
            f"(green: first copy, orange: second copy)",
            fontsize=10,
        )
        # The two small panels are cheap: drawn again from scratch at each move.
        for name in ("loss_ax", "score_ax"):
            if name in artists:
                artists[name].remove()
        fig, grid = artists["fig"], artists["grid"]
        artists["loss_ax"] = loss_ax = fig.add_subplot(grid[0, 1])
        loss_curves(
            self.checkpoints.history,
            vocab_size=self.checkpoints.config.vocab_size,
            ax=loss_ax,
            step=data["step"],
            fontsize=8,
        )
        loss_ax.set_title("loss during training (black line: this step)", fontsize=10)
        artists["score_ax"] = score_ax = fig.add_subplot(grid[1, 1])
        scores = {name: torch.from_numpy(value) for name, value in data["scores"].items()}
        score_bars(scores, ax=score_ax, highlight=(data["layer"], data["head"]), fontsize=8)
        score_ax.set_title(f"every head's scores at step {data['step']} (shaded: the drawn head)", fontsize=10)

    def _caption_text(self, data):
        prev = data["scores"]["previous_token"][0].max()
        ind = data["scores"]["induction"][1].max()
        return (
            f"step {data['step']} · layer {data['layer']}, head {data['head']} · best previous-token score in "
            f"layer 0: {prev:.2f} · best induction score in layer 1: {ind:.2f} · repeated-token loss "
            f"(last 10 steps): {data['induction_loss']:.2f}"
        )


def training_explorer(step: int = CHECKPOINT_STEPS[-1], *, layer: int = 0, head: int | None = None) -> Explorer:
    """Scrub through the shipped training run (:func:`~.checkpoints.load_checkpoints`): the attention
    of head ``head`` of layer ``layer`` on one sequence of :func:`~.training.evaluation_batch`
    (the row :func:`example_index`), the loss curves with a line at ``step``, and the scores of every head.

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
