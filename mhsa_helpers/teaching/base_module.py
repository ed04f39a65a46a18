"""What a checker of a learner's module that *extends* their notebook-06 ``MyCausalSelfAttention`` shares
(notebook 12's ``MySinkGateAttention``, notebook 13's ``MyLatentAttention``).

Before such a checker compares the learner's module with the package's, it checks the class the learner's extends on
its own (:func:`verify_parent`): built alone as notebook 06 builds it (``d_in``, ``bias``, ``rope_base``), with the
weights of the package's plain causal attention with RoPE (:func:`plain_attention`) copied in, it must give that
module's full pass and its outputs decoded through a ``KVCache``. When it does not, the learner is sent back to
notebook 06's exercise 4 (:data:`CHECK_NOTEBOOK_06`) rather than told that their new lines are wrong.

Also here: the size such a module is built at (:class:`ModuleSize`), the package module's four outputs a checker
compares (:func:`package_outputs`, with :func:`decoded` for the decode through a cache), the learner's class it
extends (:func:`learners_parent`), what to say when that class still raises ``NotImplementedError``
(:func:`parent_not_written`), the pair ``(out, weights)`` a forward returns with ``need_weights=True``
(:func:`output_pair`), the profile hook switched off around the checker's own calls (:func:`unwatched`) and the
stand-in for a notebook-06 module not saved yet (:class:`NotSavedYet`).
"""

from __future__ import annotations

import functools
import itertools
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import nn

from .. import KVCache, MultiHeadSelfAttention, RotaryEmbedding
from .checking import AnswerRejected, Remembered, learner_line, output_tensor, random_tensor, roughly_equal
from .modules import CAUSAL_CONTRACT, load_package_weights

__all__ = [
    "CHECK_NOTEBOOK_06",
    "ModuleSize",
    "NotSavedYet",
    "chunks",
    "decoded",
    "learners_parent",
    "output_pair",
    "package_outputs",
    "parent_not_written",
    "plain_attention",
    "unwatched",
    "verify_parent",
]

#: Where a learner whose notebook-06 module gives other numbers than the package's is sent.
CHECK_NOTEBOOK_06 = (
    "Check it with notebook 06's exercise 4 checker (`from mhsa_helpers.lessons.causal_mhsa_with_rope import "
    "check_my_causal_self_attention`, then `check_my_causal_self_attention(MyCausalSelfAttention)`), fix it in "
    "notebook 06, save it there again with `save_mine`, and run this notebook's `load_mine` cell again"
)


@dataclass(frozen=True)
class ModuleSize:
    """How a case builds the learner's notebook-06 module, ``MyCausalSelfAttention(d_model, num_heads, **keywords)``
    with ``d_in``, ``bias`` and ``rope_base`` given only where set; ``seed`` draws the package module's weights. The
    input is ``x (batch, seq, features)``, the output ``(batch, seq, d_model)``. A lesson's size extends it (its
    ``__repr__`` names the lesson's class)."""

    d_model: int
    num_heads: int
    d_in: int | None = None
    bias: bool = True
    rope_base: float = 10000.0
    seed: int = 0

    @property
    def features(self) -> int:
        """The input's features: ``d_in``, or ``d_model`` when it is not given."""
        return self.d_model if self.d_in is None else self.d_in

    def keywords(self) -> dict[str, Any]:
        """The keyword arguments a notebook passes: only those that differ from the defaults."""
        given: dict[str, Any] = {} if self.d_in is None else {"d_in": self.d_in}
        given |= {} if self.bias else {"bias": False}
        return given | ({} if self.rope_base == 10000.0 else {"rope_base": self.rope_base})

    def call(self, name: str) -> str:
        """How the notebook's call of the class ``name`` reads: ``MySinkGateAttention(12, 3, d_in=10,
        rope_base=100)``."""
        shown = [str(self.d_model), str(self.num_heads)] + [
            f"{key}={value:g}" if isinstance(value, float) else f"{key}={value}"
            for key, value in self.keywords().items()
        ]
        return f"{name}({', '.join(shown)})"

    def __repr__(self) -> str:
        return self.call("MyCausalSelfAttention")


# ------------------------------------------------ the package's plain attention and what it gives


