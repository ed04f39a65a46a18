"""Notebook 13, multi-head latent attention: a cache of one small vector per token. The training comparison with
MHA, GQA and MQA (``experiments``) and its picture (``figures``), the exercise checkers (``exercises``), the explorer
and the multiply-adds it counts (``explorer``), the diagrams (``diagrams``) and the recall (``recall``). The
mathematics is in :mod:`mhsa_helpers.mla` and the cache's size in
:func:`mhsa_helpers.kv_cache_memory.latent_cache_bytes`."""

from ...teaching.base_module import NotSavedYet
from .diagrams import absorption_diagram, latent_diagram
from .exercises import check_absorbed_scores, check_latent_prediction, check_my_latent_attention
from .experiments import KINDS, NOTEBOOK_CONFIG, train_kinds
from .explorer import LatentShape, decoding_multiply_adds, latent_explorer
from .figures import kind_comparison
from .recall import check_recall

__all__ = [
    "KINDS",
    "NOTEBOOK_CONFIG",
    "LatentShape",
    "NotSavedYet",
    "absorption_diagram",
    "check_absorbed_scores",
    "check_latent_prediction",
    "check_my_latent_attention",
    "check_recall",
    "decoding_multiply_adds",
    "kind_comparison",
    "latent_diagram",
    "latent_explorer",
    "train_kinds",
]
