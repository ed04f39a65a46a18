"""MultiHeadSelfAttention against torch.nn.MultiheadAttention and a from-scratch
reference; causality, fast path, dropout, the weight loaders and the device."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

import mhsa_helpers
from mhsa_helpers import AttentionWeights, MultiHeadSelfAttention, RotaryEmbedding, multi_head_self_attention
from mhsa_helpers.weight_layouts import from_fused_qkv, from_head_weights, from_projection_weights, from_torch_mha

SEEDS = st.integers(0, 2**31 - 1)
F64 = torch.float64


def _randn(gen, *shape, dtype=F64):
    return torch.randn(*shape, generator=gen, dtype=dtype)


def _reference_mhsa(
    x, w_q, w_k, w_v, w_o, num_heads, *, b_q=None, b_k=None, b_v=None, b_o=None, causal=False, key_lengths=None
):
    """Head by head, from the formula: O = concat_h(softmax(Q_h K_h^T / sqrt(d_head)) V_h) W_O^T.
    Weights in nn.Linear layout; x (batch, seq, d_in). No RoPE."""
    batch, seq, _ = x.shape
    d_model = w_q.shape[0]
    d_head = d_model // num_heads
    zeros = torch.zeros(d_model, dtype=x.dtype)
    q = x @ w_q.T + (zeros if b_q is None else b_q)
    k = x @ w_k.T + (zeros if b_k is None else b_k)
    v = x @ w_v.T + (zeros if b_v is None else b_v)
    outputs, all_weights = [], []
    for h in range(num_heads):
        cols = slice(h * d_head, (h + 1) * d_head)
        scores = q[..., cols] @ k[..., cols].transpose(-2, -1) / math.sqrt(d_head)
        allowed = torch.ones(batch, seq, seq, dtype=torch.bool)
        if causal:
            allowed &= torch.ones(seq, seq, dtype=torch.bool).tril()
        if key_lengths is not None:
            allowed &= (torch.arange(seq)[None, :] < torch.as_tensor(key_lengths)[:, None])[:, None, :]
        weights = torch.softmax(scores.masked_fill(~allowed, -math.inf), dim=-1)
        all_weights.append(weights)
        outputs.append(weights @ v[..., cols])
    out = torch.cat(outputs, dim=-1) @ w_o.T
    if b_o is not None:
        out = out + b_o
    return out, torch.stack(all_weights, dim=1)


# ---------------------------------------------------------------- against nn.MultiheadAttention


@given(
    batch_first=st.booleans(),
    causal=st.booleans(),
    padded=st.booleans(),
    bias=st.booleans(),
    batch=st.integers(1, 3),
    seq=st.integers(1, 6),
    num_heads=st.integers(1, 4),
    d_head=st.integers(1, 4),
    seed=SEEDS,
    data=st.data(),
)
def test_equals_torch_multihead_attention(batch_first, causal, padded, bias, batch, seq, num_heads, d_head, seed, data):
    torch.manual_seed(seed)
    d_model = num_heads * d_head
    torch_mha = nn.MultiheadAttention(d_model, num_heads, bias=bias, batch_first=batch_first, dtype=F64).eval()
    if bias:  # PyTorch initialises the biases to zero; make them matter.
        with torch.no_grad():
            torch_mha.in_proj_bias.normal_()
            torch_mha.out_proj.bias.normal_()
    ours = from_torch_mha(torch_mha, causal=causal).eval()

    x = torch.randn(batch, seq, d_model, dtype=F64)  # ours is always (batch, seq, d)
    x_torch = x if batch_first else x.transpose(0, 1)  # (seq, batch, d) for batch_first=False

    attn_mask = torch.ones(seq, seq, dtype=torch.bool).triu(1) if causal else None  # PyTorch: True = blocked
    key_padding_mask = None
    our_mask = None
    if padded:
        lengths = data.draw(st.lists(st.integers(1, seq), min_size=batch, max_size=batch), label="lengths")
        key_padding_mask = torch.arange(seq)[None, :] >= torch.tensor(lengths)[:, None]  # True = padding
        our_mask = (~key_padding_mask)[:, None, None, :]  # (batch, 1, 1, seq), True = may attend

    with torch.no_grad():
        expected, expected_weights = torch_mha(
            x_torch,
            x_torch,
            x_torch,
            attn_mask=attn_mask,
            key_padding_mask=key_padding_mask,
            need_weights=True,
            average_attn_weights=False,
        )
        expected_fast, _ = torch_mha(
            x_torch, x_torch, x_torch, attn_mask=attn_mask, key_padding_mask=key_padding_mask, need_weights=False
        )
        out, weights = ours(x, mask=our_mask, need_weights=True)
        out_fast = ours(x, mask=our_mask)
    if not batch_first:
        expected = expected.transpose(0, 1)
        expected_fast = expected_fast.transpose(0, 1)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(out_fast, expected_fast)
    torch.testing.assert_close(weights, expected_weights)


def test_from_torch_mha_copies_weights_and_rejects_other_modules():
    torch.manual_seed(0)
    torch_mha = nn.MultiheadAttention(6, 2)
    ours = from_torch_mha(torch_mha)
    assert torch.equal(ours.qkv_proj.weight, torch_mha.in_proj_weight)
    assert torch.equal(ours.q_weight, torch_mha.in_proj_weight[:6])
    assert torch.equal(ours.v_weight, torch_mha.in_proj_weight[12:])
    assert torch.equal(ours.o_weight, torch_mha.out_proj.weight)
    # Copies, not shared storage.
    with torch.no_grad():
        ours.qkv_proj.weight.zero_()
    assert torch_mha.in_proj_weight.abs().sum() > 0
    with pytest.raises(TypeError, match=r"torch\.nn\.MultiheadAttention"):
        from_torch_mha(nn.Linear(2, 2))
    with pytest.raises(ValueError, match="kdim"):
        from_torch_mha(nn.MultiheadAttention(6, 2, kdim=4, vdim=4))
    with pytest.raises(ValueError, match="add_bias_kv"):
        from_torch_mha(nn.MultiheadAttention(6, 2, add_bias_kv=True))


def test_from_torch_mha_copies_dropout_and_the_layout_note_holds():
    torch.manual_seed(0)
    torch_mha = nn.MultiheadAttention(8, 2, dropout=0.25, dtype=F64)  # batch_first=False: (seq, batch, d)
    assert from_torch_mha(torch_mha).dropout == 0.25
    assert from_torch_mha(torch_mha, dropout=0.0).dropout == 0.0
    ours = from_torch_mha(torch_mha).eval()
    torch_mha.eval()
    x = torch.randn(3, 5, 8, dtype=F64)  # (batch, seq, d) for ours
    x_t = x.transpose(0, 1)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), torch_mha(x_t, x_t, x_t)[0].transpose(0, 1))
    # In training mode both drop attention weights: outputs differ from eval mode.
    ours.train()
    torch.manual_seed(1)
    assert not torch.allclose(ours(x), ours.eval()(x))


def test_float16_module_with_large_activations_fast_and_weights_paths_agree():
    """Scores of fp16 activations overflow float16 (max 65504) long before the outputs do."""
    torch.manual_seed(0)
    module = MultiHeadSelfAttention(16, 2, dtype=torch.float16)
    with torch.no_grad():
        module.qkv_proj.weight.mul_(20)
    x = (torch.randn(2, 5, 16) * 40).half()
    q = module.qkv_proj(x)[..., :8].float()
    assert (q @ q.transpose(-2, -1)).abs().max() > 65504  # the float16 scores would be inf
    with torch.no_grad():
        fast = module(x)
        slow, weights = module(x, need_weights=True)
        reference = module.double()(x.double())
    assert not torch.isnan(slow).any() and not torch.isnan(weights).any()
    torch.testing.assert_close(slow, fast, atol=0.5, rtol=1e-2)
    torch.testing.assert_close(slow.double(), reference, atol=1.0, rtol=2e-2)


# ---------------------------------------------------------------- against the formula, loaders


def test_matches_from_scratch_reference_with_different_d_in_d_out():
    gen = torch.Generator().manual_seed(1)
    d_in, d_model, d_out, heads = 5, 6, 7, 3
    w_q, w_k, w_v = (_randn(gen, d_model, d_in) for _ in range(3))
    w_o = _randn(gen, d_out, d_model)
    b_q, b_k, b_v, b_o = _randn(gen, d_model), _randn(gen, d_model), _randn(gen, d_model), _randn(gen, d_out)
    x = _randn(gen, 2, 4, d_in)
    expected, expected_weights = _reference_mhsa(
        x, w_q, w_k, w_v, w_o, heads, b_q=b_q, b_k=b_k, b_v=b_v, b_o=b_o, causal=True
    )
    module = from_projection_weights(
        w_q,
        w_k,
        w_v,
        w_o,
        num_heads=heads,
        layout="out_in",
        q_bias=b_q,
        k_bias=b_k,
        v_bias=b_v,
        o_bias=b_o,
        causal=True,
    )
    assert (module.d_in, module.d_model, module.d_out, module.d_head) == (d_in, d_model, d_out, 2)
    out, weights = module(x, need_weights=True)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(weights, expected_weights)
    # The same numbers from the in_out layout (E @ W on paper) and from the functional form.
    module_t = from_projection_weights(
        w_q.T,
        w_k.T,
        w_v.T,
        w_o.T,
        num_heads=heads,
        layout="in_out",
        q_bias=b_q,
        k_bias=b_k,
        v_bias=b_v,
        o_bias=b_o,
        causal=True,
    )
    torch.testing.assert_close(module_t(x), expected)
    functional = multi_head_self_attention(
        x, AttentionWeights(w_q, w_k, w_v, w_o, b_q, b_k, b_v, b_o), num_heads=heads, causal=True
    )
    torch.testing.assert_close(functional, expected)


def test_missing_qkv_biases_are_zero():
    gen = torch.Generator().manual_seed(2)
    w = [_randn(gen, 4, 4) for _ in range(4)]
    b_k = _randn(gen, 4)
    x = _randn(gen, 1, 3, 4)
    module = from_projection_weights(*w, num_heads=2, layout="out_in", k_bias=b_k)
    assert module.out_proj.bias is None
    torch.testing.assert_close(module(x), _reference_mhsa(x, *w, 2, b_k=b_k)[0])


def test_from_head_weights_matches_per_head_formula():
    """Seed 001's view: one (d_in, d_head) matrix per head, written E @ W."""
    gen = torch.Generator().manual_seed(3)
    heads, d_in, d_head, d_out = 2, 3, 3, 3
    q_heads = [_randn(gen, d_in, d_head) for _ in range(heads)]
    k_heads = [_randn(gen, d_in, d_head) for _ in range(heads)]
    v_heads = [_randn(gen, d_in, d_head) for _ in range(heads)]
    w_o = _randn(gen, heads * d_head, d_out)  # C @ W_O with C (seq, heads * d_head)
    e = _randn(gen, 4, d_in)
    contexts = []
    for wq, wk, wv in zip(q_heads, k_heads, v_heads, strict=True):
        scores = (e @ wq) @ (e @ wk).T / math.sqrt(d_head)
        contexts.append(torch.softmax(scores, dim=-1) @ (e @ wv))
    expected = torch.cat(contexts, dim=-1) @ w_o
    module = from_head_weights(q_heads, k_heads, v_heads, w_o, layout="in_out")
    torch.testing.assert_close(module(e), expected)
    module_out_in = from_head_weights(
        [w.T for w in q_heads], [w.T for w in k_heads], [w.T for w in v_heads], w_o.T, layout="out_in"
    )
    torch.testing.assert_close(module_out_in(e), expected)


