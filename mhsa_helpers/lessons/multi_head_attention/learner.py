"""Checking the learner's own attention *module* (notebooks 04 and 06).

The learner writes an ``nn.Module`` with four ``nn.Linear`` projections named ``w_q``, ``w_k``,
``w_v`` and ``w_o``. A module checker builds it at several sizes, copies the weights of a
package :class:`~mhsa_helpers.MultiHeadSelfAttention` into it (:func:`load_package_weights`)
and runs it through :func:`~mhsa_helpers.teaching.checking.check_function` on many inputs, so
that every comparison, in-place probe, time limit and named mistake of the function checkers
applies to the module's ``forward`` too. Known wrong modules are reproduced from the package's
weights by :func:`attention_variant`, one switch per mistake.
"""

from __future__ import annotations

import functools
import inspect
import numbers
import os
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import torch
from torch import nn

from ... import KVCache, MultiHeadSelfAttention, RotaryEmbedding, merge_heads, split_heads
from ...teaching.checking import Case, CheckResult, Misconception, check_function

__all__ = [
    "CacheWithLengthAndAppend",
    "ModuleSetting",
    "attention_variant",
    "check_module",
    "check_prediction",
    "load_package_weights",
    "package_parameters",
    "run_module",
    "run_variant",
]

PROJECTIONS = ("w_q", "w_k", "w_v", "w_o")


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


def load_package_weights(mine: nn.Module, theirs: MultiHeadSelfAttention) -> None:
    """Copy the package module ``theirs`` into the learner's module ``mine``, whose projections are
    ``nn.Linear`` layers ``w_q, w_k, w_v`` ``(d_in -> d_model)`` and ``w_o`` ``(d_model -> d_model)``.

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
    with torch.no_grad():
        for name in PROJECTIONS:
            layer = getattr(mine, name)
            layer.weight.copy_(params[name])
            bias = params["b" + name[1:]]
            if layer.bias is not None:
                layer.bias.copy_(bias) if bias is not None else layer.bias.zero_()


# ------------------------------------------------------------------ the mistakes, reproduced


def _project(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None) -> torch.Tensor:
    assert weight is not None  # only biases can be missing
    return torch.nn.functional.linear(x, weight, bias)


def _split_view(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    *batch, seq, d_model = x.shape
    return x.reshape(*batch, num_heads, seq, d_model // num_heads)


def _merge_reshape(x: torch.Tensor) -> torch.Tensor:
    *batch, heads, seq, d_head = x.shape
    return x.reshape(*batch, seq, heads * d_head)


def attention_variant(
    params: dict[str, torch.Tensor | None],
    x: torch.Tensor,
    num_heads: int,
    *,
    past_kv: tuple[torch.Tensor, torch.Tensor] | None = None,
    causal: bool = False,
    rope_base: float | None = None,
    convention: str = "interleaved",
    rope_on: Sequence[str] = ("q", "k"),
    offset_positions: bool = True,
    offset_mask: bool = True,
    split: str = "view+transpose",
    merge: str = "transpose+reshape",
    project_out: bool = True,
    scale_by: str = "d_head",
    softmax_dim: int = -1,
    rope_before_split: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Multi-head attention from ``params`` (:func:`package_parameters`), right or with one mistake.

    ``x`` ``(batch, seq, d_in)``; ``past_kv`` the cached keys (after RoPE) and values
    ``(batch, heads, past, d_head)``. Returns ``(out (batch, seq, d_model), weights
    (batch, heads, seq, past + seq), k_all, v_all)``: the last two are what a cache holds next."""
    q, k, v = (_project(x, params[w], params[b]) for w, b in (("w_q", "b_q"), ("w_k", "b_k"), ("w_v", "b_v")))
    d_model, seq = q.shape[-1], x.shape[-2]
    d_head = d_model // num_heads
    past = 0 if past_kv is None else past_kv[0].shape[-2]
    first = past if offset_positions else 0
    positions = torch.arange(first, first + seq)
    if rope_base is not None and rope_before_split:
        rope = RotaryEmbedding(d_model, first + seq, rope_base, convention)
        q, k, v = (rope(t, positions) if name in rope_on else t for name, t in zip("qkv", (q, k, v), strict=True))
    splitter = split_heads if split == "view+transpose" else _split_view
    q, k, v = splitter(q, num_heads), splitter(k, num_heads), splitter(v, num_heads)
    if rope_base is not None and not rope_before_split:
        rope = RotaryEmbedding(d_head, first + seq, rope_base, convention)
        q, k, v = (rope(t, positions) if name in rope_on else t for name, t in zip("qkv", (q, k, v), strict=True))
    if past_kv is not None:
        k, v = torch.cat((past_kv[0], k), dim=-2), torch.cat((past_kv[1], v), dim=-2)
    scale = d_head**-0.5 if scale_by == "d_head" else d_model**-0.5
    scores = q @ k.transpose(-2, -1) * scale
    if causal:
        total = k.shape[-2]
        # The package's causal_mask(seq, total), built here without its argument checks (this runs often).
        mask = torch.ones(seq, total, dtype=torch.bool).tril(diagonal=total - seq if offset_mask else 0)
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=softmax_dim)
    heads = weights @ v
    merged = merge_heads(heads) if merge == "transpose+reshape" else _merge_reshape(heads)
    out = _project(merged, params["w_o"], params["b_o"]) if project_out else merged
    return out, weights, k, v


