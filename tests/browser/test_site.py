"""The website (``make site``) built from the executed notebooks, opened in headless Chromium.

The site is built once into a temporary folder with the same command as ``make site``
(``sphinx-build -W --keep-going -E -b html -c book -d <doctrees> . <out>``: any Sphinx
warning fails it), then served by a local HTTP server on 127.0.0.1 and opened by Chromium
(found by ``discovery.find_chromium`` and launched by the ``browser`` fixture of conftest.py: skipped with a
loud reason without one, failed under CI).

Every page of the registry's notebooks (lessons and solutions) must be there; on each, every
image must load, every formula must be typeset by the site's own MathJax, no console error or
page error may occur, and the "Open in Colab" links must be the notebook's own badge link.
Every request any page makes is recorded: all must go to the local server (a font, a CDN or
an analytics script from another host fails the test). Every explorer moves without a kernel: each of its
controls, by keyboard and by mouse, on a wide and on a phone-sized window, shows the picture and caption
of the setting it moved to. The navigation lists the lessons, then
their solutions, in the registry's order, and the search page finds a lesson by a word in it.

Latency (the tests marked ``latency``, a benchmark that ``make bench-browser`` runs; not ``make test``): on each
page, a bare range input put beside the first explorer, then each explorer's first slider, are moved by the
arrow keys; each move is timed from the key's event to the second animation frame after it (the frame that
shows the move has then been produced), and the picture shown in that frame must be loaded.
"""

from __future__ import annotations

import functools
import http.server
import itertools
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import ClassVar

import pytest
from lab import SITE_LATENCY_ROWS

from mhsa_helpers.lessons import LESSONS
from mhsa_helpers.teaching.site_explorers import explorer_cells

ROOT = Path(__file__).resolve().parents[2]
#: Building the site computes every explorer's pictures when no earlier build of this code did (BUILD_BUDGET).
BUILD_TIMEOUT = 900
LOAD_TIMEOUT_MS = 30_000
COLAB_BADGE_LINK = re.compile(r"\[!\[Open In Colab\]\([^)]*\)\]\(([^)]+)\)")

pytestmark = pytest.mark.browser


def notebooks() -> list[Path]:
    """The registry's notebooks in the order of the series: lessons first, then solutions."""
    paths = [Path(item.notebook) for item in LESSONS]
    paths += [Path(item.solutions) for item in LESSONS if item.solutions is not None]
    return paths


def page_of(notebook: Path) -> str:
    return notebook.with_suffix(".html").as_posix()


def read_notebook(notebook: Path) -> dict:
    return json.loads((ROOT / notebook).read_text(encoding="utf-8"))


def badge_link(notebook: Path) -> str:
    """The "Open in Colab" link written in the notebook itself (its first markdown cell)."""
    for cell in read_notebook(notebook)["cells"]:
        if cell["cell_type"] == "markdown":
            match = COLAB_BADGE_LINK.search("".join(cell["source"]))
            if match:
                return match.group(1)
    raise AssertionError(f"{notebook} has no Open In Colab badge")