def _seed_004_forward_fixed(x, w_fused, b_fused, w_o, b_o, num_heads, is_decoder):
    """Seed 004's compute_attention with its one bug fixed (transpose back before merging heads)."""
    batch, seq, _ = x.shape
    head_dim = w_fused.shape[0] // (3 * num_heads)
    qkv = (x @ w_fused.T + b_fused).reshape(batch, seq, num_heads, 3 * head_dim).permute(0, 2, 1, 3)
    q, k, v = qkv.chunk(3, dim=-1)
    scaled = q @ k.transpose(-1, -2) / math.sqrt(head_dim)
    if is_decoder:
        scaled = scaled + torch.full(scaled.size(), float("-inf"), dtype=x.dtype).triu(diagonal=1)
    values = torch.softmax(scaled, dim=-1) @ v
    values = values.permute(0, 2, 1, 3).reshape(batch, seq, num_heads * head_dim)
    return values @ w_o.T + b_o


@pytest.mark.parametrize("is_decoder", [False, True], ids=["encoder", "decoder"])
def test_from_fused_qkv_per_head_matches_seed_004(is_decoder):
    gen = torch.Generator().manual_seed(4)
    heads, d_head, d_in, batch, seq = 3, 2, 5, 2, 4
    d_model = heads * d_head
    w_fused, b_fused = _randn(gen, 3 * d_model, d_in), _randn(gen, 3 * d_model)
    w_o, b_o = _randn(gen, d_model, d_model), _randn(gen, d_model)
    x = _randn(gen, batch, seq, d_in)
    expected = _seed_004_forward_fixed(x, w_fused, b_fused, w_o, b_o, heads, is_decoder)
    module = from_fused_qkv(
        w_fused, w_o, num_heads=heads, fused_layout="per_head", qkv_bias=b_fused, o_bias=b_o, causal=is_decoder
    )
    torch.testing.assert_close(module(x), expected)
    # Reading the same matrix as "stacked" is a different model.
    wrong = from_fused_qkv(
        w_fused, w_o, num_heads=heads, fused_layout="stacked", qkv_bias=b_fused, o_bias=b_o, causal=is_decoder
    )
    assert not torch.allclose(wrong(x), expected)


