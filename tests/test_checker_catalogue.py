"""A catalogue of wrong answers that fool a checker, or make it blame the wrong thing, unless the shared
machinery guards against them: an argument changed in place, a container around the answer, a wrong
second output, a shared object the learner changes, a fixed-size buffer, whole numbers compared loosely,
a loop that never ends, and mistakes whose numbers two named misconceptions share.

Each entry is written the way a learner writes it. The checker must refuse it, name the misconception
given (if any), and say the key words given; ``test_the_catalogue_is_counted`` prints the counts
(named / rejected generically / accepted) for the issue note.
"""

from __future__ import annotations

import math

import pytest
import torch
from checker_table import selectable
from test_wrong_answers import Wrong, verdict_counts

import mhsa_helpers as mh
from mhsa_helpers.lessons.attention_at_scale import check_expand_kv, check_online_attention, check_online_update
from mhsa_helpers.lessons.causal_masking import check_cached_causal_mask, check_masked_softmax
from mhsa_helpers.lessons.causal_mhsa_with_rope import check_attend_with_cache
from mhsa_helpers.lessons.induction_heads import check_ablate_head, check_repeat_chunk
from mhsa_helpers.lessons.long_context import check_alibi_bias, check_window_mask
from mhsa_helpers.lessons.mistakes_that_circulate import check_decode_mask, check_masked_weights
from mhsa_helpers.lessons.multi_head_latent_attention.exercises import check_absorbed_scores
from mhsa_helpers.lessons.qkv_by_hand import check_attention_head, check_weights_debug
from mhsa_helpers.lessons.rotary_position_embeddings import check_apply_rope, check_rope_attention
from mhsa_helpers.lessons.scaled_dot_product_attention import check_my_attention, check_softmax

INF = float("inf")
IN_PLACE = "changed an argument in place"  # the name the checkers give, spelled out (not imported) on purpose
FINITE_FILL = "blocked scores pushed down by a finite number instead of -inf"
MAX_CLAMPED = "the row's max clamped at 0 (or a constant), not taken over the visible scores"
BLOCKED_IN_MAX = "blocked scores reach exp before the mask removes them"


def _rotate(x, positions, base):
    theta = base ** -(torch.arange(0, x.shape[-1], 2, dtype=torch.float64) / x.shape[-1])
    angles = positions.double()[:, None] * theta
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    first, second = x[..., 0::2], x[..., 1::2]
    return torch.stack((first * cos - second * sin, first * sin + second * cos), dim=-1).flatten(-2)


def _attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, -INF)
    return torch.softmax(scores, dim=-1) @ v


# ----------------------------------------------------------- in place: the caller's tensors change


def softmax_exp_in_place(x):
    x -= x.amax(dim=-1, keepdim=True)
    x.exp_()
    return x / x.sum(dim=-1, keepdim=True)


def attention_q_divided_in_place(q, k, v, mask=None):
    q /= math.sqrt(q.shape[-1])
    scores = q @ k.transpose(-2, -1)
    if mask is not None:
        scores = scores.masked_fill(~mask, -INF)
    return torch.softmax(scores, dim=-1) @ v


def head_key_weight_transposed_in_place(x, w_q, w_k, w_v):
    w_k.t_()
    q, k, v = x @ w_q, x @ w_k.T, x @ w_v
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
    return weights @ v, weights


def masked_softmax_filled_in_place(scores, mask):
    scores.masked_fill_(~mask, -INF)
    row_max = scores.amax(dim=-1, keepdim=True)
    row_max = torch.where(torch.isinf(row_max), torch.zeros_like(row_max), row_max)
    e = torch.exp(scores - row_max)
    total = e.sum(dim=-1, keepdim=True)
    return e / torch.where(total == 0, torch.ones_like(total), total)


def masked_weights_filled_in_place(scores, allowed):
    scores.masked_fill_(~allowed, -INF)
    return torch.softmax(scores, dim=-1)


def apply_rope_written_into_x(x, positions, base):
    x[...] = _rotate(x, positions, base)
    return x


def rope_attention_rotates_q_and_k_in_place(q, k, v, positions, base):
    q.copy_(_rotate(q, positions, base))
    k.copy_(_rotate(k, positions, base))
    return _attention(q, k, v)


