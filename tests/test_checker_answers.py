"""Right answers to all the exercises, written as the solutions notebooks write them, and the wrong
answers every checker must refuse whatever the exercise: a one-tuple or a list around the right tensor,
a forgotten ``return``, an argument changed in place, a loop that never ends, a typo in the learner's
own code. Each is built from the right answer the way a learner would slip, and fed to every checker
where it applies; the test asserts the rejection *and* the words of the message.
"""

from __future__ import annotations

import inspect
import math

import pytest
import torch

import mhsa_helpers.teaching.checking as checking
from mhsa_helpers.lessons import LESSONS

# ------------------------------------------------------------------ the right answers


def uniform_prediction():
    return 1 / 3


def attention_weights(q, k):
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)


def context_vector(x, w_q, w_k, w_v, i):
    q, k, v = x[i] @ w_q, x @ w_k, x @ w_v
    weights = torch.softmax(k @ q / math.sqrt(q.shape[-1]), dim=-1)
    return weights @ v, weights


def attention_head(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
    return weights @ v, weights


def multi_head_output(x, w_qs, w_ks, w_vs, w_o):
    outputs = [attention_head(x, w_q, w_k, w_v)[0] for w_q, w_k, w_v in zip(w_qs, w_ks, w_vs, strict=True)]
    return torch.cat(outputs, dim=-1) @ w_o.T


def spread_prediction():
    return 2.0


def stable_softmax(x):
    shifted = x - x.amax(dim=-1, keepdim=True)
    exps = torch.exp(shifted)
    return exps / exps.sum(dim=-1, keepdim=True)


def attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def cross_attention(x, memory, w_q, w_k, w_v, memory_mask=None):
    return attention(x @ w_q, memory @ w_k, memory @ w_v, memory_mask)


def cache_prediction():
    return 6


def cached_causal_mask(seq_q, seq_k):
    return torch.ones(seq_q, seq_k, dtype=torch.bool).tril(diagonal=seq_k - seq_q)


def causal_attention(q, k, v):
    return attention(q, k, v, cached_causal_mask(q.shape[-2], k.shape[-2]))


def safe_masked_softmax(scores, mask):
    scores = scores.masked_fill(~mask, float("-inf"))
    row_max = scores.amax(dim=-1, keepdim=True)
    row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
    exps = torch.exp(scores - row_max)
    sums = exps.sum(dim=-1, keepdim=True)
    return exps / torch.where(sums == 0, torch.ones_like(sums), sums)


def split_heads(x, num_heads):
    *batch, seq, d_model = x.shape
    return x.reshape(*batch, seq, num_heads, d_model // num_heads).transpose(-3, -2)


def merge_heads(x):
    *batch, heads, seq, d_head = x.shape
    return x.transpose(-3, -2).reshape(*batch, seq, heads * d_head)


def multi_head_attention(x, q_weight, k_weight, v_weight, o_weight, num_heads):
    q = split_heads(x @ q_weight.T, num_heads)
    k = split_heads(x @ k_weight.T, num_heads)
    v = split_heads(x @ v_weight.T, num_heads)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return merge_heads(torch.softmax(scores, dim=-1) @ v) @ o_weight.T


def heads_one_by_one(x, q_weight, k_weight, v_weight, o_weight, num_heads):
    d_head = q_weight.shape[0] // num_heads
    outputs = []
    for h in range(num_heads):
        rows = slice(h * d_head, (h + 1) * d_head)
        outputs.append(attention(x @ q_weight[rows].T, x @ k_weight[rows].T, x @ v_weight[rows].T))
    return torch.cat(outputs, dim=-1) @ o_weight.T


def load_from_torch(mine, theirs):
    with torch.no_grad():
        for layer, weight in zip((mine.w_q, mine.w_k, mine.w_v), theirs.in_proj_weight.chunk(3), strict=True):
            layer.weight.copy_(weight)
        mine.w_o.weight.copy_(theirs.out_proj.weight)
        if theirs.in_proj_bias is not None:
            for layer, bias in zip((mine.w_q, mine.w_k, mine.w_v), theirs.in_proj_bias.chunk(3), strict=True):
                layer.bias.copy_(bias)
            mine.w_o.bias.copy_(theirs.out_proj.bias)
    return mine


def rope_frequencies(d_head, base):
    two_i = torch.arange(0, d_head, 2, dtype=torch.float64)
    return (base ** (-two_i / d_head)).float()


def apply_rope(x, positions, base=10000.0):
    theta = rope_frequencies(x.shape[-1], base).double()
    angles = positions.double()[:, None] * theta[None, :]
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    first, second = x[..., 0::2], x[..., 1::2]
    return torch.stack((first * cos - second * sin, first * sin + second * cos), dim=-1).flatten(-2)


def apply_rope_complex(x, positions, base=10000.0):
    pairs = torch.view_as_complex(x.contiguous().unflatten(-1, (-1, 2)))
    angles = positions.double()[:, None] * rope_frequencies(x.shape[-1], base).double()[None, :]
    return torch.view_as_real(pairs * torch.polar(torch.ones_like(angles), angles).to(pairs.dtype)).flatten(-2)


class MyRotaryEmbedding(torch.nn.Module):  # written as notebook 05's exercise 5 asks: the table computed once
    def __init__(self, d_head, max_seq_len, base=10000.0):
        super().__init__()
        self.max_seq_len = max_seq_len
        angles = torch.arange(max_seq_len, dtype=torch.float64)[:, None] * rope_frequencies(d_head, base).double()
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, x, positions):
        if int(positions.max()) >= self.max_seq_len:
            raise ValueError(f"position {int(positions.max())} is past the table: max_seq_len={self.max_seq_len}")
        cos, sin = self.cos[positions].to(x.dtype), self.sin[positions].to(x.dtype)
        first, second = x[..., 0::2], x[..., 1::2]
        return torch.stack((first * cos - second * sin, first * sin + second * cos), dim=-1).flatten(-2)


def rope_attention(q, k, v, positions, base):
    q, k = apply_rope(q, positions, base), apply_rope(k, positions, base)
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ v


def decoding_mask(num_new, total):
    return torch.ones(num_new, total, dtype=torch.bool).tril(diagonal=total - num_new)


def attend_with_cache(q_new, k_new, v_new, cached_k, cached_v, rope):
    past, new = cached_k.shape[-2], q_new.shape[-2]
    positions = torch.arange(past, past + new)
    q, k = rope(q_new, positions), rope(k_new, positions)
    keys, values = torch.cat((cached_k, k), dim=-2), torch.cat((cached_v, v_new), dim=-2)
    scores = q @ keys.transpose(-2, -1) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~decoding_mask(new, past + new), float("-inf"))
    return torch.softmax(scores, dim=-1) @ values


