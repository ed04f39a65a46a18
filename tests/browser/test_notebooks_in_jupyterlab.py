"""Every lesson notebook in a real JupyterLab: every explorer's every control, by keyboard and mouse.

A JupyterLab server (``lab.running_lab``) serves a copy of ``notebooks/``; headless Chromium
opens each lesson notebook that shows an explorer, runs its cells up to its last explorer's (nbval runs
them all; the later ones train models or load the real one) and waits until they have run. Then, for every
explorer on the page and every control in it, as a learner would:

- a slider: focus its handle and press an arrow key, then drag the handle with the mouse to
  the other end of its track;
- toggle buttons: focus another button and press Space, then click another button;
- a checkbox: focus it and press Space, then click it.

After each action the control must show another value, and the explorer must send a new
picture (its image is replaced). A disabled control (the RoPE base while RoPE is off) is left
alone, but must say why it is off. Each explorer's image must be shown at its natural size
or smaller: never stretched beyond its own pixels. At the end, the captions on the page must
be the captions the kernel's explorers hold (the kernel received every move), and no cell,
console or page may have reported an error.

Latency (the tests marked ``latency``, a benchmark: ``make bench-browser`` runs them alone, on a
quiet machine; ``make test`` leaves them out): for each explorer, the median time from keydown in
the page to its caption changing, and to its new picture being decoded, over arrow-key moves of
its first slider; against a bare ``IntSlider`` whose callback only writes a caption, measured in
the same run. The table is printed at the end of the pytest report; it is measured, not asserted.
"""

from __future__ import annotations

import json
import re
import secrets
import shutil
from pathlib import Path

import nbformat
import pytest
from lab import LATENCY_ROWS, api, running_lab
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from mhsa_helpers.lessons import LESSONS
from mhsa_helpers.lessons.links import COLAB_BADGE

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = [Path(item.notebook) for item in LESSONS if item.explorer is not None]
BARE = "bare_slider.ipynb"
TIMEOUT_MS = 120_000
BADGE_STAND_IN = '<svg xmlns="http://www.w3.org/2000/svg" width="117" height="20"/>'
#: Keyboard moves timed per explorer (and for the bare slider).
LATENCY_MOVES = 8
#: How long an explorer's picture must stay put before the next action.
SETTLE_MS = 150

pytestmark = pytest.mark.browser


