"""The module checker (``mhsa_helpers.teaching.modules``) word for word where it diagnoses: one known mistake,
two, one beside something no known mistake explains, none; a difference only at a size drawn for the answer;
an unwritten path, an error and nothing returned; the gradient check; the finite-fill probe; and ``explain``'s
line for each. Found unpinned by mutation testing (``make mutate``): these messages could change and no test
noticed.

Written against public behaviour only (``check_module``, ``explain``, ``module_is_written``, ``projection``),
with modules written as a learner writes them (``learner_modules``).
"""

from __future__ import annotations

import functools
import inspect
import re

import pytest
import torch
from learner_modules import causal_module, multi_head_module
from torch import nn

from mhsa_helpers.teaching.modules import (
    CAUSAL_CONTRACT,
    MULTI_HEAD_CONTRACT,
    Call,
    ModuleSetting,
    check_module,
    explain,
    module_is_written,
    projection,
)

CAUSAL = (ModuleSetting(8, 8, 2, calls=(Call("full", 2, 5), Call("weights", 1, 4))),)
ONE = (ModuleSetting(8, 8, 2, calls=(Call("full", 2, 5),)),)
#: What notebooks 04 and 06 pass: the package's attention, which the exercise asks the learner to write.
SHORTCUTS = ("multi_head_self_attention", "MultiHeadSelfAttention", "MultiheadAttention")
CAUSE = "What the checker of notebook 06, exercise 4 finds in your module (the likely cause): "
HALF_SPLIT = "rotating pairs half-split instead of interleaved"
HALF_SPLIT_HINT = (
    "Notebook 05's RoPE (and this contract) pairs neighbouring features (x[2i], x[2i+1]); half-split pairs "
    "(x[i], x[i + d/2]) are another model's convention."
)
HALF_SPLIT_FIX = "Pair x[..., 0::2] with x[..., 1::2] and interleave the rotated pairs back."
NO_SQRT = "divided by d_head without the square root"
NO_SQRT_HINT = (
    "The spread of q·k grows like √d_head; dividing by d_head shrinks the scores too far and flattens the weights."
)
ISOLATED = "Driven with crafted weights that isolate one step at a time"


def check(learner, settings=CAUSAL, contract=CAUSAL_CONTRACT):
    return check_module("ex", learner, contract, settings, seed=1, verbose=False)


def scaled(base, *, when=lambda module, cache: True):
    """``base``'s module with its output multiplied by 1.1 where ``when(module, cache)``: a difference no known
    mistake explains."""

    class Scaled(base):
        def forward(self, x, cache=None, need_weights=False):
            out = super().forward(x, cache, need_weights)
            if not when(self, cache):
                return out
            return (out[0] * 1.1, out[1]) if isinstance(out, tuple) else out * 1.1

    return Scaled


# ------------------------------------------------------------------ what the isolating probes single out


def test_one_known_mistake_its_symptom_then_its_name_and_fix_with_the_case_that_showed_it():
    result = check(causal_module(half_split=True))
    where = "with MyCausalSelfAttention(8, 2), case 'x (2, 5, 8), full pass' differs from the reference"
    assert (result.exercise, result.status, result.misconception, result.key) == (
        "ex",
        "misconception",
        HALF_SPLIT,
        f"mistake: {HALF_SPLIT}",
    )
    assert (
        result.message
        == result.symptom
        == (
            f"[ex] not yet: {where} (largest difference 1.47). {ISOLATED}, it singles out what differs: look at which "
            "features RoPE pairs. This is a known mistake: `result.hint()` names it."
        )
    )
    assert result.diagnosis == (
        f"[ex] not yet: this looks like '{HALF_SPLIT}': {HALF_SPLIT_HINT} `result.reveal()` shows the fix."
    )
    assert result.fix == f"[ex] the fix for '{HALF_SPLIT}': {HALF_SPLIT_FIX}"
    assert result.case.description == "x (2, 5, 8), full pass" and result.case.args[0].shape == (2, 5, 8)
    assert result.expected.shape == result.got.shape == (2, 5, 8)
    assert float((result.expected - result.got).detach().abs().max()) == pytest.approx(1.47, abs=0.005)
    assert explain(causal_module(half_split=True)) == f"{CAUSE}'{HALF_SPLIT}'. Revisit that exercise."


