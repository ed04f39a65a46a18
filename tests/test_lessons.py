"""The registry of lessons (``mhsa_helpers.lessons.LESSONS``) agrees with the repository.

Everything that lists the notebooks (tests, benchmarks, the browser test, the README's table)
iterates the registry, so these tests are what make a forgotten entry, a stale path or a
lesson folder without a notebook fail: the facts are read from the files themselves.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import io
import json
import linecache
import re
import shutil
import subprocess
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import pytest
from notebook_cells import answer_lines, learner_lines

from mhsa_helpers.lessons import (
    EXERCISE_MINUTES,
    LESSONS,
    PLANNED,
    Exercise,
    Lesson,
    exercise_label,
    lesson,
    markdown_table,
    time_line,
)
from mhsa_helpers.teaching.explorer import Explorer

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "mhsa_helpers"
LESSON_IDS = [f"{item.number:02d}_{item.slug}" for item in LESSONS]


def code_cells(path: Path) -> list[str]:
    notebook = json.loads(path.read_text(encoding="utf-8"))
    return ["".join(cell["source"]) for cell in notebook["cells"] if cell["cell_type"] == "code"]


def first_heading(path: Path) -> str:
    notebook = json.loads(path.read_text(encoding="utf-8"))
    return "".join(notebook["cells"][0]["source"]).splitlines()[0]


def stub(*args, **kwargs):
    raise NotImplementedError


# ------------------------------------------------------------------ the registry itself


def test_numbers_count_from_one_in_order_and_slugs_are_unique():
    numbers = [item.number for item in LESSONS]
    assert numbers == sorted(numbers)
    # A number may be missing only while its notebook is planned (and listed as such in the README).
    planned = [number for number, _ in PLANNED]
    assert not set(planned) & set(numbers)
    assert sorted(numbers + planned) == list(range(1, len(numbers) + len(planned) + 1))
    slugs = [item.slug for item in LESSONS]
    assert len(set(slugs)) == len(slugs)
    assert all(isinstance(item, Lesson) for item in LESSONS)


def test_lesson_looks_up_by_number_and_names_a_bad_number():
    for item in LESSONS:
        assert lesson(item.number) is item
    with pytest.raises(ValueError, match=r"number must be one of \[1, .*got number=0"):
        lesson(0)


def test_lessons_are_frozen():
    with pytest.raises(AttributeError):
        LESSONS[0].number = 7  # type: ignore[misc]  # the refused assignment is what is tested


# ------------------------------------------------------------------ against the files


@pytest.mark.parametrize("item", LESSONS, ids=LESSON_IDS)
def test_notebook_and_solutions_exist_and_are_named_after_the_number(item):
    notebook = ROOT / item.notebook
    assert notebook.is_file(), item.notebook
    assert item.notebook.parent.as_posix() == "notebooks"
    assert item.notebook.name.startswith(f"{item.number:02d}_")
    assert item.solutions is not None, "every lesson has a solutions notebook"
    assert (ROOT / item.solutions).is_file(), item.solutions
    assert item.solutions.as_posix() == f"notebooks/solutions/{item.notebook.stem}_solutions.ipynb"


@pytest.mark.parametrize("item", LESSONS, ids=LESSON_IDS)
def test_title_is_the_notebooks_heading(item):
    assert first_heading(ROOT / item.notebook) == f"# {item.number:02d} · {item.title}"
    assert first_heading(ROOT / item.solutions).startswith(f"# {item.number:02d} · Solutions")


def test_every_notebook_is_registered():
    registered = {item.notebook.as_posix() for item in LESSONS}
    found = {path.relative_to(ROOT).as_posix() for path in (ROOT / "notebooks").glob("*.ipynb")}
    assert found == registered
    solutions = {item.solutions.as_posix() for item in LESSONS if item.solutions is not None}
    found = {path.relative_to(ROOT).as_posix() for path in (ROOT / "notebooks" / "solutions").glob("*.ipynb")}
    assert found == solutions


def test_every_lesson_folder_is_registered():
    folders = {path.parent.name for path in (PACKAGE / "lessons").glob("*/__init__.py")}
    assert folders == {item.slug for item in LESSONS}


@pytest.mark.parametrize("item", LESSONS, ids=LESSON_IDS)
def test_each_lesson_folder_is_named_like_its_notebook(item):
    assert item.notebook.stem == f"{item.number:02d}_{item.slug}"


@pytest.mark.parametrize("item", LESSONS, ids=LESSON_IDS)
def test_the_registry_lists_the_checkers_the_notebook_calls_in_its_order(item):
    """The registry names each lesson's checkers itself; they are the ones its notebook's exercises
    call, first call first (a checker added to the notebook but not registered fails here), after the recall
    questions that open every notebook but the first."""
    called: list[str] = []
    for cell in json.loads((ROOT / item.notebook).read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] == "code":
            for name in re.findall(r"\b(check_[a-z0-9_]+)\(", "".join(cell["source"])):
                if name not in called:
                    called.append(name)
    assert [checker.__name__ for checker in every_checker(item)] == called
    assert (item.recall is None) == (item.number == 1)


def every_checker(item):
    """The lesson's recall checker, then its exercises' checkers."""
    return ((item.recall,) if item.recall else ()) + item.checkers


@pytest.mark.parametrize("item", LESSONS, ids=LESSON_IDS)
def test_lesson_package_exports_its_explorer_and_checkers(item):
    package = importlib.import_module(f"mhsa_helpers.lessons.{item.slug}")
    assert item.checkers, "every lesson has exercises"
    for checker in item.checkers:
        assert getattr(package, checker.__name__) is checker
        assert checker.__module__ == f"mhsa_helpers.lessons.{item.slug}.exercises"
    if item.recall is not None:
        assert package.check_recall is item.recall
        assert item.recall.__module__ == f"mhsa_helpers.lessons.{item.slug}.recall"
    if item.explorer is not None:
        assert getattr(package, item.explorer.__name__) is item.explorer
        assert item.explorer.__module__ == f"mhsa_helpers.lessons.{item.slug}.explorer"


# ------------------------------------------------------------------ explorers and checkers


@pytest.mark.parametrize("item", [i for i in LESSONS if i.explorer is not None], ids=lambda i: i.slug)
def test_explorer_factory_builds_an_explorer(item):
    explorer = item.explorer()
    try:
        assert isinstance(explorer, Explorer)
        assert explorer.redraw_count == 1
        assert explorer.data["caption"]
    finally:
        explorer.close()


@pytest.mark.parametrize("item", LESSONS, ids=LESSON_IDS)
def test_notebook_imports_and_runs_exactly_its_checkers(item):
    source = "\n".join(code_cells(ROOT / item.notebook))
    imported = re.search(rf"from mhsa_helpers\.lessons\.{item.slug} import \(?([^)\n]*(?:\n[^)]*)?)\)?", source)
    assert imported, f"{item.notebook} does not import from mhsa_helpers.lessons.{item.slug}"
    called = set(re.findall(r"\b(check_\w+)\(", source))
    assert called == {checker.__name__ for checker in every_checker(item)}


@pytest.mark.parametrize("item", LESSONS, ids=LESSON_IDS)
def test_every_checker_accepts_the_solutions_notebooks_answer(item, tmp_path, monkeypatch):
    """Run the solutions notebook's code, then give each checker the function that notebook
    asserts correct: every registered checker must have one, and accept it."""
    cells = code_cells(ROOT / item.solutions)
    source = "\n".join(cells)
    # The solutions state "the solution passes the checker" as an assert or as a claim.
    answers = dict(re.findall(r"(?:assert |claim\([^,]+,\s*)(check_\w+)\((\w+)\)\.correct", source))
    assert set(answers) == {checker.__name__ for checker in every_checker(item)}
    namespace: dict = {"__name__": "__solutions__"}
    # In a copy of the folder's my_attention.py (which the solutions load and save), each cell under a name of its
    # own whose lines linecache holds, as IPython runs it (save_mine reads a piece's source from there).
    shutil.copy(ROOT / "notebooks" / "solutions" / "my_attention.py", tmp_path)
    monkeypatch.chdir(tmp_path)
    with contextlib.redirect_stdout(io.StringIO()):
        for number, cell in enumerate(cells):
            if cell.startswith("%%my_attention"):
                continue  # the paste cell of Colab: nothing is pasted in the solutions
            filename = f"<{item.solutions.name}, cell {number}>"
            linecache.cache[filename] = (len(cell), None, cell.splitlines(keepends=True), filename)
            exec(compile(cell, filename, "exec"), namespace)
    for checker in item.checkers:
        result = checker(namespace[answers[checker.__name__]], verbose=False)
        assert result.correct, result.message
        assert checker(stub, verbose=False).status == "not_attempted"
    if item.recall is not None:
        recalled = namespace[answers["check_recall"]]
        assert item.recall(recalled, verbose=False).correct
        assert item.recall(dict.fromkeys(recalled), verbose=False).status == "not_attempted"


@pytest.mark.parametrize("item", LESSONS, ids=LESSON_IDS)
def test_no_committed_exercise_output_states_a_mistake_or_its_fix(item):
    """What a learner sees before trying: each exercise cell's committed output is the checker saying it is not
    attempted yet, or, for code handed out to debug, that it is still the original, and nothing else: no
    mistake's name, idea or fix. (The payoff cells of 07 and 11 say the learner's module is not written yet.)"""
    notebook = json.loads((ROOT / item.notebook).read_text(encoding="utf-8"))
    names = {checker.__name__ for checker in every_checker(item)}
    told = []
    for cell in notebook["cells"]:
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"])
        text = "".join("".join(output.get("text", "")) for output in cell.get("outputs", []))
        assert not re.search(r"this looks like|the fix for|result\.reveal\(\)|known mistake", text), text
        if set(re.findall(r"\b(check_\w+)\(", source)) & names:
            verdicts = [line for line in text.splitlines() if line.startswith("[")]
            assert len(verdicts) == 1, text
            assert re.match(r"\[[^]]+\] (not attempted yet|still the original): ", verdicts[0]), verdicts[0]
            told.append(verdicts[0].split("] ", 1)[1].split(":")[0])
    assert len(told) == len(every_checker(item)), told


def global_grad_switches(source: str) -> list[str]:
    """The statements of a code cell that switch autograd off for the whole kernel: a bare call of
    ``set_grad_enabled`` (but with ``True``) or ``inference_mode``, not as a ``with`` block or a decorator, which
    end with their block or function. IPython's ``%`` and ``!`` lines count as ``pass``."""
    lines = [
        line[: len(line) - len(line.lstrip())] + "pass" if line.lstrip().startswith(("%", "!")) else line
        for line in source.splitlines()
    ]
    switches = []
    for node in ast.walk(ast.parse("\n".join(lines))):
        if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)):
            continue
        function = node.value.func
        name = function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", "")
        switched_on = [ast.unparse(a) for a in node.value.args] == ["True"]
        if name == "inference_mode" or (name == "set_grad_enabled" and not switched_on):
            switches.append(ast.unparse(node))
    return switches


