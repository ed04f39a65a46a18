"""In-kernel redraw time of each explorer at its default size.

    python benchmarks/bench_explorers.py [--moves 20] [--quick]

Each row moves one control back and forth between two values from Python (exactly what
a slider does: the control's observer recomputes with the package, redraws the figure
and sets the PNG and caption widgets) and times every move. Reported per row: median
and 90th percentile wall time, and median CPU time of this process (less sensitive to
other load on the machine). Target: median wall time <= 50 ms (PASS/MISS, never asserted).

"layout" rows change the figure's structure (number of heads, sequence length): the
first visit of a layout builds its axes, later visits reuse them (the explorers keep the
last few layouts); the first-visit cost is reported separately.

The browser side (keypress to rendered caption in JupyterLab) is measured by
tests/browser/test_jupyterlab.py, which prints its own table (run pytest with -s).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from typing import Any, Callable, List, Tuple

import matplotlib

matplotlib.use("Agg")

from mhsa_helpers import explorers  # noqa: E402

TARGET_MS = 50.0

# (explorer factory, control, value A, value B, kind)
CASES: List[Tuple[Callable[[], Any], str, Any, Any, str]] = [
    (explorers.qkv_explorer, "score_scale", 1.0, 10.0, "values"),
    (explorers.qkv_explorer, "head", 1, 2, "values"),
    (explorers.scaling_explorer, "d_k", 64, 65, "values"),
    (explorers.scaling_explorer, "scaled", True, False, "values"),
    (explorers.masking_explorer, "causal", True, False, "values"),
    (explorers.masking_explorer, "dropout", 0.0, 0.1, "values"),
    (explorers.masking_explorer, "seq_len", 6, 5, "layout"),
    (explorers.heads_explorer, "head", 1, 2, "values"),
    (explorers.heads_explorer, "num_heads", 2, 3, "layout"),
    (explorers.heads_explorer, "seq_len", 6, 5, "layout"),
    (explorers.rope_explorer, "base", 10000.0, 10.0 ** 4.1, "values"),
    (explorers.rope_explorer, "offset", 0, 1, "values"),
    (explorers.rope_explorer, "pair_index", 0, 1, "values"),
    (explorers.mhsa_explorer, "causal", False, True, "values"),
    (explorers.mhsa_explorer, "rope", False, True, "values"),
    (explorers.mhsa_explorer, "num_heads", 4, 8, "layout"),
    (explorers.mhsa_explorer, "seq_len", 6, 5, "layout"),
]


def time_moves(make: Callable[[], Any], control: str, a: Any, b: Any, moves: int):
    explorer = make()
    widget = explorer.controls[control]
    widget.value = a
    # First visit of the other value (a new layout is built here for "layout" rows).
    start = time.perf_counter()
    widget.value = b
    first = (time.perf_counter() - start) * 1000
    widget.value = a
    walls, cpus = [], []
    for move in range(moves):
        value = b if move % 2 == 0 else a
        start, cpu = time.perf_counter(), time.process_time()
        widget.value = value
        walls.append((time.perf_counter() - start) * 1000)
        cpus.append((time.process_time() - cpu) * 1000)
        assert explorer.data[control] == value or explorer.data[control] == float(value), (control, value)
    explorer.close()
    return first, walls, cpus


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--moves", type=int, default=20, help="timed moves per row (default 20)")
    parser.add_argument("--quick", action="store_true", help="5 moves per row (a smoke run)")
    args = parser.parse_args()
    moves = 5 if args.quick else max(1, args.moves)

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"# Explorer redraw time (in-kernel, Agg, {explorers.DPI} dpi PNG)\n")
    print(f"python {platform.python_version()}, {os.cpu_count()} CPUs, load average {load:.2f} at start; "
          f"{moves} moves per row; target: median wall <= {TARGET_MS:.0f} ms\n")
    print("| explorer | control moved | kind | median wall ms | p90 wall ms | median CPU ms | first visit ms | target |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | --- |")
    misses = 0
    for make, control, a, b, kind in CASES:
        first, walls, cpus = time_moves(make, control, a, b, moves)
        median = statistics.median(walls)
        p90 = sorted(walls)[max(0, int(round(0.9 * len(walls))) - 1)]
        verdict = "PASS" if median <= TARGET_MS else "MISS"
        misses += verdict == "MISS"
        print(f"| {make.__name__} | {control} {a!r:.8}↔{b!r:.8} | {kind} | {median:.1f} | {p90:.1f} | "
              f"{statistics.median(cpus):.1f} | {first:.1f} | {verdict} |", flush=True)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"\n{len(CASES) - misses}/{len(CASES)} rows within the target; load average {load:.2f} at the end "
          "(a loaded machine inflates wall times; CPU time is the steadier figure).")


if __name__ == "__main__":
    main()
