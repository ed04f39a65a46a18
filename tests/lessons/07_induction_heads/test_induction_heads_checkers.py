"""The checkers of notebook 07's exercises: the induction score, the repeated batch, the ablation to debug, and
``check_previous_token_score`` (no longer in the notebook, kept for anyone who wants it). The prediction:
``test_induction_heads_prediction.py``.

The right answers are written here by hand (loops, not the package's vectorised code). A wrong answer is told
its symptom first and its name on a repeat; answers fitted to the teaching shapes or to float64, and answers
that change PyTorch's global settings, are refused; the handed-out bug is told "still the original" and
nothing more, in the notebook's committed output too.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from checker_table import catalogue_tests, state_change_tests, table_tests
from test_wrong_answers import Wrong

from mhsa_helpers.lessons.induction_heads import (
    check_ablate_head,
    check_induction_score,
    check_previous_token_score,
    check_repeat_chunk,
    exercises,
)
from mhsa_helpers.teaching.checking import STATE_CHANGED

NOTEBOOK = Path(__file__).resolve().parents[3] / "notebooks" / "07_induction_heads.ipynb"

# ------------------------------------------------------------------ right answers, by hand


def loop_previous_token(weights):
    batch, heads, seq, _ = weights.shape
    total = torch.zeros(heads, dtype=weights.dtype)
    for b in range(batch):
        for t in range(1, seq):
            total += weights[b, :, t, t - 1]
    return total / (batch * (seq - 1))


def loop_induction(weights, first_start, repeat_len, *, shift=1, queries="copy", dtype=None):
    total, count = torch.zeros(weights.shape[1], dtype=dtype or weights.dtype), 0
    for b in range(weights.shape[0]):
        s, n = int(first_start[b]), int(repeat_len[b])
        ts = {"copy": range(s + n, s + 2 * n), "all": range(n - 1, weights.shape[-1])}[queries]
        for t in ts:
            total += weights[b, :, t, t - n + shift]
            count += 1
    return total / count


def loop_repeat(noise, first_start, repeat_len):
    tokens, mask = noise.clone(), torch.zeros(noise.shape, dtype=torch.bool)
    for b in range(noise.shape[0]):
        s, n = int(first_start[b]), int(repeat_len[b])
        for i in range(n):
            tokens[b, s + n + i] = noise[b, s + i]
        for t in range(s + n, s + 2 * n - 1):
            mask[b, t] = True
    return tokens, mask


def slice_ablate(merged, num_heads, head):
    d_head = merged.shape[-1] // num_heads
    out = merged.clone()
    out[..., head * d_head : (head + 1) * d_head] = 0.0
    return out


def handed_out_ablate(merged, num_heads, head):
    # Notebook 07's exercise 4 as handed out, word for word.
    out = merged.clone()
    out[..., head::num_heads] = 0
    return out


# ------------------------------------------------------------------ the function checkers' table


def main_diagonal(weights):
    return weights.diagonal(0, -2, -1)[..., 1:].mean(dim=(0, 2))


def with_query_zero(weights):
    # Averages seq queries, query 0 included (it has no previous token: weight 0 there).
    batch, heads, seq, _ = weights.shape
    total = torch.zeros(heads, dtype=weights.dtype)
    for b in range(batch):
        for t in range(seq):
            total += weights[b, :, t, t - 1] if t >= 1 else 0.0
    return total / (batch * seq)


def earlier_token_itself(weights, first_start, repeat_len):
    return loop_induction(weights, first_start, repeat_len, shift=0)


def every_query(weights, first_start, repeat_len):
    return loop_induction(weights, first_start, repeat_len, queries="all")


def one_based_ablate(merged, num_heads, head):
    return slice_ablate(merged, num_heads, head - 1)


def ablate_num_heads_wide(merged, num_heads, head):
    out = merged.clone()
    out[..., head * num_heads : (head + 1) * num_heads] = 0
    return out


CHECKERS = {
    "previous_token_score": (check_previous_token_score, loop_previous_token, exercises.PREVIOUS_TOKEN_MISCONCEPTIONS),
    "induction_score": (check_induction_score, loop_induction, exercises.INDUCTION_MISCONCEPTIONS),
    "ablate_head": (check_ablate_head, slice_ablate, exercises.ABLATE_MISCONCEPTIONS),
}

LISTED_MISTAKES = [
    ("previous_token_score", main_diagonal, "off-by-one diagonal: the token itself"),
    ("previous_token_score", with_query_zero, "averaged over undefined positions"),
    ("induction_score", earlier_token_itself, "attended to the earlier token itself"),
    ("induction_score", every_query, "averaged over undefined positions"),
    ("ablate_head", one_based_ablate, "counted heads from 1"),
    ("ablate_head", ablate_num_heads_wide, "slices num_heads features wide"),
]

(
    test_independent_solution_is_correct,
    test_stub_is_not_attempted,
    test_listed_mistakes_are_named,
    test_every_misconception_is_told_apart,
    test_unknown_wrong_answer_is_incorrect,
    test_a_crash_is_reported_not_raised,
) = table_tests(CHECKERS, LISTED_MISTAKES)


# ------------------------------------------------------------------ the repeated batch (two outputs)


def test_repeat_chunk_accepts_the_loop_and_a_gather():
    def gathered(noise, first_start, repeat_len):
        positions = torch.arange(noise.shape[1])
        offset = positions - first_start[:, None]
        second = (offset >= repeat_len[:, None]) & (offset < 2 * repeat_len[:, None])
        copied = noise.gather(1, (positions - repeat_len[:, None]).clamp(min=0))
        mask = second & (offset < 2 * repeat_len[:, None] - 1)
        return torch.where(second, copied, noise), mask

    for answer in (loop_repeat, gathered):
        result = check_repeat_chunk(answer, verbose=False)
        assert result.correct and result.message.endswith("drawn at random for your code)."), result.message


@pytest.mark.parametrize(
    "mistake", [m for m in exercises.REPEAT_MISCONCEPTIONS if m.implementation], ids=lambda m: m.name
)
def test_each_repeat_chunk_mistake_is_told_its_symptom_then_named(mistake):
    first = check_repeat_chunk(mistake.implementation, verbose=False)
    assert first.misconception == mistake.name and first.message == first.symptom
    assert mistake.symptom in first.message and mistake.name not in first.message and mistake.hint not in first.message
    again = check_repeat_chunk(mistake.implementation, verbose=False)
    assert again.message == again.diagnosis and mistake.name in again.message and mistake.hint in again.message
    assert mistake.fix not in again.message and mistake.fix in again.fix


def tokens_as_floats(noise, first_start, repeat_len):
    tokens, mask = loop_repeat(noise, first_start, repeat_len)
    return tokens.float(), mask


def tokens_built_from_zeros(noise, first_start, repeat_len):
    # torch.zeros without a dtype: float32 tokens with the right values.
    tokens = torch.zeros(noise.shape)
    tokens[:] = noise
    mask = torch.zeros(noise.shape, dtype=torch.bool)
    for b in range(noise.shape[0]):
        s, n = int(first_start[b]), int(repeat_len[b])
        tokens[b, s + n : s + 2 * n] = noise[b, s : s + n]
        mask[b, s + n : s + 2 * n - 1] = True
    return tokens, mask


@pytest.mark.parametrize("answer", [tokens_as_floats, tokens_built_from_zeros])
def test_tokens_returned_as_floats_are_not_tokens(answer):
    """Compared after type promotion they were once accepted: now the dtype is compared, and the mistake named."""
    first = check_repeat_chunk(answer, verbose=False)
    assert first.misconception == "tokens returned as floats"
    assert (
        "expected whole numbers (torch.int64)" in first.message and "Your tokens hold the right values" in first.message
    )
    assert check_repeat_chunk(answer, verbose=False).message == first.diagnosis


def test_a_mask_of_numbers_is_named_whatever_the_integer_dtype():
    for dtype in (torch.long, torch.int32, torch.float32):
        result = check_repeat_chunk(
            lambda x, s, n, d=dtype: (loop_repeat(x, s, n)[0], loop_repeat(x, s, n)[1].to(d)), verbose=False
        )
        assert result.misconception == "mask of 0/1 numbers, not booleans", result.message


def test_one_wrong_token_is_rejected_without_a_name():
    def one_token_off(noise, first_start, repeat_len):
        tokens, mask = loop_repeat(noise, first_start, repeat_len)
        tokens[0, -1] = tokens[0, -1] % 19 + 1
        return tokens, mask

    result = check_repeat_chunk(one_token_off, verbose=False)
    assert result.status == "incorrect" and "output 1 (tokens)" in result.message


# ------------------------------------------------------------------ the debugging exercise


def test_the_handed_out_ablation_is_told_still_the_original_and_nothing_more():
    for answer in (handed_out_ablate, lambda merged, num_heads, head: handed_out_ablate(merged, num_heads, head) * 1):
        result = check_ablate_head(answer, verbose=False)
        assert result.status == "original" and result.misconception is None
        assert "still the original" in result.message
        said = [text for m in exercises.ABLATE_MISCONCEPTIONS for text in (m.name, m.hint, m.fix, m.symptom)]
        assert not [text for text in said if text in result.message]
        assert "d_head" not in result.message and "head::num_heads" not in result.message


def test_a_changed_but_still_wrong_ablation_is_not_the_original():
    def half_zeroed(merged, num_heads, head):
        out = slice_ablate(merged, num_heads, head)
        d_head = merged.shape[-1] // num_heads
        out[..., head * d_head] = merged[..., head * d_head]
        return out

    result = check_ablate_head(half_zeroed, verbose=False)
    assert result.status == "incorrect" and "differs from the reference" in result.message


# ------------------------------------------------------------------ answers fitted to what the checker shows


def fitted(right, wrong, teaching_shapes):
    """An answer that is right on the shapes of the teaching cases (the ones the message names) and
    ``wrong`` on any other: the special-casing a checker with fixed cases cannot see."""

    def answer(first, *rest):
        use = right if tuple(first.shape) in teaching_shapes else wrong
        return use(first, *rest)

    return answer


FITTED = {
    "previous_token_score": (
        check_previous_token_score,
        fitted(loop_previous_token, main_diagonal, {(2, 3, 6, 6), (1, 4, 9, 9), (5, 2, 4, 4)}),
    ),
    "induction_score": (
        check_induction_score,
        fitted(loop_induction, earlier_token_itself, {(2, 3, 12, 12), (3, 2, 16, 16), (1, 4, 10, 10)}),
    ),
    "repeat_chunk": (check_repeat_chunk, fitted(loop_repeat, tokens_as_floats, {(2, 12), (3, 16), (1, 9)})),
    "ablate_head": (check_ablate_head, fitted(slice_ablate, handed_out_ablate, {(2, 5, 12), (1, 3, 16), (3, 4, 12)})),
}


@pytest.mark.parametrize("name", sorted(FITTED))
def test_an_answer_fitted_to_the_teaching_shapes_meets_a_case_drawn_for_it(name):
    checker, answer = FITTED[name]
    result = checker(answer, verbose=False)
    assert result.status == "incorrect", result.message
    assert "drawn at random for your code" in result.message and "`result.case` holds that case" in result.message
    assert answer(*result.case.args) is not None  # the case is there to try


def previous_token_in_float64(weights):
    return loop_previous_token(weights.double())


def induction_in_float64(weights, first_start, repeat_len):
    return loop_induction(weights, first_start, repeat_len, dtype=torch.float64)


def ablate_in_float64(merged, num_heads, head):
    return slice_ablate(merged.to(torch.float64), num_heads, head)


@pytest.mark.parametrize(
    ("checker", "answer"),
    [
        (check_previous_token_score, previous_token_in_float64),
        (check_induction_score, induction_in_float64),
        (check_ablate_head, ablate_in_float64),
    ],
    ids=lambda v: getattr(v, "__name__", None),
)
def test_an_answer_fitted_to_float64_is_refused_on_float32_inputs(checker, answer):
    result = checker(answer, verbose=False)
    assert result.status == "incorrect", result.message
    assert "returned dtype torch.float64 for torch.float32 inputs" in result.message


def induction_summed_in_float32(weights, first_start, repeat_len):
    return loop_induction(weights, first_start, repeat_len, dtype=torch.float32)


def ablate_through_float32(merged, num_heads, head):
    return slice_ablate(merged.float(), num_heads, head)


@pytest.mark.parametrize(
    ("checker", "answer"),
    [(check_induction_score, induction_summed_in_float32), (check_ablate_head, ablate_through_float32)],
    ids=lambda v: getattr(v, "__name__", None),
)
def test_a_right_answer_computed_in_float32_is_accepted(checker, answer):
    assert checker(answer, verbose=False).correct


# ------------------------------------------------------------------ the notebook's settings are not the answer's


RIGHT = {
    "previous_token_score": (check_previous_token_score, loop_previous_token),
    "induction_score": (check_induction_score, loop_induction),
    "repeat_chunk": (check_repeat_chunk, loop_repeat),
    "ablate_head": (check_ablate_head, slice_ablate),
}
test_a_right_answer_that_changes_a_global_setting_is_told_so_and_the_setting_is_back = state_change_tests(RIGHT)


def test_an_answer_that_resets_the_seed_to_0_is_told_so():
    def answer(merged, num_heads, head):
        torch.manual_seed(0)
        return slice_ablate(merged, num_heads, head)

    assert check_ablate_head(answer, verbose=False).misconception == STATE_CHANGED


# ------------------------------------------------------------------ a catalogue of learner slips


def induction_averaged_per_sequence(weights, first_start, repeat_len):
    scores = [
        loop_induction(weights[b : b + 1], first_start[b : b + 1], repeat_len[b : b + 1]) for b in range(len(weights))
    ]
    return torch.stack(scores).mean(0)


def induction_without_the_last_query(weights, first_start, repeat_len):
    total, count = torch.zeros(weights.shape[1], dtype=weights.dtype), 0
    for b in range(weights.shape[0]):
        s, n = int(first_start[b]), int(repeat_len[b])
        for t in range(s + n, s + 2 * n - 1):
            total += weights[b, :, t, t - n + 1]
            count += 1
    return total / count


def repeat_mask_through_the_copy(noise, first_start, repeat_len):
    tokens, mask = loop_repeat(noise, first_start, repeat_len)
    for b in range(noise.shape[0]):
        mask[b, int(first_start[b] + 2 * repeat_len[b] - 1)] = True
    return tokens, mask


def repeat_mask_from_zeros(noise, first_start, repeat_len):
    tokens, _ = loop_repeat(noise, first_start, repeat_len)
    mask = torch.zeros(noise.shape)  # floats: 0.0 and 1.0
    for b in range(noise.shape[0]):
        s, n = int(first_start[b]), int(repeat_len[b])
        mask[b, s + n : s + 2 * n - 1] = 1
    return tokens, mask


def ablate_keeping_only_the_head(merged, num_heads, head):
    d_head = merged.shape[-1] // num_heads
    out = torch.zeros_like(merged)
    out[..., head * d_head : (head + 1) * d_head] = merged[..., head * d_head : (head + 1) * d_head]
    return out


def ablate_one_feature_short(merged, num_heads, head):
    d_head = merged.shape[-1] // num_heads
    out = merged.clone()
    out[..., head * d_head : (head + 1) * d_head - 1] = 0
    return out


CATALOGUE = [
    Wrong(
        check_induction_score,
        "a mean per sequence, then over the batch",
        induction_averaged_per_sequence,
        "averaged per sequence first",
        ("Each query counts once",),
    ),
    Wrong(
        check_induction_score,
        "the last query of the copy left out",
        induction_without_the_last_query,
        "left out the last token of the copy",
    ),
    Wrong(
        check_repeat_chunk,
        "mask through the end of the copy",
        repeat_mask_through_the_copy,
        "mask marks the whole second copy",
        ("random noise",),
    ),
    Wrong(check_repeat_chunk, "tokens.float()", tokens_as_floats, "tokens returned as floats", ("whole numbers",)),
    Wrong(check_repeat_chunk, "tokens from torch.zeros", tokens_built_from_zeros, "tokens returned as floats"),
    Wrong(check_repeat_chunk, "mask from torch.zeros", repeat_mask_from_zeros, "mask of 0/1 numbers, not booleans"),
    Wrong(
        check_ablate_head, "zeros_like, then the head copied in", ablate_keeping_only_the_head, "kept only that head"
    ),
    Wrong(check_ablate_head, "fixed by counting heads from 1", one_based_ablate, "counted heads from 1"),
    Wrong(
        check_ablate_head, "fixed with num_heads as the width", ablate_num_heads_wide, "slices num_heads features wide"
    ),
    Wrong(check_ablate_head, "one feature short", ablate_one_feature_short),
]

test_no_checker_accepts_a_wrong_answer_and_names_it, test_the_catalogue_is_counted = catalogue_tests(
    CATALOGUE, "notebook 07"
)


# ------------------------------------------------------------------ the committed notebook


def exercise_outputs() -> dict[str, str]:
    """The printed output of each exercise cell of the lesson notebook, by the checker it calls."""
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    outputs = {}
    for cell in cells:
        source = "".join(cell["source"])
        called = [
            name
            for name in ("untrained_prediction", "induction_score", "repeat_chunk", "ablate_head")
            if f"check_{name}(" in source and cell["cell_type"] == "code" and "import" not in source
        ]
        for name in called:
            outputs[name] = "".join("".join(o.get("text", "")) for o in cell.get("outputs", []))
    return outputs
