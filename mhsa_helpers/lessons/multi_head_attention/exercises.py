"""Checkers for notebook 04 (multi-head attention).

Each ``check_*`` function runs the learner's function on cases built from a seeded
generator (and on cases drawn for the answer) and compares with the package; a wrong answer
is told what still differs, and the misconception it matches is named on a repeat or on
``result.hint()``. The cases always have more than one head *and* more than one position:
with ``heads == 1`` or ``seq == 1`` a missing transpose changes nothing and would go unnoticed.
"""

from __future__ import annotations

import copy
import functools
import inspect
import math
from collections.abc import Callable
from dataclasses import replace
from types import SimpleNamespace
from typing import cast

import torch
from torch import nn

from ... import (
    AttentionWeights,
    merge_heads,
    multi_head_self_attention,
    split_heads,
)
from ...attention import attend
from ...masking import causal_mask
from ...teaching.checking import (
    AnswerRejected,
    Case,
    CheckResult,
    Misconception,
    check_function,
    learner_line,
    random_tensor,
)
from ...teaching.mine import PackageMultiHeadAttention
from ...teaching.modules import MULTI_HEAD_CONTRACT, Call, ModuleSetting, check_module
from ...teaching.order_widget import OrderExercise
from ...teaching.ordering import MisOrder, OrderPuzzle, check_order
from ...teaching.predictions import check_prediction

