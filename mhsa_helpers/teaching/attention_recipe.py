"""The recipe of a multi-head attention module (notebooks 04-06), with a switch for each known mistake.

:class:`Recipe` names every step a learner writes — project, split into heads, rotate (RoPE), append to the
cache, score, scale, mask, softmax, weigh the values, merge the heads, project out — and, for each step, the
ways it goes wrong. :func:`attend` computes a module's output from its weights by a recipe, so that a checker
can ask "which recipe gives what the learner's module gives?" on inputs crafted to isolate one step at a
time (:mod:`~mhsa_helpers.teaching.modules`). The right recipe is :data:`RIGHT`; a test holds it equal to the
package's :class:`~mhsa_helpers.MultiHeadSelfAttention`.

Weights come as :func:`package_parameters` gives them: ``w_q, w_k, w_v`` ``(d_model, d_in)``, ``w_o``
``(d_model, d_model)`` in ``nn.Linear``'s layout, and their biases (or None).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import torch
import torch.nn.functional as F

from .. import MultiHeadSelfAttention

__all__ = ["RIGHT", "Params", "Recipe", "attend", "package_parameters", "rotate"]

#: A module's weights by the learner's names: ``w_q`` ... ``w_o`` and ``b_q`` ... ``b_o`` (None: no bias).
Params = Mapping[str, torch.Tensor | None]


def package_parameters(theirs: MultiHeadSelfAttention) -> dict[str, torch.Tensor | None]:
    """The package module's four weights and biases by the learner's names: ``w_q`` ``(d_model, d_in)``,
    ``b_q`` ``(d_model,)`` or None, ... ``w_o`` ``(d_model, d_model)``."""
    if not isinstance(theirs, MultiHeadSelfAttention):
        raise TypeError(f"theirs must be a mhsa_helpers.MultiHeadSelfAttention, got {type(theirs).__name__}")
    bias = theirs.qkv_proj.bias
    biases = (None, None, None) if bias is None else bias.split((theirs.d_model, theirs.kv_dim, theirs.kv_dim))
    return {
        "w_q": theirs.q_weight,
        "w_k": theirs.k_weight,
        "w_v": theirs.v_weight,
        "w_o": theirs.o_weight,
        "b_q": biases[0],
        "b_k": biases[1],
        "b_v": biases[2],
        "b_o": theirs.out_proj.bias,
    }


@dataclass(frozen=True)
class Recipe:
    """How a module computes attention. The defaults are the right recipe of a module without a mask or
    positions (notebook 04); ``causal`` and ``rope`` make it notebook 06's. Every other field is a step of the
    recipe, right by default, with the values its known mistakes give it:

    * ``split``: ``"heads"``; ``"view"`` (reshaped straight to ``(batch, heads, seq, d_head)``), ``"strided"``
      (head i takes every h-th feature);
    * ``merge``: ``"heads"``; ``"reshape"`` (no transpose back);
    * ``project_out``: False when W_O is forgotten; ``one_head``: True when ``num_heads`` is ignored;
    * ``scale``: ``"sqrt d_head"``; ``"sqrt d_model"``, ``"d_head"`` (no square root), ``"none"``;
    * ``scores``: ``"q k"``; ``"k q"`` (K·Qᵀ);
    * ``softmax_dim``: -1; -2 (over the queries), -3 (over the heads);
    * ``rotated``: the tensors RoPE turns, ``"qk"``; ``""``, ``"q"``, ``"k"``, ``"qkv"``;
    * ``pairs``: ``"interleaved"``; ``"half_split"``; ``frequencies``: ``"2i/d"``; ``"i/d"``, ``"2i//d"`` (integer
      division), ``"d_model"`` (rotated before the split); ``sign``: 1; -1 (turned the wrong way);
      ``base``: None (the module's rope_base); a number (a fixed base, the module's ignored);
    * under a cache of ``past`` tokens: ``positions``: ``"past"``; ``"zero"`` (restart at 0), ``"past+new"``
      (read after appending); ``mask``: ``"past"``; ``"top-left"``;
      ``cached_keys``: ``"rotated"`` (stored after RoPE); ``"unrotated"`` (stored before it and never turned),
      ``"rotated twice"`` (stored after it and turned again with all the keys).
    """

    causal: bool = False
    rope: bool = False
    rope_base: float = 10000.0
    split: str = "heads"
    merge: str = "heads"
    project_out: bool = True
    one_head: bool = False
    scale: str = "sqrt d_head"
    scores: str = "q k"
    softmax_dim: int = -1
    rotated: str = "qk"
    pairs: str = "interleaved"
    frequencies: str = "2i/d"
    sign: int = 1
    base: float | None = None
    positions: str = "past"
    mask: str = "past"
    cached_keys: str = "rotated"

    def mistakes(self, right: Recipe) -> dict[str, Any]:
        """The steps where this recipe differs from ``right`` (the base of RoPE aside): ``{field: value}``."""
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.name != "rope_base" and getattr(self, f.name) != getattr(right, f.name)
        }


#: The right recipe (of notebook 04; ``replace(RIGHT, causal=True, rope=True)`` is notebook 06's).
RIGHT = Recipe()


def rotate(
    x: torch.Tensor, positions: torch.Tensor, base: float, *, pairs: str = "interleaved", frequencies: str = "2i/d",
    sign: int = 1,
) -> torch.Tensor:  # fmt: skip
    """RoPE, spelled out: ``x (..., seq, d)`` with its feature pairs turned by ``sign * positions[t] * theta_i``,
    ``theta_i = base ** -(2i / d)`` (or the wrong exponent ``frequencies`` names), pairs ``(2i, 2i + 1)`` or,
    ``half_split``, ``(i, i + d / 2)``. Computed in float64, returned in ``x``'s dtype."""
    d = x.shape[-1]
    i = torch.arange(d // 2, dtype=torch.float64)
    exponent = {
        "2i/d": 2 * i / d,
        "i/d": i / d,
        "2i//d": torch.div(2 * i, d, rounding_mode="floor"),
        "d_model": 2 * i / d,
    }
    angles = sign * positions.to(torch.float64)[:, None] * base ** -exponent[frequencies]
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    if pairs == "interleaved":
        first, second = x[..., 0::2], x[..., 1::2]
        return torch.stack((first * cos - second * sin, first * sin + second * cos), dim=-1).flatten(-2)
    first, second = x[..., : d // 2], x[..., d // 2 :]
    return torch.cat((first * cos - second * sin, first * sin + second * cos), dim=-1)


def _split(x: torch.Tensor, heads: int, how: str) -> torch.Tensor:
    batch, seq, width = x.shape
    if how == "view":
        return x.reshape(batch, heads, seq, width // heads)
    if how == "strided":
        return x.reshape(batch, seq, width // heads, heads).permute(0, 3, 1, 2)
    return x.reshape(batch, seq, heads, width // heads).transpose(1, 2)


def _merge(x: torch.Tensor, how: str) -> torch.Tensor:
    batch, heads, seq, d_head = x.shape
    if how == "reshape":
        return x.reshape(batch, seq, heads * d_head)
    return x.transpose(1, 2).reshape(batch, seq, heads * d_head)


def _weight(params: Params, name: str) -> torch.Tensor:
    weight = params[name]
    assert weight is not None  # only biases can be missing
    return weight


def attend(
    recipe: Recipe,
    params: Params,
    x: torch.Tensor,
    num_heads: int,
    cached: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """What a module computing ``recipe`` with ``params`` gives for ``x (batch, new, d_in)`` after the tokens
    ``cached`` holds (keys and values ``(batch, heads, past, d_head)``, as the recipe stores them).

    Returns the output ``(batch, new, d_model)``, the weights ``(batch, heads, new, past + new)`` and what the
    cache holds next."""
    heads = 1 if recipe.one_head else num_heads
    q, k, v = (F.linear(x, _weight(params, f"w_{n}"), params[f"b_{n}"]) for n in "qkv")
    new, d_model = x.shape[1], q.shape[-1]
    past = 0 if cached is None else cached[0].shape[-2]
    first = {"past": past, "zero": 0, "past+new": past + new}[recipe.positions]
    positions = torch.arange(first, first + new)
    base = recipe.rope_base if recipe.base is None else recipe.base

    def turned(name: str, t: torch.Tensor, where: torch.Tensor) -> torch.Tensor:
        if not (recipe.rope and name in recipe.rotated):
            return t
        return rotate(t, where, base, pairs=recipe.pairs, frequencies=recipe.frequencies, sign=recipe.sign)

    if recipe.frequencies == "d_model":  # RoPE over the whole width, before the split
        q, k, v = turned("q", q, positions), turned("k", k, positions), turned("v", v, positions)
    q, k, v = (_split(t, heads, recipe.split) for t in (q, k, v))
    if recipe.frequencies != "d_model":
        q, k_turned, v = turned("q", q, positions), turned("k", k, positions), turned("v", v, positions)
    else:
        k_turned = k
    stored = k if recipe.cached_keys == "unrotated" else k_turned
    if cached is None:
        keys, values = k_turned, v
    else:
        values = torch.cat((cached[1], v), dim=-2)
        if recipe.cached_keys == "rotated twice":
            keys = turned("k", torch.cat((cached[0], k), dim=-2), torch.arange(past + new))
        else:
            keys = torch.cat((cached[0], k_turned), dim=-2)
        stored = torch.cat((cached[0], stored), dim=-2)
    d_head = q.shape[-1]
    scale = {"sqrt d_head": math.sqrt(d_head), "sqrt d_model": math.sqrt(d_model), "d_head": d_head, "none": 1.0}
    # K·Qᵀ scores (key i · query j) only have the right shape when every key is a query too (no cache).
    scores = q @ keys.transpose(-2, -1) if recipe.scores == "q k" else keys @ q.transpose(-2, -1)
    scores = scores / scale[recipe.scale]
    if recipe.causal:
        total = keys.shape[-2]
        diagonal = {"past": total - new, "top-left": 0}[recipe.mask]
        allowed = torch.ones(new, total, dtype=torch.bool).tril(diagonal=diagonal)
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = torch.softmax(scores, dim=recipe.softmax_dim)
    merged = _merge(weights @ values, recipe.merge)
    out = F.linear(merged, _weight(params, "w_o"), params["b_o"]) if recipe.project_out else merged
    return out, weights, (stored, values)
