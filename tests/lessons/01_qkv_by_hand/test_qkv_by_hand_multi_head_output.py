"""Notebook 01's exercise 5, two heads and W_O (``check_multi_head_output``): the right answer, written with the
learner's own head, is accepted, and is PyTorch's ``nn.MultiheadAttention`` with the same weights and the recipe
head by head; on "Money Bank Grows" it gives step 6's output; the stub handed out is not attempted; each known slip
is told by its symptom, then named; a slip that crashes on these shapes is named from the square cases, and one that
no input lets run is shown at its line; an answer whose ``my_attention_head`` is not right yet is not judged."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from notebook_cells import defined_in_notebook, learner_lines

import mhsa_helpers as mh
from mhsa_helpers.lessons.qkv_by_hand import check_multi_head_output

ROOT = Path(__file__).resolve().parents[3]
NOTEBOOK = ROOT / "notebooks" / "01_qkv_by_hand.ipynb"
SOLUTIONS = ROOT / "notebooks" / "solutions" / "01_qkv_by_hand_solutions.ipynb"


def my_attention_head(x, w_q, w_k, w_v):
    """Exercise 4's answer, which the answers below call as the notebook's do."""
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
    return weights @ v, weights


def right(x, w_qs, w_ks, w_vs, w_o):
    outputs = []
    for w_q, w_k, w_v in zip(w_qs, w_ks, w_vs, strict=True):
        output, _ = my_attention_head(x, w_q, w_k, w_v)
        outputs.append(output)
    return torch.cat(outputs, dim=-1) @ w_o.T


def projected_head_by_head(x, w_qs, w_ks, w_vs, w_o):
    """The recipe spelled out otherwise: C W_Oᵀ is the sum over the heads of C^h times head h's columns of W_O."""
    d_v = w_vs.shape[-1]
    total = 0
    for h in range(len(w_qs)):
        output, _ = my_attention_head(x, w_qs[h], w_ks[h], w_vs[h])
        total = total + output @ w_o[:, h * d_v : (h + 1) * d_v].T
    return total