class MyMultiHeadAttention(torch.nn.Module):
    def __init__(self, d_model, num_heads, *, d_in=None, bias=True):
        super().__init__()
        d_in = d_model if d_in is None else d_in
        self.w_q, self.w_k, self.w_v = (torch.nn.Linear(d_in, d_model, bias=bias) for _ in range(3))
        self.w_o = torch.nn.Linear(d_model, d_model, bias=bias)
        self.num_heads = num_heads

    def forward(self, x):
        q, k, v = (split_heads(w(x), self.num_heads) for w in (self.w_q, self.w_k, self.w_v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        return self.w_o(merge_heads(torch.softmax(scores, dim=-1) @ v))


class MyCausalSelfAttention(MyMultiHeadAttention):  # notebook 04's module, with a keyword more
    def __init__(self, d_model, num_heads, *, d_in=None, bias=True, rope_base=10000.0):
        super().__init__(d_model, num_heads, d_in=d_in, bias=bias)
        self.d_head, self.rope_base = d_model // num_heads, rope_base

    def forward(self, x, cache=None, need_weights=False):
        seq = x.shape[-2]
        past = 0 if cache is None else cache.length
        q, k, v = (split_heads(w(x), self.num_heads) for w in (self.w_q, self.w_k, self.w_v))
        positions = past + torch.arange(seq)
        q, k = apply_rope(q, positions, self.rope_base), apply_rope(k, positions, self.rope_base)
        if cache is not None:
            k, v = cache.append(k, v)
        scores = (q @ k.transpose(-2, -1) / math.sqrt(self.d_head)).masked_fill(
            ~decoding_mask(seq, past + seq), float("-inf")
        )
        weights = torch.softmax(scores, dim=-1)
        out = self.w_o(merge_heads(weights @ v))
        return (out, weights) if need_weights else out


def parameter_prediction():
    return 3 * (32 * 64 + 64) + (64 * 64 + 64)


def score_prediction():
    return 1.25


def mask_prediction():
    return 5 + 6 + 7


def padding_mask(lengths, seq_len):
    return (torch.arange(seq_len)[None, :] < lengths[:, None]).view(len(lengths), 1, 1, seq_len)


def padded_causal_attention(q, k, v, lengths):
    seq = q.shape[-2]
    return attention(q, k, v, cached_causal_mask(seq, seq) & padding_mask(lengths, seq))


def attention_dropout(weights, p, training):
    if not training:
        return weights
    return weights * (torch.rand_like(weights) >= p) / (1 - p)


class MyKVCache:  # written as notebook 06's exercise 5 asks: the held keys grow along the sequence axis
    def __init__(self):
        self.held, self.length = None, 0

    def append(self, k, v):
        if self.held is not None:
            k, v = torch.cat((self.held[0], k), dim=-2), torch.cat((self.held[1], v), dim=-2)
        self.held, self.length = (k, v), k.shape[-2]
        return k, v


class MyStaticCache:  # written as notebook 06's exercise 6 asks: buffers made at the first append, written in place
    def __init__(self, max_len):
        self.max_len, self.length, self.k, self.v = max_len, 0, None, None

    def append(self, k, v):
        end = self.length + k.shape[-2]
        if end > self.max_len:
            raise ValueError(f"the cache is full: {self.length} held, {k.shape[-2]} new, max_len={self.max_len}")
        if self.k is None:
            self.k = k.new_zeros(*k.shape[:-2], self.max_len, k.shape[-1])
            self.v = v.new_zeros(*v.shape[:-2], self.max_len, v.shape[-1])
        self.k[:, :, self.length : end], self.v[:, :, self.length : end] = k, v
        self.length = end
        return self.k[:, :, :end], self.v[:, :, :end]


class MyBlock(torch.nn.Module):  # written as notebook 06's exercise 7 asks: pre-norm, around the module above
    def __init__(self, d_model, num_heads, *, d_ff=None, rope_base=10000.0):
        super().__init__()
        d_ff = 4 * d_model if d_ff is None else d_ff
        self.ln_1 = torch.nn.LayerNorm(d_model)
        self.attn = MyCausalSelfAttention(d_model, num_heads, rope_base=rope_base)
        self.ln_2 = torch.nn.LayerNorm(d_model)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(d_model, d_ff), torch.nn.GELU(), torch.nn.Linear(d_ff, d_model))

    def forward(self, x, cache=None):
        x = x + self.attn(self.ln_1(x), cache=cache)
        return x + self.mlp(self.ln_2(x))


def previous_token_score(weights):
    return weights.diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=(0, 2))


