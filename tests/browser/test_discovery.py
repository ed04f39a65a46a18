"""Which Chromium the browser tests use, and what they do without one (no browser needed)."""

import pytest
from discovery import DEBIAN_CHROMIUM, decide, find_chromium


def nothing(_name=None):
    return None


def never_fetch():
    raise AssertionError("must not try to download a browser here")


def test_a_chosen_path_comes_first():
    found = find_chromium({"MHSA_CHROMIUM": "/opt/mine"}, exists=lambda p: True, which=nothing, managed=nothing)
    assert found == "/opt/mine"


def test_debian_then_path_then_playwright():
    assert (
        find_chromium({}, exists=lambda p: p == DEBIAN_CHROMIUM, which=nothing, managed=never_fetch) == DEBIAN_CHROMIUM
    )
    on_path = {"chromium-browser": "/snap/bin/chromium-browser"}
    assert (
        find_chromium({}, exists=lambda p: False, which=on_path.get, managed=never_fetch) == on_path["chromium-browser"]
    )
    assert find_chromium({}, exists=lambda p: False, which=nothing, managed=lambda: "/pw/chrome") == "/pw/chrome"


def test_fetches_once_when_nothing_is_installed_unless_told_not_to():
    installed: list[str] = []
    fetches: list[int] = []

    def fetch():
        fetches.append(1)
        installed.append("/pw/chrome")
        return True

    def managed():
        return installed[0] if installed else None

    assert find_chromium({}, exists=lambda p: False, which=nothing, managed=managed, fetch=fetch) == "/pw/chrome"
    assert len(fetches) == 1
    assert find_chromium({"MHSA_FETCH_CHROMIUM": "0"}, lambda p: False, nothing, nothing, never_fetch) is None
    assert find_chromium({}, lambda p: False, nothing, nothing, lambda: False) is None


@pytest.mark.parametrize(
    ("path", "environ", "action"),
    [
        ("/usr/bin/chromium", {}, "use"),
        ("/usr/bin/chromium", {"CI": "true"}, "use"),
        (None, {}, "skip"),
        (None, {"CI": "0"}, "skip"),
        (None, {"CI": "false"}, "skip"),
        (None, {"CI": "true"}, "fail"),
        (None, {"CI": "1"}, "fail"),
        ("/gone/chromium", {}, "fail"),
    ],
)
def test_decide_skips_only_outside_ci(path, environ, action):
    decision = decide(path, environ, exists=lambda p: p == "/usr/bin/chromium")
    assert decision.action == action
    if action == "skip":
        assert "BROWSER TESTS SKIPPED" in decision.reason and "apt-get install chromium" in decision.reason
    if action == "fail" and path is None:
        assert "CI" in decision.reason
