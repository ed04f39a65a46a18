"""The architecture rules, read from the source (AST and tokens), so that they hold without review.

* The core (``mhsa_helpers/*.py``) never imports the teaching scaffolding
  (``mhsa_helpers.teaching``, ``mhsa_helpers.lessons``).
* A lesson (a folder ``mhsa_helpers/lessons/<slug>/``) imports only the core, ``mhsa_helpers.teaching``
  and its own folder: never another lesson, nor the registry of the lessons.
* No module of ``mhsa_helpers`` uses another module's underscore-prefixed name: neither
  ``from x import _y`` nor ``import x._y`` nor ``x._y`` on an imported module.
* ``MultiHeadSelfAttention.forward`` reads as notebook 06's recipe: at most 40 lines.
* Every ``# noqa`` / ``# type: ignore`` names its codes and says why, after them.
* One vocabulary: ``check_*`` is an exercise checker (a lesson's ``exercises.py``, or the machinery that
  builds one); a function that validates arguments is ``expect_*``.

Each detector is also run on made-up source, so that a broken detector fails too.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "mhsa_helpers"
SCAFFOLDING = ("mhsa_helpers.teaching", "mhsa_helpers.lessons")
LESSONS = "mhsa_helpers.lessons"
#: The modules directly in ``lessons/`` are no lesson: the registry of every lesson (``__init__``),
#: its command line (``__main__``) and where the series is published (``links``).
NOT_LESSONS = {"__init__.py", "__main__.py", "links.py"}
#: Notebook 06's recipe (one RoPE step: a cache that numbers its keys by slot, notebook 09's StreamingLLM, says where
#: the new tokens go and moves its keys itself), and notebook 12's sink and gate (a line each).
FORWARD_MAX_LINES = 40


def core_modules() -> list[Path]:
    return sorted(PACKAGE.glob("*.py"))


def package_modules() -> list[Path]:
    return sorted(path for path in PACKAGE.rglob("*.py") if "__pycache__" not in path.parts)


def python_files() -> list[Path]:
    """The repository's own Python files (not the venv, caches or build output)."""
    skip = {".venv", "venv", ".git", "build", "dist", "mutants", "__pycache__", ".mypy_cache", ".ruff_cache"}
    return sorted(
        path
        for path in ROOT.rglob("*.py")
        if not skip.intersection(path.relative_to(ROOT).parts) and ".egg-info" not in str(path)
    )


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def resolve(importer: str, is_package: bool, module: str | None, level: int) -> str:
    """The absolute name of ``from <level dots><module> import ...`` written in ``importer``."""
    if level == 0:
        return module or ""
    base = importer.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, module] if module else base)


def imported_modules(source: str, importer: str, is_package: bool = False) -> list[tuple[int, str]]:
    """(line, absolute module name) for every module an import statement may bring in,
    ``from a import b`` counting as both ``a`` and ``a.b`` (b may be a submodule)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = resolve(importer, is_package, node.module, node.level)
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def scaffolding_imports(source: str, importer: str, is_package: bool = False) -> list[str]:
    return [
        f"line {line}: {name}"
        for line, name in imported_modules(source, importer, is_package)
        if any(name == s or name.startswith(s + ".") for s in SCAFFOLDING)
    ]


def lesson_of(module: str) -> str | None:
    """The lesson (``mhsa_helpers.lessons.<slug>``) that ``module`` names or lies in; ``mhsa_helpers.lessons``
    for the lessons' package itself, None outside it."""
    parts = module.split(".")
    if parts[:2] != LESSONS.split("."):
        return None
    return ".".join(parts[:3])


def foreign_imports(source: str, importer: str, is_package: bool = False) -> list[str]:
    """What a lesson's module ``importer`` imports from ``mhsa_helpers.lessons`` outside its own lesson folder:
    another lesson, or the lessons' package (the registry). The core and ``mhsa_helpers.teaching`` are fine.
    One entry per statement and lesson, however many names it takes from it."""
    own = lesson_of(importer)
    found: dict[tuple[int, str], None] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = resolve(importer, is_package, node.module, node.level)
            # `from .. import other_lesson` names the lessons' package only to reach into it: judge the names.
            names = [f"{base}.{alias.name}" for alias in node.names] + ([] if base == LESSONS else [base])
        else:
            continue
        for name in names:
            lesson = lesson_of(name)
            if lesson is not None and lesson != own:
                found[(node.lineno, lesson)] = None
    return [f"line {line}: {lesson}" for line, lesson in found]


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_uses(source: str) -> list[str]:
    """Underscore names taken from other modules: imported, or read off an imported module."""
    tree = ast.parse(source)
    problems = []
    module_aliases = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if any(is_private(part) for part in alias.name.split(".")):
                    problems.append(f"line {node.lineno}: import {alias.name}")
                module_aliases.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            path = (node.module or "").split(".")
            if any(is_private(part) for part in path if part):
                problems.append(f"line {node.lineno}: from {'.' * node.level}{node.module} import ...")
            for alias in node.names:
                if is_private(alias.name):
                    problems.append(
                        f"line {node.lineno}: from {'.' * node.level}{node.module or ''} import {alias.name}"
                    )
                # `from . import checks` / `from torch.nn import functional as F` may be modules.
                module_aliases.add(alias.asname or alias.name)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and is_private(node.attr)
            and isinstance(node.value, ast.Name)
            and node.value.id in module_aliases
        ):
            problems.append(f"line {node.lineno}: {node.value.id}.{node.attr}")
    return problems


