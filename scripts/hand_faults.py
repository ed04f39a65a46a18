"""`make hand-faults`: plant each hand-written fault of tests/mutation/hand_faults.py, one at a time, and run the tests.

mutmut (`make mutate`) plants mechanical faults: a flipped operator, a changed constant. The faults in
``tests/mutation/hand_faults.py`` are the ones a person writes: a mask off by one, the halves and pairs conventions
of RoPE swapped, a cache advanced twice. Each is applied to a copy of the repository's tracked files (never to the
working tree), then the tests run in up to three stages, stopping at the first failure:

1. near: the module's own test files (``tests/test_<module>*.py``, ``tests/test_pinned_<module>*.py``) and the
   tests that compare the core with independent references or feed it bad input;
2. core: every test file of the core (``tests/test_*.py`` but the checkers', explorers', sources' and other
   teaching scaffolding's), only for a fault stage 1 missed;
3. all: every test ``make test`` runs outside a browser (not the notebooks), only for a fault stage 2 missed.

A fault is caught when a test fails. The table printed at the end (markdown) names, for each fault, the first test
that failed, or ``SURVIVED``; the exit status is 1 if any survived, or if a fault's text is no longer in its
file (stale: the code changed since the round was written).

Usage: ``python scripts/hand_faults.py [--only 3,17] [--workers 2]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ALWAYS_NEAR = ["tests/test_independent_references.py", "tests/test_bad_input.py"]
#: Test files of the teaching scaffolding, the notebooks' sources and the repository: left out of stage 2.
NOT_CORE = (
    "test_checker_", "test_pinned_checking", "test_pinned_explorer", "test_pinned_feedback", "test_pinned_gradients",
    "test_pinned_misconceptions", "test_pinned_module_diagnosis", "test_pinned_modules", "test_pinned_ordering",
    "test_pinned_predictions", "test_explorer", "test_static_explorers", "test_diagrams", "test_plots", "test_sources",
    "test_hints", "test_claims", "test_teaching_", "test_wrong_answers", "test_lessons", "test_notebook_links",
    "test_readme", "test_exercises_core", "test_benchmarking", "test_mutation_report", "test_packaging", "test_seeds",
    "test_structure", "test_test_layout", "test_core_imports",
)  # fmt: skip


def load_faults() -> list:
    spec = importlib.util.spec_from_file_location("hand_faults", ROOT / "tests/mutation/hand_faults.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["hand_faults"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module.FAULTS


def copy_repository(into: Path) -> None:
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in tracked.decode().split("\0"):
        if name and (ROOT / name).is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, into / name)


def near_tests(work: Path, file: str) -> list[str]:
    module = Path(file).stem
    found = sorted({*work.glob(f"tests/test_{module}*.py"), *work.glob(f"tests/test_pinned_{module}*.py")})
    return [str(path.relative_to(work)) for path in found] + ALWAYS_NEAR


def core_tests(work: Path) -> list[str]:
    return [
        str(path.relative_to(work))
        for path in sorted(work.glob("tests/test_*.py"))
        if not path.name.startswith(NOT_CORE)
    ]


def first_failure(work: Path, selection: list[str], workers: int) -> tuple[str | None, float]:
    """Run the selection in the copy; the first failing test's id (None if every test passed) and the seconds taken."""
    environment = {**os.environ, "PYTHONPATH": str(work), "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    command = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-rf", "-m", "not browser"]
    command += ["-n", str(workers), "--dist", "loadfile", *selection]
    start = time.perf_counter()
    run = subprocess.run(command, cwd=work, env=environment, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if run.returncode == 0:
        return None, seconds
    failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", run.stdout, flags=re.MULTILINE)
    return (failed[0] if failed else f"pytest exit {run.returncode}: {run.stdout.strip().splitlines()[-1]}"), seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated fault numbers (1-based)")
    parser.add_argument("--workers", type=int, default=2)
    arguments = parser.parse_args()
    faults = list(enumerate(load_faults(), start=1))
    if arguments.only:
        wanted = {int(number) for number in arguments.only.split(",")}
        faults = [(number, fault) for number, fault in faults if number in wanted]

    work = Path(tempfile.mkdtemp(prefix="hand-faults-"))
    rows, stale = [], []
    try:
        copy_repository(work)
        for number, fault in faults:
            path = work / fault.file
            original = path.read_text()
            if original.count(fault.old) != 1:  # the code moved on since the round was written: rewrite the fault
                print(f"{number:3d} {fault.file:40s} stale: its old text occurs {original.count(fault.old)} times")
                stale.append(number)
                continue
            path.write_text(original.replace(fault.old, fault.new))
            try:
                stages = (("near", near_tests(work, fault.file)), ("core", core_tests(work)), ("all", ["tests"]))
                caught, seconds, stage = None, 0.0, "near"
                for name, selection in stages:
                    caught, more = first_failure(work, selection, arguments.workers)
                    seconds, stage = seconds + more, name
                    if caught is not None:
                        break
            finally:
                path.write_text(original)
            verdict = f"`{caught}`" if caught else "**SURVIVED**"
            rows.append((number, fault, stage, verdict, seconds))
            print(f"{number:3d} {fault.file:40s} {stage:4s} {seconds:6.1f} s  {caught or 'SURVIVED'}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    caught_count = sum(verdict != "**SURVIVED**" for _, _, _, verdict, _ in rows)
    print(f"\n{caught_count} of {len(rows)} faults caught ({100 * caught_count / max(len(rows), 1):.1f}%)")
    if stale:
        print(f"stale, not run (their code changed): {', '.join(map(str, stale))}")
    print()
    print("| # | file | the fault | caught by | stage |")
    print("|---:|---|---|---|---|")
    for number, fault, stage, verdict, _ in rows:
        print(f"| {number} | {fault.file.removeprefix('mhsa_helpers/')} | {fault.what} | {verdict} | {stage} |")
    return 0 if caught_count == len(rows) and not stale else 1


if __name__ == "__main__":
    sys.exit(main())
