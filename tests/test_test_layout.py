"""Each lesson's tests live in one folder, ``tests/lessons/NN_<name>/``, named like the lesson's notebook.

The tests of one lesson's teaching code (its checkers, diagrams, figures and tools in
``mhsa_helpers/lessons/<name>/``) sit in that folder; ``tests/`` keeps the core's tests and the ones that
iterate the registry over every lesson. pytest's default import mode imports each test file by its
basename, so no two test files under ``tests/`` may share one.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path, PurePosixPath

from mhsa_helpers.lessons import LESSONS

TESTS = Path(__file__).resolve().parent
LESSON_TESTS = TESTS / "lessons"


def folder_names(root: Path) -> set[str]:
    return {p.name for p in root.iterdir() if p.is_dir() and p.name != "__pycache__"}


def notebook_stems() -> set[str]:
    return {PurePosixPath(lesson.notebook).stem for lesson in LESSONS}


def test_every_lesson_folder_is_named_like_a_registered_notebook():
    unknown = folder_names(LESSON_TESTS) - notebook_stems()
    assert not unknown, f"tests/lessons/ folders named like no registered notebook: {sorted(unknown)}"


def test_every_lesson_has_a_folder_with_tests():
    missing = sorted(s for s in notebook_stems() if not list((LESSON_TESTS / s).glob("test_*.py")))
    assert not missing, f"lessons without tests in tests/lessons/<notebook stem>/: {missing}"


def test_the_stems_are_what_the_folders_are_compared_with():
    # The registry's notebooks are notebooks/NN_<name>.ipynb; a stem that lost its number would match nothing.
    assert all(stem[:2].isdigit() and stem[2] == "_" for stem in notebook_stems())
    assert len(notebook_stems()) == len(LESSONS)


def test_test_file_names_are_unique_under_tests():
    names = Counter(p.name for p in TESTS.rglob("test_*.py") if "__pycache__" not in p.parts)
    assert not [n for n, c in names.items() if c > 1], "pytest's default import mode needs unique test file names"


def test_no_lesson_folder_is_a_package():
    # Without __init__.py each folder is put on sys.path by its own basename; tests/conftest.py's folder
    # (tests/) is on it too, so the shared helpers (learner_reference, test_wrong_answers) import everywhere.
    assert not list(LESSON_TESTS.rglob("__init__.py"))
