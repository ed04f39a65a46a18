"""Checkers for notebook 13, multi-head latent attention: a prediction of what one token adds to a layer's cache,
and the learner's absorbed scores, each head's query taken into the latent space and scored against the cached
latents without building any head's keys.

The cache of a latent attention layer holds, per token, its latent ``c_kv`` (``d_latent`` numbers, from which every
head's key and value are rebuilt) and one rotated key ``k_r`` (``d_rope`` numbers, shared by the heads). Absorption
reads head ``h``'s key ``k_h = c_kv W_UK_h^T`` into its query: ``q_h . k_h = (q_h W_UK_h) . c_kv``.

Exercise 3: latent attention in the learner's own module.

The learner extends notebook 06's ``MyCausalSelfAttention`` into ``MyLatentAttention(d_model, num_heads, d_latent,
d_rope, **kwargs)``: it keeps ``w_q`` (the content queries, read from ``x`` itself: the package's ``q_latent=None``)
and ``w_o``, drops ``w_k`` and ``w_v``, and adds the bias-free ``w_dkv`` (``d_in -> d_latent``), ``w_uk`` and ``w_uv``
(``d_latent -> d_model``), ``w_qr`` (``d_in -> heads * d_rope``) and ``w_kr`` (``d_in -> d_rope``, one rotated key for
every head). Its ``forward(x, cache=None, need_weights=False, absorbed=False)`` appends each new token's latent and
rotated key to a :class:`~mhsa_helpers.mla.LatentCache`.

The checker builds the learner's class as notebook 06's is built (``d_in``, ``bias`` and ``rope_base`` where they
differ from the defaults) and copies in the weights of a package :class:`~mhsa_helpers.mla.MultiHeadLatentAttention`
(``rope=RotaryEmbedding(d_rope, base=rope_base)``, interleaved pairs as the learner's ``my_apply_rope``; with
``d_in`` its ``W_O`` is widened to ``d_model``; the biases of the learner's ``w_q`` and ``w_o`` are zeroed). It
compares a full pass, ``need_weights=True``, ``absorbed=True``, the decode through a ``LatentCache`` (two tokens,
then one at a time) both ways, and what that cache holds (the latents and the rotated keys). First it
checks the class the learner's extends on its own, as notebook 12's checker does, and sends the learner back to
notebook 06 when that already differs.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from ...heads import merge_heads, split_heads
from ...mla import LatentCache, MultiHeadLatentAttention
from ...rope import RotaryEmbedding
from ...teaching.base_module import (
    ModuleSize,
    decoded,
    learners_parent,
    output_pair,
    parent_not_written,
    verify_parent,
)
from ...teaching.checking import (
    AnswerRejected,
    Case,
    CheckResult,
    Misconception,
    Remembered,
    check_function,
    escalate,
    judge_class,
    output_tensor,
    random_tensor,
)
from ...teaching.predictions import check_prediction

__all__ = [
    "ABSORBED_SCORES_MISCONCEPTIONS",
    "KEYS_BUILT_NAME",
    "LATENT_MODULE_MISCONCEPTIONS",
    "LATENT_PREDICTION_LAYER",
    "LATENT_PREDICTION_MISCONCEPTIONS",
    "absorbed_scores_reference",
    "check_absorbed_scores",
    "check_latent_prediction",
    "check_my_latent_attention",
]


# ---------------------------------------------------------------- exercise 1: predict what a token costs in the cache

#: The prediction's layer: heads, d_head (d_model = heads * d_head), d_latent and d_rope.
LATENT_PREDICTION_LAYER = {"num_heads": 8, "d_head": 64, "d_latent": 96, "d_rope": 32}


def cached_numbers_per_token() -> int:
    """The numbers one token adds to one layer's cache, measured with the package: one token through a
    ``MultiHeadLatentAttention`` of :data:`LATENT_PREDICTION_LAYER` with a :class:`LatentCache`, whose latents and
    rotated keys are then counted. The notebook's random generator is left as it was."""
    layer = LATENT_PREDICTION_LAYER
    d_model = layer["num_heads"] * layer["d_head"]
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        module = MultiHeadLatentAttention(
            d_model, layer["num_heads"], layer["d_latent"], rope=RotaryEmbedding(layer["d_rope"], max_seq_len=4)
        )
        cache = LatentCache()
        module(torch.zeros(1, 1, d_model), cache=cache)
    latents, rope_keys = cache.latents, cache.rope_keys
    assert latents is not None and rope_keys is not None
    return latents.numel() + rope_keys.numel()


def _predicted(formula: Callable[[int, int, int, int], int]) -> Callable[[], int]:
    """A wrong reasoning's number for the prediction's layer: ``formula(heads, d_head, d_latent, d_rope)``."""
    layer = LATENT_PREDICTION_LAYER
    return lambda: formula(layer["num_heads"], layer["d_head"], layer["d_latent"], layer["d_rope"])


_CACHE_FIX = (
    "The cache keeps, per token and layer, what the past tokens' keys and values are rebuilt from: the latent c_kv "
    "(d_latent numbers, one for keys and values and all heads together) and the rotated key k_r (d_rope numbers, "
    "one for all heads): d_latent + d_rope."
)

