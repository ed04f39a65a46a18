"""Notebook 06's exercise 7, the learner's own Transformer block (``check_my_block``): the right block is accepted and
gives what the block's two residual lines give written out with ``torch.nn.functional`` on the package block's
weights, in a full pass and token by token; each known mistake is told by its symptom, then named; a wrong attention
sends the learner to exercise 4 instead of blaming the block, and an attention not written yet leaves the block not
attempted, and says so."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from learner_modules import causal_module, rotate
from torch import nn

import mhsa_helpers as mh
from mhsa_helpers.lessons.causal_mhsa_with_rope import check_my_block, copy_package_weights

MyCausalSelfAttention = causal_module()


class Right(nn.Module):
    def __init__(self, d_model, num_heads, *, d_ff=None, rope_base=10000.0):
        super().__init__()
        d_ff = 4 * d_model if d_ff is None else d_ff
        self.ln_1 = nn.LayerNorm(d_model)
        self.attn = MyCausalSelfAttention(d_model, num_heads, rope_base=rope_base)
        self.ln_2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))

    def forward(self, x, cache=None):
        x = x + self.attn(self.ln_1(x), cache=cache)
        return x + self.mlp(self.ln_2(x))


class PostNorm(Right):
    def forward(self, x, cache=None):
        x = self.ln_1(x + self.attn(x, cache=cache))
        return self.ln_2(x + self.mlp(x))


class NoResidualAttention(Right):
    def forward(self, x, cache=None):
        x = self.attn(self.ln_1(x), cache=cache)
        return x + self.mlp(self.ln_2(x))


class NoResidualMLP(Right):
    def forward(self, x, cache=None):
        x = x + self.attn(self.ln_1(x), cache=cache)
        return self.mlp(self.ln_2(x))


class NoResidualEither(Right):
    def forward(self, x, cache=None):
        return self.mlp(self.ln_2(self.attn(self.ln_1(x), cache=cache)))


class NormedAdded(Right):
    def forward(self, x, cache=None):
        h = self.ln_1(x)
        x = h + self.attn(h, cache=cache)
        h = self.ln_2(x)
        return h + self.mlp(h)


class NormedAddedAroundAttention(Right):
    def forward(self, x, cache=None):
        h = self.ln_1(x)
        x = h + self.attn(h, cache=cache)
        return x + self.mlp(self.ln_2(x))


class SharedNorm(Right):
    def __init__(self, d_model, num_heads, *, d_ff=None, rope_base=10000.0):
        super().__init__(d_model, num_heads, d_ff=d_ff, rope_base=rope_base)
        self.ln_2 = self.ln_1


class FirstNormTwice(Right):
    def forward(self, x, cache=None):
        x = x + self.attn(self.ln_1(x), cache=cache)
        return x + self.mlp(self.ln_1(x))


class Parallel(Right):
    def forward(self, x, cache=None):
        return x + self.attn(self.ln_1(x), cache=cache) + self.mlp(self.ln_2(x))


class WithMLP(Right):
    layers = ()

    def __init__(self, d_model, num_heads, *, d_ff=None, rope_base=10000.0):
        super().__init__(d_model, num_heads, d_ff=d_ff, rope_base=rope_base)
        up, down = self.mlp[0], self.mlp[2]
        self.mlp = nn.Sequential(*(up if part == "up" else down if part == "down" else part() for part in self.layers))


class ReLU(WithMLP):
    layers = ("up", nn.ReLU, "down")


class TanhGELU(WithMLP):
    layers = ("up", lambda: nn.GELU(approximate="tanh"), "down")


class NoNonlinearity(WithMLP):
    layers = ("up", "down")


class GELULast(WithMLP):
    layers = ("up", "down", nn.GELU)


class DefaultTwice(Right):
    def __init__(self, d_model, num_heads, *, d_ff=None, rope_base=10000.0):
        super().__init__(d_model, num_heads, d_ff=2 * d_model if d_ff is None else d_ff, rope_base=rope_base)


class DFFIgnored(Right):
    def __init__(self, d_model, num_heads, *, d_ff=None, rope_base=10000.0):
        super().__init__(d_model, num_heads, rope_base=rope_base)


class RopeBaseNotPassed(Right):
    def __init__(self, d_model, num_heads, *, d_ff=None, rope_base=10000.0):
        super().__init__(d_model, num_heads, d_ff=d_ff)


class CacheNotPassed(Right):
    def forward(self, x, cache=None):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


def with_attention(attention):
    """``Right`` with ``attention`` for its attention."""

    class Block(Right):
        def __init__(self, d_model, num_heads, *, d_ff=None, rope_base=10000.0):
            super().__init__(d_model, num_heads, d_ff=d_ff, rope_base=rope_base)
            self.attn = attention(d_model, num_heads, rope_base=rope_base)

    return Block


# ------------------------------------------------------------------ the independent reference


def written_out(block, x):
    """The package ``block``'s two residual lines written out with torch.nn.functional on its weights (nanoGPT's
    Block, with the attention spelled out: RoPE on interleaved pairs, causal)."""
    d_model, heads = x.shape[-1], block.attn.num_heads
    d_head = d_model // heads

    def split(t):
        return t.view(*t.shape[:2], heads, d_head).transpose(1, 2)

    h = F.layer_norm(x, (d_model,), block.ln_1.weight, block.ln_1.bias)
    q, k, v = (split(t) for t in F.linear(h, block.attn.qkv_proj.weight, block.attn.qkv_proj.bias).chunk(3, dim=-1))
    positions = torch.arange(x.shape[1])
    q, k = rotate(q, positions, block.attn.rope.base), rotate(k, positions, block.attn.rope.base)
    scores = (q @ k.transpose(-2, -1) / math.sqrt(d_head)).masked_fill(
        torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).triu(1), -math.inf
    )
    attended = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(x.shape)
    x = x + F.linear(attended, block.attn.out_proj.weight, block.attn.out_proj.bias)
    h = F.layer_norm(x, (d_model,), block.ln_2.weight, block.ln_2.bias)
    return x + F.linear(
        F.gelu(F.linear(h, block.mlp[0].weight, block.mlp[0].bias)), block.mlp[2].weight, block.mlp[2].bias
    )


def test_the_right_block_is_accepted_and_gives_the_residual_lines_written_out_whole_and_token_by_token():
    assert check_my_block(Right, verbose=False).message == (
        "[my_block] correct on all 5 cases (2 given, 3 drawn at random for your code)."
    )
    torch.manual_seed(0)
    theirs = mh.TransformerBlock(12, 3, d_ff=20, rope_base=100.0).double()
    with torch.no_grad():
        for parameter in theirs.parameters():
            parameter.add_(0.3 * torch.randn_like(parameter))  # LayerNorms and biases away from their initial values
    mine = Right(12, 3, d_ff=20, rope_base=100.0).double()
    mine.ln_1.load_state_dict(theirs.ln_1.state_dict())
    mine.ln_2.load_state_dict(theirs.ln_2.state_dict())
    mine.mlp.load_state_dict(theirs.mlp.state_dict())
    copy_package_weights(mine.attn, theirs.attn)
    x = torch.randn(2, 7, 12, dtype=torch.float64)
    want = written_out(theirs, x)
    with torch.no_grad():
        torch.testing.assert_close(mine(x), want)
        cache = mh.KVCache()
        steps = torch.cat([mine(x[:, t : t + 1], cache=cache) for t in range(7)], dim=1)
    torch.testing.assert_close(steps, want)


# ------------------------------------------------------------------ known mistakes


@pytest.mark.parametrize(
    ("wrong", "symptom", "name"),
    [
        (PostNorm, "Your block returns what a LayerNorm gives", "post-norm: the LayerNorm after the addition"),
        (NoResidualAttention, "keeps nothing of the block's input but what goes", "no residual around the attention"),
        (NoResidualMLP, "Your output is the MLP's output alone: nothing", "no residual around the MLP"),
        (NoResidualEither, "reads nothing of the block's input", "no residual around either sub-layer"),
        (NormedAdded, "added to a normalised vector", "the normalised input added back"),
        (NormedAddedAroundAttention, "added to a normalised vector", "the normalised input added back"),
        (SharedNorm, "normalised with the same weight and bias", "one LayerNorm for both sub-layers"),
        (FirstNormTwice, "normalised with the same weight and bias", "one LayerNorm for both sub-layers"),
        (Parallel, "does not depend on what the attention added", "the MLP reads the block's input"),
        (ReLU, "exactly 0 wherever they would be negative", "ReLU instead of GELU"),
        (TanhGELU, "within about 1e-3 of the package's, no nearer", "GELU's tanh approximation"),
        (NoNonlinearity, "what one linear layer could give", "no nonlinearity in the MLP"),
        (GELULast, "not a linear map of the MLP's hidden features", "the nonlinearity after the second layer"),
        (DefaultTwice, "Built without d_ff, your block's MLP has another", "d_ff's default is not 4 × d_model"),
        (DFFIgnored, "Built with d_ff=20, your block's MLP does not have 20", "d_ff ignored"),
        (RopeBaseNotPassed, "right with rope_base left at its default", "rope_base not passed to the attention"),
        (CacheNotPassed, "Your full pass is right; token by token", "the cache not passed to the attention"),
    ],
    ids=["post-norm", "no residual attn", "no residual mlp", "no residual", "normed added", "normed added attn",
         "shared norm", "ln_1 twice", "parallel", "relu", "tanh", "linear", "gelu last", "d_ff default",
         "d_ff ignored", "rope_base", "cache"],
)  # fmt: skip
def test_a_known_mistake_is_told_by_its_symptom_then_named(wrong, symptom, name):
    first = check_my_block(wrong, verbose=False)
    assert not first.correct and symptom in first.message and name not in first.message, first.message
    again = check_my_block(wrong, verbose=False)
    assert again.misconception == name and f"this looks like '{name}'" in again.message, again.message


# ------------------------------------------------------------------ the attention is exercise 4's


@pytest.mark.parametrize(
    ("slip", "where"), [({"positions": "zero"}, "token by token"), ({"no_mask": True}, "in a full pass")]
)
def test_a_wrong_attention_sends_the_learner_to_exercise_4_and_does_not_blame_the_block(slip, where):
    for _ in range(2):
        result = check_my_block(with_attention(causal_module(**slip)), verbose=False)
        assert result.status == "incorrect" and result.misconception is None, result.message
        assert f"already gives other numbers than the package's attention {where}" in result.message
        assert "the block is not to blame" in result.message
        assert "check_my_causal_self_attention(MyCausalSelfAttention)" in result.message


def test_a_right_attention_built_at_the_blocks_base_is_never_blamed_nor_the_base_named_without_evidence():
    class NoBaseKept(nn.Module):  # right, but keeps its rope_base where the checker does not read it
        def __init__(self, d_model, num_heads, *, rope_base=10000.0):
            super().__init__()
            self.inner = MyCausalSelfAttention(d_model, num_heads, rope_base=rope_base)
            self.w_q, self.w_k, self.w_v, self.w_o = self.inner.w_q, self.inner.w_k, self.inner.w_v, self.inner.w_o

        def forward(self, x, cache=None, need_weights=False):
            return self.inner(x, cache=cache, need_weights=need_weights)

    assert check_my_block(with_attention(NoBaseKept), verbose=False).correct

    class RopeBaseLost(with_attention(NoBaseKept)):
        def __init__(self, d_model, num_heads, *, d_ff=None, rope_base=10000.0):
            super().__init__(d_model, num_heads, d_ff=d_ff)

    for _ in range(2):
        result = check_my_block(RopeBaseLost, verbose=False)
        # The numbers fit the block's mistake, but an attention that ignores its base gives them too: no name.
        assert result.status == "incorrect" and result.misconception is None, result.message
        assert "not to blame" not in result.message


def test_an_attention_not_written_yet_leaves_the_block_not_attempted_and_says_where():
    class MyCausalSelfAttention(nn.Module):
        def __init__(self, d_model, num_heads, *, d_in=None, bias=True, rope_base=10000.0):
            raise NotImplementedError  # your code here

    result = check_my_block(with_attention(MyCausalSelfAttention), verbose=False)
    assert result.status == "not_attempted"
    assert result.message.startswith("[my_block] not attempted yet: your block is written, but ")
    assert "MyCausalSelfAttention.__init__ still raises NotImplementedError (in __init__, line" in result.message
    assert "check_my_causal_self_attention(MyCausalSelfAttention)" in result.message


STUB = """
class MyBlock(nn.Module):
    def __init__(self, d_model, num_heads, *, d_ff=None, rope_base=10000.0):
        super().__init__()
        raise NotImplementedError  # your code here

    def forward(self, x, cache=None):
        raise NotImplementedError  # your code here
