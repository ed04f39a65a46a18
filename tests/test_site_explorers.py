"""The website's explorers without a kernel (mhsa_helpers.teaching.site_explorers): which settings are offered,
and that each precomputed picture is the explorer's own figure at that setting."""

from __future__ import annotations

import io
import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from mhsa_helpers.lessons import LESSONS
from mhsa_helpers.lessons.causal_masking import masking_explorer
from mhsa_helpers.lessons.mistakes_that_circulate import bug_zoo_explorer
from mhsa_helpers.lessons.multi_head_attention import heads_explorer
from mhsa_helpers.teaching import site_explorers as site_explorers_module
from mhsa_helpers.teaching.explorer import STATIC_NOTE
from mhsa_helpers.teaching.site_explorers import (
    ExplorerCell,
    SiteControl,
    SiteExplorer,
    explorer_cells,
    explorer_manifest,
    offered,
    settings,
    site_controls,
)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def closing():
    made = []
    yield made.append
    for explorer in made:
        explorer.close()


def control(name, count, start, combined=True, everywhere=False):
    labels = tuple(map(str, range(count)))
    return SiteControl(name, name, "range", tuple(range(count)), labels, start, count, combined, everywhere)


def test_settings_are_every_combination_of_the_combined_controls_then_each_other_control_alone():
    grid = [control("a", 2, 1), control("b", 3, 0)]
    assert list(settings(grid)) == list(itertools.product(range(2), range(3)))
    mixed = [control("a", 2, 1), control("s", 3, 1, combined=False), control("b", 2, 0)]
    assert list(settings(mixed)) == [(0, 1, 0), (0, 1, 1), (1, 1, 0), (1, 1, 1), (1, 0, 0), (1, 2, 0)]
    star = [control("a", 3, 2, combined=False), control("b", 2, 0, combined=False)]
    assert list(settings(star)) == [(2, 0), (0, 0), (1, 0), (2, 1)]
    everywhere = [control("a", 2, 1), control("s", 3, 1, combined=False, everywhere=True), control("b", 2, 0)]
    grid = [(0, 1, 0), (0, 1, 1), (1, 1, 0), (1, 1, 1)]
    assert list(settings(everywhere)) == [*grid, *((a, s, b) for a, _, b in grid for s in (0, 2))]


def test_sliders_move_alone_at_every_combination_of_the_choices_while_few_enough(closing):
    explorer = masking_explorer()
    closing(explorer)
    controls = site_controls(explorer)
    assert [(c.name, c.combined, c.everywhere) for c in controls] == [
        ("seq_len", False, True),
        ("causal", True, False),
        ("method", True, False),
        ("dropout", False, True),
    ]
    # 2 x 2 choices, each with seq_len's and dropout's other values moved alone: within MOST_SETTINGS
    choices = len(controls[1].values) * len(controls[2].values)
    alone = len(controls[0].values) - 1 + len(controls[3].values) - 1
    assert len(list(settings(controls))) == choices * (1 + alone) <= site_explorers_module.MOST_SETTINGS
    fewer = site_controls(explorer, most=choices * (1 + alone) - 1)
    assert [(c.combined, c.everywhere) for c in fewer] == [(False, False), (True, False), (True, False), (False, False)]
    assert len(list(settings(fewer))) == choices + alone


def test_an_explorer_with_few_settings_offers_every_one_of_them(closing):
    explorer = bug_zoo_explorer()
    closing(explorer)
    (bugs,) = site_controls(explorer)
    widget = explorer.controls["bug"]
    assert bugs.values == tuple(o[1] if isinstance(o, tuple) else o for o in widget.options)
    assert bugs.combined and bugs.all_values == len(bugs.values) and bugs.values[bugs.start] == widget.value