LATENT_PREDICTION_MISCONCEPTIONS = (
    Misconception(
        "a latent for the keys and another for the values",
        _predicted(lambda h, d, latent, rope: 2 * latent + rope),
        "Multi-head attention caches keys and values, two tensors, hence its factor 2. Latent attention rebuilds both "
        "from one latent: k_h = c_kv W_UK_h^T and v_h = c_kv W_UV_h^T read the same c_kv.",
        fix=_CACHE_FIX,
        symptom="How many latents does a token have: one for its keys and one for its values, or one for both?",
    ),
    Misconception(
        "a latent for the keys and another for the values",
        _predicted(lambda h, d, latent, rope: 2 * (latent + rope)),
        "Multi-head attention caches keys and values, two tensors, hence its factor 2. Latent attention rebuilds both "
        "from one latent, and the rotated key k_r is a key only: nothing is doubled.",
        fix=_CACHE_FIX,
        symptom="How many latents does a token have: one for its keys and one for its values, or one for both?",
    ),
    Misconception(
        "a rotated key per head",
        _predicted(lambda h, d, latent, rope: h * rope + latent),
        "Each head has its own rotated query part q_r, but the rotated key k_r = rope(x W_KR^T) is one per token, "
        "shared by every head (the multi-query trick): d_rope numbers, not heads * d_rope.",
        fix=_CACHE_FIX,
        symptom="Is the rotated key k_r one per head, or one for all the heads?",
    ),
    Misconception(
        "a latent per head",
        _predicted(lambda h, d, latent, rope: h * latent + rope),
        "c_kv = x W_DKV^T is one vector per token: every head reads the same latent, through its own W_UK_h and "
        "W_UV_h, which are weights, not cached.",
        fix=_CACHE_FIX,
        symptom="Is the latent one per head, or one per token?",
    ),
    Misconception(
        "the rebuilt keys and values counted",
        _predicted(lambda h, d, latent, rope: 2 * h * d),
        "2 * heads * d_head is what multi-head attention caches: every head's key and value. Latent attention caches "
        "what they are rebuilt from, and rebuilds them (or absorbs W_UK into the queries) at every step.",
        fix=_CACHE_FIX,
        symptom="What does the cache hold: the keys and values rebuilt from the latent, or what they are rebuilt from?",
    ),
    Misconception(
        "the rotated key forgotten",
        _predicted(lambda h, d, latent, rope: latent),
        "RoPE cannot be absorbed: a rotation that depends on both positions sits between q and k. So position "
        "travels beside the latent, in the rotated key k_r, which is cached too.",
        fix=_CACHE_FIX,
        symptom="Is the latent all the cache keeps? Where does a past token's position live?",
    ),
    Misconception(
        "the rotated query cached too",
        _predicted(lambda h, d, latent, rope: latent + 2 * rope),
        "A cache keeps what the past tokens give the new ones: keys and values. A query is used once, by its own "
        "token, at its own step, and never cached.",
        fix=_CACHE_FIX,
        symptom="Which rotated parts does a new token read from the past ones: their keys, or their queries too?",
    ),
)


def check_latent_prediction(answer: object, *, verbose: bool = True) -> CheckResult:
    """Prediction: the numbers one token adds to one layer's cache in latent attention with 8 heads of ``d_head``
    64 (``d_model`` 512), ``d_latent`` 96 and ``d_rope`` 32: its latent and its rotated key, ``96 + 32 = 128``
    (multi-head attention: ``2 * 8 * 64 = 1024``). ``answer`` is the number (or a function returning it), compared
    exactly; it is measured from a package ``MultiHeadLatentAttention`` and its ``LatentCache``."""
    layer = LATENT_PREDICTION_LAYER
    heads, d_head, d_latent, d_rope = layer["num_heads"], layer["d_head"], layer["d_latent"], layer["d_rope"]
    mha = 2 * heads * d_head
    return check_prediction(
        "latent_prediction",
        answer,
        cached_numbers_per_token,
        f"the numbers one token adds to one layer's cache: {heads} heads of d_head {d_head}, d_latent {d_latent}, "
        f"d_rope {d_rope}",
        LATENT_PREDICTION_MISCONCEPTIONS,
        explain=f"the cache keeps each token's latent c_kv, d_latent = {d_latent} numbers from which every head's key "
        f"and value are rebuilt, and its rotated key k_r, d_rope = {d_rope} numbers shared by the {heads} heads: "
        f"{d_latent} + {d_rope} = {d_latent + d_rope}, where multi-head attention keeps 2 * {heads} * {d_head} = "
        f"{mha}, {mha // (d_latent + d_rope)} times more",
        verbose=verbose,
    )


# ---------------------------------------------------------------- exercise 2: absorbed scores


def absorbed_scores_reference(q: torch.Tensor, w_uk: torch.Tensor, c_kv: torch.Tensor) -> torch.Tensor:
    """The raw content scores ``(batch, heads, seq_q, seq_k)`` of ``q (batch, heads, seq_q, d_head)`` against the
    keys rebuilt from ``c_kv (batch, seq_k, d_latent)``, computed as :class:`MultiHeadLatentAttention`'s materialised
    path computes them: ``w_uk (heads, d_head, d_latent)`` is its ``k_up`` weight ``W_UK`` cut into heads, so every
    head's keys are ``split_heads(c_kv @ W_UK^T)``; no scaling."""
    heads, d_head, d_latent = w_uk.shape
    k = split_heads(c_kv @ w_uk.reshape(heads * d_head, d_latent).T, heads)  # (batch, heads, seq_k, d_head)
    return q @ k.transpose(-2, -1)


def _into_latents(q: torch.Tensor, w_uk: torch.Tensor) -> torch.Tensor:
    return q @ w_uk  # (batch, heads, seq_q, d_latent)


def _against_latents(q_latent: torch.Tensor, c_kv: torch.Tensor) -> torch.Tensor:
    return q_latent @ c_kv.unsqueeze(-3).transpose(-2, -1)


def _scaled(q: torch.Tensor, w_uk: torch.Tensor, c_kv: torch.Tensor, *, by_latent: bool = False) -> torch.Tensor:
    return absorbed_scores_reference(q, w_uk, c_kv) / math.sqrt(w_uk.shape[-1 if by_latent else -2])


def _transpose_on_the_wrong_side(q: torch.Tensor, w_uk: torch.Tensor, c_kv: torch.Tensor) -> torch.Tensor:
    """``q @ w_uk.transpose(-1, -2)``: fits only when ``d_head == d_latent``."""
    return _against_latents(q @ w_uk.transpose(-1, -2), c_kv)


def _no_heads_axis(q: torch.Tensor, w_uk: torch.Tensor, c_kv: torch.Tensor) -> torch.Tensor:
    """``c_kv`` against the heads without an axis for them: its batch axis lines up with the heads'. Right for one
    sequence, an error for another batch, and wrong where batch and heads have one length."""
    return _into_latents(q, w_uk) @ c_kv.transpose(-2, -1)


def _heads_summed(q: torch.Tensor, w_uk: torch.Tensor, c_kv: torch.Tensor) -> torch.Tensor:
    return _against_latents(q @ w_uk.sum(dim=0), c_kv)


KEYS_BUILT_NAME = "every head's keys built from the latents"

_ABSORB_FIX = (
    "Take each query into the latent space first, q @ w_uk (batch, heads, seq_q, d_latent), then score it against "
    "the latents, given an axis for the heads: c_kv.unsqueeze(1) (batch, 1, seq_k, d_latent), transposed on its last "
    "two axes. No scaling: the exercise asks for the raw scores."
)

#: The probe's sizes, all different primes: a tensor of seq_k * d_head numbers (or a multiple) is some head's keys.
_PROBE = {"batch": 2, "heads": 3, "seq_q": 5, "seq_k": 11, "d_head": 7, "d_latent": 13}


