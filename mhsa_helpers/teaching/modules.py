"""Checking the learner's own attention *module* (notebooks 04 and 06), and explaining why it fails later
(notebooks 07 and 11).

The learner writes an ``nn.Module`` with four ``nn.Linear`` projections named ``w_q``, ``w_k``, ``w_v`` and
``w_o``. A :class:`Contract` says how a notebook builds and calls it. :func:`check_module`

1. builds it at several sizes (and at two drawn for the answer, one of them in float64) and copies the
   weights of a package :class:`~mhsa_helpers.MultiHeadSelfAttention` into it;
2. watches how it behaves before comparing any number, and names what it sees: the same input giving two
   outputs (random numbers drawn in ``forward``), ``forward`` changing the weights, something kept from one
   call to the next, the sequences of a batch mixed, ``need_weights`` ignored;
3. calls it in every way a later notebook does — a full pass, ``need_weights=True`` without a cache
   (notebook 07's training), chunks of uneven size through one cache, token by token, a second sequence
   after a first — and compares with the package (through
   :func:`~mhsa_helpers.teaching.checking.check_function`'s machinery: time limit, arguments changed in place,
   errors at the learner's line);
4. when a number differs, **diagnoses by isolating** (:func:`diagnose`): it drives the module with crafted
   weights and inputs that switch off every step but a few — all scores equal (``W_Q = W_K = 0``), values
   that read back the attention weights directly (one-hot positions), the same content at every position
   (only RoPE moves the scores), a cache fed in chunks — and keeps the recipes
   (:class:`~mhsa_helpers.teaching.attention_recipe.Recipe`) that give exactly what the module gives. A
   mistake is named only when every recipe left has it; otherwise the message says which isolated step
   differs and where to look;
5. checks that gradients reach every weight, and that a blocked key takes no weight even when the only visible
   one scores far below zero (a finite fill such as -1e9 lets some through).

:func:`explain` runs the same diagnosis in one line, for the payoff cells of notebooks 07 and 11.
"""

from __future__ import annotations

import functools
import inspect
import itertools
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, cast

import torch
from torch import nn

from .. import KVCache, MultiHeadSelfAttention, RotaryEmbedding
from .attention_recipe import RIGHT, Params, Recipe, attend, package_parameters
from .checking import (
    AnswerRejected,
    Case,
    CheckResult,
    answer_seed,
    checking_state,
    escalate,
    judge,
    learner_line,
    state_changed,
    watching_settings,
)
from .misconceptions import FINITE_FILL_FIX, FINITE_FILL_NAME

__all__ = [
    "CAUSAL_CONTRACT",
    "CAUSAL_SETTINGS",
    "MODULE_MISTAKES",
    "MULTI_HEAD_CONTRACT",
    "PROJECTIONS",
    "CacheWithLengthAndAppend",
    "Call",
    "Contract",
    "Diagnosis",
    "ModuleMistake",
    "ModuleSetting",
    "check_module",
    "copy_gqa_weights",
    "copy_package_weights",
    "diagnose",
    "explain",
    "explained",
    "load_package_weights",
    "module_is_written",
    "projection",
    "run_call",
]

PROJECTIONS = ("w_q", "w_k", "w_v", "w_o")


# ------------------------------------------------------------------ weights in and out


def load_package_weights(mine: nn.Module, theirs: MultiHeadSelfAttention) -> nn.Module:
    """Copy the package module ``theirs`` into the learner's module ``mine``, whose projections are
    ``nn.Linear`` layers ``w_q, w_k, w_v`` ``(d_in -> d_model)`` and ``w_o`` ``(d_model -> d_model)``; returns
    ``mine``.

    Biases are copied too; where ``theirs`` has none and ``mine`` has one, ``mine``'s is set to zero
    (the same function). Raises ValueError when a projection is missing, has another shape, or has
    no bias where ``theirs`` has one."""
    if not isinstance(mine, nn.Module):
        raise TypeError(f"mine must be an nn.Module (your attention module), got {type(mine).__name__}")
    params = package_parameters(theirs)
    for name in PROJECTIONS:
        layer = getattr(mine, name, None)
        if not isinstance(layer, nn.Linear):
            raise ValueError(
                f"mine.{name} must be an nn.Linear (the module's {name[-1].upper()} projection), "
                f"got {type(layer).__name__}"
            )
        weight, bias = params[name], params["b" + name[1:]]
        assert weight is not None  # only biases can be missing
        if layer.weight.shape != weight.shape:
            raise ValueError(
                f"mine.{name}.weight has shape {tuple(layer.weight.shape)}, the package's has {tuple(weight.shape)} "
                f"(nn.Linear(in_features={weight.shape[1]}, out_features={weight.shape[0]}))"
            )
        if bias is not None and layer.bias is None:
            raise ValueError(f"mine.{name} has no bias but the package's module has one: build it with bias=True")
    _set_weights(mine, params)
    return mine


@torch.no_grad()
def _set_weights(mine: nn.Module, params: Params) -> None:
    for name in PROJECTIONS:
        layer = cast(nn.Linear, getattr(mine, name))
        layer.weight.copy_(cast(torch.Tensor, params[name]))
        bias = params["b" + name[1:]]
        if layer.bias is not None:
            layer.bias.copy_(bias) if bias is not None else layer.bias.zero_()


