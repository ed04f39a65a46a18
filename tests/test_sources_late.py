"""Notebooks 08 and 10 say only what they show, and name their sources.

Pins the corrections of issue 21 for the two late notebooks: the -10000 bug is the size of the
constant (adding a mask is right), each bug of the zoo links where it was reported (and fixed) or says
it is an illustration, the repeat bug's wrong heads depend on the shape, a tile as large as the
sequence does build the whole score matrix, and the explorers' axes are honest (every lesson's
references and reading time: tests/test_sources.py).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import nbformat
import pytest
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from mhsa_helpers import causal_mask, softmax
from mhsa_helpers.lessons.attention_at_scale import cache_explorer, tiles_explorer
from mhsa_helpers.lessons.mistakes_that_circulate import BUGS, bug, bug_zoo_explorer
from mhsa_helpers.tiled_attention import tiled_attention

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
NB08 = NOTEBOOKS / "08_attention_at_scale.ipynb"
NB10 = NOTEBOOKS / "10_mistakes_that_circulate.ipynb"


def markdown(path: Path) -> list[str]:
    return [cell.source for cell in nbformat.read(path, as_version=4).cells if cell.cell_type == "markdown"]


def text_of(path: Path) -> str:
    return "\n".join(cell.source for cell in nbformat.read(path, as_version=4).cells)


# ------------------------------------------------------------------ the size of the constant


def test_adding_a_mask_is_right_and_minus_10000_is_too_small_for_large_scores():
    scores = torch.tensor([[-24_000.0, -25_000.0, -9_000.0, -30_000.0], [0.5, -1.0, 2.0, 0.3]])
    allowed = torch.tensor([[True, True, False, False], [True, True, True, False]])

    def added(constant: float) -> torch.Tensor:
        return softmax(scores + torch.zeros(scores.shape).masked_fill(~allowed, constant))

    filled = softmax(scores.masked_fill(~allowed, -math.inf))
    # An added -inf or dtype minimum is exactly the masked_fill result: the addition is not the bug.
    assert torch.equal(added(-math.inf), filled)
    assert torch.equal(added(torch.finfo(torch.float32).min), filled)
    # -10000 is enough for ordinary scores, not for scores of its own size.
    assert torch.equal(added(-10_000.0)[1], filled[1])
    assert added(-10_000.0)[0, 2] > 0.99 and filled[0, 2] == 0


def test_the_zoos_fix_for_minus_10000_keeps_the_addition():
    item = bug("additive -10000 mask")
    assert "never an addition" not in item.fix
    assert "keep the addition" in item.fix and "finfo" in item.fix
    demo = item.run()
    assert (demo.buggy * ~causal_mask(4)).sum(-1).max() > 0.99  # the future key wins with -10000
    assert (demo.fixed.triu(1) == 0).all()
    assert "never an addition" not in text_of(NB10)


def test_float16_cannot_hold_minus_1e9():
    assert torch.tensor(-1e9).half().item() == -math.inf
    assert torch.finfo(torch.float16).min == -65504


# ------------------------------------------------------------------ the zoo's provenance

REPORTED = {
    "inverted boolean mask",
    "additive -10000 mask",
    "RoPE pairing mismatch",
    "top-left causal mask with a cache",
    "missing 1/√d_k",
    "missing output projection",
    "GQA with repeat",
}
#: Reported in an issue, not (yet) in a pull request that fixed it.
ISSUE_ONLY = {"inverted boolean mask", "missing output projection"}
LINK = re.compile(r"^https://github\.com/([\w.-]+/[\w.-]+)/(issues|pull)/(\d+)$")


@pytest.mark.parametrize("item", BUGS, ids=lambda b: b.name)
def test_each_bug_links_its_report_or_says_it_is_an_illustration(item):
    assert item.history == (item.name in REPORTED)
    if not item.history:
        assert "illustration" in item.provenance
        return
    assert any("/pull/" in report.url for report in item.reports) == (item.name not in ISSUE_ONLY)
    for report in item.reports:
        match = LINK.match(report.url)
        assert match, report.url
        assert report.where == f"{match.group(1)}#{match.group(3)}"
        assert report.what
    assert item.provenance.startswith("reported: ")


def test_notebook_10_prints_every_report_and_lists_it_in_its_references():
    text = text_of(NB10)
    references = markdown(NB10)[-1]
    for item in BUGS:
        for report in item.reports:
            assert report.url in references, report.url
    assert "shipped in real, widely used code" not in text
    assert "illustration" in text


def test_bug_zoo_captions_fit_two_lines_and_name_the_provenance():
    explorer = bug_zoo_explorer()
    try:
        for item in BUGS:
            explorer.update(bug=item.name)
            caption = explorer.data["caption"]
            assert len(caption) <= 280, (item.name, len(caption))  # two lines of the picture's caption band
            assert ("reported in" in caption) == item.history
            assert ("illustration" in caption) == (not item.history)
    finally:
        explorer.close()


# ------------------------------------------------------------------ notebook 10 states the copied versions in full


def test_notebook_10_writes_the_copied_versions_out():
    text = text_of(NB10)
    for copied in (
        "[0.04,\\ 0.08,\\ 0.07]",  # the copied key of "Money"
        "[0.08,\\ 0.07,\\ 0.09]",  # and value
        "O = C\\,W_O",
        "values.reshape(batch_size, sequence_length, num_heads * head_dim)",
        "weights * torch.tril(torch.ones(n, n))",
        "(1.0 - allowed) * -10000.0",
        "masked_fill(allowed == 0, -1e9)",
    ):
        assert copied in text, copied
    assert "AS_COMMONLY_PRINTED" not in text  # the numbers are in the notebook, not behind a name
    for allusion in ("popular", "tutorial", "as commonly printed", "widely copied version of"):
        assert allusion not in text.lower(), allusion


# ------------------------------------------------------------------ notebook 08's corrected claims


def wrong_heads(num_heads: int, num_kv_heads: int) -> int:
    """Query heads whose output changes when key/value heads are expanded with repeat instead of
    repeat_interleave, measured on random inputs."""
    g = torch.Generator().manual_seed(0)
    groups = num_heads // num_kv_heads
    q = torch.randn(1, num_heads, 5, 8, generator=g)
    k, v = torch.randn(2, 1, num_kv_heads, 5, 8, generator=g).unbind(0)
    right = F.scaled_dot_product_attention(q, k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1))
    tiled = F.scaled_dot_product_attention(q, k.repeat(1, groups, 1, 1), v.repeat(1, groups, 1, 1))
    return sum(not torch.allclose(right[:, h], tiled[:, h]) for h in range(num_heads))


def test_repeat_pairs_a_shape_dependent_number_of_heads_wrongly():
    assert wrong_heads(8, 2) == 4
    assert wrong_heads(8, 4) == 6
    assert wrong_heads(32, 8) == 28
    text = text_of(NB08)
    assert "pairs\nmost query heads" not in text and "pairs most query heads" not in text
    assert "28 of 32" in text


class _LargestProduct(TorchFunctionMode):
    def __init__(self, inner: int) -> None:
        super().__init__()
        self.inner, self.largest = inner, 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if getattr(func, "__name__", "") in ("matmul", "__matmul__") and args[1].shape[-2] == self.inner:
            self.largest = max(self.largest, out.shape[-2] * out.shape[-1])
        return out


@pytest.mark.parametrize(("tile", "largest"), [(16, 16 * 16), (49, 49 * 49), (50, 50 * 50), (64, 50 * 50)])
def test_a_tile_as_large_as_the_sequence_builds_the_whole_score_matrix(tile, largest):
    q, k, v = torch.randn(3, 1, 2, 50, 16).unbind(0)
    with _LargestProduct(inner=16) as watch:
        tiled_attention(q, k, v, tile_size=tile)
    assert watch.largest == largest
    text = text_of(NB08)
    assert "No `(50, 50)` matrix existed anywhere" not in text


def test_notebook_08_measures_what_it_claims_and_points_to_nothing_a_learner_lacks():
    cells = nbformat.read(NB08, as_version=4).cells
    for cell in cells:
        assert "README" not in cell.source
        if "time.perf_counter" in cell.source:
            # timings vary: asserted by a ratio, never compared as text
            assert "nbval-ignore-output" in cell.metadata.get("tags", []), cell.id
            assert "claim(" in cell.source
    text = text_of(NB08)
    assert "FlashAttention-2 (Dao, 2023)" in text and "outer" in text and "SRAM" in text and "recomputes" in text


# ------------------------------------------------------------------ pictures


def test_cache_explorer_bars_are_on_a_linear_axis_that_holds_them():
    explorer = cache_explorer()
    try:
        for model in ("GPT-2 small", "Llama-3-8B"):
            explorer.update(model=model, tokens=131072, batch=64)
            (ax,) = explorer.figure.axes
            assert ax.get_yscale() == "linear"
            assert ax.get_ylim()[0] == 0 and ax.get_ylim()[1] >= explorer.data["gib"].max()
    finally:
        explorer.close()


def test_tiles_explorer_draws_the_normaliser_on_its_own_labelled_axis():
    explorer = tiles_explorer()
    try:
        labels = {ax.get_ylabel() for ax in explorer.figure.axes}
        assert {"score", "normaliser ℓ"} <= labels
        for tile in range(1, 17):
            explorer.update(tile_size=tile)
            normaliser_axis = next(ax for ax in explorer.figure.axes if ax.get_ylabel() == "normaliser ℓ")
            assert normaliser_axis.get_ylim()[1] >= max(explorer.data["normaliser"])
    finally:
        explorer.close()


@pytest.mark.parametrize("path", [NB08, NB10], ids=lambda p: p.stem)
def test_sections_are_numbered_in_order_and_cross_references_exist(path):
    headings = [re.match(r"## (\d+)\. ", line) for cell in markdown(path) for line in cell.splitlines()]
    numbers = [int(match.group(1)) for match in headings if match]
    assert numbers == list(range(1, len(numbers) + 1))
    for cited in re.findall(r"section (\d+)", text_of(path)):
        assert int(cited) in numbers
