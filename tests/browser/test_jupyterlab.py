"""The explorers in a real JupyterLab, driven by headless Chromium through Playwright.

A JupyterLab server is started on 127.0.0.1 (free port, random token, temporary
root/config/data/runtime folders, this Python's ipykernel as the ``python3`` kernel)
with a copy of ``explorers_fixture.ipynb``; if another process takes the port first, it
is started again on a new one. Chromium (the one ``discovery.find_chromium`` finds: skipped
with a loud reason without one, failed under CI) opens the notebook and runs every cell; then the
heads explorer's "heads" and "seq_len" sliders are moved with the keyboard (focus the
handle, arrow keys) and by dragging the handle with the mouse, and after each move the
caption the kernel renders ("4 heads, seq 6 · ...") must show the new configuration and
the figure's image must have been replaced. Any browser console error or page error
fails the test. Every wait is bounded (a hung cell fails the test, it does not hang it).

Latency is measured by ``test_notebooks_in_jupyterlab.py`` (its table ends the report), for every
explorer against a bare slider of the same run.
"""

from __future__ import annotations

import re
import secrets
import shutil
import socket
from contextlib import contextmanager
from pathlib import Path

import pytest
from lab import api, free_port, lab_environment, running_lab, start_lab, stop_lab

FIXTURE = Path(__file__).with_name("explorers_fixture.ipynb")
#: Every ordering exercise, arranged with the keyboard and the mouse by the last test.
ORDERING_FIXTURE = Path(__file__).with_name("ordering_fixture.ipynb")
#: The fixture's last cell shows every registered explorer after the two it drives.
RENDER_TIMEOUT_MS = 60_000

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def lab_server(tmp_path_factory):
    """A JupyterLab server of this Python serving a copy of the fixture; yields (base_url, token, log path)."""
    base = tmp_path_factory.mktemp("lab")
    root = base / "root"
    root.mkdir()
    shutil.copy(FIXTURE, root / FIXTURE.name)
    shutil.copy(ORDERING_FIXTURE, root / ORDERING_FIXTURE.name)
    token = secrets.token_hex(24)
    with running_lab(root, base, token) as (url, log_path):
        yield url, token, log_path


def test_server_start_moves_to_a_new_port_when_its_port_is_taken(tmp_path):
    base, root = tmp_path, tmp_path / "root"
    root.mkdir()
    env = lab_environment(base)
    token = secrets.token_hex(24)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        taken_port = taken.getsockname()[1]
        server, url, log_path, log = start_lab(root, base, env, token, iter([taken_port, free_port()]))
        try:
            assert not url.endswith(f":{taken_port}")
            assert f"port {taken_port} is not available" in (base / "server-0.log").read_text()
            assert log_path.name == "server-1.log"
            assert api(url, token, "/api/kernels") == []
        finally:
            stop_lab(server, url, token)
            log.close()
    assert server.returncode is not None


# ------------------------------------------------------------------ page helpers

CAPTION = ".mhsa-explorer-caption"


def caption_text(page, explorer_index: int = 0) -> str:
    return page.locator(CAPTION).nth(explorer_index).inner_text()


def wait_caption(page, pattern: str, explorer_index: int = 0, timeout: int = RENDER_TIMEOUT_MS) -> str:
    """Wait until the explorer's caption matches ``pattern`` (a regex); return it."""
    page.wait_for_function(
        "([sel, i, pattern]) => { const el = document.querySelectorAll(sel)[i];"
        " return !!el && new RegExp(pattern).test(el.innerText); }",
        arg=[CAPTION, explorer_index, pattern],
        timeout=timeout,
    )
    return caption_text(page, explorer_index)


def handle(page, control: str):
    """The slider handle of one control of the heads explorer (ipywidgets 8: noUiSlider;
    7.x: jQuery UI)."""
    root = page.locator(".mhsa-explorer").first.locator(f".mhsa-control-{control}")
    return root.locator(".noUi-handle, .ui-slider-handle").first


