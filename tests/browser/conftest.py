"""The fixture notebook here is opened by the browser test, not collected by nbval.

Both browser test modules launch the Chromium that :mod:`discovery` finds; without one they
are skipped with a loud reason, except under CI, where a missing browser fails the run."""

from __future__ import annotations

import pytest
from discovery import decide, find_chromium

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


def pytest_terminal_summary(terminalreporter) -> None:
    if _skipped:
        terminalreporter.section("browser tests", sep="!", bold=True, yellow=True)
        terminalreporter.line(_skipped[0], yellow=True, bold=True)