def code_lines(function: ast.FunctionDef) -> int:
    """Lines from ``def`` to the end of the body, without the docstring."""
    body = function.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        docstring_lines = body[0].end_lineno - body[0].lineno + 1
    else:
        docstring_lines = 0
    return function.end_lineno - function.lineno + 1 - docstring_lines


SUPPRESSION = re.compile(r"#\s*(?P<kind>noqa|type:\s*ignore)\b(?P<rest>.*)", re.IGNORECASE)
# The codes, then the reason: "noqa: E501, B905 - why" or "type: ignore[arg-type]  # why".
CODES = {
    "noqa": re.compile(r"^:\s*[A-Z]+[0-9]+(?:\s*,\s*[A-Z]+[0-9]+)*"),
    "type": re.compile(r"^\[[a-z0-9-]+(?:\s*,\s*[a-z0-9-]+)*\]"),
}


def unexplained_suppressions(source: str) -> list[str]:
    problems = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type != tokenize.COMMENT:
            continue
        match = SUPPRESSION.search(token.string)
        if match is None:
            continue
        kind = "noqa" if match["kind"].lower() == "noqa" else "type"
        codes = CODES[kind].match(match["rest"])
        reason = match["rest"][codes.end() :] if codes else ""
        if codes is None or not re.search(r"[A-Za-z]{3,}", reason):
            problems.append(f"line {token.start[0]}: {token.string.strip()}")
    return problems


def report(found: dict[Path, list[str]]) -> str:
    return "\n".join(f"{path.relative_to(ROOT)}: {problem}" for path, problems in found.items() for problem in problems)


# -- the rules, on the repository ---------------------------------------------


def test_core_never_imports_the_teaching_scaffolding():
    modules = core_modules()
    assert len(modules) >= 8, [m.name for m in modules]
    found = {}
    for path in modules:
        problems = scaffolding_imports(path.read_text(encoding="utf-8"), module_name(path), path.name == "__init__.py")
        if problems:
            found[path] = problems
    assert not found, "core modules importing the teaching scaffolding:\n" + report(found)


def test_a_lesson_imports_only_the_core_teaching_and_itself():
    folder = PACKAGE / "lessons"
    assert {path.name for path in folder.glob("*.py")} == NOT_LESSONS, "a lesson lives in a folder lessons/<slug>/"
    modules = sorted(path for path in folder.glob("*/**/*.py") if "__pycache__" not in path.parts)
    assert len({path.relative_to(folder).parts[0] for path in modules}) >= 11, modules
    found = {}
    for path in modules:
        problems = foreign_imports(path.read_text(encoding="utf-8"), module_name(path), path.name == "__init__.py")
        if problems:
            found[path] = problems
    shared = "move what lessons share to mhsa_helpers/teaching/"
    assert not found, f"lessons importing another lesson or the lessons' registry ({shared}):\n" + report(found)


def test_the_teaching_base_never_imports_a_lesson():
    """teaching/ holds what lessons share: it may use the core, never a lesson (nor the lessons' registry)."""
    modules = sorted(path for path in (PACKAGE / "teaching").rglob("*.py") if "__pycache__" not in path.parts)
    assert len(modules) >= 10, modules
    found = {}
    for path in modules:
        imported = imported_modules(path.read_text(encoding="utf-8"), module_name(path), path.name == "__init__.py")
        problems = [f"line {line}: {name}" for line, name in imported if lesson_of(name) is not None]
        if problems:
            found[path] = problems
    assert not found, "teaching modules importing a lesson:\n" + report(found)


def test_no_module_uses_another_modules_underscore_names():
    found = {path: private_uses(path.read_text(encoding="utf-8")) for path in package_modules()}
    found = {path: problems for path, problems in found.items() if problems}
    assert not found, "underscore names used across modules (make them public or keep them in one module):\n" + (
        report(found)
    )


#: Where a public ``check_*`` function may live: the machinery exercise checkers are built with.
CHECKER_MACHINERY = {"checking.py", "predictions.py", "modules.py", "ordering.py", "recall.py"}