def induction_score(weights, first_start, repeat_len):
    total, count = torch.zeros(weights.shape[1], dtype=weights.dtype), 0
    for b in range(weights.shape[0]):
        s, n = int(first_start[b]), int(repeat_len[b])
        for t in range(s + n, s + 2 * n):
            total += weights[b, :, t, t - n + 1]
            count += 1
    return total / count


def repeat_chunk(noise, first_start, repeat_len):
    tokens = noise.clone()
    mask = torch.zeros(noise.shape, dtype=torch.bool)
    for b in range(noise.shape[0]):
        s, n = int(first_start[b]), int(repeat_len[b])
        tokens[b, s + n : s + 2 * n] = noise[b, s : s + n]
        mask[b, s + n : s + 2 * n - 1] = True
    return tokens, mask


def ablate_head(merged, num_heads, head):
    d_head = merged.shape[-1] // num_heads
    out = merged.clone()
    out[..., head * d_head : (head + 1) * d_head] = 0
    return out


def online_update(running_max, normaliser, output, scores, values):
    new_max = torch.maximum(running_max, scores.amax(dim=-1, keepdim=True))
    rescale = torch.exp(running_max - new_max)
    weights = torch.exp(scores - new_max)
    return new_max, normaliser * rescale + weights.sum(dim=-1, keepdim=True), output * rescale + weights @ values