# ---------------------------------------------------------------- properties


@st.composite
def module_and_input(draw, causal=True):
    num_heads = draw(st.integers(1, 3))
    d_head = draw(st.sampled_from([2, 4]))
    rope = draw(st.booleans())
    convention = draw(st.sampled_from(["interleaved", "half_split"]))
    seq = draw(st.integers(1, 7))
    batch = draw(st.integers(1, 2))
    seed = draw(SEEDS)
    torch.manual_seed(seed)
    module = MultiHeadSelfAttention(
        num_heads * d_head,
        num_heads,
        causal=causal,
        rope=RotaryEmbedding(d_head, 16, convention=convention) if rope else None,
        dtype=F64,
    ).eval()
    x = torch.randn(batch, seq, num_heads * d_head, dtype=F64)
    return module, x


@given(module_and_input(causal=True), st.booleans(), st.data())
def test_causal_module_ignores_future_tokens(inputs, need_weights, data):
    module, x = inputs
    seq = x.shape[1]
    i = data.draw(st.integers(0, seq - 1), label="position")
    changed = x.clone()
    changed[:, i + 1 :] = torch.randn(x.shape[0], seq - i - 1, x.shape[2], dtype=F64) * 3

    def run(inp):
        result = module(inp, need_weights=need_weights)
        return result[0] if need_weights else result

    before, after = run(x), run(changed)
    torch.testing.assert_close(after[:, : i + 1], before[:, : i + 1], atol=1e-12, rtol=0)
    if i + 1 < seq:
        assert not torch.allclose(after[:, i + 1 :], before[:, i + 1 :])


