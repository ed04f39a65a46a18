"""The fixture notebook here is opened by the browser test, not collected by nbval.

The browser tests launch the Chromium that :mod:`discovery` finds; without one they
are skipped with a loud reason, except under CI, where a missing browser fails the run."""

from __future__ import annotations

import pytest
from discovery import decide, find_chromium
from lab import CHROMIUM_ARGS, LATENCY_ROWS, SITE_LATENCY_ROWS, latency_table, site_latency_table

collect_ignore_glob = ["*.ipynb"]

_skipped: list[str] = []


@pytest.fixture(scope="session")
def chromium_path() -> str:
    decision = decide(find_chromium())
    if decision.action == "fail":
        pytest.fail(decision.reason)
    if decision.action == "skip":
        _skipped.append(decision.reason)
        pytest.skip(decision.reason)
    assert decision.path is not None
    return decision.path


@pytest.fixture(scope="module")
def browser(chromium_path):
    """A headless Chromium (Playwright) for the browser tests of one module. Not one per session:
    Playwright's sync API keeps its event loop current in this process until it stops, and an
    explorer tested later in the same process (another file on the same pytest-xdist worker) would
    find that "running" loop, which never runs its callbacks, and wait for ever to sharpen its picture."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=chromium_path, args=CHROMIUM_ARGS, headless=True)
        try:
            yield chromium
        finally:
            chromium.close()


def pytest_terminal_summary(terminalreporter, config) -> None:
    rows = config.stash.get(LATENCY_ROWS, [])
    if rows:
        terminalreporter.section("explorer latency in JupyterLab (headless Chromium, keypress to render)")
        for line in latency_table(rows):
            terminalreporter.line(line)
    site_rows = config.stash.get(SITE_LATENCY_ROWS, [])
    if site_rows:
        terminalreporter.section("explorer latency on the website (headless Chromium, keypress to its frame)")
        for line in site_latency_table(site_rows):
            terminalreporter.line(line)
    if _skipped:
        terminalreporter.section("browser tests", sep="!", bold=True, yellow=True)
        terminalreporter.line(_skipped[0], yellow=True, bold=True)
