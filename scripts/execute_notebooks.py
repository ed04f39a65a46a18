#!/usr/bin/env python3
"""Re-execute notebooks in place, top to bottom, each in a fresh kernel.

Used by ``make notebooks``. For every notebook found under the given paths
(default: ``notebooks/``, which includes ``notebooks/solutions/``):

* a fresh ``python3`` kernel is started (the ipykernel of the Python running
  this script, i.e. the project's venv), with the notebook's own folder as
  the working directory;
* every code cell runs in order; a cell that raises stops that notebook
  (unless the cell is tagged ``raises-exception``) and the notebook file is
  left untouched;
* the result is written back with stable metadata (``kernelspec`` python3,
  no Python patch version, no per-cell timings, no widget state), so that
  re-running an unchanged notebook gives a minimal diff.

The kernels get PYTHONHASHSEED=0 and SOURCE_DATE_EPOCH=0 (as ``make test``
gives nbval) so that set ordering and figure metadata do not vary between
runs.

Exit status: 0 if every notebook ran cleanly, 1 otherwise (each failure is
reported on stderr), 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

KERNELSPEC = {
    "display_name": "Python 3 (ipykernel)",
    "language": "python",
    "name": "python3",
}

# Environment for the kernels: set before any kernel starts, inherited by it.
KERNEL_ENV = {
    "PYTHONHASHSEED": "0",
    "SOURCE_DATE_EPOCH": "0",
}


def find_notebooks(paths: list[Path]) -> list[Path]:
    """All .ipynb files under ``paths`` (files or folders), sorted, without
    checkpoints or anything else in hidden folders."""
    found: set[Path] = set()
    for path in paths:
        if path.is_file():
            if path.suffix != ".ipynb":
                raise SystemExit(f"error: not a notebook: {path}")
            found.add(path)
        elif path.is_dir():
            for nb in path.rglob("*.ipynb"):
                rel = nb.relative_to(path)
                if not any(part.startswith(".") for part in rel.parts):
                    found.add(nb)
        else:
            raise SystemExit(f"error: no such file or folder: {path}")
    return sorted(found)


def normalise_metadata(nb: nbformat.NotebookNode) -> None:
    """Make the notebook-level metadata independent of the machine."""
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    language_info = nb.metadata.get("language_info")
    if language_info is not None:
        # The patch version differs from machine to machine.
        language_info.pop("version", None)
    # Widget state holds random model ids; it is not kept (see module doc).
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        cell.metadata.pop("execution", None)  # timings, if any were stored


def execute(path: Path, timeout: int) -> None:
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        kernel_name="python3",
        timeout=timeout,
        startup_timeout=120,
        allow_errors=False,
        record_timing=False,
        store_widget_state=False,
        resources={"metadata": {"path": str(path.parent.resolve())}},
    )
    client.execute()
    normalise_metadata(nb)
    nbformat.validate(nb)
    nbformat.write(nb, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "paths",
        nargs="*",
        type=Path,
        default=[Path("notebooks")],
        help="notebooks or folders to search (recursively); default: notebooks",
    )
    parser.add_argument(
        "--timeout",
        type=int,
        default=600,
        help="seconds allowed for one cell (default: %(default)s)",
    )
    args = parser.parse_args(argv)

    os.environ.update(KERNEL_ENV)
    notebooks = find_notebooks(args.paths)
    if not notebooks:
        print("No notebooks found under: " + ", ".join(map(str, args.paths)))
        return 0

    failures: list[tuple[Path, str]] = []
    for path in notebooks:
        print(f"executing {path} ...", end=" ", flush=True)
        start = time.monotonic()
        try:
            execute(path, args.timeout)
        except (CellExecutionError, CellTimeoutError, DeadKernelError) as exc:
            print("FAILED", flush=True)
            failures.append((path, str(exc)))
        except Exception as exc:  # e.g. invalid JSON, kernel that won't start
            print("FAILED", flush=True)
            failures.append((path, f"{type(exc).__name__}: {exc}"))
        else:
            print(f"ok ({time.monotonic() - start:.1f} s)", flush=True)

    if failures:
        for path, message in failures:
            print(f"\n===== {path} failed (file left unchanged) =====", file=sys.stderr)
            print(message, file=sys.stderr)
        print(
            f"\n{len(failures)} of {len(notebooks)} notebook(s) failed: "
            + ", ".join(str(p) for p, _ in failures),
            file=sys.stderr,
        )
        return 1
    print(f"{len(notebooks)} notebook(s) executed.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