def repeat_chunk_writes_into_noise(noise, first_start, repeat_len):
    tokens = noise  # not a copy
    mask = torch.zeros(noise.shape, dtype=torch.bool)
    for b in range(noise.shape[0]):
        s, n = int(first_start[b]), int(repeat_len[b])
        tokens[b, s + n : s + 2 * n] = noise[b, s : s + n]
        mask[b, s + n : s + 2 * n - 1] = True
    return tokens, mask


def ablate_head_zeroes_merged(merged, num_heads, head):
    d_head = merged.shape[-1] // num_heads
    merged[..., head * d_head : (head + 1) * d_head] = 0
    return merged


def online_update_aliased_max(running_max, normaliser, output, scores, values):
    new_max = running_max  # the same tensor, not a copy
    new_max[...] = torch.maximum(running_max, scores.amax(dim=-1, keepdim=True))
    rescale = torch.exp(running_max - new_max)  # always 1 now
    weights = torch.exp(scores - new_max)
    return new_max, normaliser * rescale + weights.sum(dim=-1, keepdim=True), output * rescale + weights @ values


def online_attention_shifts_scores_in_place(scores, values, tile_size):
    scores -= scores.amax(dim=-1, keepdim=True)
    return torch.softmax(scores, dim=-1) @ values


def expand_kv_unsqueezes_in_place(x, groups):
    x.unsqueeze_(2)
    b, h, _, s, d = x.shape
    return x.expand(b, h, groups, s, d).reshape(b, h * groups, s, d)


def attend_with_cache_flips_the_rope(q_new, k_new, v_new, cached_k, cached_v, rope):
    # Turns the shared RotaryEmbedding the other way: before, the reference then repeated the mistake.
    rope.sin_cached.neg_()
    past, new = cached_k.shape[-2], q_new.shape[-2]
    positions = torch.arange(past, past + new)
    q, k = rope(q_new, positions), rope(k_new, positions)
    keys, values = torch.cat((cached_k, k), dim=-2), torch.cat((cached_v, v_new), dim=-2)
    return _attention(q, keys, values, mh.causal_mask(new, past + new))


def absorbed_scores_unsqueezes_c_kv_in_place(q, w_uk, c_kv):
    c_kv.unsqueeze_(1)  # an axis for the heads, added to the caller's tensor
    return (q @ w_uk) @ c_kv.transpose(-2, -1)


IN_PLACE_ANSWERS = [
    Wrong(check_softmax, "x.exp_() on the argument", softmax_exp_in_place, IN_PLACE, ("`x`",)),
    Wrong(check_my_attention, "q /= sqrt(d)", attention_q_divided_in_place, IN_PLACE, ("`q`", "`q /= …`")),
    Wrong(check_attention_head, "w_k.t_()", head_key_weight_transposed_in_place, IN_PLACE, ("`w_k`", "`w_k.t()`")),
    Wrong(check_masked_softmax, "scores.masked_fill_", masked_softmax_filled_in_place, IN_PLACE, ("`scores`",)),
    Wrong(check_masked_weights, "scores.masked_fill_", masked_weights_filled_in_place, IN_PLACE, ("`scores`",)),
    Wrong(check_apply_rope, "rotated x in place", apply_rope_written_into_x, IN_PLACE, ("`x`",)),
    Wrong(check_rope_attention, "q and k rotated in place", rope_attention_rotates_q_and_k_in_place, IN_PLACE),
    Wrong(check_repeat_chunk, "wrote into noise", repeat_chunk_writes_into_noise, IN_PLACE, ("`noise`",)),
    Wrong(check_ablate_head, "merged[...] = 0", ablate_head_zeroes_merged, IN_PLACE, ("`merged`",)),
    Wrong(check_online_update, "aliased running max", online_update_aliased_max, IN_PLACE, ("`running_max`",)),
    Wrong(check_online_attention, "scores -= max", online_attention_shifts_scores_in_place, IN_PLACE),
    Wrong(
        check_expand_kv,
        "x.unsqueeze_(2)",
        expand_kv_unsqueezes_in_place,
        IN_PLACE,
        ("`x`", "its shape went from (2, 2, 5, 3) to (2, 2, 1, 5, 3)"),
    ),
    Wrong(
        check_attend_with_cache,
        "flipped the shared RotaryEmbedding",
        attend_with_cache_flips_the_rope,
        IN_PLACE,
        ("`rope`", "`rope.sin_cached`"),
    ),
    Wrong(
        check_absorbed_scores,
        "c_kv.unsqueeze_(1)",
        absorbed_scores_unsqueezes_c_kv_in_place,
        IN_PLACE,
        ("`c_kv`", "its shape went from (2, 7, 8) to (2, 1, 7, 8)"),
    ),
]


