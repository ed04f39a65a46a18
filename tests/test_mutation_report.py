"""The list of equivalent mutants (tests/mutation/EQUIVALENT.md) and the report that scores each
module with it (scripts/mutation_report.py, `make mutation-report`).

The list is read in CI, not only after a mutmut run: every entry must name a function that still
exists in the file of its section, so a renamed or deleted function cannot leave entries behind.
The report is checked on small results written here in mutmut's format (``<file>.meta``).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# scripts/ is a folder of scripts, not a package.
sys.path.insert(0, str(ROOT / "scripts"))
import mutation_report as report  # noqa: E402  (after the path is set)

LIST = (ROOT / "tests" / "mutation" / "EQUIVALENT.md").read_text()


def defined_function(path: str, mutant: str) -> bool:
    """Whether the function a mutmut name points at (``x_f`` or ``xǁClassǁmethod``) is defined in ``path``."""
    function = mutant.rsplit(".", 1)[1].rsplit("__mutmut_", 1)[0]
    source = (ROOT / path).read_text()
    if function.startswith("xǁ"):
        cls, method = function[2:].split("ǁ")
        body = source.split(f"\nclass {cls}", 1)
        return len(body) == 2 and re.search(rf"\n    def {re.escape(method)}\(", body[1].split("\nclass ", 1)[0])
    return re.search(rf"^def {re.escape(function[2:])}\(", source, re.MULTILINE) is not None


def test_every_section_of_the_list_is_a_mutated_file():
    sections = report.listed_equivalents(LIST)
    assert sections, "EQUIVALENT.md lists no section"
    assert set(sections) <= set(report.files_to_mutate()), sorted(set(sections) - set(report.files_to_mutate()))


def test_every_listed_mutant_names_a_function_of_its_file():
    gone = [
        name
        for path, names in report.listed_equivalents(LIST).items()
        for name in names
        if not defined_function(path, name)
    ]
    assert not gone, f"EQUIVALENT.md lists mutants of functions that no longer exist: {sorted(gone)}"


def test_every_listed_mutant_says_why_it_cannot_be_killed():
    rows = [line for line in LIST.splitlines() if line.startswith("| `")]
    assert rows
    for row in rows:
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", row.strip().strip("|"))]  # "\|" is a "|" in a cell
        assert len(cells) == 3 and cells[1] and cells[2], f"a row needs a mutant, its diff and a reason: {row}"
        # One of the kinds the list's introduction defines, then the reason ("same value: ...", "CPU only, as above").
        assert re.match(r"(unreachable|same value|CPU only|same check)\b", cells[2]), f"unknown kind of reason: {row}"


def test_the_files_to_mutate_are_the_core_and_the_checker_machinery():
    files = report.files_to_mutate()
    assert "mhsa_helpers/attention.py" in files and "mhsa_helpers/teaching/checking.py" in files
    assert "mhsa_helpers/__init__.py" not in files
    # The explorers and the lessons' exercises are teaching code, not mutated.
    assert not [f for f in files if f.startswith("mhsa_helpers/lessons/")]
    assert "mhsa_helpers/teaching/explorer.py" not in files


def test_short_names_continue_the_one_before():
    text = "## mhsa_helpers/a.py\n\n| `x_f__mutmut_20`, `_23` | d | same value: r |\n| `xǁCǁm__mutmut_4` | d | r |\n"
    assert report.listed_equivalents(text) == {
        "mhsa_helpers/a.py": {
            "mhsa_helpers.a.x_f__mutmut_20",
            "mhsa_helpers.a.x_f__mutmut_23",
            "mhsa_helpers.a.xǁCǁm__mutmut_4",
        }
    }


@pytest.mark.parametrize(
    "text, complaint",
    [
        ("| `x_f__mutmut_1` | d | r |\n", "before any"),
        ("## mhsa_helpers/a.py\n| `_3` | d | r |\n", "continues no mutant name"),
        ("## mhsa_helpers/a.py\n| `f__mutmut_3` | d | r |\n", "is not a mutmut name"),
    ],
)
def test_a_malformed_list_is_refused_with_its_line(text, complaint):
    with pytest.raises(ValueError, match=complaint):
        report.listed_equivalents(text)


# Results are written for a real core file, as `main` reads the files that `make mutate` mutates.
FILE, F = "mhsa_helpers/softmax.py", "mhsa_helpers.softmax.x_softmax__mutmut_"
LISTED = f"## {FILE}\n\n| `x_softmax__mutmut_2` | d | same value: r |\n"


def write_results(folder: Path, verdicts: dict[str, int | None], hashes: dict[str, str] | None = None) -> None:
    meta = folder / f"{FILE}.meta"
    meta.parent.mkdir(parents=True, exist_ok=True)
    meta.write_text(json.dumps({"exit_code_by_key": verdicts, "hash_by_function_name": hashes or {}}))


def test_the_score_leaves_out_the_listed_survivors_and_the_mutants_not_run(tmp_path):
    # 1 killed, 1 timed out (caught), 1 listed survivor, 1 not run, 1 unlisted survivor.
    write_results(tmp_path, {f"{F}{i}": code for i, code in enumerate([1, 36, 0, None, 0, 0], start=1)})
    listed = LISTED + "| `x_softmax__mutmut_6`, `_9` | d | same value: r |\n"
    # A file without results (attention) gets no row.
    [row] = report.read_rows(tmp_path, listed, [FILE, "mhsa_helpers/attention.py"])
    assert row.names(report.CAUGHT) == [f"{F}1", f"{F}2"]
    assert row.names(report.NOT_RUN) == [f"{F}4"]
    assert row.equivalent == [f"{F}6"]
    assert row.unlisted == [f"{F}3", f"{F}5"]
    # Listed, but the timed-out _2 was caught, and there is no _9: both entries are stale.
    assert row.stale == [f"{F}2", f"{F}9"]
    assert row.score == pytest.approx(2 / 4)  # 6 mutants, 1 not run, 1 equivalent


def test_a_listed_survivor_is_not_counted_against_the_score(tmp_path):
    write_results(tmp_path, {f"{F}1": 1, f"{F}2": 0})
    [row] = report.read_rows(tmp_path, LISTED, [FILE])
    assert row.equivalent == [f"{F}2"] and not row.unlisted and not row.stale
    assert row.score == 1.0
    table, clean = report.report([row])
    assert clean
    assert f"| {FILE} | 2 | 1 | 1 | 0 | 0 | 100.0% |" in table
    assert "| **all** | 2 | 1 | 1 | 0 | 0 | 100.0% |" in table


def test_an_unlisted_survivor_is_named_and_fails_the_report(tmp_path, capsys):
    write_results(tmp_path, {f"{F}1": 1, f"{F}2": 0})
    listed = tmp_path / "EQUIVALENT.md"
    listed.write_text(f"## {FILE}\n")
    assert report.main(["--mutants", str(tmp_path), "--equivalent", str(listed)]) == 1
    out = capsys.readouterr().out
    assert f"| {FILE} | 2 | 1 | 0 | 1 | 0 | 50.0% |" in out
    assert "alive and not in EQUIVALENT.md" in out and f"{F}2" in out
    listed.write_text(LISTED)
    assert report.main(["--mutants", str(tmp_path), "--equivalent", str(listed)]) == 0


def test_without_results_the_report_says_to_run_mutmut_first(tmp_path, capsys):
    assert report.main(["--mutants", str(tmp_path / "none")]) == 1
    assert "run `make mutate` first" in capsys.readouterr().out


def test_a_passing_run_records_the_survivors_of_each_function_whose_mutants_all_ran():
    verdicts = {f"{F}1": 1, f"{F}2": 0, "mhsa_helpers.softmax.x_other__mutmut_1": None}
    row = report.Row(FILE, verdicts, {f"{F}2"}, {"x_softmax": "abc", "x_other": "def"}, {f"{F}1": 0.1, f"{F}2": 3.0})
    before = {
        FILE: {"x_other": {"hash": "old", "survived": ["kept: not all of its mutants ran"]}},
        "mhsa_helpers/heads.py": {"x_f": {"hash": "h", "survived": ["kept: no results for this file"]}},
    }
    assert report.verified([row], before) == {
        FILE: {
            "x_other": {"hash": "old", "survived": ["kept: not all of its mutants ran"]},
            "x_softmax": {"hash": "abc", "survived": [f"{F}2"]},
        },
        "mhsa_helpers/heads.py": {"x_f": {"hash": "h", "survived": ["kept: no results for this file"]}},
    }


def test_a_function_without_survivors_any_more_leaves_the_record():
    row = report.Row(FILE, {f"{F}1": 1, f"{F}2": 1}, set(), {"x_softmax": "abc"}, {})
    assert report.verified([row], {FILE: {"x_softmax": {"hash": "abc", "survived": [f"{F}2"]}}}) == {}


def test_a_fresh_folder_starts_with_the_recorded_verdicts_in_mutmuts_format(tmp_path):
    from mutmut.mutation.data import SourceFileMutationData

    record = {FILE: {"x_softmax": {"hash": "abc", "survived": [f"{F}2", f"{F}5"]}}}
    assert report.seed_verified(tmp_path / "mutants", record) == [FILE]
    # mutmut reads its folder relative to the working directory.
    data = SourceFileMutationData(path=FILE)
    data.meta_path = tmp_path / "mutants" / f"{FILE}.meta"
    data.load()
    assert data.exit_code_by_key == {f"{F}2": 0, f"{F}5": 0}
    assert data.hash_by_function_name == {"x_softmax": "abc"}
    # A folder mutmut has started on is its own: nothing is written over it.
    assert report.seed_verified(tmp_path / "mutants", {FILE: {}}) == []
    data.load()
    assert data.exit_code_by_key == {f"{F}2": 0, f"{F}5": 0}


def test_carried_over_equivalents_are_counted_and_said(tmp_path):
    row = report.Row(FILE, {f"{F}1": 1, f"{F}2": 0, f"{F}3": 0}, {f"{F}2", f"{F}3"}, {}, {f"{F}1": 0.1, f"{F}3": 2.0})
    assert row.carried_over == [f"{F}2"]
    table, clean = report.report([row])
    assert clean and "1 of the 2 equivalent mutants were not rerun" in table


def test_the_recorded_survivors_are_listed_as_equivalent():
    listed = set().union(*report.listed_equivalents(LIST).values())
    recorded = report.read_verified()
    assert recorded, "tests/mutation/verified.json records no survivor: run `make mutation-report RECORD=1`"
    for path, functions in recorded.items():
        assert path in report.files_to_mutate()
        for function, entry in functions.items():
            assert all(report.function_of(name) == function for name in entry["survived"])
            assert set(entry["survived"]) <= listed, sorted(set(entry["survived"]) - listed)


def test_the_survivors_are_recorded_only_when_the_report_passes(tmp_path):
    write_results(tmp_path, {f"{F}1": 1, f"{F}2": 0}, {"x_softmax": "abc"})
    listed, record = tmp_path / "EQUIVALENT.md", tmp_path / "verified.json"
    listed.write_text(f"## {FILE}\n")
    arguments = ["--mutants", str(tmp_path), "--equivalent", str(listed), "--verified", str(record), "--record"]
    assert report.main(arguments) == 1 and not record.exists()
    listed.write_text(LISTED)
    assert report.main(arguments) == 0
    assert report.read_verified(record) == {FILE: {"x_softmax": {"hash": "abc", "survived": [f"{F}2"]}}}


@pytest.mark.parametrize("changed", [False, True])
def test_mutmut_keeps_a_carried_over_verdict_only_while_the_function_is_unchanged(tmp_path, monkeypatch, changed):
    from mutmut import configuration
    from mutmut.__main__ import create_mutants_for_file
    from mutmut.mutation.file_mutation import compute_function_hashes

    (tmp_path / "pkg").mkdir()
    source = "def f(a, b):\n    return a + 2 * b\n"
    (tmp_path / "pkg" / "m.py").write_text(source)
    (tmp_path / "pyproject.toml").write_text('[tool.mutmut]\nsource_paths = ["pkg"]\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(configuration, "_config", None)  # mutmut reads pyproject.toml once per process
    record = {
        "pkg/m.py": {"x_f": {"hash": compute_function_hashes(source)["x_f"], "survived": ["pkg.m.x_f__mutmut_1"]}}
    }
    if changed:
        (tmp_path / "pkg" / "m.py").write_text("def f(a, b):\n    return a + 3 * b\n")
    report.seed_verified(Path("mutants"), record)
    create_mutants_for_file(Path("pkg/m.py"), Path("mutants/pkg/m.py"))
    verdicts = json.loads(Path("mutants/pkg/m.py.meta").read_text())["exit_code_by_key"]
    assert len(verdicts) > 1  # f has several mutants; only the recorded one may keep a verdict
    assert verdicts.pop("pkg.m.x_f__mutmut_1") == (None if changed else 0)
    assert set(verdicts.values()) == {None}