def online_attention(scores, values, tile_size):
    running_max = torch.full((scores.shape[0], 1), -math.inf, dtype=scores.dtype)
    normaliser = torch.zeros(scores.shape[0], 1, dtype=scores.dtype)
    output = torch.zeros(scores.shape[0], values.shape[1], dtype=scores.dtype)
    for start in range(0, scores.shape[1], tile_size):
        tile = slice(start, start + tile_size)
        running_max, normaliser, output = online_update(running_max, normaliser, output, scores[:, tile], values[tile])
    return output / normaliser


def expand_kv(x, groups):
    return x.repeat_interleave(groups, dim=1)


def kv_cache_bytes(num_layers, num_heads, num_kv_heads, head_dim, tokens, batch, bytes_per_element):
    return 2 * num_layers * num_kv_heads * head_dim * tokens * batch * bytes_per_element


def window_mask(seq_len, window):
    behind = torch.arange(seq_len)[:, None] - torch.arange(seq_len)[None, :]
    return (behind >= 0) & (behind < window)


def alibi_bias(num_heads, seq_len):
    slopes = torch.tensor([2.0 ** (-8 * (h + 1) / num_heads) for h in range(num_heads)])
    distance = (torch.arange(seq_len)[:, None] - torch.arange(seq_len)[None, :]).float()
    return -slopes[:, None, None] * distance


def ntk_frequencies(d_head, base, factor):
    new_base = base * factor ** (d_head / (d_head - 2))
    return new_base ** -(torch.arange(0, d_head, 2, dtype=torch.float64) / d_head)


def masked_weights(scores, allowed):
    return torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)


def decode_mask(past_len, new_len):
    return torch.ones(new_len, past_len + new_len, dtype=torch.bool).tril(diagonal=past_len)


def head_induction_score(weights, repeat_len):
    queries = torch.arange(1 + repeat_len, 1 + 2 * repeat_len)  # the second copy, after the first token
    return weights[:, :, queries, queries - repeat_len + 1].mean(dim=(0, 2))


def sink_heads(weights, threshold):
    return weights[..., 1:, 0].mean(dim=-1) > threshold


def copy_loss(logits, tokens, repeat_len):
    predictions = logits[:, repeat_len + 1 : 2 * repeat_len]
    targets = tokens[:, repeat_len + 2 : 2 * repeat_len + 1]
    return torch.nn.functional.cross_entropy(predictions.transpose(1, 2), targets)


def untrained_prediction():
    return sum(1 / (t + 1) for t in range(1, 32)) / 31


def ablation_prediction():
    return torch.tensor([True, True, False, False])


def sink_prediction():
    return (1 + 3) / (1 + 3 + 6)


def sink_softmax(scores, sink):
    column = sink.unsqueeze(-1).expand(*scores.shape[:-1], 1)
    return torch.softmax(torch.cat([scores, column], dim=-1), dim=-1)[..., :-1]