@given(module_and_input(causal=False))
def test_non_causal_module_does_see_the_future(inputs):
    module, x = inputs
    if x.shape[1] < 2:
        x = torch.cat([x, x + 1], dim=1)
    changed = x.clone()
    changed[:, -1] += 1.0
    assert not torch.allclose(module(changed)[:, 0], module(x)[:, 0])


@given(module_and_input(causal=True), st.booleans(), st.data())
def test_module_fast_path_equals_weights_path(inputs, causal, data):
    module, x = inputs
    module.causal = causal
    batch, seq = x.shape[:2]
    lengths = data.draw(st.lists(st.integers(1, seq), min_size=batch, max_size=batch), label="lengths")
    mask = mhsa_helpers.padding_mask(torch.tensor(lengths), seq)
    for m in (None, mask):
        out, weights = module(x, mask=m, need_weights=True)
        torch.testing.assert_close(module(x, mask=m), out)
        assert weights.shape == (batch, module.num_heads, seq, seq)
        torch.testing.assert_close(weights.sum(-1), torch.ones(batch, module.num_heads, seq, dtype=F64))


class _CountingSDPA:
    def __init__(self):
        self.calls = 0
        self.original = torch.nn.functional.scaled_dot_product_attention

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.original(*args, **kwargs)


@pytest.mark.parametrize(
    "dropout, training, need_weights, expected_calls",
    [
        (0.0, False, False, 1),
        (0.3, False, False, 1),  # eval: dropout is off
        (0.0, True, False, 1),  # training without dropout
        (0.0, False, True, 0),
        (0.3, True, False, 0),  # training with dropout needs the explicit weights
        (0.3, True, True, 0),
    ],
    ids=["eval", "eval-dropout", "train-no-dropout", "need-weights", "train-dropout", "train-dropout-weights"],
)
def test_module_fast_path_calls_torch_sdpa(monkeypatch, dropout, training, need_weights, expected_calls):
    torch.manual_seed(0)
    module = MultiHeadSelfAttention(8, 2, causal=True, rope=RotaryEmbedding(4), dropout=dropout).train(training)
    x = torch.randn(2, 5, 8)
    expected = module.eval()(x) if not training else None
    module.train(training)
    counter = _CountingSDPA()
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", counter)
    result = module(x, need_weights=need_weights)
    assert counter.calls == expected_calls
    out = result[0] if need_weights else result
    assert out.shape == (2, 5, 8)
    if expected is not None:
        torch.testing.assert_close(out, expected)