"""


@pytest.mark.parametrize("written", [True, False])
def test_the_stub_is_not_attempted_and_says_when_the_notebooks_attention_is_not_written_either(written):
    class Unwritten(nn.Module):
        def __init__(self, d_model, num_heads, *, d_in=None, bias=True, rope_base=10000.0):
            raise NotImplementedError

    notebook = {"nn": nn, "MyCausalSelfAttention": MyCausalSelfAttention if written else Unwritten}
    exec(compile(STUB, "<cell>", "exec"), notebook)
    result = check_my_block(notebook["MyBlock"], verbose=False)
    assert result.status == "not_attempted" and result.message.startswith("[my_block] not attempted yet: replace")
    assert ("is not written yet either" in result.message) is not written


class NoSecondNorm(Right):
    def __init__(self, d_model, num_heads, *, d_ff=None, rope_base=10000.0):
        super().__init__(d_model, num_heads, d_ff=d_ff, rope_base=rope_base)
        del self.ln_2


class NoCacheParameter(Right):
    def forward(self, x):
        return super().forward(x)


class AddsInPlace(Right):
    def forward(self, x, cache=None):
        x += self.attn(self.ln_1(x), cache=cache)
        return x + self.mlp(self.ln_2(x))


class ReturnsATuple(Right):
    def forward(self, x, cache=None):
        return super().forward(x, cache), None


class KeepsADropout(Right):
    def __init__(self, d_model, num_heads, *, d_ff=None, rope_base=10000.0):
        super().__init__(d_model, num_heads, d_ff=d_ff, rope_base=rope_base)
        self.mlp.append(nn.Dropout())


@pytest.mark.parametrize(
    ("wrong", "told"),
    [
        (NoSecondNorm, "your block has no submodule `ln_2`"),
        (NoCacheParameter, "your forward takes (x); it must take the cache too: forward(self, x, cache=None)"),
        (AddsInPlace, "your forward changed its input x in place"),
        (ReturnsATuple, "your forward returned tuple, not the output tensor alone"),
        (KeepsADropout, "your block holds Dropout(p=0.5, inplace=False): it draws random numbers"),
    ],
    ids=["no ln_2", "no cache parameter", "in place", "a tuple", "dropout"],
)
def test_a_block_of_another_form_is_told_what_differs(wrong, told):
    result = check_my_block(wrong, verbose=False)
    assert result.status == "incorrect" and told in result.message, result.message


def test_a_block_made_from_the_class_or_by_the_package_is_told_so():
    assert "pass your class itself, Right, not a block" in check_my_block(Right(8, 2), verbose=False).message

    class Inherited(mh.TransformerBlock):
        pass

    result = check_my_block(Inherited, verbose=False)
    assert result.correct and result.shortcuts == ("mhsa_helpers.block.TransformerBlock",)
    assert "Note: your block is the package's `TransformerBlock`" in result.message
    with pytest.raises(TypeError, match=r"learner must be a function or a class \(your MyBlock\), got int"):
        check_my_block(3)
