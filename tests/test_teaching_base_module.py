"""What the checkers of a learner's module that extends their notebook-06 ``MyCausalSelfAttention`` share
(``mhsa_helpers.teaching.base_module``; notebook 12's and 13's module checkers run on it).

The parent check is held against notebook 06's solution (``notebooks/solutions/my_attention.py``, as ``load_mine``
gives it) and against notebook-06 modules written with one slip each (``learner_modules``).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch
from learner_modules import causal_module
from torch import nn

import mhsa_helpers as mh
from mhsa_helpers.teaching.base_module import (
    CHECK_NOTEBOOK_06,
    ModuleSize,
    chunks,
    decoded,
    learners_parent,
    output_pair,
    package_outputs,
    parent_not_written,
    plain_attention,
    unwatched,
    verify_parent,
)
from mhsa_helpers.teaching.checking import AnswerRejected

SOLUTIONS = Path(__file__).resolve().parents[1] / "notebooks" / "solutions" / "my_attention.py"


@pytest.fixture(scope="module")
def solution():
    """Notebook 06's ``MyCausalSelfAttention``, from the committed solutions' ``my_attention.py``."""
    spec = importlib.util.spec_from_file_location("my_attention_solution", SOLUTIONS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.MyCausalSelfAttention


SIZES = [ModuleSize(8, 2, seed=1), ModuleSize(12, 3, d_in=10, rope_base=100.0, seed=2), ModuleSize(12, 2, bias=False)]


def x_for(size, batch=2, seq=5):
    return torch.randn(batch, seq, size.features, generator=torch.Generator().manual_seed(7), dtype=torch.float64)


# ------------------------------------------------------------------ the size and the package's plain attention


def test_the_size_gives_only_the_keywords_that_differ_and_reads_as_the_notebooks_call():
    assert ModuleSize(8, 2).keywords() == {} and ModuleSize(8, 2).features == 8
    size = ModuleSize(12, 3, d_in=10, bias=False, rope_base=100.0)
    assert size.features == 10
    assert size.keywords() == {"d_in": 10, "bias": False, "rope_base": 100.0}
    assert size.call("MySinkGateAttention") == "MySinkGateAttention(12, 3, d_in=10, bias=False, rope_base=100)"
    assert repr(size) == "MyCausalSelfAttention(12, 3, d_in=10, bias=False, rope_base=100)"


@pytest.mark.parametrize("size", SIZES, ids=repr)
def test_the_plain_attention_is_the_packages_causal_attention_with_rope_at_the_size(size):
    module = plain_attention(size, torch.float64)
    assert plain_attention(size, torch.float64) is module  # built once per size
    assert (module.d_model, module.num_heads, module.qkv_proj.in_features) == (size.d_model, size.num_heads,
                                                                              size.features)  # fmt: skip
    assert (module.qkv_proj.bias is not None) is size.bias and (module.out_proj.bias is not None) is size.bias
    assert module.rope.base == size.rope_base and module.sink is None and module.gate_proj is None
    assert not any(p.requires_grad for p in module.parameters())
    x = x_for(size)
    future = mh.causal_mask(5, 5)
    _, weights = module(x, need_weights=True)
    assert torch.all(weights.masked_select(~future) == 0)  # causal


def test_the_plain_attention_draws_its_weights_from_the_seed_and_leaves_the_global_generator_alone():
    state = torch.random.get_rng_state()
    one, other = plain_attention(ModuleSize(8, 2, seed=11), torch.float64), ModuleSize(8, 2, seed=12)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert not torch.equal(one.qkv_proj.weight, plain_attention(other, torch.float64).qkv_proj.weight)
    without_bias = plain_attention(ModuleSize(8, 2, bias=False, seed=11), torch.float64)
    assert torch.equal(without_bias.qkv_proj.weight, one.qkv_proj.weight)  # the biases off change nothing else


def test_the_decode_is_a_prompt_of_two_then_one_at_a_time_and_gives_the_full_pass():
    assert chunks(5) == [(0, 2), (2, 3), (3, 4), (4, 5)] and chunks(1) == [(0, 1)]
    size = SIZES[1]
    module, x = plain_attention(size, torch.float64), x_for(size)
    full, out, weights, steps = package_outputs(module, x)
    assert full.shape == out.shape == steps.shape == (2, 5, size.d_model) and weights.shape == (2, 3, 5, 5)
    torch.testing.assert_close(steps, full)
    torch.testing.assert_close(out, full)


def test_the_decode_names_an_output_that_is_no_tensor_or_of_another_length():
    x = x_for(SIZES[0])
    with pytest.raises(AnswerRejected, match="your forward returned tuple, not the output tensor alone"):
        decoded(lambda chunk, cache: (chunk, chunk), x, "your forward")
    with pytest.raises(AnswerRejected, match=r"returned shape \(2, 1, 8\) for 2 new token\(s\) \(2, 2, 8\)"):
        decoded(lambda chunk, cache: chunk[:, :1], x, "your forward")


# ------------------------------------------------------------------ the learner's class and the class it extends


def test_the_pair_is_out_and_weights_and_anything_else_is_told():
    out, weights = torch.zeros(1), torch.ones(1)
    assert output_pair((out, weights)) == (out, weights) and output_pair([out, weights]) == (out, weights)
    for wrong in (out, (out,), (out, weights, out), (out, 1.0)):
        with pytest.raises(AnswerRejected, match=r"it must return \(out, weights\), as your MyCausalSelfAttention"):
            output_pair(wrong)


def test_the_parent_is_the_learners_class_named_my_causal_self_attention_else_the_nearest_of_theirs(solution):
    class Base(nn.Module):
        pass

    class Middle(solution):
        pass

    class Mine(Middle):
        pass

    assert learners_parent(Mine) is solution
    assert learners_parent(type("Other", (Base,), {})) is Base
    assert learners_parent(type("OnTheTorchModule", (nn.Module,), {})) is None
    assert learners_parent(type("OnThePackage", (mh.MultiHeadSelfAttention,), {})) is None


def test_a_parent_not_written_is_sent_to_notebook_06():
    said = parent_not_written("MyCausalSelfAttention.forward", NotImplementedError())
    assert said.startswith("MyCausalSelfAttention.forward still raises NotImplementedError.")
    assert "your MyCausalSelfAttention of notebook 06: write it there (exercise 4)" in said


def test_the_profile_hook_is_off_inside_and_back_after():
    def hook(frame, event, arg):
        return None

    previous = sys.getprofile()
    sys.setprofile(hook)
    try:
        with unwatched():
            assert sys.getprofile() is None
        assert sys.getprofile() is hook
        with pytest.raises(ValueError), unwatched():
            raise ValueError
        assert sys.getprofile() is hook
    finally:
        sys.setprofile(previous)


# ------------------------------------------------------------------ the parent check


@pytest.mark.parametrize("size", SIZES, ids=repr)
def test_the_solution_of_notebook_06_passes_the_parent_check(solution, size):
    assert verify_parent(solution, x_for(size), size) is True
    assert verify_parent(solution, x_for(size).float(), size) is True


def test_no_parent_is_nothing_to_check():
    assert verify_parent(None, x_for(SIZES[0]), SIZES[0]) is False


@pytest.mark.parametrize(
    ("slip", "where"), [({"positions": "zero"}, "through a cache"), ({"no_mask": True}, "in a full pass")]
)
def test_a_wrong_notebook_06_module_is_sent_back_to_notebook_06(slip, where):
    size = SIZES[1]
    with pytest.raises(AnswerRejected) as raised:
        verify_parent(causal_module(**slip), x_for(size), size)
    assert str(raised.value) == (
        "the class yours extends, MyCausalSelfAttention, built alone as MyCausalSelfAttention(12, 3, d_in=10, "
        "rope_base=100) with the package attention's weights, already gives other numbers than the package's "
        f"attention {where}, before any line of yours runs: your new lines are not to blame. {CHECK_NOTEBOOK_06}"
    )


def test_a_notebook_06_module_that_raises_is_sent_back_and_one_not_written_goes_on():
    class Crashing(nn.Module):
        def __init__(self, d_model, num_heads, *, d_in=None, bias=True, rope_base=10000.0):
            super().__init__()
            raise RuntimeError("boom")

    size = SIZES[0]
    with pytest.raises(AnswerRejected, match="raised RuntimeError: boom") as raised:
        verify_parent(Crashing, x_for(size), size)
    assert "built alone as Crashing(8, 2) with the package's weights" in str(raised.value)
    assert str(raised.value).endswith("Your new lines are not to blame. " + CHECK_NOTEBOOK_06)

    class Unwritten(nn.Module):
        def __init__(self, d_model, num_heads, *, d_in=None, bias=True, rope_base=10000.0):
            raise NotImplementedError

    with pytest.raises(NotImplementedError):
        verify_parent(Unwritten, x_for(size), size)


def test_the_parent_check_runs_unwatched():
    def hook(frame, event, arg):
        return None

    inside = []

    class Watching(causal_module()):
        def forward(self, *args, **kwargs):
            inside.append(sys.getprofile())
            return super().forward(*args, **kwargs)

    previous = sys.getprofile()
    sys.setprofile(hook)
    try:
        assert verify_parent(Watching, x_for(SIZES[0]), SIZES[0]) is True
        assert sys.getprofile() is hook
    finally:
        sys.setprofile(previous)
    assert inside and all(profile is None for profile in inside)
