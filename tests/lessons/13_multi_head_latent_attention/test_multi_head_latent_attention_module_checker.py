"""Notebook 13's exercise 3: the learner's own module with latent attention (``check_my_latent_attention``).

The right answer is written here as a learner writes it, in plain torch, extending ``tests/learner_reference.py``'s
``MyCausalSelfAttention``; the wrong ones are the same module with one slip each. A known mistake is told by its
symptom first and named on a repeat; a wrong notebook-06 module under a right extension is sent back to notebook 06;
a module of the wrong form is told what differs.
"""

from __future__ import annotations

import math

import pytest
import torch
from checker_table import selectable
from learner_modules import causal_module
from learner_reference import MyCausalSelfAttention
from torch import nn

import mhsa_helpers as mh
from mhsa_helpers.lessons.multi_head_latent_attention.exercises import (
    LATENT_MODULE_MISCONCEPTIONS,
    check_my_latent_attention,
)

INF = float("inf")


def rotate(x, positions, base):
    """Interleaved pairs (2i, 2i + 1) of x (..., seq, d) turned by positions * base^(-2i / d)."""
    d = x.shape[-1]
    angles = positions.double()[:, None] * base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)


def latent_module(parent=MyCausalSelfAttention, **slip):
    """A MyLatentAttention extending ``parent`` with the slips named in ``slip``, written with plain torch."""

    class MyLatentAttention(parent):
        def __init__(self, d_model, num_heads, d_latent, d_rope, **kwargs):
            super().__init__(d_model, num_heads, **kwargs)
            del self.w_k, self.w_v  # keys and values come from the latent
            d_in = self.w_q.in_features
            self.h, self.dh, self.d_rope = num_heads, d_model // num_heads, d_rope
            self.w_dkv = nn.Linear(d_in, d_latent, bias=False)
            self.w_uk = nn.Linear(d_latent, d_model, bias=False)
            self.w_uv = nn.Linear(d_latent, d_model, bias=False)
            self.w_qr = nn.Linear(d_in, num_heads * d_rope, bias=False)
            self.w_kr = nn.Linear(d_in, (num_heads if slip.get("kr_per_head") else 1) * d_rope, bias=False)

        def heads(self, t):  # (batch, seq, h * d) -> (batch, h, seq, d)
            return t.view(t.shape[0], t.shape[1], self.h, -1).transpose(1, 2)

        def forward(self, x, cache=None, need_weights=False, absorbed=False):
            batch, seq, _ = x.shape
            past = 0 if cache is None else cache.length
            positions = past + torch.arange(seq)
            base, content = self.rope_base, slip.get("content_rope")
            q = self.heads(self.w_q(x))
            q_r = rotate(self.heads(self.w_qr(x)), positions, base)
            c_kv = self.w_dkv(x)
            k_r = rotate(self.w_kr(x), positions, base)  # (batch, seq, d_rope), or a key per head
            if content == "latent":
                c_kv = rotate(c_kv, positions, base)
            if content == "q_and_k":
                q = rotate(q, positions, base)
            if cache is not None and not slip.get("cache_heads"):
                c_kv, k_r = cache.append(c_kv, k_r)
            if slip.get("kr_per_head"):
                k_r = self.heads(k_r)  # (batch, h, seq, d_rope)
            k_r = k_r if k_r.ndim == 4 else k_r.unsqueeze(1)  # one rotated key for every head
            d_head, d_latent = q.shape[-1], c_kv.shape[-1]
            scale = {"d_head": d_head}.get(slip.get("scale"), d_head + self.d_rope)
            if absorbed:
                if slip.get("absorbed_no_rope"):
                    q_r = q_r[..., :0]
                    k_r = k_r[..., :0]
                w_uk = self.w_uk.weight.view(self.h, d_head, d_latent)
                w_uv = self.w_uv.weight.view(self.h, d_head, d_latent)
                if slip.get("absorb_keys_t"):
                    w_uk = w_uk.transpose(-2, -1)
                if slip.get("absorb_view"):
                    w_uv = self.w_uv.weight.view(self.h, d_latent, d_head).transpose(-2, -1)
                latents = c_kv.unsqueeze(1)
                scores = (q @ w_uk) @ latents.transpose(-2, -1) + q_r @ k_r.transpose(-2, -1)
                if slip.get("scale") == "latent":
                    scale = d_latent + self.d_rope
            else:
                k, v = self.heads(self.w_uk(c_kv)), self.heads(self.w_uv(c_kv))
                if slip.get("v_from_w_uk"):
                    v = self.heads(self.w_uk(c_kv))
                if cache is not None and slip.get("cache_heads"):
                    k, v = cache.append(torch.cat([k, k_r.expand(-1, self.h, -1, -1)], dim=-1), v)
                    k, k_r = k[..., :d_head], k[..., d_head:]
                if content == "q_and_k":
                    k = rotate(k, torch.arange(k.shape[-2]), base)
                scores = q @ k.transpose(-2, -1) + q_r @ k_r.transpose(-2, -1)
            future = torch.ones(seq, past + seq, dtype=torch.bool).triu(past + 1)
            weights = (scores / math.sqrt(scale)).masked_fill(future, -INF).softmax(dim=-1)
            attended = (weights @ latents) @ w_uv.transpose(-2, -1) if absorbed else weights @ v
            out = self.w_o(attended.transpose(1, 2).reshape(batch, seq, -1))
            return (out, weights) if need_weights else out

    return MyLatentAttention


