"""Notebook 04's exercise 5, heads one at a time (``check_heads_one_by_one``): multi-head attention as a loop over
the heads, each taking its block of rows of W_Q, W_K and W_V. The right loop is accepted and is what PyTorch's
``nn.MultiheadAttention`` and the batched recipe give; W_O applied head by head through its blocks of columns,
summed, is accepted too; each known slip is told by its symptom, then named; a slip the cases cannot single out
is reported where it fails, with no name."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from checker_table import table_tests
from learner_modules import attention_ok

from mhsa_helpers.lessons.multi_head_attention import check_heads_one_by_one
from mhsa_helpers.lessons.multi_head_attention import exercises as heads


def blocks(d_model, num_heads):
    d_head = d_model // num_heads
    return [slice(h * d_head, (h + 1) * d_head) for h in range(num_heads)]


def head_outputs(x, q_weight, k_weight, v_weight, num_heads, take=lambda w, rows: w[rows], apply=lambda x, w: x @ w.T):
    return [
        attention_ok(apply(x, take(q_weight, rows)), apply(x, take(k_weight, rows)), apply(x, take(v_weight, rows)))
        for rows in blocks(q_weight.shape[0], num_heads)
    ]


def one_by_one(x, q_weight, k_weight, v_weight, o_weight, num_heads):
    return torch.cat(head_outputs(x, q_weight, k_weight, v_weight, num_heads), dim=-1) @ o_weight.T


def w_o_by_column_blocks(x, q_weight, k_weight, v_weight, o_weight, num_heads):
    outputs = head_outputs(x, q_weight, k_weight, v_weight, num_heads)
    return sum(
        out @ o_weight[:, rows].T for out, rows in zip(outputs, blocks(o_weight.shape[1], num_heads), strict=True)
    )


def batched_recipe(x, q_weight, k_weight, v_weight, o_weight, num_heads):
    """The one-matrix view from torch primitives: project, view and transpose, PyTorch's attention, merge."""
    batch, seq, _ = x.shape
    d_model = q_weight.shape[0]
    q, k, v = (F.linear(x, w).view(batch, seq, num_heads, -1).transpose(1, 2) for w in (q_weight, k_weight, v_weight))
    merged = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(batch, seq, d_model)
    return F.linear(merged, o_weight)


def test_the_loop_is_accepted_and_gives_pytorchs_multi_head_attention():
    assert check_heads_one_by_one(one_by_one, verbose=False).correct
    torch.manual_seed(0)
    torch_mha = torch.nn.MultiheadAttention(12, 3, bias=False, batch_first=True).double()
    x = torch.randn(2, 5, 12, dtype=torch.float64)
    expected, _ = torch_mha(x, x, x, need_weights=False)
    w_q, w_k, w_v = torch_mha.in_proj_weight.detach().chunk(3)
    torch.testing.assert_close(one_by_one(x, w_q, w_k, w_v, torch_mha.out_proj.weight.detach(), 3), expected)
    # d_in != d_model, where nn.MultiheadAttention's query cannot go: the batched recipe, spelled out
    x, w_o = torch.randn(3, 4, 7, dtype=torch.float64), torch.randn(10, 10, dtype=torch.float64)
    w_q, w_k, w_v = torch.randn(3, 10, 7, dtype=torch.float64)
    torch.testing.assert_close(one_by_one(x, w_q, w_k, w_v, w_o, 2), batched_recipe(x, w_q, w_k, w_v, w_o, 2))


def test_w_o_applied_head_by_head_through_its_blocks_of_columns_summed_is_accepted():
    result = check_heads_one_by_one(w_o_by_column_blocks, verbose=False)
    assert result.correct, result.message


def by_columns(x, q_weight, k_weight, v_weight, o_weight, num_heads):
    outputs = head_outputs(
        x, q_weight, k_weight, v_weight, num_heads, take=lambda w, cols: w[:, cols], apply=torch.matmul
    )
    return torch.cat(outputs, dim=-1) @ o_weight.T


def by_columns_w_o_too(x, q_weight, k_weight, v_weight, o_weight, num_heads):
    outputs = head_outputs(
        x, q_weight, k_weight, v_weight, num_heads, take=lambda w, cols: w[:, cols], apply=torch.matmul
    )
    return torch.cat(outputs, dim=-1) @ o_weight


def every_h_th_row(x, q_weight, k_weight, v_weight, o_weight, num_heads):
    outputs = [
        attention_ok(x @ q_weight[h::num_heads].T, x @ k_weight[h::num_heads].T, x @ v_weight[h::num_heads].T)
        for h in range(num_heads)
    ]
    return torch.cat(outputs, dim=-1) @ o_weight.T


def w_o_averaged(x, q_weight, k_weight, v_weight, o_weight, num_heads):
    outputs = head_outputs(x, q_weight, k_weight, v_weight, num_heads)
    projected = [
        out @ o_weight[:, rows].T for out, rows in zip(outputs, blocks(o_weight.shape[1], num_heads), strict=True)
    ]
    return torch.stack(projected).mean(dim=0)


