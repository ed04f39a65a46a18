"""Notebook 13's exercises 1 and 2: the prediction of what one token adds to a layer's cache
(``check_latent_prediction``) and the learner's absorbed scores (``check_absorbed_scores``). Exercise 3's checker, the
learner's own latent attention module, is tested in ``test_multi_head_latent_attention_module_checker.py``.

The right answers are written here as a learner writes them, in plain torch. A wrong answer is told its symptom first
and its name on a repeat, its fix only on request; an answer that builds the keys is refused even with the right
numbers; an answer whose shapes only fit on square inputs is told the error first, and named from the square inputs.
"""

from __future__ import annotations

import math

import pytest
import torch
from checker_table import state_change_tests, table_tests

import mhsa_helpers as mh
from mhsa_helpers.lessons.multi_head_latent_attention.exercises import (
    ABSORBED_SCORES_MISCONCEPTIONS,
    KEYS_BUILT_NAME,
    check_absorbed_scores,
    check_latent_prediction,
)

# ------------------------------------------------------------------ exercise 1: what a token costs in the cache

TWO_LATENTS = "a latent for the keys and another for the values"


def test_the_count_is_accepted_as_a_number_or_a_function_and_explained():
    result = check_latent_prediction(128, verbose=False)
    assert result.correct and result.message.startswith("[latent_prediction] correct: 128. The cache keeps")
    assert "2 * 8 * 64 = 1024, 8 times more" in result.message
    assert check_latent_prediction(lambda: 96 + 32, verbose=False).correct
    assert check_latent_prediction(128.0, verbose=False).correct
    assert check_latent_prediction(None, verbose=False).status == "not_attempted"


def test_a_near_miss_is_refused_and_the_notebooks_generator_is_left_alone():
    torch.manual_seed(5)
    state = torch.random.get_rng_state()
    result = check_latent_prediction(129, verbose=False)
    assert result.status == "incorrect" and "too high" in result.message
    assert torch.equal(torch.random.get_rng_state(), state)


@pytest.mark.parametrize(
    ("answer", "direction", "why", "name"),
    [
        (2 * 96 + 32, "high", "one for its keys and one for its values", TWO_LATENTS),
        (2 * (96 + 32), "high", "one for its keys and one for its values", TWO_LATENTS),
        (8 * 32 + 96, "high", "Is the rotated key k_r one per head", "a rotated key per head"),
        (8 * 96 + 32, "high", "Is the latent one per head", "a latent per head"),
        (2 * 8 * 64, "high", "the keys and values rebuilt from the latent", "the rebuilt keys and values counted"),
        (96, "low", "Where does a past token's position live?", "the rotated key forgotten"),
        (96 + 2 * 32, "high", "their queries too?", "the rotated query cached too"),
    ],
    ids=["two latents", "two latents and two rotated keys", "k_r per head", "latent per head", "MHA's count",
         "no k_r", "q_r cached"],
)  # fmt: skip
def test_a_wrong_reasoning_is_told_why_so_then_named_and_its_fix_on_request(
    answer, direction, why, name, capsys
):  # fmt: skip
    first = check_latent_prediction(answer, verbose=False)
    assert first.misconception == name and f"too {direction}" in first.message and why in first.message
    assert name not in first.message and "The value is" not in first.message
    again = check_latent_prediction(answer, verbose=False)
    assert f"this looks like '{name}'" in again.message and "d_latent + d_rope" not in again.message
    again.reveal()
    shown = capsys.readouterr().out
    assert "d_latent + d_rope" in shown and "The value is 128" in shown


# ------------------------------------------------------------------ exercise 2: absorbed scores


def my_absorbed_scores(q, w_uk, c_kv):
    q_latent = q @ w_uk  # (batch, heads, seq_q, d_latent): each query taken into the latent space
    return q_latent @ c_kv.unsqueeze(1).transpose(-2, -1)  # against the latents, one set for all heads


def absorbed_with_einsum(q, w_uk, c_kv):
    return torch.einsum("bhqd,hdl,bkl->bhqk", q, w_uk, c_kv)  # left to right: q and w_uk first


def absorbed_head_by_head(q, w_uk, c_kv):
    heads = [(q[:, h] @ w_uk[h]) @ c_kv.transpose(-2, -1) for h in range(q.shape[1])]
    return torch.stack(heads, dim=1)


def keys_built(q, w_uk, c_kv):
    k = c_kv.unsqueeze(1) @ w_uk.transpose(-2, -1)  # (batch, heads, seq_k, d_head)
    return q @ k.transpose(-2, -1)


def keys_built_head_by_head(q, w_uk, c_kv):
    return torch.stack([q[:, h] @ (c_kv @ w_uk[h].T).transpose(-2, -1) for h in range(q.shape[1])], dim=1)


def keys_built_flat(q, w_uk, c_kv):
    heads, d_head, d_latent = w_uk.shape
    k = mh.split_heads(c_kv @ w_uk.reshape(heads * d_head, d_latent).T, heads)  # the module's k_up
    return q @ k.transpose(-2, -1)


def keys_built_with_einsum(q, w_uk, c_kv):
    k = torch.einsum("bkl,hdl->bhkd", c_kv, w_uk)
    return torch.einsum("bhqd,bhkd->bhqk", q, k)


def transpose_on_the_query_side(q, w_uk, c_kv):
    return (q @ w_uk.transpose(-1, -2)) @ c_kv.unsqueeze(1).transpose(-2, -1)


def scaled_like_attention(q, w_uk, c_kv):
    return (q @ w_uk) @ c_kv.unsqueeze(1).transpose(-2, -1) / math.sqrt(q.shape[-1])