# ----------------------------------------------------------- containers and outputs


def online_update_normaliser_summed_over_everything(running_max, normaliser, output, scores, values):
    new_max = torch.maximum(running_max, scores.amax(dim=-1, keepdim=True))
    rescale, weights = torch.exp(running_max - new_max), torch.exp(scores - new_max)
    return new_max, normaliser * rescale + weights.sum(), output * rescale + weights @ values


def online_update_also_returns_the_weights(running_max, normaliser, output, scores, values):
    new_max = torch.maximum(running_max, scores.amax(dim=-1, keepdim=True))
    rescale, weights = torch.exp(running_max - new_max), torch.exp(scores - new_max)
    return new_max, normaliser * rescale + weights.sum(-1, keepdim=True), output * rescale + weights @ values, weights


def online_update_forgets_the_output(running_max, normaliser, output, scores, values):
    new_max = torch.maximum(running_max, scores.amax(dim=-1, keepdim=True))
    rescale, weights = torch.exp(running_max - new_max), torch.exp(scores - new_max)
    return new_max, normaliser * rescale + weights.sum(-1, keepdim=True)


def repeat_chunk_tokens_only(noise, first_start, repeat_len):
    tokens = noise.clone()
    for b in range(noise.shape[0]):
        s, n = int(first_start[b]), int(repeat_len[b])
        tokens[b, s + n : s + 2 * n] = noise[b, s : s + n]
    return tokens


def repeat_chunk_mask_shifted(noise, first_start, repeat_len):
    tokens = noise.clone()
    mask = torch.zeros(noise.shape, dtype=torch.bool)
    for b in range(noise.shape[0]):
        s, n = int(first_start[b]), int(repeat_len[b])
        tokens[b, s + n : s + 2 * n] = noise[b, s : s + n]
        mask[b, s + n + 1 : s + 2 * n] = True
    return tokens, mask


OUTPUT_ANSWERS = [
    Wrong(
        check_weights_debug,
        "return weights, (a one-tuple)",
        lambda q, k: (torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1),),
        None,
        ("tuple of 1 tensor",),
    ),
    Wrong(check_cached_causal_mask, "return [mask]", lambda q, k: [mh.causal_mask(q, k)], None, ("list",)),
    Wrong(
        check_online_update,
        "normaliser summed over every entry",
        online_update_normaliser_summed_over_everything,
        None,
        ("output 2 (new_normaliser)", "the other 2 outputs match"),
    ),
    Wrong(
        check_online_update,
        "an extra output",
        online_update_also_returns_the_weights,
        None,
        ("returned 4 outputs", "output 4 extra"),
    ),
    Wrong(
        check_online_update,
        "the output forgotten",
        online_update_forgets_the_output,
        None,
        ("returned 2 outputs", "output 3 (new_output) missing"),
    ),
    Wrong(
        check_repeat_chunk,
        "tokens only",
        repeat_chunk_tokens_only,
        None,
        ("expected 2 outputs (tokens, induction_mask)",),
    ),
    Wrong(check_repeat_chunk, "mask one late", repeat_chunk_mask_shifted, None, ("output 2 (induction_mask)",)),
]


# ----------------------------------------------------------- fixed-size buffers

MASK_8 = torch.tril(torch.ones(8, 8, dtype=torch.bool))
MASK_16 = torch.tril(torch.ones(16, 16, dtype=torch.bool))
DISTANCE_16 = (torch.arange(16)[:, None] - torch.arange(16)[None, :]).float()
ANGLES_16 = torch.arange(16, dtype=torch.float64)[:, None]


def apply_rope_with_a_table_of_16(x, positions, base):
    theta = base ** -(torch.arange(0, x.shape[-1], 2, dtype=torch.float64) / x.shape[-1])
    cos, sin = (ANGLES_16 * theta).cos()[positions].to(x.dtype), (ANGLES_16 * theta).sin()[positions].to(x.dtype)
    first, second = x[..., 0::2], x[..., 1::2]
    return torch.stack((first * cos - second * sin, first * sin + second * cos), dim=-1).flatten(-2)


