"""`make mutate`: mutation testing of the core with mutmut 3, one worker per core.

mutmut copies the package to ``mutants/``, writes every mutant of every function into that
copy behind a switch, runs the selected tests once to record which tests call which
function, and then runs each mutant against only the tests that reach its function
(fastest first, stopping at the first failure). ``mutmut results`` / ``mutmut show NAME``
(run from the repository's root, ``.venv/bin/mutmut``) list and print the survivors.

Two things are set here rather than in ``[tool.mutmut]`` (pyproject.toml):

* Which files are mutated: the core (``mhsa_helpers/*.py``) and the exercise checker machinery
  (``mhsa_helpers/teaching/``'s checking, feedback, predictions, gradients, misconceptions, attention_recipe,
  modules, ordering and recall, and mine: the learner's file). mutmut matches its ``only_mutate`` patterns with
  ``fnmatch``, whose ``*`` also crosses ``/``, so the list is computed with ``Path.glob`` (which
  does not), and a new core module is included unasked (``files_to_mutate``, kept in
  ``scripts/mutation_report.py``, which reads the results). The explorers are left out: most of
  their mutants change a slider's label or a colour, and each costs a figure drawn per test
  (tens of seconds here), which would make the run hours longer.
* mutmut runs a mutant's tests by their ids, and pytest (run in mutmut's process) cannot
  select an id whose parameters hold a "/" (read as a path) or a backslash (escaped twice).
  Those tests (52 of about 1,650 today) are deselected before mutmut records which test
  reaches which function (one ``pytest --collect-only`` first), so they are not run.

A fresh run starts with the verdicts of the equivalent mutants recorded in
tests/mutation/verified.json (see scripts/mutation_report.py), which mutmut keeps only for functions
whose code is unchanged; ``--rerun-equivalents`` runs them all again (from an empty ``mutants/``,
e.g. after ``make clean``: mutmut keeps the verdicts of its own earlier runs too).

Usage: ``python scripts/mutate.py [--rerun-equivalents] [mutmut run arguments]``, e.g. ``"mhsa_helpers.block.*"``
to mutate one module's functions only. Survivors that cannot be killed are listed, each with
the reason, in tests/mutation/EQUIVALENT.md; ``make mutation-report`` then prints each module's
score and names the survivors that are neither killed nor listed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from mutation_report import files_to_mutate, read_verified, seed_verified  # this folder is on sys.path
from mutmut import configuration
from mutmut.__main__ import cli


def ids_pytest_cannot_select(selection: list[str]) -> list[str]:
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *selection],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    return [test for test in collected if "::" in test and any(c in test.split("::", 1)[1] for c in "/\\")]


def main() -> None:
    arguments = sys.argv[1:]
    if "--rerun-equivalents" in arguments:
        arguments.remove("--rerun-equivalents")
    else:
        seeded = seed_verified(Path("mutants"), read_verified())
        if seeded:
            print(f"verified survivors carried over for {len(seeded)} files (tests/mutation/verified.json)")
    config = configuration.config()
    config.only_mutate = files_to_mutate()
    selection = config.pytest_add_cli_args_test_selection
    selection += [f"--deselect={test}" for test in ids_pytest_cannot_select(selection + config.pytest_add_cli_args)]
    cli(["run", *arguments])


if __name__ == "__main__":
    main()