__all__ = [
    "LOAD_MISCONCEPTIONS",
    "RECIPE_PUZZLE",
    "check_heads_one_by_one",
    "check_load_from_torch",
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
    return multi_head_self_attention(x, AttentionWeights(q_weight, k_weight, v_weight, o_weight), num_heads=num_heads)


def handed_out_multi_head_attention(x, q_weight, k_weight, v_weight, o_weight, num_heads):
    """The function exercise 4 hands out, with its bug: ``(..., seq, d_model)`` -> ``(..., seq, d_model)``."""
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


# --------------------------------------------- heads one at a time (the per-head view, in a loop)


def _one_head(x, weight, head, num_heads, *, interleaved=False, columns=False):
    """Head ``head``'s projection of ``x`` by an ``(d_model, d_in)`` weight: its block of rows, or a slip."""
    d_head = weight.shape[0] // num_heads
    if columns:  # the weight read in notebook 01's (d_in, d_out) layout: runs only when d_in == d_model
        return x @ weight[:, head * d_head : (head + 1) * d_head]
    rows = weight[head::num_heads] if interleaved else weight[head * d_head : (head + 1) * d_head]
    return x @ rows.T


def _head_outputs(x, q_weight, k_weight, v_weight, num_heads, *, scale=None, **slip):
    outputs = []
    for head in range(num_heads):
        q, k, v = (_one_head(x, w, head, num_heads, **slip) for w in (q_weight, k_weight, v_weight))
        outputs.append(attend(q, k, v, scale=scale)[0])
    return outputs


def _loop_columns(x, q_weight, k_weight, v_weight, o_weight, num_heads):
    return torch.cat(_head_outputs(x, q_weight, k_weight, v_weight, num_heads, columns=True), dim=-1) @ o_weight.T


def _loop_columns_everywhere(x, q_weight, k_weight, v_weight, o_weight, num_heads):
    # The same layout slip carried on to W_O: concat @ W_O.
    return torch.cat(_head_outputs(x, q_weight, k_weight, v_weight, num_heads, columns=True), dim=-1) @ o_weight


def _loop_interleaved(x, q_weight, k_weight, v_weight, o_weight, num_heads):
    return torch.cat(_head_outputs(x, q_weight, k_weight, v_weight, num_heads, interleaved=True), dim=-1) @ o_weight.T


def _loop_w_o_averaged(x, q_weight, k_weight, v_weight, o_weight, num_heads):
    outputs = _head_outputs(x, q_weight, k_weight, v_weight, num_heads)
    d_head = o_weight.shape[1] // num_heads
    projected = [out @ o_weight[:, h * d_head : (h + 1) * d_head].T for h, out in enumerate(outputs)]
    return torch.stack(projected).mean(dim=0)


def _loop_concat_interleaved(x, q_weight, k_weight, v_weight, o_weight, num_heads):
    # torch.stack(outputs, dim=-1).flatten(-2): feature i of every head, then feature i + 1 of every head, ...
    outputs = _head_outputs(x, q_weight, k_weight, v_weight, num_heads)
    return torch.stack(outputs, dim=-1).flatten(-2) @ o_weight.T


def _loop_stacked_before_seq(x, q_weight, k_weight, v_weight, o_weight, num_heads):
    # The outputs stacked on a heads axis in front of seq, as after a split, then flattened without a transpose.
    outputs = _head_outputs(x, q_weight, k_weight, v_weight, num_heads)
    return torch.stack(outputs, dim=-3).reshape(*x.shape[:-1], q_weight.shape[0]) @ o_weight.T


def _loop_scale_d_model(x, q_weight, k_weight, v_weight, o_weight, num_heads):
    scale = q_weight.shape[0] ** -0.5
    return torch.cat(_head_outputs(x, q_weight, k_weight, v_weight, num_heads, scale=scale), dim=-1) @ o_weight.T


def _loop_forgot_w_o(x, q_weight, k_weight, v_weight, o_weight, num_heads):
    return torch.cat(_head_outputs(x, q_weight, k_weight, v_weight, num_heads), dim=-1)


def _loop_w_o_untransposed(x, q_weight, k_weight, v_weight, o_weight, num_heads):
    return torch.cat(_head_outputs(x, q_weight, k_weight, v_weight, num_heads), dim=-1) @ o_weight


_MHA_NAMED = {m.name: m for m in MHA_MISCONCEPTIONS}
_COLUMNS = "columns of the weights instead of rows"
_COLUMNS_HINT = (
    "In nn.Linear's (d_out, d_in) layout each *row* of a weight makes one output feature: head h's W_Q is the block "
    "of d_head rows starting at row h * d_head, the heads' matrices stacked on top of each other (section 3). A "
    "block of columns reads the weight in notebook 01's (d_in, d_out) layout: it mixes input features, and runs "
    "only when d_in equals d_model."
)
_COLUMNS_FIX = (
    "Take rows and apply them transposed: x @ q_weight[h * d_head:(h + 1) * d_head].T (and the same for W_K and "
    "W_V); W_O as concat @ o_weight.T."
)
_COLUMNS_SYMPTOM = "Every head's queries, keys and values differ from the reference's, from the first step on."

HEADS_ONE_BY_ONE_MISCONCEPTIONS = (
    Misconception(_COLUMNS, _loop_columns, _COLUMNS_HINT, fix=_COLUMNS_FIX, symptom=_COLUMNS_SYMPTOM),
    Misconception(_COLUMNS, _loop_columns_everywhere, _COLUMNS_HINT, fix=_COLUMNS_FIX, symptom=_COLUMNS_SYMPTOM),
    Misconception(
        "heads take every h-th row",
        _loop_interleaved,
        "Head h owns the *consecutive* rows h * d_head ... (h + 1) * d_head - 1 of each weight, the features that "
        "the one-matrix view cuts into head h (section 3); rows h, h + num_heads, h + 2 * num_heads, ... deal the "
        "features out to the heads one by one instead.",
        fix="rows = slice(h * d_head, (h + 1) * d_head), then x @ q_weight[rows].T.",
        symptom="Your heads attend with other queries, keys and values than the reference's heads: each is built "
        "from other rows of the same weights. Look at which rows each head takes.",
    ),
    Misconception(
        "W_O applied to each head and the results averaged",
        _loop_w_o_averaged,
        "Applying W_O head by head is right when each head meets its own block of W_O's *columns* and the results "
        "are added: that is concat @ o_weight.T written as a sum. An average divides that sum by num_heads.",
        fix="Put the head outputs side by side, torch.cat(outputs, dim=-1), and apply W_O once: @ o_weight.T (or "
        "sum the per-head products instead of averaging them).",
        symptom="Every number of your output is the reference's divided by the number of heads. Look at how the "
        "heads' contributions are put together.",
    ),
    Misconception(
        "head outputs interleaved when put side by side",
        _loop_concat_interleaved,
        "W_O expects head 0's d_head features first, then head 1's, and so on, the order of the rows the heads took: "
        "stacking the outputs on a new last axis and flattening it puts feature 0 of every head first instead.",
        fix="torch.cat(outputs, dim=-1): the heads' outputs side by side, in head order.",
        symptom="Each head attends as the reference's does, but their outputs reach W_O in another order of "
        "features. Look at how the heads' outputs are put side by side.",
    ),
    replace(
        _MHA_NAMED["merge without transposing back"],
        implementation=_loop_stacked_before_seq,
        fix="Put the head outputs side by side on their last axis, torch.cat(outputs, dim=-1); or, stacked as "
        "(..., heads, seq, d_head), transpose back to (..., seq, heads, d_head) before flattening.",
    ),
    replace(_MHA_NAMED["scaled by √d_model instead of √d_head"], implementation=_loop_scale_d_model),
    replace(_MHA_NAMED["forgot W_O"], implementation=_loop_forgot_w_o),
    replace(_MHA_NAMED["only W_O applied without its transpose"], implementation=_loop_w_o_untransposed),
)


def _one_by_one_case(g: torch.Generator, batch: int, seq: int, d_in: int, d_model: int, heads: int) -> Case:
    projections = [random_tensor(g, d_model, d_in, scale=d_in**-0.5) for _ in range(3)]
    o_weight = random_tensor(g, d_model, d_model, scale=d_model**-0.5)
    return Case(
        (random_tensor(g, batch, seq, d_in, scale=2.0), *projections, o_weight, heads),
        description=f"x ({batch}, {seq}, d_in={d_in}), d_model={d_model}, {heads} heads",
    )


def _one_by_one_cases() -> list[Case]:
    # No two sizes alike within a case, but d_in = d_model in the first: a weight read by columns runs there
    # only. The other two have d_in below and above d_model.
    g = torch.Generator().manual_seed(4041)
    return [
        _one_by_one_case(g, 2, 5, 12, 12, 3),
        _one_by_one_case(g, 3, 4, 7, 10, 2),
        _one_by_one_case(g, 1, 6, 9, 8, 4),
    ]


def _one_by_one_square_cases() -> list[Case]:
    # Every axis of every tensor the same length: an answer that crashes where d_in != d_model runs here.
    g = torch.Generator().manual_seed(4042)
    return [_one_by_one_case(g, 4, 4, 4, 4, 2), _one_by_one_case(g, 6, 6, 6, 6, 3)]


def _draw_one_by_one(g: torch.Generator) -> list[Case]:
    def pick(low: int, high: int) -> int:
        return int(torch.randint(low, high, (1,), generator=g))

    cases = []
    for batch in (3, 1, 2, 2):
        heads, d_head = pick(2, 5), pick(2, 5)
        d_model = heads * d_head
        d_in = d_model if batch == 1 else pick(3, 13)
        cases.append(_one_by_one_case(g, batch, pick(2, 8), d_in, d_model, heads))
    return cases


def check_heads_one_by_one(learner: Callable[..., torch.Tensor], *, verbose: bool = True) -> CheckResult:
    """Check ``learner(x (batch, seq, d_in), q_weight, k_weight, v_weight, o_weight, num_heads)``: multi-head
    attention as a loop over the heads, with ``(d_model, d_in)`` projection weights and a ``(d_model, d_model)``
    ``o_weight`` in ``nn.Linear`` layout, no biases, no mask, returning ``(batch, seq, d_model)``. The reference is
    the package's :func:`~mhsa_helpers.multi_head_self_attention`; an answer that crashes where ``d_in != d_model``
    is run again on cases with ``d_in == d_model``, where a weight read by columns runs and is named."""
    return check_function(
        "heads_one_by_one",
        learner,
        _mha_reference,
        _one_by_one_cases(),
        HEADS_ONE_BY_ONE_MISCONCEPTIONS,
        square_cases=_one_by_one_square_cases(),
        shortcuts=("multi_head_self_attention", "MultiHeadSelfAttention", "MultiheadAttention"),
        draw=_draw_one_by_one,
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


# ------------------------------------------------- loading nn.MultiheadAttention's weights


def _drawn_parameters(module: nn.Module, generator: torch.Generator) -> nn.Module:
    """``module`` in float64 with every weight and bias drawn from ``generator``: biases too, so that one left
    behind shows (``nn.MultiheadAttention`` starts its biases at zero)."""
    module = module.double()
    with torch.no_grad():
        for name, parameter in module.named_parameters():
            scale = 0.5 if name.endswith("bias") else parameter.shape[-1] ** -0.5
            parameter.copy_(random_tensor(generator, *parameter.shape, scale=scale))
    return module


def _load_case(g: torch.Generator, batch: int, seq: int, d_model: int, heads: int, bias: bool) -> Case:
    # Both constructors draw their first weights from the global generator: the notebook's must stay as it was.
    with torch.random.fork_rng(devices=[]):
        made = (
            nn.MultiheadAttention(d_model, heads, bias=bias, batch_first=True),
            PackageMultiHeadAttention(d_model, heads, bias=bias),
        )
    theirs, mine = (_drawn_parameters(module, g) for module in made)
    biases = "with biases" if bias else "no biases"
    return Case(
        (mine, theirs, random_tensor(g, batch, seq, d_model)),
        description=f"theirs: nn.MultiheadAttention({d_model}, {heads}, bias={bias}, batch_first=True), in_proj_weight "
        f"({3 * d_model}, {d_model}); mine: weights ({d_model}, {d_model}), {biases}; x ({batch}, {seq}, {d_model})",
    )


def _load_cases() -> list[Case]:
    # d_model never equals batch or seq; the last module has no biases, so that a loader that forgets them is right
    # there, which its message says.
    g = torch.Generator().manual_seed(4047)
    return [_load_case(g, 2, 5, 12, 3, True), _load_case(g, 3, 4, 10, 2, True), _load_case(g, 1, 6, 8, 4, False)]


def _draw_load(g: torch.Generator) -> list[Case]:
    def pick(low: int, high: int) -> int:
        return int(torch.randint(low, high, (1,), generator=g))

    cases = []
    for bias in (True, False, True, True):
        heads = pick(2, 5)
        d_model = heads * pick(2, 5)
        cases.append(_load_case(g, pick(1, 4), pick(2, 8), d_model, heads, bias))
    return cases


#: What a failed load looks like (an error's words), and what to tell the learner about it.
_LOAD_ERRORS = (
    (
        RuntimeError,
        "leaf Variable",
        "the weights of a module require grad, and PyTorch refuses to write into them while autograd records what "
        "happens to them. Do the copying inside `with torch.no_grad():`",
    ),
    (
        TypeError,
        "as parameter",
        "a module's weight is an nn.Parameter: copy the numbers into it in place (`.copy_`), or wrap the new tensor "
        "in nn.Parameter",
    ),
)


#: An error on a case without biases that comes from reading a bias that is not there.
_NO_BIASES = (
    AttributeError,
    "'NoneType'",
    "in this case both modules are built with bias=False: theirs.in_proj_bias and theirs.out_proj.bias are None, "
    "and mine's layers have no biases either",
)


def _loading(load: Callable[..., object]) -> Callable[..., torch.Tensor | None]:
    """``load(mine, theirs)`` as the checker runs it: on a copy of the case's ``mine`` (so that the case is
    unchanged) and on ``theirs``, both in the dtype of ``x``; returns ``mine(x)`` for the machinery to compare
    with ``theirs(x, x, x)``."""

    @functools.wraps(load)
    def run(mine: nn.Module, theirs: nn.MultiheadAttention, x: torch.Tensor) -> torch.Tensor | None:
        mine = copy.deepcopy(mine).to(x.dtype)
        if theirs.in_proj_weight.dtype != x.dtype:  # the float32 cases: theirs converted on a copy, as mine is
            theirs = copy.deepcopy(theirs).to(x.dtype)
        kept = {name: (p.shape, p.dtype) for name, p in mine.named_parameters()}
        try:
            inspect.signature(load).bind(mine, theirs)
        except TypeError:
            raise AnswerRejected(
                f"your function takes {inspect.signature(load)}; the checker calls it as load_from_torch(mine, theirs)"
            ) from None
        except ValueError:  # a callable without a signature to read: let the call say what it takes
            pass
        try:
            returned = load(mine, theirs)
        except (RuntimeError, TypeError, AttributeError) as error:
            errors = _LOAD_ERRORS if theirs.in_proj_bias is not None else (*_LOAD_ERRORS, _NO_BIASES)
            for kind, words, advice in errors:
                if isinstance(error, kind) and words in str(error):
                    raise AnswerRejected(
                        f"your function raised {kind.__name__}: {error}{learner_line(error)}: {advice}."
                    ) from error
            raise
        if returned is None:
            return None  # the machinery asks whether a `return` was forgotten
        if returned is not mine:
            raise AnswerRejected(
                f"your function returned {type(returned).__name__}, not `mine`: load the weights into the module "
                "it is given, and return that module"
            )
        for name, (shape, dtype) in kept.items():
            parameter = dict(mine.named_parameters()).get(name)
            if parameter is None or parameter.shape != shape or parameter.dtype != dtype:
                now = "is gone" if parameter is None else f"is {tuple(parameter.shape)}, {parameter.dtype}"
                raise AnswerRejected(
                    f"after your function, mine.{name} {now}; it was {tuple(shape)}, {dtype}: each of mine's layers "
                    "keeps its shape and dtype, and receives numbers"
                )
        try:
            return mine(x)
        except Exception as error:  # what the learner left in mine breaks it: say so, not "the checker failed"
            raise AnswerRejected(
                f"after your function, running mine(x) raised {type(error).__name__}: {error}"
            ) from error

    return run


def _torch_mha_reference(mine: nn.Module, theirs: nn.MultiheadAttention, x: torch.Tensor) -> torch.Tensor:
    return theirs(x, x, x, need_weights=False)[0]


def _wrong_load(
    order: tuple[int, int, int] = (0, 1, 2),
    *,
    every_third_row: bool = False,
    in_transposed: bool = False,
    out_transposed: bool = False,
    in_biases: bool = True,
    out_bias: bool = True,
    out_weight: bool = True,
) -> Callable[..., torch.Tensor | None]:
    """A loader with one slip: ``order[i]`` is the block of ``in_proj_weight`` (0, 1, 2: W_Q, W_K, W_V) that
    goes into ``w_q``, ``w_k``, ``w_v`` in turn; the flags leave a step out or transpose it."""

    @torch.no_grad()
    def load(mine: nn.Module, theirs: nn.MultiheadAttention) -> nn.Module:
        d_model = theirs.embed_dim
        packed = theirs.in_proj_weight
        blocks = [packed[i::3] for i in range(3)] if every_third_row else list(packed.split(d_model))
        biases = [None] * 3 if theirs.in_proj_bias is None else list(theirs.in_proj_bias.split(d_model))
        for name, block in zip(("w_q", "w_k", "w_v"), order, strict=True):
            layer = cast(nn.Linear, getattr(mine, name))
            layer.weight.copy_(blocks[block].T if in_transposed else blocks[block])
            if in_biases and biases[block] is not None:
                layer.bias.copy_(biases[block])
        w_o = cast(nn.Linear, mine.w_o)
        if out_weight:
            w_o.weight.copy_(theirs.out_proj.weight.T if out_transposed else theirs.out_proj.weight)
        if out_bias and theirs.out_proj.bias is not None:
            w_o.bias.copy_(theirs.out_proj.bias)
        return mine

    return _loading(load)


_ORDER = "in_proj_weight's blocks in another order than q, k, v"
_ORDER_HINT = (
    "nn.MultiheadAttention stacks its three input projections one above the other in the order W_Q, W_K, W_V "
    "(section 9's [W_Q; W_K; W_V]): rows 0 .. d_model - 1 are W_Q, the next d_model rows W_K, the last W_V, and "
    "in_proj_bias is cut the same way. Unpacking the three blocks into other names swaps what the projections do."
)
_ORDER_FIX = (
    "w_q, w_k, w_v = theirs.in_proj_weight.chunk(3), in that order: the first block into mine.w_q, the second into "
    "mine.w_k, the third into mine.w_v, and in_proj_bias.chunk(3) likewise."
)
_ORDER_LOOK = " Look at which block of in_proj_weight each of mine's projections receives."
_TRANSPOSED = "weights copied transposed"
_TRANSPOSED_HINT = (
    "nn.MultiheadAttention keeps its weights in nn.Linear's own (out, in) layout: in_proj_weight is three "
    "(d_model, d_model) blocks stacked, out_proj is an nn.Linear. A block goes into an nn.Linear as it is; "
    "transposed, a square block still fits, and computes something else."
)
_TRANSPOSED_FIX = "Copy each block as it is, without .T: mine.w_q.weight.copy_(w_q), and out_proj.weight into w_o."
_BIASES = "biases not copied"
_BIASES_HINT = (
    "nn.MultiheadAttention(bias=True) adds a bias after each of its four projections: in_proj_bias "
    "(3 * d_model,) holds those of q, k and v, stacked like in_proj_weight, and out_proj.bias that of W_O. A bias "
    "that is not copied keeps mine's own numbers."
)
_BIASES_FIX = (
    "When theirs.in_proj_bias is not None, copy its three chunks into mine.w_q.bias, mine.w_k.bias and "
    "mine.w_v.bias, and theirs.out_proj.bias into mine.w_o.bias."
)
_WHERE_BIASES = "Where the two modules have no biases, your module gives theirs' output; where they have some,"

LOAD_MISCONCEPTIONS = (
    Misconception(
        _ORDER,
        _wrong_load((1, 0, 2)),
        _ORDER_HINT,
        fix=_ORDER_FIX,
        symptom="Your module's values are theirs, but its queries and keys are not." + _ORDER_LOOK,
    ),
    Misconception(
        _ORDER,
        _wrong_load((2, 1, 0)),
        _ORDER_HINT,
        fix=_ORDER_FIX,
        symptom="Your module's keys are theirs, but its queries and values are not." + _ORDER_LOOK,
    ),
    Misconception(
        _ORDER,
        _wrong_load((0, 2, 1)),
        _ORDER_HINT,
        fix=_ORDER_FIX,
        symptom="Your module's queries are theirs, but its keys and values are not." + _ORDER_LOOK,
    ),
    Misconception(
        _ORDER,
        _wrong_load((2, 0, 1)),
        _ORDER_HINT,
        fix=_ORDER_FIX,
        symptom="Your module's projections hold theirs' three blocks of weights, none of them in its place."
        + _ORDER_LOOK,
    ),
    Misconception(
        _ORDER,
        _wrong_load((1, 2, 0)),
        _ORDER_HINT,
        fix=_ORDER_FIX,
        symptom="Your module's projections hold theirs' three blocks of weights, none of them in its place."
        + _ORDER_LOOK,
    ),
    Misconception(
        "every third row taken as a block",
        _wrong_load(every_third_row=True),
        "PyTorch puts the three projections one *after* the other: W_Q is the first d_model rows of in_proj_weight, "
        "W_K the next d_model, W_V the last. Rows 0, 3, 6, ... would be a layout that interleaves q, k and v row by "
        "row, which this one is not.",
        fix="theirs.in_proj_weight.chunk(3) (or .split(d_model)): three blocks of consecutive rows.",
        symptom="None of your module's queries, keys and values is theirs: each of your projections holds rows of "
        "all three of theirs. Look at which rows of in_proj_weight each block takes.",
    ),
    Misconception(
        _TRANSPOSED,
        _wrong_load(in_transposed=True, out_transposed=True),
        _TRANSPOSED_HINT,
        fix=_TRANSPOSED_FIX,
        symptom="Each of your weights holds theirs' numbers, in other places: from the first projection on, every "
        "feature reads the input with other weights than theirs. Compare mine.w_q.weight with the rows it came from.",
    ),
    Misconception(
        _TRANSPOSED,
        _wrong_load(in_transposed=True),
        _TRANSPOSED_HINT,
        fix=_TRANSPOSED_FIX,
        symptom="Your queries, keys and values hold theirs' numbers, in other places: each feature reads the input "
        "with other weights than theirs. Compare mine.w_q.weight with the rows it came from.",
    ),
    Misconception(
        _TRANSPOSED,
        _wrong_load(out_transposed=True),
        _TRANSPOSED_HINT,
        fix=_TRANSPOSED_FIX,
        symptom="Up to the last projection your module computes what theirs does; mine.w_o.weight holds theirs' "
        "numbers, in other places.",
    ),
    Misconception(
        _BIASES,
        _wrong_load(in_biases=False, out_bias=False),
        _BIASES_HINT,
        fix=_BIASES_FIX,
        symptom=f"{_WHERE_BIASES} it does not.",
    ),
    Misconception(
        _BIASES,
        _wrong_load(in_biases=False),
        _BIASES_HINT,
        fix=_BIASES_FIX,
        symptom=f"{_WHERE_BIASES} your queries, keys and values differ from theirs already.",
    ),
    Misconception(
        _BIASES,
        _wrong_load(out_bias=False),
        _BIASES_HINT,
        fix=_BIASES_FIX,
        symptom=f"{_WHERE_BIASES} everything up to the last projection is right, and the last one adds another "
        "vector than theirs to every position.",
    ),
    Misconception(
        "out_proj not copied",
        _wrong_load(out_weight=False, out_bias=False),
        "W_O is not in in_proj_weight: nn.MultiheadAttention keeps it in out_proj, an nn.Linear of its own "
        "(d_model -> d_model). Left out, mine.w_o keeps its own weights.",
        fix="mine.w_o.weight.copy_(theirs.out_proj.weight), and out_proj.bias into mine.w_o.bias when there is one.",
        symptom="Up to the last projection your module computes what theirs does; the last projection differs, with "
        "biases and without.",
    ),
)


def check_load_from_torch(learner: Callable[..., nn.Module], *, verbose: bool = True) -> CheckResult:
    """Check ``learner(mine, theirs) -> mine``: the weights of ``theirs``, a ``torch.nn.MultiheadAttention(d_model,
    num_heads, bias=..., batch_first=True)``, copied into ``mine``, a module with ``nn.Linear`` layers ``w_q, w_k,
    w_v, w_o`` (d_model -> d_model) and ``num_heads``, so that ``mine(x)`` gives ``theirs(x, x, x)[0]``.

    ``mine`` is the package's :class:`~mhsa_helpers.teaching.mine.PackageMultiHeadAttention` (the check does not
    depend on the learner's module of exercise 6), with its own random weights and biases; the reference is
    PyTorch itself, ``theirs(x, x, x, need_weights=False)[0]``. Three sizes (one without biases) and four drawn
    for the answer; a loader that assigns new ``nn.Parameter``\\ s instead of copying is right when its outputs
    are."""
    if not callable(learner):  # before it is wrapped, which would make anything look callable
        raise TypeError(f"learner must be a function, got {type(learner).__name__}")
    return check_function(
        "load_from_torch",
        _loading(learner),
        _torch_mha_reference,
        _load_cases(),
        LOAD_MISCONCEPTIONS,
        shortcuts=("from_torch_mha", "from_fused_qkv"),
        draw=_draw_load,
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