def stacked_then_flattened(x, q_weight, k_weight, v_weight, o_weight, num_heads):
    return torch.stack(head_outputs(x, q_weight, k_weight, v_weight, num_heads), dim=-1).flatten(-2) @ o_weight.T


def stacked_before_seq(x, q_weight, k_weight, v_weight, o_weight, num_heads):
    batch, seq, _ = x.shape
    stacked = torch.stack(head_outputs(x, q_weight, k_weight, v_weight, num_heads), dim=1)  # (batch, heads, ...)
    return stacked.reshape(batch, seq, -1) @ o_weight.T


def scaled_by_d_model(x, q_weight, k_weight, v_weight, o_weight, num_heads):
    outputs = []
    for rows in blocks(q_weight.shape[0], num_heads):
        q, k, v = x @ q_weight[rows].T, x @ k_weight[rows].T, x @ v_weight[rows].T
        weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q_weight.shape[0]), dim=-1)
        outputs.append(weights @ v)
    return torch.cat(outputs, dim=-1) @ o_weight.T


def without_w_o(x, q_weight, k_weight, v_weight, o_weight, num_heads):
    return torch.cat(head_outputs(x, q_weight, k_weight, v_weight, num_heads), dim=-1)


def w_o_untransposed(x, q_weight, k_weight, v_weight, o_weight, num_heads):
    return torch.cat(head_outputs(x, q_weight, k_weight, v_weight, num_heads), dim=-1) @ o_weight


COLUMNS = "columns of the weights instead of rows"
SLIPS = [
    (by_columns, "On square inputs, where every axis has the same length, it runs", COLUMNS),
    (by_columns_w_o_too, "On square inputs, where every axis has the same length, it runs", COLUMNS),
    (every_h_th_row, "each is built from other rows of the same weights", "heads take every h-th row"),
    (w_o_averaged, "divided by the number of heads", "W_O applied to each head and the results averaged"),
    (stacked_then_flattened, "reach W_O in another order", "head outputs interleaved when put side by side"),
    (stacked_before_seq, "Look at the line that merges the heads", "merge without transposing back"),
    (scaled_by_d_model, "closer to their mean over the positions", "scaled by √d_model instead of √d_head"),
    (without_w_o, "weighted average of the value rows", "forgot W_O"),
    (w_o_untransposed, "the last one differs", "only W_O applied without its transpose"),
]  # fmt: skip


@pytest.mark.parametrize(("wrong", "symptom", "name"), SLIPS, ids=[w.__name__ for w, _, _ in SLIPS])
def test_a_known_slip_is_told_by_its_symptom_then_named(wrong, symptom, name):
    first = check_heads_one_by_one(wrong, verbose=False)
    assert not first.correct and symptom in first.message and name not in first.message, first.message
    again = check_heads_one_by_one(wrong, verbose=False)
    assert again.misconception == name and name in again.message, again.message


def rows_without_transpose(x, q_weight, k_weight, v_weight, o_weight, num_heads):
    rows = blocks(q_weight.shape[0], num_heads)
    outputs = [attention_ok(x @ q_weight[r], x @ k_weight[r], x @ v_weight[r]) for r in rows]
    return torch.cat(outputs, dim=-1) @ o_weight.T


def d_head_from_d_in(x, q_weight, k_weight, v_weight, o_weight, num_heads):
    d_head = x.shape[-1] // num_heads
    rows = [slice(h * d_head, (h + 1) * d_head) for h in range(num_heads)]
    outputs = [attention_ok(x @ q_weight[r].T, x @ k_weight[r].T, x @ v_weight[r].T) for r in rows]
    return torch.cat(outputs, dim=-1) @ o_weight.T


@pytest.mark.parametrize("wrong", [rows_without_transpose, d_head_from_d_in])
def test_a_slip_no_case_singles_out_is_reported_at_its_line_and_not_named(wrong):
    """The rows applied untransposed crash on every case; d_head taken from d_in is right wherever d_in = d_model.
    Neither is a columns answer, though both crash where d_in != d_model."""
    result = check_heads_one_by_one(wrong, verbose=False)
    assert result.status == "error" and result.misconception is None, result.message
    assert "your function raised RuntimeError" in result.message and "known mistake" not in result.message
    assert " line " in result.message and "check which shapes your code assumes" in result.message


(
    test_independent_solution_is_correct,
    test_stub_is_not_attempted,
    test_listed_mistakes_are_named,
    test_every_misconception_is_told_apart,
    test_unknown_wrong_answer_is_incorrect,
    test_a_crash_is_reported_not_raised,
) = table_tests(
    {"heads_one_by_one": (check_heads_one_by_one, one_by_one, heads.HEADS_ONE_BY_ONE_MISCONCEPTIONS)},
    [("heads_one_by_one", every_h_th_row, "heads take every h-th row")],
)