MyLatentAttention = latent_module()


def test_the_right_module_is_accepted_and_gives_the_packages_recipe():
    result = check_my_latent_attention(MyLatentAttention, verbose=False)
    assert result.message == "[my_latent_attention] correct on all 6 cases (3 given, 3 drawn at random for your code)."
    torch.manual_seed(0)
    theirs = mh.MultiHeadLatentAttention(12, 3, 10, rope=mh.RotaryEmbedding(4)).double()
    mine = MyLatentAttention(12, 3, 10, 4, bias=False).double()
    with torch.no_grad():
        for name, source in (("w_q", "q_up"), ("w_dkv", "kv_down"), ("w_uk", "k_up"), ("w_uv", "v_up"),
                             ("w_qr", "q_rope"), ("w_kr", "k_rope"), ("w_o", "out_proj")):  # fmt: skip
            getattr(mine, name).weight.copy_(getattr(theirs, source).weight)
        x = torch.randn(2, 7, 12, dtype=torch.float64)
        want = theirs(x)
        assert torch.allclose(mine(x), want) and torch.allclose(mine(x, absorbed=True), want)
        cache = mh.LatentCache()
        assert torch.allclose(torch.cat([mine(x[:, t : t + 1], cache=cache) for t in range(7)], dim=1), want)
        assert cache.latents.shape == (2, 7, 10) and cache.rope_keys.shape == (2, 7, 4)


@pytest.mark.parametrize(
    ("slip", "symptom", "name"),
    [
        ({"content_rope": "latent"}, "something besides the position part turns", "RoPE on the content part"),
        ({"content_rope": "q_and_k"}, "something besides the position part turns", "RoPE on the content part"),
        ({"kr_per_head": True}, "Your w_kr gives num_heads * d_rope features", "a rotated key per head"),
        ({"absorb_keys_t": True}, "On square inputs", "absorption with W_UK or W_UV transposed"),
        ({"absorb_view": True}, "with absorbed=True your outputs differ", "absorption with W_UK or W_UV transposed"),
        ({"cache_heads": True}, "your LatentCache holds per-head keys",
         "the cache holds per-head keys and values, not the latent"),
        ({"scale": "d_head"}, "every score of yours is the package's times one number",
         "the scale without the position part: 1/sqrt(d_head)"),
        ({"scale": "latent"}, "with absorbed=True your scores are the package's times one number",
         "the absorbed path scaled by the latent query's width"),
    ],
    ids=["latent rotated", "q and k rotated", "rope key per head", "absorbed transposed", "absorbed view",
         "cache per head", "scale d_head", "scale latent"],
)  # fmt: skip
def test_a_known_mistake_is_told_by_its_symptom_then_named(slip, symptom, name):
    wrong = latent_module(**slip)
    first = check_my_latent_attention(wrong, verbose=False)
    assert first.status == "misconception" and first.misconception == name, first.message
    assert symptom in first.message and name not in first.message, first.message
    again = check_my_latent_attention(wrong, verbose=False)
    assert f"this looks like '{name}'" in again.message, again.message


