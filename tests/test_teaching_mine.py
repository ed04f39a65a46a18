"""The learner's file ``my_attention.py`` (``mhsa_helpers.teaching.mine``): what ``save_mine`` writes, what
``load_mine`` gives back, the ``%%my_attention`` paste cell, the package's stand-ins, and the solutions' file."""

from __future__ import annotations

import ast
import itertools
import json
import linecache
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import mhsa_helpers as mh
from mhsa_helpers.teaching import mine
from mhsa_helpers.teaching.mine import (
    FALLBACKS,
    PackageMultiHeadAttention,
    load_mine,
    package_apply_rope,
    paste_mine,
    save_mine,
    show_mine,
)

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
_cells = itertools.count()


def run_cell(source: str, namespace: dict) -> dict:
    """Run ``source`` as IPython runs a notebook cell: compiled under a file name of its own whose lines are in
    ``linecache``, in the notebook's namespace (``__main__``)."""
    filename = f"<ipython-input-{next(_cells)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    exec(compile(source, filename, "exec"), namespace)
    return namespace


def notebook() -> dict:
    return run_cell(
        "import math\nimport torch\nfrom torch import nn\nimport torch.nn.functional as F\n", {"__name__": "__main__"}
    )


SDPA = '''
def my_scaled_dot_product_attention(q, k, v, mask=None):
    """(..., seq_q, d_k) -> (..., seq_q, d_v)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v
'''

MODULE = """
def my_split_heads(x, num_heads):
    *batch, seq, d_model = x.shape
    return x.reshape(*batch, seq, num_heads, d_model // num_heads).transpose(-3, -2)


def my_merge_heads(x):
    *batch, heads, seq, d_head = x.shape
    return x.transpose(-3, -2).reshape(*batch, seq, heads * d_head)


class MyMultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, *, d_in=None, bias=True):
        super().__init__()
        d_in = d_model if d_in is None else d_in
        self.w_q, self.w_k, self.w_v = (nn.Linear(d_in, d_model, bias=bias) for _ in range(3))
        self.w_o = nn.Linear(d_model, d_model, bias=bias)
        self.num_heads = num_heads

    def forward(self, x):
        q, k, v = (my_split_heads(w(x), self.num_heads) for w in (self.w_q, self.w_k, self.w_v))
        return self.w_o(my_merge_heads(my_scaled_dot_product_attention(q, k, v)))
"""


