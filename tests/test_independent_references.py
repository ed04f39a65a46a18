"""Behaviour checked against references written independently of the module's parts.

Some faults survived the rest of the suite because a test compared a module with its own
sub-modules (``block.mlp(block.ln_2(h))``, ``cache.positions``, a weight of ones...): a fault inside
the sub-module then sits on both sides of the comparison. Each test here computes the expected
value from the published recipe, with plain torch functions or plain Python loops over the
definition, or from another library (RMSNorm against transformers' ``LlamaRMSNorm`` in three dtypes),
and reads nothing from the module but its parameters (and, for the cache, what it was fed). Each
test names the fault it is there to catch.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from learner_modules import attention_ok, merge, split

from mhsa_helpers import MultiHeadSelfAttention, SlidingWindowCache
from mhsa_helpers.block import RMSNorm, TransformerBlock
from mhsa_helpers.kv_cache_memory import ModelConfig, kv_cache_variants

F64 = torch.float64

# ---------------------------------------------------------------- TransformerBlock, written out


def _layer_norm(x, weight, bias, eps=1e-5):
    """LayerNorm (Ba et al., 2016) over the last axis, with the biased variance as nn.LayerNorm uses."""
    centred = x - x.mean(-1, keepdim=True)
    return centred / torch.sqrt(centred.pow(2).mean(-1, keepdim=True) + eps) * weight + bias


def _gelu(x):
    """GELU (Hendrycks & Gimpel, 2016), the exact form: x * Phi(x) = x/2 * (1 + erf(x / sqrt 2))."""
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def _rope(t, base=10000.0):
    """RoPE as Meta's LLaMA code writes it: the pairs (t[2i], t[2i+1]) read as complex numbers and
    multiplied by exp(i m theta_i), theta_i = base^(-2i/d_head), for the token at position m.

    The cos and sin are rounded to float32, as the module keeps them (RotaryEmbedding's table is
    float32 whatever the dtype of the model); the product is in t's dtype."""
    seq, d_head = t.shape[-2], t.shape[-1]
    theta = base ** (-torch.arange(0, d_head, 2, dtype=F64) / d_head)
    angles = torch.arange(seq, dtype=F64)[:, None] * theta  # (seq, d_head // 2)
    turn = torch.complex(angles.cos().float().to(t.dtype), angles.sin().float().to(t.dtype))
    pairs = torch.view_as_complex(t.reshape(*t.shape[:-1], d_head // 2, 2).contiguous())
    return torch.view_as_real(pairs * turn).flatten(-2)


def _causal_self_attention(h, w_qkv, b_qkv, w_o, b_o, num_heads):
    """softmax(Q K^T / sqrt(d_head) + causal mask) V per head, with RoPE on Q and K, then W_O; the heads split,
    attended and merged by the learner-written pieces the other tests share (``learner_modules``)."""
    seq = h.shape[1]
    w_q, w_k, w_v = w_qkv.chunk(3)  # rows [W_Q; W_K; W_V], as nn.MultiheadAttention's in_proj_weight
    b_q, b_k, b_v = b_qkv.chunk(3)
    q, k, v = (split(h @ w.T + b, num_heads) for w, b in ((w_q, b_q), (w_k, b_k), (w_v, b_v)))
    causal = torch.ones(seq, seq, dtype=torch.bool).tril()
    return merge(attention_ok(_rope(q), _rope(k), v, causal)) @ w_o.T + b_o


def test_transformer_block_equals_the_pre_norm_recipe_written_out():
    """Kills ``nn.GELU()`` -> ``nn.ReLU()`` (or the tanh approximation of GELU) in TransformerBlock's MLP.

    The other block tests build the expected value from ``block.mlp`` and ``block.attn``, so a wrong
    activation inside them is on both sides. Here only the parameters are read: LayerNorm, attention
    (causal, RoPE), the exact GELU and the residuals are written with plain tensor operations."""
    torch.manual_seed(0)
    d_model, num_heads = 8, 2
    block = TransformerBlock(d_model, num_heads).to(F64).eval()
    with torch.no_grad():  # no default ones and zeros: every parameter must reach the output
        for param in block.parameters():
            param.copy_(torch.randn_like(param) * 0.5)
    x = torch.randn(2, 6, d_model, dtype=F64)
    params = dict(block.named_parameters())

    h = _layer_norm(x, params["ln_1.weight"], params["ln_1.bias"])
    names = ("qkv_proj.weight", "qkv_proj.bias", "out_proj.weight", "out_proj.bias")
    attention = [params[f"attn.{name}"] for name in names]
    x1 = x + _causal_self_attention(h, *attention, num_heads)
    h = _layer_norm(x1, params["ln_2.weight"], params["ln_2.bias"])
    hidden = _gelu(h @ params["mlp.0.weight"].T + params["mlp.0.bias"])
    expected = x1 + hidden @ params["mlp.2.weight"].T + params["mlp.2.bias"]

    with torch.no_grad():
        out = block(x)
        torch.testing.assert_close(out, expected.detach(), rtol=0, atol=1e-10)


# ---------------------------------------------------------------- RMSNorm: where the cast back happens


def test_rms_norm_casts_back_to_the_input_dtype_before_the_weight():
    """Kills ``(self.weight * normed).to(x.dtype)``: the weight applied before the cast back.

    Llama's RMSNorm (and Hugging Face's LlamaRMSNorm) normalise in float32, round the normalised
    ``x`` to ``x``'s dtype, and only then multiply by the weight. The other tests use the default
    weight of ones, for which both orders agree; here the weight is not ones and the input is
    bfloat16, where rounding twice (to bfloat16, then the product to bfloat16) and rounding once
    differ. The expected value is the formula, written out."""
    torch.manual_seed(0)
    eps = 1e-5
    x = torch.randn(3, 8).to(torch.bfloat16)
    w = torch.tensor([1.7, -0.3, 2.5, 0.9, 1.1, -1.3, 0.6, 3.1]).to(torch.bfloat16)
    norm = RMSNorm(8, eps).to(torch.bfloat16)
    with torch.no_grad():
        norm.weight.copy_(w)
        out = norm(x)

    normed = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
    expected = w * normed.to(torch.bfloat16)
    assert not torch.equal((w * normed).to(torch.bfloat16), expected)  # the two orders differ on these numbers
    assert out.dtype == torch.bfloat16
    assert torch.equal(out, expected)


# ---------------------------------------------------------------- SlidingWindowCache.mask_for, from the definition


def _visible(query: int, key: int, window: int, sinks: int) -> bool:
    """StreamingLLM's rule (Xiao et al., 2023) with a window: the query at stream position ``query``
    sees the key at ``key`` iff the key is not later than the query, and it is a sink (one of the
    first ``sinks`` tokens) or one of the ``window`` tokens ending at the query."""
    if key > query:
        return False  # never a later key, not even a sink
    return key < sinks or query - window < key


def _feed(cache: SlidingWindowCache, start: int, count: int) -> None:
    """Append ``count`` tokens at stream positions ``start ..``; each key row holds its own position,
    so what the cache keeps can be read back from the keys themselves."""
    keys = torch.arange(start, start + count, dtype=F64)[None, :, None]  # (heads=1, count, d=1)
    cache.append(keys, -keys)


@pytest.mark.parametrize(
    ("window", "sinks", "steps"),
    [
        (3, 2, [5, 1, 1, 3, 4]),  # the first step holds the sinks and the queries before them
        (4, 3, [2, 1, 4, 2]),  # the first step is shorter than the sinks: the last sink comes later
        (2, 1, [1, 3, 2, 1]),
        (1, 2, [4, 1, 2]),  # window 1: a token sees itself and the sinks only
        (3, 4, [6, 2, 5]),  # more sinks than window
        (5, 0, [3, 4, 1]),  # no sinks at all
        (3, 4, [3]),  # empty cache, 4 sinks, 3 new: the first tokens come before the sinks are complete
        (3, 4, [2, 3]),  # sinks 0, 1 held; 2 and 3 are new sinks, and query 2 must not see sink 3
        (2, 3, [1, 1, 4]),  # decoded one at a time, then a step that completes the sinks and passes them
        (2, 2, [6, 3]),  # the middle evicted: held 0, 1 (sinks) and 5
        (4, 1, [3, 1, 1, 1, 1, 1, 1, 1]),  # one token at a time, long past the window
        (1, 3, [5, 4]),  # window 1 with more sinks than the first step
        (5, 0, [4, 3, 6]),  # more new tokens than the window, so the last ones see no held key
        (3, 2, [9, 5]),  # more new tokens than the cache holds
    ],
)
def test_sliding_window_cache_mask_is_the_definition(window, sinks, steps):
    """Kills a mask that lets a query see a *later* sink, e.g. the precedence slip
    ``(behind >= 0) & (behind < self.window) | (key_positions[None, :] < self.sinks)``.

    Fed through ``MultiHeadSelfAttention(causal=True)`` such a mask is harmless (the causal mask
    hides the later sink), so the decoding tests cannot see it. The expected mask is built with
    Python loops from the definition: the query at position p sees the key at position k iff
    ``k <= p and (p - k < window or k < sinks)``. The keys' positions are read from the keys
    themselves (each key holds its own position), not from ``cache.positions``."""
    cache, seen = SlidingWindowCache(window, sinks), 0
    for new in steps:
        held = [] if cache.keys is None else [int(p) for p in cache.keys[0, :, 0].tolist()]
        # What the next query may attend to is exactly what is held: the sinks and the last window - 1.
        assert held == [k for k in range(seen) if _visible(seen, k, window, sinks)]
        assert cache.length == seen
        queries = range(seen, seen + new)
        columns = held + list(queries)
        expected = [[_visible(p, k, window, sinks) for k in columns] for p in queries]
        mask = cache.mask_for(new)
        assert mask.dtype == torch.bool
        assert mask.tolist() == expected, (window, sinks, seen, new)
        _feed(cache, seen, new)
        seen += new


def test_the_first_tokens_do_not_see_the_sinks_that_come_after_them():
    """The case a causal module hides: an empty cache with 4 sinks and a step of 3 tokens. Every
    new token is a sink, and each may see only the sinks up to itself: a lower triangle, written
    out. A mask that lets any query see every sink would fill the whole (3, 3) block."""
    mask = SlidingWindowCache(window=2, sinks=4).mask_for(3)
    assert mask.tolist() == [
        [True, False, False],
        [True, True, False],
        [True, True, True],
    ]


def test_a_step_that_completes_the_sinks_sees_no_later_sink():
    """Two tokens held (both sinks of 4), then 4 new tokens at positions 2..5 with window 2: the
    new sinks 2 and 3 are hidden from the queries before them; query 5 sees the sinks 0..3 and
    itself, and query 4 the sinks 0..3 and itself (3 is a sink and inside its window anyway)."""
    cache = SlidingWindowCache(window=2, sinks=4)
    _feed(cache, 0, 2)
    #            keys:  0     1      2      3      4      5
    assert cache.mask_for(4).tolist() == [
        [True, True, True, False, False, False],  # query 2
        [True, True, True, True, False, False],  # query 3
        [True, True, True, True, True, False],  # query 4
        [True, True, True, True, True, True],  # query 5
    ]


def _reference_step(module, x, start, count, window, sinks):
    """The outputs of tokens ``start .. start + count - 1`` of ``x`` (batch, seq, d_model), attention
    written out per query and per head over the full stream: softmax(q K^T / sqrt(d_head)) V over
    the keys ``_visible`` says, each key and value recomputed from its token, then W_O."""
    d_head = module.d_head
    b_q, b_k, b_v = module.qkv_proj.bias.chunk(3)
    q = x @ module.q_weight.T + b_q
    k = x @ module.k_weight.T + b_k
    v = x @ module.v_weight.T + b_v
    rows = []
    for p in range(start, start + count):
        keys = [j for j in range(x.shape[1]) if _visible(p, j, window, sinks)]
        heads = []
        for h in range(module.num_heads):
            cols = slice(h * d_head, (h + 1) * d_head)
            # (batch, 1, d_head) @ (batch, d_head, n_keys) -> (batch, 1, n_keys)
            scores = q[:, p : p + 1, cols] @ k[:, keys, cols].transpose(-2, -1) / math.sqrt(d_head)
            heads.append(torch.softmax(scores, -1) @ v[:, keys, cols])  # (batch, 1, d_head)
        rows.append(torch.cat(heads, -1))
    return module.out_proj(torch.cat(rows, 1))


@pytest.mark.parametrize(("window", "sinks", "steps"), [(3, 4, [3, 2, 1, 4]), (2, 1, [4, 1, 3]), (4, 0, [2, 5, 1])])
def test_decoding_with_the_mask_alone_matches_attention_over_the_visible_keys(window, sinks, steps):
    """The mask is all that tells a non-causal module what a step may see: decoding in steps with
    ``mask=cache.mask_for(new)`` must give, token for token, attention over exactly the keys of
    the definition. With ``causal=True`` a later sink would be hidden by the causal mask; here a
    mask that shows it changes the outputs of the first tokens."""
    torch.manual_seed(0)
    module = MultiHeadSelfAttention(8, 2, causal=False, dtype=F64).eval()
    x = torch.randn(2, sum(steps), 8, dtype=F64)
    cache, seen = SlidingWindowCache(window, sinks), 0
    with torch.no_grad():
        for new in steps:
            out = module(x[:, seen : seen + new], mask=cache.mask_for(new), cache=cache)
            expected = _reference_step(module, x, seen, new, window, sinks)
            torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-12, msg=f"tokens {seen}..{seen + new - 1}")
            seen += new


# ---------------------------------------------------------------- ModelConfig.attention, from the definition


def _kind(num_heads, num_kv_heads):
    """Group size = query heads per key/value head: 1 is MHA (each query head has its own key/value
    head), num_heads > 1 is MQA (all share one), anything in between GQA."""
    group = num_heads // num_kv_heads
    if group == 1:
        return "MHA"
    return "MQA" if group == num_heads else "GQA"


@pytest.mark.parametrize(
    ("num_heads", "num_kv_heads"),
    [(1, 1), (2, 1), (2, 2), (4, 1), (4, 2), (4, 4), (8, 1), (8, 2), (8, 4), (8, 8), (12, 3), (32, 8)],
)
def test_model_config_attention_is_the_group_size(num_heads, num_kv_heads):
    """Kills an ``attention`` that asks ``num_kv_heads == 1`` first and calls a one-head model "MQA".

    A model with one query head and one key/value head gives every query head its own key/value
    head: it is MHA (group size 1), as the class docstring says ("equal for multi-head attention").
    The expected kind is computed from the group size, not from the property's own tests."""
    config = ModelConfig("toy", num_layers=2, num_heads=num_heads, num_kv_heads=num_kv_heads, head_dim=8)
    assert config.attention == _kind(num_heads, num_kv_heads)
    # The model's own kind is the bar of the comparison table that keeps its number of key/value heads.
    variants = {v.name: v for v in kv_cache_variants(config, tokens=10)}
    assert variants[config.attention].num_kv_heads == num_kv_heads


def test_a_one_head_model_is_mha_and_its_three_variants_cost_the_same():
    """Kills the same fault; the table of variants for a one-head model: with a single query head
    MHA, GQA and MQA all keep one key/value head, so the three bars are the same size,
    2 (K and V) x layers x kv_heads x head_dim x tokens x batch x bytes."""
    config = ModelConfig("one head", num_layers=3, num_heads=1, num_kv_heads=1, head_dim=16)
    assert config.attention == "MHA"
    variants = kv_cache_variants(config, tokens=100, batch=2, dtype="float16")
    assert [(v.name, v.num_kv_heads, v.bytes) for v in variants] == [
        ("MHA", 1, 2 * 3 * 1 * 16 * 100 * 2 * 2),
        ("GQA", 1, 2 * 3 * 1 * 16 * 100 * 2 * 2),
        ("MQA", 1, 2 * 3 * 1 * 16 * 100 * 2 * 2),
    ]


# ---------------------------------------------------------------- the block via torch's attention; its MLP alone


def _attention(h, params, num_heads, *, causal, rope):
    """Multi-head self-attention from the block's parameters: one projection whose rows are
    [W_Q; W_K; W_V], heads split as (batch, heads, seq, d_head), RoPE on Q and K, scaled dot-product
    attention by torch itself, heads merged back, then W_O."""
    batch, seq, d_model = h.shape
    qkv = h @ params["attn.qkv_proj.weight"].T + params["attn.qkv_proj.bias"]
    q, k, v = (t.reshape(batch, seq, num_heads, d_model // num_heads).transpose(1, 2) for t in qkv.chunk(3, dim=-1))
    if rope:
        q, k = _rope(q), _rope(k)
    heads = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    merged = heads.transpose(1, 2).reshape(batch, seq, d_model)
    return merged @ params["attn.out_proj.weight"].T + params["attn.out_proj.bias"]


def _mlp(h, params):
    """Linear d_model -> d_ff, exact GELU, Linear d_ff -> d_model (the block's ``mlp.0`` and ``mlp.2``)."""
    hidden = _gelu(h @ params["mlp.0.weight"].T + params["mlp.0.bias"])
    return hidden @ params["mlp.2.weight"].T + params["mlp.2.bias"]


def _random_block(d_model, num_heads, **kwargs):
    """A float64 block in eval mode whose every parameter is random: LayerNorm's default weight of
    ones and bias of zeros would hide a LayerNorm swapped for another or a bias dropped."""
    torch.manual_seed(0)
    block = TransformerBlock(d_model, num_heads, d_ff=3 * d_model, **kwargs).to(F64).eval()
    with torch.no_grad():
        for param in block.parameters():
            param.copy_(torch.randn_like(param) * 0.5)
    return block


def test_gelu_helper_gives_the_published_value_at_minus_one():
    # GELU(-1) = -Phi(-1) = -0.15865525393145707 (the standard normal CDF at -1); ReLU would give 0
    # and the tanh approximation -0.15880800939172324. This pins the reference the block is held to.
    assert _gelu(torch.tensor(-1.0, dtype=F64)).item() == pytest.approx(-0.15865525393145707, abs=1e-15)


@pytest.mark.parametrize(("causal", "rope"), [(True, True), (False, False), (True, False)])
def test_block_forward_equals_the_pre_norm_recipe_spelled_out_with_torch(causal, rope):
    """Catches a wrong MLP activation (GELU -> ReLU, or the tanh approximation), a LayerNorm used
    at the wrong step, a residual dropped, and the causal flag or RoPE not reaching attention:
    x1 = x + attention(LayerNorm_1(x)); out = x1 + MLP(LayerNorm_2(x1)), with nothing of the block
    but its parameters."""
    d_model, num_heads = 8, 2
    block = _random_block(d_model, num_heads, causal=causal, rope=rope)
    params = {name: p.detach() for name, p in block.named_parameters()}
    x = torch.randn(2, 5, d_model, dtype=F64)

    x1 = x + _attention(
        _layer_norm(x, params["ln_1.weight"], params["ln_1.bias"]), params, num_heads, causal=causal, rope=rope
    )
    expected = x1 + _mlp(_layer_norm(x1, params["ln_2.weight"], params["ln_2.bias"]), params)

    with torch.no_grad():
        out = block(x)
    assert out.shape == x.shape and out.dtype == F64
    # float64 throughout: the only differences left are in the order of the sums, around 1e-15.
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)


def test_block_mlp_alone_is_linear_exact_gelu_linear_on_negative_pre_activations():
    """Catches GELU -> ReLU (or -> the tanh approximation) in the MLP, on inputs where they differ:
    ReLU zeroes a negative pre-activation where GELU keeps x * Phi(x), down to about -0.17."""
    block = _random_block(8, 2)
    params = {name: p.detach() for name, p in block.named_parameters()}
    w1, b1 = params["mlp.0.weight"], params["mlp.0.bias"]
    # One token per hidden unit, pointing against that unit's row of W1: token i's pre-activation at
    # unit i is -0.7 |W1[i]|^2 + b1[i], mostly negative and within GELU's curved range.
    torch.manual_seed(1)
    h = -0.7 * w1 + 0.05 * torch.randn_like(w1)  # (d_ff, d_model): d_ff tokens of width d_model
    pre = h @ w1.T + b1
    # The inputs do exercise the difference: every token's own unit negative, and many others too.
    assert (pre.diagonal() < 0).all() and (pre < 0).float().mean() > 0.4
    assert (_gelu(pre) - F.relu(pre)).abs().max() > 0.1

    expected = _gelu(pre) @ params["mlp.2.weight"].T + params["mlp.2.bias"]
    with torch.no_grad():
        out = block.mlp(h)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)


# ---------------------------------------------------------------- RMSNorm against Hugging Face's LlamaRMSNorm

D_NORM = 64
EPS = 1e-5


def _norm_input(dtype):
    """Rows of different scales, one small enough (1e-3) for eps to matter next to mean(x^2)."""
    torch.manual_seed(2)
    scales = torch.tensor([1.0, 30.0, 1e-3, 0.2])[:, None]
    return (torch.randn(2, 4, D_NORM) * scales).to(dtype)


def _norm_weight():
    """A weight far from ones, with negative entries: with ones both orders of cast and multiply agree."""
    torch.manual_seed(3)
    return torch.randn(D_NORM) * 1.5 + 0.5


@pytest.fixture(scope="module")
def llama_rms_norm():
    """transformers' LlamaRMSNorm class; imported here, not at collection, as tests/test_real_model.py
    does (transformers takes a second or two to import and is a test-only dependency)."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    return LlamaRMSNorm


@pytest.mark.parametrize("weight_in", ["float32", "input dtype"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_rms_norm_equals_transformers_llama_rms_norm(llama_rms_norm, dtype, weight_in):
    """Catches the weight multiplied before the cast back (``(self.weight * normed).to(x.dtype)``),
    a norm computed in the input's dtype instead of float32, and eps or the mean misplaced.

    LlamaRMSNorm is the published reference: hidden.to(float32), * rsqrt(mean(hidden^2) + eps),
    .to(input dtype), then weight *. The same operations in the same order on the same numbers give
    the same bits, so the comparison is exact; and the result's dtype is what type promotion of the
    weight and the input's dtype gives (float32 for a float32 weight, as in HF)."""
    weight_dtype = torch.float32 if weight_in == "float32" else dtype
    x, weight = _norm_input(dtype), _norm_weight().to(weight_dtype)
    ours, theirs = RMSNorm(D_NORM, EPS).to(weight_dtype), llama_rms_norm(D_NORM, eps=EPS).to(weight_dtype)
    with torch.no_grad():
        ours.weight.copy_(weight)
        theirs.weight.copy_(weight)
        out, expected = ours(x), theirs(x)

    assert out.dtype == expected.dtype == torch.promote_types(weight_dtype, dtype)
    assert torch.equal(out, expected), (out.float() - expected.float()).abs().max().item()
    if dtype != torch.float32:
        # The comparison can fail: here the other order (multiply, then cast back) gives other values
        # or another dtype. (In float32 there is no cast, and both orders are the same numbers.)
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + EPS)
        wrong_order = (weight * normed).to(dtype)
        assert wrong_order.dtype != expected.dtype or not torch.equal(wrong_order, expected)