def checker_names(source: str) -> list[str]:
    """The public functions and methods named ``check_*`` defined in ``source``."""
    return [
        node.name
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("check_")
    ]


def test_check_names_only_exercise_checkers():
    found = {}
    for path in package_modules():
        relative = path.relative_to(PACKAGE)
        is_checker_home = (relative.parts[0] == "lessons" and path.name in ("exercises.py", "recall.py")) or (
            relative.parts[0] == "teaching" and path.name in CHECKER_MACHINERY
        )
        names = [] if is_checker_home else checker_names(path.read_text(encoding="utf-8"))
        if names:
            found[path] = names
    assert not found, "check_* names an exercise checker; an argument check is expect_*:\n" + report(found)


@pytest.mark.parametrize(
    ("source", "names"),
    [
        ("def check_heads(model, heads): ...", ["check_heads"]),
        ("class M:\n    def check_call(self, ids): ...", ["check_call"]),
        ("def expect_heads(model, heads): ...\ndef _check(x): ...", []),
    ],
)
def test_checker_name_detector(source, names):
    assert checker_names(source) == names


def test_forward_reads_as_the_recipe():
    tree = ast.parse((PACKAGE / "mha.py").read_text(encoding="utf-8"))
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "MultiHeadSelfAttention"]
    (forward,) = [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "forward"]
    lines = code_lines(forward)
    assert lines <= FORWARD_MAX_LINES, (
        f"MultiHeadSelfAttention.forward has {lines} lines without its docstring (at most {FORWARD_MAX_LINES})"
    )


def test_every_suppression_names_its_codes_and_says_why():
    files = python_files()
    assert PACKAGE / "mha.py" in files and Path(__file__) in files
    found = {}
    for path in files:
        problems = unexplained_suppressions(path.read_text(encoding="utf-8"))
        if problems:
            found[path] = problems
    assert not found, "`# noqa` / `# type: ignore` without codes or without a reason after them:\n" + report(found)


# -- the detectors, on made-up source ------------------------------------------


@pytest.mark.parametrize(
    ("source", "importer", "is_package", "expected"),
    [
        ("from .teaching import figures", "mhsa_helpers.mha", False, 2),
        ("from . import lessons", "mhsa_helpers.mha", False, 1),
        ("from . import teaching", "mhsa_helpers", True, 1),
        ("import mhsa_helpers.lessons.rotary_position_embeddings", "mhsa_helpers.rope", False, 1),
        ("from mhsa_helpers.teaching.checking import Case", "mhsa_helpers.checks", False, 2),
        ("from .. import teaching", "mhsa_helpers.lessons", True, 1),
        ("from . import checks, masking", "mhsa_helpers.mha", False, 0),
        ("from .teachings import x\nimport mhsa_helpers.lessonsX", "mhsa_helpers.mha", False, 0),
    ],
)
def test_scaffolding_detector(source, importer, is_package, expected):
    assert len(scaffolding_imports(source, importer, is_package)) == expected


@pytest.mark.parametrize(
    ("source", "importer", "is_package", "expected"),
    [
        (
            "from ..induction_heads import InductionBatch, load_checkpoints",
            "mhsa_helpers.lessons.long_context.x",
            False,
            1,
        ),
        ("from ..induction_heads.scores import induction_score", "mhsa_helpers.lessons.real_model.tools", False, 1),
        (
            "from ..multi_head_attention.explorer import MODEL_SEED",
            "mhsa_helpers.lessons.causal_mhsa_with_rope",
            True,
            1,
        ),
        ("from .. import induction_heads, real_model", "mhsa_helpers.lessons.long_context.x", False, 2),
        ("import mhsa_helpers.lessons.induction_heads.task", "mhsa_helpers.lessons.real_model.tools", False, 1),
        ("from mhsa_helpers.lessons import LESSONS", "mhsa_helpers.lessons.real_model.tools", False, 1),
        ("from .. import links", "mhsa_helpers.lessons.real_model.tools", False, 1),
        ("from ..real_model.swap import x", "mhsa_helpers.lessons.real_model.tools", False, 0),
        ("from .scores import x\nfrom . import task", "mhsa_helpers.lessons.induction_heads", True, 0),
        (
            "from ...teaching.induction import x\nfrom ...mha import y",
            "mhsa_helpers.lessons.real_model.tools",
            False,
            0,
        ),
        ("from mhsa_helpers import default_device\nimport torch", "mhsa_helpers.lessons.induction_heads.x", False, 0),
        ("from ..real_modelX import x", "mhsa_helpers.lessons.real_model.tools", False, 1),
    ],
)
def test_foreign_lesson_import_detector(source, importer, is_package, expected):
    found = foreign_imports(source, importer, is_package)
    assert len(found) == expected, found


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from .checks import _check_tensor", 1),
        ("from ._validation import check_tensor", 1),
        ("import torch._C", 1),
        ("from . import checks\nchecks._helper(x)", 1),
        ("import torch.nn.functional as F\nF._canonical_mask(m)", 1),
        ("from .checks import check_tensor, __all__\nfrom __future__ import annotations", 0),
        ("class A:\n    def f(self):\n        return self._cache", 0),
        ("def f(x):\n    return x._private", 0),
        ("import torch\ntorch.__version__", 0),
    ],
)
def test_private_name_detector(source, expected):
    assert len(private_uses(source)) == expected, private_uses(source)


