# Your own attention, written in the notebooks of "Attention, step by step" and saved there by
# save_mine(...); each later notebook loads it with load_mine(...). You may edit it here too.

import math
import torch
from torch import nn


def my_scaled_dot_product_attention(q, k, v, mask=None):
    """q (..., seq_q, d_k), k (..., seq_k, d_k), v (..., seq_k, d_v); mask True = may attend -> (..., seq_q, d_v)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def my_causal_mask(seq_q, seq_k):
    """Boolean (seq_q, seq_k): True where query i, at position seq_k - seq_q + i, may see key j."""
    return torch.ones(seq_q, seq_k, dtype=torch.bool).tril(diagonal=seq_k - seq_q)


def my_split_heads(x, num_heads):
    """(..., seq, d_model) -> (..., heads, seq, d_head)."""
    *batch, seq, d_model = x.shape
    return x.reshape(*batch, seq, num_heads, d_model // num_heads).transpose(-3, -2)


def my_merge_heads(x):
    """(..., heads, seq, d_head) -> (..., seq, heads * d_head)."""
    *batch, heads, seq, d_head = x.shape
    return x.transpose(-3, -2).reshape(*batch, seq, heads * d_head)


class MyMultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, *, d_in=None, bias=True):
        super().__init__()
        d_in = d_model if d_in is None else d_in
        self.w_q, self.w_k, self.w_v = (nn.Linear(d_in, d_model, bias=bias) for _ in range(3))
        self.w_o = nn.Linear(d_model, d_model, bias=bias)
        self.num_heads = num_heads

    def forward(self, x):
        """(batch, seq, d_in) -> (batch, seq, d_model)."""
        q = my_split_heads(self.w_q(x), self.num_heads)          # (batch, heads, seq, d_head)
        k = my_split_heads(self.w_k(x), self.num_heads)
        v = my_split_heads(self.w_v(x), self.num_heads)
        return self.w_o(my_merge_heads(my_scaled_dot_product_attention(q, k, v)))


def rope_angles(positions, d_head, base):
    """(seq, d_head / 2): positions[j] * theta_i with theta_i = base ** (-2i / d_head)."""
    theta = base ** (-torch.arange(0, d_head, 2, dtype=torch.float64) / d_head)
    return positions.double()[:, None] * theta[None, :]


def my_apply_rope(x, positions, base=10000.0):
    """(..., seq, d_head) -> (..., seq, d_head), interleaved pairs rotated by positions[j] * theta_i."""
    angles = rope_angles(positions, x.shape[-1], base)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    first, second = x[..., 0::2], x[..., 1::2]
    return torch.stack((first * cos - second * sin, first * sin + second * cos), dim=-1).flatten(-2)


class MyCausalSelfAttention(MyMultiHeadAttention):
    def __init__(self, d_model, num_heads, *, d_in=None, bias=True, rope_base=10000.0):
        super().__init__(d_model, num_heads, d_in=d_in, bias=bias)
        self.rope_base = rope_base

    def forward(self, x, cache=None, need_weights=False):
        """(batch, seq, d_in) -> (batch, seq, d_model), or (out, weights) with need_weights=True."""
        seq = x.shape[-2]
        past = 0 if cache is None else cache.length                  # read before appending
        q, k, v = (my_split_heads(w(x), self.num_heads) for w in (self.w_q, self.w_k, self.w_v))
        positions = past + torch.arange(seq, device=x.device)
        q, k = my_apply_rope(q, positions, self.rope_base), my_apply_rope(k, positions, self.rope_base)
        if cache is not None:
            k, v = cache.append(k, v)                                 # after RoPE: each key is rotated once
        mask = my_causal_mask(seq, past + seq).to(x.device)           # query i sits at past + i
        if not need_weights:
            return self.w_o(my_merge_heads(my_scaled_dot_product_attention(q, k, v, mask)))
        scores = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)                       # (batch, heads, seq, past + seq)
        return self.w_o(my_merge_heads(weights @ v)), weights


class MyKVCache:
    def __init__(self):
        self.keys = self.values = None
        self.length = 0

    def append(self, k, v):
        """k, v (batch, heads, new, d_head) -> all keys and values so far."""
        if self.keys is not None:
            k, v = torch.cat((self.keys, k), dim=-2), torch.cat((self.values, v), dim=-2)
        self.keys, self.values, self.length = k, v, k.shape[-2]
        return k, v
