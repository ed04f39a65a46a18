"""Write into every notebook what the package defines once: the "Open in Colab" badge, the Colab set-up cell and
a lesson's link to its solutions (mhsa_helpers.lessons.links), the time line of a lesson's first cell and the label
under each exercise's heading (mhsa_helpers.lessons).

    python scripts/sync_notebooks.py           # rewrite what differs, list the notebooks changed
    python scripts/sync_notebooks.py --check   # exit 1 if a notebook differs (what the tests do)
    python scripts/sync_notebooks.py notebooks/01_qkv_by_hand.ipynb   # only these notebooks

The badge is the line starting with "[![Open In Colab]" in the first cell; the set-up cell is the first code
cell, which starts with "# Set-up:"; the time line is the sentence "Time: about ..." of a lesson's first cell;
an exercise's label is the line after its heading "### Exercise N · <title>" (and a blank line), whose title
must be the registry's; the link to the solutions is the one mention of "`solutions/<stem>_solutions.ipynb`" in a
lesson's markdown, with its links. Only cell sources change, never outputs.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import nbformat

from mhsa_helpers.lessons import LESSONS, Lesson, exercise_label, time_line
from mhsa_helpers.lessons.links import badge_markdown, setup_cell, solutions_markdown

ROOT = Path(__file__).resolve().parent.parent
BADGE_LINE = re.compile(r"^\[!\[Open In Colab\]\([^)]*\)\]\([^)]*\)$", re.MULTILINE)
TIME_LINE = re.compile(r"Time: about \d+ minutes to read and run, .*? minutes\)\.")
#: "`solutions/x.ipynb`", bare or linked, with or without its Colab link: what solutions_markdown writes.
SOLUTIONS_LINK = r"\[?`{0}`(?:\]\({0}\))?(?: \(\[open it in Colab\]\([^)\s]*\)\))?"
EXERCISE_HEADING = re.compile(r"^### Exercise (\d+) · (.+)$")
LABEL = re.compile(r"^\*(Predict|Debug|Build|Order) · difficulty ")


def lesson_of(path: Path) -> tuple[Lesson, bool]:
    """The lesson a notebook or its solutions belong to, and whether it is the lesson's own notebook."""
    relative = path.relative_to(ROOT).as_posix()
    for item in LESSONS:
        if relative in (str(item.notebook), str(item.solutions)):
            return item, relative == str(item.notebook)
    raise SystemExit(f"{relative}: no lesson in mhsa_helpers.lessons.LESSONS has this notebook")


def labelled(source: str, item: Lesson, seen: list[int], path: Path) -> str:
    """``source`` with the label of each exercise heading it holds written under it."""
    lines = source.split("\n")
    out: list[str] = []
    index = 0
    while index < len(lines):
        out.append(lines[index])
        heading = EXERCISE_HEADING.match(lines[index])
        index += 1
        if heading is None:
            continue
        number, title = int(heading[1]), heading[2]
        if number > len(item.exercises) or item.exercises[number - 1].title != title:
            expected = item.exercises[number - 1].title if number <= len(item.exercises) else "no such exercise"
            raise SystemExit(f"{path.name}: exercise {number} is {title!r} here, {expected!r} in the registry")
        seen.append(number)
        if index + 1 < len(lines) and lines[index] == "" and LABEL.match(lines[index + 1]):
            index += 2  # the old label, replaced below
        out += ["", exercise_label(item.exercises[number - 1])]
        if index < len(lines) and lines[index] != "":
            out.append("")
    return "\n".join(out)


def synced(path: Path) -> nbformat.NotebookNode:
    notebook = nbformat.read(path, as_version=4)
    item, own = lesson_of(path)
    first = notebook.cells[0]
    if first.cell_type != "markdown" or not BADGE_LINE.search(first.source):
        raise SystemExit(f"{path}: the first cell has no 'Open In Colab' badge line")
    first.source = BADGE_LINE.sub(badge_markdown(path.relative_to(ROOT).as_posix()), first.source, count=1)
    if own:
        if len(TIME_LINE.findall(first.source)) != 1:
            raise SystemExit(f"{path}: the first cell has no one 'Time: about ... minutes).' sentence")
        first.source = TIME_LINE.sub(time_line(item), first.source)
        link = re.compile(SOLUTIONS_LINK.format(re.escape(f"solutions/{path.stem}_solutions.ipynb")))
        markdown = [cell for cell in notebook.cells if cell.cell_type == "markdown"]
        if sum(len(link.findall(cell.source)) for cell in markdown) != 1:
            raise SystemExit(f"{path}: the markdown does not name `solutions/{path.stem}_solutions.ipynb` once")
        for cell in markdown:
            cell.source = link.sub(lambda _: solutions_markdown(item.notebook.as_posix()), cell.source)
    setup = next(cell for cell in notebook.cells if cell.cell_type == "code")
    if not setup.source.startswith("# Set-up:"):
        raise SystemExit(f"{path}: the first code cell is not the '# Set-up:' cell")
    setup.source = setup_cell()
    seen: list[int] = []
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            cell.source = labelled(cell.source, item, seen, path)
    if seen != list(range(1, len(item.exercises) + 1)):
        raise SystemExit(f"{path}: exercise headings {seen}, the registry has {len(item.exercises)} exercises")
    return notebook


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report notebooks that differ")
    parser.add_argument("notebooks", nargs="*", type=Path, help="these notebooks only (default: all)")
    args = parser.parse_args(argv)
    differ = []
    chosen = [path.resolve() for path in args.notebooks] or sorted((ROOT / "notebooks").rglob("*.ipynb"))
    for path in chosen:
        before = nbformat.read(path, as_version=4)
        after = synced(path)
        if [c.source for c in before.cells] != [c.source for c in after.cells]:
            differ.append(path.relative_to(ROOT).as_posix())
            if not args.check:
                nbformat.write(after, path)
    for name in differ:
        print(("differs: " if args.check else "rewrote: ") + name)
    return 1 if args.check and differ else 0


if __name__ == "__main__":
    sys.exit(main())
