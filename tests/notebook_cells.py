"""Reading a committed notebook's cells in tests: their source, what they printed, and a function
exactly as a cell defines it."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import torch

import mhsa_helpers


def cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def source(cell: dict) -> str:
    return "".join(cell["source"])


def last_exercise_hints(notebook: Path, heading: str = "### Exercise") -> tuple[list[str], list[str]]:
    """The hint labels of a notebook's last exercise (the last whose heading starts with ``heading``) and every name
    in code type inside its hints."""
    markdown = [source(c) for c in cells(notebook) if c["cell_type"] == "markdown"]
    last = next(m for m in reversed(markdown) if m.startswith(heading))
    labels = re.findall(r"<summary>([^<]+)</summary>", last)
    return labels, re.findall(r"`([^`]+)`", last.split("<details>", 1)[1])


def printed(cell: dict) -> str:
    return "".join("".join(o.get("text", "")) for o in cell.get("outputs", []))


def defined_in_notebook(path: Path, name: str):
    """The function ``name`` exactly as the notebook's cell defines it (the checker call removed)."""
    cell = next(c for c in cells(path) if f"def {name}(" in source(c))
    code = source(cell).split("\nresult = ")[0]
    namespace: dict = {"torch": torch, "math": math, "mh": mhsa_helpers}
    exec(compile(code, path.stem, "exec"), namespace)
    return namespace[name]


def exercise_structure_problems(path: Path) -> list[str]:
    """What notebook ``path`` lacks of the exercise shape of notebooks 01-03: one prediction, one debugging
    exercise whose checker (run when the notebook was executed) says the handed-out code is still the original
    (and nothing of its bug), and a last exercise with three nested hints."""
    notebook = cells(path)
    code = [c for c in notebook if c["cell_type"] == "code"]
    problems = []
    predictions = [c for c in code if "def my_prediction():" in source(c) and "raise NotImplementedError" in source(c)]
    if len(predictions) != 1:
        problems.append(f"{len(predictions)} prediction cells")
    # (the recall questions that open the notebook are checked with no code handed out either)
    debugging = [
        c
        for c in code
        if "result = check_" in source(c)
        and "NotImplementedError" not in source(c)
        and "check_recall(" not in source(c)
    ]
    if len(debugging) != 1 or "still the original" not in printed(debugging[0]):
        problems.append("no single debugging exercise whose checker says the handed-out code is still the original")
    markdown = [source(c) for c in notebook if c["cell_type"] == "markdown"]
    last_exercise = next(m for m in reversed(markdown) if m.startswith("### Exercise"))
    summaries = re.findall(r"<summary>Hint (\d) · ([^<]+)</summary>", last_exercise)
    if [n for n, _ in summaries] != ["1", "2", "3"] or not (
        last_exercise.count("<details>") == last_exercise.count("</details>") == 3
    ):
        problems.append("the last exercise does not have hints 1-3 in three nested <details>")
    return problems


def payoff_cell_problems(path: Path, cell_id: str) -> list[str]:
    """What the payoff cell ``cell_id`` of notebook ``path`` (notebooks 07 and 11: the learner's module put to work)
    lacks: it loads the module from the learner's my_attention.py, runs only when the module is written, and all its
    work and claims run inside ``explained``, which says the cause of a failing claim."""
    cell = next(source(c) for c in cells(path) if c.get("id") == cell_id)
    lines = cell.splitlines()
    problems = []
    if not lines[0].startswith('MyCausalSelfAttention = load_mine("MyCausalSelfAttention")'):
        problems.append(f"starts with {lines[0]!r}")
    if lines[1] != "if module_is_written(MyCausalSelfAttention):":
        problems.append(f"second line {lines[1]!r}")
    if not lines[2].startswith("    with explained(MyCausalSelfAttention):"):
        problems.append(f"third line {lines[2]!r}")
    problems += [f"outside explained: {line!r}" for line in lines[3:] if line.strip() and not line.startswith(" " * 8)]
    return problems


#: Lines of a solutions cell that are the solutions' own checks or plumbing, not the learner's answer.
NOT_THE_ANSWER = ("#", '"""', "claim", "result", "from ", "import ", "save_mine", "print(")


def answer_lines(cell_source: str) -> list[str]:
    """The stripped lines of an answer that precede its ``claim("the checker accepts ...")``: neither blank, nor a
    comment, nor a docstring, nor the solutions' checks and plumbing (imports, ``load_mine``, ``save_mine``, prints)."""
    lines = []
    for line in cell_source.splitlines():
        text = line.strip()
        if text.startswith('claim("the checker accepts'):
            break
        if text and not text.startswith(NOT_THE_ANSWER) and "load_mine(" not in text:
            lines.append(text)
    return lines


def learner_lines(notebook: Path, solutions: Path) -> dict[str, list[str]]:
    """What the learner writes for each exercise of ``notebook``, counted from its ``solutions``: per checker the
    notebook calls (``result = check_x(...)``), the answer lines of the solutions cell the checker accepts that the
    notebook's own cell (the stub: the signature, the docstring, any line handed out) does not already hold."""

    def code(path: Path) -> list[str]:
        return [source(c) for c in cells(path) if c["cell_type"] == "code"]

    stubs = {name: cell for cell in code(notebook) for name in re.findall(r"^result = (check_\w+)\(", cell, re.M)}
    written = {}
    for name, stub in stubs.items():
        accepted = re.compile(rf'claim\("the checker accepts[^\n]*\b{name}\(')
        (answer,) = [cell for cell in code(solutions) if accepted.search(cell)]
        given = set(answer_lines(stub))
        written[name] = [line for line in answer_lines(answer) if line not in given]
    return written