@functools.lru_cache(maxsize=64)
def plain_attention(size: ModuleSize, dtype: torch.dtype) -> MultiHeadSelfAttention:
    """The package's causal attention with RoPE at ``size`` in ``dtype``, what the learner's notebook-06 module
    computes: ``x (batch, seq, features) -> (batch, seq, d_model)``, RoPE of ``d_model // num_heads`` with
    ``size.rope_base``, biases only with ``size.bias``. Its weights are drawn from ``size.seed``, the biases too when
    ``size.bias`` leaves them out, so that turning them off changes nothing else."""
    d_head = size.d_model // size.num_heads
    with torch.random.fork_rng(devices=[]):  # building draws initial weights: the notebook's generator stays as it was
        module = MultiHeadSelfAttention(
            size.d_model, size.num_heads, d_in=size.features, qkv_bias=size.bias, out_bias=size.bias, causal=True,
            rope=RotaryEmbedding(d_head, 64, size.rope_base),
        )  # fmt: skip
        full = MultiHeadSelfAttention(size.d_model, size.num_heads, d_in=size.features)
    g = torch.Generator().manual_seed(size.seed)
    with torch.no_grad():
        drawn = {}
        for name, parameter in full.named_parameters():
            noise = random_tensor(g, *parameter.shape)
            drawn[name] = noise / parameter.shape[-1] ** 0.5 * 1.5 if name.endswith("weight") else 0.3 * noise
        for name, parameter in module.named_parameters():
            parameter.copy_(drawn[name])
    return module.to(dtype).requires_grad_(False)


def chunks(seq: int) -> list[tuple[int, int]]:
    """How a sequence of ``seq`` tokens is decoded through a cache: a prompt of 2 tokens, then one at a time; the
    ``(start, end)`` of each call."""
    bounds = [0, *range(min(2, seq), seq + 1)]
    return list(itertools.pairwise(bounds))


def decoded(
    step: Callable[[torch.Tensor, Any], Any], x: torch.Tensor, what: str = "", *, cache: Any = None
) -> torch.Tensor:
    """``step(chunk, cache)`` over :func:`chunks` of ``x (batch, seq, features)`` with one ``cache`` (default: a new
    package ``KVCache``; latent attention passes a ``LatentCache``), the outputs joined along the sequence:
    ``(batch, seq, d_model)``. With ``what`` (``"your forward"``), each output must be a tensor of
    ``(batch, new, ...)``, else :class:`~mhsa_helpers.teaching.checking.AnswerRejected` names it."""
    cache = KVCache() if cache is None else cache
    outputs = []
    for start, end in chunks(x.shape[1]):
        out = step(x[:, start:end], cache)
        if what:
            out = output_tensor(out, what)
            if out.shape[:-1] != x[:, start:end].shape[:-1]:
                raise AnswerRejected(
                    f"{what} returned shape {tuple(out.shape)} for {end - start} new token(s) "
                    f"{tuple(x[:, start:end].shape)}: it must return (batch, new, d_model)"
                )
        outputs.append(out)
    return torch.cat(outputs, dim=1)


