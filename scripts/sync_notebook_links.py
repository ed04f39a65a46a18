"""Write every notebook's "Open in Colab" badge and Colab set-up cell from mhsa_helpers.lessons.links.

    python scripts/sync_notebook_links.py           # rewrite what differs, list the notebooks changed
    python scripts/sync_notebook_links.py --check   # exit 1 if a notebook differs (what the test does)

The badge is the line starting with "[![Open In Colab]" in the first cell; the set-up cell is the first
code cell, which starts with "# Set-up:". Only cell sources change, never outputs.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import nbformat

from mhsa_helpers.lessons.links import badge_markdown, setup_cell

ROOT = Path(__file__).resolve().parent.parent
BADGE_LINE = re.compile(r"^\[!\[Open In Colab\]\([^)]*\)\]\([^)]*\)$", re.MULTILINE)


def synced(path: Path) -> nbformat.NotebookNode:
    notebook = nbformat.read(path, as_version=4)
    first = notebook.cells[0]
    if first.cell_type != "markdown" or not BADGE_LINE.search(first.source):
        raise SystemExit(f"{path}: the first cell has no 'Open In Colab' badge line")
    first.source = BADGE_LINE.sub(badge_markdown(path.relative_to(ROOT).as_posix()), first.source, count=1)
    setup = next(cell for cell in notebook.cells if cell.cell_type == "code")
    if not setup.source.startswith("# Set-up:"):
        raise SystemExit(f"{path}: the first code cell is not the '# Set-up:' cell")
    setup.source = setup_cell()
    return notebook


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report notebooks that differ")
    args = parser.parse_args(argv)
    differ = []
    for path in sorted((ROOT / "notebooks").rglob("*.ipynb")):
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