def test_a_control_whose_options_follow_another_offers_all_it_can_have_and_a_slider_moves_alone(closing):
    explorer = heads_explorer(d_model=12)
    closing(explorer)
    heads, seq_len, head = site_controls(explorer)
    assert heads.values == (1, 2, 3, 4, 6, 12)  # the divisors of 12
    assert head.values == tuple(range(1, 13))  # 12 heads to frame with 12 heads, not only the 2 shown at the start
    assert heads.combined and head.combined and not seq_len.combined
    assert explorer.accepts(num_heads=4) and not explorer.accepts(num_heads=5)  # 5 does not divide 12
    assert explorer.accepts(head=2) and not explorer.accepts(head=3) and explorer.accepts(num_heads=3, head=3)
    offered = list(settings([heads, seq_len, head]))
    taken = [s for s in offered if explorer.accepts(num_heads=heads.values[s[0]], head=head.values[s[2]])]
    assert len(taken) == sum(heads.values) + len(seq_len.values) - 1  # each head of each count, then seq_len alone
    assert explorer.values() == {"num_heads": 2, "seq_len": 6, "head": 1}  # left as it was


def test_a_slider_with_many_values_is_thinned_evenly_keeping_its_ends_and_start(closing):
    explorer = masking_explorer()
    closing(explorer)
    for site in site_controls(explorer, limit=8):
        widget = explorer.controls[site.name]
        assert widget.value in site.values or site.values[site.start] == pytest.approx(widget.value)
        if len(site.values) < site.all_values:
            assert site.values[0] == pytest.approx(widget.min) and site.values[-1] == pytest.approx(widget.max)


def test_each_picture_is_the_explorers_own_figure_at_that_setting(tmp_path, closing):
    explorer = bug_zoo_explorer()
    closing(explorer)
    manifest = explorer_manifest(explorer, tmp_path)
    (bugs,) = manifest["controls"]
    assert manifest["start"] == [bugs["labels"].index(explorer.controls["bug"].label)]
    assert len(manifest["states"]) == len(bugs["labels"]) == len(list(tmp_path.iterdir()))
    assert manifest["offered"] == "Every setting of its controls is here."
    assert manifest["title"] == explorer.title and manifest["width"] == round(
        explorer.figure.get_size_inches()[0] * 100
    )
    check = bug_zoo_explorer()
    closing(check)
    options = [o[1] if isinstance(o, tuple) else o for o in check.controls["bug"].options]
    for key in ("0", str(len(options) - 1)):
        check.update(bug=options[int(key)])
        check.sharpen()
        drawn = np.asarray(check.figure.canvas.buffer_rgba())[..., :3].astype(float)
        state = manifest["states"][key]
        saved = np.asarray(Image.open(io.BytesIO((tmp_path / state["picture"]).read_bytes())).convert("RGB"))
        assert saved.shape == drawn.shape
        assert np.abs(saved - drawn).mean() < 4  # the same picture, up to WebP's loss
        assert state["caption"] == check.data["caption"]
    json.dumps(manifest)  # what the page reads


def test_the_explorer_cells_are_found_with_the_call_that_makes_them():
    cells = [cell for lesson in LESSONS for cell in explorer_cells(Path(lesson.notebook), ROOT)]
    shown = []
    for lesson in LESSONS:
        notebook = json.loads((ROOT / lesson.notebook).read_text(encoding="utf-8"))
        for index, cell in enumerate(notebook["cells"]):
            text = "".join("".join(o.get("data", {}).get("text/plain", "")) for o in cell.get("outputs", []))
            if STATIC_NOTE in text:
                shown.append((lesson.notebook.as_posix(), index))
    assert [(cell.notebook, cell.index) for cell in cells] == shown and len(shown) >= len(LESSONS)
    assert ExplorerCell("notebooks/04_multi_head_attention.ipynb", 34, "heads_explorer", {"d_model": 12}) in cells
    assert ExplorerCell("notebooks/07_induction_heads.ipynb", 25, "training_explorer", {"step": 200}) in cells
    assert cells[0].key == "01_qkv_by_hand-42"


def test_an_explorer_cell_made_another_way_is_refused(tmp_path):
    output = {"output_type": "execute_result", "data": {"text/plain": [f"An explorer — {STATIC_NOTE}"]}}
    cell = {"cell_type": "code", "source": ["make()(1)\n"], "outputs": [output], "metadata": {}}
    (tmp_path / "n.ipynb").write_text(json.dumps({"cells": [cell]}), encoding="utf-8")
    with pytest.raises(ValueError, match=r"n\.ipynb cell 0 shows an explorer"):
        explorer_cells(Path("n.ipynb"), tmp_path)


