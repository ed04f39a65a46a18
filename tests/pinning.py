"""What the pinned tests (``tests/test_pinned_<module>.py``) share."""

from __future__ import annotations

import re

import pytest


def raises(kind: type[Exception], message: str):
    """The exception, with exactly this message (a learner reads it: its wording is behaviour)."""
    return pytest.raises(kind, match=f"^{re.escape(message)}$")
