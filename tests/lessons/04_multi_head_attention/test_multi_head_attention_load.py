"""Notebook 04's exercise 7, loading weights from ``nn.MultiheadAttention`` (``check_load_from_torch``): the
learner's ``load_from_torch(mine, theirs)`` copies PyTorch's packed ``in_proj_weight``, ``in_proj_bias`` and
``out_proj`` into ``mine``'s four ``nn.Linear`` layers. The right loader is accepted, however it writes the numbers
(``copy_``, new ``nn.Parameter``s, ``load_state_dict``), and makes a learner-written module give PyTorch's outputs;
each known slip is told by its symptom, then named; a crash or a form the checker cannot run says what it found,
in the learner's words, and names nothing."""

from __future__ import annotations

import pytest
import torch
from learner_modules import multi_head_module
from torch import nn

from mhsa_helpers.lessons.multi_head_attention import check_load_from_torch
from mhsa_helpers.lessons.multi_head_attention.exercises import LOAD_MISCONCEPTIONS
from mhsa_helpers.teaching.checking import IN_PLACE

LAYERS = ("w_q", "w_k", "w_v")


def load(mine, theirs, *, order=(0, 1, 2), take=lambda packed, i: packed.chunk(3)[i], in_weight=lambda w: w,
         out_weight=lambda w: w, in_biases=True, out_bias=True, out_proj=True):  # fmt: skip
    """The learner's loader, written out; ``order[i]`` is the block that goes into ``LAYERS[i]``, and the other
    switches make the slips."""
    with torch.no_grad():
        for name, block in zip(LAYERS, order, strict=True):
            getattr(mine, name).weight.copy_(in_weight(take(theirs.in_proj_weight, block)))
            if in_biases and theirs.in_proj_bias is not None:
                getattr(mine, name).bias.copy_(theirs.in_proj_bias.chunk(3)[block])
        if out_proj:
            mine.w_o.weight.copy_(out_weight(theirs.out_proj.weight))
        if out_bias and out_proj and theirs.out_proj.bias is not None:
            mine.w_o.bias.copy_(theirs.out_proj.bias)
    return mine


def load_from_torch(mine, theirs):
    return load(mine, theirs)


def as_new_parameters(mine, theirs):
    d_model = theirs.embed_dim
    for name, weight in zip(LAYERS, theirs.in_proj_weight.detach().split(d_model), strict=True):
        getattr(mine, name).weight = nn.Parameter(weight.clone())
    mine.w_o.weight = nn.Parameter(theirs.out_proj.weight.detach().clone())
    if theirs.in_proj_bias is not None:
        for name, bias in zip(LAYERS, theirs.in_proj_bias.detach().split(d_model), strict=True):
            getattr(mine, name).bias = nn.Parameter(bias.clone())
        mine.w_o.bias = nn.Parameter(theirs.out_proj.bias.detach().clone())
    return mine


def through_the_state_dict(mine, theirs):
    state = {f"{name}.weight": w for name, w in zip(LAYERS, theirs.in_proj_weight.chunk(3), strict=True)}
    state["w_o.weight"] = theirs.out_proj.weight
    if theirs.in_proj_bias is not None:
        state |= {f"{name}.bias": b for name, b in zip(LAYERS, theirs.in_proj_bias.chunk(3), strict=True)}
        state["w_o.bias"] = theirs.out_proj.bias
    mine.load_state_dict(state)
    return mine


@pytest.mark.parametrize("right", [load_from_torch, as_new_parameters, through_the_state_dict])
def test_a_right_loader_is_accepted_however_it_writes_the_numbers(right):
    result = check_load_from_torch(right, verbose=False)
    assert result.correct and result.shortcuts == (), result.message


