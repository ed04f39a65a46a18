"""Checkers for notebook 04 (multi-head attention).

Each ``check_*`` function runs the learner's function on cases built from a seeded
generator (and on cases drawn for the answer) and compares with the package; a wrong answer
is told what still differs, and the misconception it matches is named on a repeat or on
``result.hint()``. The cases always have more than one head *and* more than one position:
with ``heads == 1`` or ``seq == 1`` a missing transpose changes nothing and would go unnoticed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from types import SimpleNamespace

import torch

from ... import (
    merge_heads,
    multi_head_self_attention,
    split_heads,
)
from ...attention import attend
from ...masking import causal_mask
from ...teaching.checking import Case, CheckResult, Misconception, check_function, random_tensor
from ...teaching.modules import MULTI_HEAD_CONTRACT, Call, ModuleSetting, check_module
from ...teaching.order_widget import OrderExercise
from ...teaching.ordering import MisOrder, OrderPuzzle, check_order
from ...teaching.predictions import check_prediction

__all__ = [
    "RECIPE_PUZZLE",
    "check_multi_head_attention",
    "check_my_multi_head_attention",
    "check_parameter_prediction",
    "check_recipe_order",
    "check_split_heads",
    "handed_out_multi_head_attention",
    "recipe_order_exercise",
]


# --------------------------------------------------------------- split_heads


def _split_view_without_transpose(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    *batch, seq, d_model = x.shape
    return x.reshape(*batch, num_heads, seq, d_model // num_heads)


def _split_no_transpose(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    *batch, seq, d_model = x.shape
    return x.reshape(*batch, seq, num_heads, d_model // num_heads)


def _split_strided(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    # (d_head, heads) instead of (heads, d_head): head i gets features i, i + h, i + 2h, ...
    *batch, seq, d_model = x.shape
    return x.reshape(*batch, seq, d_model // num_heads, num_heads).transpose(-1, -2).transpose(-3, -2)


#: The name the module checker gives the same cut (teaching.modules.MODULE_MISTAKES).
_STRIDED = "heads take every h-th feature"

SPLIT_HEADS_MISCONCEPTIONS = (
    Misconception(
        "view without transpose",
        _split_view_without_transpose,
        "Reshaping (..., seq, d_model) straight to (..., heads, seq, d_head) runs without error but fills each "
        "head with features of *different* positions.",
        fix="View as (..., seq, heads, d_head) first, then swap the seq and heads axes with .transpose(-3, -2).",
        symptom="The shape is right, but a head's rows hold the features of other positions than the input's rows.",
    ),
    Misconception(
        "missing transpose: heads still after seq",
        _split_no_transpose,
        "Cutting d_model into (heads, d_head) is right, but attention wants each head as its own (seq, d_head) "
        "matrix: the heads axis must come before seq.",
        fix="Add .transpose(-3, -2) after the view.",
        symptom="The result has the axes (..., seq, heads, d_head): the heads and seq axes are in each other's place.",
    ),
    Misconception(
        _STRIDED,
        _split_strided,
        "Head i owns the *consecutive* features i*d_head ... (i+1)*d_head - 1, the same rows of W_Q that belong to "
        "head i; cutting the feature axis as (d_head, heads) deals them out one by one instead.",
        fix="Cut the feature axis as (heads, d_head): x.view(*batch, seq, heads, d_head).transpose(-3, -2).",
        symptom="Head 0 holds features 0, h, 2h, ... of each position instead of features 0 .. d_head - 1.",
    ),
    Misconception(
        "hard-coded transpose(1, 2)",
        lambda x, h: x.reshape(*x.shape[:-1], h, x.shape[-1] // h).transpose(1, 2),
        "transpose(1, 2) swaps the right axes only for a 3-D (batch, seq, d_model) input: with no batch axis, or "
        "with more leading axes, it swaps others.",
        fix="Count the axes from the end: .transpose(-3, -2).",
        symptom="Right for a 3-D input, wrong for inputs with no batch axis or with more than one.",
    ),
    # The same cut, (d_head, heads), left with d_head where the heads belong: x.view(*batch, seq, d_head, heads)
    # .transpose(-3, -2), or torch.split(x, num_heads, dim=-1) (pieces of num_heads features) stacked.
    Misconception(
        _STRIDED,
        lambda x, h: torch.stack(torch.split(x, h, dim=-1), dim=-3),
        "Cutting the feature axis as (d_head, heads), a view(..., seq, d_model // num_heads, num_heads) or "
        "torch.split(x, num_heads, dim=-1) (which cuts pieces of num_heads features each), deals the features out "
        "one by one: the axis of size num_heads then runs over every h-th feature, and d_head pieces stand where "
        "the heads belong. Head i owns the *consecutive* features i*d_head ... (i+1)*d_head - 1.",
        fix="Cut the feature axis as (heads, d_head): x.view(*batch, seq, num_heads, d_head).transpose(-3, -2). "
        "torch.split takes the size of a piece, d_head (torch.chunk(x, num_heads, dim=-1) takes the number of "
        "pieces); stack the pieces on axis -3.",
        symptom="The number of heads and d_head are swapped in the result's shape.",
    ),
)


def _split_cases() -> list[Case]:
    g = torch.Generator().manual_seed(4)
    return [
        Case((torch.randn(2, 3, 8, generator=g), 2), description="x (batch=2, seq=3, d_model=8), 2 heads"),
        Case((torch.randn(5, 12, generator=g), 3), description="x (seq=5, d_model=12), 3 heads"),
        Case((torch.randn(2, 2, 4, 6, generator=g), 2), description="x (2, 2, seq=4, d_model=6), 2 heads"),
        Case((torch.randn(1, 4, 8, generator=g), 4), description="x (batch=1, seq=4, d_model=8), 4 heads"),
    ]


def _draw_split(g: torch.Generator) -> list[Case]:
    cases = []
    for lead in ((), (3,), (2, 1), (1, 2, 2)):
        heads, d_head, seq = (int(n) for n in torch.randint(2, 6, (3,), generator=g))
        shape = (*lead, seq, heads * d_head)
        cases.append(Case((random_tensor(g, *shape), heads), description=f"x {shape}, {heads} heads"))
    return cases


def check_split_heads(learner: Callable[..., torch.Tensor], *, verbose: bool = True) -> CheckResult:
    """Check ``learner(x (..., seq, d_model), num_heads) -> (..., heads, seq, d_head)``."""
    return check_function(
        "split_heads",
        learner,
        split_heads,
        _split_cases(),
        SPLIT_HEADS_MISCONCEPTIONS,
        shortcuts=("split_heads",),
        draw=_draw_split,
        verbose=verbose,
    )


# --------------------------------------------------- the whole multi-head block (debugging)


def _merge_reshape_without_transpose(x: torch.Tensor) -> torch.Tensor:
    *batch, heads, seq, d_head = x.shape
    return x.reshape(*batch, seq, heads * d_head)


def _mha_reference(x, q_weight, k_weight, v_weight, o_weight, num_heads):
    return multi_head_self_attention(x, q_weight, k_weight, v_weight, o_weight, num_heads=num_heads)


def handed_out_multi_head_attention(x, q_weight, k_weight, v_weight, o_weight, num_heads):
    """The function exercise 3 hands out, with its bug: ``(..., seq, d_model)`` -> ``(..., seq, d_model)``."""
    *batch, seq, d_model = x.shape
    d_head = d_model // num_heads

    def heads(t):  # (..., seq, d_model) -> (..., heads, seq, d_head)
        return t.reshape(*batch, seq, num_heads, d_head).transpose(-3, -2)

    q, k, v = heads(x @ q_weight.T), heads(x @ k_weight.T), heads(x @ v_weight.T)
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d_head), dim=-1)
    merged = (weights @ v).reshape(*batch, seq, d_model)
    return merged @ o_weight.T


def _mha_parts(x, q_weight, k_weight, v_weight, num_heads, split=split_heads, transpose_weights=True):
    def project(w):
        return x @ (w.T if transpose_weights else w)

    return split(project(q_weight), num_heads), split(project(k_weight), num_heads), split(project(v_weight), num_heads)


def _mha_forgot_w_o(x, q_weight, k_weight, v_weight, o_weight, num_heads):
    q, k, v = _mha_parts(x, q_weight, k_weight, v_weight, num_heads)
    return merge_heads(attend(q, k, v)[0])


def _mha_view_without_transpose(x, q_weight, k_weight, v_weight, o_weight, num_heads):
    q, k, v = _mha_parts(x, q_weight, k_weight, v_weight, num_heads, split=_split_view_without_transpose)
    return _merge_reshape_without_transpose(attend(q, k, v)[0]) @ o_weight.T


def _mha_split_view_merge_ok(x, q_weight, k_weight, v_weight, o_weight, num_heads):
    q, k, v = _mha_parts(x, q_weight, k_weight, v_weight, num_heads, split=_split_view_without_transpose)
    return merge_heads(attend(q, k, v)[0]) @ o_weight.T


def _mha_scale_d_model(x, q_weight, k_weight, v_weight, o_weight, num_heads):
    q, k, v = _mha_parts(x, q_weight, k_weight, v_weight, num_heads)
    d_model = q_weight.shape[0]
    return merge_heads(attend(q, k, v, scale=d_model**-0.5)[0]) @ o_weight.T


def _mha_one_head(x, q_weight, k_weight, v_weight, o_weight, num_heads):
    return _mha_reference(x, q_weight, k_weight, v_weight, o_weight, 1)


def _mha_softmax_over_heads(x, q_weight, k_weight, v_weight, o_weight, num_heads):
    q, k, v = _mha_parts(x, q_weight, k_weight, v_weight, num_heads)
    weights = torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, dim=-3)
    return merge_heads(weights @ v) @ o_weight.T


def _mha_untransposed_weights(x, q_weight, k_weight, v_weight, o_weight, num_heads):
    q, k, v = _mha_parts(x, q_weight, k_weight, v_weight, num_heads, transpose_weights=False)
    return merge_heads(attend(q, k, v)[0]) @ o_weight


_MIXED = "Each output row depends on other positions' features than attention alone would give it."

MHA_MISCONCEPTIONS = (
    Misconception(
        "merge without transposing back",
        handed_out_multi_head_attention,
        "The split is right, but the head outputs (..., heads, seq, d_head) reshaped straight to (..., seq, d_model) "
        "put pieces of different positions side by side.",
        fix="Transpose back to (..., seq, heads, d_head) before flattening: (weights @ v).transpose(-3, -2)"
        ".reshape(*batch, seq, d_model).",
        symptom=_MIXED + " Look at the line that merges the heads.",
    ),
    Misconception(
        "forgot W_O",
        _mha_forgot_w_o,
        "Without the output projection each output feature comes from a single head and nothing mixes what the heads "
        "found.",
        fix="After concatenating the heads, multiply by the output projection: out = concat @ o_weight.T.",
        symptom="Each feature of your output stays between the smallest and the largest of the same feature of the "
        "values x @ v_weight.T: every output row is a weighted average of the value rows, feature by feature.",
    ),
    Misconception(
        "view without transpose",
        _mha_view_without_transpose,
        "Splitting with a reshape straight to (..., heads, seq, d_head), and merging back the same way, runs but "
        "mixes positions inside each head.",
        fix="View as (..., seq, heads, d_head) and transpose(-3, -2); merge back the same way in reverse.",
        symptom=_MIXED + " Look at the lines that split and merge the heads.",
    ),
    Misconception(
        "view without transpose when splitting (merge correct)",
        _mha_split_view_merge_ok,
        "The merge is right, but the split reshapes (..., seq, d_model) straight to (..., heads, seq, d_head): it "
        "runs, but fills each head with features of different positions.",
        fix="View as (..., seq, heads, d_head) first, then .transpose(-3, -2).",
        symptom=_MIXED + " Look at the line that splits the heads.",
    ),
    Misconception(
        "scaled by √d_model instead of √d_head",
        _mha_scale_d_model,
        "Each head is its own attention over d_head features: the spread of its scores grows like √d_head.",
        fix="Divide each head's scores by math.sqrt(d_head).",
        symptom="Your output rows lie closer to their mean over the positions than the reference's, as if every "
        "query spread its weight more evenly over the keys.",
    ),
    Misconception(
        "one head: num_heads ignored",
        _mha_one_head,
        "The result equals single-head attention over all d_model features: each head needs its own weights.",
        fix="Split q, k and v into num_heads heads before the softmax.",
        symptom="Your output does not change with num_heads.",
    ),
    Misconception(
        "weights used as x @ W instead of x @ W.T",
        _mha_untransposed_weights,
        "These weights are in nn.Linear's (d_out, d_in) layout; the hand-worked example of notebook 01 writes E @ W "
        "because it stores W as (d_in, d_out).",
        fix="Apply them as x @ W.T (or F.linear(x, W)).",
        symptom="Every projection differs from the reference's, from the first step on.",
    ),
    Misconception(
        "only W_O applied without its transpose",
        lambda x, wq, wk, wv, wo, h: _mha_forgot_w_o(x, wq, wk, wv, wo, h) @ wo,
        "W_O is in the same (d_out, d_in) layout as W_Q, W_K and W_V.",
        fix="concat @ o_weight.T.",
        symptom="Everything up to the last projection is right; the last one differs.",
    ),
    Misconception(
        "softmax over the heads axis",
        _mha_softmax_over_heads,
        "Each head's query rows are normalised over the keys: a row of weights sums to 1 within one head.",
        fix="softmax(..., dim=-1).",
        symptom="Your heads' outputs are not weighted averages of their values: within a head, a query's weights "
        "on the keys do not add up to 1.",
    ),
)


def _mha_case(g: torch.Generator, batch: tuple[int, ...], seq: int, d_model: int, heads: int) -> Case:
    shape = (*batch, seq, d_model)
    weights = [random_tensor(g, d_model, d_model, scale=d_model**-0.5) for _ in range(4)]
    return Case((random_tensor(g, *shape, scale=2.0), *weights, heads), description=f"x {tuple(shape)}, {heads} heads")


def _mha_cases() -> list[Case]:
    g = torch.Generator().manual_seed(404)
    return [_mha_case(g, (2,), 4, 8, 2), _mha_case(g, (), 5, 12, 3), _mha_case(g, (1,), 6, 8, 4)]


def _draw_mha(g: torch.Generator) -> list[Case]:
    def pick(low: int, high: int) -> int:
        return int(torch.randint(low, high, (1,), generator=g))

    return [
        _mha_case(g, batch, pick(2, 8), (heads := pick(2, 5)) * pick(2, 5), heads) for batch in ((3,), (), (2, 2), (1,))
    ]


def check_multi_head_attention(learner: Callable[..., torch.Tensor], *, verbose: bool = True) -> CheckResult:
    """Debugging exercise: ``learner(x (..., seq, d_model), q_weight, k_weight, v_weight, o_weight, num_heads)``
    with ``(d_model, d_model)`` weights in ``nn.Linear`` layout (applied as ``x @ W.T``), no biases, no mask,
    returns ``(..., seq, d_model)``. The notebook hands out :func:`handed_out_multi_head_attention`."""
    return check_function(
        "multi_head_attention",
        learner,
        _mha_reference,
        _mha_cases(),
        MHA_MISCONCEPTIONS,
        shortcuts=("multi_head_self_attention", "MultiHeadSelfAttention", "MultiheadAttention"),
        draw=_draw_mha,
        original=handed_out_multi_head_attention,
        verbose=verbose,
    )


# ------------------------------------------------- predict: the parameter count


#: The module of the prediction exercise, MyMultiHeadAttention(64, 4, d_in=32): (d_model, num_heads, d_in).
PREDICTION_MODULE = (64, 4, 32)


def _parameters(d_in: int, d_model: int, *, biases: bool = True, w_o: bool = True, heads: int = 1) -> int:
    count = 3 * (d_in * d_model + biases * d_model) + w_o * (d_model * d_model + biases * d_model)
    return heads * count


def check_parameter_prediction(answer: object, *, verbose: bool = True) -> CheckResult:
    """Check the predicted number of parameters of ``MyMultiHeadAttention(64, 4, d_in=32)``: ``nn.Linear``
    projections ``w_q, w_k, w_v`` (32 -> 64) and ``w_o`` (64 -> 64), all with biases."""
    d_model, heads, d_in = PREDICTION_MODULE
    mistakes = (
        Misconception(
            "every projection counted as d_model x d_model",
            lambda: _parameters(d_model, d_model),
            "W_Q, W_K and W_V read the *input*: each is (d_out, d_in) = (64, 32), not (64, 64). Only W_O is 64 x 64.",
            symptom="Look again at what W_Q, W_K and W_V read.",
        ),
        Misconception(
            "biases forgotten",
            lambda: _parameters(d_in, d_model, biases=False),
            "nn.Linear has a bias by default: one number per output feature, 64 for each of the four layers.",
            symptom="What does an nn.Linear hold besides its weight?",
        ),
        Misconception(
            "the count multiplied by the number of heads",
            lambda: _parameters(d_in, d_model, heads=heads),
            "Heads do not add parameters: the 4 heads are 4 slices of the same 64 output features (section 7: the "
            "paper's layer has the same count for every number of heads).",
            symptom="Do the heads bring weights of their own?",
        ),
        Misconception(
            "W_O forgotten",
            lambda: _parameters(d_in, d_model, w_o=False),
            "The output projection w_o (64 -> 64, with its bias) is a fourth layer with its own parameters.",
            symptom="Count the layers again: there are four.",
        ),
    )
    return check_prediction(
        "parameter_prediction",
        answer,
        lambda: _parameters(d_in, d_model),
        "MyMultiHeadAttention(d_model=64, num_heads=4, d_in=32)",
        mistakes,
        explain="3 × (32 · 64 + 64) for W_Q, W_K and W_V, and 64 · 64 + 64 for W_O",
        verbose=verbose,
    )


# ------------------------------------------------- the learner's own module


def _mha_settings() -> list[ModuleSetting]:
    def setting(d_in, d_model, heads, calls, *, bias=True):
        full_passes = tuple(Call("full", batch, seq) for batch, seq in calls)
        return ModuleSetting(d_in, d_model, heads, bias=bias, calls=full_passes)

    return [
        setting(8, 8, 2, [(2, 5), (1, 1), (3, 7)]),
        setting(6, 12, 3, [(2, 4), (1, 17)]),  # d_in != d_model
        setting(16, 16, 4, [(1, 7)], bias=False),  # no bias in any of the four layers
        setting(8, 8, 1, [(2, 3)]),  # one head
    ]


def check_my_multi_head_attention(learner: Callable[..., torch.nn.Module], *, verbose: bool = True) -> CheckResult:
    """Check the learner's class ``MyMultiHeadAttention(d_model, num_heads, *, d_in=None, bias=True)``: an
    ``nn.Module`` with ``nn.Linear`` layers ``w_q, w_k, w_v`` (d_in -> d_model, d_in = d_model when ``None``) and
    ``w_o`` (d_model -> d_model), with biases unless ``bias=False``, whose ``forward(x (batch, seq, d_in))`` returns
    ``(batch, seq, d_model)``, no mask.

    Built at four sizes (1 to 4 heads, d_in != d_model, one without biases, 1 to 17 tokens, batch 1 to 3) and
    two drawn for the answer, with the weights of a package :class:`~mhsa_helpers.MultiHeadSelfAttention` copied
    in, it must give the package's output; then a backward pass must reach every weight and bias
    (:func:`~mhsa_helpers.teaching.modules.check_module`)."""
    return check_module(
        "my_multi_head_attention",
        learner,
        MULTI_HEAD_CONTRACT,
        _mha_settings(),
        seed=4040,
        shortcuts=("multi_head_self_attention", "MultiHeadSelfAttention", "MultiheadAttention"),
        verbose=verbose,
    )


# --------------------------------------------------------------- the recipe, in order


def _recipe_inputs(generator: torch.Generator) -> dict[str, object]:
    """One sequence of 4 tokens, d_model 8, 2 heads; float64, so that only the order changes the result."""
    weights = {name: random_tensor(generator, 8, 8, scale=0.5) for name in ("w_q", "w_k", "w_v", "w_o")}
    return {
        "x": random_tensor(generator, 1, 4, 8),
        **weights,
        "num_heads": 2,
        "mask": causal_mask(4),
        "mh": SimpleNamespace(split_heads=split_heads, merge_heads=merge_heads),
    }


#: The multi-head recipe of section 5 with the causal mask of notebook 03, its eight lines shuffled.
RECIPE_PUZZLE = OrderPuzzle(
    exercise="recipe_order",
    lines={
        "A": "weights = torch.softmax(scores, dim=-1)",
        "B": "q, k, v = x @ w_q.T, x @ w_k.T, x @ w_v.T",
        "C": "merged = mh.merge_heads(heads)",
        "D": "scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])",
        "E": "out = merged @ w_o.T",
        "F": 'scores = scores.masked_fill(~mask, float("-inf"))',
        "G": "q, k, v = mh.split_heads(q, num_heads), mh.split_heads(k, num_heads), mh.split_heads(v, num_heads)",
        "H": "heads = weights @ v",
    },
    solution=("B", "G", "D", "F", "A", "H", "C", "E"),
    inputs=_recipe_inputs,
    result="out",
    misorders=(
        MisOrder(
            "mask after softmax",
            first="F",
            then="A",
            hint="The softmax has already turned the scores into weights when the mask changes the scores, so the "
            "weights never see it: every token attends to the tokens after it too.",
            fix="Mask the scores (line F) before the softmax (line A) turns them into weights.",
            symptom="The first token's output is not its own value alone, though it may see only itself.",
        ),
        MisOrder(
            "scores before the split into heads",
            first="G",
            then="D",
            hint="Scores computed before the split compare all d_model numbers of a query and a key at once: one "
            "pattern of weights, shared by every head, and divided by √d_model instead of √d_head. Each head "
            "scores with its own slice.",
            fix="Split q, k and v into heads (line G) before computing the scores (line D).",
            symptom="Every head gets the same weights.",
        ),
    ),
)


def check_recipe_order(answer: object, *, verbose: bool = True) -> CheckResult:
    """Exercise: the learner's order of :data:`RECIPE_PUZZLE`'s lines (a list of labels, first line first), run
    on three drawn inputs and compared with the recipe (:func:`~mhsa_helpers.teaching.ordering.check_order`)."""
    return check_order(RECIPE_PUZZLE, answer, verbose=verbose)


def recipe_order_exercise() -> OrderExercise:
    """The recipe's lines to arrange with the mouse or the keyboard, checked by :func:`check_recipe_order`."""
    return OrderExercise(RECIPE_PUZZLE, check_recipe_order)