def png_outputs(notebook: Path) -> int:
    """Outputs whose best static form is a PNG (no HTML or SVG form preferred over it)."""
    count = 0
    for cell in read_notebook(notebook)["cells"]:
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if "image/png" in data and "text/html" not in data and "image/svg+xml" not in data:
                count += 1
    return count


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    doctrees = tmp_path_factory.mktemp("doctrees")
    command = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-E", "-q", "-b", "html", "-c", "book"]
    command += ["-d", str(doctrees), ".", str(out)]
    build = subprocess.run(
        command,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    assert build.returncode == 0, f"sphinx-build failed:\n{build.stdout}\n{build.stderr}"
    return out


@pytest.fixture(scope="module")
def server(site: Path):
    handler = functools.partial(_QuietHandler, directory=str(site))
    httpd = _Server(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)


class _Server(http.server.ThreadingHTTPServer):
    # Requests the browser makes on its own (a favicon) reach no page event: the server sees them.
    missing: ClassVar[list[str]] = []

    def handle_error(self, request, client_address) -> None:
        # The browser closing a page mid-download is not an error of the site.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        if str(code).isdigit() and int(code) >= 400:
            _Server.missing.append(f"{self.path}: HTTP {code} (seen by the server)")


class Visit:
    """A browser page that records every request, console error and page error."""

    def __init__(self, browser, origin: str) -> None:
        self.origin = origin
        self.requests: list[str] = []
        self.errors: list[str] = []
        self.failed: list[str] = []
        self.page = browser.new_page(viewport={"width": 1280, "height": 900})
        self.page.on("request", lambda request: self.requests.append(request.url))
        self.page.on("requestfailed", lambda request: self.failed.append(f"{request.url}: {request.failure}"))
        self.page.on(
            "response",
            lambda response: (
                self.failed.append(f"{response.url}: HTTP {response.status}") if response.status >= 400 else None
            ),
        )
        self.page.on(
            "console",
            lambda msg: self.errors.append(f"console.{msg.type}: {msg.text}") if msg.type == "error" else None,
        )
        self.page.on("pageerror", lambda exc: self.errors.append(f"pageerror: {exc}"))

    def open(self, path: str):
        response = self.page.goto(self.origin + path, wait_until="load", timeout=LOAD_TIMEOUT_MS)
        assert response is not None and response.status == 200, f"{path}: HTTP {response and response.status}"
        return response

    def report(self) -> str:
        # A console "Failed to load resource" does not name the resource: the failed requests do.
        failed = self.failed + _Server.missing
        return "\n".join(["browser console errors:", *self.errors, "failed requests:", *failed])

    def external_requests(self) -> list[str]:
        return [url for url in self.requests if not url.startswith((self.origin, "data:", "blob:"))]

    def close(self) -> None:
        self.page.close()


@pytest.fixture
def visit(browser, server):
    opened = Visit(browser, server)
    yield opened
    opened.close()


def typeset(page) -> dict:
    """Wait for MathJax to finish typesetting, then list the formulas it did not render."""
    page.wait_for_function(
        "() => window.MathJax && MathJax.startup && MathJax.startup.promise", timeout=LOAD_TIMEOUT_MS
    )
    page.evaluate("() => MathJax.startup.promise")
    return page.evaluate(
        """() => {
            const formulas = [...document.querySelectorAll('.math')];
            return {
                formulas: formulas.length,
                unrendered: formulas.filter(m => !m.querySelector('mjx-container svg'))
                    .map(m => m.textContent.slice(0, 80)),
                errors: [...document.querySelectorAll('mjx-merror, [data-mjx-error]')]
                    .map(e => e.textContent.slice(0, 80)),
                jax: window.MathJax.version,
            };
        }"""
    )


def images(page) -> list[dict]:
    return page.evaluate(
        """() => [...document.querySelectorAll('img')].map(img => ({
            src: img.currentSrc || img.src, complete: img.complete, width: img.naturalWidth,
            output: !!img.closest('.cell_output')}))"""
    )


@pytest.mark.parametrize("notebook", notebooks(), ids=lambda path: path.stem)
def test_notebook_page(visit, notebook):
    visit.open(page_of(notebook))
    page = visit.page

    pictures = images(page)
    broken = [image["src"] for image in pictures if not image["complete"] or image["width"] == 0]
    assert not broken, f"images that did not load: {broken}"
    shown = sum(image["output"] for image in pictures)
    assert shown >= png_outputs(notebook), f"{shown} output images, the notebook has {png_outputs(notebook)} PNGs"
    if png_outputs(notebook):
        assert shown > 0

    sources = "".join(
        "".join(cell["source"]) for cell in read_notebook(notebook)["cells"] if cell["cell_type"] == "markdown"
    )
    if "$" in sources:
        math = typeset(page)
        assert math["jax"].startswith("3."), math
        assert math["formulas"] > 0, "the notebook's markdown has $…$ but the page has no formula"
        assert not math["unrendered"], f"formulas MathJax did not typeset: {math['unrendered'][:5]}"
        assert not math["errors"], f"MathJax errors: {math['errors'][:5]}"
    else:
        # Sphinx loads MathJax only on pages that have a formula.
        assert page.evaluate("() => document.querySelectorAll('.math').length") == 0
    raw = page.evaluate("() => document.querySelector('main').innerText")
    assert "\\(" not in raw and "\\[" not in raw, "TeX delimiters left in the page's text"

    colab = badge_link(notebook)
    assert colab.startswith("https://colab.research.google.com/github/")
    assert colab.endswith(f"/blob/main/{notebook.as_posix()}"), colab
    hrefs = page.eval_on_selector_all("a[href]", "links => links.map(a => a.getAttribute('href'))")
    assert hrefs.count(colab) >= 2, "the page's Colab launch button and its badge both open this notebook"
    assert page.get_by_text("Open in Colab", exact=True).first.is_visible()
    assert not page.locator("script[type='application/vnd.jupyter.widget-view+json']").count()

    assert not visit.failed, f"failed requests: {visit.failed}"
    assert not visit.external_requests(), f"requests to other hosts: {visit.external_requests()}"
    assert not visit.errors, visit.report()


def test_front_page_and_navigation(visit, site):
    expected = [page_of(path) for path in notebooks()]
    assert sorted(p.relative_to(site).as_posix() for p in site.glob("notebooks/**/*.html")) == sorted(expected)

    visit.open("")  # the site's root redirects to the front page
    visit.page.wait_for_url("**/book/index.html", timeout=LOAD_TIMEOUT_MS)
    assert visit.page.title().startswith("Attention, step by step")

    def listed(selector: str) -> list[str]:
        links = visit.page.eval_on_selector_all(selector, "links => links.map(a => a.href)")
        return [link.removeprefix(visit.origin) for link in links if "/notebooks/" in link]

    assert listed("nav.bd-links a") == expected, "the sidebar lists the lessons, then the solutions, in order"
    table = listed("main table a")
    assert table == [page for item in LESSONS for page in (page_of(Path(item.notebook)), page_of(Path(item.solutions)))]
    titles = visit.page.eval_on_selector_all("nav.bd-links a", "links => links.map(a => a.textContent.trim())")
    assert [title for title in titles if not title.endswith("Solutions")][1:] == [
        f"{item.number:02d} · {item.title}" for item in LESSONS
    ]

    # "Next" walks the series in order.
    for here, following in itertools.pairwise(expected):
        visit.open(here)
        assert visit.page.locator("a.right-next").evaluate("a => a.href") == visit.origin + following

    assert not visit.external_requests(), f"requests to other hosts: {visit.external_requests()}"
    assert not visit.errors, visit.report()


def test_every_page_names_its_icon(site):
    # A page without one makes the browser ask for /favicon.ico, a 404 in the console whenever it
    # is fetched before the page moves on (the root's redirect) -- a flaky failure, so checked here.
    # The theme also ships template fragments as .html under _static: pages are whole documents.
    pages = sorted(page for page in site.rglob("*.html") if "<html" in page.read_text())
    assert site / "index.html" in pages
    without = [page.relative_to(site).as_posix() for page in pages if 'rel="icon"' not in page.read_text()]
    assert not without, f"pages without an icon link: {without}"


def test_search_finds_a_lesson(visit):
    first = Path(LESSONS[0].notebook)
    word = "Money"  # notebook 01 works on the sentence "Money Bank Grows"
    assert word in "".join("".join(cell["source"]) for cell in read_notebook(first)["cells"])
    visit.open(f"search.html?q={word}")
    results = visit.page.locator("#search-results ul.search li a")
    results.first.wait_for(timeout=LOAD_TIMEOUT_MS)
    found = [link.removeprefix(visit.origin) for link in results.evaluate_all("links => links.map(a => a.href)")]
    assert any(link.split("#")[0].split("?")[0] == page_of(first) for link in found), found
    assert not visit.external_requests(), f"requests to other hosts: {visit.external_requests()}"
    assert not visit.errors, visit.report()


def site_explorer_cells():
    return [cell for lesson in LESSONS for cell in explorer_cells(Path(lesson.notebook), ROOT)]


def shown(page, key: str) -> dict:
    """What the explorer ``key`` shows now: its setting, picture (loaded or not) and caption."""
    return page.evaluate(
        """key => {
            const box = document.querySelector(`.mhsa-site-explorer[data-key="${key}"] .mhsa-site-explorer-box`);
            const img = box.querySelector('.mhsa-site-picture');
            return {state: box.getAttribute('data-state'), src: img.getAttribute('src'), complete: img.complete,
                    width: img.naturalWidth, shownWidth: img.getBoundingClientRect().width,
                    caption: box.querySelector('.mhsa-site-caption').textContent};
        }""",
        key,
    )


def expect_setting(page, key: str, manifest: dict, state: str) -> None:
    page.wait_for_function(
        """key => { const img = document.querySelector(`.mhsa-site-explorer[data-key="${key}"] img`);
                    return img.complete && img.naturalWidth > 0; }""",
        arg=key,
        timeout=LOAD_TIMEOUT_MS,
    )
    now = shown(page, key)
    assert now["state"] == state
    assert now["src"] == manifest["pictures"] + manifest["states"][state]["picture"]
    assert now["caption"] == manifest["states"][state]["caption"] and now["width"] > 0


@pytest.mark.parametrize("width", [1280, 390], ids=["wide", "phone"])
@pytest.mark.parametrize("cell", site_explorer_cells(), ids=lambda cell: cell.key)
def test_explorer_moves_without_a_kernel(visit, cell, width):
    page = visit.page
    page.set_viewport_size({"width": width, "height": 900})
    visit.open(page_of(Path(cell.notebook)))
    holder = page.locator(f'.mhsa-site-explorer[data-key="{cell.key}"]')
    manifest = json.loads(holder.locator("script").text_content())
    holder.scroll_into_view_if_needed()
    assert holder.is_visible()
    still = page.locator(".cell", has=holder).locator(".cell_output")
    assert still.count() == 1 and not still.is_visible(), "the still picture gives way to the explorer"
    expect_setting(page, cell.key, manifest, ",".join(map(str, manifest["start"])))
    assert shown(page, cell.key)["shownWidth"] <= width, "the picture fits the window"
    assert "Colab" in holder.locator(".mhsa-site-note").inner_text()

    boxes = holder.locator(".mhsa-site-control")
    for k, control in enumerate(manifest["controls"]):
        for by in ("keyboard", "mouse"):
            state = [int(i) for i in shown(page, cell.key)["state"].split(",")]
            count = len(control["labels"])
            target = state[k] + 1 if state[k] + 1 < count else state[k] - 1
            element = boxes.nth(k)
            if control["kind"] == "range":
                slider = element.locator("input[type=range]")
                if by == "keyboard":
                    slider.focus()
                    page.keyboard.press("ArrowRight" if target > state[k] else "ArrowLeft")
                else:
                    target = 0 if state[k] else count - 1
                    area = slider.bounding_box()
                    x = area["x"] + (2 if target == 0 else area["width"] - 2)
                    page.mouse.click(x, area["y"] + area["height"] / 2)
            elif control["kind"] == "check":
                box = element.locator("input[type=checkbox]")
                target = 1 - state[k]
                if by == "keyboard":
                    box.focus()
                    page.keyboard.press("Space")
                else:
                    box.click()
            else:
                button = element.locator("button").nth(target)
                if by == "keyboard":
                    button.focus()
                    page.keyboard.press("Enter")
                else:
                    button.click()
            now = shown(page, cell.key)["state"]
            assert now != ",".join(map(str, state)), f"{control['label']} did not move by {by}"
            assert int(now.split(",")[k]) == target, f"{control['label']} by {by}: {now}"
            expect_setting(page, cell.key, manifest, now)

    assert not visit.failed, f"failed requests: {visit.failed}"
    assert not visit.external_requests(), f"requests to other hosts: {visit.external_requests()}"
    assert not visit.errors, visit.report()


# ------------------------------------------------------------------ latency (make bench-browser)

LATENCY_MOVES = 8
#: Each move's time from the key's event (its timeStamp, when the browser received it) to the second animation
#: frame after it, and whether the focused explorer's picture was loaded by then; and a bare range input (with
#: an <output> that its input event writes), the reference, put before the first explorer of the page.
TIMING_JS = """() => {
  const timing = window.__timing = {frames: [], loaded: []};
  document.addEventListener('keydown', (event) => {
    const start = event.timeStamp;
    requestAnimationFrame(() => requestAnimationFrame(() => {
      timing.frames.push(performance.now() - start);
      const box = document.activeElement.closest('.mhsa-site-explorer-box');
      const img = box && box.querySelector('.mhsa-site-picture');
      timing.loaded.push(!img || (img.complete && img.naturalWidth > 0));
    }));
  }, true);
  const bare = document.createElement('p');
  bare.className = 'mhsa-bare';
  bare.innerHTML = '<input type="range" min="0" max="20" value="10" aria-label="bare"> <output>10</output>';
  const range = bare.querySelector('input');
  range.addEventListener('input', () => { bare.querySelector('output').textContent = range.value; });
  document.querySelector('.mhsa-site-explorer').before(bare);
}"""


def time_moves(page, slider) -> list[float]:
    """LATENCY_MOVES arrow-key moves of ``slider``, to its end and back; each move's milliseconds to its frame."""
    slider.scroll_into_view_if_needed()
    slider.focus()
    page.wait_for_timeout(300)  # the pictures one move away are loaded after a move: a learner pauses as long
    page.evaluate("() => { window.__timing.frames = []; window.__timing.loaded = []; }")
    top = int(slider.get_attribute("max"))
    right = int(slider.input_value()) < top
    for move in range(LATENCY_MOVES):
        value = int(slider.input_value())
        if value in (0, top):
            right = value < top
        page.keyboard.press("ArrowRight" if right else "ArrowLeft")
        assert int(slider.input_value()) == value + (1 if right else -1), "a timed key press did not move"
        page.wait_for_function(f"() => window.__timing.frames.length > {move}")
        page.wait_for_timeout(150)
    timing = page.evaluate("() => window.__timing")
    assert all(timing["loaded"]), f"a move showed a picture not loaded yet: {timing}"
    return timing["frames"]


PAGES = sorted({cell.notebook for cell in site_explorer_cells()})


@pytest.mark.latency
@pytest.mark.parametrize("notebook", PAGES, ids=lambda path: Path(path).stem)
def test_keypress_to_frame_on_the_website(visit, notebook, request):
    """Each explorer's first slider on the website against a bare range input on the same page (a row each)."""
    page = visit.page
    visit.open(page_of(Path(notebook)))
    page.wait_for_selector(".mhsa-site-explorer-box")
    page.evaluate(TIMING_JS)
    bare = time_moves(page, page.locator(".mhsa-bare input"))
    rows = request.config.stash.setdefault(SITE_LATENCY_ROWS, [])
    for holder in page.locator(".mhsa-site-explorer").all():
        manifest = json.loads(holder.locator("script").text_content())
        sliders = [k for k, control in enumerate(manifest["controls"]) if control["kind"] == "range"]
        if not sliders:
            continue
        slider = holder.locator(".mhsa-site-control").nth(sliders[0]).locator("input[type=range]")
        frames = time_moves(page, slider)
        label = manifest["controls"][sliders[0]]["label"]
        rows.append((f"{Path(notebook).stem[:2]} {manifest['title']}", label, frames, bare))
    assert not visit.failed, f"failed requests: {visit.failed}"
    assert not visit.external_requests(), f"requests to other hosts: {visit.external_requests()}"
    assert not visit.errors, visit.report()
