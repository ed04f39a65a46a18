"""Shared pytest configuration.

Hypothesis runs derandomized (a fixed seed derived from each test) so CI sees
the same examples on every run; ``deadline=None`` because the first call of a
PyTorch op can be slow (kernel selection) and that is not a test failure.
Select another profile with ``HYPOTHESIS_PROFILE=thorough pytest ...``.
"""

from __future__ import annotations

import os
import sys

import pytest
import torch
from hypothesis import HealthCheck, settings

from mhsa_helpers.teaching import feedback

# The tests run thousands of tiny ops; on a busy 2-core machine PyTorch's thread pool
# makes each one up to 50x slower (threads spin waiting for each other) and buys nothing.
torch.set_num_threads(int(os.environ.get("MHSA_TEST_THREADS", "1")))

settings.register_profile(
    "ci",
    deadline=None,
    derandomize=True,
    max_examples=50,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "thorough",
    deadline=None,
    derandomize=False,
    max_examples=500,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(autouse=True)
def fresh_feedback():
    """Each test starts as a fresh kernel does: no exercise has seen an attempt or a hint yet."""
    feedback.forget()
    yield
    feedback.forget()


@pytest.fixture(autouse=True)
def close_figures():
    """Close every pyplot figure a test opened (figures, diagrams), so none piles up across tests."""
    yield
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is not None:
        pyplot.close("all")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the browser tests first. They are the longest files and mostly wait for the browser, so that
    under pytest-xdist (`make test`) one worker starts them while the others take everything else, and
    all finish together. (Their Playwright stops at the end of each module: an explorer tested while
    its event loop is current would find a "running" loop that never runs its callbacks.)"""
    items.sort(key=lambda item: item.get_closest_marker("browser") is None)