class MySinkGateAttention(MyCausalSelfAttention):  # notebook 12's exercise 3: the module above, a sink and a gate more
    def __init__(self, d_model, num_heads, **kwargs):
        super().__init__(d_model, num_heads, **kwargs)
        self.sink = torch.nn.Parameter(torch.zeros(num_heads))
        self.w_g = torch.nn.Linear(self.w_q.in_features, num_heads)

    def forward(self, x, cache=None, need_weights=False):
        seq = x.shape[-2]
        past = 0 if cache is None else cache.length
        q, k, v = (split_heads(w(x), self.num_heads) for w in (self.w_q, self.w_k, self.w_v))
        positions = past + torch.arange(seq)
        q, k = apply_rope(q, positions, self.rope_base), apply_rope(k, positions, self.rope_base)
        if cache is not None:
            k, v = cache.append(k, v)
        scores = (q @ k.transpose(-2, -1) / math.sqrt(self.d_head)).masked_fill(
            ~decoding_mask(seq, past + seq), float("-inf")
        )
        weights = sink_softmax(scores, self.sink.view(-1, 1))
        gate = torch.sigmoid(self.w_g(x)).transpose(1, 2).unsqueeze(-1)
        out = self.w_o(merge_heads((weights @ v) * gate))
        return (out, weights) if need_weights else out


def latent_prediction():
    return 96 + 32  # notebook 13: the latent and the rotated key, shared by the heads


def absorbed_scores(q, w_uk, c_kv):
    return (q @ w_uk) @ c_kv.unsqueeze(1).transpose(-2, -1)


class MyLatentAttention(MyCausalSelfAttention):  # notebook 13's exercise 3: w_q and w_o kept, keys from a latent
    def __init__(self, d_model, num_heads, d_latent, d_rope, **kwargs):
        super().__init__(d_model, num_heads, **kwargs)
        del self.w_k, self.w_v
        d_in = self.w_q.in_features
        self.d_rope = d_rope
        self.w_dkv = torch.nn.Linear(d_in, d_latent, bias=False)
        self.w_uk = torch.nn.Linear(d_latent, d_model, bias=False)
        self.w_uv = torch.nn.Linear(d_latent, d_model, bias=False)
        self.w_qr = torch.nn.Linear(d_in, num_heads * d_rope, bias=False)
        self.w_kr = torch.nn.Linear(d_in, d_rope, bias=False)

    def forward(self, x, cache=None, need_weights=False, absorbed=False):
        seq = x.shape[-2]
        past = 0 if cache is None else cache.length
        positions = past + torch.arange(seq)
        q = split_heads(self.w_q(x), self.num_heads)
        q_r = apply_rope(split_heads(self.w_qr(x), self.num_heads), positions, self.rope_base)
        c_kv, k_r = self.w_dkv(x), apply_rope(self.w_kr(x), positions, self.rope_base)
        if cache is not None:
            c_kv, k_r = cache.append(c_kv, k_r)
        k_r = k_r.unsqueeze(1)  # one rotated key for every head
        if absorbed:
            w_uk = self.w_uk.weight.view(self.num_heads, self.d_head, -1)
            w_uv = self.w_uv.weight.view(self.num_heads, self.d_head, -1)
            content = (q @ w_uk) @ c_kv.unsqueeze(1).transpose(-2, -1)
        else:
            k, v = split_heads(self.w_uk(c_kv), self.num_heads), split_heads(self.w_uv(c_kv), self.num_heads)
            content = q @ k.transpose(-2, -1)
        scores = ((content + q_r @ k_r.transpose(-2, -1)) / math.sqrt(self.d_head + self.d_rope)).masked_fill(
            ~decoding_mask(seq, past + seq), float("-inf")
        )
        weights = torch.softmax(scores, dim=-1)
        heads = (weights @ c_kv.unsqueeze(1)) @ w_uv.transpose(-2, -1) if absorbed else weights @ v
        out = self.w_o(merge_heads(heads))
        return (out, weights) if need_weights else out


def recipe_order():
    return ["B", "G", "D", "F", "A", "H", "C", "E"]


def decoding_order():
    return ["D", "F", "H", "B", "A", "E", "G", "C"]


def online_order():
    return ["C", "F", "D", "A", "E", "B"]