def scaled_by_the_latent(q, w_uk, c_kv):
    return (q @ w_uk) @ c_kv.unsqueeze(1).transpose(-2, -1) / c_kv.shape[-1] ** 0.5


def no_heads_axis(q, w_uk, c_kv):
    return (q @ w_uk) @ c_kv.transpose(-2, -1)


def heads_summed_in_einsum(q, w_uk, c_kv):
    return torch.einsum("bhqd,gdl,bkl->bhqk", q, w_uk, c_kv)


CHECKERS = {
    # The mistake known by its probe alone has no implementation to feed.
    "absorbed_scores": (
        check_absorbed_scores,
        my_absorbed_scores,
        [m for m in ABSORBED_SCORES_MISCONCEPTIONS if m.implementation],
    ),
}

LISTED_MISTAKES = [
    ("absorbed_scores", keys_built, KEYS_BUILT_NAME),
    ("absorbed_scores", keys_built_head_by_head, KEYS_BUILT_NAME),
    ("absorbed_scores", keys_built_flat, KEYS_BUILT_NAME),
    ("absorbed_scores", keys_built_with_einsum, KEYS_BUILT_NAME),
    ("absorbed_scores", transpose_on_the_query_side, "W_UK transposed on the query's side"),
    ("absorbed_scores", scaled_like_attention, "scaled by sqrt(d_head)"),
    ("absorbed_scores", scaled_by_the_latent, "scaled by sqrt(d_latent)"),
    ("absorbed_scores", no_heads_axis, "the latents given no axis for the heads"),
    ("absorbed_scores", heads_summed_in_einsum, "the heads' W_UK summed into one"),
]

(
    test_independent_solution_is_correct,
    test_stub_is_not_attempted,
    test_listed_mistakes_are_named,
    test_every_misconception_is_told_apart,
    test_unknown_wrong_answer_is_incorrect,
    test_a_crash_is_reported_not_raised,
) = table_tests(CHECKERS, LISTED_MISTAKES)

test_a_right_answer_that_changes_a_global_setting_is_told_so_and_the_setting_is_back = state_change_tests(
    {"absorbed_scores": (check_absorbed_scores, my_absorbed_scores)}
)


@pytest.mark.parametrize("answer", [absorbed_with_einsum, absorbed_head_by_head], ids=["einsum", "head by head"])
def test_other_absorbed_forms_are_right_too(answer):
    result = check_absorbed_scores(answer, verbose=False)
    assert result.correct, result.message


def test_the_reference_is_the_modules_content_scores():
    # The package's absorbed and materialised paths give the same attention; the reference's scores, scaled and
    # softmaxed, are the module's weights when it has no position part.
    torch.manual_seed(0)
    module = mh.MultiHeadLatentAttention(12, 3, 10, causal=False).double()
    x = torch.randn(2, 5, 12, dtype=torch.float64)
    _, weights = module(x, need_weights=True, absorbed=True)
    q = mh.split_heads(module.q_up(x), 3)
    w_uk = module.k_up.weight.view(3, 4, 10)
    scores = my_absorbed_scores(q, w_uk, module.kv_down(x))
    assert torch.allclose(torch.softmax(scores / math.sqrt(4), dim=-1), weights)


def test_building_the_keys_is_refused_with_the_right_numbers_then_named_then_fixed(capsys):
    first = check_absorbed_scores(keys_built, verbose=False)
    assert first.status == "misconception" and first.misconception == KEYS_BUILT_NAME
    assert "gives the reference's numbers on all 7 cases, but your function builds every head's keys, " in (
        first.message
    )
    assert "(batch, heads, seq_k, d_head)" in first.message and KEYS_BUILT_NAME not in first.message
    again = check_absorbed_scores(keys_built, verbose=False)
    assert f"this looks like '{KEYS_BUILT_NAME}'" in again.message and "(q_h W_UK_h) . c_kv" in again.message
    again.reveal()
    assert "q @ w_uk (batch, heads, seq_q, d_latent)" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("answer", "crash"),
    [(transpose_on_the_query_side, "Expected size for first two dimensions"), (no_heads_axis, "must match the size")],
    ids=["transpose", "no heads axis"],
)
def test_shapes_that_fit_only_on_square_inputs_are_told_the_error_then_named(answer, crash):
    first = check_absorbed_scores(answer, verbose=False)
    assert first.status == "misconception" and "RuntimeError" in first.message and crash in first.message
    assert "check which shapes your code assumes" in first.message and "On square inputs" in first.message
    assert first.misconception not in first.message
    again = check_absorbed_scores(answer, verbose=False)
    assert f"this looks like '{first.misconception}'" in again.message
    assert "on square inputs, where every axis has the same length, the same code runs" in again.message


def test_one_sequence_without_a_heads_axis_is_right_there_and_wrong_for_a_batch():
    # Right for batch 1 (c_kv's batch axis of 1 broadcasts over the heads): only the batched cases show it.
    g = torch.Generator().manual_seed(0)
    q, w_uk, c_kv = torch.randn(1, 3, 2, 4, generator=g), torch.randn(3, 4, 5, generator=g), torch.randn(1, 6, 5)
    assert torch.allclose(no_heads_axis(q, w_uk, c_kv), my_absorbed_scores(q, w_uk, c_kv))
    assert check_absorbed_scores(no_heads_axis, verbose=False).status == "misconception"


def test_scores_in_the_wrong_order_of_axes_are_told_by_their_shape():
    def keys_first(q, w_uk, c_kv):
        return c_kv.unsqueeze(1) @ (q @ w_uk).transpose(-2, -1)  # (batch, heads, seq_k, seq_q)

    result = check_absorbed_scores(keys_first, verbose=False)
    assert result.status == "incorrect" and "got shape (2, 3, 7, 4), expected shape (2, 3, 4, 7)" in result.message
