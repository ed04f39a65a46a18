"""The explorers in a real JupyterLab, driven by headless Chromium through Playwright.

A JupyterLab server is started on 127.0.0.1 (free port, random token, temporary
root/config/data/runtime folders, this Python's ipykernel as the ``python3`` kernel)
with a copy of ``explorers_fixture.ipynb``. Chromium (Debian's, at /usr/bin/chromium:
the test fails, not skips, without it) opens the notebook and runs every cell; then the
heads explorer's "heads" and "seq_len" sliders are moved with the keyboard (focus the
handle, arrow keys) and by dragging the handle with the mouse, and after each move the
caption the kernel renders ("4 heads, seq 6 · ...") and the figure must show the new
configuration. Any browser console error or page error fails the test.

Keypress-to-render latency (keydown in the page to the caption's change in the page,
median of 10+ moves) is printed, not asserted; run with ``-s`` to see it.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
FIXTURE = Path(__file__).with_name("explorers_fixture.ipynb")
SERVER_TIMEOUT = 90
RENDER_TIMEOUT_MS = 60_000

pytestmark = pytest.mark.browser


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab_server(tmp_path_factory):
    """A JupyterLab server of this Python; yields (base_url, token, log path)."""
    base = tmp_path_factory.mktemp("lab")
    root, log_path = base / "root", base / "server.log"
    root.mkdir()
    shutil.copy(FIXTURE, root / FIXTURE.name)
    env = dict(os.environ)
    env.update(
        JUPYTER_CONFIG_DIR=str(base / "config"),
        JUPYTER_DATA_DIR=str(base / "data"),
        JUPYTER_RUNTIME_DIR=str(base / "runtime"),
        JUPYTER_PATH=str(base / "data"),
        JUPYTERLAB_SETTINGS_DIR=str(base / "settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(base / "workspaces"),
        PYTHONHASHSEED="0",
    )
    env.pop("PYTHONPATH", None)
    # The kernel is this very Python (the analogue of nbval's --nbval-current-env):
    # a python3 kernelspec in the private data folder, which is searched first.
    subprocess.run(
        [sys.executable, "-m", "ipykernel", "install", "--user", "--name", "python3"],
        env=env, check=True, capture_output=True,
    )
    port, token = free_port(), secrets.token_hex(24)
    command = [
        sys.executable, "-m", "jupyter", "lab",
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        # Nothing that would reach out to the internet while the test runs.
        "--LabApp.news_url=None",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        # window.jupyterapp, to run "Run All Cells" without hunting menus.
        "--LabApp.expose_app_in_browser=True",
    ]
    if os.geteuid() == 0:  # CI containers run as root; the server refuses that by default
        command.append("--allow-root")
    log = open(log_path, "w")
    server = subprocess.Popen(command, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + SERVER_TIMEOUT
        while True:
            if server.poll() is not None:
                pytest.fail(f"jupyter lab exited with {server.returncode}:\n{log_path.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"jupyter lab did not answer within {SERVER_TIMEOUT} s:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.5)
        yield url, token, log_path
    finally:
        # The server and its kernels share the session (process group) started above.
        try:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(server.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            server.wait(timeout=10)
        log.close()


@pytest.fixture(scope="module")
def browser():
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (apt-get install chromium); .ci/run does")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield chromium
        finally:
            chromium.close()


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


LATENCY_JS = """
() => {
  // Keydown time (in the page) and the time the caption next changes: the render latency
  // as the learner sees it, without Playwright's own round trips.
  window.__mhsa = {down: null, samples: []};
  document.addEventListener('keydown', () => { window.__mhsa.down = performance.now(); }, true);
  const caption = document.querySelector('.mhsa-explorer-caption');
  new MutationObserver(() => {
    if (window.__mhsa.down !== null) {
      window.__mhsa.samples.push(performance.now() - window.__mhsa.down);
      window.__mhsa.down = null;
    }
  }).observe(caption, {subtree: true, childList: true, characterData: true});
}
"""


# ------------------------------------------------------------------ the test


def test_explorers_follow_keyboard_and_mouse_in_jupyterlab(lab_server, browser):
    url, token, log_path = lab_server
    errors: list[str] = []
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    # No allow-list: any console error or uncaught page error fails the test.
    page.on("console", lambda msg: errors.append(f"console.{msg.type}: {msg.text}") if msg.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(f"pageerror: {exc}"))
    try:
        page.goto(f"{url}/lab/tree/{FIXTURE.name}?token={token}", wait_until="domcontentloaded")
        page.wait_for_selector(".jp-Notebook", timeout=RENDER_TIMEOUT_MS)
        page.wait_for_function(
            "() => window.jupyterapp && window.jupyterapp.shell.currentWidget"
            " && window.jupyterapp.shell.currentWidget.sessionContext"
            " && window.jupyterapp.shell.currentWidget.sessionContext.session"
            " && window.jupyterapp.shell.currentWidget.sessionContext.session.kernel"
            " && window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.connectionStatus === 'connected'",
            timeout=RENDER_TIMEOUT_MS,
        )
        page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
        first = wait_caption(page, r"^2 heads, seq 6 ")
        page.wait_for_selector(".mhsa-explorer >> nth=1", timeout=RENDER_TIMEOUT_MS)
        wait_caption(page, r"^seq 6 · causal mask · neg_inf", explorer_index=1)
        assert page.locator(".mhsa-explorer").count() == 2
        assert "2 heatmaps" in first
        page.evaluate(LATENCY_JS)

        # --- keyboard: focus the heads handle, ArrowRight = next divisor of 12 (3), ArrowLeft back.
        src = figure_src(page)
        handle(page, "num-heads").focus()
        page.keyboard.press("ArrowRight")
        text = wait_caption(page, r"^3 heads, seq 6 ")
        assert "3 heatmaps" in text
        assert figure_src(page) != src, "the figure was not replaced"
        page.keyboard.press("ArrowRight")
        assert "4 heatmaps" in wait_caption(page, r"^4 heads, seq 6 ")

        # --- keyboard on seq_len: ArrowLeft 6 -> 5.
        handle(page, "seq-len").focus()
        page.keyboard.press("ArrowLeft")
        wait_caption(page, r"^4 heads, seq 5 ")

        # --- drag: heads handle to the last option (12), then back to the first (1).
        drag_to_fraction(page, "num-heads", 1.05)
        assert "12 heatmaps" in wait_caption(page, r"^12 heads, seq 5 ")
        drag_to_fraction(page, "num-heads", -0.05)
        assert "1 heatmaps" in wait_caption(page, r"^1 heads, seq 5 ")
        # --- drag: seq_len (1..8) to its middle, 4 or 5 depending on rounding; then to the end.
        drag_to_fraction(page, "seq-len", 3 / 7)
        text = wait_caption(page, r"^1 heads, seq 4 ")
        drag_to_fraction(page, "seq-len", 1.05)
        wait_caption(page, r"^1 heads, seq 8 ")
        # Back to 2 heads with the keyboard for the timing runs below.
        handle(page, "num-heads").focus()
        page.keyboard.press("ArrowRight")
        wait_caption(page, r"^2 heads, seq 8 ")

        # --- latency: 10 keyboard moves of each slider, each waiting for its render.
        page.evaluate("() => { window.__mhsa.samples = []; }")
        moves = [("seq-len", "ArrowLeft", r"^2 heads, seq 7 "), ("seq-len", "ArrowRight", r"^2 heads, seq 8 ")] * 5
        moves += [("num-heads", "ArrowRight", r"^3 heads, seq 8 "), ("num-heads", "ArrowLeft", r"^2 heads, seq 8 ")] * 5
        for control, key, expected in moves:
            handle(page, control).focus()
            page.keyboard.press(key)
            wait_caption(page, expected)
        samples = page.evaluate("() => window.__mhsa.samples")
        assert len(samples) >= 20, samples
        seq_samples, head_samples = samples[:10], samples[10:20]
        print(
            "\nbrowser keypress-to-render latency (JupyterLab, headless Chromium), median of 10 moves each:\n"
            f"  heads_explorer seq_len slider : {statistics.median(seq_samples):7.1f} ms"
            f"  (min {min(seq_samples):.1f}, max {max(seq_samples):.1f})\n"
            f"  heads_explorer heads slider   : {statistics.median(head_samples):7.1f} ms"
            f"  (min {min(head_samples):.1f}, max {max(head_samples):.1f})\n"
            f"  all {len(samples)} moves        : {statistics.median(samples):7.1f} ms"
        )
        # The other explorer still answers (its own kernel-side state is independent).
        assert re.match(r"^seq 6 · causal mask", caption_text(page, 1))
        # No cell (nor widget callback) wrote an error or a traceback into the notebook.
        assert page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']").count() == 0
        assert page.locator(".jp-RenderedText[data-mime-type='application/vnd.jupyter.error']").count() == 0
    finally:
        page.close()
        server_log = log_path.read_text()
    kernel_errors = [line for line in server_log.splitlines() if "Traceback" in line]
    assert not kernel_errors, server_log[-3000:]
    assert not errors, "browser console errors:\n" + "\n".join(errors)
