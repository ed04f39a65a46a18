"""Checkers for notebook 04 (multi-head attention).

Each ``check_*`` function runs the learner's function on cases built from a seeded
generator, compares with the package, and names the misconception a wrong answer
matches. The cases always have more than one head *and* more than one position:
with ``heads == 1`` or ``seq == 1`` a missing transpose changes nothing and would
go unnoticed.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ... import (
    merge_heads,
    multi_head_self_attention,
    split_heads,
)
from ...attention import attend
from ...teaching.checking import Case, CheckResult, Misconception, check_function
from .learner import ModuleSetting, check_module, check_prediction

__all__ = [
    "MHA_MODULE_MISTAKES",
    "check_multi_head_attention",
    "check_my_multi_head_attention",
    "check_parameter_prediction",
    "check_split_heads",
    "merge_reshape_without_transpose",
    "mixes_positions_probe",
    "split_view_without_transpose",
]


# --------------------------------------------------------------- split_heads


def split_view_without_transpose(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """The "view without transpose" mistake: ``(..., seq, d_model)`` reshaped straight to
    ``(..., heads, seq, d_head)``, mixing positions into each head (also used by notebook 06's checker)."""
    *batch, seq, d_model = x.shape
    return x.reshape(*batch, num_heads, seq, d_model // num_heads)


def _split_no_transpose(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    *batch, seq, d_model = x.shape
    return x.reshape(*batch, seq, num_heads, d_model // num_heads)


def _split_strided(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    # (d_head, heads) instead of (heads, d_head): head i gets features i, i + h, i + 2h, ...
    *batch, seq, d_model = x.shape
    return x.reshape(*batch, seq, d_model // num_heads, num_heads).transpose(-1, -2).transpose(-3, -2)


SPLIT_HEADS_MISCONCEPTIONS = (
    Misconception(
        "view without transpose",
        split_view_without_transpose,
        "Reshaping (..., seq, d_model) straight to (..., heads, seq, d_head) runs without error but "
        "fills each head with features of *different* positions. View as (..., seq, heads, d_head) "
        "first, then swap the seq and heads axes with .transpose(-3, -2).",
    ),
    Misconception(
        "missing transpose: heads still after seq",
        _split_no_transpose,
        "You cut d_model into (heads, d_head) correctly, but the result is (..., seq, heads, d_head). "
        "Attention wants each head as its own (seq, d_head) matrix: add .transpose(-3, -2).",
    ),
    Misconception(
        "heads take every h-th feature",
        _split_strided,
        "Cut the feature axis as (heads, d_head), not (d_head, heads): head i owns the *consecutive* "
        "features i*d_head ... (i+1)*d_head - 1, the same rows of W_Q that belong to head i.",
    ),
    Misconception(
        "hard-coded transpose(1, 2)",
        lambda x, h: x.reshape(*x.shape[:-1], h, x.shape[-1] // h).transpose(1, 2),
        "Your transpose(1, 2) swaps the right axes only for a 3-D (batch, seq, d_model) input: with no batch "
        "axis, or with more leading axes, it swaps others. Count from the end: .transpose(-3, -2).",
    ),
    Misconception(
        "torch.split(x, num_heads): pieces of num_heads features",
        lambda x, h: torch.stack(torch.split(x, h, dim=-1), dim=-3),
        "torch.split(x, n, dim=-1) cuts pieces of n features each, so you got d_model / num_heads heads of "
        "num_heads features. torch.chunk(x, num_heads, dim=-1) cuts num_heads pieces (or split with "
        "d_head = d_model // num_heads).",
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


def check_split_heads(learner: Callable[..., torch.Tensor], *, verbose: bool = True) -> CheckResult:
    """Check ``learner(x (..., seq, d_model), num_heads) -> (..., heads, seq, d_head)``."""
    return check_function(
        "split_heads",
        learner,
        split_heads,
        _split_cases(),
        SPLIT_HEADS_MISCONCEPTIONS,
        shortcuts=("split_heads",),
        verbose=verbose,
    )


# --------------------------------------------------------------- merge_heads


def merge_reshape_without_transpose(x: torch.Tensor) -> torch.Tensor:
    """The classic merge mistake: ``(..., heads, seq, d_head)`` reshaped straight to
    ``(..., seq, heads * d_head)`` without transposing back (also used by notebook 06's checker)."""
    *batch, heads, seq, d_head = x.shape
    return x.reshape(*batch, seq, heads * d_head)


# --------------------------------------------------- the whole multi-head block


def _mha_reference(x, q_weight, k_weight, v_weight, o_weight, num_heads):
    return multi_head_self_attention(x, q_weight, k_weight, v_weight, o_weight, num_heads=num_heads)


def _mha_parts(x, q_weight, k_weight, v_weight, num_heads, split=split_heads, transpose_weights=True):
    def project(w):
        return x @ (w.T if transpose_weights else w)

    return split(project(q_weight), num_heads), split(project(k_weight), num_heads), split(project(v_weight), num_heads)


def _mha_forgot_w_o(x, q_weight, k_weight, v_weight, o_weight, num_heads):
    q, k, v = _mha_parts(x, q_weight, k_weight, v_weight, num_heads)
    return merge_heads(attend(q, k, v)[0])


def _mha_view_without_transpose(x, q_weight, k_weight, v_weight, o_weight, num_heads):
    q, k, v = _mha_parts(x, q_weight, k_weight, v_weight, num_heads, split=split_view_without_transpose)
    return merge_reshape_without_transpose(attend(q, k, v)[0]) @ o_weight.T


def _mha_split_view_merge_ok(x, q_weight, k_weight, v_weight, o_weight, num_heads):
    q, k, v = _mha_parts(x, q_weight, k_weight, v_weight, num_heads, split=split_view_without_transpose)
    return merge_heads(attend(q, k, v)[0]) @ o_weight.T


def _mha_merge_without_transpose(x, q_weight, k_weight, v_weight, o_weight, num_heads):
    q, k, v = _mha_parts(x, q_weight, k_weight, v_weight, num_heads)
    return merge_reshape_without_transpose(attend(q, k, v)[0]) @ o_weight.T


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


MHA_MISCONCEPTIONS = (
    Misconception(
        "forgot W_O",
        _mha_forgot_w_o,
        "After concatenating the heads, multiply by the output projection: out = concat @ o_weight.T. "
        "Without it each output feature comes from a single head and nothing mixes what the heads found.",
    ),
    Misconception(
        "view without transpose",
        _mha_view_without_transpose,
        "Splitting with a reshape straight to (..., heads, seq, d_head) (and merging back the same way) "
        "runs, but mixes positions inside each head. View as (..., seq, heads, d_head) and transpose(-3, -2).",
    ),
    Misconception(
        "view without transpose when splitting (merge correct)",
        _mha_split_view_merge_ok,
        "Your merge is right, but the split reshapes (..., seq, d_model) straight to (..., heads, seq, d_head): "
        "it runs, but fills each head with features of different positions. View as (..., seq, heads, d_head) "
        "first, then .transpose(-3, -2).",
    ),
    Misconception(
        "merge without transposing back",
        _mha_merge_without_transpose,
        "Your split is right, but the head outputs (..., heads, seq, d_head) were reshaped straight to "
        "(..., seq, d_model), which mixes positions. Transpose back to (..., seq, heads, d_head) before flattening.",
    ),
    Misconception(
        "scaled by sqrt(d_model) instead of sqrt(d_head)",
        _mha_scale_d_model,
        "Each head is its own attention over d_head features: divide its scores by sqrt(d_head), not sqrt(d_model).",
    ),
    Misconception(
        "one head: num_heads ignored",
        _mha_one_head,
        "The result equals single-head attention over all d_model features. Split q, k and v into "
        "num_heads heads before the softmax, so each head gets its own attention weights.",
    ),
    Misconception(
        "weights used as x @ W instead of x @ W.T",
        _mha_untransposed_weights,
        "These weights are in nn.Linear's (d_out, d_in) layout: apply them as x @ W.T (or F.linear(x, W)). "
        "The hand-worked example of notebook 01 writes E @ W because it stores W as (d_in, d_out).",
    ),
    Misconception(
        "only W_O applied without its transpose",
        lambda x, wq, wk, wv, wo, h: _mha_forgot_w_o(x, wq, wk, wv, wo, h) @ wo,
        "Your W_Q, W_K and W_V are applied as x @ W.T, but W_O as concat @ W_O: it is in the same "
        "(d_out, d_in) layout, so concat @ o_weight.T.",
    ),
    Misconception(
        "softmax over the heads axis",
        _mha_softmax_over_heads,
        "Your weights sum to 1 across the heads (dim=-3 of (..., heads, seq, seq)). Each head's query rows "
        "are normalised over the keys: softmax(..., dim=-1).",
    ),
)


def _mha_cases() -> list[Case]:
    g = torch.Generator().manual_seed(404)

    def case(batch, seq, d_model, heads):
        shape = (*batch, seq, d_model)
        weights = [torch.randn(d_model, d_model, generator=g) / d_model**0.5 for _ in range(4)]
        x = 2.0 * torch.randn(*shape, generator=g)
        return Case(
            (x, *weights, heads),
            description=f"x {tuple(shape)}, {heads} heads",
        )

    return [case((2,), 4, 8, 2), case((), 5, 12, 3), case((1,), 6, 8, 4)]


def check_multi_head_attention(learner: Callable[..., torch.Tensor], *, verbose: bool = True) -> CheckResult:
    """Check ``learner(x (..., seq, d_model), q_weight, k_weight, v_weight, o_weight, num_heads)``.

    Weights are ``(d_model, d_model)`` in ``nn.Linear`` layout (applied as ``x @ W.T``), no biases,
    no mask. Expected output ``(..., seq, d_model)``.
    """
    return check_function(
        "multi_head_attention",
        learner,
        _mha_reference,
        _mha_cases(),
        MHA_MISCONCEPTIONS,
        shortcuts=("multi_head_self_attention", "MultiHeadSelfAttention", "MultiheadAttention"),
        verbose=verbose,
    )


# ------------------------------------------------- predict: the parameter count


#: The module of the prediction exercise: MyMultiHeadAttention(d_in, d_model, num_heads).
PREDICTION_MODULE = (32, 64, 4)


def _parameters(d_in: int, d_model: int, *, biases: bool = True, w_o: bool = True, heads: int = 1) -> int:
    count = 3 * (d_in * d_model + biases * d_model) + w_o * (d_model * d_model + biases * d_model)
    return heads * count


def check_parameter_prediction(answer: object, *, verbose: bool = True) -> CheckResult:
    """Check the predicted number of parameters of ``MyMultiHeadAttention(32, 64, 4)``: ``nn.Linear``
    projections ``w_q, w_k, w_v`` (32 -> 64) and ``w_o`` (64 -> 64), all with biases."""
    d_in, d_model, heads = PREDICTION_MODULE
    mistakes = (
        Misconception(
            "every projection counted as d_model x d_model",
            lambda: _parameters(d_model, d_model),
            "W_Q, W_K and W_V read the *input*: each is (d_out, d_in) = (64, 32), not (64, 64). Only W_O is 64 x 64.",
        ),
        Misconception(
            "biases forgotten",
            lambda: _parameters(d_in, d_model, biases=False),
            "nn.Linear has a bias by default: one number per output feature, 64 for each of the four layers.",
        ),
        Misconception(
            "the count multiplied by the number of heads",
            lambda: _parameters(d_in, d_model, heads=heads),
            "Heads do not add parameters: the 4 heads are 4 slices of the same 64 output features "
            "(section 7: the paper's layer has the same count for every number of heads).",
        ),
        Misconception(
            "W_O forgotten",
            lambda: _parameters(d_in, d_model, w_o=False),
            "The output projection w_o (64 -> 64, with its bias) is a fourth layer with its own parameters.",
        ),
    )
    return check_prediction(
        "parameter_prediction",
        answer,
        lambda: _parameters(d_in, d_model),
        "MyMultiHeadAttention(d_in=32, d_model=64, num_heads=4)",
        mistakes,
        verbose=verbose,
    )


# ------------------------------------------------- the learner's own module


#: ``(name, switches of attention_variant, hint)``: the mistakes a module can make, reproduced from the
#: package's weights (notebook 06's checker adds the causal and RoPE ones).
MHA_MODULE_MISTAKES = (
    (
        "forgot W_O",
        {"project_out": False},
        "forward returns the merged heads: finish with self.w_o(merged), which mixes what the heads found.",
    ),
    (
        "view without transpose",
        {"split": "view", "merge": "reshape"},
        "Splitting with a view straight to (batch, heads, seq, d_head), and merging back the same way, mixes "
        "positions inside each head: view as (batch, seq, heads, d_head), then .transpose(1, 2) (and back).",
    ),
    (
        "view without transpose when splitting (merge correct)",
        {"split": "view"},
        "Your merge is right, but the split views (batch, seq, d_model) straight as (batch, heads, seq, d_head): "
        "view as (batch, seq, heads, d_head) first, then .transpose(1, 2).",
    ),
    (
        "merge in the wrong order: no transpose back",
        {"merge": "reshape"},
        "The head outputs (batch, heads, seq, d_head) were reshaped straight to (batch, seq, d_model): transpose "
        "back to (batch, seq, heads, d_head) first, then flatten the last two axes.",
    ),
    (
        "scaled by sqrt(d_model) instead of sqrt(d_head)",
        {"scale_by": "d_model"},
        "Each head attends over its own d_head = d_model / num_heads features: divide by sqrt(d_head).",
    ),
    (
        "softmax over the heads axis",
        {"softmax_dim": -3},
        "Normalise each query's row over the keys, softmax(scores, dim=-1), not over the heads.",
    ),
)


def mixes_positions_probe(d_in: int) -> Misconception:
    """A symptom of a split or merge that mixes positions, for a module reading ``d_in`` features: without a
    mask and without positions attention is permutation-equivariant (reversing the tokens reverses the
    outputs), and such a module is not."""

    def detect(run: Callable[..., torch.Tensor]) -> bool:
        x = torch.randn(2, 5, d_in, generator=torch.Generator().manual_seed(44))
        return not torch.allclose(run(x.flip(-2)), run(x).flip(-2), atol=1e-5, rtol=1e-4)

    return Misconception(
        "positions mixed: reversing the tokens does not reverse the outputs",
        None,
        "Without a mask, attention treats the tokens as a set: reversing them must reverse the outputs. Yours "
        "mix positions, which a reshape/view without the transpose (in the split or in the merge) does.",
        detect=detect,
    )


def _mha_settings() -> list[ModuleSetting]:
    def setting(d_in, d_model, heads, calls):
        return ModuleSetting(
            (d_in, d_model, heads),
            package_kwargs={"d_model": d_model, "num_heads": heads, "d_in": d_in},
            calls=tuple((batch, seq, None) for batch, seq in calls),
        )

    return [
        setting(8, 8, 2, [(2, 5), (1, 1), (3, 7)]),
        setting(6, 12, 3, [(2, 4), (1, 17)]),  # d_in != d_model
        setting(16, 16, 4, [(1, 7)]),
        setting(8, 8, 1, [(2, 3)]),  # one head
    ]


def check_my_multi_head_attention(learner: Callable[..., torch.nn.Module], *, verbose: bool = True) -> CheckResult:
    """Check the learner's class ``MyMultiHeadAttention(d_in, d_model, num_heads)``: an ``nn.Module`` with
    ``nn.Linear`` layers ``w_q, w_k, w_v`` (d_in -> d_model) and ``w_o`` (d_model -> d_model) whose
    ``forward(x (batch, seq, d_in))`` returns ``(batch, seq, d_model)``, no mask.

    Built at four sizes (1 to 4 heads, d_in != d_model, 1 to 17 tokens, batch 1 to 3) with the weights of
    a package :class:`~mhsa_helpers.MultiHeadSelfAttention` copied in, it must give the package's output;
    then a backward pass must reach every weight and bias."""
    return check_module(
        "my_multi_head_attention",
        learner,
        _mha_settings(),
        MHA_MODULE_MISTAKES,
        seed=4040,
        probes=(mixes_positions_probe,),
        shortcuts=("multi_head_self_attention", "MultiHeadSelfAttention", "MultiheadAttention"),
        verbose=verbose,
    )
