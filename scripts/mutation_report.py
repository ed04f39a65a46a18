"""`make mutation-report`: the mutation score of each mutated module, after `make mutate`.

mutmut keeps the verdict of every mutant it ran in ``mutants/<file>.meta``; the survivors that no
test can kill are listed, each with its reason, in ``tests/mutation/EQUIVALENT.md``. This prints
one row per mutated file (a Markdown table)::

    | module | mutants | killed | equivalent | alive, not listed | not run | score |

where *killed* counts the mutants a test failed on (or that ran past mutmut's time limit),
*equivalent* the survivors listed in EQUIVALENT.md, and the score is killed / (mutants -
equivalent - not run): the share of the mutants that can be told apart from the code, and were.

Under the table it names every survivor that is not listed (pin it with a test, or list it with
its reason) and every listed mutant that is now killed (its name moved when the function
changed: update the entry). It exits with 1 if there is one of either, so that the habit has a
clear end: a run is done when this passes.

With ``--record`` (``make mutation-report RECORD=1``), a run that passes also writes
``tests/mutation/verified.json``: for each function whose mutants all ran, its listed survivors and
mutmut's hash of the function's code. An equivalent mutant survives every test by definition, and
each one reruns every test that reaches its function (minutes for ``attend``), so ``make mutate``
starts a fresh run with those verdicts (``seed_verified``) and mutmut keeps them only while the
function's hash is unchanged; a changed function has all its mutants run again, as mutmut does
between its own runs. The report says how many equivalents were carried over rather than rerun.

Usage: ``python scripts/mutation_report.py [--mutants DIR] [--equivalent FILE] [--record]``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mutmut.stats import status_by_exit_code

ROOT = Path(__file__).resolve().parent.parent
EQUIVALENT = ROOT / "tests" / "mutation" / "EQUIVALENT.md"
VERIFIED = ROOT / "tests" / "mutation" / "verified.json"
# verified.json: {file: {function: {"hash": mutmut's hash of the function, "survived": [mutant, ...]}}}
Record = dict[str, dict[str, dict[str, Any]]]
MUTATED_FILES = (
    "mhsa_helpers/teaching/checking.py",
    "mhsa_helpers/teaching/feedback.py",
    "mhsa_helpers/teaching/predictions.py",
    "mhsa_helpers/teaching/gradients.py",
    "mhsa_helpers/teaching/misconceptions.py",
    "mhsa_helpers/teaching/attention_recipe.py",
    "mhsa_helpers/teaching/modules.py",
    "mhsa_helpers/teaching/ordering.py",
    "mhsa_helpers/teaching/recall.py",
    "mhsa_helpers/teaching/mine.py",
)  # besides the core, mhsa_helpers/*.py: the checker machinery; scripts/mutate.py imports this


def exit_codes(*statuses: str) -> set[int | None]:
    """mutmut's exit codes that it reports with one of ``statuses`` (its own table, mutmut.stats)."""
    return {code for code, status in status_by_exit_code.items() if status in statuses}


# Grouped as the score counts them: a test failed, the run timed out or crashed; every test passed, or none
# reaches the function; not checked yet, interrupted, or skipped.
CAUGHT = exit_codes("killed", "timeout", "caught by type check", "segfault")
ALIVE = exit_codes("survived", "no tests", "suspicious")
NOT_RUN = exit_codes("not checked", "check was interrupted by user", "skipped")

SECTION = re.compile(r"^## (\S+\.py)\s*$")
NAME = re.compile(r"`([^`]+)`")


def files_to_mutate(root: Path = ROOT) -> list[str]:
    """The core modules (``mhsa_helpers/*.py``, without ``__init__``) and the checker machinery."""
    core = sorted(
        str(path.relative_to(root)) for path in (root / "mhsa_helpers").glob("*.py") if path.name != "__init__.py"
    )
    return [*core, *MUTATED_FILES]