@pytest.fixture
def here(tmp_path, monkeypatch):
    """A notebook's folder: the working directory, with no my_attention.py yet."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def blocks(path: Path) -> dict[str, str]:
    """The file's top-level definitions by name, and its imports under "imports"."""
    tree = ast.parse(path.read_text())
    found = {node.name: ast.unparse(node) for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    found["imports"] = [ast.unparse(node) for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    return found


# ------------------------------------------------------------------ saving


def test_a_saved_function_comes_back_and_computes_what_pytorch_does(here, capsys):
    ns = run_cell(SDPA, notebook())
    save_mine(ns["my_scaled_dot_product_attention"])
    assert capsys.readouterr().out == "Saved my_scaled_dot_product_attention to my_attention.py.\n"
    assert blocks(here / "my_attention.py")["imports"] == ["import math", "import torch"]

    loaded = load_mine("my_scaled_dot_product_attention")
    assert capsys.readouterr().out == "my_scaled_dot_product_attention: yours, from my_attention.py.\n"
    assert loaded is not ns["my_scaled_dot_product_attention"] and loaded.__module__ == "my_attention"
    q, k, v = torch.randn(2, 3, 4, 5), torch.randn(2, 3, 6, 5), torch.randn(2, 3, 6, 7)
    mask = torch.rand(4, 6) > 0.3
    mask[:, 0] = True
    torch.testing.assert_close(loaded(q, k, v, mask), F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    assert list(here.iterdir()) == [here / "my_attention.py"]  # the temporary file was moved into place


def test_a_class_is_saved_with_the_pieces_of_the_notebook_it_uses_and_its_imports(here, capsys):
    ns = run_cell(MODULE, run_cell(SDPA, notebook()))
    ns["num_heads"] = 4  # a value of the notebook with the name of an attribute the class reads: not a global of it
    save_mine(ns["MyMultiHeadAttention"])
    assert capsys.readouterr().out == (
        "Saved MyMultiHeadAttention to my_attention.py (with my_split_heads, my_merge_heads, "
        "my_scaled_dot_product_attention, which it uses).\n"
    )
    saved = blocks(here / "my_attention.py")
    assert list(saved)[:4] == [
        "my_split_heads",
        "my_merge_heads",
        "my_scaled_dot_product_attention",
        "MyMultiHeadAttention",
    ]
    assert saved["imports"] == ["from torch import nn", "import math", "import torch"]

    built = load_mine("MyMultiHeadAttention")(8, 2, d_in=6)
    package = PackageMultiHeadAttention(8, 2, d_in=6)
    package.load_state_dict(built.state_dict())
    x = torch.randn(3, 5, 6)
    torch.testing.assert_close(built(x), package(x))


def test_saving_again_replaces_a_piece_in_its_place_so_a_class_stays_after_its_base(here):
    ns = run_cell(MODULE, run_cell(SDPA, notebook()))
    save_mine(ns["MyMultiHeadAttention"])
    run_cell(
        "class MyCausalSelfAttention(MyMultiHeadAttention):\n"
        "    def __init__(self, d_model, num_heads, *, d_in=None, bias=True, rope_base=10000.0):\n"
        "        super().__init__(d_model, num_heads, d_in=d_in, bias=bias)\n"
        "        self.rope_base = rope_base\n",
        ns,
    )
    save_mine(ns["MyCausalSelfAttention"])
    run_cell(MODULE.replace("self.num_heads = num_heads", "self.num_heads = num_heads  # changed"), ns)
    save_mine(ns["MyMultiHeadAttention"])
    saved = blocks(here / "my_attention.py")
    names = [name for name in saved if name != "imports"]
    assert names.index("MyMultiHeadAttention") < names.index("MyCausalSelfAttention")
    assert "# changed" in (here / "my_attention.py").read_text()
    assert load_mine("MyCausalSelfAttention")(4, 2, rope_base=500.0).rope_base == 500.0


def test_a_piece_new_to_the_file_goes_before_an_older_piece_that_now_uses_it(here):
    ns = run_cell("class Base(nn.Module):\n    def forward(self, x):\n        return x\n", notebook())
    run_cell("class Grown(nn.Module):\n    def forward(self, x):\n        return 2 * x\n", ns)
    save_mine(ns["Grown"])
    run_cell("class Grown(Base):\n    def forward(self, x):\n        return 3 * x\n", ns)
    save_mine(ns["Grown"])
    assert load_mine("Grown", None)()(torch.ones(1)).item() == 3.0  # the file runs: Base is defined first


def test_a_stand_in_of_the_package_is_imported_and_dropped_once_the_learner_saves_their_own(here, capsys):
    ns = notebook()
    ns["my_scaled_dot_product_attention"] = load_mine("my_scaled_dot_product_attention")
    assert capsys.readouterr().out == (
        "my_scaled_dot_product_attention: there is no my_attention.py beside this notebook yet, so the package's "
        "mhsa_helpers.attention.scaled_dot_product_attention stands in.\n"
    )
    run_cell("def my_causal_attention(q, k, v):\n    return my_scaled_dot_product_attention(q, k, v)\n", ns)
    save_mine(ns["my_causal_attention"])
    imports = blocks(here / "my_attention.py")["imports"]
    assert (
        "from mhsa_helpers.attention import scaled_dot_product_attention as my_scaled_dot_product_attention" in imports
    )
    run_cell(SDPA, ns)
    save_mine(ns["my_scaled_dot_product_attention"])
    saved = blocks(here / "my_attention.py")
    assert not any("as my_scaled_dot_product_attention" in line for line in saved["imports"])
    assert "my_scaled_dot_product_attention" in saved
    q = torch.randn(3, 4)
    torch.testing.assert_close(load_mine("my_causal_attention", None)(q, q, q), F.scaled_dot_product_attention(q, q, q))


def test_decorators_defaults_and_annotations_bring_their_imports(here):
    ns = run_cell("def keep(function):\n    return function\n", notebook())
    run_cell(
        "@keep\n"
        "def my_zeros(n: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:\n"
        "    return torch.zeros(n, dtype=dtype)\n",
        ns,
    )
    save_mine(ns["my_zeros"])
    saved = blocks(here / "my_attention.py")
    assert saved["imports"] == ["import torch"] and list(saved)[:2] == ["keep", "my_zeros"]
    assert load_mine("my_zeros", None)(3).dtype == torch.float64


@pytest.mark.parametrize(
    ("cell", "told"),
    [
        (
            "def my_causal_mask(seq_q, seq_k):\n    raise NotImplementedError  # your code here\n",
            "Nothing saved: my_causal_mask still raises NotImplementedError: write it (and check it) first.\n",
        ),
        (
            "def my_causal_mask(seq_q, seq_k):\n    raise NotImplementedError()\n",
            "Nothing saved: my_causal_mask still raises NotImplementedError: write it (and check it) first.\n",
        ),
        (
            "scale = torch.tensor(2.0)\ndef my_causal_mask(seq_q, seq_k):\n    return scale\n",
            "Nothing saved: my_causal_mask uses scale (Tensor), a value of this notebook that my_attention.py cannot "
            "hold: pass it in as an argument, or make it inside the function.\n",
        ),
        (
            "def my_causal_mask(seq_q, seq_k):\n    return later(seq_q)\n",
            "Nothing saved: my_causal_mask uses later, which is not defined: define it, then save again.\n",
        ),
    ],
    ids=["stub", "stub called", "notebook value", "undefined"],
)
def test_what_cannot_be_saved_is_told_and_nothing_is_written(here, capsys, cell, told):
    ns = run_cell(cell, notebook())
    save_mine(ns["my_causal_mask"])
    assert capsys.readouterr().out == told
    assert not (here / "my_attention.py").exists()


def test_a_stub_that_uses_a_saved_piece_leaves_the_file_as_it_was(here):
    ns = run_cell(SDPA, notebook())
    save_mine(ns["my_scaled_dot_product_attention"])
    before = (here / "my_attention.py").read_text()
    run_cell(
        "def my_causal_attention(q, k, v):\n    my_scaled_dot_product_attention\n    raise NotImplementedError\n", ns
    )
    save_mine(ns["my_causal_attention"])
    assert (here / "my_attention.py").read_text() == before


def test_a_piece_loaded_from_the_file_under_another_name_is_refused(here, capsys):
    ns = run_cell(MODULE, run_cell(SDPA, notebook()))
    save_mine(ns["MyMultiHeadAttention"])
    ns["Base"] = load_mine("MyMultiHeadAttention")
    capsys.readouterr()
    run_cell("class MyCausalSelfAttention(Base):\n    def forward(self, x):\n        return x\n", ns)
    save_mine(ns["MyCausalSelfAttention"])
    assert capsys.readouterr().out == (
        "Nothing saved: MyCausalSelfAttention uses your MyMultiHeadAttention under another name, Base: call it "
        "MyMultiHeadAttention.\n"
    )


def test_save_mine_takes_functions_and_classes_only(here):
    with pytest.raises(TypeError, match="save_mine expects your functions and classes, got Tensor"):
        save_mine(torch.zeros(1))
    ns = run_cell("class Empty:\n    pass\n", notebook())
    with pytest.raises(TypeError, match="Empty defines no method"):
        save_mine(ns["Empty"])


def test_a_piece_whose_cell_is_gone_is_told_to_run_it_again(here):
    ns = run_cell("def my_causal_mask(seq_q, seq_k):\n    return None\n", notebook())
    linecache.cache.pop(ns["my_causal_mask"].__code__.co_filename)
    with pytest.raises(TypeError, match="the source of my_causal_mask is not in the code that defined it"):
        save_mine(ns["my_causal_mask"])


# ------------------------------------------------------------------ loading


def test_load_mine_says_which_piece_it_gives(here, capsys):
    assert load_mine("MyCausalSelfAttention") is None
    assert load_mine("my_apply_rope") is package_apply_rope
    (here / "my_attention.py").write_text("def my_causal_mask(seq_q, seq_k):\n    return 'mine'\n")
    assert load_mine("my_causal_mask")(1, 1) == "mine"
    assert load_mine("my_split_heads") is mh.split_heads
    assert load_mine("MyCausalSelfAttention") is None
    assert capsys.readouterr().out.splitlines() == [
        "MyCausalSelfAttention: there is no my_attention.py beside this notebook yet, so there is none to use yet.",
        "my_apply_rope: there is no my_attention.py beside this notebook yet, so the package's "
        "mhsa_helpers.teaching.mine.package_apply_rope stands in.",
        "my_causal_mask: yours, from my_attention.py.",
        "my_split_heads: my_attention.py has no my_split_heads yet, so the package's mhsa_helpers.heads.split_heads "
        "stands in.",
        "MyCausalSelfAttention: my_attention.py has no MyCausalSelfAttention yet, so there is none to use yet.",
    ]
    with pytest.raises(
        ValueError, match=r"name must be one of the pieces my_scaled_dot_product_attention, .*, got 'mask'"
    ):
        load_mine("mask")


def test_a_file_that_does_not_run_is_told_and_the_package_stands_in(here, capsys):
    (here / "my_attention.py").write_text("import torch\n\nx = undefined_name\n")
    assert load_mine("my_causal_mask") is mh.causal_mask
    assert capsys.readouterr().out == (
        "my_causal_mask: my_attention.py does not run (NameError: name 'undefined_name' is not defined): fix it "
        "there; until then the package's mhsa_helpers.masking.causal_mask stands in.\n"
    )


def test_the_file_is_run_again_only_when_it_changed(here):
    (here / "my_attention.py").write_text("class MyMultiHeadAttention:\n    pass\n")
    first, again = load_mine("MyMultiHeadAttention"), load_mine("MyMultiHeadAttention")
    assert first is again  # so a class loaded in two calls is one class: a subclass of it is a subclass of both
    (here / "my_attention.py").write_text("class MyMultiHeadAttention:\n    size = 2\n")
    assert load_mine("MyMultiHeadAttention").size == 2


def test_show_mine_prints_the_file(here, capsys):
    show_mine()
    assert capsys.readouterr().out == "There is no my_attention.py here yet: save_mine(...) writes it.\n"
    (here / "my_attention.py").write_text("import torch\n")
    show_mine()
    assert capsys.readouterr().out == "import torch\n\n"


# ------------------------------------------------------------------ the %%my_attention cell


def test_the_paste_cell_writes_what_is_pasted_and_nothing_else(here, capsys):
    comments = "# On Colab only: paste your my_attention.py below these lines\n#\n\n"
    paste_mine("", comments)
    assert capsys.readouterr().out == (
        "Nothing pasted, and there is no my_attention.py here yet: the package's pieces stand in for yours.\n"
    )
    assert not (here / "my_attention.py").exists()
    paste_mine("", comments + SDPA.replace("import", ""))
    assert capsys.readouterr().out == "Wrote my_attention.py (10 lines): the cells below load from it.\n"
    assert "def my_scaled_dot_product_attention" in (here / "my_attention.py").read_text()
    paste_mine("", comments)
    assert capsys.readouterr().out == "Nothing pasted: the cells below load my_attention.py as it is.\n"
    paste_mine("", "def broken(:\n    pass\n")
    assert capsys.readouterr().out == (
        "Not written: line 1 of what you pasted is not Python (invalid syntax). Paste it again.\n"
    )
    assert "def my_scaled_dot_product_attention" in (here / "my_attention.py").read_text()


def test_the_paste_cell_is_a_cell_magic_of_ipython(here):
    interactiveshell = pytest.importorskip("IPython.core.interactiveshell")
    shell = interactiveshell.InteractiveShell.instance()
    try:
        mine._register_magic()
        shell.run_cell("%%my_attention\nx = 1\n")
        assert (here / "my_attention.py").read_text() == "x = 1\n"
    finally:
        interactiveshell.InteractiveShell.clear_instance()


# ------------------------------------------------------------------ the package's stand-ins


def test_the_stand_in_module_is_the_package_module_with_notebook_04s_layers():
    torch.manual_seed(0)
    for d_in, bias in ((None, True), (5, False)):
        package = mh.MultiHeadSelfAttention(8, 2, d_in=d_in, qkv_bias=bias, out_bias=bias)
        standing = PackageMultiHeadAttention(8, 2, d_in=d_in, bias=bias)
        with torch.no_grad():
            for layer, weight in zip(
                (standing.w_q, standing.w_k, standing.w_v), package.qkv_proj.weight.chunk(3), strict=True
            ):
                layer.weight.copy_(weight)
            standing.w_o.weight.copy_(package.out_proj.weight)
            if bias:
                for layer, b in zip(
                    (standing.w_q, standing.w_k, standing.w_v), package.qkv_proj.bias.chunk(3), strict=True
                ):
                    layer.bias.copy_(b)
                standing.w_o.bias.copy_(package.out_proj.bias)
        assert (standing.w_o.bias is None) is not bias
        x = torch.randn(2, 4, d_in or 8)
        torch.testing.assert_close(standing(x), package(x))


def test_the_stand_in_rotation_is_the_package_rotary_embedding():
    x, positions = torch.randn(2, 3, 5, 8), torch.arange(9, 14)
    for base in (10000.0, 500.0):
        rope = mh.RotaryEmbedding(8, 32, base)
        torch.testing.assert_close(package_apply_rope(x, positions, base), rope(x, positions))
    torch.testing.assert_close(package_apply_rope(x, positions), mh.RotaryEmbedding(8, 32)(x, positions))


def test_every_stand_in_has_the_signature_of_its_piece():
    assert set(FALLBACKS) == {
        "my_scaled_dot_product_attention", "my_causal_mask", "my_split_heads", "my_merge_heads",
        "MyMultiHeadAttention", "my_apply_rope", "MyCausalSelfAttention",
    }  # fmt: skip
    assert FALLBACKS["my_causal_mask"](2, 4).tolist() == [[True, True, True, False], [True, True, True, True]]


# ------------------------------------------------------------------ the solutions' file


def _solution_definitions() -> dict[str, str]:
    found: dict[str, str] = {}
    for path in sorted((NOTEBOOKS / "solutions").glob("0[2-6]_*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            source = "".join(cell["source"])
            if cell["cell_type"] != "code" or source.startswith("%%"):
                continue
            for node in ast.parse(source).body:
                if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name not in found:
                    found[node.name] = ast.unparse(node)
    return found


def test_the_solutions_file_holds_what_the_solutions_of_02_to_06_save():
    """The solutions notebooks load and save notebooks/solutions/my_attention.py as a learner does; it is committed
    so that each runs on its own (nbval spreads them over workers). Each definition in it is the one its notebook
    writes: a solution changed without running 02 to 06 again in order fails here."""
    saved = blocks(NOTEBOOKS / "solutions" / "my_attention.py")
    written = _solution_definitions()
    pieces = [name for name in saved if name != "imports"]
    assert {"my_scaled_dot_product_attention", "my_causal_mask", "MyMultiHeadAttention", "my_apply_rope",
            "MyCausalSelfAttention"} <= set(pieces)  # fmt: skip
    for name in pieces:
        assert saved[name] == written[name], name


# ------------------------------------------------------------------ pins: what the file holds, word for word


def test_the_file_is_written_as_its_pieces_with_one_blank_line_pair_between_and_other_statements_kept(here):
    (here / "my_attention.py").write_text(
        "import torch\n\nSCALE = 2\nLIMIT = 3\n\n\n@staticmethod\ndef kept(x):\n    return x\n"
    )
    ns = run_cell("def my_causal_mask(seq_q, seq_k):\n    return torch.ones(seq_q, seq_k).bool()\n\n\n", notebook())
    save_mine(ns["my_causal_mask"])
    assert (here / "my_attention.py").read_text() == (
        mine._HEADER
        + "\nimport torch\n\n\nSCALE = 2\n\n\nLIMIT = 3\n\n\n@staticmethod\ndef kept(x):\n    return x\n\n\n"
        "def my_causal_mask(seq_q, seq_k):\n    return torch.ones(seq_q, seq_k).bool()\n"
    )


def test_a_decorated_piece_keeps_its_decorator_and_the_first_of_two_definitions_is_the_one_that_ran(here):
    ns = run_cell("def keep(function):\n    return function\n", notebook())
    run_cell("@keep\ndef first():\n    return 1\n\n\nkept = first\n\n\n@keep\ndef first():\n    return 2\n", ns)
    save_mine(ns["kept"])
    text = (here / "my_attention.py").read_text()
    assert "@keep\ndef first():\n    return 1\n" in text and "return 2" not in text
    assert load_mine("first", None)() == 1


def test_class_members_under_staticmethod_classmethod_and_property_are_read(here):
    ns = run_cell("import typing\nimport functools as tools\n", notebook())
    run_cell(
        "class Only:\n"
        "    scale = math.pi\n"
        "    class Inner:\n"
        "        size = len(typing.__name__)\n"
        "    @staticmethod\n"
        "    def zeros(n):\n"
        "        return torch.zeros(n)\n"
        "    @property\n"
        "    def width(self):\n"
        "        return F.relu(torch.ones(1))\n"
        "    @classmethod\n"
        "    def made(cls):\n"
        "        return tools.reduce(max, [1, 2])\n",
        ns,
    )
    save_mine(ns["Only"])
    assert blocks(here / "my_attention.py")["imports"] == [
        "import math", "import typing", "import torch", "import torch.nn.functional as F", "import functools as tools",
    ]  # fmt: skip
    only = load_mine("Only", None)
    assert only.zeros(2).shape == (2,) and only().width.item() == 1.0 and only.made() == 2
    ns = run_cell("class Static:\n    @staticmethod\n    def one():\n        return 1\n", notebook())
    save_mine(ns["Static"])  # a class whose one function is a staticmethod is found by it
    assert load_mine("Static", None).one() == 1


def test_keyword_defaults_return_annotations_and_names_in_nested_classes_bring_their_imports(here):
    ns = run_cell("import typing\nimport fractions\nimport decimal\n", notebook())
    run_cell(
        "def helper():\n    return 3\n\n\n"
        "def shaped(x, *, kind=fractions.Fraction, other=None) -> typing.Any:\n"
        "    class Local:\n"
        "        size = helper()\n"
        "    return decimal.Decimal(Local.size)\n",
        ns,
    )
    save_mine(ns["shaped"])
    saved = blocks(here / "my_attention.py")
    assert saved["imports"] == ["import fractions", "import typing", "import decimal"] and "helper" in saved
    assert str(load_mine("shaped", None)(0)) == "3"


def test_imports_take_the_form_that_binds_the_notebooks_name(here):
    ns = run_cell(
        "import math as m\nfrom math import sqrt\nfrom torch.nn import functional\nimport torch.nn.functional as F\n"
        "def uses(x):\n    return m.pi, sqrt(4.0), functional.relu(x), F.relu(x)\n",
        notebook(),
    )
    save_mine(ns["uses"])
    assert blocks(here / "my_attention.py")["imports"] == [
        "import math as m",
        "from math import sqrt",
        "from torch.nn import functional",
        "import torch.nn.functional as F",
    ]
    assert load_mine("uses", None)(torch.tensor([-1.0]))[:2] == (math.pi, 2.0)


def test_a_function_whose_module_does_not_hold_it_is_a_value_the_file_cannot_hold(here, capsys):
    ns = notebook()
    stray = run_cell("def stray():\n    return 1\n", {"__name__": "elsewhere"})["stray"]
    stray.__module__, stray.__qualname__ = "math", "not_in_math"
    ns["stray"] = stray
    run_cell("def calls():\n    return stray()\n", ns)
    save_mine(ns["calls"])
    assert "calls uses stray (function), a value of this notebook that my_attention.py cannot hold" in (
        capsys.readouterr().out
    )


def test_names_read_on_one_line_come_in_reading_order_and_every_problem_is_told(here, capsys):
    ns = run_cell("def zeta(x):\n    return x\n\n\ndef alpha(x):\n    return x\n", notebook())
    run_cell("def both(x):\n    return zeta(alpha(x))\n\n\ndef other(x):\n    return x\n", ns)
    save_mine(ns["both"], ns["other"])
    assert capsys.readouterr().out == "Saved both, other to my_attention.py (with zeta, alpha, which they use).\n"
    run_cell("def stub_a():\n    raise NotImplementedError\n\n\ndef stub_b():\n    raise NotImplementedError\n", ns)
    save_mine(ns["stub_a"], ns["stub_b"])
    assert capsys.readouterr().out == (
        "Nothing saved: stub_a still raises NotImplementedError: write it (and check it) first; "
        "stub_b still raises NotImplementedError: write it (and check it) first.\n"
    )


def test_a_piece_that_raises_another_error_is_saved_and_a_stub_among_its_helpers_stops_the_save(here, capsys):
    ns = run_cell(
        "def checked(x):\n    if x < 0:\n        raise ValueError('x must be >= 0')\n    return x\n", notebook()
    )
    save_mine(ns["checked"])
    assert capsys.readouterr().out == "Saved checked to my_attention.py.\n"
    run_cell("def unfinished():\n    raise NotImplementedError\n\n\ndef caller():\n    return unfinished()\n", ns)
    save_mine(ns["caller"])
    assert capsys.readouterr().out.startswith("Nothing saved: unfinished still raises NotImplementedError")


def test_a_piece_rewritten_on_a_new_base_moves_after_it_even_when_it_also_uses_an_older_piece(here):
    ns = run_cell("def helper():\n    return 5\n", notebook())
    run_cell("class Grown(nn.Module):\n    def forward(self):\n        return helper()\n", ns)
    save_mine(ns["Grown"])
    run_cell(
        "class Base(nn.Module):\n    def extra_repr(self):\n        return 'base'\n\n\n"
        "class Grown(Base):\n    def forward(self):\n        return helper()\n",
        ns,
    )
    save_mine(ns["Grown"])  # Base is new to the file and read before helper, which the file already holds
    assert load_mine("Grown", None)()() == 5


def test_the_file_loaded_piece_is_not_imported_again_and_the_rest_still_is(here):
    ns = run_cell(SDPA, notebook())
    save_mine(ns["my_scaled_dot_product_attention"])
    ns = notebook()
    ns["my_scaled_dot_product_attention"] = load_mine("my_scaled_dot_product_attention")
    ns["cache"] = load_mine("my_scaled_dot_product_attention").__globals__["math"]  # a module read from the file
    run_cell(
        "import fractions\n"
        "def halves(q):\n    return my_scaled_dot_product_attention(q, q, q), fractions.Fraction(1)\n",
        ns,
    )
    save_mine(ns["halves"])
    assert blocks(here / "my_attention.py")["imports"] == ["import math", "import torch", "import fractions"]


def test_a_value_made_by_a_class_of_the_file_is_one_the_file_cannot_hold(here, capsys):
    (here / "my_attention.py").write_text("class MyKVCache:\n    def __init__(self):\n        self.length = 0\n")
    ns = notebook()
    ns["cache"] = load_mine("MyKVCache", None)()
    run_cell("def reads():\n    return cache.length\n", ns)
    capsys.readouterr()
    save_mine(ns["reads"])
    assert "reads uses cache (MyKVCache), a value of this notebook" in capsys.readouterr().out


def test_the_temporary_file_is_made_beside_the_file_so_that_the_move_is_atomic(here, monkeypatch):
    made = []
    real = mine.tempfile.mkstemp

    def recording(**where):
        made.append(where)
        return real(**where)

    monkeypatch.setattr(mine.tempfile, "mkstemp", recording)
    save_mine(run_cell(SDPA, notebook())["my_scaled_dot_product_attention"])
    assert [Path(where["dir"]).resolve() for where in made] == [here.resolve()]
    # named so that .gitignore's `.my_attention.*.tmp` covers one a crash would leave behind
    assert [(where["prefix"], where["suffix"]) for where in made] == [(".my_attention.", ".tmp")]


def test_an_indented_comment_is_a_comment_in_the_paste_cell(here, capsys):
    paste_mine("", "# paste here\n    # an indented note\n")
    assert capsys.readouterr().out.startswith("Nothing pasted")


def test_a_fallback_that_is_not_a_function_or_a_class_is_refused(here):
    with pytest.raises(TypeError, match="fallback must be a function, a class or None, got int"):
        load_mine("my_causal_mask", 3)


def test_the_stand_in_module_without_biases_has_none_in_any_layer():
    standing = PackageMultiHeadAttention(8, 2, bias=False)
    assert [layer.bias for layer in (standing.w_q, standing.w_k, standing.w_v, standing.w_o)] == [None] * 4