def test_an_absorbed_path_wrong_another_way_is_told_so_and_blames_that_path_alone():
    wrong = latent_module(absorbed_no_rope=True)  # the position part left out of the absorbed scores
    first = check_my_latent_attention(wrong, verbose=False)
    name = "the absorbed path computes other numbers than the materialised one"
    assert first.misconception == name and "Your materialised path is right" in first.message, first.message
    assert "transposed" not in check_my_latent_attention(wrong, verbose=False).message


def test_a_mistake_no_evidence_singles_out_is_not_named():
    result = check_my_latent_attention(latent_module(v_from_w_uk=True), verbose=False)
    assert result.status == "incorrect" and result.misconception is None, result.message
    assert "output 1 (the full pass)" in result.message and "looks like" not in result.message


def test_a_rotated_key_split_into_heads_before_the_cache_is_an_error_at_the_learners_line():
    class SplitFirst(MyLatentAttention):
        def forward(self, x, cache=None, need_weights=False, absorbed=False):
            if cache is not None:
                cache.append(self.w_dkv(x), self.heads(self.w_kr(x)))  # (batch, h, seq, ·): not one row per latent
            return super().forward(x, None, need_weights, absorbed)

    result = check_my_latent_attention(SplitFirst, verbose=False)
    assert result.status == "error" and result.misconception is None, result.message
    assert "your function raised ValueError" in result.message
    assert "cache.append(self.w_dkv(x), self.heads(self.w_kr(x)))" in result.message


@pytest.mark.parametrize(
    ("slip", "where"), [({"positions": "zero"}, "through a cache"), ({"no_mask": True}, "in a full pass")]
)
def test_a_wrong_notebook_06_module_sends_the_learner_back_and_does_not_blame_the_new_lines(slip, where):
    wrong = latent_module(parent=causal_module(**slip))
    for _ in range(2):
        result = check_my_latent_attention(wrong, verbose=False)
        assert result.status == "incorrect" and result.misconception is None, result.message
        assert f"already gives other numbers than the package's attention {where}" in result.message
        assert "your new lines are not to blame" in result.message
        assert "check_my_causal_self_attention(MyCausalSelfAttention)" in result.message


def test_a_notebook_06_module_that_still_raises_leaves_the_exercise_not_attempted_and_says_where():
    class Unwritten(nn.Module):
        def __init__(self, d_model, num_heads, *, d_in=None, bias=True, rope_base=10000.0):
            raise NotImplementedError

    result = check_my_latent_attention(latent_module(parent=Unwritten), verbose=False)
    assert result.status == "not_attempted", result.message
    assert "Unwritten.__init__ still raises NotImplementedError" in result.message and "notebook 06" in result.message


STUB = """
class MyLatentAttention(MyCausalSelfAttention):
    def __init__(self, d_model, num_heads, d_latent, d_rope, **kwargs):
        super().__init__(d_model, num_heads, **kwargs)
        raise NotImplementedError  # your code here

    def forward(self, x, cache=None, need_weights=False, absorbed=False):
        raise NotImplementedError  # your code here
"""