def copy_package_weights(mine: nn.Module, theirs: MultiHeadSelfAttention) -> nn.Module:
    """Copy the package's ``theirs`` (a ``RotaryEmbedding`` with interleaved pairs, ``num_kv_heads == num_heads``)
    into notebook 06's ``MyCausalSelfAttention`` ``mine`` and return ``mine``.

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
            "theirs has no RoPE (rope=None); MyCausalSelfAttention rotates q and k: "
            "build it with rope=mh.RotaryEmbedding(d_head)"
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
    return load_package_weights(mine, theirs)


def projection(module: nn.Module, name: str) -> nn.Linear:
    """The learner's ``nn.Linear`` named ``name`` (``w_q``, ``w_k``, ``w_v`` or ``w_o``) of ``module``; TypeError
    when there is none."""
    layer = getattr(module, name, None)
    if not isinstance(layer, nn.Linear):
        raise TypeError(
            f"mine must have an nn.Linear named {name} (notebook 06's MyCausalSelfAttention: w_q, w_k, w_v, w_o), "
            f"got {type(layer).__name__} in {type(module).__name__}"
        )
    return layer


@torch.no_grad()
def copy_gqa_weights(mine: nn.Module, theirs: MultiHeadSelfAttention) -> nn.Module:
    """Copy the package's attention ``theirs`` into the learner's module ``mine`` (in place; returns it).

    ``mine`` has ``w_q``, ``w_k``, ``w_v`` ``(d_model, d_in)`` and ``w_o`` ``(d_model, d_model)``.
    ``theirs`` may group its key/value heads: each of its ``num_kv_heads`` heads of ``W_K`` and ``W_V``
    (and their biases) is repeated for the ``num_heads // num_kv_heads`` query heads it serves. Both
    must rotate by RoPE on interleaved pairs, as notebook 06's module does, and have biases alike.
    """
    if not isinstance(theirs, MultiHeadSelfAttention):
        raise TypeError(f"theirs must be the package's MultiHeadSelfAttention, got {type(theirs).__name__}")
    if not theirs.causal or theirs.rope is None or theirs.rope.convention != "interleaved":
        raise ValueError(
            "theirs must be causal with RoPE on interleaved pairs (what notebook 06's module computes), got "
            f"causal={theirs.causal}, rope={'off' if theirs.rope is None else theirs.rope.convention}"
        )
    if theirs.rope.scaling is not None:
        raise ValueError(f"theirs stretches RoPE ({theirs.rope.scaling}); notebook 06's module does not")
    w_q, w_k, w_v, w_o = (projection(mine, name) for name in ("w_q", "w_k", "w_v", "w_o"))
    d_model, d_in, heads, d_head = theirs.d_model, theirs.d_in, theirs.num_heads, theirs.d_head
    groups = heads // theirs.num_kv_heads
    for name, layer, shape in (("w_q", w_q, (d_model, d_in)), ("w_k", w_k, (d_model, d_in)),
                               ("w_v", w_v, (d_model, d_in)), ("w_o", w_o, (theirs.d_out, d_model))):  # fmt: skip
        if tuple(layer.weight.shape) != shape:
            raise ValueError(
                f"mine.{name}.weight must have shape {shape} to hold theirs ({heads} heads of {d_head}, d_in={d_in}), "
                f"got {tuple(layer.weight.shape)}"
            )
    biases = (theirs.qkv_proj.bias is not None, theirs.out_proj.bias is not None)
    if (w_q.bias is not None, w_o.bias is not None) != biases:
        raise ValueError(
            f"mine and theirs must both have biases or both not: theirs has qkv bias {biases[0]}, out bias "
            f"{biases[1]}; mine has w_q bias {w_q.bias is not None}, w_o bias {w_o.bias is not None}"
        )

    def per_query_head(rows: torch.Tensor) -> torch.Tensor:
        # (kv_heads * d_head, ...) -> (heads * d_head, ...): kv head g serves query heads g*groups .. g*groups+groups-1.
        by_head = rows.reshape(theirs.num_kv_heads, d_head, *rows.shape[1:])
        return by_head.repeat_interleave(groups, dim=0).reshape(heads * d_head, *rows.shape[1:])

    sizes = (d_model, theirs.kv_dim, theirs.kv_dim)
    q, k, v = theirs.qkv_proj.weight.split(sizes)
    w_q.weight.copy_(q)
    w_k.weight.copy_(per_query_head(k))
    w_v.weight.copy_(per_query_head(v))
    w_o.weight.copy_(theirs.out_proj.weight)
    if theirs.qkv_proj.bias is not None:
        q_bias, k_bias, v_bias = theirs.qkv_proj.bias.split(sizes)
        cast(torch.Tensor, w_q.bias).copy_(q_bias)
        cast(torch.Tensor, w_k.bias).copy_(per_query_head(k_bias))
        cast(torch.Tensor, w_v.bias).copy_(per_query_head(v_bias))
    if theirs.out_proj.bias is not None:
        cast(torch.Tensor, w_o.bias).copy_(theirs.out_proj.bias)
    return mine


class CacheWithLengthAndAppend:
    """The smallest cache the learner's module must work with (notebook 06's contract): ``length``, the
    number of tokens held, and ``append(k, v)``, which adds ``(batch, heads, new, d_head)`` keys and values
    (or ``(batch, new, d_model)``, held before the split into heads: along the second-to-last axis either way)
    and returns all of them so far. Nothing else: a module that needs more fails at its own line."""

    def __init__(self) -> None:
        self.length = 0
        self._held: tuple[torch.Tensor, torch.Tensor] | None = None

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self._held is not None:
            k, v = torch.cat((self._held[0], k), dim=-2), torch.cat((self._held[1], v), dim=-2)
        self._held, self.length = (k, v), k.shape[-2]
        return k, v


# ------------------------------------------------------------------ what a notebook's module promises


@dataclass(frozen=True)
class Contract:
    """How a notebook builds and calls the learner's module.

    ``signature`` is the constructor as the notebook writes it; ``build(learner, d_in, d_model, num_heads,
    bias, rope_base)`` calls it; ``loader(mine, theirs)`` copies a package module into it. ``causal``,
    ``rope`` and ``cache`` say what its ``forward`` does: a mask, rotary positions, and ``forward(x,
    cache=None, need_weights=False)`` with a cache of :class:`CacheWithLengthAndAppend`'s contract."""

    signature: str
    build: Callable[[Any, int, int, int, bool, float], Any]
    loader: Callable[[nn.Module, MultiHeadSelfAttention], Any]
    causal: bool = False
    rope: bool = False
    cache: bool = False

    @property
    def recipe(self) -> Recipe:
        """The right recipe of this contract."""
        return replace(RIGHT, causal=self.causal, rope=self.rope)

    def package(self, setting: ModuleSetting) -> MultiHeadSelfAttention:
        """The package module that computes what a right module of this contract computes at ``setting``."""
        return MultiHeadSelfAttention(
            setting.d_model, setting.num_heads, num_kv_heads=setting.kv_heads, d_in=setting.d_in,
            qkv_bias=setting.bias, out_bias=setting.bias, causal=self.causal,
            rope=RotaryEmbedding(setting.d_model // setting.num_heads, 64, setting.rope_base) if self.rope else None,
        )  # fmt: skip


def _build_with_keywords(
    learner: Any, d_in: int, d_model: int, num_heads: int, bias: bool, rope_base: float, *, rope: bool = False
) -> Any:
    """``learner(d_model, num_heads)`` as notebooks 04 and 06 write it, with a keyword only where the setting
    differs from its default: ``d_in``, ``bias=False``, and ``rope_base`` for a module with RoPE (``rope``)."""
    kwargs: dict[str, Any] = {}
    if d_in != d_model:
        kwargs["d_in"] = d_in
    if not bias:
        kwargs["bias"] = False
    if rope and rope_base != 10000.0:
        kwargs["rope_base"] = rope_base
    return learner(d_model, num_heads, **kwargs)


#: Notebook 04's ``MyMultiHeadAttention(d_model, num_heads, *, d_in=None, bias=True)``: no mask, no positions.
MULTI_HEAD_CONTRACT = Contract(
    "MyMultiHeadAttention(d_model, num_heads, *, d_in=None, bias=True)", _build_with_keywords, load_package_weights
)

#: Notebook 06's ``MyCausalSelfAttention``: notebook 04's constructor plus ``rope_base``; causal, RoPE on
#: interleaved pairs, a cache; notebooks 07 and 11 use it.
CAUSAL_CONTRACT = Contract(
    "MyCausalSelfAttention(d_model, num_heads, *, d_in=None, bias=True, rope_base=10000.0)",
    functools.partial(_build_with_keywords, rope=True),
    copy_package_weights,
    causal=True,
    rope=True,
    cache=True,
)


# ------------------------------------------------------------------ the known mistakes


@dataclass(frozen=True)
class ModuleMistake:
    """One wrong step of the recipe: the :class:`Recipe` fields it changes, its name, the idea behind it
    (``hint``), the fix, and where to look (``symptom``: the step, without naming the mistake)."""

    name: str
    change: dict[str, Any]
    hint: str
    fix: str
    symptom: str


_HEAD_SLICES = "head h owns the consecutive features h * d_head .. (h + 1) * d_head - 1"

#: Every mistake the diagnosis can name, one step each.
MODULE_MISTAKES: tuple[ModuleMistake, ...] = (
    ModuleMistake(
        "view without transpose when splitting",
        {"split": "view"},
        "Viewing (batch, seq, d_model) straight as (batch, heads, seq, d_head) runs, but fills each head with "
        "features of different positions.",
        "View as (batch, seq, heads, d_head) first, then .transpose(1, 2).",
        "Look at how q, k and v are split into heads.",
    ),
    ModuleMistake(
        "heads take every h-th feature",
        {"split": "strided"},
        f"Cutting the features as (d_head, heads) gives head i features i, i + h, ...; {_HEAD_SLICES}, the rows "
        "of W_Q that belong to it.",
        "Cut the last axis as (heads, d_head): x.view(batch, seq, heads, d_head).transpose(1, 2).",
        "Look at how q, k and v are split into heads.",
    ),
    ModuleMistake(
        "merge without transposing back",
        {"merge": "reshape"},
        "The head outputs (batch, heads, seq, d_head) reshaped straight to (batch, seq, d_model) mix positions.",
        "Transpose back to (batch, seq, heads, d_head) first, then flatten the last two axes.",
        "Look at how the heads are merged back.",
    ),
    ModuleMistake(
        "forgot W_O",
        {"project_out": False},
        "Without the output projection each output feature comes from one head: nothing mixes what the heads found.",
        "Finish forward with self.w_o(merged).",
        "Look at what forward does after the heads are merged.",
    ),
    ModuleMistake(
        "one head: num_heads ignored",
        {"one_head": True},
        "Scores over all d_model features at once are single-head attention: each head needs its own weights.",
        "Split q, k and v into num_heads heads of d_head = d_model // num_heads features before the scores.",
        "Look at how many heads the scores are computed for.",
    ),
    ModuleMistake(
        "scaled by √d_model instead of √d_head",
        {"scale": "sqrt d_model"},
        "Each head is its own attention over d_head features: the spread of its scores grows like √d_head.",
        "Divide each head's scores by math.sqrt(d_head), d_head = d_model // num_heads.",
        "Look at how the scores are scaled.",
    ),
    ModuleMistake(
        "divided by d_head without the square root",
        {"scale": "d_head"},
        "The spread of q·k grows like √d_head; dividing by d_head shrinks the scores too far and flattens the weights.",
        "Divide by math.sqrt(d_head), not by d_head.",
        "Look at how the scores are scaled.",
    ),
    ModuleMistake(
        "no √d_head scaling",
        {"scale": "none"},
        "Unscaled scores grow with √d_head, and the softmax turns them into nearly one-hot weights.",
        "Divide the scores by math.sqrt(d_head) before the softmax.",
        "Look at how the scores are scaled.",
    ),
    ModuleMistake(
        "scores as K·Qᵀ (keys and queries swapped)",
        {"scores": "k q"},
        "Score (i, j) is query i · key j, so that row i is where token i looks; K·Qᵀ gives how much token i is "
        "looked at instead.",
        "scores = q @ k.transpose(-2, -1).",
        "Look at how the scores are formed from q and k.",
    ),
    ModuleMistake(
        "softmax over the queries axis",
        {"softmax_dim": -2},
        "Each query shares its attention among the keys: its row, the last axis, sums to 1.",
        "softmax(scores, dim=-1).",
        "Look at the axis the softmax normalises.",
    ),
    ModuleMistake(
        "softmax over the heads axis",
        {"softmax_dim": -3},
        "Each head's query rows are normalised over the keys, not across the heads.",
        "softmax(scores, dim=-1).",
        "Look at the axis the softmax normalises.",
    ),
    ModuleMistake(
        "no causal mask",
        {"causal": False},
        "A decoder's token i may attend to tokens 0 .. i only: without a mask it reads the future (so does a mask "
        "whose offset is read after appending to the cache: it counts the new tokens too and hides nothing).",
        "Fill the scores of later keys with -inf before the softmax: tril(diagonal=past), past read before appending.",
        "Look at which keys a token may attend to.",
    ),
    ModuleMistake(
        "a causal mask in a module without one",
        {"causal": True},
        "Notebook 04's module lets every token attend to every other, as an encoder does; the causal mask comes "
        "with notebook 06's decoder.",
        "Leave out the mask here: softmax over all the keys.",
        "Look at which keys a token may attend to.",
    ),
    ModuleMistake(
        "RoPE applied to V",
        {"rotated": "qkv"},
        "Positions should change who attends to whom (the scores), not the content that is mixed: rotated values "
        "make the output depend on absolute positions.",
        "Rotate q and k only; leave v as it is.",
        "Look at which tensors RoPE turns.",
    ),
    ModuleMistake(
        "no RoPE",
        {"rotated": ""},
        "Without rotary positions the scores do not depend on where the tokens are.",
        "Rotate q and k by their positions (your my_apply_rope of notebook 05) after splitting the heads.",
        "Look at which tensors RoPE turns.",
    ),
    ModuleMistake(
        "RoPE on the queries only",
        {"rotated": "q"},
        "q_m · k_n depends on m - n only when both are rotated by their positions.",
        "Rotate the keys too.",
        "Look at which tensors RoPE turns.",
    ),
    ModuleMistake(
        "RoPE on the keys only",
        {"rotated": "k"},
        "q_m · k_n depends on m - n only when both are rotated by their positions.",
        "Rotate the queries too.",
        "Look at which tensors RoPE turns.",
    ),
    ModuleMistake(
        "rotating pairs half-split instead of interleaved",
        {"pairs": "half_split"},
        "Notebook 05's RoPE (and this contract) pairs neighbouring features (x[2i], x[2i+1]); half-split pairs "
        "(x[i], x[i + d/2]) are another model's convention.",
        "Pair x[..., 0::2] with x[..., 1::2] and interleave the rotated pairs back.",
        "Look at which features RoPE pairs.",
    ),
    ModuleMistake(
        "RoPE frequencies base^(-i/d_head) instead of base^(-2i/d_head)",
        {"frequencies": "i/d"},
        "Pair i turns at theta_i = base ** (-2i / d_head): the slowest pair turns once per base tokens.",
        "theta = base ** (-torch.arange(0, d_head, 2) / d_head).",
        "Look at RoPE's frequencies.",
    ),
    ModuleMistake(
        "RoPE exponent computed with integer division",
        {"frequencies": "2i//d"},
        "2 * i // d_head is 0 for every pair, so every pair turns at the same speed, one radian per position.",
        "Divide as floats: theta = base ** (-torch.arange(0, d_head, 2) / d_head).",
        "Look at RoPE's frequencies.",
    ),
    ModuleMistake(
        "RoPE applied before splitting the heads",
        {"frequencies": "d_model"},
        "RoPE works inside each head, with frequencies base ** (-2i / d_head); rotated over all d_model features, "
        "pair i turns at base ** (-2i / d_model) instead: only the first pair of the first head turns as it should.",
        "Split q and k into heads first, then rotate each (seq, d_head) matrix.",
        "Look at where in forward RoPE is applied.",
    ),
    ModuleMistake(
        "RoPE turns the wrong way",
        {"sign": -1},
        "Pair (x1, x2) turns to (x1 cos - x2 sin, x1 sin + x2 cos): with the signs of sin swapped, every angle is "
        "negated and the scores of m - n become those of n - m.",
        "x1 * cos - x2 * sin, then x1 * sin + x2 * cos.",
        "Look at the direction RoPE turns the pairs.",
    ),
    ModuleMistake(
        "rope_base ignored",
        {"base": 10000.0},
        "The module's rope_base sets the frequencies; a fixed 10000 gives another model.",
        "theta = self.rope_base ** (-torch.arange(0, d_head, 2) / d_head).",
        "Look at RoPE's base.",
    ),
    ModuleMistake(
        "positions not offset by the cache",
        {"positions": "zero"},
        "New tokens continue the sequence: after past cached tokens they sit at positions past, past + 1, ...",
        "past = cache.length, read before appending; rotate at torch.arange(past, past + seq).",
        "Look at the positions the new tokens are rotated at.",
    ),
    ModuleMistake(
        "positions read after appending to the cache",
        {"positions": "past+new"},
        "cache.length after append counts the new tokens too: their positions then start seq too late.",
        "Read past = cache.length before calling cache.append.",
        "Look at the positions the new tokens are rotated at.",
    ),
    ModuleMistake(
        "mask not offset by the cache",
        {"mask": "top-left"},
        "With past cached keys the queries are the last rows: query i sits at past + i and sees keys 0 .. past + i.",
        "tril(diagonal=past) on the (seq, past + seq) rectangle; a plain tril() (or is_causal=True) hides the cache.",
        "Look at the mask of the new tokens under a cache.",
    ),
    ModuleMistake(
        "cached keys left unrotated",
        {"cached_keys": "unrotated"},
        "The cache stores the keys the scores use: stored before RoPE and never rotated later, the old keys lose "
        "their positions.",
        "Rotate the new keys first, then append them to the cache.",
        "Look at the keys the cache holds and what forward does with them.",
    ),
    ModuleMistake(
        "cached keys rotated twice",
        {"cached_keys": "rotated twice"},
        "The cache already holds rotated keys: turning all of them again adds their positions twice.",
        "Rotate only the new keys, at their positions, and append them.",
        "Look at the keys the cache holds and what forward does with them.",
    ),
)


def _mistakes_of(recipe: Recipe, contract: Contract) -> list[ModuleMistake]:
    """The known mistakes whose steps ``recipe`` has."""
    wrong = recipe.mistakes(contract.recipe)
    return [m for m in MODULE_MISTAKES if all(wrong.get(k, object()) == v for k, v in m.change.items())]


# ------------------------------------------------------------------ diagnosing by isolating

#: The probes' module: 2 heads of 8 features read 16 input features; 6 tokens, so that a head's 8 values can
#: carry a one-hot position each and give back the attention weights; a RoPE base other than 10000.
_HEADS, _D_HEAD, _TOKENS, _PROBE_BASE = 2, 8, 6, 100.0
_D = _HEADS * _D_HEAD
_CHUNKS = (3, 2, 1)


@dataclass(frozen=True)
class Diagnosis:
    """What the isolating probes found. ``mistakes``: the known mistakes every recipe left has (empty when
    none is singled out). ``differs``: where to look, the first probe on which the module is not right
    ("" when every probe gives the right recipe's numbers). ``unexplained``: True when no known recipe
    gives what the module gives on that probe."""

    mistakes: tuple[ModuleMistake, ...] = ()
    differs: str = ""
    unexplained: bool = False


@dataclass(frozen=True)
class _Probe:
    """Crafted weights ``params`` and input ``x`` (fed in ``chunks`` through a cache when given), where to look
    when a module differs on them, and the steps (``options``: changes to a recipe) that can change its numbers."""

    look: str
    params: Params
    x: torch.Tensor
    options: Callable[[Recipe, Contract], Iterator[dict[str, Any]]]
    chunks: tuple[int, ...] = ()


def _product(**choices: Sequence[Any]) -> Iterator[dict[str, Any]]:
    for values in itertools.product(*choices.values()):
        yield dict(zip(choices, values, strict=True))


_SCALES = ("sqrt d_head", "sqrt d_model", "d_head", "none")
_FREQUENCIES = ("2i/d", "i/d", "2i//d", "d_model")


def _value_options(recipe: Recipe, contract: Contract) -> Iterator[dict[str, Any]]:
    return _product(
        split=("heads", "view", "strided"),
        merge=("heads", "reshape"),
        project_out=(True, False),
        softmax_dim=(-1, -2, -3),
        causal=(True, False),
        rotated=("qk", "qkv") if contract.rope else ("qk",),
    )


def _rope_options(recipe: Recipe, contract: Contract) -> Iterator[dict[str, Any]]:
    # Every step that moves the scores when only the positions differ: the rotation and the scores' own steps.
    v = "v" if "v" in recipe.rotated else ""
    turns = _product(pairs=("interleaved", "half_split"), frequencies=_FREQUENCIES, sign=(1, -1), base=(None, 10000.0))
    rotations = [{"rotated": v}] + [{"rotated": r + v, **turn} for turn in turns for r in ("qk", "q", "k")]
    for rotation, scoring in itertools.product(rotations, list(_scoring(recipe, contract))):
        yield {**rotation, **scoring}


def _scoring(recipe: Recipe, contract: Contract) -> Iterator[dict[str, Any]]:
    return _product(scores=("q k", "k q"), one_head=(False, True), scale=_SCALES)


def _score_options(recipe: Recipe, contract: Contract) -> Iterator[dict[str, Any]]:
    # With RoPE the positions' probe has tried every way of scoring already, beside every rotation.
    return iter([{}]) if contract.rope else _scoring(recipe, contract)


def _cache_options(recipe: Recipe, contract: Contract) -> Iterator[dict[str, Any]]:
    return _product(
        positions=("past", "zero", "past+new") if contract.rope else ("past",),
        mask=("past", "top-left") if recipe.causal else ("past",),
        cached_keys=("rotated", "unrotated", "rotated twice") if contract.rope else ("rotated",),
    )


def _probes(contract: Contract) -> list[_Probe]:
    """The crafted weights and inputs, each isolating a few steps of the recipe."""
    g = torch.Generator().manual_seed(2468)
    batch = 2

    def randn(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return torch.randn(*shape, generator=g, dtype=torch.float64) * scale

    positions = torch.eye(_TOKENS, _D, dtype=torch.float64).expand(batch, _TOKENS, _D)  # token t: feature t is 1
    reads_positions = torch.zeros(_D, _D, dtype=torch.float64)  # each head's value: the one-hot of its position
    for h in range(_HEADS):
        reads_positions[h * _D_HEAD : h * _D_HEAD + _TOKENS, :_TOKENS] = torch.eye(_TOKENS, dtype=torch.float64)
    content = torch.zeros(_D, _D, dtype=torch.float64)

    def reads_content() -> torch.Tensor:  # W_Q or W_K reading the features after the position's
        w = content.clone()
        w[:, _TOKENS:] = randn(_D, _D - _TOKENS, scale=0.8)
        return w

    zero = torch.zeros(_D, dtype=torch.float64)
    values_only = {
        "w_q": torch.zeros(_D, _D, dtype=torch.float64), "w_k": torch.zeros(_D, _D, dtype=torch.float64),
        "w_v": randn(_D, _D, scale=0.5), "w_o": randn(_D, _D, scale=0.5),
        "b_q": zero, "b_k": zero, "b_v": randn(_D, scale=0.1), "b_o": randn(_D, scale=0.1),
    }  # fmt: skip
    reading = {
        "w_q": reads_content(), "w_k": reads_content(), "w_v": reads_positions,
        "w_o": torch.eye(_D, dtype=torch.float64), "b_q": zero, "b_k": zero, "b_v": zero, "b_o": zero,
    }  # fmt: skip
    same_content = positions.clone()
    same_content[..., _TOKENS:] = randn(1, 1, _D - _TOKENS)
    own_content = positions.clone()
    own_content[..., _TOKENS:] = randn(batch, _TOKENS, _D - _TOKENS)
    where = "look at the split into heads, the merge and W_O" + (", the mask" if contract.causal else "")
    probes = [
        _Probe(
            f"with every score equal (W_Q = W_K = 0), your module's output already differs: {where}"
            + (", and what RoPE turns" if contract.rope else ""),
            values_only,
            randn(batch, _TOKENS, _D),
            options=_value_options,
        )
    ]
    if contract.rope:
        probes.append(
            _Probe(
                "with the same content at every position, where only RoPE moves the scores, your module's weights "
                "differ: look at the rotation (its pairs, frequencies, direction and base, and which of q and k "
                "it turns)",
                reading,
                same_content,
                options=_rope_options,
            )
        )
    probes.append(
        _Probe(
            "with values that give the attention weights back, your module's weights differ: look at the scores "
            "(q · kᵀ), their scaling and the softmax",
            reading,
            own_content,
            options=_score_options,
        )
    )
    if contract.cache:
        probes.append(
            _Probe(
                "fed through one cache in chunks of 3, 2 and 1 tokens, a later chunk differs: look at what forward "
                "reads from the cache (the positions' and the mask's offset) and what it appends",
                reading,
                own_content,
                options=_cache_options,
                chunks=_CHUNKS,
            )
        )
    return probes


def _through_recipe(recipe: Recipe, params: Params, x: torch.Tensor, chunks: tuple[int, ...]) -> torch.Tensor:
    if not chunks:
        return attend(recipe, params, x, _HEADS)[0]
    outputs, cached, start = [], None, 0
    for size in chunks:
        out, _, cached = attend(recipe, params, x[:, start : start + size], _HEADS, cached)
        outputs.append(out)
        start += size
    return torch.cat(outputs, dim=1)


def _through_module(module: nn.Module, x: torch.Tensor, chunks: tuple[int, ...]) -> torch.Tensor:
    if not chunks:
        return _tensor(module(x))
    cache, start, outputs = CacheWithLengthAndAppend(), 0, []
    for size in chunks:
        outputs.append(_tensor(module(x[:, start : start + size], cache=cache)))
        start += size
    return torch.cat(outputs, dim=1)


def _tensor(value: Any) -> torch.Tensor:
    # A module that returns (out, weights) without need_weights is named by the behaviour checks first.
    return value[0] if isinstance(value, (tuple, list)) else value


def _close(got: torch.Tensor, want: torch.Tensor) -> bool:
    return got.shape == want.shape and torch.allclose(got.double(), want.double(), atol=1e-6, rtol=1e-5, equal_nan=True)


def _key(recipe: Recipe) -> tuple:
    return tuple(sorted(recipe.mistakes(RIGHT).items()))


def diagnose(learner: Any, contract: Contract) -> Diagnosis:
    """Which steps of the recipe the module that ``learner`` builds gets wrong, found by isolating them.

    The module is built at the probes' size (2 heads of 8, 16 input features, RoPE base 100), in float64,
    and driven through each probe of :func:`_probes` in turn; the recipes that give its outputs exactly on
    every probe so far are kept. A mistake is named only when every recipe left has it. Each probe tries every
    step that can change its numbers, so that a mistake is never taken for another; when no known recipe
    explains a probe, what the earlier probes singled out stands and the probe says where to look."""
    try:
        module = contract.build(learner, _D, _D, _HEADS, True, _PROBE_BASE).double()
    except Exception:  # a module the settings could build at their sizes but not at the probes'
        return Diagnosis()
    candidates = [replace(contract.recipe, rope_base=_PROBE_BASE)]
    first_wrong = ""
    for probe in _probes(contract):
        try:
            _set_weights(module, probe.params)
            with torch.no_grad():
                got = _through_module(module, probe.x, probe.chunks)
        except Exception:  # the module fails on this probe: what the earlier ones singled out stands
            found = tuple(_common_mistakes(candidates, contract))
            return Diagnosis(found, first_wrong or probe.look, unexplained=not found)
        if not first_wrong and not _close(got, _through_recipe(candidates[0], probe.params, probe.x, probe.chunks)):
            first_wrong = probe.look
        survivors: dict[tuple, Recipe] = {}
        for recipe in candidates:
            for change in probe.options(recipe, contract):
                option = replace(recipe, **change)
                if _key(option) in survivors:
                    continue
                try:
                    fits = _close(got, _through_recipe(option, probe.params, probe.x, probe.chunks))
                except RuntimeError:  # a recipe whose shapes do not fit this probe (K·Qᵀ under a cache)
                    fits = False
                if fits:
                    survivors[_key(option)] = option
        if not survivors:
            common = _common_mistakes(candidates, contract)
            return Diagnosis(tuple(common), first_wrong or probe.look, unexplained=True)
        candidates = list(survivors.values())
    return Diagnosis(tuple(_common_mistakes(candidates, contract)), first_wrong)


def _common_mistakes(candidates: Sequence[Recipe], contract: Contract) -> list[ModuleMistake]:
    found = [{m.name for m in _mistakes_of(recipe, contract)} for recipe in candidates]
    common = set.intersection(*found) if found else set()
    return [m for m in MODULE_MISTAKES if m.name in common]


# ------------------------------------------------------------------ how the notebooks call the module


@dataclass(frozen=True)
class Call:
    """One way a notebook calls the module on ``x (batch, seq, d_in)``: ``"full"`` (``module(x)``),
    ``"weights"`` (``need_weights=True`` without a cache, as notebook 07 trains it), ``"chunks"`` (pieces of
    ``chunks`` tokens through one cache, the last with ``need_weights=True``), ``"tokens"`` (one at a time
    through one cache) or ``"again"`` (after another sequence through the same module)."""

    kind: str
    batch: int
    seq: int
    chunks: tuple[int, ...] = ()

    def describe(self, d_in: int) -> str:
        shape = (self.batch, self.seq, d_in)
        if self.kind == "chunks":
            sizes = ", ".join(map(str, self.chunks[:-1])) + f" and {self.chunks[-1]}"
            return f"x {shape} fed in chunks of {sizes} tokens through one cache"
        return (
            f"x {shape}, "
            + {
                "full": "full pass",
                "weights": "need_weights=True",
                "tokens": "token by token through one cache",
                "again": "right after another sequence through the same module",
            }[self.kind]
        )

    def outputs(self) -> tuple[str, ...]:
        """The names of what the call gives, for the messages."""
        if self.kind == "weights":
            return ("output", "attention weights")
        if self.kind == "chunks":
            cached = itertools.accumulate((0, *self.chunks[:-1]))
            parts = [
                f"chunk {i + 1} ({n} token{'s' if n > 1 else ''}{f' after {p} cached' if p else ''})"
                for i, (n, p) in enumerate(zip(self.chunks, cached, strict=True))
            ]
            return (*parts, "attention weights of the last chunk")
        return ("output",)


def _form(value: Any, need_weights: bool) -> Any:
    """The output of one forward call, checked for the form the contract asks."""
    if need_weights:
        if not (isinstance(value, (tuple, list)) and len(value) == 2):
            raise AnswerRejected("with need_weights=True, forward must return (output, weights)")
        return tuple(value)
    if isinstance(value, (tuple, list)):
        raise AnswerRejected("without need_weights=True, forward must return the output tensor alone")
    return value


def run_call(
    module: Callable[..., Any], x: torch.Tensor, call: Call, cache_type: type = CacheWithLengthAndAppend
) -> Any:
    """What ``module`` gives for ``call`` on ``x``: a tensor, or a tuple named by :meth:`Call.outputs`."""
    if call.kind == "full":
        return _form(module(x), False)
    if call.kind == "weights":
        return _form(module(x, need_weights=True), True)
    if call.kind == "again":
        _form(module(0.5 * x.flip(1)), False)
        return _form(module(x), False)
    cache = cache_type()
    sizes = call.chunks or (1,) * x.shape[1]
    outputs, start = [], 0
    for i, size in enumerate(sizes):
        last = call.kind == "chunks" and i == len(sizes) - 1
        outputs.append(_form(module(x[:, start : start + size], cache=cache, need_weights=last), last))
        start += size
    if call.kind == "tokens":
        return torch.cat(outputs, dim=1)
    return (*outputs[:-1], *outputs[-1])


@dataclass(frozen=True)
class ModuleSetting:
    """One size to build the learner's module at, and the calls to make on it (in ``dtype``). With ``kv_heads``
    (fewer than ``num_heads``) the package module groups its key/value heads and its weights go into the
    learner's module as notebook 11 puts a real model's there (:func:`copy_gqa_weights`)."""

    d_in: int
    d_model: int
    num_heads: int
    bias: bool = True
    rope_base: float = 10000.0
    calls: tuple[Call, ...] = ()
    dtype: torch.dtype = torch.float32
    kv_heads: int | None = None

    def describe(self, contract: Contract, name: str) -> str:
        head = contract.signature.split("(", 1)[0]
        extra = [f"d_in={self.d_in}"] if self.d_in != self.d_model else []
        extra += ["bias=False"] if not self.bias else []
        extra += [f"rope_base={self.rope_base:g}"] if contract.rope and self.rope_base != 10000.0 else []
        shown = ", ".join([str(self.d_model), str(self.num_heads), *extra])
        text = f"{name if name else head}({shown})"
        if self.kv_heads == 1:
            text += " holding weights whose one key/value head is shared by every query head"
        elif self.kv_heads:
            text += f" holding weights whose {self.kv_heads} key/value heads are each shared by several query heads"
        return text + (" in float64" if self.dtype == torch.float64 else "")


def _calls(*made: Call) -> tuple[Call, ...]:
    return made


#: Notebook 06's sizes: full passes, need_weights=True without a cache (how notebook 07 trains the module),
#: chunks of uneven sizes through one cache (notebook 11 decodes so), token by token, a second sequence after a
#: first, and a grouped model's weights copied in (notebook 11's). 17 tokens: longer than a fixed (16, 16) mask
#: or RoPE table.
CAUSAL_SETTINGS = (
    ModuleSetting(8, 8, 2, calls=_calls(
        Call("full", 2, 5), Call("full", 1, 1), Call("weights", 2, 6), Call("chunks", 2, 7, (3, 2, 2)),
        Call("tokens", 1, 6), Call("again", 2, 5),
    )),
    ModuleSetting(6, 12, 3, rope_base=100.0, calls=_calls(
        Call("full", 1, 17), Call("chunks", 2, 7, (5, 2)), Call("tokens", 1, 7), Call("weights", 1, 4),
    )),
    ModuleSetting(16, 16, 4, bias=False, calls=_calls(Call("full", 3, 7), Call("chunks", 1, 9, (4, 1, 4)))),
    ModuleSetting(8, 8, 1, calls=_calls(Call("full", 2, 4), Call("tokens", 1, 5), Call("chunks", 1, 5, (2, 3)))),
    ModuleSetting(16, 16, 4, bias=False, kv_heads=2, calls=_calls(Call("full", 2, 6), Call("chunks", 1, 8, (5, 1, 2)))),
)  # fmt: skip


def _drawn_settings(learner: Any, contract: Contract) -> list[ModuleSetting]:
    """Two settings drawn for this answer (seeded by its code): sizes, biases and a RoPE base it cannot be
    fitted to, the second in float64."""
    g = torch.Generator().manual_seed(answer_seed(learner))

    def pick(options: Sequence[Any]) -> Any:
        return options[int(torch.randint(len(options), (1,), generator=g))]

    settings = []
    for dtype in (torch.float32, torch.float64):
        heads, d_head = pick((1, 2, 3, 4)), pick((2, 4, 6))
        d_in = pick((3, 5, 7, 12))
        seq = pick((3, 5, 6, 9))
        split = pick(range(1, seq))
        calls = [Call("full", pick((1, 2, 3)), seq), Call("again", 2, seq)]
        if contract.cache:
            calls += [Call("weights", 2, seq), Call("chunks", 2, seq, (split, seq - split)), Call("tokens", 1, seq)]
        settings.append(
            ModuleSetting(
                d_in,
                heads * d_head,
                heads,
                bias=pick((True, False)),
                rope_base=pick((10000.0, 500.0)),
                calls=tuple(calls),
                dtype=dtype,
            )
        )
    return settings


# ------------------------------------------------------------------ the module checker


def _name(learner: Any) -> str:
    # A learner with no name of its own (a functools.partial, say) is told as the contract's class.
    return getattr(learner, "__name__", "")


def _build(exercise: str, learner: Any, contract: Contract, setting: ModuleSetting) -> nn.Module | CheckResult:
    built = setting.describe(contract, _name(learner))
    changes: list[str] = []
    try:
        # Building draws the layers' random initial weights: that use of the generator is expected.
        with watching_settings(changes, ignore=("rng",)):
            module = contract.build(
                learner, setting.d_in, setting.d_model, setting.num_heads, setting.bias, setting.rope_base
            )
    except NotImplementedError:
        return CheckResult(
            exercise, "not_attempted", f"[{exercise}] not attempted yet: replace the `raise NotImplementedError` lines."
        )
    except Exception as error:  # the learner's constructor may fail in any way: report it at their line
        return CheckResult(
            exercise, "error", f"[{exercise}] {built} raised {type(error).__name__}: {error}{learner_line(error)}."
        )
    if changes:
        return state_changed(exercise, changes)
    if module is None:
        return CheckResult(
            exercise, "incorrect", f"[{exercise}] not yet: {built} returned None — did you forget `return`?"
        )
    if not isinstance(module, nn.Module):
        return CheckResult(
            exercise, "error", f"[{exercise}] not yet: {built} gave {type(module).__name__}, not an nn.Module."
        )
    if type(module).forward is nn.Module.forward:
        return CheckResult(
            exercise,
            "error",
            f"[{exercise}] not yet: {built} has no `forward` method: PyTorch calls "
            "`forward(self, x, ...)` when the module is called.",
        )
    missing = [p for p in PROJECTIONS if not isinstance(getattr(module, p, None), nn.Linear)]
    if missing:
        return CheckResult(
            exercise,
            "incorrect",
            f"[{exercise}] not yet: {built} has no nn.Linear named {', '.join(missing)}. The checker copies the "
            "package's weights into self.w_q, self.w_k, self.w_v (d_in -> d_model) and self.w_o (d_model -> d_model).",
        )
    if not setting.bias:
        with_bias = [p for p in PROJECTIONS if getattr(module, p).bias is not None]
        if with_bias:
            return CheckResult(
                exercise,
                "misconception",
                f"[{exercise}] not yet: {built} still has biases in {', '.join(with_bias)}: pass bias=bias to each "
                "nn.Linear (real models such as Llama have none).",
                misconception="bias=False ignored",
            )
    if contract.cache:
        signature = inspect.signature(module.forward)
        try:
            signature.bind(None, cache=None, need_weights=False)
        except TypeError:
            return CheckResult(
                exercise,
                "incorrect",
                f"[{exercise}] not yet: your forward takes {signature}; it must also take the cache and "
                "need_weights: forward(self, x, cache=None, need_weights=False).",
            )
    return module.to(setting.dtype)


def _observed(exercise: str, name: str, seen: str, hint: str, fix: str) -> CheckResult:
    """A behaviour the checker saw happen: named at once, the fix on request."""
    return CheckResult(
        exercise,
        "misconception",
        f"[{exercise}] not yet: {seen} {hint} `result.reveal()` shows the fix.",
        misconception=name,
        diagnosis=f"[{exercise}] not yet: {seen} {hint}",
        fix=f"[{exercise}] the fix for '{name}': {fix}",
        key=f"mistake: {name}",
    )


def _same(got: torch.Tensor, want: torch.Tensor, atol: float = 0.0) -> bool:
    # NaN where the other has NaN is the same: a module that gives NaN gives it every time.
    return torch.allclose(got, want, atol=atol, rtol=10 * atol, equal_nan=True)


def _parameters(module: nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in module.parameters()]


def _behaviour(exercise: str, module: nn.Module, contract: Contract, x: torch.Tensor) -> CheckResult | None:
    """Before any number is compared: does the module behave as a function of its input?"""
    with torch.no_grad():
        first = module(x)
        if first is None:  # nothing returned: the comparison's own message says so, not a path's
            return None
        if isinstance(first, (tuple, list)) and contract.cache:
            return _observed(
                exercise, "returns (output, weights) without need_weights=True",
                "called as module(x), your forward returned a tuple, not the output tensor.",
                "Notebook 07 and every layer built on yours call it so and take the output alone.",
                "Return the output alone unless need_weights=True: `return (out, weights) if need_weights else out`.",
            )  # fmt: skip
        if isinstance(first, (tuple, list)):
            return _observed(
                exercise, "returns a tuple, not the output",
                "called as module(x), your forward returned a tuple, not the output tensor.",
                "Every layer built on yours calls it so and takes the output alone.",
                "Return the output tensor alone, nothing beside it.",
            )  # fmt: skip
        if contract.cache:
            paired = module(x, need_weights=True)
            if not (isinstance(paired, (tuple, list)) and len(paired) == 2):
                return _observed(
                    exercise, "need_weights=True ignored",
                    "called with need_weights=True, your forward did not return (output, weights).",
                    "Notebook 07 trains your module through exactly that call and reads the weights it returns.",
                    "`return (out, weights) if need_weights else out`, weights (batch, heads, seq, past + seq).",
                )  # fmt: skip
        before, changes = _parameters(module), list[str]()
        with watching_settings(changes):
            again = module(x)
        if any(not torch.equal(a, b) for a, b in zip(before, _parameters(module), strict=True)):
            return _observed(
                exercise, "forward changes the module's weights",
                "calling your module changed its own weights.",
                "forward must only read the weights: an in-place operation on them (`add_`, `+=`, `.data`) changes "
                "every later call, and the optimizer's work.",
                "Compute new tensors from the weights (self.w_q(x)); never write into self.w_q.weight in forward.",
            )  # fmt: skip
        if not _same(first, again):
            if "rng" in changes:
                return _observed(
                    exercise, "random numbers drawn in forward",
                    "the same input gave two different outputs, and forward drew random numbers (dropout?).",
                    "The module of this exercise is a function of its input: no dropout, no noise.",
                    "Remove the dropout (or make its probability 0).",
                )  # fmt: skip
            kept = (
                "Your module keeps something from one call to the next (a tensor or a count stored on self): a cache "
                "lives in the cache argument, nowhere else."
                if contract.cache
                else "Your module keeps something from one call to the next (a tensor or a count stored on self): "
                "each call must compute from its input alone."
            )
            return _observed(
                exercise, "something kept from one call to the next",
                "the same input gave two different outputs in two calls.", kept,
                "Keep nothing on self in forward"
                + ("; positions come from cache.length (0 without a cache)." if contract.cache else "."),
            )  # fmt: skip
        fresh = module(x[1:2])
        if not _same(first[1:2], fresh, atol=1e-5):
            return _observed(
                exercise, "the sequences of a batch are mixed",
                "the second sequence of a batch gave a different output on its own than next to the first.",
                "Each sequence of a batch is attended on its own: the batch axis must stay apart from the others.",
                "Keep the batch axis first and apart: view as (batch, seq, heads, d_head), transpose(1, 2), and "
                "never flatten or reshape across it.",
            )  # fmt: skip
        if contract.cache and not _same(module(x, need_weights=True)[0], first, atol=1e-5):
            return _observed(
                exercise, "need_weights=True takes another path",
                "with need_weights=True your forward returned another output than without it.",
                "need_weights only asks for the weights too: the output must not change (notebook 07 trains through "
                "need_weights=True).",
                "Compute the output one way, and return the weights beside it when asked.",
            )  # fmt: skip
    return None


def _sees_the_future(module: nn.Module, x: torch.Tensor) -> bool:
    with torch.no_grad():
        later = x.clone()
        later[:, -2:] += 1.0  # the last two tokens change; the outputs of the others must not
        return not _same(module(later)[:, :-2], module(x)[:, :-2], atol=1e-5)


def _reference_gradients(recipe: Recipe, params: Params, x: torch.Tensor, num_heads: int) -> dict[str, torch.Tensor]:
    """The gradients of ``attend(recipe, params, x)``'s squared output, summed, by the learner's names."""
    # In float64, where what reaches no weight in theory stays within 1e-12 of 0.
    leaves = {name: None if p is None else p.detach().double().requires_grad_() for name, p in params.items()}
    attend(recipe, leaves, x.double(), num_heads)[0].square().sum().backward()
    return {name: cast(torch.Tensor, p.grad) for name, p in leaves.items() if p is not None}


def _gradients_reach_every_weight(
    exercise: str, module: nn.Module, x: torch.Tensor, reference: dict[str, torch.Tensor]
) -> CheckResult | None:
    """Whether a gradient reaches each weight and bias of the learner's projections that the ``reference``
    gradients (:func:`_reference_gradients`) say one reaches: notebook 04's key bias gets none in theory (it
    adds the same amount to every score of a row, which the softmax ignores), so only rounding reaches it."""
    own = {id(p) for p in module.parameters()}
    largest = max(float(g.abs().max()) for g in reference.values())
    try:
        module(x).square().sum().backward()
    except Exception as error:  # e.g. a tensor the learner made with requires_grad in the wrong place
        return CheckResult(
            exercise,
            "error",
            f"[{exercise}] backward through your module raised {type(error).__name__}: {error}{learner_line(error)}.",
        )
    for name in PROJECTIONS:
        for part, parameter in getattr(module, name).named_parameters():
            label = f"self.{name}.{part}"
            if id(parameter) not in own:
                return CheckResult(
                    exercise,
                    "incorrect",
                    f"[{exercise}] not yet: {label} is not among the "
                    "module's parameters(), so an optimizer would never train it.",
                )
            theirs = reference[("b_" if part == "bias" else "w_") + name[-1]]
            if float(theirs.abs().max()) <= 1e-6 * largest:  # none reaches it in the package's module either
                continue
            if parameter.grad is None or not bool(parameter.grad.abs().sum() > 0):
                return _observed(
                    exercise, "gradients do not reach every weight",
                    f"no gradient reaches {label}.",
                    "Training needs the whole forward on the autograd graph.",
                    "Leave forward out of torch.no_grad(), and use no .detach() or .data on the way.",
                )  # fmt: skip
    return None


def _blocked_key_takes_weight(exercise: str, module: nn.Module, x: torch.Tensor) -> CheckResult | None:
    """Whether the first token, whose one visible key scores far below zero, gives weight to the blocked later
    keys, as a finite fill (-1e4, -1e9) lets it: with no query or key bias and ``W_Q = -1e30 W_K``, its score is
    ``-1e30 |W_K x_0|² / √d_head`` (RoPE turns nothing at position 0). With -inf its weights are exactly
    ``[1, 0, 0, …]``, so its output does not change when later tokens do (:func:`_sees_the_future`)."""
    w_q, w_k = projection(module, "w_q"), projection(module, "w_k")
    with torch.no_grad():
        for layer in (w_q, w_k):
            if layer.bias is not None:
                layer.bias.zero_()
        w_q.weight.copy_(-1e30 * w_k.weight)
    if not _sees_the_future(module, x):
        return None
    return _observed(
        exercise, FINITE_FILL_NAME,
        "when the first token's one visible key scores far below zero (about -1e30), its output changed with the "
        "tokens after it: the blocked later keys took weight.",
        "A finite fill (-1e4 or -1e9) works only while every visible score stays far above it.",
        FINITE_FILL_FIX,
    )  # fmt: skip


def check_module(
    exercise: str,
    learner: Any,
    contract: Contract,
    settings: Sequence[ModuleSetting],
    *,
    seed: int,
    shortcuts: Sequence[str] = (),
    verbose: bool = True,
) -> CheckResult:
    """Check the learner's module class against ``contract`` on ``settings`` (and two settings drawn for the
    answer), as the module docstring describes; print the message when ``verbose``."""
    if not callable(learner):
        raise TypeError(f"learner must be a function or class that builds your module, got {type(learner).__name__}")
    with checking_state():
        result = _check_module(exercise, learner, contract, settings, seed, shortcuts)
    result = escalate(result)
    if verbose:
        print(result.message)
    return result


def _check_module(
    exercise: str,
    learner: Any,
    contract: Contract,
    settings: Sequence[ModuleSetting],
    seed: int,
    shortcuts: Sequence[str],
) -> CheckResult:
    if isinstance(learner, nn.Module) or not callable(learner):
        what = f"a module made from {type(learner).__name__}" if isinstance(learner, nn.Module) else "no class"
        return CheckResult(
            exercise,
            "error",
            f"[{exercise}] not yet: pass your nn.Module class itself (e.g. MyModule), you passed {what}.",
        )
    generator = torch.Generator().manual_seed(seed)
    drawn = _drawn_settings(learner, contract)
    counted = 0
    used: list[str] = []  # the package's functions the module calls (watched at the first given size)
    for number, setting in enumerate([*settings, *drawn]):
        if number == len(settings):  # the given sizes hold: before the drawn ones, does training reach every weight?
            module = _build(exercise, learner, contract, settings[0])
            if isinstance(module, CheckResult):
                return module
            theirs = contract.package(settings[0])
            with torch.no_grad():
                for parameter in theirs.parameters():
                    parameter.normal_(0.0, 0.4, generator=generator)
            (copy_gqa_weights if settings[0].kv_heads else contract.loader)(module, theirs)
            x = torch.randn(2, 5, settings[0].d_in, generator=generator)
            recipe = replace(contract.recipe, rope_base=settings[0].rope_base)
            held = {f"{kind}_{p[-1]}": getattr(projection(module, p), part) for p in PROJECTIONS
                    for kind, part in (("w", "weight"), ("b", "bias"))}  # fmt: skip
            reference = _reference_gradients(recipe, held, x, settings[0].num_heads)
            gradients = _gradients_reach_every_weight(exercise, module, x, reference)
            if gradients is not None:
                return gradients
            if contract.causal and not settings[0].kv_heads:  # (grouped keys have fewer rows than W_Q)
                blocked = _blocked_key_takes_weight(exercise, module, x)
                if blocked is not None:
                    return blocked
        module = _build(exercise, learner, contract, setting)
        if isinstance(module, CheckResult):
            return module
        theirs = contract.package(setting)
        with torch.no_grad():  # random biases, so that a forgotten bias shows
            for parameter in theirs.parameters():
                parameter.normal_(0.0, 0.4, generator=generator)
        theirs = theirs.to(setting.dtype)
        try:
            (copy_gqa_weights if setting.kv_heads else contract.loader)(module, theirs)
        except ValueError as error:
            return CheckResult(
                exercise, "incorrect", f"[{exercise}] not yet: {setting.describe(contract, _name(learner))}: {error}."
            )
        for call in setting.calls:
            x = torch.randn(call.batch, call.seq, setting.d_in, generator=generator).to(setting.dtype)
            counted += 1

            @functools.wraps(run_call)
            def learner_call(x, _module=module, _call=call):
                # Random numbers drawn in forward (dropout) are named by the behaviour seen, not as a setting changed.
                with torch.random.fork_rng(devices=[]):
                    return run_call(_module, x, _call)

            # Errors point into the learner's forward, and an argument changed in place is named after its parameter.
            learner_call.__wrapped__ = module.forward  # read by inspect.unwrap
            found = judge(
                exercise,
                learner_call,
                lambda x, _theirs=theirs, _call=call: run_call(_theirs, x, _call, KVCache),
                [Case((x,), description=call.describe(setting.d_in))],
                output_names=call.outputs(),
                shortcuts=shortcuts if number == 0 else (),
            )
            used += found.shortcuts
            if not found.correct:
                if found.status in ("incorrect", "misconception") and (found.misconception is None or found.key):
                    # A number or a form differs: before naming a step, look at how the module behaves.
                    seen = _seen(exercise, learner, contract, setting, theirs)
                    if seen is not None:
                        return seen
                return _told(exercise, learner, contract, setting, found, number >= len(settings))
    called = ", ".join(f"`{name}`" for name in dict.fromkeys(used))
    return CheckResult(
        exercise,
        "correct",
        f"[{exercise}] correct: gradients reach every weight, and with the package's weights copied in, your module "
        f"gives the package's outputs in {len(settings) + len(drawn)} module sizes ({len(settings)} given, "
        f"{len(drawn)} drawn for your code), on all {counted} calls."
        + (
            f" Note: your module calls {called}, which does what this exercise asks you to write yourself; write "
            "its forward from the steps of this notebook to see how it works."
            if used
            else ""
        ),
        shortcuts=tuple(dict.fromkeys(used)),
    )


def _seen(
    exercise: str, learner: Any, contract: Contract, setting: ModuleSetting, theirs: MultiHeadSelfAttention
) -> CheckResult | None:
    """What a module that runs but gives other numbers does, seen on a fresh one holding ``theirs``' weights:
    a behaviour named at once, or a later token changing an earlier output (a symptom the probes explain)."""
    module = _build(exercise, learner, contract, setting)
    if isinstance(module, CheckResult):
        return module
    (copy_gqa_weights if setting.kv_heads else contract.loader)(module, theirs)
    x = torch.randn(3, 5, setting.d_in, generator=torch.Generator().manual_seed(11)).to(setting.dtype)
    changes: list[str] = []
    try:
        with watching_settings(changes, ignore=("rng",)):
            odd = _behaviour(exercise, module, contract, x)
            future = odd is None and contract.causal and _sees_the_future(module, x)
    except Exception:  # the calls that failed are reported where they failed, at the learner's line
        return None
    if changes:
        return state_changed(exercise, changes)
    if odd is not None:
        return odd
    if future:
        # A symptom, not a cause: a missing mask shows so, and so does a split that mixes positions.
        built = setting.describe(contract, _name(learner))
        return _diagnosed(
            exercise, learner, contract, f"with {built}, changing the last two tokens changed the outputs of the "
            "tokens before them",
        )  # fmt: skip
    return None


def _told(
    exercise: str, learner: Any, contract: Contract, setting: ModuleSetting, found: CheckResult, drawn: bool
) -> CheckResult:
    """A module that differs from the package somewhere: where (the symptom), and what the isolating probes
    single out."""
    built = setting.describe(contract, _name(learner))
    if not found.key:
        # Its message says all there is (an error, not written yet, a change in place, nothing returned): no
        # number to isolate.
        return replace(found, message=found.message.replace("] ", f"] with {built}: ", 1))
    where = found.symptom.removeprefix(f"[{exercise}] not yet: ").removesuffix(".")
    result = _diagnosed(
        exercise, learner, contract, f"with {built}{' (drawn for your code)' if drawn else ''}, {where}"
    )
    return replace(result, case=found.case, expected=found.expected, got=found.got)


def _diagnosed(exercise: str, learner: Any, contract: Contract, where: str) -> CheckResult:
    """What the learner is told about a module seen to be wrong ``where``: the step the isolating probes single
    out (the symptom), then the mistakes by name; only where to look when no known mistake explains it."""
    diagnosis = diagnose(learner, contract)
    if not diagnosis.mistakes:
        look = (
            f" Driven with crafted weights that isolate one step at a time, {diagnosis.differs}."
            if diagnosis.differs
            else ""
        )
        return CheckResult(exercise, "incorrect", "", symptom=f"[{exercise}] not yet: {where}.{look}", key="differs")
    names = [m.name for m in diagnosis.mistakes]
    looks = " ".join(dict.fromkeys(m.symptom for m in diagnosis.mistakes))
    more = " Something else differs too, which no known mistake explains." if diagnosis.unexplained else ""
    named = " ".join(f"'{m.name}': {m.hint}" for m in diagnosis.mistakes)
    return CheckResult(
        exercise,
        "misconception",
        "",
        misconception=names[0],
        symptom=f"[{exercise}] not yet: {where}. Driven with crafted weights that isolate one step at a time, it "
        f"singles out what differs: {looks[0].lower()}{looks[1:]} "
        + (
            "This is a known mistake: `result.hint()` names it."
            if len(names) == 1
            else "These are known mistakes: `result.hint()` names them."
        ),
        diagnosis=f"[{exercise}] not yet: this looks like {named}{more} `result.reveal()` shows the fix.",
        fix=" ".join(f"[{exercise}] the fix for '{m.name}': {m.fix}" for m in diagnosis.mistakes),
        key="mistake: " + " | ".join(names),
    )


# ------------------------------------------------------------------ the payoffs of notebooks 07 and 11


def module_is_written(attention: object, name: str = "MyCausalSelfAttention") -> bool:
    """``True`` when ``attention(8, 2)`` builds a module and runs on a ``(1, 3, 8)`` input; ``False``,
    after printing one line that says what to do, when ``attention`` is ``None`` (the learner's file has none) or
    still raises ``NotImplementedError``. Any other error is the learner's bug and is raised as it is."""
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
            f"{name} is not written yet (there is none, or it raises NotImplementedError): write it in notebook 06 "
            "and save it there with save_mine (on Colab, paste your my_attention.py into the cell above), then run "
            "this cell again. Nothing was run."
        )
    return written


@contextmanager
def explained(
    learner: Any, contract: Contract = CAUSAL_CONTRACT, exercise: str = "notebook 06, exercise 4"
) -> Iterator[None]:
    """Run a payoff cell's block; when something in it fails (a claim about the learner's model, or an error
    in the learner's module), print in one line what :func:`explain` finds wrong in the module, then let the
    failure show as it is."""
    try:
        yield
    except Exception:
        cause = explain(learner, contract, exercise)
        if cause:
            print(cause)
        raise


def explain(learner: Any, contract: Contract = CAUSAL_CONTRACT, exercise: str = "notebook 06, exercise 4") -> str:
    """One line on what is wrong with the module ``learner`` builds, for a payoff cell whose claim failed: the
    checker of ``exercise`` run on it (on :data:`CAUSAL_SETTINGS`), its mistake named at once; "" when that
    checker finds nothing wrong."""
    with checking_state():
        result = _check_module(exercise, learner, contract, CAUSAL_SETTINGS, 6060, ())
    if result.correct or result.status == "not_attempted":
        return ""
    if result.key.startswith("mistake: "):
        names = " and ".join(f"'{name}'" for name in result.key.removeprefix("mistake: ").split(" | "))
        return (
            f"What the checker of {exercise} finds in your module (the likely cause): {names}. Revisit that exercise."
        )
    said = (result.message or result.symptom).removeprefix(f"[{exercise}] ").removeprefix("not yet: ")
    return f"What the checker of {exercise} finds in your module (the likely cause): {said} Revisit that exercise."
