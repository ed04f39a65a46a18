"""No hint gives its exercise away: the full code lives in the solutions notebooks.

An exercise's hints climb from the idea to the shapes to at most one line of its trickiest step. For each
exercise of each learner notebook, the code inside its hints (fenced blocks and inline code spans) is compared
with the solution of the same exercise in the solutions notebook (the code cells between its heading and the
next heading; when the exercise's own cell hands out stubs, only the solution of those functions, classes and
names). A statement of the solution counts as given away when a hint holds it, what it assigns or returns, or
a long piece of it (a call such as ``my_causal_mask(q.shape[-2], k.shape[-2])``), spaces aside. A build
exercise's hints may hold one statement, never all of a solution; a debug exercise's hints hold no corrected
line and a prediction's no line of its working, nor the predicted value. Imports, comments, docstrings,
``def``/``class`` lines, a ``return`` of bare names, the calls that check or show a solution (``claim``,
``check_...``) and the code handed out with the exercise (a stub, the code to debug) are not counted.
"""

from __future__ import annotations

import ast
import io
import math
import re
import tokenize
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import pytest
import torch
from notebook_cells import cells, source

from mhsa_helpers.lessons import LESSONS

ROOT = Path(__file__).resolve().parents[1]
LESSON_IDS = [f"{item.number:02d}_{item.slug}" for item in LESSONS]

#: Statements of the solution a hint may hold, by the exercise's kind (and never all of them).
ALLOWED = {"build": 1, "order": 1, "debug": 0, "predict": 0}
#: A statement, or what it assigns or returns, counts from this many characters (spaces removed): shorter
#: ones are names and shapes (`x.shape`, `k.shape[-2]`). A piece of a statement counts from the second number.
MIN_STATEMENT, MIN_PIECE = 8, 30
#: Calls that check or show a solution rather than being part of it.
BOOKKEEPING = {"claim", "claim_close", "print", "display", "hint", "reveal", "show"}

HEADING = re.compile(r"^#{1,6} ")
EXERCISE = re.compile(r"^### (Exercise (\d+) · .+)$")
HINT = re.compile(r"<details>\s*<summary>(Hint [^<]*)</summary>")
FENCED = re.compile(r"```[^\n]*\n(.*?)```", re.DOTALL)
INLINE = re.compile(r"`([^`\n]+)`")


@dataclass
class Section:
    """One exercise of a notebook: its heading, its markdown and its code cells."""

    heading: str
    markdown: list[str] = field(default_factory=list)
    code: list[str] = field(default_factory=list)

    @property
    def number(self) -> int:
        return int(self.heading.split(" · ")[0].removeprefix("Exercise "))


def exercise_sections(path: Path) -> dict[str, Section]:
    """Every ``### Exercise N · ...`` of a notebook, from its heading to the next heading of any level."""
    sections: dict[str, Section] = {}
    current: Section | None = None
    for cell in cells(path):
        text = source(cell)
        if cell["cell_type"] == "code":
            if current is not None:
                current.code.append(text)
            continue
        if cell["cell_type"] != "markdown":
            continue
        for line in text.splitlines():
            if HEADING.match(line):
                match = EXERCISE.match(line)
                current = sections.setdefault(match[1], Section(match[1])) if match else None
            elif current is not None:
                current.markdown.append(line)
    return sections


def hints(markdown: str) -> dict[str, str]:
    """Each hint's label and its own text (nested hints cut off: hint N ends where hint N + 1 starts)."""
    parts = HINT.split(markdown)
    return {label: re.split(r"</?details>", text)[0] for label, text in zip(parts[1::2], parts[2::2], strict=True)}


def squeeze(code: str) -> str:
    """Code compared without its spaces, with one kind of quote."""
    return re.sub(r"\s+", "", code).replace("'", '"')


def code_in(hint: str) -> list[str]:
    """The code of a hint, squeezed: each fenced block whole, and each inline code span."""
    fragments = FENCED.findall(hint) + INLINE.findall(FENCED.sub(" ", hint))
    return [squeezed for squeezed in map(squeeze, fragments) if squeezed]


def without_comments(code: str) -> str:
    lines = code.splitlines()
    try:
        for token in tokenize.generate_tokens(io.StringIO(code).readline):
            if token.type == tokenize.COMMENT:
                row, column = token.start
                lines[row - 1] = lines[row - 1][:column]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    return "\n".join(lines)


def called(node: ast.AST | None) -> str:
    if isinstance(node, ast.Call):
        function = node.func
        return function.id if isinstance(function, ast.Name) else getattr(function, "attr", "")
    return ""