RIGHT = {
    "check_uniform_prediction": uniform_prediction,
    "check_weights_debug": attention_weights,
    "check_context_vector": context_vector,
    "check_attention_head": attention_head,
    "check_multi_head_output": multi_head_output,
    "check_spread_prediction": spread_prediction,
    "check_softmax": stable_softmax,
    "check_my_attention": attention,
    "check_cross_attention": cross_attention,
    "check_cache_prediction": cache_prediction,
    "check_masked_softmax": safe_masked_softmax,
    "check_cached_causal_mask": cached_causal_mask,
    "check_causal_attention": causal_attention,
    "check_padding_mask": padding_mask,
    "check_padded_causal_attention": padded_causal_attention,
    "check_attention_dropout": attention_dropout,
    "check_split_heads": split_heads,
    "check_recipe_order": recipe_order,
    "check_multi_head_attention": multi_head_attention,
    "check_heads_one_by_one": heads_one_by_one,
    "check_load_from_torch": load_from_torch,
    "check_my_multi_head_attention": MyMultiHeadAttention,
    "check_parameter_prediction": parameter_prediction,
    "check_apply_rope": apply_rope,
    "check_apply_rope_complex": apply_rope_complex,
    "check_rotary_embedding": MyRotaryEmbedding,
    "check_rope_attention": rope_attention,
    "check_score_prediction": score_prediction,
    "check_mask_prediction": mask_prediction,
    "check_decoding_order": decoding_order,
    "check_attend_with_cache": attend_with_cache,
    "check_my_causal_self_attention": MyCausalSelfAttention,
    "check_kv_cache": MyKVCache,
    "check_static_cache": MyStaticCache,
    "check_my_block": MyBlock,
    "check_untrained_prediction": untrained_prediction,
    "check_induction_score": induction_score,
    "check_repeat_chunk": repeat_chunk,
    "check_ablate_head": ablate_head,
    "check_online_order": online_order,
    "check_online_update": online_update,
    "check_online_attention": online_attention,
    "check_expand_kv": expand_kv,
    "check_kv_cache_bytes": kv_cache_bytes,
    "check_window_mask": window_mask,
    "check_alibi_bias": alibi_bias,
    "check_ntk_frequencies": ntk_frequencies,
    "check_masked_weights": masked_weights,
    "check_decode_mask": decode_mask,
    "check_head_induction_score": head_induction_score,
    "check_sink_heads": sink_heads,
    "check_copy_loss": copy_loss,
    "check_ablation_prediction": ablation_prediction,
    "check_sink_prediction": sink_prediction,
    "check_sink_softmax": sink_softmax,
    "check_my_sink_gate_attention": MySinkGateAttention,
    "check_latent_prediction": latent_prediction,
    "check_absorbed_scores": absorbed_scores,
    "check_my_latent_attention": MyLatentAttention,
}
CHECKERS = {checker.__name__: checker for lesson in LESSONS for checker in lesson.checkers}
NAMES = sorted(CHECKERS)
#: The checkers whose answer is a module class (tested for its own slips in tests/lessons/*/test_*_module.py).
MODULES = ("check_my_multi_head_attention", "check_my_causal_self_attention")
#: The checkers whose answer is a class the checker builds from numbers (notebook 06's caches, with no arguments or with
#: max_len; notebook 05's rotary embedding, a module built with d_head, max_seq_len and base): it has no `return` to
#: forget and is given no tensor at its call.
CLASSES = (
    "check_kv_cache",
    "check_static_cache",
    "check_rotary_embedding",
    "check_my_block",
    "check_my_sink_gate_attention",
    "check_my_latent_attention",
)
#: The checkers of a prediction: the learner's function takes nothing and returns a number.
NUMBER_PREDICTIONS = (
    "check_uniform_prediction",
    "check_spread_prediction",
    "check_cache_prediction",
    "check_untrained_prediction",
    "check_parameter_prediction",
    "check_score_prediction",
    "check_mask_prediction",
    "check_sink_prediction",
    "check_latent_prediction",
)
#: The checkers of an ordering exercise: the learner's function takes nothing and returns a list of labels.
ORDERS = tuple(e.checker.__name__ for lesson in LESSONS for e in lesson.exercises if e.kind == "order")
#: The checkers whose answer is one tensor (not several outputs, not a number).
ONE_TENSOR = [
    n
    for n in NAMES
    if n
    not in (
        "check_repeat_chunk",
        "check_online_update",
        "check_kv_cache_bytes",
        "check_context_vector",
        "check_attention_head",
        "check_load_from_torch",  # returns the module it loaded, `mine`
        *MODULES,
        *CLASSES,
    )
    and n not in NUMBER_PREDICTIONS + ORDERS
]
#: The checkers that pass the learner at least one tensor (or a module holding tensors).
TAKES_TENSORS = [
    n
    for n in NAMES
    if n
    not in (
        "check_cached_causal_mask",
        *NUMBER_PREDICTIONS,
        "check_decode_mask",
        "check_kv_cache_bytes",
        "check_window_mask",
        "check_alibi_bias",
        "check_ntk_frequencies",
        "check_ablation_prediction",  # a prediction: the learner's function takes nothing
        "check_load_from_torch",  # its first argument, `mine`, is the module it is asked to write into
        *ORDERS,
        *MODULES,
        *CLASSES,
    )
]