def attend_with_cache_mask_of_16(q_new, k_new, v_new, cached_k, cached_v, rope):
    past, new = cached_k.shape[-2], q_new.shape[-2]
    positions = torch.arange(past, past + new)
    keys = torch.cat((cached_k, rope(k_new, positions)), dim=-2)
    values = torch.cat((cached_v, v_new), dim=-2)
    return _attention(rope(q_new, positions), keys, values, MASK_16[past : past + new, : past + new])


BUFFER_ANSWERS = [
    Wrong(check_cached_causal_mask, "tril(ones(8, 8))[k - q : k, :k]", lambda q, k: MASK_8[k - q : k, :k]),
    Wrong(check_cached_causal_mask, "tril(ones(16, 16))[k - q : k, :k]", lambda q, k: MASK_16[k - q : k, :k]),
    Wrong(check_decode_mask, "a (16, 16) buffer", lambda past, new: MASK_16[past : past + new, : past + new]),
    Wrong(check_window_mask, "a (16, 16) buffer", lambda n, w: MASK_16[:n, :n] & ~MASK_16[:n, :n].tril(-w)),
    Wrong(
        check_alibi_bias,
        "a (16, 16) distance buffer",
        lambda h, n: -torch.tensor([2.0 ** (-8 * (i + 1) / h) for i in range(h)])[:, None, None] * DISTANCE_16[:n, :n],
    ),
    Wrong(check_apply_rope, "an angle table of 16 positions", apply_rope_with_a_table_of_16),
    Wrong(check_attend_with_cache, "a (16, 16) mask buffer", attend_with_cache_mask_of_16),
]


# ----------------------------------------------------------- named by what the answer does


def masked_softmax_fill_minus_1e4(scores, mask):
    return torch.softmax(scores.masked_fill(~mask, -1e4), dim=-1)


def masked_weights_fill_minus_1e4(scores, allowed):
    return torch.softmax(scores.masked_fill(~allowed, -1e4), dim=-1)


def masked_attention_fill_minus_1e4(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e4)
    return torch.softmax(scores, dim=-1) @ v


def masked_softmax_max_clamped_at_zero(scores, mask):
    scores = scores.masked_fill(~mask, -INF)
    row_max = scores.amax(dim=-1, keepdim=True).clamp_min(0)  # meant to guard the -inf of a fully masked row
    e = torch.exp(scores - row_max)
    total = e.sum(dim=-1, keepdim=True)
    return e / torch.where(total == 0, torch.ones_like(total), total)


def masked_softmax_max_before_the_mask(scores, mask):
    e = torch.exp(scores - scores.amax(dim=-1, keepdim=True)) * mask
    total = e.sum(dim=-1, keepdim=True)
    return e / torch.where(total == 0, torch.ones_like(total), total)


def masked_softmax_half_precision_unguarded(scores, mask):
    # float16 "to save memory", and the fully masked row left unguarded
    return torch.softmax(scores.half().masked_fill(~mask, -INF), dim=-1)


def absorbed_scores_keys_by_einsum(q, w_uk, c_kv):
    keys = torch.einsum("bkl,hdl->bhkd", c_kv, w_uk)  # right numbers, but every head's keys built
    return torch.einsum("bhqd,bhkd->bhqk", q, keys)


def absorbed_scores_w_uk_transposed(q, w_uk, c_kv):
    # runs only where d_head == d_latent: the checker names it from its square inputs, after the crash
    return torch.einsum("bhqd,hld,bkl->bhqk", q, w_uk, c_kv)


SYMPTOM_ANSWERS = [
    Wrong(check_masked_softmax, "filled with -1e4", masked_softmax_fill_minus_1e4, FINITE_FILL, ("-1e4",)),
    Wrong(check_masked_weights, "filled with -1e4", masked_weights_fill_minus_1e4, FINITE_FILL),
    Wrong(check_my_attention, "filled with -1e4", masked_attention_fill_minus_1e4, FINITE_FILL),
    Wrong(check_masked_softmax, "max clamped at 0", masked_softmax_max_clamped_at_zero, MAX_CLAMPED, ("clamp_min(0)",)),
    Wrong(
        check_masked_softmax,
        "max taken before the mask",
        masked_softmax_max_before_the_mask,
        BLOCKED_IN_MAX,
        ("*before* the max",),
    ),
    Wrong(
        check_masked_softmax,
        "float16, fully masked row unguarded",
        masked_softmax_half_precision_unguarded,
        "a fully masked row gives NaN",
        ("NaN",),
    ),
    Wrong(
        check_absorbed_scores,
        "keys built with an einsum",
        absorbed_scores_keys_by_einsum,
        "every head's keys built from the latents",
        ("(q_h W_UK_h) . c_kv",),
    ),
    Wrong(
        check_absorbed_scores,
        "W_UK read transposed in an einsum",
        absorbed_scores_w_uk_transposed,
        "W_UK transposed on the query's side",
        ("on square inputs",),
    ),
]