def test_two_known_mistakes_are_named_together_in_the_catalogues_order():
    result = check(causal_module(half_split=True, scale="d_head no sqrt"))
    assert (result.misconception, result.key) == (NO_SQRT, f"mistake: {NO_SQRT} | {HALF_SPLIT}")
    assert result.message.endswith(
        f"(largest difference 1.56). {ISOLATED}, it singles out what differs: look at how the scores are scaled. "
        "Look at which features RoPE pairs. These are known mistakes: `result.hint()` names them."
    )
    assert result.diagnosis == (
        f"[ex] not yet: this looks like '{NO_SQRT}': {NO_SQRT_HINT} '{HALF_SPLIT}': {HALF_SPLIT_HINT} "
        "`result.reveal()` shows the fix."
    )
    assert result.fix == (
        f"[ex] the fix for '{NO_SQRT}': Divide by math.sqrt(d_head), not by d_head. "
        f"[ex] the fix for '{HALF_SPLIT}': {HALF_SPLIT_FIX}"
    )
    assert explain(causal_module(half_split=True, scale="d_head no sqrt")) == (
        f"{CAUSE}'{NO_SQRT}' and '{HALF_SPLIT}'. Revisit that exercise."
    )


def test_where_to_look_in_a_module_without_mask_or_rope_names_neither():
    class Scaled(multi_head_module()):
        def forward(self, x):
            return super().forward(x) * 1.1

    assert check(Scaled, ONE, MULTI_HEAD_CONTRACT).message == (
        "[ex] not yet: with Scaled(8, 2), case 'x (2, 5, 8), full pass' differs from the reference (largest "
        f"difference 0.223). {ISOLATED}, with every score equal (W_Q = W_K = 0), your module's output already "
        "differs: look at the split into heads, the merge and W_O."
    )


def test_a_known_mistake_beside_a_difference_none_explains_says_so():
    result = check(scaled(causal_module(half_split=True), when=lambda m, cache: cache is not None and cache.length > 1))
    assert result.message.endswith("This is a known mistake: `result.hint()` names it.")
    assert result.diagnosis == (
        f"[ex] not yet: this looks like '{HALF_SPLIT}': {HALF_SPLIT_HINT} Something else differs too, which no "
        "known mistake explains. `result.reveal()` shows the fix."
    )


def test_no_known_mistake_says_where_the_isolated_step_differs_and_has_no_fix():
    result = check(scaled(causal_module()))
    assert (result.exercise, result.status, result.misconception, result.key) == ("ex", "incorrect", None, "differs")
    told = (
        f"not yet: with Scaled(8, 2), case 'x (2, 5, 8), full pass' differs from the reference (largest difference "
        f"0.372). {ISOLATED}, with every score equal (W_Q = W_K = 0), your module's output already differs: look at "
        "the split into heads, the merge and W_O, the mask, and what RoPE turns."
    )
    assert result.message == result.symptom == f"[ex] {told}"
    assert (result.diagnosis, result.fix) == ("", "")
    assert result.case.description == "x (2, 5, 8), full pass"
    assert torch.allclose(result.got, result.expected * 1.1, atol=1e-5)
    assert explain(scaled(causal_module())) == (
        f"{CAUSE}{told.removeprefix('not yet: ').replace('0.372', '0.348')} Revisit that exercise."
    )


def test_a_difference_only_at_a_size_drawn_for_the_answer_says_it_was_drawn():
    result = check(scaled(causal_module(), when=lambda module, cache: module.num_heads != 2))
    assert result.key == "differs"
    assert re.fullmatch(
        r"\[ex\] not yet: with Scaled\([^)]+\) \(drawn for your code\), case '[^']+' differs from the reference "
        r"\(largest difference [0-9.]+\)\.",
        result.message,
    ), result.message


