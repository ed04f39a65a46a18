"""The learner's own causal self-attention module (notebook 06) and the package's weights in it.

Notebook 06's last exercise is ``MyCausalSelfAttention(d_model, num_heads, *, d_in=None, bias=True,
rope_base=10000.0)``: ``nn.Linear`` layers ``w_q, w_k, w_v`` (d_in -> d_model) and ``w_o``
(d_model -> d_model), attributes ``num_heads`` and ``d_head``, and ``forward(x, cache=None,
need_weights=False)`` with interleaved RoPE at positions ``past + 0 .. seq-1`` and a causal mask
offset by ``past`` (``past = cache.length``, or 0 without a cache). :func:`copy_package_weights`
puts the weights of a package :class:`~mhsa_helpers.MultiHeadSelfAttention` into such a module, so
that the two can be compared (notebook 06's checker) or swapped (notebooks 07 and 11).
"""

from __future__ import annotations

from torch import nn

from ... import MultiHeadSelfAttention
from ..multi_head_attention.learner import load_package_weights

__all__ = ["copy_package_weights"]


def copy_package_weights(mine: nn.Module, theirs: MultiHeadSelfAttention) -> nn.Module:
    """Copy the package's ``theirs`` (``rope=True`` with interleaved pairs, ``num_kv_heads == num_heads``)
    into the learner's ``mine`` and return ``mine``.

    ``theirs.q_weight`` goes to ``mine.w_q.weight``, ``k_weight`` to ``w_k``, ``v_weight`` to ``w_v``,
    ``o_weight`` to ``w_o``, and the biases with them (``mine``'s are zeroed where ``theirs`` has none).
    The two modules then compute the same function when ``theirs`` is causal (``causal=True``) and
    has the same ``rope_base``. Raises ValueError for grouped-query attention (fewer key/value heads
    than query heads), a module without RoPE or with half-split pairs, another number of heads or
    RoPE base, and projections of other shapes."""
    if not isinstance(theirs, MultiHeadSelfAttention):
        raise TypeError(f"theirs must be a mhsa_helpers.MultiHeadSelfAttention, got {type(theirs).__name__}")
    if theirs.num_kv_heads != theirs.num_heads:
        raise ValueError(
            f"theirs uses grouped-query attention (num_heads={theirs.num_heads}, num_kv_heads={theirs.num_kv_heads}): "
            "its W_K and W_V have fewer rows than MyCausalSelfAttention's, one key/value head per query head. "
            "Notebook 11 loads such a model."
        )
    if theirs.rope is None:
        raise ValueError(
            "theirs has no RoPE (rope=False); MyCausalSelfAttention rotates q and k: build it with rope=True"
        )
    if theirs.rope.convention != "interleaved":
        raise ValueError(
            f"theirs rotates {theirs.rope.convention!r} pairs; MyCausalSelfAttention rotates interleaved pairs "
            "(2i, 2i+1): convert the rows of W_Q and W_K with mh.permute_rope_weight first"
        )
    heads = getattr(mine, "num_heads", theirs.num_heads)
    if heads != theirs.num_heads:
        raise ValueError(f"mine.num_heads is {heads}, theirs.num_heads is {theirs.num_heads}")
    base = getattr(mine, "rope_base", theirs.rope.base)
    if float(base) != theirs.rope.base:
        raise ValueError(f"mine.rope_base is {base}, theirs rotates with base {theirs.rope.base}")
    load_package_weights(mine, theirs)
    return mine