def track(page, control: str):
    root = page.locator(".mhsa-explorer").first.locator(f".mhsa-control-{control}")
    return root.locator(".noUi-target, .ui-slider").first


def figure_src(page, explorer_index: int = 0) -> str:
    return page.locator(".mhsa-explorer-figure").nth(explorer_index).get_attribute("src") or ""


def wait_render(page, pattern: str, old_src: str, explorer_index: int = 0) -> str:
    """Wait until the caption matches ``pattern`` and the figure's image is no longer
    ``old_src`` (each redraw sends a new PNG, which the page shows under a new src)."""
    text = wait_caption(page, pattern, explorer_index)
    page.wait_for_function(
        "([i, old]) => { const el = document.querySelectorAll('.mhsa-explorer-figure')[i];"
        " return !!el && !!el.getAttribute('src') && el.getAttribute('src') !== old; }",
        arg=[explorer_index, old_src],
        timeout=RENDER_TIMEOUT_MS,
    )
    return text


def press(page, control: str, key: str, pattern: str) -> str:
    """Once the kernel is idle, focus the control's slider handle, press ``key``, wait for the caption and a new
    figure. (A key pressed while the kernel still answers the last move can land on a handle being redrawn, and
    be lost: on a loaded machine the next caption then never comes.)"""
    page.wait_for_function(
        "() => window.jupyterapp.shell.currentWidget.sessionContext.session?.kernel?.status === 'idle'",
        timeout=RENDER_TIMEOUT_MS,
    )
    src = figure_src(page)
    handle(page, control).focus()
    page.keyboard.press(key)
    return wait_render(page, pattern, src)