def package_outputs(module: MultiHeadSelfAttention, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The four things a checker compares, of the package's ``module`` on ``x (batch, seq, features)``: the full pass
    ``(batch, seq, d_model)``, the output and the weights ``(batch, heads, seq, seq)`` with ``need_weights=True``,
    and the outputs decoded through a cache (:func:`decoded`) ``(batch, seq, d_model)``."""
    with torch.no_grad():
        full = cast(torch.Tensor, module(x))
        out, weights = cast(tuple[torch.Tensor, torch.Tensor], module(x, need_weights=True))
        steps = decoded(lambda chunk, cache: module(chunk, cache=cache), x)
    return full, out, weights, steps


#: What the package's plain attention gave, by size and input: the parent is checked on every case of every check.
_remembered = Remembered(512)


# ------------------------------------------------ the learner's class and the class it extends


def output_pair(value: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """``value`` as ``(out, weights)``, what a forward called with ``need_weights=True`` returns (``(batch, seq,
    d_model)`` and ``(batch, heads, seq, past + seq)``); :class:`~mhsa_helpers.teaching.checking.AnswerRejected` when
    it is not a pair of tensors."""
    if isinstance(value, (tuple, list)) and len(value) == 2 and all(isinstance(t, torch.Tensor) for t in value):
        return value[0], value[1]
    raise AnswerRejected(
        f"called with need_weights=True, your forward returned {type(value).__name__}: it must return (out, weights), "
        "as your MyCausalSelfAttention does"
    )


def parent_not_written(where: str, error: NotImplementedError) -> str:
    """What to tell the learner when ``where``, code outside their class (the module it extends, as a rule), still
    raises ``error``: the ``not_written`` of a :func:`~mhsa_helpers.teaching.checking.class_driver`."""
    return (
        f"{where} still raises NotImplementedError{learner_line(error)}. The class yours extends is your "
        "MyCausalSelfAttention of notebook 06: write it there (exercise 4), save it with `save_mine`, then run this "
        "notebook's `load_mine` cell and this cell again."
    )


def learners_parent(learner: type) -> type | None:
    """The learner's own class that theirs extends: the one named MyCausalSelfAttention (``load_mine`` gives notebook
    06's module under that name), else the nearest class of the learner's it extends; None when it extends none."""
    own = [
        klass
        for klass in learner.__mro__[1:]
        if issubclass(klass, nn.Module) and not klass.__module__.startswith(("torch", "mhsa_helpers"))
    ]
    return next((klass for klass in own if klass.__name__ == "MyCausalSelfAttention"), own[0] if own else None)


@contextmanager
def unwatched() -> Iterator[None]:
    """No profile function while the block runs: the checker's own calls of the learner's parent module are not the
    answer's, and what they call is no shortcut of the answer's."""
    previous = sys.getprofile()
    sys.setprofile(None)
    try:
        yield
    finally:
        sys.setprofile(previous)


def _parent_check(parent: type, x: torch.Tensor, size: ModuleSize) -> None:
    """Does ``parent``, built alone at ``size`` with the package's projections, give what the package's plain
    attention gives, in a full pass and through a cache?"""
    plain = plain_attention(size, x.dtype)
    call = size.call(parent.__name__)
    try:
        with torch.no_grad():
            mine = CAUSAL_CONTRACT.build(
                parent, size.features, size.d_model, size.num_heads, size.bias, size.rope_base
            ).to(x.dtype)
            load_package_weights(mine, plain)
            full = output_tensor(mine(x), f"your {parent.__name__}, called alone as mine(x),")
            steps = decoded(lambda chunk, cache: mine(chunk, cache=cache), x, f"your {parent.__name__}")
    except (NotImplementedError, AnswerRejected):
        raise
    except Exception as error:
        raise AnswerRejected(
            f"the class yours extends, {parent.__name__}, built alone as {call} with the package's weights and called "
            f"as notebook 06 calls it (a full pass, then through a cache), raised {type(error).__name__}: "
            f"{error}{learner_line(error)}. Your new lines are not to blame. {CHECK_NOTEBOOK_06}"
        ) from error
    want_full, _, _, want_steps = _remembered(("plain", size), x, lambda: package_outputs(plain, x))
    differs = (
        "in a full pass"
        if not roughly_equal(full, want_full)
        else "through a cache"
        if not roughly_equal(steps, want_steps)
        else ""
    )
    if differs:
        raise AnswerRejected(
            f"the class yours extends, {parent.__name__}, built alone as {call} with the package attention's "
            f"weights, already gives other numbers than the package's attention {differs}, before any line of yours "
            f"runs: your new lines are not to blame. {CHECK_NOTEBOOK_06}"
        )


def verify_parent(parent: type | None, x: torch.Tensor, size: ModuleSize) -> bool:
    """Before the learner's module is compared: check ``parent``, the class it extends (:func:`learners_parent`), on
    its own, unwatched (:func:`unwatched`); whether there was one to check (``parent`` None: nothing to check).

    ``parent`` is built as notebook 06 builds it (``CAUSAL_CONTRACT``: ``size.call(parent.__name__)``) with the
    weights of :func:`plain_attention` copied in, and run on ``x (batch, seq, size.features)``: a full pass and a
    decode through a cache (:func:`decoded`) must give the package's ``(batch, seq, d_model)``, roughly. When they do
    not, or building or running it raises, :class:`~mhsa_helpers.teaching.checking.AnswerRejected` says that the new
    lines are not to blame and sends the learner to notebook 06 (:data:`CHECK_NOTEBOOK_06`); a
    ``NotImplementedError`` goes on as it is (the checker's ``class_driver`` says where to write the code)."""
    if parent is None:
        return False
    with unwatched():
        _parent_check(parent, x, size)
    return True


class NotSavedYet(nn.Module):
    """Stands in for the learner's ``MyCausalSelfAttention`` while ``my_attention.py`` has none (a notebook passes it
    to ``load_mine`` as the fallback): building it raises ``NotImplementedError``, which the checker of a module
    that extends it reads as "not attempted yet" and answers with where to write the module."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()
        raise NotImplementedError(
            "MyCausalSelfAttention is not saved yet: write it in notebook 06 (exercise 4), save it with save_mine, "
            "then run this notebook's load_mine cell again"
        )
