"""The README's Python examples run and do what the README says."""

from __future__ import annotations

import re
from pathlib import Path

import torch

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def test_readme_python_example_runs_and_its_comments_hold():
    blocks = python_blocks()
    assert blocks, "README.md has no ```python example"
    torch.manual_seed(0)
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, str(README), "exec"), namespace)
    # The comments in the example state these shapes and that cached decoding equals the full pass.
    assert namespace["y"].shape == (2, 10, 512)
    assert namespace["weights"].shape == (2, 8, 10, 10)
    torch.testing.assert_close(torch.cat(namespace["steps"], dim=1), namespace["attn"](namespace["x"]))


def test_readme_series_table_is_the_registrys():
    """The table of notebooks between the lessons markers is what
    ``python -m mhsa_helpers.lessons --markdown`` prints (paste its output there after a change)."""
    from mhsa_helpers.lessons import markdown_table

    text = README.read_text(encoding="utf-8")
    found = re.findall(r"<!-- lessons:start -->\n(.*?)\n<!-- lessons:end -->", text, flags=re.S)
    assert len(found) == 1, "README.md must hold one table between <!-- lessons:start --> and <!-- lessons:end -->"
    assert found[0].strip() == markdown_table()
