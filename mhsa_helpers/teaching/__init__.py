"""The base pieces of the notebooks' teaching scaffolding, shared by every lesson:

* :mod:`~mhsa_helpers.teaching.claims` — ``claim`` and ``claim_close``: a notebook's statement,
  checked where it is made;
* :mod:`~mhsa_helpers.teaching.checking` — the checker machinery: run a learner's function on
  cases, compare with the reference, and name the misconception a wrong answer matches;
* :mod:`~mhsa_helpers.teaching.explorer` — the :class:`~mhsa_helpers.teaching.explorer.Explorer`
  widget base, its setting checks and slider helpers;
* :mod:`~mhsa_helpers.teaching.figures` — attention heatmaps, per-head grids, mask heatmaps and
  benchmark plots;
* :mod:`~mhsa_helpers.teaching.diagrams` — schematic diagrams of shapes and data flow (tensors as
  grids of cells, operations, arrows).
* :mod:`~mhsa_helpers.teaching.mine` — the learner's own attention, carried from notebook to notebook
  in ``my_attention.py``: ``save_mine``, ``load_mine`` (with the package's stand-ins) and the
  ``%%my_attention`` cell that pastes it in on Colab.

and the bases that a few lessons share (a lesson never imports another lesson):

* :mod:`~mhsa_helpers.teaching.heads_explorer` — the sentence, inputs and seeded module of the heads
  and MHSA explorers (notebooks 04 and 06);
* :mod:`~mhsa_helpers.teaching.induction` — notebook 07's task, model, training, head scores and
  shipped checkpoints, which notebooks 09 and 11 build on.
* :mod:`~mhsa_helpers.teaching.base_module` — what the checkers of a learner's module that extends
  their notebook-06 ``MyCausalSelfAttention`` share (notebooks 12 and 13): the class it extends checked
  alone first, and the learner sent back to notebook 06 when that already differs.

Each notebook's own checkers, explorer and figures are in ``mhsa_helpers.lessons.<slug>``.
The core modules of :mod:`mhsa_helpers` never import this package.
"""