@pytest.mark.parametrize("bias", [True, False])
def test_the_loader_makes_a_learners_module_give_pytorchs_outputs(bias):
    """The reference is PyTorch's own layer; the module filled is written as a learner writes it, not the package's."""
    torch.manual_seed(0)
    theirs = nn.MultiheadAttention(15, 3, bias=bias, batch_first=True).double()
    if bias:  # PyTorch starts its biases at zero: give them numbers, so that copying them shows
        with torch.no_grad():
            theirs.in_proj_bias.normal_()
            theirs.out_proj.bias.normal_()
    mine = multi_head_module()(15, 3, bias=bias).double()
    x = torch.randn(2, 4, 15, dtype=torch.float64)
    assert load_from_torch(mine, theirs) is mine
    torch.testing.assert_close(mine(x), theirs(x, x, x, need_weights=False)[0])


def transposed(w):
    return w.T


def every_third_row(packed, i):
    return packed.view(-1, 3, packed.shape[1])[:, i]


ORDER, TRANSPOSED, BIASES = "another order than q, k, v", "weights copied transposed", "biases not copied"
SLIPS = {
    "unpacked as k, q, v": (dict(order=(1, 0, 2)), "values are theirs, but its queries and keys", ORDER),
    "unpacked as v, k, q": (dict(order=(2, 1, 0)), "keys are theirs, but its queries and values", ORDER),
    "unpacked as q, v, k": (dict(order=(0, 2, 1)), "queries are theirs, but its keys and values", ORDER),
    "unpacked as k, v, q": (dict(order=(2, 0, 1)), "none of them in its place", ORDER),
    "unpacked as v, q, k": (dict(order=(1, 2, 0)), "none of them in its place", ORDER),
    "every third row": (dict(take=every_third_row), "rows of all three", "every third row taken as a block"),
    "every weight transposed": (
        dict(in_weight=transposed, out_weight=transposed),
        "from the first projection on",
        TRANSPOSED,
    ),
    "in_proj transposed": (dict(in_weight=transposed), "Your queries, keys and values hold theirs'", TRANSPOSED),
    "out_proj transposed": (dict(out_weight=transposed), "mine.w_o.weight holds theirs' numbers", TRANSPOSED),
    "biases left out": (dict(in_biases=False, out_bias=False), "Where the two modules have no biases", BIASES),
    "in_proj_bias left out": (dict(in_biases=False), "differ from theirs already", BIASES),
    "out_proj.bias left out": (dict(out_bias=False), "adds another vector", BIASES),
    "out_proj left out": (dict(out_proj=False), "with biases and without", "out_proj not copied"),
}
#: One slip of each name is run again, as a learner does: the second attempt is named (the others' first result
#: holds the diagnosis the second attempt prints).
AGAIN = ("unpacked as k, q, v", "every third row", "every weight transposed", "biases left out", "out_proj left out")
MISTAKES = {m.name: m for m in LOAD_MISCONCEPTIONS}


@pytest.mark.parametrize("slip", sorted(SLIPS))
def test_a_known_slip_is_told_by_its_symptom_then_named_and_its_fix_given_on_request(slip):
    switches, symptom, named = SLIPS[slip]

    def wrong(mine, theirs):
        return load(mine, theirs, **switches)

    first = check_load_from_torch(wrong, verbose=False)
    assert first.status == "misconception" and named in first.misconception, first.message
    mistake = MISTAKES[first.misconception]
    assert first.message == first.symptom and symptom in first.message and mistake.name not in first.message
    assert mistake.name in first.diagnosis and mistake.hint in first.diagnosis and mistake.fix not in first.diagnosis
    assert mistake.fix in first.fix
    if slip in AGAIN:
        again = check_load_from_torch(wrong, verbose=False)
        assert again.message == again.diagnosis == first.diagnosis


def test_each_misconception_has_a_slip_above_that_shows_its_symptom():
    shown = [symptom for _, symptom, _ in SLIPS.values()]
    for mistake in LOAD_MISCONCEPTIONS:
        assert any(words in mistake.symptom for words in shown), mistake.symptom
    # the two cycles of the three blocks share a symptom: neither keeps any block in its place
    assert len({m.symptom for m in LOAD_MISCONCEPTIONS}) == len(LOAD_MISCONCEPTIONS) - 1


