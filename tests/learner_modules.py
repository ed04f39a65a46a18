"""Modules written as a learner would, shared by the tests of notebooks 04 and 06: a right
multi-head module, and a module computing ``attention_variant`` with any of its mistakes switched on."""

from __future__ import annotations

import math

import torch
from torch import nn

from mhsa_helpers.lessons.multi_head_attention.learner import attention_variant


def split(x, num_heads, *, view_only=False):
    batch, seq, d_model = x.shape
    if view_only:
        return x.reshape(batch, num_heads, seq, d_model // num_heads)
    return x.view(batch, seq, num_heads, d_model // num_heads).transpose(1, 2)


def merge(x, *, reshape_only=False):
    batch, heads, seq, d_head = x.shape
    if reshape_only:
        return x.reshape(batch, seq, heads * d_head)
    return x.transpose(1, 2).reshape(batch, seq, heads * d_head)


def multi_head_module(**slip):
    """A MyMultiHeadAttention(d_in, d_model, num_heads) with at most one slip."""

    class MyMultiHeadAttention(nn.Module):
        def __init__(self, d_in, d_model, num_heads):
            super().__init__()
            bias = not slip.get("no_bias", False)
            self.w_q, self.w_k, self.w_v = (nn.Linear(d_in, d_model, bias=bias) for _ in range(3))
            self.w_o = nn.Linear(d_model, d_model, bias=bias)
            self.num_heads = num_heads

        def forward(self, x):
            view_only = slip.get("view_only", False)
            q, k, v = (split(w(x), self.num_heads, view_only=view_only) for w in (self.w_q, self.w_k, self.w_v))
            if slip.get("detach_v"):
                v = v.detach()
            d = x.shape[-1] if slip.get("scale_d_in") else q.shape[-1]
            weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d), dim=slip.get("softmax_dim", -1))
            merged = merge(weights @ v, reshape_only=slip.get("reshape_only", False) or view_only)
            return merged if slip.get("no_w_o") else self.w_o(merged)

    return MyMultiHeadAttention


def variant_module(decoder, **switches):
    """A module that computes attention_variant with ``switches`` from its own layers, with any cache
    of the contract (``length`` and ``append``)."""

    class Variant(nn.Module):
        def __init__(self, *args, d_in=None, bias=True, rope_base=10000.0):
            super().__init__()
            d_in, d_model, num_heads = args if len(args) == 3 else (d_in or args[0], *args)
            self.w_q, self.w_k, self.w_v = (nn.Linear(d_in, d_model, bias=bias) for _ in range(3))
            self.w_o = nn.Linear(d_model, d_model, bias=bias)
            self.num_heads, self.rope_base = num_heads, rope_base

        def forward(self, x, cache=None, need_weights=False):
            params = {}
            for name in ("q", "k", "v", "o"):
                params[f"w_{name}"], params[f"b_{name}"] = (
                    getattr(self, f"w_{name}").weight,
                    getattr(self, f"w_{name}").bias,
                )
            past = None
            if cache is not None and cache.length:  # all keys and values so far, through the contract's append
                empty = torch.zeros(x.shape[0], self.num_heads, 0, self.w_q.out_features // self.num_heads)
                past = cache.append(empty, empty)
            options = {"causal": True, "rope_base": self.rope_base} if decoder else {}
            out, weights, k, v = attention_variant(params, x, self.num_heads, past_kv=past, **{**options, **switches})
            if cache is not None:
                start = cache.length
                cache.append(k[..., start:, :], v[..., start:, :])
            return (out, weights) if need_weights else out

    return Variant


def attention_ok(q, k, v, mask=None):
    """Scaled dot-product attention as a learner writes it, with an optional boolean mask (True = may attend)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v