def bookkeeping(node: ast.stmt) -> bool:
    """A call that checks or shows the solution (``claim(...)``, ``result = check_...(...)``, ``print``)."""
    name = called(node.value) if isinstance(node, (ast.Expr, ast.Assign)) else ""
    return name in BOOKKEEPING or name.startswith("check_")


def bare(value: ast.expr | None) -> bool:
    """``return``, ``return out`` or ``return out, weights``: names only."""
    return (
        value is None
        or isinstance(value, ast.Name)
        or (isinstance(value, ast.Tuple) and all(isinstance(item, ast.Name) for item in value.elts))
    )


@dataclass(frozen=True)
class Statement:
    """One statement of a solution (a compound statement's header alone): its text, and the squeezed pieces
    of it that a hint must not hold."""

    text: str
    pieces: tuple[str, ...]


def statement(source: str, node: ast.stmt) -> Statement:
    lines = source.splitlines()
    if isinstance(node, (ast.If, ast.For, ast.While, ast.With, ast.Try)):  # the header: `if mask is not None:`
        text = "\n".join(lines[node.lineno - 1 : node.body[0].lineno - 1]).strip()
        squeezed = squeeze(text).rstrip(":")
        return Statement(text, (squeezed,) if len(squeezed) >= MIN_STATEMENT else ())
    text = ast.get_source_segment(source, node) or ""
    pieces = [squeeze(text)]
    value = getattr(node, "value", None) if isinstance(node, (ast.Return, ast.Assign, ast.AnnAssign)) else None
    if value is not None and not bare(value):
        pieces.append(squeeze(ast.get_source_segment(source, value) or ""))  # what it returns or assigns
    pieces = [piece for piece in pieces if len(piece) >= MIN_STATEMENT]
    for inner in ast.walk(node):
        if isinstance(inner, ast.expr) and not isinstance(inner, (ast.Name, ast.Constant)):
            piece = squeeze(ast.get_source_segment(source, inner) or "")
            if len(piece) >= MIN_PIECE:
                pieces.append(piece)
    return Statement(" ".join(text.split()), tuple(dict.fromkeys(pieces)))


def statements(code: str, names: set[str] | None = None) -> list[Statement]:
    """The statements of a solution cell, the trivial ones left out (see the module's docstring); with
    ``names``, only those inside the functions and classes of these names, or assigning one of them."""
    source = without_comments(code)
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found: list[Statement] = []

    def visit(body: list[ast.stmt], wanted: bool) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                visit(node.body, wanted or node.name in (names or ()))
                continue
            if names is not None and not wanted:
                targets = getattr(node, "targets", [getattr(node, "target", None)])
                if not any(isinstance(t, ast.Name) and t.id in names for t in targets):
                    continue
            if isinstance(node, (ast.Import, ast.ImportFrom)) or bookkeeping(node):
                continue
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
                continue  # a docstring
            if isinstance(node, ast.Return) and bare(node.value):
                continue
            found.append(statement(source, node))
            if isinstance(node, (ast.If, ast.For, ast.While, ast.With, ast.Try)):
                for block in (node.body, getattr(node, "orelse", []), getattr(node, "finalbody", [])):
                    visit(block, wanted)
                for handler in getattr(node, "handlers", []):
                    visit(handler.body, wanted)

    visit(tree.body, names is None)
    return [s for s in found if s.pieces]


def bound(handed_out: list[str]) -> tuple[set[str], set[str]]:
    """The names an exercise's cells bind: those they ask for (functions and classes they define, names they set
    to ``None``: ``predicted_score = None  # your number``) and those they hand out (``my_attention = mh...``)."""
    asked, given = set(), set()
    for cell in handed_out:
        try:
            tree = ast.parse(cell)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                asked.add(node.name)
            elif isinstance(node, ast.Assign):
                names = {t.id for t in node.targets if isinstance(t, ast.Name)}
                none = isinstance(node.value, ast.Constant) and node.value.value is None
                (asked if none else given).update(names)
    return asked, given