class _Allocations(TorchFunctionMode):
    """Records the shape of every tensor a torch function returns while it is active (views included: none of the
    probe's inputs, nor a view of them, holds a multiple of seq_k * d_head numbers)."""

    def __init__(self) -> None:
        super().__init__()
        self.shapes: list[tuple[int, ...]] = []

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for tensor in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(tensor, torch.Tensor):
                self.shapes.append(tuple(tensor.shape))
        return out


def _builds_keys(run: Callable[..., Any]) -> bool:
    """Whether the answer, run on the probe's sizes, makes a tensor holding some head's keys: seq_k * d_head numbers,
    or a whole multiple of them, in any layout ((batch, heads, seq_k, d_head), one head's (batch, seq_k, d_head),
    (batch, seq_k, heads * d_head), a batched matmul's flattened axes). The sizes are different primes, and no tensor
    of the absorbed path (q, the queries in latent space, the latents, the scores) has such a count."""
    size = _PROBE
    g = torch.Generator().manual_seed(1301)
    q = random_tensor(g, size["batch"], size["heads"], size["seq_q"], size["d_head"])
    w_uk = random_tensor(g, size["heads"], size["d_head"], size["d_latent"])
    c_kv = random_tensor(g, size["batch"], size["seq_k"], size["d_latent"])
    keys = size["seq_k"] * size["d_head"]
    with _Allocations() as made:
        run(q, w_uk, c_kv)
    return any(math.prod(shape) % keys == 0 and math.prod(shape) > 0 for shape in made.shapes)


ABSORBED_SCORES_MISCONCEPTIONS = (
    Misconception(
        "W_UK transposed on the query's side",
        _transpose_on_the_wrong_side,
        "w_uk[h] is (d_head, d_latent), and head h's key is k_h = c_kv @ w_uk[h].T. So q_h . k_h = q_h @ w_uk[h] @ "
        "c_kv.T: the query, (seq_q, d_head), meets w_uk[h] as it is, (d_head, d_latent), and comes out with d_latent "
        "numbers, the latents' width. With w_uk transposed the shapes only fit when d_head == d_latent, and then the "
        "numbers are wrong.",
        fix=_ABSORB_FIX,
        symptom="Follow the shapes: q is (batch, heads, seq_q, d_head), w_uk (heads, d_head, d_latent); what must a "
        "query become to meet a latent of d_latent numbers?",
    ),
    Misconception(
        "scaled by sqrt(d_head)",
        _scaled,
        "The exercise asks for the raw content scores, q_h . k_h: the 1 / sqrt(d_head + d_rope) of the attention comes "
        "later, once the position part q_r . k_r is added to them.",
        fix="Leave out the division: " + _ABSORB_FIX,
        symptom="Your scores are the reference's divided by one number per case: which of the case's sizes does it "
        "come from?",
    ),
    Misconception(
        "scaled by sqrt(d_latent)",
        lambda q, w_uk, c_kv: _scaled(q, w_uk, c_kv, by_latent=True),
        "The exercise asks for raw scores. And absorbing W_UK changes where the dot product is taken, not what it is: "
        "q_h . k_h is the same number whether it is summed over d_head or over d_latent, so any scaling would still "
        "be the attention's, 1 / sqrt(d_head + d_rope), never d_latent's.",
        fix="Leave out the division: " + _ABSORB_FIX,
        symptom="Your scores are the reference's divided by one number per case: which of the case's sizes does it "
        "come from?",
    ),
    Misconception(
        "the latents given no axis for the heads",
        _no_heads_axis,
        "c_kv is (batch, seq_k, d_latent), one set of latents for all the heads. Against the queries (batch, heads, "
        "seq_q, d_latent) a matmul lines up the axes from the right, so c_kv's batch axis meets the heads' axis: "
        "sequence b's latents go to head b. It needs an axis of its own for the heads, of length 1, "
        "c_kv.unsqueeze(1), which broadcasts over them.",
        fix=_ABSORB_FIX,
        symptom="Look at how c_kv's axes line up with the queries' in your matmul: which axis meets the heads?",
    ),
    Misconception(
        "the heads' W_UK summed into one",
        _heads_summed,
        "Each head has its own W_UK_h, w_uk[h]: head h's query is taken into the latent space by its own matrix. "
        "Summing over the heads (w_uk.sum(0), or an einsum whose index for w_uk's heads is not the queries' heads) "
        "gives every head one shared matrix.",
        fix=_ABSORB_FIX,
        symptom="Your scores are wrong for every head, and would be right with one head: does head h use w_uk[h]?",
    ),
    Misconception(
        KEYS_BUILT_NAME,
        None,
        "Absorption never builds a key: q_h . (c_kv W_UK_h^T) = (q_h W_UK_h) . c_kv. Take the queries into the latent "
        "space (q @ w_uk), then score them against the latents themselves. Building the keys costs heads * seq_k * "
        "d_head numbers per sequence, for every past token at every step: what the latent cache was meant to save. "
        "(A three-operand einsum computes in the order its operands are given: q and w_uk first.)",
        detect=_builds_keys,
        fix=_ABSORB_FIX,
        symptom="Your function builds every head's keys, (batch, heads, seq_k, d_head), from the latents (or one "
        "head's, (batch, seq_k, d_head), at a time): the right numbers, but not absorbed.",
        always=True,
    ),
)


def _case(g: torch.Generator, batch: int, heads: int, seq_q: int, seq_k: int, d_head: int, d_latent: int,
          what: str) -> Case:  # fmt: skip
    q = random_tensor(g, batch, heads, seq_q, d_head)
    w_uk = random_tensor(g, heads, d_head, d_latent, scale=1.0 / math.sqrt(d_latent))
    c_kv = random_tensor(g, batch, seq_k, d_latent)
    return Case(
        (q, w_uk, c_kv),
        description=f"{what}: batch {batch}, {heads} heads, {seq_q} queries, {seq_k} latents, d_head {d_head}, "
        f"d_latent {d_latent}",
    )


def _absorbed_cases() -> list[Case]:
    g = torch.Generator().manual_seed(1302)
    return [
        _case(g, 2, 3, 4, 7, 5, 8, "a prompt after cached tokens"),
        _case(g, 1, 4, 1, 6, 3, 5, "one sequence decoding one token"),
        _case(g, 3, 2, 5, 5, 6, 4, "a prompt, the latent narrower than a head"),
    ]


def _absorbed_square_cases() -> list[Case]:
    g = torch.Generator().manual_seed(1303)
    return [_case(g, n, n, n, n, n, n, "every axis of one length") for n in (3, 4)]