def run_variant(
    params: dict[str, torch.Tensor | None], num_heads: int, x: torch.Tensor, split_at: int | None = None, **mistake: Any
) -> Any:
    """What a module with ``mistake`` returns on the checker's call ``(x, split_at)``: the full pass
    ``(batch, seq, d_model)`` when ``split_at`` is None; with ``split_at = p`` the first ``p`` tokens go
    into a cache and the rest are decoded in one call with ``need_weights=True``, giving ``(out, weights)``;
    with ``split_at = 0`` every token is decoded on its own and the outputs are concatenated."""
    if split_at is None:
        return attention_variant(params, x, num_heads, **mistake)[0]
    if split_at == 0:
        outputs, cached = [], None
        for t in range(x.shape[-2]):
            out, _, k, v = attention_variant(params, x[..., t : t + 1, :], num_heads, past_kv=cached, **mistake)
            outputs.append(out)
            cached = (k, v)
        return torch.cat(outputs, dim=-2)
    _, _, k, v = attention_variant(params, x[..., :split_at, :], num_heads, **mistake)
    out, weights, _, _ = attention_variant(params, x[..., split_at:, :], num_heads, past_kv=(k, v), **mistake)
    return out, weights


class CacheWithLengthAndAppend:
    """The smallest cache the learner's module must work with (notebook 06's contract): ``length``, the
    number of tokens held, and ``append(k, v)``, which adds ``(batch, heads, new, d_head)`` keys and values
    and returns all of them so far. Nothing else: a module that needs more fails at its own line."""

    def __init__(self) -> None:
        self.length = 0
        self._held: tuple[torch.Tensor, torch.Tensor] | None = None

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self._held is not None:
            k, v = torch.cat((self._held[0], k), dim=-2), torch.cat((self._held[1], v), dim=-2)
        self._held, self.length = (k, v), k.shape[-2]
        return k, v


def run_module(
    module: Callable[..., Any], x: torch.Tensor, split_at: int | None = None, *, cache_type: type = KVCache
) -> Any:
    """The same call on a real module (the learner's, with a :class:`CacheWithLengthAndAppend`, or the
    package's, with a :class:`~mhsa_helpers.KVCache`), with a fresh cache for the cached calls."""
    if split_at is None:
        return module(x)
    cache = cache_type()
    if split_at == 0:
        return torch.cat([module(x[..., t : t + 1, :], cache=cache) for t in range(x.shape[-2])], dim=-2)
    module(x[..., :split_at, :], cache=cache)
    return module(x[..., split_at:, :], cache=cache, need_weights=True)


# ------------------------------------------------------------------ predictions


def check_prediction(
    exercise: str,
    answer: object,
    truth: Callable[[], object],
    what: str,
    mistakes: Sequence[Misconception] = (),
    *,
    verbose: bool = True,
) -> CheckResult:
    """Check a prediction the learner wrote down before running anything: ``answer`` is a value
    (``None`` until filled in) or a function of no arguments returning it; ``truth()`` is measured or
    computed by the package; ``mistakes`` are wrong predictions (functions of no arguments) with the
    reasoning that leads to them."""
    if answer is None or answer is Ellipsis:
        result = CheckResult(
            exercise, "not_attempted", f"[{exercise}] not attempted yet: replace None by your prediction."
        )
        if verbose:
            print(result.message)
        return result
    if not callable(answer) and not isinstance(answer, numbers.Number | torch.Tensor):
        raise TypeError(
            f"learner must be a function returning your prediction, or the number itself, got {type(answer).__name__}"
        )
    learner = answer if callable(answer) else (lambda: answer)
    return check_function(exercise, learner, truth, [Case((), description=what)], mistakes, verbose=verbose)


