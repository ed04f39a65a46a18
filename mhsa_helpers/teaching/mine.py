"""The learner's own attention, written once and carried from notebook to notebook: ``my_attention.py``.

Notebooks 02 to 06 each add a piece to the learner's attention — 02 the scaled dot-product attention, 03 the
causal mask, 04 the multi-head module, 05 the rotation, 06 the causal module with a cache that *extends* 04's —
and notebooks 07 and 11 train and run the last one. The pieces live in one file beside the notebooks:

* :func:`save_mine` writes a piece's source (a function or a class, as the learner last ran it) into
  ``my_attention.py``, with the pieces of the notebook it uses and the imports it needs, replacing an older
  version of the same name. A piece that still raises ``NotImplementedError`` is not saved.
* :func:`load_mine` gives a piece back in a later notebook, and says in one line whether it is the learner's
  or, where the file has none yet, the package's stand-in (:data:`FALLBACKS` holds one per piece).
* On Colab each notebook opens in a fresh runtime without the file: the cell magic ``%%my_attention`` writes
  what the learner pastes into it (:func:`show_mine` prints the file to copy from the notebook before).

The file is plain Python the learner can read and edit; nothing here runs it except :func:`load_mine`.
"""

from __future__ import annotations

import ast
import builtins
import dis
import importlib
import importlib.util
import linecache
import os
import tempfile
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import torch
from torch import nn

from ..attention import scaled_dot_product_attention
from ..heads import merge_heads, split_heads
from ..masking import causal_mask
from ..rope import apply_rotary, rope_angles

__all__ = [
    "FALLBACKS",
    "MY_FILE",
    "PackageMultiHeadAttention",
    "load_mine",
    "package_apply_rope",
    "paste_mine",
    "save_mine",
    "show_mine",
]

#: The learner's file, beside the notebook that runs (a notebook's working directory is its folder).
MY_FILE = "my_attention.py"

#: The name the file is imported under; a piece loaded from it knows it is already in the file by this name.
MODULE_NAME = "my_attention"

_HEADER = (
    '# Your own attention, written in the notebooks of "Attention, step by step" and saved there by\n'
    "# save_mine(...); each later notebook loads it with load_mine(...). You may edit it here too.\n"
)


# ------------------------------------------------------------------ the package's stand-ins