def asked_for(solution_code: list[str], handed_out: list[str]) -> set[str]:
    """The names whose solution is the exercise's: those its cells ask for, and the functions of the solution
    that these use (a helper such as ``rope_angles``), but not what the exercise hands out."""
    asked, given = bound(handed_out)
    defined = {}
    for cell in solution_code:
        try:
            defined |= {n.name: n for n in ast.parse(cell).body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        except SyntaxError:
            continue
    names, todo = set(asked), [defined[name] for name in asked if name in defined]
    while todo:
        for inner in ast.walk(todo.pop()):
            if isinstance(inner, ast.Name) and inner.id in defined and inner.id not in names | given:
                names.add(inner.id)
                todo.append(defined[inner.id])
    return names


def solution(solution_code: list[str], handed_out: list[str]) -> list[Statement]:
    """The statements of an exercise's solution that its own cells do not hand out."""
    given = {squeeze(s.text) for cell in handed_out for s in statements(cell)}
    names = asked_for(solution_code, handed_out)
    asked = [s for cell in solution_code for s in statements(cell, names)] if names else []
    found = asked or [s for cell in solution_code for s in statements(cell)]
    return [s for s in dict.fromkeys(found) if squeeze(s.text) not in given]


def given_away(statements_: list[Statement], hint_code: list[str]) -> list[str]:
    """The statements a hint's code holds, whole or in part."""
    return [s.text for s in statements_ if any(piece in fragment for piece in s.pieces for fragment in hint_code)]


def predicted_value(solution_code: list[str]) -> object:
    """The value a prediction's solution gives: its ``my_prediction()`` or its ``predicted_...`` number."""
    for cell in solution_code:
        tree = ast.parse(cell)
        answer = [
            node
            for node in tree.body
            if (isinstance(node, ast.FunctionDef) and node.name == "my_prediction")
            or (
                isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id.startswith("predicted") for t in node.targets)
            )
        ]
        if answer:
            namespace: dict = {"torch": torch, "math": math}
            exec(compile(ast.Module(body=answer, type_ignores=[]), "<solution>", "exec"), namespace)
            if "my_prediction" in namespace:
                return namespace["my_prediction"]()
            return next(value for name, value in namespace.items() if name.startswith("predicted"))
    raise LookupError("no my_prediction() and no predicted_... in the solution")


def spellings(number: float) -> list[str]:
    """Ways a hint could write a predicted number: 6; 1.25; 0.33, 0.333, 1/3 or \\frac{1}{3}."""
    if number.is_integer():
        return [str(int(number))]
    written = {f"{number:.2f}", f"{number:.3f}", f"{number:.3g}", f"{number:g}"}
    fraction = Fraction(number).limit_denominator(100)
    if fraction.denominator > 1 and math.isclose(float(fraction), number, rel_tol=1e-12):
        written |= {
            f"{fraction.numerator}/{fraction.denominator}",
            rf"\frac{{{fraction.numerator}}}{{{fraction.denominator}}}",
        }
    return sorted(written)


def states_value(hint: str, value: object) -> list[str]:
    """How a hint's text (prose or code) writes ``value``, if it does: as a number of its own (not part of
    another number, nor its negative), or, for several answers (a list, a tensor), as their sequence."""
    if isinstance(value, torch.Tensor):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        sequence = squeeze(", ".join(map(str, value)))
        return [sequence] if sequence in squeeze(hint) else []
    text = re.sub(r"\s*/\s*", "/", re.sub(r"\s+", " ", hint))  # "1 / 3" is "1/3"
    number = float(value)  # type: ignore[arg-type]  # a prediction that is not a sequence is a number
    return [s for s in spellings(number) if re.search(rf"(?<![\w.\-]){re.escape(s)}(?!\.?\d)", text)]


def giveaways(item) -> list[str]:
    """What the hints of lesson ``item`` give away, one line per exercise, naming the notebook and exercise."""
    learner = exercise_sections(ROOT / item.notebook)
    solutions = exercise_sections(ROOT / item.solutions)
    problems = []
    for heading, section in learner.items():
        kind = item.exercises[section.number - 1].kind
        markdown = "\n".join(section.markdown)
        found = hints(markdown)
        if "<summary>Hint" in markdown and not found:
            problems.append(f"{item.notebook.name}, {heading}: hints that this test cannot read")
        if not found or heading not in solutions:
            continue  # a missing solution fails the next test
        answer = solution(solutions[heading].code, section.code)
        allowed = max(0, min(ALLOWED[kind], len(answer) - 1))
        lines = given_away(answer, [fragment for hint in found.values() for fragment in code_in(hint)])
        if len(lines) > allowed:
            problems.append(
                f"{item.notebook.name}, {heading} ({kind}): its hints hold {len(lines)} of the "
                f"{len(answer)} statements of its solution (at most {allowed}): {lines}"
            )
        if kind == "predict":
            value = predicted_value(solutions[heading].code)
            for label, hint in found.items():
                if spelled := states_value(hint, value):
                    problems.append(f"{item.notebook.name}, {heading}, {label}: states the predicted value {spelled}")
    return problems


