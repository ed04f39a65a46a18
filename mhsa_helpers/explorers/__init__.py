"""Interactive explorers: sliders and switches that recompute attention with the package and redraw.

Each function returns an :class:`Explorer`, an ``ipywidgets.VBox`` to display in a notebook::

    from mhsa_helpers.explorers import heads_explorer
    explorer = heads_explorer()
    explorer                                   # shows the controls, a caption and the figure
    explorer.controls["num_heads"].value = 4   # same as moving the control by hand
    explorer.data["weights"].shape             # (4, 6, 6): exactly what is drawn now

Every number drawn is computed by :mod:`mhsa_helpers` (never by a second copy of
the maths here). Figures are drawn by matplotlib into off-screen figures (one per
layout, reused) and sent as a PNG to one ``ipywidgets.Image``, whose picture is
replaced in place: no pyplot figure is opened (so none leaks, however often a slider
moves), nothing flickers, and only core widgets that exist in both ipywidgets 7.7.1
(Colab) and 8.x (JupyterLab 4) are used.

Controls only offer possible settings (heads that divide ``d_model``, sequence
lengths from 1, an even head size with RoPE); calling an explorer, or
:meth:`Explorer.update`, with an impossible setting raises ``ValueError`` naming it
(``TypeError`` for a value of the wrong type, e.g. ``num_heads=2.0`` or ``causal="no"``).

Each explorer keeps the figures of its last few layouts (:data:`LAYOUT_CACHE`); a new
explorer trims the older ones of its kind (e.g. left behind by re-running a cell) to the
one figure they show, and ``explorer.close()`` frees an explorer's figures and widgets.

One module per idea, one explorer each:

* :mod:`~mhsa_helpers.explorers.base` — the :class:`Explorer` widget, its figure-layout
  cache, the shared setting checks, seeds and inputs;
* :mod:`~mhsa_helpers.explorers.qkv` — Q, K, V and the softmax by hand (notebook 01);
* :mod:`~mhsa_helpers.explorers.scaling` — why the scores are divided by √d_k (notebook 02);
* :mod:`~mhsa_helpers.explorers.masking` — the causal mask and dropout (notebook 03);
* :mod:`~mhsa_helpers.explorers.heads` — splitting ``d_model`` into heads (notebook 04);
* :mod:`~mhsa_helpers.explorers.rope` — rotary position embeddings (notebook 05);
* :mod:`~mhsa_helpers.explorers.mhsa` — the whole multi-head self-attention block (notebook 06).
"""

# DPI, LAYOUT_CACHE, SEED_002_SEED, METHODS and seed_002_projections are read as
# ``explorers.NAME`` (benchmarks, tests) but, as before the split, left out of __all__.
from .base import (  # noqa: F401
    DPI,
    DROPOUT_SEED,
    HEADS_SENTENCE,
    INPUT_SCALE,
    LAYOUT_CACHE,
    MODEL_SEED,
    SCALING_SENTENCES,
    SEED_002_SEED,
    Explorer,
)
from .heads import heads_explorer
from .masking import METHODS, masking_explorer, seed_002_projections  # noqa: F401
from .mhsa import mhsa_explorer
from .qkv import qkv_explorer
from .rope import rope_explorer
from .scaling import scaling_explorer

__all__ = [
    "Explorer",
    "qkv_explorer",
    "scaling_explorer",
    "masking_explorer",
    "heads_explorer",
    "rope_explorer",
    "mhsa_explorer",
    "MODEL_SEED",
    "DROPOUT_SEED",
    "SCALING_SENTENCES",
    "HEADS_SENTENCE",
    "INPUT_SCALE",
]