# ------------------------------------------------------------------ the module checker


@dataclass(frozen=True)
class ModuleSetting:
    """One way of building the learner's module: ``args``/``kwargs`` for its class, the package module
    that matches (``package_kwargs`` for :class:`~mhsa_helpers.MultiHeadSelfAttention`) and the inputs
    ``(batch, seq)`` (with ``split_at`` for cached calls) to run it on."""

    args: tuple
    kwargs: dict = field(default_factory=dict)
    package_kwargs: dict = field(default_factory=dict)
    calls: tuple = ()  # ((batch, seq, split_at), ...)
    variant: dict = field(default_factory=dict)  # switches of attention_variant that every mistake shares

    def describe(self, name: str) -> str:
        shown = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs.items()]
        return f"{name}({', '.join(shown)})"


_LIBRARY_DIRS = tuple(
    os.path.dirname(os.path.abspath(path)) + os.sep
    for path in (torch.__file__, os.__file__, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
)


def _learner_line(error: BaseException) -> str:
    """`` (in __init__, line 4: `self.w_q = ...`)``: the last line of the learner's code in the traceback."""
    own = [
        frame
        for frame in traceback.extract_tb(error.__traceback__)
        if not frame.filename.startswith(("<frozen",))
        and not os.path.abspath(frame.filename).startswith(_LIBRARY_DIRS)
        and "site-packages" not in frame.filename
    ]
    if not own:
        return ""
    last = own[-1]
    code = f": `{last.line.strip()}`" if last.line else ""
    return f" (in {last.name}, line {last.lineno}{code})"


def _name(learner: Any) -> str:
    return getattr(learner, "__name__", "your class")


def _build(exercise: str, learner: Any, setting: ModuleSetting) -> nn.Module | CheckResult:
    name = getattr(learner, "__name__", type(learner).__name__)
    built = setting.describe(name)
    try:
        module = learner(*setting.args, **setting.kwargs)
    except NotImplementedError:
        return CheckResult(
            exercise, "not_attempted", f"[{exercise}] not attempted yet: replace the `raise NotImplementedError` lines."
        )
    except Exception as error:  # the learner's constructor may fail in any way: report it at their line
        return CheckResult(
            exercise, "error", f"[{exercise}] {built} raised {type(error).__name__}: {error}{_learner_line(error)}."
        )
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
    if setting.kwargs.get("bias") is False:
        with_bias = [p for p in PROJECTIONS if getattr(module, p).bias is not None]
        if with_bias:
            return CheckResult(
                exercise,
                "misconception",
                f"[{exercise}] not yet: {built} still has biases in {', '.join(with_bias)}: pass bias=bias to each "
                "nn.Linear (real models such as Llama have none).",
                misconception="bias=False ignored",
            )
    return module


def check_module(
    exercise: str,
    learner: Any,
    settings: Sequence[ModuleSetting],
    mistakes: Sequence[tuple[str, dict, str]],
    *,
    seed: int,
    probes: Sequence[Callable[[int], Misconception]] = (),
    shortcuts: Sequence[str] = (),
    loader: Callable[[nn.Module, MultiHeadSelfAttention], Any] = load_package_weights,
    verbose: bool = True,
) -> CheckResult:
    """Check the learner's module class on every setting, then that gradients reach every weight.

    ``mistakes`` are ``(name, switches of attention_variant, hint)``; ``probes`` are misconceptions known
    by a symptom: each is made for a setting from its ``d_in``, and its ``detect`` gets a function
    ``run(x, split_at=None)`` of the learner's module."""
    if not callable(learner):
        raise TypeError(f"learner must be a function or class that builds your module, got {type(learner).__name__}")
    threads = torch.get_num_threads()
    # Hundreds of tiny tensors: one thread runs them faster than several that wait on each other.
    torch.set_num_threads(1)
    try:
        result = _check_module(exercise, learner, settings, mistakes, seed, probes, shortcuts, loader)
    finally:
        torch.set_num_threads(threads)
    if verbose:
        print(result.message)
    return result


def _check_module(exercise, learner, settings, mistakes, seed, probes, shortcuts, loader) -> CheckResult:
    if isinstance(learner, nn.Module) or not callable(learner):
        what = f"a module made from {type(learner).__name__}" if isinstance(learner, nn.Module) else "no class"
        return CheckResult(
            exercise,
            "error",
            f"[{exercise}] not yet: pass your nn.Module class itself (e.g. MyModule), you passed {what}.",
        )
    generator = torch.Generator().manual_seed(seed)
    counted = 0
    for setting in settings:
        module = _build(exercise, learner, setting)
        if isinstance(module, CheckResult):
            return module
        if any(split_at is not None for *_, split_at in setting.calls):
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
        theirs = MultiHeadSelfAttention(**setting.package_kwargs)
        with torch.no_grad():  # random biases, so that a forgotten bias shows
            for parameter in theirs.parameters():
                parameter.normal_(0.0, 0.4, generator=generator)
        try:
            loader(module, theirs)
        except ValueError as error:
            return CheckResult(
                exercise, "incorrect", f"[{exercise}] not yet: {setting.describe(_name(learner))}: {error}."
            )
        params = {k: (None if v is None else v.detach().clone()) for k, v in package_parameters(theirs).items()}
        num_heads = theirs.num_heads
        cases = []
        for batch, seq, split_at in setting.calls:
            x = torch.randn(batch, seq, theirs.d_in, generator=generator)
            how = (
                "full pass"
                if split_at is None
                else "token by token"
                if split_at == 0
                else (f"{split_at} tokens cached, then {seq - split_at} decoded in one call")
            )
            kwargs = {} if split_at is None else {"split_at": split_at}
            cases.append(Case((x,), kwargs, description=f"x {(batch, seq, theirs.d_in)}, {how}"))
        counted += len(cases)
        wrong = [
            Misconception(
                name, functools.partial(run_variant, params, num_heads, **{**setting.variant, **switches}), hint
            )
            for name, switches, hint in mistakes
        ]

        @functools.wraps(run_module)
        def learner_call(x, split_at=None, _module=module):
            return run_module(_module, x, split_at, cache_type=CacheWithLengthAndAppend)

        # Errors point into the learner's forward, and an argument changed in place is named after its parameter.
        learner_call.__wrapped__ = module.forward  # read by inspect.unwrap
        result = check_function(
            exercise,
            learner_call,
            functools.partial(run_module, theirs),
            cases,
            [*wrong, *(probe(theirs.d_in) for probe in probes)],
            output_names=("output", "attention weights"),
            shortcuts=shortcuts,
            verbose=False,
        )
        if not result.correct:
            where = f"with {setting.describe(_name(learner))}: "
            message = result.message.replace("] ", "] " + where, 1) if "] " in result.message else result.message
            return CheckResult(exercise, result.status, message, result.misconception, result.shortcuts)
    gradients = _gradients_reach_every_weight(exercise, learner, settings[0], generator)
    if gradients is not None:
        return gradients
    return CheckResult(
        exercise,
        "correct",
        f"[{exercise}] correct: gradients reach every weight, and with the package's weights copied in your module "
        f"gives the package's outputs in {len(settings)} module sizes, on all {counted} cases.",
    )


def _gradients_reach_every_weight(exercise, learner, setting, generator) -> CheckResult | None:
    module = _build(exercise, learner, setting)
    if isinstance(module, CheckResult):
        return module
    batch, seq, _ = setting.calls[0]
    d_in = cast(nn.Linear, module.w_q).in_features
    x = torch.randn(batch, seq, d_in, generator=generator)
    own = {id(p) for p in module.parameters()}
    with torch.enable_grad():
        try:
            module(x).square().sum().backward()
        except Exception as error:  # e.g. a tensor the learner made with requires_grad in the wrong place
            return CheckResult(
                exercise,
                "error",
                f"[{exercise}] backward through your module raised {type(error).__name__}: "
                f"{error}{_learner_line(error)}.",
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
            if parameter.grad is None or not bool(parameter.grad.abs().sum() > 0):
                return CheckResult(
                    exercise,
                    "misconception",
                    f"[{exercise}] not yet: no gradient reaches {label}. Is part of forward under torch.no_grad(), "
                    "or does it use .detach() or .data? Training needs the whole forward on the autograd graph.",
                    misconception="gradients do not reach every weight",
                )
    return None