@pytest.mark.parametrize("item", LESSONS, ids=LESSON_IDS)
def test_no_hint_gives_its_exercise_away(item):
    problems = giveaways(item)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("item", LESSONS, ids=LESSON_IDS)
def test_every_exercise_has_a_solution_to_compare_with(item):
    """Every exercise is in the solutions notebook under the same heading, with code, and every prediction
    with a value: no exercise escapes the test above for want of a solution."""
    learner = exercise_sections(ROOT / item.notebook)
    solutions = exercise_sections(ROOT / item.solutions)
    assert [section.number for section in learner.values()] == list(range(1, len(item.exercises) + 1))
    assert set(learner) <= set(solutions), sorted(set(learner) - set(solutions))
    for heading, section in learner.items():
        answer = solutions[heading].code
        if item.exercises[section.number - 1].kind == "predict":
            predicted_value(answer)  # its working may be one short line: `return 6`
        else:
            assert solution(answer, section.code), f"{item.solutions.name}, {heading}: no solution found"


def test_the_hints_of_the_series_are_read():
    """The notebooks' hints are found, numbered from 1, each with its own text."""
    read = {
        (item.notebook.name, heading): hints("\n".join(section.markdown))
        for item in LESSONS
        for heading, section in exercise_sections(ROOT / item.notebook).items()
    }
    with_hints = {key: found for key, found in read.items() if found}
    assert with_hints, "no hint found in any notebook"
    for key, found in with_hints.items():
        assert [label.split(" · ")[0] for label in found] == [f"Hint {n}" for n in range(1, len(found) + 1)], key
        assert all(text.strip() for text in found.values()), key


SOLUTION = '''
import math

def attend(q, k, v, mask=None):
    """q, k, v -> out."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., seq_q, seq_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v

def helper(x):
    return x.transpose(-2, -1).contiguous()

claim("the checker accepts it", check_attend(attend).correct)
'''
STUB = "def attend(q, k, v, mask=None):\n    raise NotImplementedError  # your code here\n"


def test_the_solution_is_what_the_stub_asks_for_without_bookkeeping():
    assert [s.text for s in solution([SOLUTION], [STUB])] == [
        "scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])",
        "if mask is not None:",
        'scores = scores.masked_fill(~mask, float("-inf"))',
        "weights = torch.softmax(scores, dim=-1)",
        "return weights @ v",
    ]
    # Without a stub, the whole section's code is the solution; handed-out code is not.
    assert len(solution([SOLUTION], [])) == 6
    assert solution([SOLUTION], [SOLUTION]) == []


def test_a_hint_with_the_solution_is_caught_and_one_partial_line_is_not():
    answer = solution([SOLUTION], [STUB])
    whole = (
        "Scale: `scores = q @ k.transpose(-2,-1) / math.sqrt(q.shape[-1])`; then\n"
        "```python\nweights = torch.softmax(\n    scores, dim=-1)\n```\nand return `weights @ v`."
    )
    assert given_away(answer, code_in(whole)) == [
        "scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])",
        "weights = torch.softmax(scores, dim=-1)",
        "return weights @ v",
    ]
    # What a statement assigns, or a long piece of it, inside other code is caught too.
    inside = "`w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)`"
    assert given_away(answer, code_in(inside)) == ["scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])"]
    # A line with a blank, or names in code type, give nothing away.
    partial = "```python\nscores = scores.masked_fill(___, float('-inf'))\n```\nNames such as `masked_fill`, `~`."
    assert given_away(answer, code_in(partial)) == []


def test_a_predicted_value_is_caught_however_it_is_written():
    assert states_value("So every weight is $1 / 3$.", 1 / 3) == ["1/3"]
    assert states_value("So every weight is $\\frac{1}{3}$.", 1 / 3) == ["\\frac{1}{3}"]
    assert states_value("about 0.33 each", 1 / 3) == ["0.33"]
    assert states_value("It stays 1.25.", 1.25) == ["1.25"]
    assert states_value("Count them: 18 in all.", 18) == ["18"]
    assert states_value("Rows see 5, 6 and 7 keys; the mask is (3, 7).", 18) == []
    assert states_value("the axis -2, 2.5 times, axis2", 2) == []
    assert states_value("`[True, True, False, False]`", torch.tensor([True, True, False, False])) != []
    assert predicted_value(["def my_prediction():\n    return math.sqrt(256 / 64)\n\nclaim('x', True)\n"]) == 2
    assert predicted_value(["predicted_score = 1.25\nclaim('x', check(predicted_score).correct)\n"]) == 1.25
