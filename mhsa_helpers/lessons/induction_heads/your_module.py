"""Is the learner's attention module written yet? ("Train your own module", notebooks 07 and 11.)

The payoff cells of notebooks 07 and 11 take the ``MyCausalSelfAttention`` class the learner wrote
in notebook 06 and pasted into the notebook. While it is still the placeholder (it raises
``NotImplementedError``), those cells say so and do nothing, so that the notebook runs top to bottom.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import torch

__all__ = ["module_is_written"]


def module_is_written(attention: object, name: str = "MyCausalSelfAttention") -> bool:
    """``True`` when ``attention(8, 2)`` builds a module and runs on a ``(1, 3, 8)`` input; ``False``,
    after printing one line that says what to do, when ``attention`` is ``None`` or still raises
    ``NotImplementedError``. Any other error is the learner's bug and is raised as it is."""
    if attention is None:
        written = False
    else:
        try:
            module = cast(Callable[..., Any], attention)(8, 2)
            with torch.no_grad():
                module(torch.zeros(1, 3, 8))
            written = True
        except NotImplementedError:
            written = False
    if not written:
        print(
            f"{name} is not written yet (still the placeholder, or it raises NotImplementedError): paste your "
            "class from notebook 06 into the cell above and run this cell again. Nothing was run."
        )
    return written
