"""How the explorers answer fast: a move shows a picture at the screen's resolution at once and
the sharp one once the controls are still; strings are drawn once and stamped afterwards; the
training scrub computes its saved steps in the background. Behaviour only: the times are
measured by benchmarks/bench_explorers.py and the browser test, never asserted here."""

from __future__ import annotations

import asyncio
import io

import numpy as np
import pytest
from matplotlib.backends.backend_agg import RendererAgg
from matplotlib.font_manager import FontProperties
from PIL import Image

from mhsa_helpers.lessons.induction_heads import training_explorer
from mhsa_helpers.lessons.multi_head_attention import heads_explorer
from mhsa_helpers.lessons.scaled_dot_product_attention import scaling_explorer
from mhsa_helpers.teaching import explorer as explorer_module
from mhsa_helpers.teaching.explorer import CSS_DPI, DPI, PIXEL_RATIO, SHARPEN_AFTER


def picture_width(explorer) -> int:
    return Image.open(io.BytesIO(explorer.picture)).width


def test_a_move_in_a_kernel_shows_the_quick_picture_then_the_sharp_one():
    async def scenario():
        explorer = scaling_explorer()
        try:
            css_width = int(explorer._image.width)
            assert picture_width(explorer) == PIXEL_RATIO * css_width  # the first picture is sharp
            explorer.controls["d_k"].value = 16
            # At once: the new values at the screen's resolution, shown at the same CSS width.
            assert picture_width(explorer) == css_width
            assert int(explorer._image.width) == css_width
            assert explorer.data["d_k"] == 16 and "d_k = 16" in explorer.data["caption"]
            quick = explorer.picture
            # A second move before the pause pushes the sharpening back: still quick. (Checked on the
            # timers, not by sleeping part of the pause: on a busy machine a short sleep can overrun it.)
            first = explorer._sharpen_later
            assert first is not None and not first.cancelled()
            explorer.controls["d_k"].value = 17
            assert first.cancelled() and explorer._sharpen_later.when() >= first.when()
            assert picture_width(explorer) == css_width and explorer.picture != quick
            # Once the controls are still, the same figure at DPI.
            await asyncio.sleep(SHARPEN_AFTER * 3)
            assert picture_width(explorer) == PIXEL_RATIO * css_width
            assert explorer.figure.dpi == DPI
            assert explorer.redraw_count == 3  # two moves, one computation each; sharpening recomputes nothing
        finally:
            explorer.close()

    asyncio.run(scenario())


def test_the_sharp_picture_after_a_move_is_the_one_a_fresh_explorer_draws():
    async def scenario():
        moved = heads_explorer()
        fresh = heads_explorer(num_heads=3)
        try:
            moved.controls["num_heads"].value = 3
            moved.sharpen()
            assert moved.figure.dpi == fresh.figure.dpi == DPI
            a = np.asarray(moved.figure.canvas.buffer_rgba())
            b = np.asarray(fresh.figure.canvas.buffer_rgba())
            assert a.shape == b.shape
            assert np.array_equal(a, b)
        finally:
            moved.close()
            fresh.close()

    asyncio.run(scenario())


def test_without_an_event_loop_a_move_is_sharp_at_once():
    explorer = scaling_explorer()
    try:
        explorer.controls["d_k"].value = 16
        assert picture_width(explorer) == PIXEL_RATIO * int(explorer._image.width)
    finally:
        explorer.close()


def test_the_static_picture_is_sharp_even_right_after_a_quick_move():
    async def scenario():
        explorer = scaling_explorer()
        try:
            explorer.controls["scaled"].value = False
            assert explorer.figure.dpi == CSS_DPI
            png = Image.open(io.BytesIO(explorer.static_png()))
            assert png.width == round(explorer.figure.get_size_inches()[0] * DPI)
            # ...and it showed the sharp picture in the widget too, with nothing left to do later.
            assert picture_width(explorer) == PIXEL_RATIO * int(explorer._image.width)
            assert explorer._sharpen_later is None
        finally:
            explorer.close()

    asyncio.run(scenario())


