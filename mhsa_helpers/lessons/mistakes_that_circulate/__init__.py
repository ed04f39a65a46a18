"""Notebook 10, mistakes that circulate: the bug zoo (``bug_zoo``), the exercise checkers
(``exercises``) and the explorer over the bugs (``explorer``)."""

from .bug_zoo import BUGS, Bug, BugDemo, Report, bug, bug_names
from .exercises import check_decode_mask, check_masked_weights
from .explorer import bug_zoo_explorer
from .recall import check_recall

__all__ = [
    "BUGS",
    "Bug",
    "BugDemo",
    "Report",
    "bug",
    "bug_names",
    "bug_zoo_explorer",
    "check_decode_mask",
    "check_masked_weights",
    "check_recall",
]
