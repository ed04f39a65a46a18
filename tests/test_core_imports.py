"""The core's imports: no cycle, and in the order of the syllabus.

Each core module (``mhsa_helpers/*.py``) names, in its docstring, the notebook that teaches it
("Taught in notebook 05" — the first "notebook NN" it mentions). A module taught by notebook N may
import only modules taught by notebooks <= N, so that a reader who follows the notebooks never
meets a name from a later lesson in the code of an earlier one.

*Foundation* modules are taught by no notebook and may be imported everywhere: the ``expect_*``
vocabulary of argument checks (``checks``), what differs between PyTorch releases (``compat``), where
to run (``devices``), and the package's ``__init__``. They import no module that a notebook teaches.
"""

from __future__ import annotations

import ast
import functools
import re
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "mhsa_helpers"
FOUNDATION = {"checks", "compat", "devices"}
NOTEBOOK = re.compile(r"\bnotebooks? (\d\d)\b")

#: Imports against the syllabus that are kept on purpose, each with the reason.
ALLOWED_LATER = {
    # attend's mask and is_causal arguments come with the masks in notebook 03; notebook 02 calls it without them.
    ("attention", "masking"): "the masks of notebook 03",
    # The loaders build notebook 06's module, which the notebooks use as a ready-made tool from notebook 01 on.
    ("weight_layouts", "mha"): "the module of notebook 06",
    # The RoPE weight permutation (notebook 05, section 9) converts the rows of a layout of notebook 04.
    ("weight_layouts", "rope"): "the pairing conventions of notebook 05",
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imported_modules(path: Path, modules: dict[str, Path]) -> set[str]:
    """Every module of the package that ``path`` imports, at the top or inside a function."""
    here = module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            submodules = {f"{source}.{alias.name}" for alias in node.names} & modules.keys()  # `from . import checks`
            found |= submodules
            if len(submodules) < len(node.names):  # names defined in `source` itself
                found.add(source)
    return {name for name in found if name in modules and name != here}


@functools.cache
def import_graph() -> dict[str, set[str]]:
    modules = package_modules()
    return {name: imported_modules(path, modules) for name, path in modules.items()}


@functools.cache
def taught_by(name: str) -> int | None:
    """The notebook that teaches a core module (the first one its docstring names), None for a foundation module."""
    short = name.rpartition(".")[2]
    if short in FOUNDATION:
        return None
    docstring = ast.get_docstring(ast.parse((PACKAGE / f"{short}.py").read_text(encoding="utf-8"))) or ""
    match = NOTEBOOK.search(docstring)
    assert match, f"{short}.py's docstring names no notebook (or add it to FOUNDATION, saying why)"
    return int(match.group(1))


CORE = sorted(module_name(path) for path in PACKAGE.glob("*.py") if path.name != "__init__.py")


def test_the_package_has_no_import_cycle():
    try:
        order = list(TopologicalSorter(import_graph()).static_order())
    except CycleError as error:
        pytest.fail(f"import cycle: {' -> '.join(error.args[1])}")
    assert "mhsa_helpers.checks" in order and len(order) == len(package_modules())


def test_the_graph_sees_every_kind_of_import(tmp_path):
    """The detector itself: top-level, relative, `from . import module` and function-level imports count."""
    graph = import_graph()
    assert "mhsa_helpers.checks" in graph["mhsa_helpers.heads"]  # from .checks import expect_int
    assert "mhsa_helpers.compat" in graph["mhsa_helpers.attention"]  # from . import compat
    assert "mhsa_helpers.mha" in graph["mhsa_helpers.block"]
    assert "mhsa_helpers.teaching.checking" in graph["mhsa_helpers.lessons.rotary_position_embeddings.exercises"]


@pytest.mark.parametrize("name", CORE)
def test_a_core_module_imports_only_what_earlier_notebooks_teach(name):
    notebook = taught_by(name)
    core_imports = {other for other in import_graph()[name] if other in CORE}
    if notebook is None:  # a foundation module rests on nothing a notebook teaches
        later = {other for other in core_imports if taught_by(other) is not None}
    else:
        later = {
            other
            for other in core_imports
            if (taught := taught_by(other)) is not None
            and taught > notebook
            and (name.rpartition(".")[2], other.rpartition(".")[2]) not in ALLOWED_LATER
        }
    assert not later, f"{name} (notebook {notebook}) imports modules taught later: " + ", ".join(
        f"{other} (notebook {taught_by(other)})" for other in sorted(later)
    )


def test_the_exceptions_are_still_needed():
    graph = import_graph()
    for importer, imported in ALLOWED_LATER:
        assert f"mhsa_helpers.{imported}" in graph[f"mhsa_helpers.{importer}"], (importer, imported)
        assert taught_by(f"mhsa_helpers.{imported}") > taught_by(f"mhsa_helpers.{importer}")


def test_rope_scaling_lives_with_rope():
    """RoPE (notebook 05) is stretched in notebook 09: long_context extends rope, never the reverse."""
    assert "mhsa_helpers.long_context" not in import_graph()["mhsa_helpers.rope"]
    assert "mhsa_helpers.rope" in import_graph()["mhsa_helpers.long_context"]