@pytest.mark.parametrize(
    ("line", "ok"),
    [
        ("x = 1  # noqa: E501 - a URL that cannot be split", True),
        ("x = 1  # noqa: E402, F401  kept for the notebooks' star import", True),
        ("x = f(y)  # type: ignore[arg-type]  # torch's stub says int, it takes a tensor", True),
        ("x = 1  # noqa", False),
        ("x = 1  # noqa: E501", False),
        ("x = f(y)  # type: ignore", False),
        ("x = f(y)  # type: ignore[arg-type]", False),
        ("x = f(y)  # type: ignore because stubs", False),
        ("s = '# noqa'  # a string, not a comment", True),
    ],
)
def test_suppression_detector(line, ok):
    assert (unexplained_suppressions(line + "\n") == []) is ok


def test_forward_length_counts_code_not_docstring():
    source = 'def forward(x):\n    """Doc.\n\n    More doc.\n    """\n    y = x\n    return y\n'
    (function,) = ast.parse(source).body
    assert code_lines(function) == 3


# The source documents the examples come from are private: a learner never saw them, and in
# sentences about torch.manual_seed their file names read as random seeds.
SOURCE_NAME = re.compile(r"\bseeds?[ _-]?0\d\d(?!\d)", re.IGNORECASE)


def learner_facing_text() -> list[tuple[str, str]]:
    """(where, text) for every notebook cell, package module, README and book page."""
    import nbformat

    found = []
    for path in sorted((ROOT / "notebooks").rglob("*.ipynb")):
        for index, cell in enumerate(nbformat.read(path, as_version=4).cells):
            found.append((f"{path.relative_to(ROOT)} cell {index}", cell.source))
    for path in [*package_modules(), ROOT / "README.md", *sorted((ROOT / "book").glob("*.md"))]:
        found.append((str(path.relative_to(ROOT)), path.read_text(encoding="utf-8")))
    return found


def test_learner_facing_text_never_names_the_source_documents():
    named = [where for where, text in learner_facing_text() if SOURCE_NAME.search(text)]
    assert not named, f"source documents named in: {named}"


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("as seed 001 prints", True),
        ("Seed 004's merge", True),
        ("seed_002_style", True),
        ("torch.manual_seed(789)", False),
        ("with a fixed seed, 0", False),
        ("seeds 2-4", False),
    ],
)
def test_source_name_detector(text, named):
    assert bool(SOURCE_NAME.search(text)) == named


def bare_asserts(source: str) -> list[int]:
    """Line numbers of ``assert`` statements and ``torch.testing.assert_close`` calls outside a function
    body: what a learner reads as test plumbing rather than a claim of the lesson."""
    # IPython magics (%matplotlib) are not Python: blank them, keeping the line numbers.
    tree = ast.parse("\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines()))
    inside_functions = {
        id(node)
        for function in ast.walk(tree)
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for node in ast.walk(function)
    }
    found = []
    for node in ast.walk(tree):
        if id(node) in inside_functions:
            continue
        is_check_call = isinstance(node, ast.Call) and ast.unparse(node.func).endswith(
            ("assert_close", "assert_allclose")
        )
        if isinstance(node, ast.Assert) or is_check_call:
            found.append(node.lineno)
    return found


def test_notebooks_check_with_claims_not_bare_asserts():
    import nbformat

    found = []
    for path in sorted((ROOT / "notebooks").rglob("*.ipynb")):
        for index, cell in enumerate(nbformat.read(path, as_version=4).cells):
            if cell.cell_type == "code" and bare_asserts(cell.source):
                found.append(f"{path.relative_to(ROOT)} cell {index}")
    assert not found, f"bare asserts where a learner reads (use claim / claim_close): {found}"


@pytest.mark.parametrize(
    ("source", "lines"),
    [
        ("assert x == 1", [1]),
        ("for i in r:\n    assert i", [2]),
        ("torch.testing.assert_close(a, b)", [1]),
        ("np.testing.assert_allclose(a, b)", [1]),
        ("%matplotlib inline\nclaim('x is 1', x == 1)", []),
        ("def check(f):\n    assert f(1) == 2\n    return True", []),
    ],
)
def test_bare_assert_detector(source, lines):
    assert bare_asserts(source) == lines
