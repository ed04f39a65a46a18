"""The requests a learner makes (mhsa_helpers.teaching.feedback): every hint and every reveal is counted, per
exercise. Found unpinned by mutation testing (``make mutate``): the tests asked for each at most once, so a
count that stuck at 1 went unnoticed.

Written against the public API: ``check_function``'s result, its ``hint()`` and ``reveal()``, and
``feedback.requests``.
"""

from __future__ import annotations

import torch

from mhsa_helpers.teaching import feedback
from mhsa_helpers.teaching.checking import Case, Misconception, check_function

CASES = [Case((torch.tensor([1.0, 2.0], dtype=torch.float64),))]
DOUBLED = Misconception("doubled", lambda x: 2 * x, "Add, do not multiply.", fix="return x + 1")
TRIPLED = Misconception("tripled", lambda x: 3 * x, "Add, do not multiply.", fix="return x + 1")


def check(learner):
    return check_function("ex", learner, lambda x: x + 1, CASES, [DOUBLED, TRIPLED], verbose=False)


def test_every_reveal_is_counted(capsys):
    result = check(lambda x: 2 * x)
    result.reveal()
    result.reveal()
    assert feedback.requests("ex") == {"hint": 0, "reveal": 2}
    assert capsys.readouterr().out == "[ex] the fix for 'doubled': return x + 1\n" * 2


def test_every_hint_is_counted():
    # Each hint names a mistake not named before, so each is a hint (a hint on a named mistake is a reveal).
    check(lambda x: 2 * x).hint()
    check(lambda x: 3 * x).hint()
    assert feedback.requests("ex") == {"hint": 2, "reveal": 0}