def _draw_absorbed(g: torch.Generator) -> list[Case]:
    """Four cases: three prompts in which no two of batch, heads, seq_q, seq_k, d_head and d_latent have one length,
    and one sequence decoding one token; the latent wider than a head, as in DeepSeek-V2, or narrower."""

    def distinct(count: int, low: int, high: int) -> list[int]:
        return [low + int(i) for i in torch.randperm(high - low + 1, generator=g)[:count]]

    cases = []
    for decoding in (False, True, False, False):
        batch, heads, seq_q, seq_k, d_head, d_latent = distinct(6, 2, 9)
        if decoding:
            batch, seq_q = 1, 1
        cases.append(_case(g, batch, heads, seq_q, seq_k, d_head, d_latent, "drawn"))
    return cases


def check_absorbed_scores(learner: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    """Exercise: ``learner(q, w_uk, c_kv)`` returns the raw content scores ``(batch, heads, seq_q, seq_k)`` of the
    queries ``q (batch, heads, seq_q, d_head)`` against the keys that ``c_kv (batch, seq_k, d_latent)`` stands for,
    ``k_h = c_kv @ w_uk[h].T`` with ``w_uk (heads, d_head, d_latent)``, without building those keys: each query
    taken into the latent space, ``q @ w_uk``, then scored against the latents. No scaling.

    The reference is the materialised formula, :class:`MultiHeadLatentAttention`'s ``k_up`` applied and split into
    heads (:func:`absorbed_scores_reference`), in float64, on three teaching cases and four drawn for the answer.
    A probe runs the answer at sizes that are all different primes and watches every tensor PyTorch makes: one of
    ``seq_k * d_head`` numbers (or a multiple) is some head's keys, and the answer is refused even with the right
    numbers. An answer that crashes on the teaching cases is run again on square inputs, where W_UK transposed on the
    query's side, or latents without an axis for the heads, run and are named."""
    if not callable(learner):
        raise TypeError(f"learner must be a function (your my_absorbed_scores), got {type(learner).__name__}")
    return check_function(
        "absorbed_scores",
        learner,
        absorbed_scores_reference,
        _absorbed_cases(),
        ABSORBED_SCORES_MISCONCEPTIONS,
        square_cases=_absorbed_square_cases(),
        draw=_draw_absorbed,
        verbose=verbose,
    )


# ---------------------------------------------------------------- exercise 3: latent attention in your own module


_EXERCISE = "my_latent_attention"
_NAME = "MyLatentAttention"

#: What the checker compares, in the order the drive returns them.
OUTPUT_NAMES = (
    "the full pass",
    "the output with need_weights=True",
    "the weights with need_weights=True",
    "the full pass with absorbed=True",
    "decoded through a LatentCache, 2 tokens then one at a time",
    "decoded through a LatentCache with absorbed=True",
    "the latents the cache holds after decoding (cache.latents)",
    "the rotated keys the cache holds after decoding (cache.rope_keys)",
)
_ABSORBED = (3, 5)  # the outputs of the absorbed path


@dataclass(frozen=True)
class _Size:
    """How a case builds the learner's module: ``MyLatentAttention(d_model, num_heads, d_latent, d_rope,
    **keywords)`` with ``d_in``, ``bias=False`` and ``rope_base`` given only where set (``bias`` reaches only the
    parent's ``w_q`` and ``w_o``, whose biases the checker zeroes); ``seed`` draws the package module's weights."""

    d_model: int
    num_heads: int
    d_latent: int
    d_rope: int
    d_in: int | None = None
    bias: bool = True
    rope_base: float = 10000.0
    seed: int = 0

    @property
    def features(self) -> int:
        return self.d_model if self.d_in is None else self.d_in

    @property
    def d_head(self) -> int:
        return self.d_model // self.num_heads

    def keywords(self) -> dict[str, Any]:
        given: dict[str, Any] = {} if self.d_in is None else {"d_in": self.d_in}
        given |= {} if self.bias else {"bias": False}
        return given | ({} if self.rope_base == 10000.0 else {"rope_base": self.rope_base})

    def parent(self) -> ModuleSize:
        """The size at which the class the learner's extends is checked alone: the same heads, inputs and base."""
        return ModuleSize(self.d_model, self.num_heads, self.d_in, self.bias, self.rope_base, seed=self.seed)

    def __repr__(self) -> str:
        shown = [str(v) for v in (self.d_model, self.num_heads, self.d_latent, self.d_rope)] + [
            f"{key}={value:g}" if isinstance(value, float) else f"{key}={value}"
            for key, value in self.keywords().items()
        ]
        return f"{_NAME}({', '.join(shown)})"


# ------------------------------------------------ the package's module and what it gives


@functools.lru_cache(maxsize=64)
def _package(size: _Size, dtype: torch.dtype) -> MultiHeadLatentAttention:
    """The package's latent attention at ``size`` in ``dtype``, weights drawn from ``size.seed``: causal, RoPE of
    ``d_rope`` on interleaved pairs, queries read from ``x``. With ``d_in`` it reads ``d_in`` features and its ``W_O``
    gives ``d_model``, as the learner's module does."""
    width = size.num_heads * size.d_head
    with torch.random.fork_rng(devices=[]):  # building draws initial weights: the notebook's generator stays
        module = MultiHeadLatentAttention(
            size.features, size.num_heads, size.d_latent, d_head=size.d_head, causal=True,
            rope=RotaryEmbedding(size.d_rope, 64, size.rope_base),
        )  # fmt: skip
        if size.features != size.d_model:
            module.out_proj = nn.Linear(width, size.d_model, bias=False)
    g = torch.Generator().manual_seed(size.seed)
    with torch.no_grad():
        for name, parameter in module.named_parameters():
            # The position part as strong as the content part: a slip in either shows in the outputs.
            gain = 2.0 if "rope" in name else 1.5
            parameter.copy_(random_tensor(g, *parameter.shape) / parameter.shape[-1] ** 0.5 * gain)
    return module.to(dtype).requires_grad_(False)


_remembered = Remembered(2048)


def _package_outputs(module: MultiHeadLatentAttention, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    with torch.no_grad():
        full = cast(torch.Tensor, module(x))
        out, weights = cast(tuple[torch.Tensor, torch.Tensor], module(x, need_weights=True))
        absorbed = cast(torch.Tensor, module(x, absorbed=True))
        cache = LatentCache()
        steps = decoded(lambda chunk, held: module(chunk, cache=held), x, cache=cache)
        absorbed_steps = decoded(lambda chunk, held: module(chunk, cache=held, absorbed=True), x, cache=LatentCache())
    return (
        full,
        out,
        weights,
        absorbed,
        steps,
        absorbed_steps,
        cast(torch.Tensor, cache.latents),
        cast(torch.Tensor, cache.rope_keys),
    )


def _module_reference(x: torch.Tensor, size: _Size, probe: Any = None) -> tuple[torch.Tensor, ...]:
    return _remembered(("reference", size), x, lambda: _package_outputs(_package(size, x.dtype), x))


# ------------------------------------------------ the recipe written out, with its known slips


def _rotated(x: torch.Tensor, positions: torch.Tensor, base: float) -> torch.Tensor:
    """RoPE on interleaved pairs of ``x (..., seq, d)`` at ``positions (seq,)``, written as the learner's
    ``my_apply_rope``: angles in float64, broadcast against ``x`` as they come."""
    d = x.shape[-1]
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = positions.double()[:, None] * theta
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    first, second = x[..., 0::2], x[..., 1::2]
    return torch.stack((first * cos - second * sin, first * sin + second * cos), dim=-1).flatten(-2)


@dataclass(frozen=True)
class _Slip:
    """One known mistake, as a step of :func:`_attend` done another way (the defaults are right).

    ``content_rope``: ``""``; ``"latent"`` (``c_kv`` rotated before it is cached), ``"keys"`` (each head's content
    key rotated at the keys' positions, and its content query at the queries'), ``"new"`` (the content keys rotated
    with the new tokens' positions, as notebook 06 rotates its keys before the cache; decoding one token, the
    positions broadcast over every key). ``q_everywhere``: with ``"keys"``/``"new"``, the content query is rotated
    on the absorbed path too. ``scale``: ``"full"`` (``d_head + d_rope``), ``"d_head"`` (both paths), ``"latent"``
    (the absorbed path by its query's width, ``d_latent + d_rope``). ``absorb``: which side of the absorbed path
    takes ``W_h^T`` where ``W_h`` belongs (``"keys"``, ``"values"``, ``"both"``); ``view``: the per-head blocks read
    as ``weight.view(heads, d_latent, d_head).transpose(-2, -1)`` rather than transposed in place."""

    content_rope: str = ""
    q_everywhere: bool = True
    scale: str = "full"
    absorb: str = ""
    view: bool = False


def _per_head(weight: torch.Tensor, heads: int, d_head: int, wrong: bool, view: bool) -> torch.Tensor:
    """Head ``h``'s block ``W_h (d_head, d_latent)`` of an up-projection's weight, or the slip's stand-in for it."""
    d_latent = weight.shape[-1]
    if not wrong:
        return weight.view(heads, d_head, d_latent)
    if view:
        return weight.view(heads, d_latent, d_head).transpose(-2, -1)
    return weight.view(heads, d_head, d_latent).transpose(-2, -1)  # (heads, d_latent, d_head): W_h^T


def _attend(
    theirs: MultiHeadLatentAttention,
    x: torch.Tensor,
    held: tuple[torch.Tensor, torch.Tensor] | None,
    slip: _Slip,
    *,
    absorbed: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """One call on ``x (batch, new, d_in)`` after the latents and rotated keys ``held``, from ``theirs``' weights
    with ``slip``: the output, the weights and what the cache holds after it."""
    heads, d_head, d_rope, d_latent = theirs.num_heads, theirs.d_head, theirs.d_rope, theirs.d_latent
    base = cast(RotaryEmbedding, theirs.rope).base
    past, new = (0 if held is None else held[0].shape[-2]), x.shape[-2]
    positions = past + torch.arange(new)
    q = split_heads(theirs.q_up(x), heads)
    q_r = _rotated(split_heads(cast(nn.Linear, theirs.q_rope)(x), heads), positions, base)
    c_kv = theirs.kv_down(x)
    k_r = _rotated(cast(nn.Linear, theirs.k_rope)(x), positions, base)
    if slip.content_rope == "latent":
        c_kv = _rotated(c_kv, positions, base)
    if held is not None:
        c_kv, k_r = torch.cat((held[0], c_kv), dim=-2), torch.cat((held[1], k_r), dim=-2)
    rotate_content = slip.content_rope in ("keys", "new")
    if rotate_content and (slip.q_everywhere or not absorbed):
        q = _rotated(q, positions, base)
    width = {"full": d_head + d_rope, "d_head": d_head, "latent": d_latent + d_rope if absorbed else d_head + d_rope}
    position_scores = q_r @ k_r.unsqueeze(-3).transpose(-2, -1)
    if absorbed:
        w_uk = _per_head(theirs.k_up.weight, heads, d_head, slip.absorb in ("keys", "both"), slip.view)
        w_uv = _per_head(theirs.v_up.weight, heads, d_head, slip.absorb in ("values", "both"), slip.view)
        latents = c_kv.unsqueeze(-3)
        scores = (q @ w_uk) @ latents.transpose(-2, -1) + position_scores
    else:
        k, v = split_heads(theirs.k_up(c_kv), heads), split_heads(theirs.v_up(c_kv), heads)
        if rotate_content:
            k = _rotated(k, positions if slip.content_rope == "new" else torch.arange(past + new), base)
        scores = q @ k.transpose(-2, -1) + position_scores
    future = torch.ones(new, past + new, dtype=torch.bool).triu(past + 1)
    weights = torch.softmax((scores / math.sqrt(width[slip.scale])).masked_fill(future, -math.inf), dim=-1)
    attended = (weights @ latents) @ w_uv.transpose(-2, -1) if absorbed else weights @ v
    return theirs.out_proj(merge_heads(attended)), weights, (c_kv, k_r)


def _slipped(theirs: MultiHeadLatentAttention, x: torch.Tensor, slip: _Slip) -> tuple[torch.Tensor, ...]:
    """What a module with ``slip`` gives in the calls the checker makes."""
    with torch.no_grad():
        out, weights, _ = _attend(theirs, x, None, slip)
        absorbed = _attend(theirs, x, None, slip, absorbed=True)[0]
        outputs = []
        for way in (False, True):
            held: list[Any] = [None]

            def step(chunk: torch.Tensor, cache: Any, way: bool = way, held: list[Any] = held) -> torch.Tensor:
                result, _, held[0] = _attend(theirs, chunk, held[0], slip, absorbed=way)
                return result

            outputs.append(decoded(step, x))  # the step keeps its own cache
            if not way:
                latents, rope_keys = held[0]
    return out, out, weights, absorbed, outputs[0], outputs[1], latents, rope_keys


def _mistake(slip: _Slip) -> Callable[..., tuple[torch.Tensor, ...]]:
    def mistaken(x: torch.Tensor, size: _Size, probe: Any = None) -> tuple[torch.Tensor, ...]:
        return _remembered((slip, size), x, lambda: _slipped(_package(size, x.dtype), x, slip))

    return mistaken


# ------------------------------------------------ probes of the learner's module


#: 3 heads of 4, a latent of 10, a rotated part of 2; batch 2, 5 tokens: no two widths alike.
_PROBE_SIZE = _Size(12, 3, 10, 2, seed=1330)


def _probe_x() -> torch.Tensor:
    return random_tensor(torch.Generator().manual_seed(1331), 2, 5, 12)


def _rope_key_per_head(run: Callable[..., Any]) -> bool:
    """``w_kr`` gives ``heads * d_rope`` features: one rotated key per head (the checker copied the package's one key
    into every head's rows)."""
    return bool(run(_probe_x(), _PROBE_SIZE, ("built",))["w_kr"] == _PROBE_SIZE.num_heads * _PROBE_SIZE.d_rope)


def _rope_keys_cached_per_head(run: Callable[..., Any]) -> bool:
    """``w_kr`` per head, or the latents cached right and the rotated keys cached with a heads axis."""
    if _rope_key_per_head(run):
        return True
    outputs = run(_probe_x(), _PROBE_SIZE)
    latents, rope_keys = outputs[6], outputs[7]
    size, x = _PROBE_SIZE, _probe_x()
    return (
        tuple(latents.shape) == (x.shape[0], x.shape[1], size.d_latent)
        and rope_keys.ndim == 4
        and rope_keys.shape[1] == size.num_heads
    )


def _cache_holds_heads(run: Callable[..., Any]) -> bool:
    """After decoding, the cache's keys are per-head keys (a heads axis, or ``d_model`` wide, with or without the
    rotated parts), not the latents ``(batch, seq, d_latent)``."""
    outputs = run(_probe_x(), _PROBE_SIZE)
    latents, size = outputs[6], _PROBE_SIZE
    if latents.shape[-1] == size.d_latent and latents.ndim == 3:
        return False
    per_head = latents.ndim == 4 and latents.shape[1] == size.num_heads
    return per_head or latents.shape[-1] in (size.d_model, size.d_model + size.num_heads * size.d_rope)


def _close(got: Any, want: torch.Tensor) -> bool:
    return (
        isinstance(got, torch.Tensor)
        and got.shape == want.shape
        and bool(torch.allclose(got.detach().double(), want.double(), rtol=1e-4, atol=1e-5))
    )


def _absorbed_path_alone_differs(run: Callable[..., Any]) -> bool:
    """Every output of the materialised path right, and an output of the absorbed path wrong."""
    x = _probe_x()
    got, want = run(x, _PROBE_SIZE), _module_reference(x, _PROBE_SIZE)
    right = [_close(g, w) for g, w in zip(got, want, strict=True)]
    return all(r for i, r in enumerate(right) if i not in _ABSORBED) and not all(right[i] for i in _ABSORBED)


_RECIPE_FIX = (
    "positions = past + torch.arange(seq); q = my_split_heads(self.w_q(x), h); q_r = my_apply_rope(my_split_heads("
    "self.w_qr(x), h), positions, self.rope_base); c_kv = self.w_dkv(x); k_r = my_apply_rope(self.w_kr(x), positions, "
    "self.rope_base); then c_kv, k_r = cache.append(c_kv, k_r) with a cache."
)
_ROPE_HINT = (
    "RoPE turns the position part only, q_r and k_r. The content part cannot carry it: the latent is cached once and "
    "its keys are rebuilt from it at every step (and, absorbed, never built at all), and W_UK is folded into the "
    "queries, which a rotation between q and the key would forbid. That is why latent attention has a separate "
    "position part."
)
_ABSORB_HINT = (
    "Head h's key is k_h = c_kv W_h^T with W_h = w_uk.weight.view(heads, d_head, d_latent)[h], (d_head, d_latent). "
    "So q_h . k_h = (q_h W_h) . c_kv: the query is taken into the latent space by W_h itself, (..., d_head) @ "
    "(d_head, d_latent). Its weighted sum of latents goes back up the same way as v_h = c_kv W_UV_h^T: times W_UV_h^T, "
    "(..., d_latent) @ (d_latent, d_head)."
)
_MODULE_ABSORB_FIX = (
    "w_uk = self.w_uk.weight.view(h, d_head, d_latent); w_uv = self.w_uv.weight.view(h, d_head, d_latent); scores = "
    "(q @ w_uk) @ c_kv.unsqueeze(1).transpose(-2, -1) + q_r @ k_r.unsqueeze(1).transpose(-2, -1); after the softmax, "
    "heads = (weights @ c_kv.unsqueeze(1)) @ w_uv.transpose(-2, -1)."
)
_SCALE_FIX = (
    "Scale both paths by 1 / math.sqrt(d_head + d_rope): the width of the concatenated query [q, q_r] and key [k, k_r]."
)

LATENT_MODULE_MISCONCEPTIONS = (
    *(
        Misconception(
            "RoPE on the content part",
            _mistake(slip),
            _ROPE_HINT,
            fix=_RECIPE_FIX + " Rotate nothing else: not q, not c_kv, not the keys rebuilt from it.",
            symptom="Your module gives other scores than the package's wherever positions differ: something besides "
            "the position part turns with the position. Look at which tensors you rotate.",
        )
        for slip in (
            _Slip(content_rope="latent"),
            _Slip(content_rope="keys"),
            _Slip(content_rope="keys", q_everywhere=False),
            _Slip(content_rope="new"),
            _Slip(content_rope="new", q_everywhere=False),
        )
    ),
    Misconception(
        "the scale without the position part: 1/sqrt(d_head)",
        _mistake(_Slip(scale="d_head")),
        "Each score is the dot product of the whole query [q, q_r] with the whole key [k, k_r]: d_head + d_rope "
        "numbers multiplied and added, so its spread grows with d_head + d_rope, and that is the width to divide by "
        "the square root of.",
        fix=_SCALE_FIX,
        symptom="Your weights are the package's sharpened or flattened, the same on both paths: every score of "
        "yours is the package's times one number. Look at what you divide the scores by.",
    ),
    Misconception(
        "the absorbed path scaled by the latent query's width",
        _mistake(_Slip(scale="latent")),
        "Absorbed, the query [q W_UK, q_r] is d_latent + d_rope wide, but its dot products with [c_kv, k_r] are the "
        "same numbers as [q, q_r] . [k, k_r]: the scale is the materialised path's, 1/sqrt(d_head + d_rope), not one "
        "read from the tensor's width.",
        fix=_SCALE_FIX,
        symptom="Your materialised path is right; with absorbed=True your scores are the package's times one number. "
        "Look at what the absorbed path divides its scores by.",
    ),
    *(
        Misconception(
            "absorption with W_UK or W_UV transposed",
            _mistake(_Slip(absorb=side, view=view)),
            _ABSORB_HINT,
            fix=_MODULE_ABSORB_FIX,
            symptom="Your materialised path is right; with absorbed=True your outputs differ. Look at the shapes "
            "each per-head block of w_uk and w_uv has where the absorbed path multiplies by it.",
        )
        for side in ("keys", "values", "both")
        for view in (False, True)
    ),
    Misconception(
        "a rotated key per head",
        None,
        "The rotated key k_r is one per token, d_rope wide, shared by every head: w_kr = nn.Linear(d_in, d_rope, "
        "bias=False), and the cache keeps it once (d_latent + d_rope numbers per token in all). Each head has its "
        "own q_r, but all of them meet the same k_r (k_r.unsqueeze(1) broadcasts it over the heads).",
        detect=_rope_keys_cached_per_head,
        fix="self.w_kr = nn.Linear(d_in, d_rope, bias=False); k_r = my_apply_rope(self.w_kr(x), positions, "
        "self.rope_base), (batch, seq, d_rope); cache.append(c_kv, k_r); then k_r.unsqueeze(1) against q_r.",
        symptom="Your w_kr gives num_heads * d_rope features (or your cache keeps a heads axis for k_r): a position "
        "key for each head, where latent attention keeps one per token for all of them. Look at w_kr's width and at "
        "what you append to the cache.",
        always=True,
    ),
    Misconception(
        "the cache holds per-head keys and values, not the latent",
        None,
        "Latent attention's point is its cache: one latent c_kv (d_latent) and one rotated key k_r (d_rope) per "
        "token, from which every head's keys and values are rebuilt at each step. Caching the per-head keys and "
        "values keeps 2 * heads * d_head numbers per token again, as multi-head attention does.",
        detect=_cache_holds_heads,
        fix="Append before building keys or values: c_kv, k_r = cache.append(c_kv, k_r), with c_kv (batch, seq, "
        "d_latent) and k_r (batch, seq, d_rope); then rebuild k and v from all the latents.",
        symptom="After decoding, your LatentCache holds per-head keys or values, not the latents (batch, seq, "
        "d_latent). Look at what you append.",
    ),
    Misconception(
        "the absorbed path computes other numbers than the materialised one",
        None,
        _ABSORB_HINT + " The position part, q_r . k_r, and the scale are the same on both paths.",
        detect=_absorbed_path_alone_differs,
        fix=_MODULE_ABSORB_FIX,
        symptom="Your materialised path is right (the full pass, need_weights=True, the decode and the cache); "
        "with absorbed=True your outputs differ. Look at the absorbed path alone.",
    ),
)


# ------------------------------------------------ driving the learner's module

_LAYERS = ("w_dkv", "w_uk", "w_uv", "w_qr", "w_kr")
_SOURCES = {"w_q": "q_up", "w_dkv": "kv_down", "w_uk": "k_up", "w_uv": "v_up", "w_qr": "q_rope", "w_kr": "k_rope",
            "w_o": "out_proj"}  # fmt: skip
_ROLES = {
    "w_q": "nn.Linear(d_in, d_model), your MyCausalSelfAttention's, the content queries",
    "w_dkv": "nn.Linear(d_in, d_latent, bias=False), down to the latent",
    "w_uk": "nn.Linear(d_latent, d_model, bias=False), the latent up to every head's content key",
    "w_uv": "nn.Linear(d_latent, d_model, bias=False), the latent up to every head's value",
    "w_qr": "nn.Linear(d_in, num_heads * d_rope, bias=False), every head's position query",
    "w_kr": "nn.Linear(d_in, d_rope, bias=False), the one position key all heads share",
    "w_o": "nn.Linear(d_model, d_model), your MyCausalSelfAttention's",
}


def _layer(mine: nn.Module, name: str, size: _Size) -> nn.Linear:
    """The learner's layer ``name``, checked against the package's: an ``nn.Linear`` of its shape, without a bias
    (those ``w_q`` and ``w_o`` may have are zeroed: DeepSeek-V2 has none); ``w_kr`` may give a key per head (a probe
    names it)."""
    layer = getattr(mine, name, None)
    role = _ROLES[name]
    if not isinstance(layer, nn.Linear):
        raise AnswerRejected(f"your module has no nn.Linear `{name}` (got {type(layer).__name__}): {role}")
    d_in, width = size.features, size.num_heads * size.d_head
    shapes = {"w_q": (width, d_in), "w_dkv": (size.d_latent, d_in), "w_uk": (width, size.d_latent),
              "w_uv": (width, size.d_latent), "w_qr": (size.num_heads * size.d_rope, d_in),
              "w_kr": (size.d_rope, d_in), "w_o": (size.d_model, width)}  # fmt: skip
    shape = tuple(layer.weight.shape)
    per_head = name == "w_kr" and shape == (size.num_heads * size.d_rope, d_in)
    if shape != shapes[name] and not per_head:
        raise AnswerRejected(
            f"your self.{name} maps {layer.in_features} features to {layer.out_features}; here (d_in={d_in}, "
            f"d_model={size.d_model}, {size.num_heads} heads, d_latent={size.d_latent}, d_rope={size.d_rope}) it must "
            f"map {shapes[name][1]} to {shapes[name][0]}: {role}"
        )
    if layer.bias is not None and name in _LAYERS:
        raise AnswerRejected(
            f"your self.{name} has a bias; latent attention's projections have none (DeepSeek-V2): {role}"
        )
    return layer


@torch.no_grad()
def _copy(mine: nn.Module, theirs: MultiHeadLatentAttention, size: _Size) -> dict[str, int]:
    """The package's weights into the learner's layers (a per-head ``w_kr`` gets the one key in every head's rows;
    biases of ``w_q`` and ``w_o``, if the parent kept them, zeroed); returns ``w_kr``'s width."""
    for name, source in _SOURCES.items():
        layer = _layer(mine, name, size)
        weight = cast(nn.Linear, getattr(theirs, source)).weight
        if layer.weight.shape != weight.shape:  # w_kr with a key per head
            weight = weight.repeat(size.num_heads, 1)
        layer.weight.copy_(weight)
        if layer.bias is not None:
            layer.bias.zero_()
    return {"w_kr": cast(nn.Linear, mine.w_kr).out_features}


def _held(cache: LatentCache, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    latents, rope_keys = cache.latents, cache.rope_keys
    seq = x.shape[1]
    if latents is None or rope_keys is None or cache.length != seq:
        raise AnswerRejected(
            f"after decoding {seq} tokens through one LatentCache, it holds {cache.length}: each call appends its "
            "new tokens' latents and rotated keys once, c_kv, k_r = cache.append(c_kv, k_r), and reads the "
            "positions from cache.length before appending"
        )
    return latents, rope_keys


def _drive(learner: Any, x: torch.Tensor, size: _Size, probe: Any, told: dict[str, str]) -> Any:
    """``learner``, the class, built at ``size`` with the package's weights copied in, run on ``x`` in the calls the
    checker compares; with ``probe``, what a probe reads of it."""
    if probe is None and isinstance(learner, type):
        verify_parent(learners_parent(learner), x, size.parent())
    mine = learner(size.d_model, size.num_heads, size.d_latent, size.d_rope, **size.keywords())
    if not isinstance(mine, nn.Module):
        raise AnswerRejected(f"{size!r} gave {type(mine).__name__}, not an nn.Module")
    signature = inspect.signature(mine.forward)
    try:
        signature.bind(x, cache=None, need_weights=True, absorbed=True)
    except TypeError:
        raise AnswerRejected(
            f"your forward takes {signature}; it must take forward(self, x, cache=None, need_weights=False, "
            "absorbed=False)"
        ) from None
    mine.to(x.dtype)
    built = _copy(mine, _package(size, x.dtype), size)
    if probe == ("built",):
        return built
    full = output_tensor(mine(x), "your forward")
    out, weights = output_pair(mine(x, need_weights=True))
    absorbed = output_tensor(mine(x, absorbed=True), "with absorbed=True, your forward")
    cache = LatentCache()
    steps = decoded(lambda chunk, held: mine(chunk, cache=held), x, "through a LatentCache, your forward", cache=cache)
    latents, rope_keys = _held(cache, x)
    absorbed_steps = decoded(
        lambda chunk, held: mine(chunk, cache=held, absorbed=True),
        x,
        "through a LatentCache with absorbed=True, your forward",
        cache=LatentCache(),
    )
    return full, out, weights, absorbed, steps, absorbed_steps, latents, rope_keys


def _module_case(x: torch.Tensor, size: _Size) -> Case:
    return Case((x, size), description=f"{size!r} on x {tuple(x.shape)}")


def _module_cases() -> list[Case]:
    g = torch.Generator().manual_seed(1340)
    # d_in left out and given, two bases; no two of batch, seq, heads, d_head, d_latent, d_rope alike where it counts.
    return [
        _module_case(random_tensor(g, 3, 5, 8), _Size(8, 2, 6, 2, seed=1341)),
        _module_case(random_tensor(g, 2, 6, 10), _Size(12, 3, 8, 2, d_in=10, rope_base=100.0, seed=1342)),
        _module_case(random_tensor(g, 4, 3, 12), _Size(12, 2, 10, 4, bias=False, seed=1343)),
    ]


def _module_square_cases() -> list[Case]:
    g = torch.Generator().manual_seed(1344)
    # The latent as wide as a head: W_h and W_h^T have one shape.
    return [
        _module_case(random_tensor(g, 3, 5, 8), _Size(8, 2, 4, 2, seed=1345)),
        _module_case(random_tensor(g, 2, 4, 12), _Size(12, 2, 6, 4, seed=1346)),
    ]


def _draw_modules(seed: int) -> list[Case]:
    """Three sizes and inputs: d_latent even and other than d_head, d_in sometimes other than d_model."""
    g = torch.Generator().manual_seed(seed)

    def pick(options: Sequence[Any], *, taken: Sequence[Any] = ()) -> Any:
        left = [option for option in options if option not in taken]
        return left[int(torch.randint(len(left), (), generator=g))]

    cases = []
    for _ in range(3):
        heads = pick((2, 3, 4))
        d_head = pick((2, 4, 6), taken=(heads,))
        d_model = heads * d_head
        d_latent = pick((4, 6, 8, 10, 12), taken=(d_head, d_model))
        d_rope = pick((2, 4), taken=(d_head,))
        d_in = pick((None, None, d_model + 2))
        size = _Size(d_model, heads, d_latent, d_rope, d_in, pick((True, True, False)), pick((10000.0, 500.0)),
                     seed=int(torch.randint(2**31 - 1, (), generator=g)))  # fmt: skip
        batch = pick((1, 2, 3, 5), taken=(heads,))
        x = random_tensor(g, batch, pick((3, 4, 5, 6, 7), taken=(batch,)), size.features)
        cases.append(_module_case(x, size))
    return cases


def check_my_latent_attention(learner: Any, *, verbose: bool = True) -> CheckResult:
    """Check the learner's ``MyLatentAttention(d_model, num_heads, d_latent, d_rope, **kwargs)``, which extends their
    notebook-06 ``MyCausalSelfAttention``: ``w_q`` and ``w_o`` kept, and the bias-free ``w_dkv (d_in -> d_latent)``,
    ``w_uk``, ``w_uv (d_latent -> d_model)``, ``w_qr (d_in -> heads * d_rope)``, ``w_kr (d_in -> d_rope)``; its
    ``forward(x, cache=None, need_weights=False, absorbed=False)`` gives ``(batch, seq, d_model)``, or ``(out,
    weights)``, and appends each token's latent and rotated key to a ``LatentCache``.

    Built at three sizes (``d_in`` left out and given, ``bias=False``, two RoPE bases) and three drawn for the
    answer, with a package ``MultiHeadLatentAttention``'s weights copied in, it must give the package's full pass,
    output and weights, absorbed pass, decodes through a ``LatentCache`` (both paths) and cache contents. The class it
    extends is checked alone first; when it already differs from the package's attention, the learner is sent back
    to notebook 06."""
    result, _ = judge_class(
        _EXERCISE,
        learner,
        _NAME,
        _drive,
        parent_not_written,
        _module_reference,
        _module_cases(),
        LATENT_MODULE_MISCONCEPTIONS,
        square_cases=_module_square_cases(),
        output_names=OUTPUT_NAMES,
        shortcuts=("MultiHeadLatentAttention", "attend_absorbed", "attend_materialised"),
        draw=_draw_modules,
    )
    result = escalate(result)
    if verbose:
        print(result.message)
    return result