def test_the_grad_switch_finder_tells_a_global_switch_from_a_local_one():
    cell = "import torch\n%matplotlib inline\ntorch.set_grad_enabled(False)  # why\nx = 1"
    assert global_grad_switches(cell) == ["torch.set_grad_enabled(False)"]
    for switch in ("torch.autograd.set_grad_enabled(False)", "torch.inference_mode()", "set_grad_enabled(flag)"):
        assert global_grad_switches(f"for i in range(2):\n    %time f()\n\n    {switch}") == [switch]
    local = (
        "with torch.no_grad():\n    y = f(x)\n"
        "with torch.set_grad_enabled(False), torch.inference_mode():\n    y = f(x)\n"
        "@torch.inference_mode()\ndef g(x):\n    return f(x)\n"
        "torch.set_grad_enabled(True)\n!pip list"
    )
    assert global_grad_switches(local) == []


@pytest.mark.parametrize("item", LESSONS, ids=LESSON_IDS)
def test_no_notebook_turns_gradients_off_for_the_whole_kernel(item):
    """A notebook that turns autograd off for the kernel breaks the learner's own ``loss.backward()`` in any later
    cell: inference lines go under ``with torch.no_grad():``, which ends with its block (issue 33, item 6)."""
    for path in (item.notebook, item.solutions):
        switches = [s for cell in code_cells(ROOT / path) for s in global_grad_switches(cell)]
        assert not switches, f"{path}: {switches}"


