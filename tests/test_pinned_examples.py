"""The series' toy data (mhsa_helpers.examples): behaviour that mutation testing (``make mutate``)
showed unpinned — every argument changes the result, and the embeddings follow their docstring
(drawn for the sorted, lower-cased vocabulary; the same word, the same row)."""

from __future__ import annotations

import pytest
import torch

from mhsa_helpers.examples import money_bank_grows, sentence_embeddings, she_loves_cats


def test_money_bank_grows_is_float64_unless_asked_otherwise():
    data = money_bank_grows()
    tensors = [data.embeddings, *data.w_q, *data.w_k, *data.w_v, data.w_o]
    assert all(t.dtype == torch.float64 for t in tensors)
    single = money_bank_grows(torch.float32)
    singles = [single.embeddings, *single.w_q, *single.w_k, *single.w_v, single.w_o]
    assert all(t.dtype == torch.float32 for t in singles)
    assert all(torch.equal(s, t.float()) for s, t in zip(singles, tensors, strict=True))
    assert data.num_heads == single.num_heads == 2


def test_she_loves_cats_is_one_batch_of_three_ids():
    tokens, ids = she_loves_cats()
    assert tokens == ("She", "loves", "cats")
    assert ids.tolist() == [[0, 1, 2]]  # she, loves, cats in the vocabulary {"she": 0, "loves": 1, ...}


def test_sentence_embeddings_draw_one_row_per_word_of_the_sorted_lower_case_vocabulary():
    tokens, x = sentence_embeddings("b A a B c", 3, seed=5)
    assert tokens == ("b", "A", "a", "B", "c")
    # The vocabulary sorted: a, b, c; its rows are three draws of a generator started at the seed.
    table = torch.randn(3, 3, generator=torch.Generator().manual_seed(5))
    assert torch.equal(x, table[[1, 0, 0, 1, 2]])


def test_sentence_embeddings_split_on_any_run_of_white_space():
    tokens, x = sentence_embeddings("  she  loves\tcats ", 4)
    assert tokens == ("she", "loves", "cats")
    assert x.shape == (3, 4)


def test_every_argument_of_sentence_embeddings_changes_the_result():
    _, x = sentence_embeddings("the cat sat on the mat", 4)
    assert x.shape == (6, 4) and x.dtype == torch.float32
    assert torch.equal(x, sentence_embeddings("the cat sat on the mat", 4, seed=0)[1])  # the default seed is 0
    assert not torch.equal(x, sentence_embeddings("the cat sat on the mat", 4, seed=1)[1])
    assert sentence_embeddings("the cat sat on the mat", 5)[1].shape == (6, 5)
    double = sentence_embeddings("the cat sat on the mat", 4, dtype=torch.float64)[1]
    assert double.dtype == torch.float64
    assert torch.equal(double, sentence_embeddings("the cat sat on the mat", 4, dtype=torch.float64)[1])
    assert torch.equal(x[0], x[4]) and not torch.equal(x[0], x[1])  # "the" twice, one row


def test_an_empty_sentence_is_refused():
    with pytest.raises(ValueError, match="sentence"):
        sentence_embeddings("   ", 4)


@pytest.mark.parametrize("d_model", [0, 2.0])
def test_sentence_embeddings_names_d_model_when_it_is_not_a_positive_int(d_model):
    with pytest.raises((TypeError, ValueError), match=r"^d_model must be"):
        sentence_embeddings("she loves cats", d_model)