def fake_manifest(folder: Path, sizes: list[int], states: int, seconds: float) -> SiteExplorer:
    """An explorer as site_explorers returns it, with pictures of the given sizes in ``folder``."""
    (folder / "pictures").mkdir(parents=True)
    for k, size in enumerate(sizes):
        (folder / "pictures" / f"{k}.webp").write_bytes(b"x" * size)
    return SiteExplorer({"states": {str(k): {} for k in range(states)}}, folder, seconds)


def test_the_budget_table_sums_each_page_and_the_site_and_refuses_what_passes_a_budget(tmp_path, monkeypatch):
    manifests = {
        "08_attention_at_scale-11": fake_manifest(tmp_path / "a", [1_000_000, 500_000], 3, 10.0),
        "08_attention_at_scale-27": fake_manifest(tmp_path / "b", [250_000], 2, 5.4),
        "09_long_context-13": fake_manifest(tmp_path / "c", [2_000_000], 4, 20.0),
    }
    assert site_explorers_module.budget_table(manifests)[2:] == [
        "| 08_attention_at_scale | 2 | 5 | 1.75 | 15 |",
        "| 09_long_context | 1 | 4 | 2.00 | 20 |",
        "| whole site | 3 | 9 | 3.75 | 35 |",
    ]
    monkeypatch.setattr(site_explorers_module, "PAGE_BUDGET", 1_800_000)
    with pytest.raises(ValueError, match=r"09_long_context: .* 2,000,000 bytes, over the 1,800,000 budget"):
        site_explorers_module.budget_table(manifests)
    monkeypatch.setattr(site_explorers_module, "PAGE_BUDGET", 2_000_000)
    site_explorers_module.budget_table(manifests)  # a page at its budget is within it
    monkeypatch.setattr(site_explorers_module, "SITE_BUDGET", 3_700_000)
    with pytest.raises(ValueError, match=r"3,750,000 bytes, over the site's 3,700,000 budget"):
        site_explorers_module.budget_table(manifests)
    monkeypatch.setattr(site_explorers_module, "SITE_BUDGET", 3_750_000)
    monkeypatch.setattr(site_explorers_module, "BUILD_BUDGET", 35)
    with pytest.raises(ValueError, match=r"took 35.4 s to compute, over the 35 s budget"):
        site_explorers_module.budget_table(manifests)


def test_the_page_says_what_it_offers():
    layer = SiteControl("layer", "layer", "range", (0, 15, 29), ("0", "15", "29"), 1, 30, False, True)
    head = control("head", 9, 0, combined=False, everywhere=True)
    sentence = SiteControl("sentence", "sentence", "buttons", (0, 1), ("one", "two"), 0, 2)
    assert offered([layer, head, sentence]) == (
        "One at a time, for every setting of sentence: layer and head (moving one sets the other back to the"
        " notebook's value). Offered: layer 0, 15, 29 (of 30 values)."
    )
    window = control("window", 3, 0, combined=False, everywhere=True)
    assert offered([layer, head, window, sentence]).startswith(
        "One at a time, for every setting of sentence: layer, head and window (moving one sets the others back to"
        " the notebook's values)."
    )
    assert offered([window, sentence]) == "Every value of window for every setting of sentence."
    assert offered([control("a", 2, 0, combined=False), sentence, control("b", 2, 0)]) == (
        "One at a time: a (moving it sets the other controls back to the notebook's values)."
    )
    assert offered([control("a", 2, 0, combined=False), sentence, control("c", 2, 0, combined=False)]) == (
        "One at a time: a and c (moving one sets the others back to the notebook's values)."
    )
    assert offered([control("a", 2, 0, combined=False), control("b", 2, 0, combined=False)]) == (
        "One control at a time: moving one sets the others back to the notebook's values."
    )
    assert offered([sentence, control("b", 2, 0)]) == "Every setting of its controls is here."
