"""Feedback that escalates: what a learner is told about a wrong answer, attempt after attempt.

A checker diagnoses an answer (:mod:`~mhsa_helpers.teaching.checking`); this module remembers, for as long
as the kernel runs, which diagnoses each exercise has met, so that the learner finds the mistake themselves
before being told it:

* the first time an answer shows a mistake, the message gives its **symptom**: which case, what differs,
  where to look;
* the **same mistake again** gets its name and the idea behind it;
* the **fix** is shown only on request: ``result.hint()`` climbs one rung (the name, then the fix) and
  ``result.reveal()`` shows the fix at once. Both are counted per exercise (:func:`asked`, :func:`requests`).

A prediction is told "too high" or "too low" first; its value is shown from the :data:`TRIES_BEFORE_VALUE`-th
wrong try on, or on ``result.reveal()``.

:func:`forget` clears the memory (a fresh kernel has none; the tests start each test from none).
"""

from __future__ import annotations

from collections import Counter, defaultdict

__all__ = [
    "TRIES_BEFORE_VALUE",
    "asked",
    "forget",
    "mark_named",
    "named_before",
    "requests",
    "seen",
    "wrong_tries",
]

#: The wrong prediction of one exercise from which on the checker shows the value.
TRIES_BEFORE_VALUE = 3

_seen: defaultdict[str, Counter[str]] = defaultdict(Counter)
_named: defaultdict[str, set[str]] = defaultdict(set)
_requests: defaultdict[str, Counter[str]] = defaultdict(Counter)


def seen(exercise: str, diagnosis: str) -> int:
    """Count one more answer to ``exercise`` diagnosed as ``diagnosis``; how many there have been (1: the first)."""
    _seen[exercise][diagnosis] += 1
    return _seen[exercise][diagnosis]


def wrong_tries(exercise: str) -> int:
    """How many wrong answers ``exercise`` has had so far, whatever their diagnosis."""
    return sum(_seen[exercise].values())


def mark_named(exercise: str, diagnosis: str) -> None:
    """Record that the learner was shown ``diagnosis`` by name (on a repeat, a hint or a reveal), so that the
    next answer with the same mistake is named at once."""
    _named[exercise].add(diagnosis)


def asked(exercise: str, request: str) -> None:
    """Count one request of the learner's for ``exercise``: ``request`` is "hint" or "reveal"."""
    _requests[exercise][request] += 1


def named_before(exercise: str, diagnosis: str) -> bool:
    """True when ``diagnosis`` was already shown by name for ``exercise`` (a repeat, or a hint)."""
    return diagnosis in _named[exercise]


def requests(exercise: str) -> dict[str, int]:
    """How many hints and reveals the learner asked for on ``exercise``: ``{"hint": n, "reveal": m}``."""
    return {"hint": _requests[exercise]["hint"], "reveal": _requests[exercise]["reveal"]}


def forget() -> None:
    """Forget every attempt and request, as a fresh kernel does."""
    _seen.clear()
    _named.clear()
    _requests.clear()