def test_dropout_eval_is_deterministic_and_train_rescales():
    torch.manual_seed(0)
    p = 0.5
    module = MultiHeadSelfAttention(8, 2, dropout=p, dtype=F64)
    no_dropout = MultiHeadSelfAttention(8, 2, dtype=F64)
    no_dropout.load_state_dict(module.state_dict())
    x = torch.randn(3, 10, 8, dtype=F64)

    module.eval()
    first, eval_weights = module(x, need_weights=True)
    second, second_weights = module(x, need_weights=True)
    assert torch.equal(first, second) and torch.equal(eval_weights, second_weights)
    assert torch.equal(module(x), module(x))
    torch.testing.assert_close(first, no_dropout(x))
    torch.testing.assert_close(module(x), no_dropout(x))

    module.train()
    torch.manual_seed(1)
    out, weights = module(x, need_weights=True)
    zeroed = weights == 0
    assert zeroed.any() and (~zeroed).any()
    assert 0.35 < zeroed.double().mean().item() < 0.65
    torch.testing.assert_close(weights[~zeroed], eval_weights[~zeroed] / (1 - p))
    # The output is computed from the dropped weights.
    v = mhsa_helpers.split_heads(x @ module.v_weight.T + module.qkv_proj.bias[16:], 2)
    torch.testing.assert_close(out, module.out_proj(mhsa_helpers.merge_heads(weights @ v)))
    torch.manual_seed(1)
    torch.testing.assert_close(module(x), out)  # same seed, same dropout
    assert not torch.allclose(module(x), out)  # next draw differs


def test_rope_module_equals_reference_rotation_of_q_and_k():
    """With RoPE on, scores are rope(q) . rope(k); values are not rotated."""
    torch.manual_seed(5)
    module = MultiHeadSelfAttention(8, 2, rope=RotaryEmbedding(4, max_seq_len=32), causal=True, dtype=F64)
    x = torch.randn(2, 6, 8, dtype=F64)
    positions = torch.arange(10, 16)
    q, k, v = (
        x @ w.T + b
        for w, b in zip((module.q_weight, module.k_weight, module.v_weight), module.qkv_proj.bias.chunk(3), strict=True)
    )
    rope = mhsa_helpers.RotaryEmbedding(4, max_seq_len=32)
    q = rope(mhsa_helpers.split_heads(q, 2), positions)
    k = rope(mhsa_helpers.split_heads(k, 2), positions)
    v = mhsa_helpers.split_heads(v, 2)
    scores = q @ k.transpose(-2, -1) / 2.0
    scores = scores.masked_fill(~torch.ones(6, 6, dtype=torch.bool).tril(), -math.inf)
    expected = module.out_proj(mhsa_helpers.merge_heads(torch.softmax(scores, -1) @ v))
    torch.testing.assert_close(module(x, token_positions=positions), expected)
    # Per-example positions (batch, seq) with identical rows give the same answer.
    torch.testing.assert_close(module(x, token_positions=positions.expand(2, 6)), expected)
    # And the functional form with the same weights.
    weights = AttentionWeights(
        module.q_weight,
        module.k_weight,
        module.v_weight,
        module.o_weight,
        q_bias=module.qkv_proj.bias[:8],
        k_bias=module.qkv_proj.bias[8:16],
        v_bias=module.qkv_proj.bias[16:],
        o_bias=module.out_proj.bias,
    )
    functional = multi_head_self_attention(
        x, weights, num_heads=2, causal=True, rope=RotaryEmbedding(4), token_positions=positions
    )
    torch.testing.assert_close(functional, expected)