def test_a_drawn_call_through_a_cache_is_cut_into_chunks_that_add_up_to_its_sequence():
    result = check(scaled(causal_module(), when=lambda module, cache: cache is not None and module.num_heads != 2))
    described = re.fullmatch(
        r"x \(2, (\d+), \d+\) fed in chunks of (\d+) and (\d+) tokens through one cache", result.case.description
    )
    assert described, result.case.description
    seq, first, second = map(int, described.groups())
    assert first + second == seq and first >= 1 and second >= 1


def test_a_learner_without_a_name_of_its_own_is_told_as_the_contracts_class():
    result = check(functools.partial(scaled(causal_module())))
    assert result.message.startswith("[ex] not yet: with MyCausalSelfAttention(8, 2), case 'x (2, 5, 8), full pass'")


# ------------------------------------------------------------------ building the module


class NotYet(causal_module()):
    def __init__(self, d_model, num_heads, **kwargs):
        raise NotImplementedError


class Raises(causal_module()):
    def __init__(self, d_model, num_heads, **kwargs):
        super().__init__(d_model, num_heads, **kwargs)
        raise ValueError("no")


def Nothing(d_model, num_heads, **kwargs):
    return None


def NotModule(d_model, num_heads, **kwargs):
    return [1]


class NoForward(nn.Module):
    def __init__(self, d_model, num_heads, **kwargs):
        super().__init__()


class NoWo(causal_module()):
    def __init__(self, d_model, num_heads, **kwargs):
        super().__init__(d_model, num_heads, **kwargs)
        del self.w_o


class GradOff(causal_module()):
    def __init__(self, d_model, num_heads, **kwargs):
        super().__init__(d_model, num_heads, **kwargs)
        torch.set_grad_enabled(False)  # a set-up line copied into the constructor


class NoCache(multi_head_module()):
    def __init__(self, d_model, num_heads, **kwargs):
        super().__init__(d_model, num_heads)


RAISES_LINE = inspect.getsourcelines(Raises.__init__)[1] + 2
BUILT = [
    (NotYet, "not_attempted", "[ex] not attempted yet: replace the `raise NotImplementedError` lines."),
    (Raises, "error", f"[ex] Raises(8, 2, bias=False) raised ValueError: no (in __init__, line {RAISES_LINE}: "
     '`raise ValueError("no")`).'),
    (Nothing, "incorrect", "[ex] not yet: Nothing(8, 2, bias=False) returned None — did you forget `return`?"),
    (NotModule, "error", "[ex] not yet: NotModule(8, 2, bias=False) gave list, not an nn.Module."),
    (NoForward, "error", "[ex] not yet: NoForward(8, 2, bias=False) has no `forward` method: PyTorch calls "
     "`forward(self, x, ...)` when the module is called."),
    (NoWo, "incorrect", "[ex] not yet: NoWo(8, 2, bias=False) has no nn.Linear named w_o. The checker copies the "
     "package's weights into self.w_q, self.w_k, self.w_v (d_in -> d_model) and self.w_o (d_model -> d_model)."),
    (GradOff, "misconception", "[ex] not yet: your code turned gradients off for the rest of the notebook "
     "(`torch.set_grad_enabled(False)`). The checker put it back; where no gradient is needed, put those lines under "
     "`with torch.no_grad():`, which ends with its block."),
    (NoCache, "misconception", "[ex] not yet: NoCache(8, 2, bias=False) still has biases in w_q, w_k, w_v, w_o: pass "
     "bias=bias to each nn.Linear (real models such as Llama have none)."),
]  # fmt: skip


@pytest.mark.parametrize(("learner", "status", "message"), BUILT, ids=[row[0].__name__ for row in BUILT])
def test_a_module_that_cannot_be_built_as_asked_is_told_what_the_build_gave(learner, status, message):
    result = check(learner, (ModuleSetting(8, 8, 2, bias=False, calls=(Call("full", 2, 5),)),))
    assert (result.exercise, result.status, result.message) == ("ex", status, message)