def test_the_stub_is_not_attempted():
    notebook = {"MyCausalSelfAttention": MyCausalSelfAttention}
    exec(compile(STUB, "<cell>", "exec"), notebook)
    result = check_my_latent_attention(notebook["MyLatentAttention"], verbose=False)
    assert result.status == "not_attempted" and result.message.startswith(
        "[my_latent_attention] not attempted yet: replace"
    )


class LatentWithBias(MyLatentAttention):
    def __init__(self, d_model, num_heads, d_latent, d_rope, **kwargs):
        super().__init__(d_model, num_heads, d_latent, d_rope, **kwargs)
        self.w_dkv = nn.Linear(self.w_q.in_features, d_latent)


class KeyFromDModel(MyLatentAttention):
    def __init__(self, d_model, num_heads, d_latent, d_rope, **kwargs):
        super().__init__(d_model, num_heads, d_latent, d_rope, **kwargs)
        self.w_kr = nn.Linear(d_model, d_rope, bias=False)


class NoUpProjection(MyLatentAttention):
    def __init__(self, d_model, num_heads, d_latent, d_rope, **kwargs):
        super().__init__(d_model, num_heads, d_latent, d_rope, **kwargs)
        del self.w_uv


class NoAbsorbed(MyLatentAttention):
    def forward(self, x, cache=None, need_weights=False):
        return super().forward(x, cache, need_weights)


class NeverCached(MyLatentAttention):
    def forward(self, x, cache=None, need_weights=False, absorbed=False):
        if cache is None:
            return super().forward(x, None, need_weights, absorbed)
        return super().forward(x, type("Counting", (), {"length": cache.length, "append": lambda s, a, b: (a, b)})())


@pytest.mark.parametrize(
    ("wrong", "told"),
    [
        (LatentWithBias, "your self.w_dkv has a bias; latent attention's projections have none"),
        (KeyFromDModel, "your self.w_kr maps 12 features to 2; here (d_in=10, d_model=12"),
        (NoUpProjection, "your module has no nn.Linear `w_uv`"),
        (NoAbsorbed, "it must take forward(self, x, cache=None, need_weights=False, absorbed=False)"),
        (NeverCached, "after decoding 5 tokens through one LatentCache, it holds 0"),
    ],
    ids=["bias", "w_kr from d_model", "no w_uv", "no absorbed", "never cached"],
)
def test_a_module_of_another_form_is_told_what_differs(wrong, told):
    result = check_my_latent_attention(wrong, verbose=False)
    assert result.status == "incorrect" and result.misconception is None and told in result.message, result.message


def test_a_module_made_from_the_class_is_told_so_and_a_number_is_refused():
    message = check_my_latent_attention(MyLatentAttention(8, 2, 6, 2), verbose=False).message
    assert "pass your class itself, MyLatentAttention, not a module made from it" in message
    with pytest.raises(TypeError, match=r"learner must be a function or a class \(your MyLatentAttention\), got int"):
        check_my_latent_attention(3)


@pytest.mark.parametrize("name", sorted({m.name for m in LATENT_MODULE_MISCONCEPTIONS}), ids=selectable)
def test_each_misconception_has_a_symptom_that_does_not_name_it_and_a_fix(name):
    mistake = next(m for m in LATENT_MODULE_MISCONCEPTIONS if m.name == name)
    assert mistake.symptom and mistake.fix and name not in mistake.symptom


def test_every_misconception_has_a_learner_slip_above():
    tested = {
        "RoPE on the content part", "a rotated key per head", "absorption with W_UK or W_UV transposed",
        "the cache holds per-head keys and values, not the latent",
        "the scale without the position part: 1/sqrt(d_head)", "the absorbed path scaled by the latent query's width",
        "the absorbed path computes other numbers than the materialised one",
    }  # fmt: skip
    assert {m.name for m in LATENT_MODULE_MISCONCEPTIONS} == tested