def test_close_cancels_a_pending_sharpening():
    async def scenario():
        explorer = scaling_explorer()
        explorer.controls["d_k"].value = 8
        pending = explorer._sharpen_later
        assert pending is not None
        explorer.close()
        assert pending.cancelled()
        await asyncio.sleep(SHARPEN_AFTER * 2)  # nothing runs on a closed explorer

    asyncio.run(scenario())


@pytest.mark.parametrize("dpi", [CSS_DPI, DPI])
def test_a_stamped_string_is_pixel_for_pixel_what_the_renderer_draws(dpi):
    prop = FontProperties(size=7)
    direct, stamped = RendererAgg(200, 120, dpi), RendererAgg(200, 120, dpi)
    stamper = explorer_module._StampedText(stamped)
    for color in [(0, 0, 0, 1), (1, 1, 1, 1), (0.2, 0.4, 0.8, 1)]:
        for text, (x, y) in [("0.25", (20, 30)), ("−∞", (90, 60)), ("key", (140, 100)), ("0.25", (60, 100))]:
            gcs = []
            for renderer in (direct, stamped):
                gc = renderer.new_gc()
                gc.set_foreground(color, isRGBA=True)
                gcs.append(gc)
            RendererAgg.draw_text(direct, gcs[0], x, y, text, prop, 0.0)
            stamper(gcs[1], x, y, text, prop, 0.0)
        a, b = np.asarray(direct.buffer_rgba()), np.asarray(stamped.buffer_rgba())
        assert a[..., 3].any()
        assert np.array_equal(a, b), color


def test_stamps_are_kept_per_string_colour_and_resolution_and_rotated_text_is_drawn_as_usual():
    explorer_module._STAMPS.clear()
    prop = FontProperties(size=8)
    renderer = RendererAgg(100, 100, CSS_DPI)
    stamper = explorer_module._StampedText(renderer)
    gc = renderer.new_gc()
    gc.set_foreground((0, 0, 0, 1), isRGBA=True)
    stamper(gc, 10, 50, "0.50", prop, 0.0)
    stamper(gc, 40, 50, "0.50", prop, 0.0)
    assert len(explorer_module._STAMPS) == 1
    gc.set_foreground((1, 1, 1, 1), isRGBA=True)
    stamper(gc, 10, 80, "0.50", prop, 0.0)
    stamper(gc, 10, 80, "0.75", prop, 0.0)
    assert len(explorer_module._STAMPS) == 3
    stamper(gc, 50, 50, "query", prop, 90.0)  # rotated: the renderer's own drawing, nothing kept
    assert len(explorer_module._STAMPS) == 3
    stamper(gc, 10, 10, " ", prop, 0.0)  # no ink: kept as nothing to draw
    assert explorer_module._STAMPS[(" ", prop, (1.0, 1.0, 1.0, 1.0), True, CSS_DPI)] is None


def test_the_training_scrub_draws_every_step_into_one_figure_and_keeps_each_steps_pass():
    explorer = training_explorer()
    try:
        figure, axes = explorer.figure, list(explorer.figure.axes)
        bars = explorer._current.artists["bars"]
        for step in explorer.checkpoints.steps:
            explorer.controls["step"].value = step
            # The bars show this step's scores, the shaded head is the drawn one.
            heights = [bar.get_height() for bar in bars[0]]
            assert np.allclose(heights, explorer.data["scores"]["previous_token"].reshape(-1))
        assert sorted(explorer._cache) == sorted(explorer.checkpoints.steps)
        kept = explorer._cache[explorer.checkpoints.steps[0]]
        explorer.controls["step"].value = explorer.checkpoints.steps[0]
        assert explorer._cache[explorer.checkpoints.steps[0]] is kept  # not computed again
        explorer.controls["head"].value = 2
        shade = explorer._current.artists["shade"]
        assert shade.get_x() == pytest.approx(2 - 0.45)
        explorer.controls["layer"].value = 1
        assert shade.get_x() == pytest.approx(explorer.checkpoints.config.num_heads + 2 - 0.45)
        # Nothing was rebuilt: the same figure and axes throughout.
        assert explorer.figure is figure and list(figure.axes) == axes
    finally:
        explorer.close()
