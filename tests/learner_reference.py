"""A learner's causal multi-head self-attention with RoPE and a KV cache, written to notebook 06's
contract as a learner would (plain tensor code, no ``mhsa_helpers``), for the payoff tests.

    MyCausalSelfAttention(d_model, num_heads, *, d_in=None, bias=True, rope_base=10000.0)
    forward(x (batch, seq, d_in), cache=None, need_weights=False) -> (batch, seq, d_model)
                                                    or (out, weights (batch, heads, seq, past + seq))
"""

import math

import torch
from torch import nn


class MyCausalSelfAttention(nn.Module):
    def __init__(self, d_model, num_heads, *, d_in=None, bias=True, rope_base=10000.0):
        super().__init__()
        d_in = d_model if d_in is None else d_in
        self.num_heads, self.d_head, self.rope_base = num_heads, d_model // num_heads, rope_base
        self.w_q = nn.Linear(d_in, d_model, bias=bias)
        self.w_k = nn.Linear(d_in, d_model, bias=bias)
        self.w_v = nn.Linear(d_in, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)

    def rope(self, x, positions):
        # Pairs (2i, 2i + 1) turn by positions * base^(-2i / d_head).
        i = torch.arange(0, self.d_head, 2, dtype=torch.float32, device=x.device)
        angles = positions.float()[:, None] * self.rope_base ** (-i / self.d_head)  # (seq, d_head / 2)
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        even, odd = x[..., 0::2], x[..., 1::2]
        return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)

    def split(self, x):  # (batch, seq, d_model) -> (batch, heads, seq, d_head)
        return x.view(x.shape[0], x.shape[1], self.num_heads, self.d_head).transpose(1, 2)

    def forward(self, x, cache=None, need_weights=False):
        batch, seq, _ = x.shape
        past = 0 if cache is None else cache.length
        positions = past + torch.arange(seq, device=x.device)
        q = self.rope(self.split(self.w_q(x)), positions)
        k = self.rope(self.split(self.w_k(x)), positions)
        v = self.split(self.w_v(x))
        if cache is not None:
            k, v = cache.append(k, v)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)  # (batch, heads, seq, past + seq)
        future = torch.ones(seq, past + seq, dtype=torch.bool, device=x.device).triu(past + 1)
        weights = scores.masked_fill(future, float("-inf")).softmax(dim=-1)
        out = self.w_o((weights @ v).transpose(1, 2).reshape(batch, seq, -1))
        return (out, weights) if need_weights else out