def bare_slider_notebook() -> nbformat.NotebookNode:
    """The reference for latency: a slider whose callback only writes its value into a caption."""
    code = (
        "import ipywidgets as widgets\n"
        "slider = widgets.IntSlider(value=5, min=0, max=10, description='bare', continuous_update=False)\n"
        "caption = widgets.HTML(value='value 5')\n"
        "slider.add_class('mhsa-bare-slider')\n"
        "caption.add_class('mhsa-bare-caption')\n"
        "slider.observe(lambda change: setattr(caption, 'value', f\"value {change['new']}\"), names='value')\n"
        "widgets.VBox([slider, caption])"
    )
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return notebook


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server serving a copy of the notebooks and the bare slider; yields (url, token, log)."""
    base = tmp_path_factory.mktemp("lab-notebooks")
    root = base / "root"
    shutil.copytree(ROOT / "notebooks", root, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    nbformat.write(bare_slider_notebook(), root / BARE)
    token = secrets.token_hex(24)
    with running_lab(root, base, token) as (url, log_path):
        yield url, token, log_path


# ------------------------------------------------------------------ opening and running a notebook


def last_explorer_cell(path: Path) -> int:
    """The index of the notebook's last cell whose stored output is a widget (its last explorer's)."""
    cells = nbformat.read(path, as_version=4).cells
    widgets = [
        index
        for index, cell in enumerate(cells)
        if cell.cell_type == "code"
        and any("application/vnd.jupyter.widget-view+json" in output.get("data", {}) for output in cell.outputs)
    ]
    assert widgets, f"{path.name}: no cell shows a widget"
    return widgets[-1]


class Session:
    """One notebook open in JupyterLab, its cells run; records console and page errors."""

    def __init__(self, browser, lab, name: str) -> None:
        self.url, self.token, self.log_path = lab
        self.errors: list[str] = []
        self.page = page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(TIMEOUT_MS)
        page.set_default_navigation_timeout(TIMEOUT_MS)
        page.on("console", lambda m: self.errors.append(f"console.{m.type}: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda exc: self.errors.append(f"pageerror: {exc}"))
        # The notebooks fetch nothing; their one outside request is the "Open in Colab" badge's
        # picture, which gets a stand-in here (there is no network). Any other one fails the test.
        self.outside: list[str] = []
        page.route(re.compile(r"^(?!http://127\.0\.0\.1[:/])"), self._stand_in)
        # A workspace of its own, so that JupyterLab does not reopen the notebooks of earlier tests.
        workspace = re.sub(r"\W", "-", name)
        page.goto(
            f"{self.url}/lab/workspaces/{workspace}/tree/{name}?token={self.token}", wait_until="domcontentloaded"
        )
        page.wait_for_function(
            "(path) => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;"
            " const k = w && w.context && w.context.path === path && w.sessionContext.session?.kernel;"
            " return !!k && k.connectionStatus === 'connected'; }",
            arg=name,
        )
        # The stored outputs and execution counts go first, so that the wait below sees this run.
        page.evaluate("() => window.jupyterapp.commands.execute('notebook:clear-all-cell-outputs')")
        page.wait_for_function(
            "() => window.jupyterapp.shell.currentWidget.content.widgets"
            ".every(c => c.model.type !== 'code' || c.model.executionCount === null)"
        )
        # Every cell up to the last explorer's, in order (the cells after it train models or load the real one:
        # nbval runs the whole notebook; here what matters is the explorers in the page). Not awaited: evaluate has
        # no timeout, the bounded wait below notices a hung cell.
        last = last_explorer_cell(ROOT / "notebooks" / name)
        page.evaluate(
            "(last) => { const w = window.jupyterapp.shell.currentWidget;"
            " if (last + 1 >= w.content.widgets.length) {"
            "   window.jupyterapp.commands.execute('notebook:run-all-cells'); return; }"
            " w.content.activeCellIndex = last + 1;"
            " window.jupyterapp.commands.execute('notebook:run-all-above'); }",
            last,
        )
        page.wait_for_function(
            "(last) => { const w = window.jupyterapp.shell.currentWidget;"
            " const cells = w.content.widgets.slice(0, last + 1).filter(c => c.model.type === 'code');"
            " return w.sessionContext.session?.kernel?.status === 'idle'"
            "   && cells.every(c => c.model.executionCount !== null); }",
            arg=last,
        )
        page.evaluate(WATCH_JS)

    def _stand_in(self, route) -> None:
        self.outside.append(route.request.url)
        if route.request.url == COLAB_BADGE:
            route.fulfill(status=200, content_type="image/svg+xml", body=BADGE_STAND_IN)
        else:
            route.abort()

    def kernel_output(self, code: str) -> str:
        """What ``code`` prints when run in the notebook's kernel (bounded by TIMEOUT_MS)."""
        return self.page.evaluate(KERNEL_JS, [code, TIMEOUT_MS])

    def close(self) -> None:
        self.page.close()
        for kernel in api(self.url, self.token, "/api/kernels") or []:
            api(self.url, self.token, f"/api/kernels/{kernel['id']}", method="DELETE", timeout=30)


KERNEL_JS = """
([code, timeout]) => new Promise((resolve, reject) => {
  const kernel = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
  const future = kernel.requestExecute({code, store_history: false});
  let out = '';
  future.onIOPub = msg => {
    if (msg.header.msg_type === 'stream') out += msg.content.text;
    if (msg.header.msg_type === 'error') reject(new Error(msg.content.evalue));
  };
  future.done.then(() => resolve(out), reject);
  setTimeout(() => reject(new Error('the kernel did not answer in time')), timeout);
})
"""