def test_every_checker_has_a_right_answer_here():
    assert set(RIGHT) == set(CHECKERS) and len(CHECKERS) == 59 and len(ORDERS) == 3


#: Checked in tests/lessons/11_real_model/test_real_model_lesson.py instead, where the real model is loaded already
#: (here it would load it again, 7 s).
REAL_MODEL = ("check_ablation_prediction",)


@pytest.mark.parametrize("name", [n for n in NAMES if n not in REAL_MODEL])
def test_the_right_answer_is_accepted_without_a_note(name):
    result = CHECKERS[name](RIGHT[name], verbose=False)
    assert result.correct, result.message
    assert result.shortcuts == () and "Note" not in result.message and "rounding" not in result.message
    told = result.message.split("] ", 1)[1]
    # A function checker counts its cases (given and drawn), a module checker its calls; a prediction says the value
    # and why it is so (notebooks 07 and 11's also what was measured).
    assert told.startswith(("correct on ", "correct: ")), result.message


# ------------------------------------------------------------------ slips around a right answer


def like(right):
    """Give a learner's ``answer(*args)`` the parameters of ``right``, as if it were written out in full."""

    def decorate(answer):
        answer.__signature__ = inspect.signature(right)
        return answer

    return decorate


@pytest.mark.parametrize("name", ONE_TENSOR)
def test_a_one_tuple_is_not_the_tensor(name):
    right = RIGHT[name]

    @like(right)
    def answer(*args):
        result = right(*args)
        return (result,)  # as `return x @ w,` does

    message = CHECKERS[name](answer, verbose=False).message
    assert "not yet" in message and "returned a tuple of 1 tensor; return the tensor itself" in message


@pytest.mark.parametrize("name", ONE_TENSOR)
def test_a_list_around_the_tensor_is_not_the_tensor(name):
    right = RIGHT[name]

    @like(right)
    def answer(*args):
        return [right(*args)]

    result = CHECKERS[name](answer, verbose=False)
    assert result.status != "correct"
    assert "returned a list of 1 tensor; return the tensor itself" in result.message


@pytest.mark.parametrize("name", [n for n in NAMES if n not in CLASSES])
def test_a_forgotten_return_is_asked_about(name):
    right = RIGHT[name]

    @like(right)
    def answer(*args):
        result = right(*args)  # computed, never returned
        del result

    result = CHECKERS[name](answer, verbose=False)
    assert result.status == "incorrect"
    assert "returned None — did you forget `return`?" in result.message


