"""Matplotlib pictures of attention: weight heatmaps, masks, RoPE rotations, benchmarks.

Every function accepts torch tensors or numpy arrays (lists work too), draws with
explicit sizes and no randomness, and returns what it drew on (an ``Axes``, or a
``Figure`` for :func:`head_grid`). Pass ``ax=`` to draw into your own figure;
without it a new pyplot figure of a fixed size is made, which Jupyter shows below
the cell.

Heatmaps put **queries on the rows** and **keys on the columns**: row ``i`` is how
query ``i`` spreads its attention over the keys, so every row of a weight matrix
sums to 1.

One module per kind of picture:

* :mod:`~mhsa_helpers.plots.attention` — weight heatmaps, the per-head grid, mask heatmaps;
* :mod:`~mhsa_helpers.plots.rope` — RoPE rotations, frequencies and score against distance;
* :mod:`~mhsa_helpers.plots.benchmark` — timing / memory tables as lines;
* :mod:`~mhsa_helpers.plots._common` — the input checks they share.
"""

# The constants are read as ``plots.MASK_COLORS`` etc. but, as before the split, left out of __all__.
from .attention import (  # noqa: F401
    ANNOTATE_MAX_SEQ,
    MASK_COLORS,
    WEIGHTS_CMAP,
    attention_heatmap,
    head_grid,
    mask_heatmap,
)
from .benchmark import benchmark_plot
from .rope import rope_frequencies_plot, rope_rotation_arrows, rope_score_vs_distance, rope_scores, rotate_pair

__all__ = [
    "attention_heatmap",
    "head_grid",
    "mask_heatmap",
    "rope_rotation_arrows",
    "rope_frequencies_plot",
    "rope_score_vs_distance",
    "benchmark_plot",
    "rotate_pair",
    "rope_scores",
]