# Per explorer: how many redraws it has shown (a new picture or a new caption: a move that changes
# nothing drawn, e.g. more layers once the window already reaches every token, changes only the
# caption), and keydown-to-caption / keydown-to-picture times (the picture's time is taken once
# the new image is decoded, i.e. ready to paint).
WATCH_JS = """
() => {
  const state = window.__mhsa = {down: null, renders: [], caption: [], picture: []};
  document.addEventListener('keydown', () => { state.down = performance.now(); }, true);
  document.querySelectorAll('.mhsa-explorer').forEach((explorer, i) => {
    state.renders.push(0); state.caption.push([]); state.picture.push([]);
    const image = explorer.querySelector('.mhsa-explorer-figure');
    const caption = explorer.querySelector('.mhsa-explorer-caption');
    new MutationObserver(() => {
      state.renders[i] += 1;
      const down = state.down;
      if (down !== null) image.decode().then(() => state.picture[i].push(performance.now() - down), () => {});
    }).observe(image, {attributes: true, attributeFilter: ['src']});
    new MutationObserver(() => {
      state.renders[i] += 1;
      if (state.down !== null) { state.caption[i].push(performance.now() - state.down); state.down = null; }
    }).observe(caption, {subtree: true, childList: true, characterData: true});
  });
  const bare = document.querySelector('.mhsa-bare-caption');
  if (bare) {
    state.caption.push([]);
    const i = state.caption.length - 1;
    new MutationObserver(() => {
      if (state.down !== null) { state.caption[i].push(performance.now() - state.down); state.down = null; }
    }).observe(bare, {subtree: true, childList: true, characterData: true});
  }
}
"""

# ------------------------------------------------------------------ controls

# The state a control shows, and whether it is disabled, read from the page (ipywidgets 8:
# noUiSlider handles carry aria-valuenow; the selected toggle button has mod-active).
STATE_JS = """
(el) => {
  const handle = el.querySelector('.noUi-handle');
  // aria-valuenow is rounded (a log slider's 2.95 reads 3.0): the readout and the label tell apart.
  const shown = Array.from(el.parentElement.querySelectorAll('.widget-readout, .mhsa-readout'))
    .map(r => r.textContent).join('|');
  if (handle) return {kind: 'slider', position: handle.getAttribute('aria-valuenow'),
                      value: [handle.getAttribute('aria-valuetext'), shown].join('|'),
                      min: handle.getAttribute('aria-valuemin'), max: handle.getAttribute('aria-valuemax'),
                      disabled: el.querySelector('.noUi-target').hasAttribute('disabled')};
  const buttons = Array.from(el.querySelectorAll('button'));
  const active = buttons.findIndex(b => b.classList.contains('mod-active'));
  if (buttons.length) return {kind: 'buttons', value: String(active), count: buttons.length,
                              disabled: buttons.every(b => b.disabled)};
  const box = el.querySelector('input[type=checkbox]');
  if (box) return {kind: 'checkbox', value: String(box.checked), disabled: box.disabled};
  return {kind: 'unknown', value: null, disabled: false};
}
"""


def renders(page, index: int) -> int:
    return page.evaluate("(i) => window.__mhsa.renders[i]", index)


def act(page, explorer: int, control, action, how: str) -> None:
    """Do ``action`` on ``control``; the control must then show another value and the explorer
    must redraw (a new picture or caption). Returns once the kernel is idle and nothing was
    redrawn for SETTLE_MS, so that nothing from this action is mistaken for the next one's."""
    before, count = control.evaluate(STATE_JS), renders(page, explorer)
    action()
    try:
        page.wait_for_function(
            f"([el, i, n, old]) => window.__mhsa.renders[i] > n && ({STATE_JS})(el).value !== old",
            arg=[control.element_handle(), explorer, count, before["value"]],
        )
    except PlaywrightTimeout:
        after = control.evaluate(STATE_JS)["value"]
        pytest.fail(
            f"{control.get_attribute('class')}: after {how}, shown {before['value']} -> {after}, "
            f"redraws {count} -> {renders(page, explorer)}"
        )
    settle(page, explorer)


def settle(page, explorer: int) -> None:
    """Wait for the kernel to be idle and the explorer's picture to stay put for SETTLE_MS."""
    page.wait_for_function(
        "() => window.jupyterapp.shell.currentWidget.sessionContext.session?.kernel?.status === 'idle'"
    )
    while True:
        count = renders(page, explorer)
        page.wait_for_timeout(SETTLE_MS)
        if renders(page, explorer) == count:
            return


