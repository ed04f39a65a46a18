"""The module checker (``mhsa_helpers.teaching.modules``): what it says, word for word, about what it sees a
learner's module do, about gradients that do not reach a weight, and in the payoff cells of notebooks 07 and 11.
Found unpinned by mutation testing (``make mutate``): these messages could change and no test noticed.

Written against public behaviour only: ``check_module``, ``module_is_written``, ``explain``, ``explained`` and
``projection``, with modules written as a learner writes them (``learner_modules``).
"""

from __future__ import annotations

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
    explained,
    module_is_written,
    projection,
)

ONE = (ModuleSetting(8, 8, 2, calls=(Call("full", 2, 5),)),)
CAUSAL = (ModuleSetting(8, 8, 2, calls=(Call("full", 2, 5), Call("weights", 1, 4))),)
EXERCISE = "notebook 06, exercise 4"


def check_04(learner):
    return check_module("ex", learner, MULTI_HEAD_CONTRACT, ONE, seed=1, verbose=False)


def test_gradients_that_do_not_reach_a_weight_are_named_with_the_weight():
    result = check_04(multi_head_module(detach_v=True))
    assert result.misconception == "gradients do not reach every weight"
    assert result.message == (
        "[ex] not yet: no gradient reaches self.w_v.weight. Training needs the whole forward on the autograd graph. "
        "`result.reveal()` shows the fix."
    )


def test_a_layer_kept_outside_the_modules_parameters_is_told_the_optimizer_would_miss_it():
    class Hidden(multi_head_module()):
        def __init__(self, d_model, num_heads, **kwargs):
            super().__init__(d_model, num_heads, **kwargs)
            layer = self.w_o
            del self.w_o
            object.__setattr__(self, "w_o", layer)  # an attribute, not a registered submodule

    result = check_04(Hidden)
    assert (result.exercise, result.status, result.message) == (
        "ex",
        "incorrect",
        "[ex] not yet: self.w_o.weight is not among the module's parameters(), so an optimizer would never train it.",
    )


def test_a_backward_that_fails_is_reported_at_the_learners_line():
    class Detached(multi_head_module()):
        def forward(self, x):
            out = super().forward(x)
            return out.detach() if torch.is_grad_enabled() and out.requires_grad else out

    result = check_04(Detached)
    assert (result.exercise, result.status) == ("ex", "error") and result.message.startswith(
        "[ex] backward through your module raised RuntimeError: element 0 of tensors does not require grad"
    ), result.message


def test_projection_names_the_missing_layer_and_what_was_there():
    module = multi_head_module()(4, 2)
    assert projection(module, "w_k") is module.w_k
    with pytest.raises(TypeError) as error:
        projection(nn.Module(), "w_o")
    assert str(error.value) == (
        "mine must have an nn.Linear named w_o (notebook 06's MyCausalSelfAttention: w_q, w_k, w_v, w_o), "
        "got NoneType in Module"
    )


# ------------------------------------------------------------------ the payoffs


def test_module_is_written_says_what_to_do_until_the_class_runs(capsys):
    line = (
        "MyCausalSelfAttention is not written yet (there is none, or it raises NotImplementedError): write it in "
        "notebook 06 and save it there with save_mine (on Colab, paste your my_attention.py into the cell above), "
        "then run this cell again. Nothing was run.\n"
    )
    assert module_is_written(None) is False and capsys.readouterr().out == line

    class Placeholder(nn.Module):
        def __init__(self, d_model, num_heads, **options):
            super().__init__()

        def forward(self, x, cache=None, need_weights=False):
            raise NotImplementedError

    assert module_is_written(Placeholder, "Mine") is False
    assert capsys.readouterr().out == line.replace("MyCausalSelfAttention", "Mine")
    assert module_is_written(causal_module()) is True and capsys.readouterr().out == ""

    class Broken(causal_module()):
        def forward(self, x, cache=None, need_weights=False):
            return x @ torch.ones(3, 3)

    with pytest.raises(RuntimeError):
        module_is_written(Broken)


def test_explain_says_the_cause_in_one_line_and_nothing_for_a_right_module():
    assert explain(causal_module(half_split=True)) == (
        f"What the checker of {EXERCISE} finds in your module (the likely cause): 'rotating pairs half-split "
        "instead of interleaved'. Revisit that exercise."
    )
    told = explain(causal_module(weights_dropped=True), exercise="the exercise")
    assert told.startswith(
        "What the checker of the exercise finds in your module (the likely cause): 'need_weights=True"
    )
    assert explain(causal_module()) == ""
    unknown = explain(causal_module(buffer_16=True))
    assert unknown.startswith(f"What the checker of {EXERCISE} finds in your module (the likely cause): ") and (
        "RuntimeError" in unknown and unknown.endswith("Revisit that exercise.")
    )


def test_explained_prints_the_cause_once_and_lets_the_failure_show(capsys):
    with pytest.raises(ZeroDivisionError), explained(causal_module(mask_top_left=True)):
        raise ZeroDivisionError
    assert capsys.readouterr().out == (
        f"What the checker of {EXERCISE} finds in your module (the likely cause): 'mask not offset by the cache'. "
        "Revisit that exercise.\n"
    )
    with pytest.raises(ZeroDivisionError), explained(causal_module()):
        raise ZeroDivisionError
    assert capsys.readouterr().out == ""


def test_a_causal_module_checked_on_calls_with_weights_gets_the_contracts_signature_message():
    class NoCache(nn.Module):
        def __init__(self, d_model, num_heads, **options):
            super().__init__()
            self.w_q, self.w_k, self.w_v, self.w_o = (nn.Linear(d_model, d_model) for _ in range(4))

        def forward(self, x):
            return x

    result = check_module("ex", NoCache, CAUSAL_CONTRACT, CAUSAL, seed=1, verbose=False)
    assert result.message == (
        "[ex] not yet: your forward takes (x); it must also take the cache and need_weights: "
        "forward(self, x, cache=None, need_weights=False)."
    )
