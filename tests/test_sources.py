"""Every lesson notebook names its sources and states a reading time its content supports.

* It ends with a ``## References`` cell of public links (a learner can open every one), listed once.
* Every paper listed there is cited in the text where it is used (first author and year), and every
  inline citation ("Dao et al., 2022", "Milakov & Gimelshein, 2018") has its entry.
* Its reading time (the registry's ``reading_minutes``, which ``scripts/sync_notebooks.py`` writes into its
  first cell beside the minutes of its exercises) is within 5 minutes of an estimate from its content: prose
  at 200 words a minute and half a minute per code cell.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import nbformat
import pytest

from mhsa_helpers.lessons import LESSONS

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = [ROOT / lesson.notebook for lesson in LESSONS]
IDS = [path.stem[:2] for path in NOTEBOOKS]
LESSON_OF = {ROOT / lesson.notebook: lesson for lesson in LESSONS}

#: "- Vaswani, A. et al. (2017). *Attention Is All You Need*. NeurIPS. https://arxiv.org/abs/1706.03762"
REFERENCE = re.compile(r"^- (?P<authors>[^()]+?) \((?P<year>\d{4})\)\. \*(?P<title>[^*]+)\*.*?(?P<url>https://\S+)$")
#: "Dao et al., 2022", "Milakov & Gimelshein, 2018", "Dao, 2023": the first author and the year.
CITATION = re.compile(r"\b([A-Z][A-Za-z-]+)(?: et al\.| & [A-Z][A-Za-z-]+)?, (\d{4})\b")
WORDS_PER_MINUTE = 200
MINUTES_PER_CODE_CELL = 0.5


def cells(path: Path) -> list:
    return nbformat.read(path, as_version=4).cells


def references(path: Path) -> list[str]:
    last = cells(path)[-1]
    assert last.cell_type == "markdown", f"{path.name} does not end with a references cell"
    lines = last.source.strip().splitlines()
    assert lines[0] == "## References", f"{path.name}'s last cell is not '## References'"
    return [line for line in lines[1:] if line.strip()]


def prose_words(text: str) -> int:
    """Words a reader reads: markdown without URLs, display math counted as a few words."""
    text = re.sub(r"https?://\S+", " ", text)
    text = re.sub(r"\$\$.*?\$\$", " formula formula formula ", text, flags=re.DOTALL)
    return len(re.findall(r"[A-Za-z0-9]+(?:['’][A-Za-z]+)?", text))


def estimated_minutes(path: Path) -> float:
    """The minutes it takes to read a notebook's text and run its cells; its exercises are timed apart."""
    notebook = cells(path)
    words = sum(prose_words(c.source) for c in notebook if c.cell_type == "markdown")
    code = [c for c in notebook if c.cell_type == "code"]
    return words / WORDS_PER_MINUTE + len(code) * MINUTES_PER_CODE_CELL


def test_every_lesson_is_checked():
    assert len(NOTEBOOKS) == len(LESSONS) >= 11 and all(path.is_file() for path in NOTEBOOKS)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_the_last_cell_lists_public_links_once_each(path):
    entries = references(path)
    assert entries and all(line.startswith("- ") and "https://" in line for line in entries), entries
    assert len(set(entries)) == len(entries), "a reference is listed twice"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_every_listed_paper_is_cited_where_it_is_used(path):
    text = "\n".join(c.source for c in cells(path)[:-1] if c.cell_type == "markdown")
    # Papers are listed as "Surname, I. ..."; an issue or a page ("owner/repo issue #1") is cited by its link.
    papers = [m for m in (REFERENCE.match(line) for line in references(path)) if m is not None and "," in m["authors"]]
    assert papers, f"{path.name} lists no paper as 'Author (year). *Title*. ... https://...'"
    for paper in papers:
        surname = paper["authors"].split(",")[0].strip()
        cited = re.search(rf"{re.escape(surname)}( et al\.| \(| [A-Z&]|,)[^\n]{{0,40}}{paper['year']}", text)
        assert cited, f"{path.name}: {surname} ({paper['year']}) is listed but never cited where it is used"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_every_inline_citation_has_its_entry(path):
    entries = references(path)
    text = "\n".join(c.source for c in cells(path)[:-1] if c.cell_type == "markdown")
    for author, year in set(CITATION.findall(text)):
        assert any(line.startswith(f"- {author},") and f"({year})" in line for line in entries), (author, year)


@pytest.mark.parametrize(
    ("line", "ok"),
    [
        ("- Vaswani, A. et al. (2017). *Attention Is All You Need*. NeurIPS. https://arxiv.org/abs/1706.03762", True),
        ("- Vaswani et al. 2017, Attention Is All You Need", False),
        ("- Su, J. et al. (2021). *RoFormer*. arXiv.", False),
    ],
)
def test_reference_pattern(line, ok):
    assert bool(REFERENCE.match(line)) is ok


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_the_stated_reading_time_matches_words_and_cells(path):
    stated, estimate = LESSON_OF[path].reading_minutes, estimated_minutes(path)
    assert stated % 5 == 0 and abs(stated - estimate) <= 5, (
        f"{path.name}: the registry says {stated} minutes; its content takes {estimate:.0f}: set its "
        f"reading_minutes to {5 * round(estimate / 5)} and run `python scripts/sync_notebooks.py`"
    )


def test_the_reading_time_estimate_counts_words_and_code_cells(tmp_path):
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_markdown_cell("word " * 400 + "https://example.org/a/b"),
        nbformat.v4.new_code_cell("x = 1"),
        nbformat.v4.new_code_cell("def f():\n    raise NotImplementedError"),
    ]
    assert prose_words("see https://arxiv.org/abs/1706.03762 now") == 2
    path = tmp_path / "probe.ipynb"
    nbformat.write(notebook, path)
    assert math.isclose(estimated_minutes(path), 400 / 200 + 2 * 0.5)
