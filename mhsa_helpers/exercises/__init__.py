"""Exercise checkers for the notebooks: each names the misconception a wrong answer matches."""

from .core import Case, CheckResult, Misconception, check_function

__all__ = ["Case", "CheckResult", "Misconception", "check_function"]