def test_the_right_answer_is_accepted_and_is_pytorchs_multihead_attention_and_the_recipe():
    for answer in (right, projected_head_by_head):
        result = check_multi_head_output(answer, verbose=False)
        assert result.correct and "Note" not in result.message, result.message
    # nn.MultiheadAttention needs d_in = d_model = heads · d_head: 2 heads of 3 on inputs of width 6.
    g = torch.Generator().manual_seed(0)
    w_qs, w_ks, w_vs = (torch.randn(2, 6, 3, generator=g, dtype=torch.float64) for _ in range(3))
    w_o = torch.randn(6, 6, generator=g, dtype=torch.float64)
    x = torch.randn(2, 5, 6, generator=g, dtype=torch.float64)
    theirs = torch.nn.MultiheadAttention(6, 2, bias=False, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        # nn.Linear's layout: each head's paper matrix transposed, the heads' rows one after the other
        theirs.in_proj_weight.copy_(torch.cat([w.mT.reshape(6, 6) for w in (w_qs, w_ks, w_vs)]))
        theirs.out_proj.weight.copy_(w_o)
        expected, _ = theirs(x, x, x, need_weights=False)
    assert torch.allclose(right(x, w_qs, w_ks, w_vs, w_o), expected)
    assert torch.allclose(projected_head_by_head(x, w_qs, w_ks, w_vs, w_o), expected)


def test_on_money_bank_grows_it_gives_step_6s_output():
    ex = mh.examples.money_bank_grows()
    w_qs, w_ks, w_vs = (torch.stack(w) for w in (ex.w_q, ex.w_k, ex.w_v))
    assert w_qs.shape == (2, 3, 3) and ex.w_o.shape == (3, 6)
    module = mh.weight_layouts.from_head_weights(list(ex.w_q), list(ex.w_k), list(ex.w_v), ex.w_o.T, layout="in_out")
    with torch.no_grad():
        assert torch.allclose(right(ex.embeddings, w_qs, w_ks, w_vs, ex.w_o), module(ex.embeddings))


def test_the_notebooks_stub_is_not_attempted_and_the_solution_writes_six_lines():
    stub = defined_in_notebook(NOTEBOOK, "my_multi_head_output")
    assert check_multi_head_output(stub, verbose=False).status == "not_attempted"
    assert learner_lines(NOTEBOOK, SOLUTIONS)["check_multi_head_output"] == [
        "outputs = []",
        "for w_q, w_k, w_v in zip(w_qs, w_ks, w_vs):",
        "output, _ = my_attention_head(x, w_q, w_k, w_v)",
        "outputs.append(output)",
        "c = torch.cat(outputs, dim=-1)",
        "return c @ w_o.T",
    ]


def slip(*, heads=None, take=0, join=None, project=None):
    """The right answer with one line written otherwise, as a learner writes it."""

    def answer(x, w_qs, w_ks, w_vs, w_o):
        chosen = zip(w_qs, w_ks, w_vs, strict=True) if heads is None else heads(w_qs, w_ks, w_vs)
        outputs = [my_attention_head(x, w_q, w_k, w_v)[take] for w_q, w_k, w_v in chosen]
        c = torch.cat(outputs, dim=-1) if join is None else join(outputs)
        return c @ w_o.T if project is None else project(c, w_o, len(outputs))

    return answer


def by_column_blocks(c, w_o, heads, combine):
    """Each head's block of C times its own columns of W_O, the products then combined."""
    parts = zip(c.chunk(heads, dim=-1), w_o.chunk(heads, dim=-1), strict=True)
    return combine([block @ columns.T for block, columns in parts])


@pytest.mark.parametrize(
    ("wrong", "symptom", "name"),
    [
        (slip(project=lambda c, w_o, n: w_o @ c.mT), "one row per output feature",
         "W_O multiplied on the left: W_O·Cᵀ, the output turned on its side"),
        (slip(project=lambda c, w_o, n: c), "heads · d_v numbers per word",
         "returned the concatenated heads without W_O"),
        (slip(project=lambda c, w_o, n: by_column_blocks(c, w_o, n, lambda p: sum(p) / len(p))),
         "divided by the number of heads",
         "each head projected by its columns of W_O, then averaged instead of summed"),
        (slip(project=lambda c, w_o, n: by_column_blocks(c, w_o, n, lambda p: torch.cat(p, dim=-1))),
         "heads · d_model numbers per word",
         "each head projected by its columns of W_O, then concatenated instead of summed"),
        (slip(join=lambda outputs: torch.cat(outputs[::-1], dim=-1)), "meant for one head meet another head's",
         "heads concatenated in reverse order"),
        (slip(join=lambda outputs: torch.stack(outputs, dim=-1).flatten(-2)), "features of different heads alternate",
         "features of the heads interleaved: stacked on a new last axis, then flattened"),
        (slip(join=lambda outputs: torch.stack(outputs).reshape(*outputs[0].shape[:-1], -1)),
         "hold numbers that belong to other words",
         "heads stacked in front, then reshaped: each row mixes several words"),
        (slip(heads=lambda w_qs, w_ks, w_vs: [(w_qs[0], w_ks[0], w_vs[0])] * len(w_qs)),
         "keeps its numbers when some heads' matrices change", "one head's matrices used for every head"),
    ],
    ids=["W_O on the left", "no W_O", "averaged", "side by side", "reversed", "interleaved", "reshaped",
         "first head's"],
)  # fmt: skip
def test_a_known_slip_is_told_by_its_symptom_then_named(wrong, symptom, name):
    def answer(x, w_qs, w_ks, w_vs, w_o):
        return wrong(x, w_qs, w_ks, w_vs, w_o)

    first = check_multi_head_output(answer, verbose=False)
    assert not first.correct and symptom in first.message and name not in first.message, first.message
    again = check_multi_head_output(answer, verbose=False)
    assert again.misconception == name and f"'{name}'" in again.message, again.message


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (slip(join=lambda outputs: torch.stack(outputs, dim=-3).reshape(*outputs[0].shape[:-1], -1)),
         "heads stacked in front, then reshaped: each row mixes several words"),
        (slip(heads=lambda w_qs, w_ks, w_vs: [(w_qs[-1], w_ks[-1], w_vs[-1])] * len(w_qs)),
         "one head's matrices used for every head"),
    ],
    ids=["stacked next to the words", "the last head's"],
)  # fmt: skip
def test_another_way_to_write_a_known_slip_is_the_same_mistake(wrong, name):
    def answer(x, w_qs, w_ks, w_vs, w_o):
        return wrong(x, w_qs, w_ks, w_vs, w_o)

    assert check_multi_head_output(answer, verbose=False).misconception == name


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (slip(project=lambda c, w_o, n: c @ w_o),
         "W_O not transposed: the paper's layout assumed"),
        (slip(take=1),
         "concatenated the heads' weights, not their outputs"),
        (slip(heads=lambda w_qs, w_ks, w_vs: zip(w_qs.mT, w_ks.mT, w_vs.mT, strict=True)),
         "W_Q, W_K and W_V transposed: nn.Linear's layout assumed for them too"),
    ],
    ids=["W_O as stored", "the weights", "every matrix transposed"],
)  # fmt: skip
def test_a_slip_that_fits_only_square_inputs_is_told_its_error_then_named(wrong, name):
    def answer(x, w_qs, w_ks, w_vs, w_o):
        return wrong(x, w_qs, w_ks, w_vs, w_o)

    first = check_multi_head_output(answer, verbose=False)
    assert first.misconception == name and "your function raised RuntimeError" in first.message
    assert "On square inputs" in first.message and name not in first.message, first.message
    assert f"'{name}'" in check_multi_head_output(answer, verbose=False).message


