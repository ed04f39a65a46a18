"""One place for each set-up fact, and every install route reads it.

* The dependency lists live in pyproject.toml only: environment.yml gives conda
  Python and pip, and pip installs the project itself (``-e .[dev]``).
* The default torch build is written once, in requirements/torch-cpu.txt, as an
  exact version (a bare ``torch`` or an open range makes pip fetch a CUDA build);
  the Makefile, environment.yml and the Colab-like check install from that file,
  and pyproject.toml keeps a lower bound only.
* The notebook kernels' environment is written once, in scripts/kernel.env; the
  Makefile and the Colab-like check read it.
"""

from __future__ import annotations

import os
import re
import subprocess
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
TORCH_REQUIREMENTS = "requirements/torch-cpu.txt"
KERNEL_ENV = "scripts/kernel.env"
COLAB_CHECK = ROOT / "scripts" / "colab_like_check.sh"
# The files that install something or start kernels (README prose is not among them).
TOOLING = [ROOT / "Makefile", ENVIRONMENT, ROOT / ".ci" / "run", *sorted((ROOT / "scripts").iterdir())]


def load_pyproject() -> dict:
    with PYPROJECT.open("rb") as f:
        return tomllib.load(f)


def load_environment() -> dict:
    with ENVIRONMENT.open(encoding="utf-8") as f:
        return yaml.safe_load(f)


def requirement_lines(path: Path) -> list[str]:
    lines = (line.split("#", 1)[0].strip() for line in path.read_text(encoding="utf-8").splitlines())
    return [line for line in lines if line]