def columns(mine, theirs):
    with torch.no_grad():
        for name, weight in zip(LAYERS, theirs.in_proj_weight.chunk(3, dim=1), strict=True):
            getattr(mine, name).weight.copy_(weight)
    return mine


def columns_as_parameters(mine, theirs):
    for name, weight in zip(LAYERS, theirs.in_proj_weight.chunk(3, dim=1), strict=True):
        getattr(mine, name).weight = nn.Parameter(weight.detach().clone())
    return mine


def without_no_grad(mine, theirs):
    mine.w_q.weight.copy_(theirs.in_proj_weight.chunk(3)[0])
    return mine


def plain_tensor(mine, theirs):
    mine.w_q.weight = theirs.in_proj_weight.chunk(3)[0]
    return mine


def biases_always(mine, theirs):
    with torch.no_grad():
        for name, bias in zip(LAYERS, theirs.in_proj_bias.chunk(3), strict=True):
            getattr(mine, name).bias.copy_(bias)
    return load(mine, theirs, in_biases=False)


def returns_a_copy(mine, theirs):
    import copy

    return load(copy.deepcopy(mine), theirs)


def forgets_return(mine, theirs):
    load(mine, theirs)


def changes_theirs(mine, theirs):
    with torch.no_grad():
        theirs.out_proj.weight.mul_(1.0)  # a no-op written in place still counts as writing: a learner's slip
        theirs.in_proj_weight.zero_()
    return mine


ERRORS = [
    (columns, "error", ["The size of tensor a", "(in columns, line", "in_proj_weight (36, 12)", "check which shapes"]),
    (columns_as_parameters, "incorrect", ["mine.w_q.weight is (36, 4), torch.float64; it was (12, 12)"]),
    (without_no_grad, "incorrect", ["a leaf Variable", "(in without_no_grad, line", "with torch.no_grad():"]),
    (plain_tensor, "incorrect", ["cannot assign", "(in plain_tensor, line", "wrap the new tensor in nn.Parameter"]),
    (biases_always, "incorrect", ["'NoneType'", "(in biases_always, line", "built with bias=False"]),
    (returns_a_copy, "incorrect", ["returned PackageMultiHeadAttention, not `mine`"]),
    (forgets_return, "incorrect", ["returned None — did you forget `return`?"]),
]


@pytest.mark.parametrize(("wrong", "status", "words"), ERRORS, ids=[w.__name__ for w, _, _ in ERRORS])
def test_a_loader_that_cannot_be_run_or_compared_is_told_what_was_found_and_nothing_is_named(wrong, status, words):
    result = check_load_from_torch(wrong, verbose=False)
    assert result.status == status and result.misconception is None, result.message
    assert all(w in result.message for w in words), result.message
    assert "checker itself failed" not in result.message


def test_a_loader_that_writes_into_theirs_is_told_so_by_the_arguments_name():
    result = check_load_from_torch(changes_theirs, verbose=False)
    assert result.misconception == IN_PLACE and "changed its argument `theirs` in place" in result.message


def test_an_unknown_slip_is_told_where_it_differs_and_not_named():
    result = check_load_from_torch(lambda mine, theirs: load(mine, theirs, in_weight=lambda w: 1.5 * w), verbose=False)
    assert result.status == "incorrect" and result.misconception is None
    assert "differs from the reference" in result.message


def test_a_stub_is_not_attempted_and_the_check_leaves_the_notebooks_random_numbers_alone():
    def stub(mine, theirs):
        raise NotImplementedError

    state = torch.get_rng_state()
    assert check_load_from_torch(stub, verbose=False).status == "not_attempted"
    assert check_load_from_torch(load_from_torch, verbose=False).correct
    assert torch.equal(torch.get_rng_state(), state)