CATALOGUE = IN_PLACE_ANSWERS + OUTPUT_ANSWERS + BUFFER_ANSWERS + SYMPTOM_ANSWERS


@pytest.mark.parametrize("wrong", CATALOGUE, ids=lambda w: selectable(f"{w.checker.__name__}: {w.name}"))
def test_no_checker_accepts_a_wrong_answer_and_the_message_says_why(wrong):
    result = wrong.checker(wrong.function, verbose=False)
    assert result.status not in ("correct", "not_attempted"), f"accepted although wrong: {wrong.name}"
    if wrong.named is not None:
        assert result.misconception == wrong.named, result.message
    shown = result.diagnosis or result.message  # what the same answer is told by its second attempt
    for words in wrong.says:
        assert words in shown, shown
    assert "largest difference 0)" not in result.message and "largest difference 0," not in result.message


def test_the_catalogue_is_counted(capsys):
    counts = verdict_counts(CATALOGUE)
    with capsys.disabled():
        print(f"\ncatalogue of {len(CATALOGUE)} wrong answers that fooled or misled the checkers: {counts}")
    assert counts["accepted"] == 0


# ----------------------------------------------------------- messages that blame only what the code did


def test_a_typo_is_reported_at_the_learners_line_through_the_checkers_wrapper():
    def my_alibi_bias(num_heads, seq_len):
        slopes = torch.tensor([2.0 ** (-8 * (h + 1) / num_heads) for h in range(num_heads)])
        distance = torch.arange(seq_len)[:, None] - torch.arange(seq_len)[None, :]
        return -slopes[:, None, None] * distance.flaot()

    result = check_alibi_bias(my_alibi_bias, verbose=False)
    assert result.status == "error"
    assert "(in my_alibi_bias, line" in result.message and "`return -slopes[:, None, None] * distance.flaot()`" in (
        result.message
    )
    assert "wrapped" not in result.message


def test_a_misspelled_forward_is_named_with_the_close_name():
    class Attention(torch.nn.Module):
        def foward(self, q, k, v, mask=None):
            scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
            if mask is not None:
                scores = scores.masked_fill(~mask, -INF)
            return torch.softmax(scores, dim=-1) @ v

    result = check_my_attention(Attention(), verbose=False)
    assert result.status == "error" and "not attempted" not in result.message
    assert "your module Attention has no `forward` method; did you spell it `foward`?" in result.message

    class Spelled(Attention):
        def forward(self, q, k, v, mask=None):
            return self.foward(q, k, v, mask)

    assert check_my_attention(Spelled(), verbose=False).correct
    the_class = check_my_attention(Spelled, verbose=False)
    assert the_class.status == "error" and "you passed the class Spelled itself" in the_class.message


# ----------------------------------------------------------- whole numbers


def test_a_numpy_whole_number_of_bytes_is_accepted():
    import numpy as np

    from mhsa_helpers.lessons.attention_at_scale import check_kv_cache_bytes

    def my_kv_cache_bytes(num_layers, num_heads, num_kv_heads, head_dim, tokens, batch, bytes_per_element):
        return np.prod([2, num_layers, num_kv_heads, head_dim, tokens, batch, bytes_per_element])  # numpy.int64

    assert check_kv_cache_bytes(my_kv_cache_bytes, verbose=False).correct


def test_one_token_too_many_is_refused_however_long_the_context():
    from mhsa_helpers.lessons.attention_at_scale import check_kv_cache_bytes

    def counts_one_more_token(num_layers, num_heads, num_kv_heads, head_dim, tokens, batch, bytes_per_element):
        return 2 * num_layers * num_kv_heads * head_dim * (tokens + 1) * batch * bytes_per_element

    result = check_kv_cache_bytes(counts_one_more_token, verbose=False)
    assert result.status == "incorrect"
    one_token = 2 * 32 * 8 * 128 * 1 * 2  # keys and values, 32 layers, 8 KV heads of 128, bfloat16
    assert "131072 tokens" in result.message and f"(off by {one_token})" in result.message