# ------------------------------------------------------------------ times


# ------------------------------------------------------------------ what the learner writes


def test_an_answers_own_lines_leave_out_the_stub_the_checks_and_the_plumbing():
    stub = 'def f(x):\n    """doc"""\n    y = ___  # fill in\n    return y\n\nresult = check_f(f)\n'
    answer = (
        'from math import sqrt\nmine = load_mine(\'f\')\ndef f(x):\n    """doc"""\n    # why\n\n'
        '    y = sqrt(x)\n    return y\nsave_mine(f)\nclaim("the checker accepts this solution", check_f(f).correct)\n'
        "extra = f(4)\n"
    )
    assert answer_lines(stub) == ["def f(x):", "y = ___  # fill in", "return y"]
    assert answer_lines(answer) == ["def f(x):", "y = sqrt(x)", "return y"]


def test_the_learner_writes_150_lines_of_their_own_in_01_to_06_and_every_build_needs_some():
    written = {
        item.number: learner_lines(ROOT / item.notebook, ROOT / item.solutions) for item in LESSONS if item.number <= 6
    }
    total = sum(len(lines) for by_checker in written.values() for lines in by_checker.values())
    assert total >= 150, f"the learner writes {total} lines of their own in notebooks 01-06"
    for item in LESSONS[:6]:
        checkers = {exercise.checker.__name__ for exercise in item.exercises} | (
            {"check_recall"} if item.recall else set()
        )
        assert set(written[item.number]) == checkers
        for exercise in item.exercises:
            if exercise.kind == "build":
                own = written[item.number][exercise.checker.__name__]
                assert own, f"{item.number:02d}: {exercise.title!r} leaves the learner nothing to write"


