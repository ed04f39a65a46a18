"""Reading a committed notebook's cells in tests: their source, what they printed, and a function
exactly as a cell defines it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch


def cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def source(cell: dict) -> str:
    return "".join(cell["source"])


def printed(cell: dict) -> str:
    return "".join("".join(o.get("text", "")) for o in cell.get("outputs", []))


def defined_in_notebook(path: Path, name: str):
    """The function ``name`` exactly as the notebook's cell defines it (the checker call removed)."""
    cell = next(c for c in cells(path) if f"def {name}(" in source(c))
    code = source(cell).split("\nresult = ")[0]
    namespace: dict = {"torch": torch, "math": math}
    exec(compile(code, path.stem, "exec"), namespace)
    return namespace[name]