@pytest.mark.parametrize(
    "wrong",
    [slip(join=lambda outputs: torch.cat(outputs, dim=-2)), slip(join=lambda outputs: sum(outputs))],
    ids=["along the words", "summed"],
)
def test_a_join_that_no_input_lets_run_is_shown_with_its_shapes_and_named_nothing(wrong):
    def answer(x, w_qs, w_ks, w_vs, w_o):
        return wrong(x, w_qs, w_ks, w_vs, w_o)

    # No case lets these joins reach W_O, so no known mistake can be matched: the error and its shapes are what is told.
    for _ in range(2):
        result = check_multi_head_output(answer, verbose=False)
        assert result.status == "error" and result.misconception is None
        assert "mat1 and mat2 shapes cannot be multiplied" in result.message and "two heads" in result.message


HEAD_CALLED = """
def my_multi_head_output(x, w_qs, w_ks, w_vs, w_o):
    outputs = [my_attention_head(x, w_q, w_k, w_v)[0] for w_q, w_k, w_v in zip(w_qs, w_ks, w_vs)]
    return torch.cat(outputs, dim=-1) @ w_o.T
"""


def with_head(head):
    """An answer that calls ``my_attention_head``, the notebook's global, here ``head``."""
    namespace = {"torch": torch, "my_attention_head": head}
    exec(HEAD_CALLED, namespace)
    return namespace["my_multi_head_output"]


def test_an_answer_is_judged_only_once_its_head_is_right():
    def unwritten(x, w_q, w_k, w_v):
        raise NotImplementedError

    def unscaled(x, w_q, w_k, w_v):
        q, k, v = x @ w_q, x @ w_k, x @ w_v
        weights = torch.softmax(q @ k.transpose(-2, -1), dim=-1)
        return weights @ v, weights

    waiting = check_multi_head_output(with_head(unwritten), verbose=False)
    assert waiting.status == "not_attempted" and "`my_attention_head`" in waiting.message
    assert "exercise 4" in waiting.message
    for _ in range(2):  # not a mistake of this exercise's lines: never named
        wrong_head = check_multi_head_output(with_head(unscaled), verbose=False)
        assert wrong_head.status == "incorrect" and wrong_head.misconception is None
        assert "exercise 4's checker does not accept" in wrong_head.message
    assert check_multi_head_output(with_head(my_attention_head), verbose=False).correct