@pytest.mark.parametrize("item", LESSONS, ids=LESSON_IDS)
def test_the_notebook_states_its_times_and_labels_each_exercise_as_the_registry_says(item):
    cells = json.loads((ROOT / item.notebook).read_text(encoding="utf-8"))["cells"]
    text = "\n".join("".join(cell["source"]) for cell in cells if cell["cell_type"] == "markdown")
    first = "".join(cells[0]["source"])
    minutes = sum(exercise.minutes for exercise in item.exercises)
    assert f"Time: about {item.reading_minutes} minutes to read and run, and about {minutes} for the " in first
    assert text.count(time_line(item)) == 1
    found = re.findall(r"^### Exercise (\d+) · (.+)\n\n(.+)$", text, flags=re.MULTILINE)
    assert found == [
        (str(number), exercise.title, exercise_label(exercise)) for number, exercise in enumerate(item.exercises, 1)
    ]


def test_an_exercise_is_labelled_with_its_kind_difficulty_and_minutes():
    assert exercise_label(Exercise("Find the bug", "debug", 2)) == "*Debug · difficulty ●●○ · about 15 minutes*"
    assert exercise_label(Exercise("Predict", "predict", 1)).startswith("*Predict · difficulty ●○○ · about 3 ")
    assert [Exercise("x", "build", level).minutes for level in (1, 2, 3)] == [10, 20, 30]
    for kind, minutes in EXERCISE_MINUTES.items():
        assert list(minutes) == sorted(set(minutes)), f"a harder {kind} exercise takes longer"
    item = lesson(6)
    assert item.exercise_minutes == sum(EXERCISE_MINUTES[e.kind][e.difficulty - 1] for e in item.exercises)
    assert "about 118 for the 7 exercises" in time_line(item)
    assert all(kind in EXERCISE_MINUTES for item in LESSONS for kind in (e.kind for e in item.exercises))
    assert all(e.difficulty in (1, 2, 3) for item in LESSONS for e in item.exercises)


# ------------------------------------------------------------------ the README's table


def test_markdown_table_has_one_linked_row_per_lesson_with_its_times_and_their_sums():
    lines = markdown_table().splitlines()
    assert lines[:2] == ["| # | notebook | the idea | reading | exercises |", "|---|---|---|---|---|"]
    assert len(lines) == 2 + len(LESSONS) + len(PLANNED) + 1
    by_number = {int(line.split("|")[1]): line for line in lines[2:-1]}
    assert list(by_number) == sorted(by_number)
    for item in LESSONS:
        line = by_number[item.number]
        assert line.startswith(f"| {item.number:02d} | [{item.title}]({item.notebook}) | ")
        minutes = sum(exercise.minutes for exercise in item.exercises)
        assert item.summary and line.endswith(
            f" | {item.summary} | {item.reading_minutes} min | {minutes} min ({len(item.exercises)}) |"
        )
    for number, title in PLANNED:
        assert by_number[number] == f"| {number:02d} | {title} | *planned* | | |"
    reading = sum(item.reading_minutes for item in LESSONS)
    exercises = sum(exercise.minutes for item in LESSONS for exercise in item.exercises)
    assert 60 * 7 < reading + exercises < 60 * 24, "the series takes a fortnight's evenings, not an afternoon"
    assert lines[-1] == (
        f"| | **all {len(LESSONS)}** | {(reading + exercises) // 60} h {(reading + exercises) % 60:02d} min in all | "
        f"{reading // 60} h {reading % 60:02d} min | {exercises // 60} h {exercises % 60:02d} min "
        f"({sum(len(item.exercises) for item in LESSONS)}) |"
    )


def test_markdown_command_prints_the_table():
    out = subprocess.run(
        [sys.executable, "-m", "mhsa_helpers.lessons", "--markdown"], capture_output=True, text=True, check=True
    )
    assert out.stdout == markdown_table() + "\n"
