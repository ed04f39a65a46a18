"""The widget of an ordering exercise (:mod:`mhsa_helpers.teaching.ordering`): the lines of a puzzle to arrange
with the mouse or the keyboard in a running kernel, checked by the exercise's checker.

Each row has its own "↑" and "↓" buttons: plain buttons, which Tab reaches and Enter presses, where JupyterLab
keeps the arrow keys for moving between cells. A line moved up lands in the row above, whose buttons are one
Shift+Tab pair back. "Check" calls the checker on the order shown; "Hint" and "Reveal" climb the same rungs as
``result.hint()`` and ``result.reveal()``. Where no kernel runs (GitHub, nbviewer, the website) the lines show as
text. Like the explorers, the widget is left out of mutation testing (its mutants change labels and styles); it is
tested in Python and in a real JupyterLab (``tests/browser/test_jupyterlab.py``).
"""

from __future__ import annotations

import base64
import contextlib
import html
import io
from collections.abc import Callable
from typing import Any

import ipywidgets as widgets
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from .checking import CheckResult
from .explorer import DPI
from .ordering import OrderPuzzle

__all__ = ["STATIC_NOTE", "OrderExercise"]

#: The line under the lines where no kernel runs the exercise.
STATIC_NOTE = "A picture of the exercise: its lines move with a running kernel; or write your order in the next cell."

#: The style of an ordering exercise: code in a fixed-width font, one line per row.
_STYLE = (
    "<style>.mhsa-order-line { font-family: var(--jp-code-font-family, monospace); font-size: 13px; "
    "white-space: pre; } .mhsa-order-feedback { white-space: pre-wrap; max-width: 100ch; }</style>"
)


class OrderExercise(widgets.VBox):
    """The lines of ``puzzle`` to arrange with the mouse or the keyboard, and a "Check" button that calls
    ``check(order)`` (the exercise's checker). ``order`` is the order shown now; ``result`` the last check's."""

    def __init__(self, puzzle: OrderPuzzle, check: Callable[..., CheckResult]) -> None:
        self.puzzle = puzzle
        self.order = list(puzzle.lines)
        self.result: CheckResult | None = None
        self._check = check
        self.codes = [widgets.HTML() for _ in self.order]
        rows = []
        for row, code in enumerate(self.codes):
            code.add_class("mhsa-order-line")
            up, down = (
                widgets.Button(description=arrow, tooltip=f"Move this line {way}", layout=widgets.Layout(width="2.5em"))
                for arrow, way in (("↑", "up"), ("↓", "down"))
            )
            up.on_click(lambda _, row=row: self.move(self.order[row], -1))
            down.on_click(lambda _, row=row: self.move(self.order[row], +1))
            rows.append(widgets.HBox([up, down, code]))
            rows[-1].add_class("mhsa-order-row")
        self.rows = widgets.VBox(rows)
        self.buttons = {
            name: widgets.Button(description=name, tooltip=tip, layout=widgets.Layout(width="auto"))
            for name, tip in (
                ("Check", "Run the lines in this order and compare with the recipe"),
                ("Hint", "The next clue about the last check"),
                ("Reveal", "The fix for the last check"),
            )
        }
        self.buttons["Check"].on_click(lambda _: self.check())
        self.buttons["Hint"].on_click(lambda _: self._tell("hint"))
        self.buttons["Reveal"].on_click(lambda _: self._tell("reveal"))
        self.answer = widgets.HTML()
        self.answer.add_class("mhsa-order-answer")
        self.feedback = widgets.HTML("")
        self.feedback.add_class("mhsa-order-feedback")
        self._show()
        super().__init__(
            [widgets.HTML(_STYLE), self.rows, widgets.HBox(list(self.buttons.values())), self.answer, self.feedback]
        )
        self.add_class("mhsa-order-exercise")

    def _show(self) -> None:
        for code, label in zip(self.codes, self.order, strict=True):
            code.value = f"{label}   {html.escape(self.puzzle.lines[label])}"
        self.answer.value = f"Your order: <code>{html.escape(repr(self.order))}</code>"

    def move(self, label: str, step: int) -> None:
        """Move line ``label`` ``step`` places (-1 up, +1 down), within the first and last rows."""
        i = self.order.index(label)
        j = min(max(i + step, 0), len(self.order) - 1)
        self.order.insert(j, self.order.pop(i))
        self._show()

    def check(self) -> CheckResult:
        """Check the order shown, as ``check(order)`` in a cell does, and show what it says."""
        self.result = self._check(list(self.order), verbose=False)
        self.feedback.value = html.escape(self.result.message)
        return self.result

    def _tell(self, request: str) -> None:
        if self.result is None:
            self.feedback.value = "Check your order first."
            return
        said = io.StringIO()
        with contextlib.redirect_stdout(said):
            getattr(self.result, request)()
        self.feedback.value = html.escape(said.getvalue().strip())

    def static_png(self) -> bytes:
        """The lines as shown, with the note that arranging them needs a running kernel: the picture shown where
        the widget cannot be (PNG bytes)."""
        lines = self.puzzle.listing().splitlines()
        height = 0.22 * (len(lines) + 2)
        figure = Figure(figsize=(0.08 * max(len(line) for line in [*lines, STATIC_NOTE]), height), dpi=DPI)
        FigureCanvasAgg(figure)
        for row, line in enumerate(lines):
            figure.text(0.01, 1 - (row + 0.8) / (len(lines) + 2), line, family="monospace", fontsize=9, va="center")
        figure.text(0.01, 0.7 / (len(lines) + 2), STATIC_NOTE, fontsize=8, style="italic", color="#555555")
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=DPI)
        return buffer.getvalue()

    def _repr_mimebundle_(self, **kwargs: Any) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """The live list for a running kernel; for every renderer without one (GitHub, nbviewer, the website), a
        picture of the lines, as an explorer gives its figure (an HTML rendering would be preferred to it by
        nbconvert and nbviewer), and the lines as text."""
        bundle = super()._repr_mimebundle_(**kwargs)
        if bundle is None:
            return None
        listing = self.puzzle.listing()
        bundle["text/plain"] = f"{listing}\n{STATIC_NOTE}"
        bundle["image/png"] = base64.b64encode(self.static_png()).decode("ascii")
        return bundle, {}