@pytest.mark.parametrize("right", [True, False], ids=["right", "wrong"])
def test_a_module_that_can_be_built_only_once_is_told_at_its_second_build(right):
    """The checker builds the module again: a right one at the first given size before it looks at gradients, a
    wrong one to look at how it behaves."""

    class BuiltOnce(causal_module() if right else scaled(causal_module())):
        built = 0

        def __init__(self, *args, **kwargs):
            BuiltOnce.built += 1
            if BuiltOnce.built > 1:
                raise RuntimeError("built twice")
            super().__init__(*args, **kwargs)

    result = check(BuiltOnce, (ModuleSetting(8, 8, 2, bias=False, calls=(Call("full", 2, 5),)),))
    assert (result.exercise, result.status, BuiltOnce.built) == ("ex", "error", 2)
    assert result.message.startswith("[ex] BuiltOnce(8, 2, bias=False) raised RuntimeError: built twice (in __init__")


class IgnoresDin(causal_module()):
    """Builds its projections from d_model whatever d_in is."""

    def __init__(self, d_model, num_heads, *, d_in=None, bias=True, rope_base=10000.0):
        super().__init__(d_model, num_heads, d_in=None, bias=bias, rope_base=rope_base)


def test_a_module_the_packages_weights_do_not_fit_is_told_which_weight_and_the_shape_it_needs():
    result = check(IgnoresDin, (ModuleSetting(6, 8, 2, calls=(Call("full", 2, 5),)),))
    assert (result.exercise, result.status, result.message) == (
        "ex",
        "incorrect",
        "[ex] not yet: IgnoresDin(8, 2, d_in=6): mine.w_q.weight has shape (8, 8), the package's has (8, 6) "
        "(nn.Linear(in_features=6, out_features=8)).",
    )


def test_a_right_module_that_calls_a_ready_made_attention_is_told_so_beside_correct():
    class Delegates(causal_module()):
        def forward(self, x, cache=None, need_weights=False):
            nn.MultiheadAttention(x.shape[-1], 1)  # built and thrown away: the call is what is noticed
            return super().forward(x, cache, need_weights)

    result = check_module("ex", Delegates, CAUSAL_CONTRACT, ONE, seed=1, verbose=False, shortcuts=SHORTCUTS)
    assert (result.exercise, result.correct) == ("ex", True)
    assert result.shortcuts == ("torch.nn.modules.activation.MultiheadAttention",)
    assert result.message.endswith(
        "on all 11 calls. Note: your module calls `torch.nn.modules.activation.MultiheadAttention`, which does what "
        "this exercise asks you to write yourself; write its forward from the steps of this notebook to see how it "
        "works."
    )
    # two names, in the order they were called
    both = check_module(
        "ex", Delegates, CAUSAL_CONTRACT, ONE, seed=1, verbose=False, shortcuts=("MultiheadAttention", "softmax")
    )
    assert both.shortcuts == ("torch.nn.modules.activation.MultiheadAttention", "torch.softmax")
    assert "calls `torch.nn.modules.activation.MultiheadAttention`, `torch.softmax`, which does" in both.message
    # without the shortcut, nothing is noted
    plain = check_module("ex", causal_module(), CAUSAL_CONTRACT, ONE, seed=1, verbose=False, shortcuts=SHORTCUTS)
    assert plain.correct and plain.shortcuts == () and "Note" not in plain.message


class ForwardWithoutCache(causal_module()):
    def forward(self, x, need_weights=False):
        return super().forward(x, None, need_weights)


class ForwardWithoutNeedWeights(causal_module()):
    def forward(self, x, cache=None):
        return super().forward(x, cache)