@pytest.mark.parametrize("name", TAKES_TENSORS)
def test_changing_an_argument_in_place_is_named_with_the_argument(name):
    right = RIGHT[name]
    first = next(iter(inspect.signature(right).parameters))

    @like(right)
    def answer(*args):
        result = right(*args)
        target = args[0]
        if isinstance(target, torch.Tensor):
            target.logical_not_() if target.dtype == torch.bool else target.add_(1)
        return result

    result = CHECKERS[name](answer, verbose=False)
    assert result.status == "misconception" and result.misconception == checking.IN_PLACE, result.message
    assert f"changed its argument `{first}` in place" in result.message
    assert "work on a copy" in result.message.lower()


@pytest.mark.parametrize("name", [n for n in NAMES if n not in MODULES])
def test_a_loop_that_never_ends_is_stopped_at_its_line(name, monkeypatch):
    monkeypatch.setattr(checking, "TIME_LIMIT_SECONDS", 0.2)
    right = RIGHT[name]

    @like(right)
    def answer(*args):
        result, step = None, 0
        while step < 3:  # `step += 1` forgotten
            result = right(*args)
        return result

    result = CHECKERS[name](answer, verbose=False)
    assert result.status == "error"
    assert "did not return within 0.2 s" in result.message
    assert "(in answer, line" in result.message
    # the loop is named, whether the alarm found the function on its `while` line or inside the loop
    assert "`while step < 3:  # `step += 1` forgotten`" in result.message


@pytest.mark.parametrize("name", [n for n in NAMES if n not in MODULES])
def test_an_error_is_reported_at_the_learners_own_line_through_any_wrapper(name):
    right = RIGHT[name]

    @like(right)
    def answer(*args):
        result = right(*args)
        return result.tranpose(0, 1)  # a typo

    result = CHECKERS[name](answer, verbose=False)
    assert result.status == "error"
    assert "your function raised AttributeError" in result.message
    assert "(in answer, line" in result.message and "`return result.tranpose(0, 1)  # a typo`" in result.message
    assert "wrapped" not in result.message


# ------------------------------------------------------------------ shortcuts are noted, never failed


def _with_package(**names):
    import mhsa_helpers as mh

    return {name: getattr(mh, attribute) for name, attribute in names.items()}


def test_calling_torch_softmax_in_the_softmax_exercise_is_noted_not_failed():
    result = CHECKERS["check_softmax"](lambda x: torch.softmax(x, dim=-1), verbose=False)
    assert result.correct
    assert result.shortcuts == ("torch.softmax",)
    assert "Note: your function calls `torch.softmax`" in result.message
    tensor_method = CHECKERS["check_softmax"](lambda x: x.softmax(-1), verbose=False)
    assert tensor_method.correct and tensor_method.shortcuts == ("Tensor.softmax",)


def test_calling_the_package_where_the_exercise_asks_to_write_it_is_noted():
    mh = _with_package(split="split_heads", mhsa="multi_head_self_attention", weights="AttentionWeights")
    split = CHECKERS["check_split_heads"](lambda x, h: mh["split"](x, h), verbose=False)
    assert split.correct and split.shortcuts == ("mhsa_helpers.heads.split_heads",)
    whole = CHECKERS["check_multi_head_attention"](
        lambda x, wq, wk, wv, wo, h: mh["mhsa"](x, mh["weights"](wq, wk, wv, wo), num_heads=h), verbose=False
    )
    assert whole.correct and "multi_head_self_attention" in whole.message
    sdpa = CHECKERS["check_my_attention"](
        lambda q, k, v, mask=None: torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    )
    assert sdpa.correct and sdpa.shortcuts == ("torch.nn.functional.scaled_dot_product_attention",)


def test_using_the_package_for_a_step_the_exercise_does_not_ask_for_is_not_noted():
    import mhsa_helpers as mh

    def mha(x, q_weight, k_weight, v_weight, o_weight, num_heads):
        q, k, v = (mh.split_heads(x @ w.T, num_heads) for w in (q_weight, k_weight, v_weight))
        return mh.merge_heads(mh.scaled_dot_product_attention(q, k, v)) @ o_weight.T

    result = CHECKERS["check_multi_head_attention"](mha, verbose=False)
    assert result.correct and result.shortcuts == ()
