"""Notebook 08, attention at scale: the exercise checkers (``exercises``), the explorers
(``explorer``) and the diagrams (``diagrams``). The mathematics is in the core:
:mod:`mhsa_helpers.tiled_attention`, :mod:`mhsa_helpers.kv_cache_memory`, ``num_kv_heads`` of
:class:`~mhsa_helpers.MultiHeadSelfAttention` and ``KVCache(capacity=...)``."""

from .diagrams import head_groups_diagram, tiles_diagram
from .exercises import (
    check_expand_kv,
    check_kv_cache_bytes,
    check_online_attention,
    check_online_order,
    check_online_update,
    online_order_exercise,
)
from .explorer import cache_explorer, kv_heads_explorer, tiles_explorer
from .recall import check_recall

__all__ = [
    "cache_explorer",
    "check_expand_kv",
    "check_kv_cache_bytes",
    "check_online_attention",
    "check_online_order",
    "check_online_update",
    "check_recall",
    "head_groups_diagram",
    "kv_heads_explorer",
    "online_order_exercise",
    "tiles_diagram",
    "tiles_explorer",
]
