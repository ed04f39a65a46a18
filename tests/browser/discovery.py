"""Which Chromium the real-browser tests use, and what happens when there is none.

``find_chromium`` looks, in order, at ``$MHSA_CHROMIUM`` (a path you choose), Debian's
``/usr/bin/chromium``, a ``chromium``/``chromium-browser``/``google-chrome`` on ``PATH``, and the
Chromium that Playwright manages; with none of these it runs ``python -m playwright install
chromium`` once (it fails within seconds where the network does not allow it; set
``MHSA_FETCH_CHROMIUM=0`` to never try). ``decide`` turns the result into what the tests do:

* a browser was found: use it;
* none, and ``CI`` is set: fail — CI must prove the browser path (``.ci/run`` installs Debian's);
* none, elsewhere: skip the browser tests with a reason that says how to get one, so that a
  newcomer's first ``make test`` on a machine without Chromium passes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass

DEBIAN_CHROMIUM = "/usr/bin/chromium"
ON_PATH = ("chromium", "chromium-browser", "google-chrome")
HOW_TO_GET_ONE = (
    "install Debian's Chromium (sudo apt-get install chromium), or run `.venv/bin/python -m playwright install "
    "chromium` where the network allows, or point MHSA_CHROMIUM at a Chromium"
)


@dataclass(frozen=True)
class Decision:
    action: str  # "use", "skip" or "fail"
    path: str | None
    reason: str


def playwright_chromium() -> str | None:
    """The Chromium Playwright manages, if it was installed (``playwright install chromium``)."""
    try:
        from playwright.sync_api import sync_playwright

        with sync_playwright() as playwright:
            path = playwright.chromium.executable_path
    except Exception:
        return None
    return path if path and os.path.exists(path) else None


def fetch_chromium() -> bool:
    """Ask Playwright to download its Chromium; ``True`` when it says it did."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", "playwright", "install", "chromium"], capture_output=True, timeout=300
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def find_chromium(
    environ: Mapping[str, str] = os.environ,
    exists: Callable[[str], bool] = os.path.exists,
    which: Callable[[str], str | None] = shutil.which,
    managed: Callable[[], str | None] = playwright_chromium,
    fetch: Callable[[], bool] = fetch_chromium,
) -> str | None:
    """The first Chromium found (see the module docstring for the order), or ``None``."""
    chosen = environ.get("MHSA_CHROMIUM")
    if chosen:
        # A path the user chose and that is not there is a mistake to report, not to work around.
        return chosen
    if exists(DEBIAN_CHROMIUM):
        return DEBIAN_CHROMIUM
    for name in ON_PATH:
        path = which(name)
        if path:
            return path
    path = managed()
    if path is None and environ.get("MHSA_FETCH_CHROMIUM", "1") != "0" and fetch():
        path = managed()
    return path


def decide(
    path: str | None, environ: Mapping[str, str] = os.environ, exists: Callable[[str], bool] = os.path.exists
) -> Decision:
    """What the browser tests do with ``path`` (from :func:`find_chromium`) in this environment."""
    under_ci = environ.get("CI", "").lower() not in ("", "0", "false", "no")
    if path is not None and exists(path):
        return Decision("use", path, f"Chromium at {path}")
    if path is not None:
        return Decision("fail", None, f"MHSA_CHROMIUM={path} does not exist")
    if under_ci:
        return Decision(
            "fail", None, f"no Chromium found and CI is set, so the browser tests cannot be skipped: {HOW_TO_GET_ONE}"
        )
    return Decision("skip", None, f"BROWSER TESTS SKIPPED: no Chromium on this machine; to run them, {HOW_TO_GET_ONE}")