def module_of(path: str) -> str:
    """``mhsa_helpers/teaching/checking.py`` -> ``mhsa_helpers.teaching.checking`` (mutmut's prefix)."""
    return path.removesuffix(".py").replace("/", ".")


def listed_equivalents(text: str) -> dict[str, set[str]]:
    """The mutant names of each ``## <file>`` section's table, with the module prefix mutmut gives them.

    A row's first cell holds one or more names in backticks; ``_23`` after ``x_f__mutmut_20`` is
    short for ``x_f__mutmut_23``.
    """
    listed: dict[str, set[str]] = {}
    section = None
    for number, line in enumerate(text.splitlines(), start=1):
        header = SECTION.match(line)
        if header:
            section = header.group(1)
            listed.setdefault(section, set())
            continue
        if not line.startswith("| `"):
            continue
        if section is None:
            raise ValueError(f"line {number}: a mutant is listed before any '## <file>.py' section")
        full = None
        for name in NAME.findall(line.split("|")[1]):
            if re.fullmatch(r"_\d+", name):
                if full is None:
                    raise ValueError(f"line {number}: {name!r} continues no mutant name")
                name = full.rsplit("__mutmut_", 1)[0] + "__mutmut" + name
            elif not re.fullmatch(r"x\S*__mutmut_\d+", name):
                raise ValueError(f"line {number}: {name!r} is not a mutmut name (x<function>__mutmut_<n>)")
            full = name
            listed[section].add(f"{module_of(section)}.{name}")
    return listed


def function_of(mutant: str) -> str:
    """``mhsa_helpers.attention.x_attend__mutmut_3`` -> ``x_attend`` (mutmut's key for the function)."""
    return mutant.rsplit("__mutmut_", 1)[0].rsplit(".", 1)[1]


@dataclass
class Row:
    path: str
    verdicts: dict[str, int | None]
    listed: set[str] = field(default_factory=set)
    hashes: dict[str, str] = field(default_factory=dict)  # function -> mutmut's hash of its code
    durations: dict[str, float] = field(default_factory=dict)  # mutant -> seconds, for the mutants run

    def names(self, codes: set[int | None]) -> list[str]:
        return sorted(name for name, code in self.verdicts.items() if code in codes)

    @property
    def equivalent(self) -> list[str]:
        return [name for name in self.names(ALIVE) if name in self.listed]

    @property
    def unlisted(self) -> list[str]:
        return [name for name in self.names(ALIVE) if name not in self.listed]

    @property
    def stale(self) -> list[str]:
        """Listed, but killed now or no longer a mutant of this file."""
        return sorted(name for name in self.listed if self.verdicts.get(name, 1) in CAUGHT)

    @property
    def carried_over(self) -> list[str]:
        """Equivalents whose verdict came from verified.json: not run in this folder."""
        return [name for name in self.equivalent if name not in self.durations]

    @property
    def score(self) -> float | None:
        counted = len(self.verdicts) - len(self.equivalent) - len(self.names(NOT_RUN))
        return None if counted == 0 else len(self.names(CAUGHT)) / counted


def read_rows(mutants: Path, equivalent_text: str, paths: list[str]) -> list[Row]:
    listed = listed_equivalents(equivalent_text)
    rows = []
    for path in paths:
        meta = mutants / f"{path}.meta"
        data = json.loads(meta.read_text()) if meta.exists() else {}
        if data.get("exit_code_by_key"):
            rows.append(
                Row(
                    path,
                    data["exit_code_by_key"],
                    listed.get(path, set()),
                    data.get("hash_by_function_name", {}),
                    data.get("durations_by_key", {}),
                )
            )
    return rows