def package_apply_rope(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Notebook 05's rotation with the package's functions: ``x (..., seq, d_head)`` with each interleaved pair
    rotated by ``positions[j] * theta_i`` (``positions (seq,)``); returns ``(..., seq, d_head)``."""
    cos, sin = rope_angles(positions, x.shape[-1], base)
    return apply_rotary(x, cos, sin)


class PackageMultiHeadAttention(nn.Module):
    """Notebook 04's module made of the package's functions: ``PackageMultiHeadAttention(d_model, num_heads, *,
    d_in=None, bias=True)`` holds ``nn.Linear`` layers ``w_q, w_k, w_v`` (d_in -> d_model) and ``w_o``
    (d_model -> d_model); ``forward(x (batch, seq, d_in))`` returns ``(batch, seq, d_model)``, no mask."""

    def __init__(self, d_model: int, num_heads: int, *, d_in: int | None = None, bias: bool = True) -> None:
        super().__init__()
        d_in = d_model if d_in is None else d_in
        self.num_heads = num_heads
        self.w_q = nn.Linear(d_in, d_model, bias=bias)
        self.w_k = nn.Linear(d_in, d_model, bias=bias)
        self.w_v = nn.Linear(d_in, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = (split_heads(w(x), self.num_heads) for w in (self.w_q, self.w_k, self.w_v))
        return self.w_o(merge_heads(cast(torch.Tensor, scaled_dot_product_attention(q, k, v))))


#: Each piece of the learner's file, and the package's piece with the same signature that stands in for it
#: until the learner has saved theirs.
FALLBACKS: dict[str, Any] = {
    "my_scaled_dot_product_attention": scaled_dot_product_attention,
    "my_causal_mask": causal_mask,
    "my_split_heads": split_heads,
    "my_merge_heads": merge_heads,
    "MyMultiHeadAttention": PackageMultiHeadAttention,
    "my_apply_rope": package_apply_rope,
    "MyCausalSelfAttention": None,
}


# ------------------------------------------------------------------ reading a piece's source


def _methods(cls: type) -> list[types.FunctionType]:
    """The functions a class defines: methods, and those under ``staticmethod``, ``classmethod`` and ``property``."""
    found = []
    for member in vars(cls).values():
        function = getattr(member, "__func__", getattr(member, "fget", member))
        found += [function] if isinstance(function, types.FunctionType) else []
    return found


def _defined_where(piece: Any) -> tuple[str, int | None]:
    """The file (an IPython cell has one of its own) a piece was defined in, and its first line when known."""
    if isinstance(piece, types.FunctionType):
        return piece.__code__.co_filename, piece.__code__.co_firstlineno
    methods = _methods(piece)
    if not methods:
        raise TypeError(f"{piece.__name__} defines no method, so its source cannot be found: give it one (forward)")
    return methods[0].__code__.co_filename, None


Definition = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


def _node_of(piece: Any) -> tuple[ast.stmt, str]:
    """The top-level ``def`` or ``class`` statement of ``piece`` in the code it was defined by, and its text."""
    filename, first = _defined_where(piece)
    text = "".join(linecache.getlines(filename))
    kind = ast.ClassDef if isinstance(piece, type) else (ast.FunctionDef, ast.AsyncFunctionDef)
    found = [node for node in ast.parse(text).body if isinstance(node, kind) and node.name == piece.__name__]

    def starts(node: Definition) -> int:
        return min([node.lineno, *(d.lineno for d in node.decorator_list)])

    if first is not None:
        found = [node for node in found if starts(node) == first] or found
    if not found:
        raise TypeError(f"the source of {piece.__name__} is not in the code that defined it: run its cell again")
    node = found[-1]
    lines = text.splitlines(keepends=True)[starts(node) - 1 : node.end_lineno]
    return node, "".join(lines).rstrip() + "\n"


def _is_stub(node: ast.AST) -> bool:
    """Whether the piece still raises ``NotImplementedError`` somewhere (the notebook's placeholder)."""
    for raised in (n.exc for n in ast.walk(node) if isinstance(n, ast.Raise)):
        called = raised.func if isinstance(raised, ast.Call) else raised
        if isinstance(called, ast.Name) and called.id == "NotImplementedError":
            return True
    return False


def _global_loads(code: types.CodeType) -> Iterator[tuple[int, int, str]]:
    """The global names a function body reads (attributes and locals are other instructions), nested ones too,
    each with where it is read (line, column) so that they can be told in reading order."""
    for instruction in dis.get_instructions(code):
        # LOAD_NAME: a class body nested in a function; its own `__name__` (read to set `__module__`) is not a piece
        if instruction.opname in ("LOAD_GLOBAL", "LOAD_NAME") and instruction.argval != "__name__":
            where = getattr(instruction, "positions", None)  # Python 3.11 on; before it, the order of the code
            line, column = (where.lineno or 0, where.col_offset or 0) if where is not None else (0, 0)
            yield line, column, str(instruction.argval)
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            yield from _global_loads(constant)


def _loaded_names(node: ast.AST) -> Iterator[str]:
    """The names ``node`` reads (not those it assigns)."""
    return (n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load))


def _outer_loads(node: ast.AST) -> Iterator[str]:
    """The names read where a ``def`` or ``class`` statement runs rather than when its functions are called:
    decorators, base classes, default values, annotations and a class body's own statements."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        outer: list[ast.AST] = [*node.decorator_list, *node.args.defaults]
        outer += [d for d in node.args.kw_defaults if d is not None]
        every = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs, node.args.vararg, node.args.kwarg]
        outer += [a.annotation for a in every if a is not None and a.annotation is not None]
        outer += [node.returns] if node.returns is not None else []
        for part in outer:
            yield from _loaded_names(part)
    elif isinstance(node, ast.ClassDef):
        for part in (*node.decorator_list, *node.bases, *(k.value for k in node.keywords)):
            yield from _loaded_names(part)
        for statement in node.body:
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                yield from _outer_loads(statement)
            else:
                yield from _loaded_names(statement)


def _names_read(piece: Any, node: ast.stmt) -> tuple[list[str], dict[str, Any]]:
    """The global names ``piece`` reads, in reading order, and the namespace they are looked up in."""
    functions = _methods(piece) if isinstance(piece, type) else [piece]
    body = sorted(read for f in functions for read in _global_loads(f.__code__))
    names = [*_outer_loads(node), *(name for _, _, name in body)]
    return list(dict.fromkeys(names)), functions[0].__globals__


def _import_line(name: str, value: Any) -> str | None:
    """The import statement that binds ``name`` to ``value`` in a fresh module, or None when none does."""
    if isinstance(value, types.ModuleType):
        module = value.__name__
        if module == name:
            return f"import {module}"
        parent, _, last = module.rpartition(".")
        return f"from {parent} import {last}" if parent and last == name else f"import {module} as {name}"
    home, qualname = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
    if not isinstance(home, str) or not isinstance(qualname, str):
        return None
    try:
        found = getattr(importlib.import_module(home), qualname, None)
    except ImportError:
        return None
    if found is not value:
        return None
    return f"from {home} import {qualname}" + ("" if qualname == name else f" as {name}")


# ------------------------------------------------------------------ the file


def _read_file(path: Path) -> tuple[list[str], dict[str, str]]:
    """The import statements and the other top-level blocks (keyed by the name they define) of the file."""
    if not path.exists():
        return [], {}
    text = path.read_text()
    lines = text.splitlines(keepends=True)
    imports: list[str] = []
    blocks: dict[str, str] = {}
    for node in ast.parse(text).body:
        start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
        source = "".join(lines[start - 1 : node.end_lineno]).rstrip() + "\n"
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            imports.append(source)
        else:
            blocks[getattr(node, "name", source)] = source
    return imports, blocks


def _write_file(path: Path, imports: list[str], blocks: dict[str, str]) -> None:
    text = _HEADER + "\n" + "".join(dict.fromkeys(imports)) + "\n\n" + "\n\n".join(blocks.values())
    # Written whole and then moved into place, so that a notebook loading the file never reads half of it.
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".my_attention.", suffix=".tmp")
    with os.fdopen(handle, "w") as out:
        out.write(text)
    os.replace(temporary, path)


def _binds(line: str) -> set[str]:
    """The names an import statement binds."""
    statement = ast.parse(line).body[0]
    assert isinstance(statement, (ast.Import, ast.ImportFrom))
    return {alias.asname or alias.name for alias in statement.names}


def _collect(piece: Any, imports: list[str], blocks: dict[str, str], problems: list[str], added: list[str]) -> None:
    """Add ``piece`` to ``blocks`` after the pieces of its own module it uses, and the imports it needs."""
    node, source = _node_of(piece)
    if _is_stub(node):
        problems.append(f"{piece.__name__} still raises NotImplementedError: write it (and check it) first")
        return
    names, namespace = _names_read(piece, node)
    new_before = False
    for name in names:
        if name == piece.__name__ or name not in namespace:
            if name != piece.__name__ and not hasattr(builtins, name):
                problems.append(f"{piece.__name__} uses {name}, which is not defined: define it, then save again")
            continue
        value = namespace[name]
        module = getattr(value, "__module__", None)
        if isinstance(value, (types.FunctionType, type)) and module == piece.__module__:
            if value.__name__ not in added:
                new_before |= value.__name__ not in blocks
                _collect(value, imports, blocks, problems, added)
            continue
        if module == MODULE_NAME and getattr(value, "__name__", None) in blocks:
            if value.__name__ != name:
                problems.append(
                    f"{piece.__name__} uses your {value.__name__} under another name, {name}: call it {value.__name__}"
                )
            continue
        line = _import_line(name, value)
        if line is None:
            problems.append(
                f"{piece.__name__} uses {name} ({type(value).__name__}), a value of this notebook that "
                f"{MY_FILE} cannot hold: pass it in as an argument, or make it inside the function"
            )
        else:
            imports.append(line + "\n")
    # An older version keeps its place (a class defined after it may be built on it), unless a piece it now
    # uses is new to the file: then it goes after that piece.
    if new_before:
        blocks.pop(piece.__name__, None)
    blocks[piece.__name__] = source
    imports[:] = [line for line in imports if piece.__name__ not in _binds(line)]
    added.append(piece.__name__)


def save_mine(*pieces: Callable[..., Any], path: str | os.PathLike[str] = MY_FILE) -> None:
    """Save the source of each function or class in ``pieces`` (as last run) into ``path`` (``my_attention.py``),
    with the pieces of the notebook they use and the imports they need; an older version of the same name is
    replaced. Prints what was saved, or why nothing was: a piece that still raises ``NotImplementedError``,
    or one that uses a value of the notebook the file cannot hold."""
    for piece in pieces:
        if not isinstance(piece, (types.FunctionType, type)):
            raise TypeError(f"save_mine expects your functions and classes, got {type(piece).__name__}")
    where = Path(path)
    imports, blocks = _read_file(where)
    problems: list[str] = []
    added: list[str] = []
    for piece in pieces:
        _collect(piece, imports, blocks, problems, added)
    if problems:
        print("Nothing saved: " + "; ".join(dict.fromkeys(problems)) + ".")
        return
    _write_file(where, imports, blocks)
    asked = [piece.__name__ for piece in pieces]
    also = [name for name in added if name not in asked]
    uses = f" (with {', '.join(also)}, which {'it uses' if len(asked) == 1 else 'they use'})" if also else ""
    print(f"Saved {', '.join(asked)} to {where.name}{uses}.")


_loaded: dict[Path, tuple[str, types.ModuleType]] = {}


def _module(path: Path) -> types.ModuleType | str:
    """The file run as a module (run again only when its text changed), or why it does not run."""
    text = path.read_text()
    key = path.resolve()
    if key in _loaded and _loaded[key][0] == text:
        return _loaded[key][1]
    spec = importlib.util.spec_from_file_location(MODULE_NAME, path)
    assert spec is not None and spec.loader is not None  # a .py file always has a spec and a loader
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as error:  # the learner's file: any error is told, and the package stands in
        return f"{type(error).__name__}: {error}"
    _loaded[key] = (text, module)
    return module


def load_mine(name: str, fallback: Any = "package", *, path: str | os.PathLike[str] = MY_FILE) -> Any:
    """Your piece ``name`` from ``path`` (``my_attention.py``), or where the file has none yet, ``fallback``:
    by default the package's piece of the same signature (:data:`FALLBACKS`). Prints one line saying which."""
    if fallback == "package":
        if name not in FALLBACKS:
            raise ValueError(f"name must be one of the pieces {', '.join(FALLBACKS)}, got {name!r}")
        fallback = FALLBACKS[name]
    if fallback is not None and not isinstance(fallback, (types.FunctionType, type)):
        raise TypeError(f"fallback must be a function, a class or None, got {type(fallback).__name__}")
    instead = (
        "there is none to use yet"
        if fallback is None
        else f"the package's {fallback.__module__}.{fallback.__qualname__} stands in"
    )
    where = Path(path)
    if not where.exists():
        print(f"{name}: there is no {where.name} beside this notebook yet, so {instead}.")
        return fallback
    module = _module(where)
    if isinstance(module, str):
        print(f"{name}: {where.name} does not run ({module}): fix it there; until then {instead}.")
        return fallback
    if not hasattr(module, name):
        print(f"{name}: {where.name} has no {name} yet, so {instead}.")
        return fallback
    print(f"{name}: yours, from {where.name}.")
    return getattr(module, name)


def show_mine(path: str | os.PathLike[str] = MY_FILE) -> None:
    """Print the file, to copy into the next notebook's ``%%my_attention`` cell (on Colab)."""
    where = Path(path)
    print(where.read_text() if where.exists() else f"There is no {where.name} here yet: save_mine(...) writes it.")


def paste_mine(line: str, cell: str, *, path: str | os.PathLike[str] = MY_FILE) -> None:
    """The ``%%my_attention`` cell: what is pasted into it becomes ``path`` (``my_attention.py``); a cell holding
    only comments changes nothing. Pasted code that is not valid Python is not written."""
    where = Path(path)
    code = [text for text in cell.splitlines() if text.strip() and not text.lstrip().startswith("#")]
    if not code:
        if where.exists():
            print(f"Nothing pasted: the cells below load {where.name} as it is.")
        else:
            print(f"Nothing pasted, and there is no {where.name} here yet: the package's pieces stand in for yours.")
        return
    try:
        ast.parse(cell)
    except SyntaxError as error:
        print(f"Not written: line {error.lineno} of what you pasted is not Python ({error.msg}). Paste it again.")
        return
    where.write_text(cell.rstrip() + "\n")
    print(f"Wrote {where.name} ({len(cell.strip().splitlines())} lines): the cells below load from it.")


def _register_magic() -> None:
    try:
        from IPython import get_ipython
    except ImportError:  # plain Python: no cells, no magic
        return
    shell = get_ipython()
    if shell is not None:
        shell.register_magic_function(paste_mine, magic_kind="cell", magic_name="my_attention")


_register_magic()