@pytest.mark.parametrize(
    ("learner", "signature"),
    [
        (NoCache, "(x)"),
        (ForwardWithoutCache, "(x, need_weights=False)"),
        (ForwardWithoutNeedWeights, "(x, cache=None)"),
    ],
    ids=["x", "no-cache", "no-need_weights"],
)
def test_a_forward_without_the_cache_or_need_weights_is_told_the_signature_it_needs(learner, signature):
    result = check(learner, ONE)
    assert (result.exercise, result.status) == ("ex", "incorrect")
    assert result.message == (
        f"[ex] not yet: your forward takes {signature}; it must also take the cache and need_weights: "
        "forward(self, x, cache=None, need_weights=False)."
    )


def test_an_instance_is_told_to_pass_the_class_itself():
    result = check(causal_module()(8, 2))
    assert (result.exercise, result.status) == ("ex", "error")
    assert result.message == (
        "[ex] not yet: pass your nn.Module class itself (e.g. MyModule), you passed a module made from "
        "MyCausalSelfAttention."
    )
    # A payoff cell's explanation takes whatever the notebook holds, None too (check_module refuses it at the door).
    assert explain(None) == (
        f"{CAUSE}pass your nn.Module class itself (e.g. MyModule), you passed no class. Revisit that exercise."
    )


# ------------------------------------------------------------------ what no number can isolate


def test_a_path_not_written_yet_is_told_with_the_module_it_was_built_as():
    class Unwritten(causal_module()):
        def forward(self, x, cache=None, need_weights=False):
            if need_weights:
                raise NotImplementedError
            return super().forward(x, cache, need_weights)

    result = check(Unwritten)
    assert (result.status, result.message) == (
        "not_attempted",
        "[ex] with Unwritten(8, 2): not attempted yet: replace the `raise NotImplementedError` line (or a function "
        "it calls still raises NotImplementedError).",
    )
    assert explain(Unwritten) == ""


def test_an_error_is_told_with_the_module_once_even_when_its_text_has_brackets():
    class Raises(causal_module()):
        def forward(self, x, cache=None, need_weights=False):
            if need_weights:
                raise ValueError("weights[0] and weights[1] ] are not ready")
            return super().forward(x, cache, need_weights)

    result = check(Raises)
    assert result.status == "error"
    assert result.message.startswith(
        "[ex] with Raises(8, 2): your function raised ValueError: weights[0] and weights[1] ] are not ready (in "
        "forward, line "
    ), result.message
    assert explain(Raises).startswith(f"{CAUSE}with Raises(8, 2): your function raised ValueError: weights[0] and")


def test_a_forward_that_returns_nothing_is_told_so_not_diagnosed():
    class NoReturn(causal_module()):
        def forward(self, x, cache=None, need_weights=False):
            super().forward(x, cache, need_weights)

    result = check(NoReturn)
    assert (result.status, result.key) == ("incorrect", "")
    assert result.message == (
        "[ex] with NoReturn(8, 2): not yet: your function returned None — did you forget `return`? It was called "
        "with a tensor of shape (2, 5, 8) (x (2, 5, 8), full pass)."
    )


# ------------------------------------------------------------------ gradients, and a blocked key's weight


class GradientScaled(nn.Linear):
    """An nn.Linear whose output is its own, but whose gradient is multiplied by ``factor`` (0: none at all)."""

    factor = 0.0

    def forward(self, x):
        y = super().forward(x)
        return y.detach() + self.factor * (y - y.detach())


def with_value_layer(layer_class):
    class Module(multi_head_module()):
        def __init__(self, d_model, num_heads, *, d_in=None, bias=True):
            super().__init__(d_model, num_heads, d_in=d_in, bias=bias)
            self.w_v = layer_class(d_in or d_model, d_model, bias=bias)

    return Module


def test_a_gradient_of_exactly_zero_reaches_no_weight_and_the_fix_is_given_on_request():
    result = check(with_value_layer(GradientScaled), ONE, MULTI_HEAD_CONTRACT)
    assert (result.exercise, result.misconception) == ("ex", "gradients do not reach every weight")
    assert result.message.startswith("[ex] not yet: no gradient reaches self.w_v.weight.")
    assert result.fix == (
        "[ex] the fix for 'gradients do not reach every weight': Leave forward out of torch.no_grad(), and use no "
        ".detach() or .data on the way."
    )


