"""Modules written as a learner would write them (plain tensor code, no ``mhsa_helpers``), shared by the tests
of notebooks 04, 06, 07 and 11: notebook 04's multi-head module and notebook 06's causal module, each right or
with slips switched on."""

from __future__ import annotations

import math

import torch
from torch import nn


def split(x, num_heads, *, view_only=False, strided=False):
    batch, seq, d_model = x.shape
    if view_only:
        return x.reshape(batch, num_heads, seq, d_model // num_heads)
    if strided:
        return x.view(batch, seq, d_model // num_heads, num_heads).permute(0, 3, 1, 2)
    return x.view(batch, seq, num_heads, d_model // num_heads).transpose(1, 2)


def merge(x, *, reshape_only=False):
    batch, heads, seq, d_head = x.shape
    if reshape_only:
        return x.reshape(batch, seq, heads * d_head)
    return x.transpose(1, 2).reshape(batch, seq, heads * d_head)


def multi_head_module(**slip):
    """A MyMultiHeadAttention(d_model, num_heads, *, d_in=None, bias=True) with the slips named in ``slip``."""

    class MyMultiHeadAttention(nn.Module):
        def __init__(self, d_model, num_heads, *, d_in=None, bias=True):
            super().__init__()
            d_in = d_model if d_in is None or slip.get("d_in_ignored") else d_in
            bias = False if slip.get("no_bias") else bias  # no layer with a bias, whatever bias says
            bias = True if slip.get("bias_ignored") else bias
            self.w_q, self.w_k, self.w_v = (nn.Linear(d_in, d_model, bias=bias) for _ in range(3))
            self.w_o = nn.Linear(d_model, d_model, bias=bias)
            self.num_heads = num_heads
            self.dropout = nn.Dropout(0.2 if slip.get("dropout") else 0.0)

        def forward(self, x):
            view_only = slip.get("view_only", False)
            q, k, v = (
                split(w(x), self.num_heads, view_only=view_only, strided=slip.get("strided", False))
                for w in (self.w_q, self.w_k, self.w_v)
            )
            if slip.get("detach_v"):
                v = v.detach()
            d = {"d_in": x.shape[-1], "d_head": q.shape[-1], "d_head no sqrt": q.shape[-1] ** 2}
            scores = q @ k.transpose(-2, -1) if not slip.get("kq") else k @ q.transpose(-2, -1)
            scores = scores / math.sqrt(d[slip.get("scale", "d_head")])
            if slip.get("causal"):
                seq = x.shape[1]
                scores = scores.masked_fill(torch.ones(seq, seq, dtype=torch.bool).triu(1), float("-inf"))
            weights = self.dropout(torch.softmax(scores, dim=slip.get("softmax_dim", -1)))
            merged = merge(weights @ v, reshape_only=slip.get("reshape_only", False) or view_only)
            if slip.get("batch_mixed"):  # the batch flattened with the positions before the scores' softmax
                merged = merged.reshape(1, -1, merged.shape[-1]).roll(1, 1).reshape(merged.shape)
            if slip.get("weights_changed"):
                with torch.no_grad():
                    self.w_o.weight.mul_(1.001)
            return merged if slip.get("no_w_o") else self.w_o(merged)

    return MyMultiHeadAttention


def rotate(x, positions, base=10000.0, *, half_split=False, sign=1, exponent="2i/d"):
    d = x.shape[-1]
    i = torch.arange(0, d, 2, dtype=torch.float64)
    theta = base ** -{"2i/d": i / d, "i/d": i / 2 / d, "2i//d": torch.div(i, d, rounding_mode="floor")}[exponent]
    angles = sign * positions.to(torch.float64)[:, None] * theta
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    if half_split:
        a, b = x[..., : d // 2], x[..., d // 2 :]
        return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)


def causal_module(**slip):
    """A MyCausalSelfAttention(d_model, num_heads, *, d_in=None, bias=True, rope_base=10000.0) with the slips
    named in ``slip``."""

    class MyCausalSelfAttention(nn.Module):
        def __init__(self, d_model, num_heads, *, d_in=None, bias=True, rope_base=10000.0):
            super().__init__()
            d_in = d_model if d_in is None else d_in
            bias = True if slip.get("bias_ignored") else bias
            self.w_q, self.w_k, self.w_v = (nn.Linear(d_in, d_model, bias=bias) for _ in range(3))
            self.w_o = nn.Linear(d_model, d_model, bias=bias)
            self.num_heads, self.d_head = num_heads, d_model // num_heads
            self.rope_base = rope_base
            self.calls = 0

        def forward(self, x, cache=None, need_weights=False):
            seq, base = x.shape[-2], 10000.0 if slip.get("base_ignored") else self.rope_base
            heads = 1 if slip.get("one_head") else self.num_heads
            q, k, v = (w(x) for w in (self.w_q, self.w_k, self.w_v))
            if slip.get("rope_before_split"):  # over the whole width, with d_model's frequencies
                where = (0 if cache is None else cache.length) + torch.arange(seq)
                q, k = rotate(q, where, base), rotate(k, where, base)
                v = rotate(v, where, base) if slip.get("rope_v") else v
            q, k, v = (
                split(t, heads, view_only=slip.get("view_only", False), strided=slip.get("strided", False))
                for t in (q, k, v)
            )
            if slip.get("append_first") and cache is not None:
                k, v = cache.append(k, v)  # before reading past: the new keys go in unrotated
            past = 0 if cache is None else cache.length
            if slip.get("append_first") and cache is not None:
                past -= seq
            if slip.get("counts_calls"):  # positions kept on self: the second call starts further on
                past += self.calls
                self.calls += seq
            start = {"zero": 0, "plus_one": past + 1, "after_append": past + seq}.get(slip.get("positions"), past)
            positions = start + torch.arange(seq)

            def turn(t, where=positions):
                return rotate(
                    t, where, base, half_split=slip.get("half_split", False), sign=slip.get("sign", 1),
                    exponent=slip.get("exponent", "2i/d"),
                )  # fmt: skip

            raw_k = k
            unrotated = slip.get("no_rope") or slip.get("rope_before_split")
            q = q if slip.get("keys_only") or unrotated else turn(q)
            k = k if slip.get("queries_only") or unrotated else turn(k)
            if slip.get("rope_v") and not unrotated:
                v = turn(v)
            if cache is not None and not slip.get("append_first"):
                if slip.get("cache_unrotated"):
                    held, v = cache.append(raw_k, v)
                    k = torch.cat((held[..., :-seq, :], k), dim=-2)
                elif slip.get("cache_rotated_twice"):
                    held, v = cache.append(k, v)
                    k = turn(torch.cat((held[..., :-seq, :], raw_k), dim=-2), torch.arange(held.shape[-2]))
                else:
                    k, v = cache.append(k, v)
            total = k.shape[-2]
            d = q.shape[-1]
            scale = {"d_head": math.sqrt(d), "d_model": math.sqrt(self.w_q.out_features),
                     "d_head no sqrt": d, "none": 1.0}[slip.get("scale", "d_head")]  # fmt: skip
            scores = (k @ q.transpose(-2, -1) if slip.get("kq") else q @ k.transpose(-2, -1)) / scale
            if slip.get("buffer_16"):
                allowed = torch.ones(16, 16, dtype=torch.bool).tril()[past : past + seq, :total]
            else:
                allowed = torch.ones(seq, total, dtype=torch.bool).tril(
                    diagonal=0 if slip.get("mask_top_left") else past
                )
            fast = slip.get("fast_path_without_mask") and cache is None and not need_weights
            if not slip.get("no_mask") and not fast:
                scores = scores.masked_fill(~allowed, slip.get("fill", float("-inf")))
            weights = torch.softmax(scores, dim=slip.get("softmax_dim", -1))
            merged = merge(weights @ v, reshape_only=slip.get("reshape_only", False))
            if slip.get("batch_mixed") and merged.shape[0] > 1:  # the batch flattened with the positions somewhere
                merged = merged.reshape(1, -1, merged.shape[-1]).roll(1, 1).reshape(merged.shape)
            if slip.get("batch_mixed_in_float64") and x.dtype == torch.float64 and merged.shape[0] > 1:
                merged = merged.roll(1, 0)
            out = merged if slip.get("no_w_o") else self.w_o(merged)
            if slip.get("always_weights"):
                return out, weights
            return (out, weights) if need_weights and not slip.get("weights_dropped") else out

    return MyCausalSelfAttention


def attention_ok(q, k, v, mask=None):
    """Scaled dot-product attention as a learner writes it, with an optional boolean mask (True = may attend)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v