def drive(page, explorer: int, control) -> str:
    """Move one control by keyboard and by mouse; returns its kind."""
    state = control.evaluate(STATE_JS)
    kind = state["kind"]
    assert kind != "unknown", f"{control.get_attribute('class')}: a control the test cannot drive"
    if state["disabled"]:
        return kind
    if kind == "slider":
        if state["min"] == state["max"]:
            return kind
        press(page, explorer, control, "ArrowLeft" if state["position"] == state["max"] else "ArrowRight")
        state = control.evaluate(STATE_JS)
        upper = float(state["position"]) - float(state["min"]) > (float(state["max"]) - float(state["min"])) / 2
        act(page, explorer, control, lambda: drag(page, control, -0.05 if upper else 1.05), "dragging")
    elif kind == "buttons":
        buttons = control.locator("button")

        def other():
            """The button after the selected one (the first after the last)."""
            return buttons.nth((int(control.evaluate(STATE_JS)["value"]) + 1) % state["count"])

        act(page, explorer, control, lambda: (other().focus(), page.keyboard.press("Space")), "Space")
        act(page, explorer, control, lambda: other().click(), "a click")
    else:
        box = control.locator("input[type=checkbox]")
        act(page, explorer, control, lambda: (box.focus(), page.keyboard.press("Space")), "Space")
        act(page, explorer, control, lambda: box.click(), "a click")
    return kind


