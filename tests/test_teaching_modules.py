"""The module checker of notebooks 04 and 06 and its diagnosis (``mhsa_helpers.teaching.modules``), and the
recipe it diagnoses with (``mhsa_helpers.teaching.attention_recipe``).

The right recipe is held against the package's module (an independent implementation: fused projections,
its own RoPE tables and cache); the diagnosis is held against modules written as a learner writes them
(``learner_modules``), each with one or two slips: one for every mistake the recipe can make, which computes
what the recipe with that wrong step computes.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from learner_modules import causal_module, multi_head_module
from torch import nn

import mhsa_helpers as mh
from mhsa_helpers.teaching import feedback
from mhsa_helpers.teaching.attention_recipe import RIGHT, attend, package_parameters, rotate
from mhsa_helpers.teaching.checking import AnswerRejected
from mhsa_helpers.teaching.claims import ClaimError, claim
from mhsa_helpers.teaching.modules import (
    CAUSAL_CONTRACT,
    CAUSAL_SETTINGS,
    MODULE_MISTAKES,
    MULTI_HEAD_CONTRACT,
    CacheWithLengthAndAppend,
    Call,
    ModuleSetting,
    check_module,
    diagnose,
    explain,
    explained,
    load_package_weights,
    run_call,
)

CAUSAL = replace(RIGHT, causal=True, rope=True)
SMALL = (
    ModuleSetting(
        8, 8, 2, rope_base=100.0, calls=(Call("full", 2, 5), Call("chunks", 2, 6, (3, 2, 1)), Call("weights", 1, 4))
    ),
)


RECIPE_MISTAKES = [m for m in MODULE_MISTAKES if m.name != "a causal mask in a module without one"]


def check_causal(learner, settings=SMALL):
    return check_module("ex", learner, CAUSAL_CONTRACT, settings, seed=1, verbose=False)


# ------------------------------------------------------------------ the recipe


@pytest.mark.parametrize("convention", ["interleaved", "half_split"])
def test_rotate_spelled_out_equals_the_packages_rope(convention):
    x = torch.randn(2, 3, 7, 8, dtype=torch.float64)
    positions = torch.tensor([0, 3, 4, 9, 10, 11, 30])
    rope = mh.RotaryEmbedding(8, 32, 500.0, convention)
    torch.testing.assert_close(rotate(x, positions, 500.0, pairs=convention), rope(x, positions))
    # Computed in float64 whatever comes in, returned in the input's dtype.
    torch.testing.assert_close(rotate(x.float(), positions, 500.0, pairs=convention), rope(x.float(), positions))


def test_rotate_by_default_turns_interleaved_pairs_at_the_usual_frequencies_forwards():
    x = torch.randn(1, 2, 5, 8, dtype=torch.float64)
    positions = torch.arange(5)
    torch.testing.assert_close(rotate(x, positions, 10000.0), mh.RotaryEmbedding(8, 8)(x, positions))


class WithoutWk(nn.Module):
    """Three of the four projections: W_K missing (a learner who has not written it yet)."""

    def __init__(self):
        super().__init__()
        self.w_q, self.w_v, self.w_o = nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 8)


class WoIdentity(WithoutWk):
    def __init__(self):
        super().__init__()
        self.w_k, self.w_o = nn.Linear(8, 8), nn.Identity()


@pytest.mark.parametrize(
    ("mine", "error", "message"),
    [
        (object(), TypeError, "mine must be an nn.Module (your attention module), got object"),
        (WithoutWk(), ValueError, "mine.w_k must be an nn.Linear (the module's K projection), got NoneType"),
        (WoIdentity(), ValueError, "mine.w_o must be an nn.Linear (the module's O projection), got Identity"),
    ],
    ids=["not-a-module", "no-w_k", "w_o-identity"],
)
def test_loading_the_packages_weights_refuses_a_module_it_cannot_fill_word_for_word(mine, error, message):
    theirs = mh.MultiHeadSelfAttention(8, 2, causal=True, rope=mh.RotaryEmbedding(4))
    with pytest.raises(error) as refused:
        load_package_weights(mine, theirs)
    assert str(refused.value) == message


@pytest.mark.parametrize(("causal", "bias", "d_in"), [(False, True, 12), (True, False, 6), (True, True, 12)])
def test_the_right_recipe_is_the_packages_module_full_with_weights_and_in_chunks(causal, bias, d_in):
    torch.manual_seed(3)
    theirs = mh.MultiHeadSelfAttention(
        12,
        3,
        d_in=d_in,
        causal=causal,
        rope=mh.RotaryEmbedding(4, base=100.0) if causal else None,
        qkv_bias=bias,
        out_bias=bias,
    ).double()
    params, recipe = package_parameters(theirs), replace(RIGHT, causal=causal, rope=causal, rope_base=100.0)
    x = torch.randn(2, 7, d_in, dtype=torch.float64)
    out, weights, _ = attend(recipe, params, x, 3)
    want, want_weights = theirs(x, need_weights=True)
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(weights, want_weights)
    if causal:
        cache, held, start = mh.KVCache(), None, 0
        for size in (3, 1, 3):
            got, got_weights, held = attend(recipe, params, x[:, start : start + size], 3, held)
            want, want_weights = theirs(x[:, start : start + size], cache=cache, need_weights=True)
            torch.testing.assert_close(got, want)
            torch.testing.assert_close(got_weights, want_weights)
            start += size


#: Each slip of a module written by hand (``learner_modules.causal_module``) and the recipe's steps it changes.
SLIPS_AS_RECIPES = [
    ({"view_only": True}, {"split": "view"}),
    ({"view_only": True, "reshape_only": True}, {"split": "view", "merge": "reshape"}),
    ({"strided": True}, {"split": "strided"}),
    ({"reshape_only": True}, {"merge": "reshape"}),
    ({"no_w_o": True}, {"project_out": False}),
    ({"one_head": True}, {"one_head": True}),
    ({"scale": "d_model"}, {"scale": "sqrt d_model"}),
    ({"scale": "d_head no sqrt"}, {"scale": "d_head"}),
    ({"scale": "none"}, {"scale": "none"}),
    ({"kq": True}, {"scores": "k q"}),
    ({"softmax_dim": -2}, {"softmax_dim": -2}),
    ({"softmax_dim": -3}, {"softmax_dim": -3}),
    ({"no_mask": True}, {"causal": False}),
    ({"rope_v": True}, {"rotated": "qkv"}),
    ({"no_rope": True}, {"rotated": ""}),
    ({"queries_only": True}, {"rotated": "q"}),
    ({"keys_only": True}, {"rotated": "k"}),
    ({"half_split": True}, {"pairs": "half_split"}),
    ({"exponent": "i/d"}, {"frequencies": "i/d"}),
    ({"exponent": "2i//d"}, {"frequencies": "2i//d"}),
    ({"rope_before_split": True}, {"frequencies": "d_model"}),
    ({"rope_before_split": True, "rope_v": True}, {"frequencies": "d_model", "rotated": "qkv"}),
    ({"sign": -1}, {"sign": -1}),
    ({"base_ignored": True}, {"base": 10000.0}),
    ({"positions": "zero"}, {"positions": "zero"}),
    # RoPE on q and k alone sees only differences of positions; turned values show where the count starts.
    ({"rope_v": True, "positions": "zero"}, {"rotated": "qkv", "positions": "zero"}),
    ({"positions": "after_append"}, {"positions": "past+new"}),
    ({"mask_top_left": True}, {"mask": "top-left"}),
    ({"cache_unrotated": True}, {"cached_keys": "unrotated"}),
    ({"cache_rotated_twice": True}, {"cached_keys": "rotated twice"}),
    ({"half_split": True, "sign": -1, "positions": "after_append"}, {"pairs": "half_split", "sign": -1,
                                                                     "positions": "past+new"}),
]  # fmt: skip


def test_every_mistake_of_notebook_06s_recipe_has_a_slip_written_by_hand():
    changes = [change for _, change in SLIPS_AS_RECIPES]
    for mistake in RECIPE_MISTAKES:
        assert any(all(change.get(k) == v for k, v in mistake.change.items()) for change in changes), mistake.name


@pytest.mark.parametrize(
    ("slips", "change"),
    # ids without "/" (which mutmut cannot select): the slips' names and a number
    [pytest.param(*pair, id=f"{i}-{'+'.join(pair[0])}") for i, pair in enumerate(SLIPS_AS_RECIPES)],
)
def test_a_recipe_with_a_wrong_step_computes_what_a_module_with_that_slip_computes(slips, change):
    """Whole, and fed through one cache in chunks of 3, 2 and 1 (K·Qᵀ only whole: its shapes need every key to
    be a query)."""
    torch.manual_seed(5)
    theirs = mh.MultiHeadSelfAttention(12, 3, causal=True, rope=mh.RotaryEmbedding(4, base=100.0)).double()
    for parameter in theirs.parameters():  # random biases too
        torch.nn.init.normal_(parameter, std=0.4)
    mine = load_package_weights(causal_module(**slips)(12, 3, rope_base=100.0).double(), theirs)
    params, recipe = package_parameters(theirs), replace(CAUSAL, rope_base=100.0, **change)
    x = torch.randn(2, 6, 12, dtype=torch.float64)
    with torch.no_grad():
        # (softmax over the heads gives NaN where a key is hidden from every head: at the same places)
        torch.testing.assert_close(attend(recipe, params, x, 3)[0], mine(x), equal_nan=True)
        if "kq" in slips:
            return
        cache, held, start = CacheWithLengthAndAppend(), None, 0
        for size in (3, 2, 1):
            want, _, held = attend(recipe, params, x[:, start : start + size], 3, held)
            got = mine(x[:, start : start + size], cache=cache)
            torch.testing.assert_close(want, got, equal_nan=True, msg=f"chunk at {start}")
            start += size


def test_a_recipe_names_the_steps_it_gets_wrong():
    wrong = replace(CAUSAL, scale="d_head", pairs="half_split", causal=False)
    assert wrong.mistakes(CAUSAL) == {"scale": "d_head", "pairs": "half_split", "causal": False}
    assert CAUSAL.mistakes(CAUSAL) == {} and RIGHT.mistakes(RIGHT) == {}
    # The base of RoPE is the module's setting, not a step the learner writes: no mistake by itself.
    assert replace(CAUSAL, rope_base=500.0).mistakes(CAUSAL) == {}


def test_the_recipe_reads_only_the_packages_module():
    with pytest.raises(TypeError, match=r"^theirs must be a mhsa_helpers.MultiHeadSelfAttention, got Linear$"):
        package_parameters(torch.nn.Linear(2, 2))


def test_run_call_feeds_chunks_through_one_cache_and_names_its_outputs():
    torch.manual_seed(0)
    theirs = mh.MultiHeadSelfAttention(8, 2, causal=True, rope=mh.RotaryEmbedding(4))
    x = torch.randn(1, 6, 8)
    call = Call("chunks", 1, 6, (3, 2, 1))
    got = run_call(theirs, x, call, mh.KVCache)
    assert len(got) == 4 and call.outputs()[1] == "chunk 2 (2 tokens after 3 cached)"
    torch.testing.assert_close(torch.cat(got[:3], dim=1), theirs(x))
    assert got[3].shape == (1, 2, 1, 6)
    assert "fed in chunks of 3, 2 and 1 tokens" in call.describe(8)


# ------------------------------------------------------------------ naming by isolating


def slip_of(mistake):
    """The slip of a module written by hand that makes exactly ``mistake``."""
    return next(slips for slips, change in SLIPS_AS_RECIPES if change == mistake.change)


# ids without "/" or "√" (which mutmut cannot select)
@pytest.mark.parametrize(
    "mistake", RECIPE_MISTAKES, ids=lambda m: "+".join(f"{k}={v}" for k, v in slip_of(m).items()).replace("/", " over ")
)
def test_every_mistake_of_the_recipe_is_named_as_itself(mistake):
    """A module written by hand with one wrong step: the checker finds it wrong, tells the symptom without the
    name, keeps the name (alone) and the idea for the next attempt, and the fix for a request."""
    first = check_causal(causal_module(**slip_of(mistake)))
    assert first.misconception == mistake.name and first.key == f"mistake: {mistake.name}", first.message
    assert first.message == first.symptom and mistake.name not in first.message and mistake.hint not in first.message
    assert mistake.name in first.diagnosis and mistake.hint in first.diagnosis and mistake.fix not in first.diagnosis
    assert mistake.fix in first.fix


def test_the_same_module_again_is_named_and_its_fix_comes_on_request(capsys):
    learner = causal_module(half_split=True)
    first, second = check_causal(learner), check_causal(learner)
    assert first.message == first.symptom and second.message == second.diagnosis
    assert "'rotating pairs half-split instead of interleaved'" in second.message
    second.reveal()
    assert (
        "the fix for 'rotating pairs half-split instead of interleaved': Pair x[..., 0::2]" in capsys.readouterr().out
    )


def test_a_causal_mask_in_notebook_04s_module_is_named():
    result = check_module("ex", multi_head_module(causal=True), MULTI_HEAD_CONTRACT, (
        ModuleSetting(8, 8, 2, calls=(Call("full", 2, 5),)),
    ), seed=1, verbose=False)  # fmt: skip
    assert result.misconception == "a causal mask in a module without one", result.message


@pytest.mark.parametrize(
    ("slips", "names"),
    [
        ({"half_split": True, "positions": "zero"}, ["rotating pairs half-split instead of interleaved",
                                                     "positions not offset by the cache"]),
        ({"sign": -1, "mask_top_left": True}, ["RoPE turns the wrong way", "mask not offset by the cache"]),
        ({"exponent": "i/d", "cache_rotated_twice": True}, [
            "RoPE frequencies base^(-i/d_head) instead of base^(-2i/d_head)", "cached keys rotated twice"]),
        # Turned values, found by the first probe, stay turned while the second looks at the scores.
        ({"rope_v": True, "scale": "none"}, ["no √d_head scaling", "RoPE applied to V"]),
    ],
)  # fmt: skip
def test_two_slips_of_a_learners_module_are_both_named(slips, names):
    found = diagnose(causal_module(**slips), CAUSAL_CONTRACT)
    assert [m.name for m in found.mistakes] == names and not found.unexplained


def broken_after_its_first_call(base):
    """``base``'s module, raising from its second call on: it breaks on the diagnosis's second probe."""

    class BrokenAfterItsFirstCall(base):
        calls = 0

        def forward(self, x, cache=None, need_weights=False):
            type(self).calls += 1
            if type(self).calls > 1:
                raise RuntimeError("only once")
            return super().forward(x, cache, need_weights)

    return BrokenAfterItsFirstCall


def test_a_module_that_breaks_on_a_later_probe_keeps_what_the_earlier_ones_named():
    found = diagnose(broken_after_its_first_call(causal_module(rope_v=True)), CAUSAL_CONTRACT)
    assert [m.name for m in found.mistakes] == ["RoPE applied to V"] and not found.unexplained
    assert "every score equal" in found.differs


def test_a_right_module_that_breaks_on_a_later_probe_is_told_which_probe_broke_it():
    found = diagnose(broken_after_its_first_call(causal_module()), CAUSAL_CONTRACT)
    assert found.mistakes == () and found.unexplained
    assert found.differs.startswith("with the same content at every position, where only RoPE moves the scores")


def test_an_unknown_mistake_is_never_given_a_known_name():
    class ScaledByThree(causal_module()):
        def forward(self, x, cache=None, need_weights=False):
            out = super().forward(x, cache)
            out = out + 0.1 * torch.tanh(out)  # nothing a recipe does
            return (out, super().forward(x, cache, True)[1]) if need_weights else out

    found = diagnose(ScaledByThree, CAUSAL_CONTRACT)
    assert found.mistakes == () and found.unexplained and "every score equal" in found.differs
    result = check_causal(ScaledByThree)
    assert result.status == "incorrect" and result.misconception is None
    assert "isolate one step at a time, with every score equal" in result.message


class BaseOfItsOwn(causal_module()):
    def __init__(self, d_model, num_heads, **kwargs):
        super().__init__(d_model, num_heads, **kwargs)
        self.rope_base = 500.0  # neither the module's base nor 10000


class Tripled(torch.nn.Linear):
    def forward(self, x):
        return 3 * super().forward(x)


class QueriesTripled(multi_head_module()):
    def __init__(self, d_model, num_heads, *, d_in=None, bias=True):
        super().__init__(d_model, num_heads, d_in=d_in, bias=bias)
        self.w_q = Tripled(d_in or d_model, d_model, bias=bias)


class OffAfterTwo(causal_module()):
    def forward(self, x, cache=None, need_weights=False):
        out = super().forward(x, cache, need_weights)
        return out * 1.1 if cache is not None and cache.length > 3 else out


@pytest.mark.parametrize(
    ("learner", "contract", "differs"),
    [
        (BaseOfItsOwn, CAUSAL_CONTRACT,
         "with the same content at every position, where only RoPE moves the scores, your module's weights differ: "
         "look at the rotation (its pairs, frequencies, direction and base, and which of q and k it turns)"),
        (QueriesTripled, MULTI_HEAD_CONTRACT,
         "with values that give the attention weights back, your module's weights differ: look at the scores "
         "(q · kᵀ), their scaling and the softmax"),
        (OffAfterTwo, CAUSAL_CONTRACT,
         "fed through one cache in chunks of 3, 2 and 1 tokens, a later chunk differs: look at what forward reads "
         "from the cache (the positions' and the mask's offset) and what it appends"),
    ],
    ids=["rotation", "scores", "cache"],
)  # fmt: skip
def test_a_step_no_known_mistake_explains_is_told_where_to_look(learner, contract, differs):
    found = diagnose(learner, contract)
    assert found.mistakes == () and found.unexplained
    assert found.differs == differs


def test_where_to_look_is_the_first_probe_on_which_the_module_differs():
    rotation = "with the same content at every position, where only RoPE moves the scores"
    assert diagnose(causal_module(half_split=True), CAUSAL_CONTRACT).differs.startswith(rotation)

    class HalfSplitAndOffAfterTwo(causal_module(half_split=True)):
        def forward(self, x, cache=None, need_weights=False):
            out = super().forward(x, cache, need_weights)
            return out * 1.1 if cache is not None and cache.length > 3 else out

    found = diagnose(HalfSplitAndOffAfterTwo, CAUSAL_CONTRACT)
    assert [m.name for m in found.mistakes] == ["rotating pairs half-split instead of interleaved"]
    assert found.unexplained and found.differs.startswith(rotation)


def test_the_diagnosis_reads_the_output_of_a_module_that_always_returns_its_weights_too():
    class AlwaysBoth(causal_module(half_split=True)):
        def forward(self, x, cache=None, need_weights=False):
            return super().forward(x, cache, True)  # (out, weights) whatever need_weights says

    found = diagnose(AlwaysBoth, CAUSAL_CONTRACT)
    assert [m.name for m in found.mistakes] == ["rotating pairs half-split instead of interleaved"]
    assert not found.unexplained


def test_a_right_module_has_nothing_to_diagnose():
    assert diagnose(causal_module(), CAUSAL_CONTRACT).mistakes == ()
    assert diagnose(causal_module(), CAUSAL_CONTRACT).differs == ""
    assert diagnose(multi_head_module(), MULTI_HEAD_CONTRACT).differs == ""


def test_the_symptom_says_which_call_differs_and_where_to_look_without_the_name():
    result = check_causal(causal_module(positions="zero"))
    assert "fed in chunks of 3, 2 and 1 tokens" in result.message
    assert "chunk 2 (2 tokens after 3 cached)" in result.message and "chunk 1" not in result.message
    assert "look at the positions the new tokens are rotated at" in result.message
    assert "offset" not in result.message and result.misconception == "positions not offset by the cache"


# ------------------------------------------------------------------ behaviour, seen before any number


@pytest.mark.parametrize(
    ("slips", "name", "words"),
    [
        ({"always_weights": True}, "returns (output, weights) without need_weights=True", "returned a tuple"),
        ({"weights_dropped": True}, "need_weights=True ignored", "did not return (output, weights)"),
        ({"counts_calls": True}, "something kept from one call to the next", "two different outputs"),
    ],
)
def test_what_the_module_does_is_named_at_once(slips, name, words):
    result = check_causal(causal_module(**slips))
    assert result.misconception == name and words in result.message
    assert "`result.reveal()` shows the fix" in result.message and result.fix


@pytest.mark.parametrize(
    ("slips", "name"),
    [
        ({"dropout": True}, "random numbers drawn in forward"),
        ({"weights_changed": True}, "forward changes the module's weights"),
        ({"batch_mixed": True}, "the sequences of a batch are mixed"),
        ({"detach_v": True}, "gradients do not reach every weight"),
    ],
)
def test_notebook_04s_module_behaviour_is_named_at_once(slips, name):
    setting = (ModuleSetting(8, 8, 2, calls=(Call("full", 2, 5),)),)
    result = check_module("ex", multi_head_module(**slips), MULTI_HEAD_CONTRACT, setting, seed=1, verbose=False)
    assert result.misconception == name, result.message


def test_a_module_that_leaves_out_what_no_gradient_reaches_in_theory_is_right():
    """Notebook 04's key bias adds q · b_k to every score of a row, which the softmax ignores: a module that
    leaves it out computes the same function, and no gradient reaching it is no mistake."""

    class WeightAlone(torch.nn.Linear):
        def forward(self, x):
            return torch.nn.functional.linear(x, self.weight)

    class WithoutKeyBias(multi_head_module()):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.w_k.__class__ = WeightAlone  # its bias stays a parameter, and is never used

    setting = (ModuleSetting(8, 8, 2, calls=(Call("full", 2, 5),)),)
    assert check_module("ex", WithoutKeyBias, MULTI_HEAD_CONTRACT, setting, seed=1, verbose=False).correct


def test_notebook_04s_module_is_told_about_its_own_contract_without_a_cache():
    class Paired(multi_head_module()):
        def forward(self, x):
            return super().forward(x), None

    class Counting(multi_head_module()):
        calls = 0

        def forward(self, x):
            self.calls += 1
            return super().forward(x) * self.calls

    setting = (ModuleSetting(8, 8, 2, calls=(Call("full", 2, 5),)),)
    paired = check_module("ex", Paired, MULTI_HEAD_CONTRACT, setting, seed=1, verbose=False)
    assert (
        paired.misconception == "returns a tuple, not the output" and "need_weights" not in paired.message + paired.fix
    )
    counting = check_module("ex", Counting, MULTI_HEAD_CONTRACT, setting, seed=1, verbose=False)
    assert counting.misconception == "something kept from one call to the next"
    assert "cache" not in counting.message + counting.fix and "from its input alone" in counting.message


def test_a_later_token_changing_an_earlier_output_is_a_symptom_the_probes_explain():
    """No mask and a split that mixes positions both let the future in: the probes tell them apart."""
    result = check_causal(causal_module(no_mask=True))
    assert result.misconception == "no causal mask" and "changing the last two tokens changed the outputs" in (
        result.message
    )
    view = check_causal(causal_module(view_only=True, reshape_only=True))
    assert view.misconception == "view without transpose when splitting" and "mask" not in view.message


def test_a_fast_path_that_skips_the_mask_is_named_by_the_path():
    assert check_causal(causal_module(fast_path_without_mask=True)).misconception == (
        "need_weights=True takes another path"
    )


def test_need_weights_taking_another_path_is_named():
    class TwoPaths(causal_module()):
        def forward(self, x, cache=None, need_weights=False):
            out, weights = super().forward(x, cache, need_weights=True)
            return (out * 1.01, weights) if need_weights else out

    assert check_causal(TwoPaths).misconception == "need_weights=True takes another path"


def test_a_module_that_changes_the_notebooks_settings_is_told_and_the_settings_come_back():
    class GradOff(causal_module()):
        def forward(self, x, cache=None, need_weights=False):
            torch.set_grad_enabled(False)
            return super().forward(x, cache, need_weights)

    result = check_causal(GradOff)
    assert result.misconception == "changed the notebook's global PyTorch settings"
    assert "turned gradients off" in result.message and torch.is_grad_enabled()


def test_the_module_is_also_checked_in_float64_and_at_sizes_drawn_for_it():
    class Float32Only(causal_module()):
        def forward(self, x, cache=None, need_weights=False):
            return super().forward(x.float(), cache, need_weights)

    result = check_causal(Float32Only)
    assert result.status == "error" and "in float64" in result.message
    right = check_causal(causal_module())
    assert right.correct and "3 module sizes (1 given, 2 drawn for your code)" in right.message
    # each size drawn for a causal module makes five calls: full, again, weights, chunks and token by token
    assert right.message.endswith(f"on all {sum(len(s.calls) for s in SMALL) + 2 * 5} calls.")


def test_the_behaviour_is_looked_at_in_the_dtype_of_the_setting_that_differs():
    """A module that mixes its batch only in float64 shows it in the float64 setting drawn for it: there the
    behaviour is looked at, in float64, and named."""
    result = check_causal(causal_module(batch_mixed_in_float64=True))
    assert result.misconception == "the sequences of a batch are mixed", result.message


def test_a_grouped_models_weights_go_in_as_notebook_11_copies_them():
    setting = (ModuleSetting(16, 16, 4, kv_heads=2, calls=(Call("chunks", 1, 6, (4, 2)),)),)
    assert check_causal(causal_module(), setting).correct


# ------------------------------------------------------------------ the payoffs of notebooks 07 and 11


@pytest.mark.parametrize(
    ("slips", "cause"),
    [
        ({"half_split": True}, "'rotating pairs half-split instead of interleaved'"),
        ({"mask_top_left": True}, "'mask not offset by the cache'"),
        ({"positions": "zero"}, "'positions not offset by the cache'"),
        ({"fast_path_without_mask": True}, "'need_weights=True takes another path'"),
        ({"weights_dropped": True}, "'need_weights=True ignored'"),
        ({"fill": -1e9}, "'blocked scores pushed down by a finite number instead of -inf'"),
    ],
)
def test_a_failed_payoff_claim_prints_its_cause_in_one_line(slips, cause, capsys):
    with pytest.raises(ClaimError), explained(causal_module(**slips)):
        claim("your model's logits equal the package's", False)
    printed = capsys.readouterr().out.strip()
    assert len(printed.splitlines()) == 1 and cause in printed and "notebook 06, exercise 4" in printed


def test_a_right_module_gets_no_cause_and_a_passing_block_prints_nothing(capsys):
    assert explain(causal_module()) == ""
    with explained(causal_module(half_split=True)):
        claim("it holds", True)
    assert capsys.readouterr().out == "✓ it holds\n"


def test_explain_does_not_count_as_an_attempt():
    explain(causal_module(half_split=True))
    assert feedback.wrong_tries("notebook 06, exercise 4") == 0


@pytest.mark.parametrize(
    ("call", "described", "outputs"),
    [
        (Call("full", 2, 5), "x (2, 5, 8), full pass", ("output",)),
        (Call("weights", 1, 4), "x (1, 4, 8), need_weights=True", ("output", "attention weights")),
        (
            Call("chunks", 2, 6, (3, 2, 1)),
            "x (2, 6, 8) fed in chunks of 3, 2 and 1 tokens through one cache",
            ("chunk 1 (3 tokens)", "chunk 2 (2 tokens after 3 cached)", "chunk 3 (1 token after 5 cached)",
             "attention weights of the last chunk"),
        ),
        (Call("tokens", 1, 3), "x (1, 3, 8), token by token through one cache", ("output",)),
        (Call("again", 2, 5), "x (2, 5, 8), right after another sequence through the same module", ("output",)),
    ],
    ids=["full", "weights", "chunks", "tokens", "again"],
)  # fmt: skip
def test_each_way_of_calling_the_module_is_told_in_words_with_what_it_gives(call, described, outputs):
    assert call.describe(8) == described
    assert call.outputs() == outputs


def test_a_call_whose_answer_has_the_wrong_form_is_refused_with_the_form_it_needs():
    ignores_need_weights = causal_module()(8, 2)
    x = torch.randn(2, 4, 8)  # a batch of 2: the output alone is no (output, weights) pair either
    with pytest.raises(AnswerRejected) as raised:
        run_call(lambda x, need_weights=False: ignores_need_weights(x), x, Call("weights", 2, 4))
    assert str(raised.value) == "with need_weights=True, forward must return (output, weights)"
    with pytest.raises(AnswerRejected) as raised:
        run_call(lambda x, need_weights=False: ignores_need_weights(x, need_weights=True), x, Call("full", 2, 4))
    assert str(raised.value) == "without need_weights=True, forward must return the output tensor alone"


def test_the_package_module_for_notebook_11s_setting_shares_key_value_heads():
    grouped = next(setting for setting in CAUSAL_SETTINGS if setting.kv_heads)
    theirs = CAUSAL_CONTRACT.package(grouped)
    assert (theirs.num_heads, theirs.num_kv_heads) == (grouped.num_heads, grouped.kv_heads) == (4, 2)


def test_a_module_without_a_name_of_its_own_is_described_by_the_contracts_class():
    assert ModuleSetting(8, 8, 2).describe(CAUSAL_CONTRACT, "") == "MyCausalSelfAttention(8, 2)"
    assert ModuleSetting(4, 8, 2).describe(MULTI_HEAD_CONTRACT, "") == "MyMultiHeadAttention(8, 2, d_in=4)"


@pytest.mark.parametrize(
    ("setting", "described"),
    [
        (ModuleSetting(12, 8, 2), "Mine(8, 2, d_in=12)"),
        (ModuleSetting(8, 8, 2, bias=False), "Mine(8, 2, bias=False)"),
        (ModuleSetting(8, 8, 2, rope_base=100.0), "Mine(8, 2, rope_base=100)"),
        (ModuleSetting(12, 8, 2, bias=False, rope_base=500.0, dtype=torch.float64),
         "Mine(8, 2, d_in=12, bias=False, rope_base=500) in float64"),
        (ModuleSetting(16, 16, 4, bias=False, kv_heads=2),
         "Mine(16, 4, bias=False) holding weights whose 2 key/value heads are each shared by several query heads"),
        (ModuleSetting(16, 16, 4, kv_heads=1),
         "Mine(16, 4) holding weights whose one key/value head is shared by every query head"),
    ],
    ids=["d_in", "bias", "base", "all", "grouped", "one-kv-head"],
)  # fmt: skip
def test_a_setting_is_described_as_the_call_that_builds_it(setting, described):
    assert setting.describe(CAUSAL_CONTRACT, "Mine") == described


def test_notebook_04s_setting_is_described_with_the_same_keywords_and_no_rope_base():
    assert ModuleSetting(8, 8, 2).describe(MULTI_HEAD_CONTRACT, "Mine") == "Mine(8, 2)"
    assert (
        ModuleSetting(12, 8, 2, bias=False, rope_base=500.0, dtype=torch.float64).describe(MULTI_HEAD_CONTRACT, "Mine")
        == "Mine(8, 2, d_in=12, bias=False) in float64"
    )


def test_token_by_token_gives_one_tensor_of_every_position_as_the_full_pass_does():
    torch.manual_seed(0)
    module, x = causal_module()(8, 2).double(), torch.randn(2, 5, 8, dtype=torch.float64)
    with torch.no_grad():
        got = run_call(module, x, Call("tokens", 2, 5))
        torch.testing.assert_close(got, module(x))


def test_again_runs_another_sequence_of_the_same_shape_first_through_the_same_module():
    seen = []

    def module(x, need_weights=False):
        seen.append(x)
        return x

    x = torch.randn(2, 5, 8)
    assert run_call(module, x, Call("again", 2, 5)) is x
    assert len(seen) == 2 and seen[0].shape == x.shape and not torch.equal(seen[0], x) and seen[1] is x


def test_the_contracts_cache_appends_along_the_sequence_axis_whatever_the_rank_of_what_it_holds():
    """A module may cache its keys and values before splitting them into heads, as (batch, seq, d_model)."""
    cache = CacheWithLengthAndAppend()
    first, second = torch.randn(2, 3, 5), torch.randn(2, 1, 5)
    cache.append(first, first + 1)
    k, v = cache.append(second, second + 1)
    assert cache.length == 4
    torch.testing.assert_close((k, v), (torch.cat((first, second), 1), torch.cat((first, second), 1) + 1))


def test_notebook_06s_module_is_built_as_the_notebook_calls_it_with_keywords_only_where_they_differ():
    def recorded(*args, **kwargs):
        return args, kwargs

    assert CAUSAL_CONTRACT.build(recorded, 8, 8, 2, True, 10000.0) == ((8, 2), {})
    assert CAUSAL_CONTRACT.build(recorded, 6, 8, 2, False, 500.0) == (
        (8, 2),
        {"d_in": 6, "bias": False, "rope_base": 500.0},
    )


def test_notebook_04s_module_is_built_with_the_same_keywords_but_never_a_rope_base():
    def recorded(*args, **kwargs):
        return args, kwargs

    assert MULTI_HEAD_CONTRACT.build(recorded, 8, 8, 2, True, 10000.0) == ((8, 2), {})
    assert MULTI_HEAD_CONTRACT.build(recorded, 6, 8, 2, False, 500.0) == ((8, 2), {"d_in": 6, "bias": False})
