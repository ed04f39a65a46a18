"""pyproject.toml and environment.yml must describe the same environment.

pip users install from pyproject.toml (``make setup``), conda users from
environment.yml. These tests fail as soon as the two disagree: a dependency
added to, dropped from or re-constrained in one file only.

What is compared:

* pyproject: ``[project] dependencies`` plus every optional-dependency extra
  (``dev`` and ``lab``), merged by name;
* environment.yml: every conda dependency plus the entries of its ``pip:``
  section, except ``python`` (compared with ``requires-python`` instead),
  ``pip`` itself and the editable install of the project (``-e .``).

Conda package names are translated with ``CONDA_TO_PYPI`` below. Environment
markers (e.g. ``tomli; python_version < '3.11'``) are dropped before the
comparison, since conda cannot express them. Version constraints are
compared as PEP 440 specifier sets, so ``>=7.6,<9`` equals ``<9,>=7.6``;
conda's single ``=`` (which means "this version or any sub-version") is
refused, to keep both files in the same notation.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

try:
    import tomllib  # Python >= 3.11
except ModuleNotFoundError:  # pragma: no cover - exercised on Python < 3.11
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"
ENVIRONMENT = ROOT / "environment.yml"

# conda-forge name -> PyPI name, for the packages whose names differ.
CONDA_TO_PYPI = {
    "pytorch": "torch",
    "python-build": "build",
    "playwright-python": "playwright",
}

# environment.yml entries that are not project dependencies.
CONDA_NON_DEPENDENCIES = {"python", "pip"}

_CONDA_SPEC = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(?P<spec>.*)$")


# -- loading ---------------------------------------------------------------


def load_pyproject(path: Path = PYPROJECT) -> dict:
    with path.open("rb") as f:
        return tomllib.load(f)


def load_environment(path: Path = ENVIRONMENT) -> dict:
    with path.open(encoding="utf-8") as f:
        return yaml.safe_load(f)


def _add(deps: dict[str, SpecifierSet], name: str, spec: SpecifierSet, origin: str) -> None:
    key = canonicalize_name(name)
    if key in deps and deps[key] != spec:
        raise AssertionError(
            f"{origin}: {name} is listed twice with different constraints: "
            f"{deps[key]!s} and {spec!s}"
        )
    deps[key] = spec


def pyproject_dependencies(pyproject: dict) -> dict[str, SpecifierSet]:
    """name -> specifier set, over the runtime dependencies and all extras."""
    project = pyproject["project"]
    requirements = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        requirements.extend(extra)
    deps: dict[str, SpecifierSet] = {}
    for line in requirements:
        req = Requirement(line)
        _add(deps, req.name, req.specifier, "pyproject.toml")
    return deps


def parse_conda_spec(entry: str) -> tuple[str, SpecifierSet]:
    """'ipywidgets >=7.6,<9' -> ('ipywidgets', SpecifierSet('>=7.6,<9'))."""
    match = _CONDA_SPEC.match(entry.strip())
    if match is None:
        raise AssertionError(f"environment.yml: cannot parse dependency {entry!r}")
    name, spec = match["name"], re.sub(r"\s+", "", match["spec"])
    if re.search(r"(^|,)=[^=]", spec) or "=" == spec:
        raise AssertionError(
            f"environment.yml: {entry!r} uses conda's single '='; "
            "write PEP 440 operators (>=, ==, <, ...) as in pyproject.toml"
        )
    if "|" in spec or "*" in spec:
        raise AssertionError(
            f"environment.yml: {entry!r} uses conda-only syntax; "
            "write PEP 440 operators as in pyproject.toml"
        )
    return name, SpecifierSet(spec)


def environment_dependencies(env: dict) -> tuple[dict[str, SpecifierSet], SpecifierSet]:
    """(name -> specifier set with PyPI names, python's specifier set)."""
    deps: dict[str, SpecifierSet] = {}
    python_spec = None
    for entry in env["dependencies"]:
        if isinstance(entry, dict):
            assert set(entry) == {"pip"}, f"environment.yml: unexpected entry {entry!r}"
            for line in entry["pip"]:
                line = line.strip()
                if line.startswith("-"):  # -e ., --option: not a dependency
                    continue
                req = Requirement(line)
                _add(deps, req.name, req.specifier, "environment.yml (pip)")
            continue
        name, spec = parse_conda_spec(str(entry))
        if name == "python":
            python_spec = spec
        if name in CONDA_NON_DEPENDENCIES:
            continue
        _add(deps, CONDA_TO_PYPI.get(name, name), spec, "environment.yml")
    assert python_spec is not None, "environment.yml must list python"
    return deps, python_spec


def _fmt(deps: dict[str, SpecifierSet]) -> list[str]:
    return sorted(f"{name}{spec}" for name, spec in deps.items())


def drift(pyproject: dict, env: dict) -> list[str]:
    """Human-readable differences between the two files; empty if in sync."""
    expected = pyproject_dependencies(pyproject)
    actual, _ = environment_dependencies(env)
    problems = []
    only_pyproject = {n: s for n, s in expected.items() if n not in actual}
    only_environment = {n: s for n, s in actual.items() if n not in expected}
    if only_pyproject:
        problems.append(f"only in pyproject.toml: {_fmt(only_pyproject)}")
    if only_environment:
        problems.append(f"only in environment.yml: {_fmt(only_environment)}")
    for name in sorted(expected.keys() & actual.keys()):
        if expected[name] != actual[name]:
            problems.append(
                f"{name}: pyproject.toml says {expected[name]!s} "
                f"but environment.yml says {actual[name]!s}"
            )
    return problems


# -- the tests ---------------------------------------------------------------


def test_environment_yml_matches_pyproject():
    problems = drift(load_pyproject(), load_environment())
    assert not problems, "pyproject.toml and environment.yml drifted:\n" + "\n".join(problems)


def test_environment_python_matches_requires_python():
    pyproject = load_pyproject()
    _, python_spec = environment_dependencies(load_environment())
    assert python_spec == SpecifierSet(pyproject["project"]["requires-python"])


def test_environment_uses_conda_forge():
    assert load_environment()["channels"] == ["conda-forge"]


def test_torch_is_a_lower_bound_only():
    """Never pin torch: the set-up installs a torch build suited to the
    machine first (CPU wheel, CUDA build, ...) and the package must accept it.
    An upper bound or an exact version would make pip replace it."""
    project = load_pyproject()["project"]
    lines = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        lines.extend(extra)
    torch_reqs = [Requirement(line) for line in lines]
    torch_reqs = [r for r in torch_reqs if canonicalize_name(r.name) == "torch"]

    assert len(torch_reqs) == 1, "torch must be listed exactly once, in [project] dependencies"
    (req,) = torch_reqs
    runtime = [canonicalize_name(Requirement(line).name) for line in project["dependencies"]]
    assert "torch" in runtime, "torch must be a runtime dependency"
    assert not req.extras and req.url is None and req.marker is None, str(req)
    operators = [spec.operator for spec in req.specifier]
    assert operators, "torch needs a lower bound (e.g. torch>=2.2)"
    assert all(op in (">=", ">") for op in operators), (
        f"torch must only have a lower bound, got {req.specifier!s}"
    )


@pytest.mark.parametrize("name", ["runtime", "dev", "lab"])
def test_every_requirement_parses(name):
    project = load_pyproject()["project"]
    lines = project["dependencies"] if name == "runtime" else project["optional-dependencies"][name]
    assert lines, f"{name} requirements are empty"
    for line in lines:
        Requirement(line)


def test_lab_extra_is_part_of_dev():
    extras = load_pyproject()["project"]["optional-dependencies"]
    dev = {canonicalize_name(Requirement(r).name): Requirement(r).specifier for r in extras["dev"]}
    for line in extras["lab"]:
        req = Requirement(line)
        assert dev.get(canonicalize_name(req.name)) == req.specifier, (
            f"{line!r} from the lab extra is missing from dev (or differs there)"
        )


def test_drift_is_detected():
    """The comparison itself must be able to fail (checked on made-up files,
    so that this test fails only if the checking code is broken)."""
    pyproject = {
        "project": {
            "requires-python": ">=3.9",
            "dependencies": ["torch>=2.2", "ipywidgets>=7.6,<9"],
            "optional-dependencies": {
                "dev": ["pytest>=7", "build", "tomli; python_version < '3.11'"],
                "lab": ["pytest>=7"],
            },
        }
    }
    env = {
        "channels": ["conda-forge"],
        "dependencies": [
            "python >=3.9",
            "pytorch >=2.2",
            "ipywidgets >=7.6,<9",
            "pytest >=7",
            "python-build",
            "tomli",
            "pip",
            {"pip": ["-e ."]},
        ],
    }
    assert drift(pyproject, env) == []

    # a dependency added to one file only
    pyproject["project"]["dependencies"].append("scipy>=1.10")
    assert drift(pyproject, env) == ["only in pyproject.toml: ['scipy>=1.10']"]
    env["dependencies"].append({"pip": ["scipy>=1.10"]})
    env["dependencies"].append("pandas")
    assert drift(pyproject, env) == ["only in environment.yml: ['pandas']"]
    env["dependencies"].remove("pandas")
    assert drift(pyproject, env) == []

    # a constraint changed in one file only (order of the clauses is irrelevant)
    env["dependencies"][2] = "ipywidgets <9,>=7.5"
    assert drift(pyproject, env) == [
        "ipywidgets: pyproject.toml says <9,>=7.6 but environment.yml says <9,>=7.5"
    ]

    # conda-only notation is refused rather than misread
    with pytest.raises(AssertionError, match="single '='"):
        parse_conda_spec("numpy =1.26")
    assert parse_conda_spec("pytorch >=2.2") == ("pytorch", SpecifierSet(">=2.2"))