def test_a_small_gradient_still_reaches_its_weight():
    class Tiny(GradientScaled):
        factor = 1e-6

    assert check(with_value_layer(Tiny), ONE, MULTI_HEAD_CONTRACT).correct


def test_no_gradient_to_the_key_weight_is_named_though_the_key_bias_needs_none():
    """W_K's bias gets no gradient in theory (it adds the same to every score of a row), so it is not asked
    for; W_K's weight is."""

    class Detached(nn.Linear):
        def forward(self, x):
            return super().forward(x).detach()

    class Module(multi_head_module()):
        def __init__(self, d_model, num_heads, *, d_in=None, bias=True):
            super().__init__(d_model, num_heads, d_in=d_in, bias=bias)
            self.w_k = Detached(d_in or d_model, d_model, bias=bias)

    result = check(Module, ONE, MULTI_HEAD_CONTRACT)
    assert result.exercise == "ex"
    assert result.message.startswith("[ex] not yet: no gradient reaches self.w_k.weight."), result.message


@pytest.mark.parametrize("fill", [-1e9, -1e4, -30.0])
def test_a_finite_fill_is_caught_when_the_visible_key_scores_far_below_it(fill):
    result = check(causal_module(fill=fill))
    assert (result.exercise, result.misconception) == (
        "ex",
        "blocked scores pushed down by a finite number instead of -inf",
    )
    assert result.message == (
        "[ex] not yet: when the first token's one visible key scores far below zero (about -1e30), its output "
        "changed with the tokens after it: the blocked later keys took weight. A finite fill (-1e4 or -1e9) works "
        "only while every visible score stays far above it. `result.reveal()` shows the fix."
    )
    assert result.fix.endswith("Fill blocked scores with -inf: scores.masked_fill(~mask, float('-inf')).")


@pytest.mark.parametrize("fill", [float("-inf"), torch.finfo(torch.float32).min])
def test_a_fill_below_every_score_is_accepted(fill):
    assert check(causal_module(fill=fill)).correct


# ------------------------------------------------------------------ the door


def test_check_module_prints_its_message_by_default_and_refuses_what_is_not_a_class(capsys):
    result = check_module("ex", causal_module(), CAUSAL_CONTRACT, CAUSAL, seed=1)
    assert capsys.readouterr().out == result.message + "\n"
    with pytest.raises(TypeError) as error:
        check_module("ex", 3, CAUSAL_CONTRACT, CAUSAL, seed=1)
    assert str(error.value) == "learner must be a function or class that builds your module, got int"


def test_projection_names_what_was_there_instead_of_the_layer():
    module = multi_head_module()(4, 2)
    module.w_o = nn.Conv1d(4, 4, 1)
    with pytest.raises(TypeError) as error:
        projection(module, "w_o")
    assert str(error.value).endswith("got Conv1d in MyMultiHeadAttention")


def test_module_is_written_runs_the_module_once_on_one_sequence_of_three_tokens():
    seen = []

    class Recording(causal_module()):
        def forward(self, x, cache=None, need_weights=False):
            seen.append(tuple(x.shape))
            return super().forward(x, cache, need_weights)

    assert module_is_written(Recording) is True and seen == [(1, 3, 8)]


@pytest.mark.parametrize(
    "setting",
    [
        ModuleSetting(8, 8, 2, bias=False, calls=(Call("full", 2, 5),)),
        ModuleSetting(6, 12, 3, rope_base=100.0, calls=(Call("full", 1, 7),)),
        ModuleSetting(16, 16, 4, calls=(Call("full", 3, 7),)),
    ],
)
def test_the_finite_fill_probe_accepts_the_right_module_and_catches_the_fill_at_other_sizes(setting):
    assert check(causal_module(), (setting,)).correct
    caught = check(causal_module(fill=-1e9), (setting,))
    assert caught.misconception == "blocked scores pushed down by a finite number instead of -inf", caught.message


