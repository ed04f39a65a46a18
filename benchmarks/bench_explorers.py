"""In-kernel redraw time of each explorer at its default size.

    python benchmarks/bench_explorers.py [--moves 20] [--quick]

Every explorer of the lessons' registry (``mhsa_helpers.lessons.LESSONS``) at its default
settings; each row moves one of its enabled controls back and forth between its value and a
neighbouring one (``teaching.explorer.nearby_value``) from Python (exactly what a slider
does: the control's observer recomputes with the package, redraws the figure and sets the
JPEG and caption widgets) and times every move. The moves run inside an asyncio event loop, as
in a kernel: a move draws the picture at the screen's resolution (``CSS_DPI``) and leaves its
sharpening for later; the benchmark then sharpens at once (``explorer.sharpen()``: the same
picture at ``DPI``, what the kernel does once the controls are still) and times that too.
Reported per row: median and 90th percentile wall time of the move, median CPU time of this
process (less sensitive to other load on the machine), and the median wall time of the sharpening.
Target: median wall time of a move <= 30 ms (PASS/MISS, never asserted).

"layout" rows change the figure's structure (number of heads, sequence length: the move
shows another figure): the first visit of a layout builds its axes, later visits reuse them
(the explorers keep the last few layouts); the first-visit cost is reported separately.

The browser side (keypress to rendered caption in JupyterLab) is measured by
tests/browser/test_jupyterlab.py, which prints its own table (run pytest with -s).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

import matplotlib

matplotlib.use("Agg")

from mhsa_helpers.lessons import LESSONS
from mhsa_helpers.teaching.explorer import CSS_DPI, DPI, nearby_value

TARGET_MS = 30.0


def cases() -> list[tuple[Callable[[], Any], str, Any, Any, str]]:
    """(explorer factory, control, value A, value B, kind) for every enabled control of every
    registered explorer; kind is "layout" when moving to B shows another figure, else "values"."""
    rows = []
    for lesson in LESSONS:
        if lesson.explorer is None:
            continue
        explorer = lesson.explorer()
        for name, control in explorer.controls.items():
            value = nearby_value(control)
            if control.disabled or value is None:
                continue  # e.g. the RoPE base while RoPE is off: a user cannot move it
            start, figure = control.value, explorer.figure
            control.value = value
            kind = "values" if explorer.figure is figure else "layout"
            control.value = start
            rows.append((lesson.explorer, name, start, value, kind))
        explorer.close()
    return rows


async def time_moves(make: Callable[[], Any], control: str, a: Any, b: Any, moves: int):
    """Run inside an event loop (as in a kernel), so that a move leaves its sharpening for later."""
    explorer = make()
    widget = explorer.controls[control]
    widget.value = a
    explorer.sharpen()
    # First visit of the other value (a new layout is built here for "layout" rows).
    start = time.perf_counter()
    widget.value = b
    first = (time.perf_counter() - start) * 1000
    explorer.sharpen()
    widget.value = a
    explorer.sharpen()
    walls, cpus, sharpens = [], [], []
    for move in range(moves):
        value = b if move % 2 == 0 else a
        start, cpu = time.perf_counter(), time.process_time()
        widget.value = value
        walls.append((time.perf_counter() - start) * 1000)
        cpus.append((time.process_time() - cpu) * 1000)
        assert explorer.data[control] == value or explorer.data[control] == float(value), (control, value)
        start = time.perf_counter()
        explorer.sharpen()
        sharpens.append((time.perf_counter() - start) * 1000)
    explorer.close()
    return first, walls, cpus, sharpens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--moves", type=int, default=20, help="timed moves per row (default 20)")
    parser.add_argument("--quick", action="store_true", help="5 moves per row (a smoke run)")
    args = parser.parse_args()
    moves = 5 if args.quick else max(1, args.moves)

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"# Explorer redraw time (in-kernel, Agg at {CSS_DPI:g} dpi after a move, sharpened to {DPI:g} dpi; "
        f"shown at {CSS_DPI:g} CSS px per inch, JPEG)\n"
    )
    print(
        f"python {platform.python_version()}, {os.cpu_count()} CPUs, load average {load:.2f} at start; "
        f"{moves} moves per row; target: median wall <= {TARGET_MS:.0f} ms\n"
    )
    print(
        "| explorer | control moved | kind | median wall ms | p90 wall ms | median CPU ms | first visit ms "
        "| sharpen ms | target |"
    )
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- |")
    misses = 0
    rows = cases()
    for make, control, a, b, kind in rows:
        first, walls, cpus, sharpens = asyncio.run(time_moves(make, control, a, b, moves))
        median = statistics.median(walls)
        p90 = sorted(walls)[max(0, round(0.9 * len(walls)) - 1)]
        verdict = "PASS" if median <= TARGET_MS else "MISS"
        misses += verdict == "MISS"
        print(
            f"| {make.__name__} | {control} {a!r:.8}↔{b!r:.8} | {kind} | {median:.1f} | {p90:.1f} | "
            f"{statistics.median(cpus):.1f} | {first:.1f} | {statistics.median(sharpens):.1f} | {verdict} |",
            flush=True,
        )
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"\n{len(rows) - misses}/{len(rows)} rows within the target; load average {load:.2f} at the end "
        "(a loaded machine inflates wall times; CPU time is the steadier figure)."
    )


if __name__ == "__main__":
    main()