def drag_to_fraction(page, control: str, fraction: float) -> None:
    """Press the mouse on the handle, move along the track to ``fraction`` of its width, release."""
    box = handle(page, control).bounding_box()
    bar = track(page, control).bounding_box()
    assert box and bar, f"{control} slider not laid out"
    start = (box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    end_x = bar["x"] + fraction * bar["width"]
    page.mouse.move(*start)
    page.mouse.down()
    page.mouse.move(end_x, start[1], steps=12)
    page.mouse.up()


# ------------------------------------------------------------------ the test


def open_and_run(page, url: str, token: str, name: str, errors: list[str]) -> None:
    """Open notebook ``name`` in JupyterLab with bounded waits, record console and page errors in ``errors``, and
    start running every cell."""
    # Bounds every locator action and navigation (page.evaluate has none: it is only given
    # expressions that return at once).
    page.set_default_timeout(RENDER_TIMEOUT_MS)
    page.set_default_navigation_timeout(RENDER_TIMEOUT_MS)
    # No allow-list: any console error or uncaught page error fails the test.
    page.on("console", lambda msg: errors.append(f"console.{msg.type}: {msg.text}") if msg.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(f"pageerror: {exc}"))
    # `reset`: a fresh workspace, so that the notebook a test opened before is not restored beside this one.
    page.goto(f"{url}/lab/tree/{name}?token={token}&reset", wait_until="domcontentloaded", timeout=RENDER_TIMEOUT_MS)
    page.wait_for_selector(".jp-Notebook", timeout=RENDER_TIMEOUT_MS)
    page.wait_for_function(
        "() => window.jupyterapp && window.jupyterapp.shell.currentWidget"
        " && window.jupyterapp.shell.currentWidget.sessionContext"
        " && window.jupyterapp.shell.currentWidget.sessionContext.session"
        " && window.jupyterapp.shell.currentWidget.sessionContext.session.kernel"
        " && window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.connectionStatus === 'connected'",
        timeout=RENDER_TIMEOUT_MS,
    )
    # Start "Run All Cells" without returning its promise: evaluate would wait for it with
    # no timeout, so a hung cell would hang the test; the bounded waits below notice it.
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")


@contextmanager
def lab_page(browser, lab_server, name: str):
    """A page with notebook ``name`` open and its cells started; after the test's moves, no cell (nor widget
    callback) may have written an error into the notebook, the kernel's log a traceback, or the browser an error."""
    url, token, log_path = lab_server
    errors: list[str] = []
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        open_and_run(page, url, token, name, errors)
        yield page
        assert page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']").count() == 0
        assert page.locator(".jp-RenderedText[data-mime-type='application/vnd.jupyter.error']").count() == 0
    finally:
        page.close()
        server_log = log_path.read_text()
    kernel_errors = [line for line in server_log.splitlines() if "Traceback" in line]
    assert not kernel_errors, server_log[-3000:]
    assert not errors, "browser console errors:\n" + "\n".join(errors)


def test_explorers_follow_keyboard_and_mouse_in_jupyterlab(lab_server, browser):
    with lab_page(browser, lab_server, FIXTURE.name) as page:
        first = wait_caption(page, r"^2 heads, seq 6 ")
        page.wait_for_selector(".mhsa-explorer >> nth=1", timeout=RENDER_TIMEOUT_MS)
        wait_caption(page, r"^seq 6 · causal mask · neg_inf", explorer_index=1)
        assert page.locator(".mhsa-explorer").count() == 2
        assert "2 heatmaps" in first

        # --- keyboard: focus the heads handle; ArrowRight = next divisor of 12: 2 -> 3 -> 4.
        assert "3 heatmaps" in press(page, "num-heads", "ArrowRight", r"^3 heads, seq 6 ")
        assert "4 heatmaps" in press(page, "num-heads", "ArrowRight", r"^4 heads, seq 6 ")

        # --- keyboard on seq_len: ArrowLeft 6 -> 5.
        press(page, "seq-len", "ArrowLeft", r"^4 heads, seq 5 ")

        # --- drag: heads handle to the last option (12), then back to the first (1).
        src = figure_src(page)
        drag_to_fraction(page, "num-heads", 1.05)
        assert "12 heatmaps" in wait_render(page, r"^12 heads, seq 5 ", src)
        src = figure_src(page)
        drag_to_fraction(page, "num-heads", -0.05)
        assert "1 heatmaps" in wait_render(page, r"^1 heads, seq 5 ", src)
        # --- drag: seq_len (1..8, 7 steps) to 3/7 of the track, i.e. exactly 1 + 3 = 4 (half a
        # step from where rounding would give 3 or 5); then past the end, 8.
        src = figure_src(page)
        drag_to_fraction(page, "seq-len", 3 / 7)
        wait_render(page, r"^1 heads, seq 4 ", src)
        src = figure_src(page)
        drag_to_fraction(page, "seq-len", 1.05)
        wait_render(page, r"^1 heads, seq 8 ", src)
        # The other explorer still answers (its own kernel-side state is independent).
        assert re.match(r"^seq 6 · causal mask", caption_text(page, 1))


# ------------------------------------------------------------------ the ordering exercises

ORDER = ".mhsa-order-exercise"


def shown_order(exercise) -> list[str]:
    """The labels in the order the rows show them (each row reads "B   q, k, v = ...")."""
    return [text.strip()[0] for text in exercise.locator(".mhsa-order-line").all_inner_texts()]


def wait_order(page, index: int, order: list[str]) -> None:
    """Wait until exercise ``index``'s "Your order" line, which the kernel writes after a move, shows ``order``."""
    page.wait_for_function(
        "([sel, i, text]) => { const el = document.querySelectorAll(sel)[i];"
        " return !!el && el.innerText.includes(text); }",
        arg=[f"{ORDER} .mhsa-order-answer", index, repr(order)],
        timeout=RENDER_TIMEOUT_MS,
    )


def wait_feedback(page, index: int, start: str) -> str:
    page.wait_for_function(
        "([sel, i, start]) => { const el = document.querySelectorAll(sel)[i];"
        " return !!el && el.innerText.startsWith(start); }",
        arg=[f"{ORDER} .mhsa-order-feedback", index, start],
        timeout=RENDER_TIMEOUT_MS,
    )
    return page.locator(f"{ORDER} .mhsa-order-feedback").nth(index).inner_text()


def arrange_with_the_keyboard(page, index: int, target: list[str]) -> None:
    """Put exercise ``index``'s lines in ``target`` order with keys only: focus the "↑" of the line's row, Enter;
    the line is now one row up, whose "↑" is two Shift+Tabs back (its "↓", then its "↑"); Enter again."""
    exercise = page.locator(ORDER).nth(index)
    for place, label in enumerate(target):
        order = shown_order(exercise)
        row = order.index(label)
        if row == place:
            continue
        exercise.locator(".mhsa-order-row").nth(row).get_by_role("button", name="↑").focus()
        for step in range(row - place):
            if step:
                page.keyboard.press("Shift+Tab")
                page.keyboard.press("Shift+Tab")
            order.insert(row - step - 1, order.pop(row - step))
            page.keyboard.press("Enter")
            wait_order(page, index, order)
    assert shown_order(exercise) == target


def test_ordering_exercises_are_arranged_and_checked_with_keyboard_and_mouse_in_jupyterlab(lab_server, browser):
    """Each ordering exercise: checked as shown (wrong), then arranged into a right order with the keyboard alone
    and checked with Enter; one line is moved by the mouse, and the hint asked for by a click."""
    from mhsa_helpers.lessons.attention_at_scale.exercises import ONLINE_ORDER_PUZZLE
    from mhsa_helpers.lessons.causal_mhsa_with_rope.exercises import DECODING_PUZZLE
    from mhsa_helpers.lessons.multi_head_attention.exercises import RECIPE_PUZZLE

    with lab_page(browser, lab_server, ORDERING_FIXTURE.name) as page:
        page.wait_for_selector(f"{ORDER} >> nth=2", timeout=RENDER_TIMEOUT_MS)
        for index, puzzle in enumerate((ONLINE_ORDER_PUZZLE, RECIPE_PUZZLE, DECODING_PUZZLE)):
            exercise = page.locator(ORDER).nth(index)
            assert shown_order(exercise) == list(puzzle.lines)
            # The mouse: click the check button on the shuffled order, then the hint.
            exercise.get_by_role("button", name="Check").click()
            assert "not yet" in wait_feedback(page, index, f"[{puzzle.exercise}] not yet")
            arrange_with_the_keyboard(page, index, list(puzzle.solution))
            exercise.get_by_role("button", name="Check").focus()
            page.keyboard.press("Enter")
            assert "recipe's result on all 3 inputs" in wait_feedback(page, index, f"[{puzzle.exercise}] correct")
        # The mouse moves a line: the online update's last line (the maximum moves on) to the second place, before
        # the rescale. The shuffled order checked first had the same mis-ordering, so it is named at once; the
        # Reveal button shows its fix.
        exercise = page.locator(ORDER).nth(0)
        for moves in range(1, 5):
            exercise.locator(".mhsa-order-row").nth(6 - moves).get_by_role("button", name="↑").click()
            wait_order(page, 0, _moved_up(moves))
        exercise.get_by_role("button", name="Check").click()
        named = wait_feedback(page, 0, "[online_order] not yet: this is 'the maximum moves before the rescale'")
        assert "line B (`running_max = new_max`) comes before line F" in named
        exercise.get_by_role("button", name="Reveal").click()
        wait_feedback(page, 0, "[online_order] the fix for 'the maximum moves before the rescale': Compute")


def _moved_up(places: int) -> list[str]:
    """The online update's solution with its last line, B, moved up ``places`` places."""
    order = ["C", "F", "D", "A", "E"]
    return [*order[: 5 - places], "B", *order[5 - places :]]