def verified(rows: list[Row], before: Record) -> Record:
    """``before`` updated with the listed survivors of every function whose mutants all ran in ``rows``:
    the record verified.json keeps."""
    after = {path: dict(functions) for path, functions in before.items()}
    for row in rows:
        functions = after.setdefault(row.path, {})
        complete = {function_of(name) for name in row.verdicts} - {function_of(name) for name in row.names(NOT_RUN)}
        for function in sorted(complete):
            survived = sorted(name for name in row.equivalent if function_of(name) == function)
            if survived:
                functions[function] = {"hash": row.hashes[function], "survived": survived}
            else:
                functions.pop(function, None)
        if not functions:
            del after[row.path]
    return after


def seed_verified(mutants: Path, record: Record) -> list[str]:
    """Give a fresh mutmut folder the recorded survivors' verdicts (0, survived) and their functions'
    hashes, for each file mutmut has not started; mutmut drops a verdict whose function's hash differs.
    Returns the files seeded."""
    seeded = []
    for path, functions in sorted(record.items()):
        meta = mutants / f"{path}.meta"
        if meta.exists():
            continue
        meta.parent.mkdir(parents=True, exist_ok=True)
        entry = {
            "exit_code_by_key": {name: 0 for function in functions.values() for name in function["survived"]},
            "hash_by_function_name": {name: function["hash"] for name, function in functions.items()},
            "type_check_error_by_key": {},
            "durations_by_key": {},
            "estimated_durations_by_key": {},
        }
        meta.write_text(json.dumps(entry, indent=4))
        seeded.append(path)
    return seeded


def read_verified(path: Path = VERIFIED) -> Record:
    return json.loads(path.read_text()) if path.exists() else {}


def write_verified(record: Record, path: Path = VERIFIED) -> None:
    path.write_text(json.dumps(record, indent=1, sort_keys=True, ensure_ascii=False) + "\n")


def report(rows: list[Row]) -> tuple[str, bool]:
    """The Markdown table and the names to act on; ``True`` when there are none."""
    lines = [
        "| module | mutants | killed | equivalent | alive, not listed | not run | score |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    total = Row("**all**", {name: code for row in rows for name, code in row.verdicts.items()})
    total.listed = {name for row in rows for name in row.listed}
    for row in [*rows, total]:
        score = "-" if row.score is None else f"{100 * row.score:.1f}%"
        lines.append(
            f"| {row.path} | {len(row.verdicts)} | {len(row.names(CAUGHT))} | {len(row.equivalent)} "
            f"| {len(row.unlisted)} | {len(row.names(NOT_RUN))} | {score} |"
        )
    carried = sum(len(row.carried_over) for row in rows)
    if carried:
        lines += [
            "",
            f"{carried} of the {len(total.equivalent)} equivalent mutants were not rerun: their functions are "
            "unchanged since they survived (tests/mutation/verified.json).",
        ]
    clean = True
    for row in rows:
        if row.unlisted:
            clean = False
            lines += ["", f"{row.path}: alive and not in EQUIVALENT.md (pin each with a test, or list it):"]
            lines += [f"  {name}" for name in row.unlisted]
        if row.stale:
            clean = False
            lines += ["", f"{row.path}: listed in EQUIVALENT.md but killed or gone (its name moved; update it):"]
            lines += [f"  {name}" for name in row.stale]
    return "\n".join(lines), clean


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--mutants", type=Path, default=Path("mutants"), help="mutmut's folder (default: mutants)")
    parser.add_argument("--equivalent", type=Path, default=EQUIVALENT, help="the list of equivalent mutants")
    parser.add_argument("--record", action="store_true", help="if the report passes, update the verified survivors")
    parser.add_argument("--verified", type=Path, default=VERIFIED, help="where the verified survivors are kept")
    args = parser.parse_args(argv)
    rows = read_rows(args.mutants, args.equivalent.read_text(), files_to_mutate())
    if not rows:
        print(f"no mutmut results in {args.mutants}/: run `make mutate` first")
        return 1
    table, clean = report(rows)
    print(table)
    if clean and args.record:
        write_verified(verified(rows, read_verified(args.verified)), args.verified)
        print(f"\nrecorded the verified survivors in {args.verified}")
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