def make(*args: str) -> str:
    """What `make` prints, with the defaults of the Makefile (not those of a make that runs these tests)."""
    env = {k: v for k, v in os.environ.items() if k not in ("TORCH_SPEC", "MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    command = ["make", "--no-print-directory", *args]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=True).stdout


def make_variable(name: str) -> str:
    """The value `make` gives ``name`` (nothing is built: only an echo runs)."""
    return make("-s", "--eval", f"show-variable: ; @echo $({name})", "show-variable").strip()


def dry_run(*targets: str) -> str:
    """The commands `make -n` would run for ``targets`` (nothing is run)."""
    return make("-n", *targets)


# -- environment.yml ---------------------------------------------------------


def test_environment_python_matches_requires_python():
    pyproject = load_pyproject()
    (python,) = [entry for entry in load_environment()["dependencies"] if str(entry).startswith("python ")]
    assert SpecifierSet(python.split(" ", 1)[1].replace(" ", "")) == SpecifierSet(
        pyproject["project"]["requires-python"]
    )


def test_environment_uses_conda_forge():
    assert load_environment()["channels"] == ["conda-forge"]


def test_environment_installs_the_project_itself_with_pip():
    """Nothing to keep in step: conda gives Python and pip, pip installs the default torch
    from its one file and then the project with its dev extra (which includes lab)."""
    dependencies = load_environment()["dependencies"]
    conda = [str(entry).split(" ")[0] for entry in dependencies if not isinstance(entry, dict)]
    assert sorted(conda) == ["pip", "python"], f"conda installs only Python and pip, got {conda}"
    (pip_section,) = [entry["pip"] for entry in dependencies if isinstance(entry, dict)]
    assert pip_section == [f"-r {TORCH_REQUIREMENTS}", "-e .[dev]"]


# -- torch -------------------------------------------------------------------


def test_torch_is_a_lower_bound_only():
    """pyproject.toml never pins torch: the set-up installs a torch build suited to the
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
    assert all(op in (">=", ">") for op in operators), f"torch must only have a lower bound, got {req.specifier!s}"


def test_default_torch_is_one_exact_version_the_package_accepts():
    lines = requirement_lines(ROOT / TORCH_REQUIREMENTS)
    assert len(lines) == 1, f"{TORCH_REQUIREMENTS} holds the torch requirement only, got {lines}"
    req = Requirement(lines[0])
    assert canonicalize_name(req.name) == "torch"
    (spec,) = req.specifier
    assert spec.operator == "==" and "*" not in spec.version, f"the default torch must be exact, got {req}"
    (declared,) = [Requirement(r) for r in load_pyproject()["project"]["dependencies"] if r.startswith("torch")]
    assert declared.specifier.contains(spec.version), f"{req} does not meet pyproject's {declared}"


def test_every_install_route_reads_the_torch_file():
    assert make_variable("TORCH_SPEC") == f"-r {TORCH_REQUIREMENTS}"
    assert f'-r "$repo/{TORCH_REQUIREMENTS}"' in COLAB_CHECK.read_text(encoding="utf-8")
    # environment.yml: test_environment_installs_the_project_itself_with_pip.


def test_no_tooling_file_names_a_torch_version_of_its_own():
    version = re.compile(r"torch\s*(==|>=|<=|~=|!=|<|>)\s*\d")
    offenders = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in TOOLING
        if path.is_file()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if version.search(line.split("#", 1)[0])
    ]
    assert not offenders, f"write the default torch in {TORCH_REQUIREMENTS} only:\n" + "\n".join(offenders)


# -- the kernels' environment -----------------------------------------------


def kernel_env() -> dict[str, str]:
    pairs = [line.split("=", 1) for line in requirement_lines(ROOT / KERNEL_ENV)]
    assert all(len(pair) == 2 and re.fullmatch(r"[A-Z_]+", pair[0]) for pair in pairs), pairs
    return dict(pairs)


def test_kernel_environment_makes_runs_repeatable():
    env = kernel_env()
    assert env.get("PYTHONHASHSEED") == "0", "set iteration order must not change between runs"
    assert env.get("SOURCE_DATE_EPOCH") == "0", "figure metadata must not carry the date"


def test_make_gives_the_kernel_environment_to_nbval_and_to_re_execution():
    expected = " ".join(f"{k}={v}" for k, v in kernel_env().items())
    assert make_variable("KERNEL_ENV") == expected
    test_commands = [line for line in dry_run("test").splitlines() if "-m pytest" in line]
    assert len(test_commands) == 1 and f"env {expected} " in test_commands[0], test_commands
    execute = [line for line in dry_run("notebooks", "NOTEBOOKS=x.ipynb").splitlines() if "jupyter execute" in line]
    assert len(execute) == 1 and f"env {expected} " in execute[0], execute


def test_no_tooling_file_sets_a_kernel_variable_of_its_own():
    names = "|".join(kernel_env())
    setting = re.compile(rf"\b({names})\s*=")
    offenders = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in TOOLING
        if path.is_file() and path != ROOT / KERNEL_ENV
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if setting.search(line)
    ]
    assert not offenders, f"write the kernels' environment in {KERNEL_ENV} only:\n" + "\n".join(offenders)
    assert f'. "$repo/{KERNEL_ENV}"' in COLAB_CHECK.read_text(encoding="utf-8")


# -- pyproject.toml ----------------------------------------------------------


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


def test_dev_extra_has_the_tools_make_and_the_hooks_run():
    dev = {canonicalize_name(Requirement(r).name) for r in load_pyproject()["project"]["optional-dependencies"]["dev"]}
    called = set(re.findall(r"\$\(VENV\)/bin/([a-z][\w-]*)", (ROOT / "Makefile").read_text(encoding="utf-8")))
    called |= set(re.findall(r"\.venv/bin/([a-z][\w-]*)", (ROOT / ".pre-commit-config.yaml").read_text("utf-8")))
    called.discard("python")  # the venv's own
    provided_by = {"jupyter": "jupyterlab"}
    missing = sorted(tool for tool in called if provided_by.get(tool, tool) not in dev)
    assert called >= {"ruff", "mypy", "nbstripout", "jupyter"}, called
    assert not missing, f"called from .venv/bin but not in the dev extra: {missing}"