# ------------------------------------------------------------------ behaviours seen before any number is compared


class TupleFrom04(multi_head_module()):
    def forward(self, x):
        return super().forward(x), None


class ThreeOutputs(causal_module()):
    def forward(self, x, cache=None, need_weights=False):
        out = super().forward(x, cache, need_weights)
        return (*out, None) if need_weights else out


class Counting04(multi_head_module()):
    calls = 0

    def forward(self, x):
        self.calls += 1
        return super().forward(x) * self.calls


TUPLE = "called as module(x), your forward returned a tuple, not the output tensor."
IGNORED = (
    "called with need_weights=True, your forward did not return (output, weights). Notebook 07 trains your module "
    "through exactly that call and reads the weights it returns.",
    "`return (out, weights) if need_weights else out`, weights (batch, heads, seq, past + seq).",
)
KEPT = "the same input gave two different outputs in two calls. Your module keeps something from one call to the next "
BEHAVIOURS = [
    (
        causal_module(always_weights=True),
        "returns (output, weights) without need_weights=True",
        f"{TUPLE} Notebook 07 and every layer built on yours call it so and take the output alone.",
        "Return the output alone unless need_weights=True: `return (out, weights) if need_weights else out`.",
    ),
    (
        TupleFrom04,
        "returns a tuple, not the output",
        f"{TUPLE} Every layer built on yours calls it so and takes the output alone.",
        "Return the output tensor alone, nothing beside it.",
    ),
    (causal_module(weights_dropped=True), "need_weights=True ignored", *IGNORED),
    (ThreeOutputs, "need_weights=True ignored", *IGNORED),
    (
        multi_head_module(weights_changed=True),
        "forward changes the module's weights",
        "calling your module changed its own weights. forward must only read the weights: an in-place operation on "
        "them (`add_`, `+=`, `.data`) changes every later call, and the optimizer's work.",
        "Compute new tensors from the weights (self.w_q(x)); never write into self.w_q.weight in forward.",
    ),
    (
        multi_head_module(dropout=True),
        "random numbers drawn in forward",
        "the same input gave two different outputs, and forward drew random numbers (dropout?). The module of this "
        "exercise is a function of its input: no dropout, no noise.",
        "Remove the dropout (or make its probability 0).",
    ),
    (
        causal_module(counts_calls=True),
        "something kept from one call to the next",
        f"{KEPT}(a tensor or a count stored on self): a cache lives in the cache argument, nowhere else.",
        "Keep nothing on self in forward; positions come from cache.length (0 without a cache).",
    ),
    (
        Counting04,
        "something kept from one call to the next",
        f"{KEPT}(a tensor or a count stored on self): each call must compute from its input alone.",
        "Keep nothing on self in forward.",
    ),
    (
        causal_module(batch_mixed=True),
        "the sequences of a batch are mixed",
        "the second sequence of a batch gave a different output on its own than next to the first. Each sequence of "
        "a batch is attended on its own: the batch axis must stay apart from the others.",
        "Keep the batch axis first and apart: view as (batch, seq, heads, d_head), transpose(1, 2), and never "
        "flatten or reshape across it.",
    ),
    (
        causal_module(fast_path_without_mask=True),
        "need_weights=True takes another path",
        "with need_weights=True your forward returned another output than without it. need_weights only asks for the "
        "weights too: the output must not change (notebook 07 trains through need_weights=True).",
        "Compute the output one way, and return the weights beside it when asked.",
    ),
]


