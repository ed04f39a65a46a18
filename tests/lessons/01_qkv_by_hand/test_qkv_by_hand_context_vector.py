"""Notebook 01's exercise 3, one word's context vector (``check_context_vector``): the right answer is accepted, and
is row ``i`` of PyTorch's own attention and of the recipe spelled out; the stub handed out is not attempted; each
known slip is told by its symptom, then named; a slip that crashes on these shapes is named from the square cases."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from notebook_cells import cells, defined_in_notebook, source

import mhsa_helpers as mh
from mhsa_helpers.lessons.qkv_by_hand import check_context_vector

NOTEBOOK = Path(__file__).resolve().parents[3] / "notebooks" / "01_qkv_by_hand.ipynb"


def right(x, w_q, w_k, w_v, i):
    v = x @ w_v
    q = x[i] @ w_q
    k = x @ w_k
    scores = k @ q / math.sqrt(q.shape[-1])
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def slip(*, query=None, scores=None, scale=None, normalise=None, taken=None, second="weights", swap=False):
    """The right answer with one line written otherwise, as a learner writes it."""

    def answer(x, w_q, w_k, w_v, i):
        v = x @ w_v
        q = x[i] @ w_q if query is None else query(x, w_q, i)
        k = x @ w_k
        s = (k @ q if scores is None else scores(q, k)) / (math.sqrt(q.shape[-1]) if scale is None else scale(x, q, v))
        weights = torch.softmax(s, dim=-1) if normalise is None else normalise(s, q)
        context = weights @ (v if taken is None else taken(x, k, v))
        out = (context, weights if second == "weights" else s)
        return out[::-1] if swap else out

    return answer


def looked_at(x, w_q, w_k, w_v, i):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    weights = torch.softmax(q @ k[i] / math.sqrt(q.shape[-1]), dim=-1)  # column i: every query against key i
    return weights @ v, weights


def test_the_right_answer_is_accepted_and_is_row_i_of_pytorchs_attention_and_of_the_recipe():
    assert check_context_vector(right, verbose=False).correct
    g = torch.Generator().manual_seed(0)
    x, w_q, w_k, w_v = (torch.randn(*s, generator=g, dtype=torch.float64) for s in ((6, 5), (5, 3), (5, 3), (5, 4)))
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    theirs = torch.nn.functional.scaled_dot_product_attention(q[None], k[None], v[None])[0]  # every word
    for i in range(6):
        context, weights = right(x, w_q, w_k, w_v, i)
        exps = [math.exp(sum(q[i, d] * k[j, d] for d in range(3)) / math.sqrt(3)) for j in range(6)]
        by_hand = torch.tensor([e / sum(exps) for e in exps], dtype=torch.float64)
        assert torch.allclose(weights, by_hand)
        assert torch.allclose(context, sum(by_hand[j] * v[j] for j in range(6)))
        assert torch.allclose(context, theirs[i])


def test_on_money_bank_grows_it_gives_the_weights_the_notebook_quotes():
    ex = mh.examples.money_bank_grows()
    _, weights = right(ex.embeddings, ex.w_q[0], ex.w_k[0], ex.w_v[0], 0)
    assert [round(w, 4) for w in weights.tolist()] == [0.3303, 0.3333, 0.3364]  # step 5 of notebook 01


def test_the_notebooks_stub_is_not_attempted_and_its_filled_in_blanks_are_accepted():
    stub = defined_in_notebook(NOTEBOOK, "my_context_vector")
    assert check_context_vector(stub, verbose=False).status == "not_attempted"
    # The lines it hands out (the values, the return) are those of a right answer: fill in the rest.
    code = next(source(c) for c in cells(NOTEBOOK) if "def my_context_vector(" in source(c)).split("\nresult = ")[0]
    blanks = {
        "q = ___": "q = x[i] @ w_q",
        "k = ___": "k = x @ w_k",
        "scores = ___": "scores = k @ q / math.sqrt(q.shape[-1])",
        "weights = ___": "weights = torch.softmax(scores, dim=-1)",
        "context = ___": "context = weights @ v",
    }
    lines = [line for line in code.splitlines() if "raise NotImplementedError" not in line]
    for blank, line in blanks.items():
        assert sum(blank in text for text in lines) == 1, blank
        lines = [text.replace(blank, line) for text in lines]
    namespace: dict = {"torch": torch, "math": math}
    exec("\n".join(lines), namespace)
    assert check_context_vector(namespace["my_context_vector"], verbose=False).correct


@pytest.mark.parametrize(
    ("wrong", "symptom", "name"),
    [
        (slip(scale=lambda x, q, v: 1.0), "sharper (further from uniform)", "no √d_k scaling"),
        (slip(scale=lambda x, q, v: q.shape[-1]), "flatter (closer to uniform)", "scaled by d_k instead of √d_k"),
        (slip(scale=lambda x, q, v: math.sqrt(x.shape[-1])), "on some cases and sharper on others",
         "scaled by √d_in (the embedding width) instead of √d_k"),
        (slip(scale=lambda x, q, v: math.sqrt(v.shape[-1])), "on some cases and sharper on others",
         "scaled by √d_v (the value width) instead of √d_k"),
        (slip(scale=lambda x, q, v: math.sqrt(len(x))), "on some cases and sharper on others",
         "scaled by √seq (the number of words) instead of √d_k"),
        (slip(scale=lambda x, q, v: 1.0, normalise=lambda s, q: torch.softmax(s, dim=-1) / math.sqrt(q.shape[-1])),
         "sum to 1/√d_k", "scaled after the softmax"),
        (slip(normalise=lambda s, q: s / s.sum()), "not all between 0 and 1",
         "divided the scores by their sum instead of a softmax"),
        (looked_at, "column i of the score table",
         "column i of the score table: every word's query against word i's key"),
        (slip(query=lambda x, w_q, i: x[i - 1] @ w_q), "the right outputs of another", "the query of another word"),
        (slip(taken=lambda x, k, v: k), "as many entries as a key", "weighted sum of the keys, not the values"),
        (slip(taken=lambda x, k, v: x), "as many entries as a word's embedding", "averaged x instead of the values"),
        (slip(second="scores"), "does not sum to 1", "returned the scores, not the weights"),
        (slip(swap=True), "your first output holds the numbers of the weights",
         "returned (weights, context) in the wrong order"),
    ],
    ids=["no scale", "d_k", "d_in", "d_v", "seq", "after softmax", "sum", "column", "another word", "keys", "x",
         "scores", "order"],
)  # fmt: skip
def test_a_known_slip_is_told_by_its_symptom_then_named(wrong, symptom, name):
    def answer(x, w_q, w_k, w_v, i):
        return wrong(x, w_q, w_k, w_v, i)

    first = check_context_vector(answer, verbose=False)
    assert not first.correct and symptom in first.message.lower() and name not in first.message, first.message
    again = check_context_vector(answer, verbose=False)
    assert again.misconception == name and f"'{name}'" in again.message, again.message


#: Slips that run only when the axes they mix have the same length (the learner's line is shown in the message).
QUERY_FROM_A_COLUMN_OF_X = slip(query=lambda x, w_q, i: x[:, i] @ w_q)
QUERY_FROM_A_COLUMN_OF_Q = slip(query=lambda x, w_q, i: (x @ w_q)[:, i])
KEYS_NOT_TURNED = slip(scores=lambda q, k: q @ k)


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (QUERY_FROM_A_COLUMN_OF_X, "the query taken from column i, not row i"),
        (QUERY_FROM_A_COLUMN_OF_Q, "the query taken from column i, not row i"),
        (KEYS_NOT_TURNED, "did not transpose K"),
    ],
    ids=["column of x", "column of the queries", "K not turned"],
)
def test_a_slip_that_fits_only_square_inputs_is_told_its_error_then_named(wrong, name):
    def answer(x, w_q, w_k, w_v, i):
        return wrong(x, w_q, w_k, w_v, i)

    first = check_context_vector(answer, verbose=False)
    assert first.misconception == name and "your function raised RuntimeError" in first.message
    assert "On square inputs" in first.message and name not in first.message, first.message
    assert f"'{name}'" in check_context_vector(answer, verbose=False).message


def test_a_query_word_hard_coded_from_the_warm_up_fails_on_one_word_and_is_named():
    wrong = slip(query=lambda x, w_q, i: x[1] @ w_q)  # `bank = E[1]`, as the warm-up wrote it

    def answer(x, w_q, w_k, w_v, i):
        return wrong(x, w_q, w_k, w_v, i)

    first = check_context_vector(answer, verbose=False)
    assert "IndexError" in first.message and "one word" in first.message
    assert check_context_vector(answer, verbose=False).misconception == "the query of another word"


def test_the_weights_of_the_whole_table_taken_as_a_row_are_accepted_with_a_note():
    def my_context_vector(x, w_q, w_k, w_v, i):
        context, weights = mh.scaled_dot_product_attention(x @ w_q, x @ w_k, x @ w_v, need_weights=True)
        return context[i], weights[i]

    result = check_context_vector(my_context_vector, verbose=False)
    assert result.correct and "Note: your function calls" in result.message