def drag(page, control, fraction: float) -> None:
    """Press the mouse on the handle, move along the track to ``fraction`` of its width, release."""
    box = control.locator(".noUi-handle").bounding_box()
    bar = control.locator(".noUi-target").bounding_box()
    assert box and bar, "slider not laid out"
    start = (box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.mouse.move(*start)
    page.mouse.down()
    page.mouse.move(bar["x"] + fraction * bar["width"], start[1], steps=12)
    page.mouse.up()


def image_scale(page, explorer: int) -> dict:
    """The explorer image's own pixels against the CSS pixels it is shown at, once the browser has decoded
    it (a new picture's size is 0 until then: on a busy machine the question can come first). A decode is
    abandoned when the explorer swaps the picture meanwhile (the sharp one follows the quick one): wait for the
    next one then, up to two seconds."""
    return (
        page.locator(".mhsa-explorer")
        .nth(explorer)
        .locator(".mhsa-explorer-figure")
        .evaluate(
            "async (img) => { for (let i = 0; i < 40 && !(img.complete && img.naturalWidth); i++) {"
            " await img.decode().catch(() => new Promise((done) => setTimeout(done, 50))); }"
            " return {natural: img.naturalWidth, shown: img.getBoundingClientRect().width,"
            " ratio: window.devicePixelRatio}; }"
        )
    )


def press(page, explorer: int, control, key: str) -> None:
    """Focus a slider's handle and press ``key``; wait for the new picture."""
    handle = control.locator(".noUi-handle")
    act(page, explorer, control, lambda: (handle.focus(), page.keyboard.press(key)), f"pressing {key}")


def time_keyboard(page, explorer: int, control) -> tuple[list[float], list[float]]:
    """LATENCY_MOVES arrow-key moves of a slider back and forth, each waiting for its picture;
    returns the keydown-to-caption and keydown-to-picture times (ms) of these moves."""
    samples = "(i) => [window.__mhsa.caption[i].length, window.__mhsa.picture[i].length]"
    captions, pictures = page.evaluate(samples, explorer)
    state = control.evaluate(STATE_JS)
    keys = ["ArrowLeft", "ArrowRight"] if state["position"] == state["max"] else ["ArrowRight", "ArrowLeft"]
    for move in range(LATENCY_MOVES):
        press(page, explorer, control, keys[move % 2])
    page.wait_for_function(f"(i) => window.__mhsa.picture[i].length >= {pictures + LATENCY_MOVES}", arg=explorer)
    return (
        page.evaluate("(i) => window.__mhsa.caption[i]", explorer)[captions:],
        page.evaluate("(i) => window.__mhsa.picture[i]", explorer)[pictures:],
    )


# ------------------------------------------------------------------ the tests


@pytest.mark.latency
def test_a_bare_slider_for_reference(lab, browser, request):
    session = Session(browser, lab, BARE)
    page = session.page
    try:
        handle = page.locator(".mhsa-bare-slider .noUi-handle")
        caption = page.locator(".mhsa-bare-caption")
        for move in range(LATENCY_MOVES):
            before = caption.inner_text()
            handle.focus()
            page.keyboard.press("ArrowRight" if move % 2 == 0 else "ArrowLeft")
            page.wait_for_function(
                "(old) => document.querySelector('.mhsa-bare-caption').innerText !== old", arg=before
            )
        samples = page.evaluate("() => window.__mhsa.caption[window.__mhsa.caption.length - 1]")
        assert len(samples) == LATENCY_MOVES, samples
        request.config.stash.setdefault(LATENCY_ROWS, []).insert(0, ("bare IntSlider", "value", samples, []))
    finally:
        session.close()
    assert not session.errors, session.errors
    assert not session.outside, session.outside


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_explorer_control_answers_keyboard_and_mouse(lab, browser, notebook):
    session = Session(browser, lab, str(notebook.relative_to("notebooks")))
    page = session.page
    try:
        explorers = page.locator(".mhsa-explorer")
        count = explorers.count()
        assert count >= 1, f"{notebook}: no explorer on the page"
        # A live kernel shows each explorer once: as the widget, not also as its stored picture.
        assert page.locator(".jp-OutputArea-output:has(.mhsa-explorer) img").count() == count
        # No editable text but numbers: a selection slider shows a read-only label, not
        # ipywidgets' readout (editable, but deaf to what is typed).
        for readout in page.locator(".mhsa-explorer .widget-readout[contenteditable=true]").all():
            if readout.is_visible():
                assert re.fullmatch(r"[-\d.,e+]+", readout.inner_text().strip()), readout.inner_text()
        for index in range(count):
            explorer = explorers.nth(index)
            explorer.scroll_into_view_if_needed()
            title = explorer.locator(".widget-html").first.inner_text()
            controls = explorer.locator("[class*='mhsa-control-']").all()
            assert controls, f"{title}: no control"
            for control in controls:
                state = control.evaluate(STATE_JS)
                if state["disabled"]:
                    # A disabled control says why it is off (in its description or tooltip).
                    assert "off" in control.inner_text(), f"{title}: a control is disabled without saying why"
                drive(page, index, control)
                scale = image_scale(page, index)
                assert scale["natural"] >= scale["shown"] * scale["ratio"] - 1, f"{title}: picture stretched {scale}"
        # The kernel received every move: the page shows the captions the kernel's explorers hold.
        shown = sorted(page.locator(".mhsa-explorer-caption").all_inner_texts())
        held = json.loads(
            session.kernel_output(
                "import json\nfrom mhsa_helpers.teaching.explorer import open_explorers\n"
                "print(json.dumps([e.data['caption'] for e in open_explorers()]))"
            )
        )
        for caption in shown:
            assert caption.strip() in [c.strip() for c in held], f"the page shows {caption!r}, the kernel {held}"
        assert page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.error']").count() == 0
    finally:
        session.close()
    assert not session.errors, "browser console errors:\n" + "\n".join(session.errors)
    assert set(session.outside) <= {COLAB_BADGE}, f"requests beyond this machine: {session.outside}"


@pytest.mark.latency
@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_keypress_to_picture_latency(lab, browser, notebook, request):
    """Times the first enabled slider of every explorer (a row of the latency table each)."""
    session = Session(browser, lab, str(notebook.relative_to("notebooks")))
    page = session.page
    try:
        explorers = page.locator(".mhsa-explorer")
        for index in range(explorers.count()):
            explorer = explorers.nth(index)
            explorer.scroll_into_view_if_needed()
            title = explorer.locator(".widget-html").first.inner_text()
            sliders = [
                control
                for control in explorer.locator("[class*='mhsa-control-']").all()
                if (state := control.evaluate(STATE_JS))["kind"] == "slider" and not state["disabled"]
            ]
            if sliders:
                caption, picture = time_keyboard(page, index, sliders[0])
                control_name = re.search(r"mhsa-control-([\w-]+)", sliders[0].get_attribute("class")).group(1)
                request.config.stash.setdefault(LATENCY_ROWS, []).append((title, control_name, caption, picture))
    finally:
        session.close()
    assert not session.errors, "browser console errors:\n" + "\n".join(session.errors)