@pytest.mark.parametrize(("learner", "name", "seen", "fix"), BEHAVIOURS, ids=[b[1] for b in BEHAVIOURS])
def test_a_behaviour_seen_is_told_word_for_word(learner, name, seen, fix):
    causal = "cache" in inspect.signature(learner.forward).parameters  # notebook 06's module, else 04's
    result = check(learner) if causal else check(learner, ONE, MULTI_HEAD_CONTRACT)
    assert (result.exercise, result.status, result.misconception, result.key) == (
        "ex",
        "misconception",
        name,
        f"mistake: {name}",
    )
    assert result.diagnosis == f"[ex] not yet: {seen}"
    assert result.message == f"[ex] not yet: {seen} `result.reveal()` shows the fix."
    assert result.fix == f"[ex] the fix for '{name}': {fix}"


# ------------------------------------------------------------------ what is seen on a fresh module


def test_a_later_token_changing_an_earlier_output_is_told_with_the_module_it_was_built_as():
    class Unmasked(causal_module(no_mask=True)):
        pass

    result = check(Unmasked)
    assert result.message == (
        f"[ex] not yet: with Unmasked(8, 2), changing the last two tokens changed the outputs of the "
        f"tokens before them. {ISOLATED}, it singles out what differs: look at which keys a token may attend to. This "
        "is a known mistake: `result.hint()` names it."
    )


def test_a_setting_changed_only_where_the_checker_looks_at_the_behaviour_is_named_and_put_back():
    """The behaviour is looked at without gradients (a module's calls there are not the compared ones): a change
    of the default dtype made only there is still named, and undone."""

    class DtypeUnderNoGrad(causal_module(half_split=True)):
        def forward(self, x, cache=None, need_weights=False):
            if not torch.is_grad_enabled():
                torch.set_default_dtype(torch.float64)
            return super().forward(x, cache, need_weights)

    result = check(DtypeUnderNoGrad)
    assert torch.get_default_dtype() == torch.float32
    assert (result.exercise, result.misconception) == ("ex", "changed the notebook's global PyTorch settings")
    assert result.message.startswith("[ex] not yet: your code changed the default dtype"), result.message


def test_a_module_wrong_only_with_grouped_keys_gets_the_grouped_weights_when_looked_at_again():
    grouped = (ModuleSetting(16, 16, 4, kv_heads=2, calls=(Call("full", 2, 6),)),)
    result = check(causal_module(half_split=True), grouped)
    assert result.misconception == HALF_SPLIT, result.message


# ------------------------------------------------------------------ how close is the same, where behaviour is looked at


def wrong_in_float64(jitter):
    """A module that is right in float32 and 10% off in float64 (so the behaviour is looked at in float64, the
    dtype of the setting that differs), with ``jitter(module, x, cache, need_weights)`` added to its output."""

    class Jittery(causal_module()):
        calls = 0

        def forward(self, x, cache=None, need_weights=False):
            out = super().forward(x, cache, need_weights)
            if x.dtype != torch.float64:
                return out
            self.calls += 1
            moved = (out[0] if need_weights else out) * 1.1 + jitter(self, x, cache, need_weights)
            return (moved, out[1]) if need_weights else moved

    return Jittery


def test_two_calls_that_differ_by_a_billionth_in_float64_are_two_different_outputs():
    result = check(wrong_in_float64(lambda module, x, cache, need_weights: 1e-9 * module.calls))
    assert result.misconception == "something kept from one call to the next", result.message


@pytest.mark.parametrize(
    "jitter",
    [
        lambda module, x, cache, need_weights: 1e-7 * x.shape[0],  # rounding that depends on the batch's size
        lambda module, x, cache, need_weights: 1e-7 * need_weights,  # on need_weights
        lambda module, x, cache, need_weights: 1e-7 * torch.tanh(x[:, -1:].sum(-1, keepdim=True)),  # on the last token
    ],
    ids=["batch size", "need_weights", "last token"],
)
def test_differences_at_rounding_level_are_not_taken_for_a_behaviour(jitter):
    """Below 1e-5, a batch of another size, need_weights=True or a later token are rounding, not a mixed batch,
    another path or a leak from the future: what differs is told as a number."""
    result = check(wrong_in_float64(jitter))
    assert (result.misconception, result.key) == (None, "differs"), result.message
    assert "full pass' differs from the reference (largest difference" in result.message, result.message