def _hand_half_split_rope(x, positions):
    """Hugging Face's formula: x * cos + rotate_half(x) * sin with angles cat((freqs, freqs))."""
    d = x.shape[-1]
    freqs = torch.outer(positions.double(), 1.0 / 10000.0 ** (torch.arange(0, d, 2, dtype=F64) / d))
    emb = torch.cat((freqs, freqs), dim=-1)
    rotated = torch.cat((-x[..., d // 2 :], x[..., : d // 2]), dim=-1)
    return x * emb.cos() + rotated * emb.sin()


def test_module_and_rope_on_default_device():
    device = mhsa_helpers.default_device()
    torch.manual_seed(6)
    cpu_module = MultiHeadSelfAttention(
        8, 2, causal=True, rope=RotaryEmbedding(4, max_seq_len=16, convention="half_split")
    )
    x = torch.randn(2, 5, 8)
    # Expected output from the formula, in float64 on the CPU.
    with torch.no_grad():
        w_q, w_k, w_v = (w.double() for w in cpu_module.qkv_proj.weight.chunk(3))
        b_q, b_k, b_v = (b.double() for b in cpu_module.qkv_proj.bias.chunk(3))
        x64, positions = x.double(), torch.arange(5)
        q = _hand_half_split_rope(mhsa_helpers.split_heads(x64 @ w_q.T + b_q, 2), positions)
        k = _hand_half_split_rope(mhsa_helpers.split_heads(x64 @ w_k.T + b_k, 2), positions)
        v = mhsa_helpers.split_heads(x64 @ w_v.T + b_v, 2)
        scores = (q @ k.transpose(-2, -1) / 2.0).masked_fill(~torch.ones(5, 5, dtype=torch.bool).tril(), -math.inf)
        heads = mhsa_helpers.merge_heads(torch.softmax(scores, dim=-1) @ v)
        expected = (heads @ cpu_module.o_weight.double().T + cpu_module.out_proj.bias.double()).float()
    module = MultiHeadSelfAttention(
        8,
        2,
        causal=True,
        rope=RotaryEmbedding(4, max_seq_len=16, convention="half_split", device=device),
        device=device,
    )
    module.load_state_dict(cpu_module.state_dict())
    assert module.qkv_proj.weight.device.type == device.type
    assert module.rope.cos_cached.device.type == device.type
    out = module(x.to(device))
    assert out.device.type == device.type
    torch.testing.assert_close(out.cpu(), expected, atol=1e-4, rtol=1e-4)
    # A module built on the CPU and moved keeps working (the RoPE cache moves along).
    moved = cpu_module.to(device)
    assert moved.rope.cos_cached.device.type == device.type
    torch.testing.assert_close(moved(x.to(device)).cpu(), expected, atol=1e-4, rtol=1e-4)
    rope = mhsa_helpers.RotaryEmbedding(4, max_seq_len=8, device=device)
    pair = torch.tensor([[1.0, 0.0, 0.0, 0.0]] * 2, device=device)
    rotated = rope(pair)
    assert rotated.device.type == device.type
    torch.testing.assert_close(
        rotated.cpu(),
        torch.tensor([[1.0, 0.0, 0.0, 0.0], [math.cos(1.0), math.sin(1.0), 0.0, 0.0]]),
        atol=1e-6,
        rtol=0,
    )
