"""Loaders of weight_layouts: arguments that mutation testing (``make mutate``) showed unpinned.
The expected module is built by hand from the same numbers: stacked rows [W_Q; W_K; W_V] and
biases [b_Q; b_K; b_V], as MultiHeadSelfAttention's docstring lays them out."""

from __future__ import annotations

import pytest
import torch
from pinning import raises
from torch import nn

from mhsa_helpers.weight_layouts import (
    from_fused_qkv,
    from_head_weights,
    from_projection_weights,
    from_torch_mha,
    fused_qkv_per_head_to_stacked,
    fused_qkv_stacked_to_per_head,
    permute_rope_weight,
    rope_permutation,
    stack_head_weights,
    unstack_head_weights,
)


def test_missing_biases_of_a_grouped_module_are_zeros_of_the_key_value_width():
    torch.manual_seed(0)
    d_model, d_in, kv_dim = 8, 6, 4  # 2 query heads of 4, 1 key/value head: W_K is (4, 6)
    q_w, k_w, v_w, o_w = (
        torch.randn(d_model, d_in),
        torch.randn(kv_dim, d_in),
        torch.randn(kv_dim, d_in),
        torch.randn(5, d_model),
    )
    q_b = torch.randn(d_model)
    module = from_projection_weights(q_w, k_w, v_w, o_w, num_heads=2, layout="out_in", q_bias=q_b)
    assert torch.equal(module.qkv_proj.bias, torch.cat([q_b, torch.zeros(2 * kv_dim)]))
    v_b = torch.randn(kv_dim)
    module = from_projection_weights(q_w, k_w, v_w, o_w, num_heads=2, layout="out_in", v_bias=v_b)
    assert torch.equal(module.qkv_proj.bias, torch.cat([torch.zeros(d_model + kv_dim), v_b]))


def test_a_fused_bias_reaches_the_keys_too():
    torch.manual_seed(1)
    qkv_w, o_w, qkv_b = torch.randn(24, 8), torch.randn(8, 8), torch.randn(24)
    module = from_fused_qkv(qkv_w, o_w, num_heads=2, fused_layout="stacked", qkv_bias=qkv_b)
    assert torch.equal(module.qkv_proj.bias, qkv_b) and torch.equal(module.qkv_proj.weight, qkv_w)


def test_options_of_head_weights_reach_the_module():
    torch.manual_seed(2)
    heads = [[torch.randn(4, 8) for _ in range(2)] for _ in range(3)]
    module = from_head_weights(*heads, torch.randn(8, 8), layout="out_in", causal=True)
    assert module.causal is True
    x = torch.randn(1, 3, 8)
    changed = x.clone()
    changed[0, 2] += 1.0
    with torch.no_grad():  # causal: the first two outputs do not see the third token
        assert torch.equal(module(x)[0, :2], module(changed)[0, :2])


t = torch.zeros
W = (t(4, 3), t(4, 3), t(4, 3), t(5, 4))  # W_Q, W_K, W_V (d_model=4, d_in=3), W_O (d_out=5, d_model) in out_in layout
HEADS = ([t(2, 3)] * 2, [t(2, 3)] * 2, [t(2, 3)] * 2)  # two heads of (d_head=2, d_in=3)
SPLIT = ("interleaved", "half_split")

# Every check of every loader, with the message a learner reads: the argument, what was expected, what was given.
BAD_CALLS = {
    "stack: a tensor": (
        lambda: stack_head_weights(t(2, 2, 3)),
        TypeError,
        "head_weights must be a non-empty list of (d_head, d_in) tensors, got Tensor",
    ),
    "stack: empty": (
        lambda: stack_head_weights([]),
        TypeError,
        "head_weights must be a non-empty list of (d_head, d_in) tensors, got list",
    ),
    "stack: first not a tensor": (
        lambda: stack_head_weights(["w"]),
        TypeError,
        "head_weights[0] must be a torch.Tensor, got str",
    ),
    "stack: second not a tensor": (
        lambda: stack_head_weights([t(2, 3), "w"]),
        TypeError,
        "head_weights[1] must be a torch.Tensor, got str",
    ),
    "stack: 1-D heads of one shape": (
        lambda: stack_head_weights([t(3), t(3)]),
        ValueError,
        "head_weights[0] must be a 2-D (d_head, d_in) matrix, got shape (3,)",
    ),
    "stack: shapes differ": (
        lambda: stack_head_weights([t(2, 3), t(2, 4)]),
        ValueError,
        "head_weights[1] must have the shape of head_weights[0] (2, 3), got shape (2, 4)",
    ),
    "unstack: not a tensor": (
        lambda: unstack_head_weights("w", 2),
        TypeError,
        "weight must be a torch.Tensor, got str",
    ),
    "unstack: 1-D": (
        lambda: unstack_head_weights(t(6), 2),
        ValueError,
        "weight must be 2-D (h * d_head, d_in), got shape (6,)",
    ),
    "unstack: rows": (
        lambda: unstack_head_weights(t(6, 2), 4),
        ValueError,
        "num_heads must divide weight.shape[0]: expected weight.shape[0] % num_heads == 0, "
        "got weight.shape[0]=6, num_heads=4",
    ),
    "unstack: heads a float": (
        lambda: unstack_head_weights(t(6, 2), 2.0),
        TypeError,
        "num_heads must be an int, got float 2.0 (expected >= 1)",
    ),
    "rope permutation: source": (
        lambda: rope_permutation(4, "x", "interleaved"),
        ValueError,
        "source must be one of 'interleaved', 'half_split', got 'x'",
    ),
    "rope permutation: target": (
        lambda: rope_permutation(4, "interleaved", "x"),
        ValueError,
        "target must be one of 'interleaved', 'half_split', got 'x'",
    ),
    "permute: not a tensor": (
        lambda: permute_rope_weight("w", 2, *SPLIT),
        TypeError,
        "weight must be a torch.Tensor, got str",
    ),
    "permute: 3-D": (
        lambda: permute_rope_weight(t(8, 2, 2), 2, *SPLIT),
        ValueError,
        "weight must be a (num_heads * d_head, d_in) matrix or a (num_heads * d_head,) bias, got shape (8, 2, 2)",
    ),
    "permute: rows": (
        lambda: permute_rope_weight(t(8, 2), 3, *SPLIT),
        ValueError,
        "num_heads must divide weight.shape[0]: expected weight.shape[0] % num_heads == 0, "
        "got weight.shape[0]=8, num_heads=3",
    ),
    "permute: heads a float": (
        lambda: permute_rope_weight(t(8, 2), 2.0, *SPLIT),
        TypeError,
        "num_heads must be an int, got float 2.0 (expected >= 1)",
    ),
    "projections: q not a matrix": (
        lambda: from_projection_weights(t(4), *W[1:], num_heads=2, layout="out_in"),
        ValueError,
        "q_weight must be a 2-D matrix, got shape (4,)",
    ),
    "projections: k not a matrix": (
        lambda: from_projection_weights(W[0], t(4), *W[2:], num_heads=2, layout="out_in"),
        ValueError,
        "k_weight must be a 2-D matrix, got shape (4,)",
    ),
    "projections: v not a matrix": (
        lambda: from_projection_weights(*W[:2], t(4), W[3], num_heads=2, layout="out_in"),
        ValueError,
        "v_weight must be a 2-D matrix, got shape (4,)",
    ),
    "projections: o not a matrix": (
        lambda: from_projection_weights(*W[:3], t(4), num_heads=2, layout="out_in"),
        ValueError,
        "o_weight must be a 2-D matrix, got shape (4,)",
    ),
    "projections: layout": (
        lambda: from_projection_weights(*W, num_heads=2, layout="rows"),
        ValueError,
        "layout must be one of 'out_in', 'in_out', got 'rows'",
    ),
    "projections: heads do not divide d_model": (
        lambda: from_projection_weights(*W, num_heads=3, layout="out_in"),
        ValueError,
        "num_heads must divide d_model: expected d_model % num_heads == 0, got d_model=4, num_heads=3",
    ),
    "projections: heads a float": (
        lambda: from_projection_weights(*W, num_heads=2.0, layout="out_in"),
        TypeError,
        "num_heads must be an int, got float 2.0 (expected >= 1)",
    ),
    "projections: k rows, in_out": (
        lambda: from_projection_weights(t(3, 4), t(3, 3), t(3, 3), t(4, 5), num_heads=2, layout="in_out"),
        ValueError,
        "k_weight must have the shape of q_weight (3, 4) (d_in, d_model) with layout='in_out' (or, for grouped-query "
        "attention, num_kv_heads * d_head rows with num_kv_heads dividing num_heads=2, the same for k_weight and "
        "v_weight), got shape (3, 3)",
    ),
    "projections: v rows, out_in": (
        lambda: from_projection_weights(t(4, 3), t(4, 3), t(3, 3), t(5, 4), num_heads=2, layout="out_in"),
        ValueError,
        "v_weight must have the shape of q_weight (4, 3) (d_model, d_in) with layout='out_in' (or, for grouped-query "
        "attention, num_kv_heads * d_head rows with num_kv_heads dividing num_heads=2, the same for k_weight and "
        "v_weight), got shape (3, 3)",
    ),
    "projections: no key rows": (
        lambda: from_projection_weights(t(4, 3), t(0, 3), t(0, 3), t(5, 4), num_heads=2, layout="out_in"),
        ValueError,
        "k_weight must have the shape of q_weight (4, 3) (d_model, d_in) with layout='out_in' (or, for grouped-query "
        "attention, num_kv_heads * d_head rows with num_kv_heads dividing num_heads=2, the same for k_weight and "
        "v_weight), got shape (0, 3)",
    ),
    "heads: layout": (
        lambda: from_head_weights(*HEADS, t(3, 4), layout="rows"),
        ValueError,
        "layout must be one of 'out_in', 'in_out', got 'rows'",
    ),
    "heads: q_heads a tensor": (
        lambda: from_head_weights(t(2, 2, 3), *HEADS[1:], t(3, 4), layout="out_in"),
        TypeError,
        "q_heads must be a non-empty list of per-head matrices, got Tensor",
    ),
    "heads: k_heads empty": (
        lambda: from_head_weights(HEADS[0], [], HEADS[2], t(3, 4), layout="out_in"),
        TypeError,
        "k_heads must be a non-empty list of per-head matrices, got list",
    ),
    "heads: k_heads a string": (
        lambda: from_head_weights(HEADS[0], "kk", HEADS[2], t(3, 4), layout="out_in"),
        TypeError,
        "k_heads must be a non-empty list of per-head matrices, got str",
    ),
    "heads: second q head shape": (
        lambda: from_head_weights([t(2, 3), t(1, 3)], *HEADS[1:], t(3, 4), layout="out_in"),
        ValueError,
        "q_heads[1] must have the shape of q_heads[0] (2, 3) (d_head, d_in) with layout='out_in', got shape (1, 3)",
    ),
    "heads: one v head too many": (
        lambda: from_head_weights(*HEADS[:2], [t(2, 3)] * 3, t(3, 4), layout="out_in"),
        ValueError,
        "v_heads must hold one matrix per head (2), got 3",
    ),
    "heads: k head shape, in_out": (
        lambda: from_head_weights([t(3, 2)] * 2, [t(3, 2), t(3, 1)], [t(3, 2)] * 2, t(4, 3), layout="in_out"),
        ValueError,
        "k_heads[1] must have the shape of q_heads[0] (3, 2) (d_in, d_head) with layout='in_out', got shape (3, 1)",
    ),
    "heads: v head shape, out_in": (
        lambda: from_head_weights(*HEADS[:2], [t(2, 3), t(1, 3)], t(3, 4), layout="out_in"),
        ValueError,
        "v_heads[1] must have the shape of q_heads[0] (2, 3) (d_head, d_in) with layout='out_in', got shape (1, 3)",
    ),
    "heads: o, in_out": (
        lambda: from_head_weights([t(3, 2)] * 2, [t(3, 2)] * 2, [t(3, 2)] * 2, t(3, 4), layout="in_out"),
        ValueError,
        "o_weight must take the 2 heads' 4 concatenated features: expected shape (4, d_out) with layout='in_out', "
        "got shape (3, 4)",
    ),
    "heads: o, out_in": (
        lambda: from_head_weights(*HEADS, t(4, 3), layout="out_in"),
        ValueError,
        "o_weight must take the 2 heads' 4 concatenated features: expected shape (d_out, 4) with layout='out_in', "
        "got shape (4, 3)",
    ),
    "heads: o not a matrix": (
        lambda: from_head_weights(*HEADS, t(4), layout="out_in"),
        ValueError,
        "o_weight must be a 2-D matrix, got shape (4,)",
    ),
    "fused: layout": (
        lambda: from_fused_qkv(t(12, 4), t(4, 4), num_heads=2, fused_layout="rows"),
        ValueError,
        "fused_layout must be one of 'stacked', 'per_head', got 'rows'",
    ),
    "fused: not a matrix": (
        lambda: from_fused_qkv(t(12), t(4, 4), num_heads=2, fused_layout="stacked"),
        ValueError,
        "qkv_weight must be a 2-D (3 * d_model, d_in) matrix, got shape (12,)",
    ),
    "fused: heads a float": (
        lambda: from_fused_qkv(t(12, 4), t(4, 4), num_heads=2.0, fused_layout="stacked"),
        TypeError,
        "num_heads must be an int, got float 2.0 (expected >= 1)",
    ),
    "fused: grouped per head": (
        lambda: from_fused_qkv(t(8, 4), t(4, 4), num_heads=2, num_kv_heads=1, fused_layout="per_head"),
        ValueError,
        "fused_layout='per_head' holds one [q|k|v] block per head, so num_kv_heads must equal num_heads there; "
        "got num_heads=2, num_kv_heads=1 (use fused_layout='stacked')",
    ),
    "fused: rows": (
        lambda: from_fused_qkv(t(10, 4), t(4, 4), num_heads=2, fused_layout="stacked"),
        ValueError,
        "3 * num_heads must divide qkv_weight.shape[0]: expected qkv_weight.shape[0] % (3 * num_heads) == 0, "
        "got qkv_weight.shape[0]=10, 3 * num_heads=6",
    ),
    "fused: rows, grouped": (
        lambda: from_fused_qkv(t(10, 4), t(4, 4), num_heads=2, num_kv_heads=1, fused_layout="stacked"),
        ValueError,
        "num_heads + 2 * num_kv_heads must divide qkv_weight.shape[0]: expected qkv_weight.shape[0] % "
        "(num_heads + 2 * num_kv_heads) == 0, got qkv_weight.shape[0]=10, num_heads + 2 * num_kv_heads=4",
    ),
    "fused: bias": (
        lambda: from_fused_qkv(t(12, 4), t(4, 4), num_heads=2, fused_layout="stacked", qkv_bias=t(4)),
        ValueError,
        "qkv_bias must have shape (12,), got shape (4,)",
    ),
    "fused: bias not a tensor": (
        lambda: from_fused_qkv(t(12, 4), t(4, 4), num_heads=2, fused_layout="stacked", qkv_bias=[0.0]),
        TypeError,
        "qkv_bias must be a torch.Tensor, got list",
    ),
    "torch: not a MultiheadAttention": (
        lambda: from_torch_mha(nn.Linear(2, 2)),
        TypeError,
        "mha must be a torch.nn.MultiheadAttention, got Linear",
    ),
    "torch: separate kdim": (
        lambda: from_torch_mha(nn.MultiheadAttention(4, 2, kdim=3, vdim=3)),
        ValueError,
        "mha must have kdim == vdim == embed_dim (self-attention), got separate kdim/vdim",
    ),
    "torch: bias_kv": (
        lambda: from_torch_mha(nn.MultiheadAttention(4, 2, add_bias_kv=True)),
        ValueError,
        "mha must not use add_bias_kv or add_zero_attn, which add an extra key position",
    ),
    "options read off the weights": (
        lambda: from_fused_qkv(t(12, 4), t(4, 4), num_heads=2, fused_layout="stacked", d_model=4, dtype=None),
        TypeError,
        "d_model, dtype cannot be passed to a loader: it reads sizes, which biases exist, device and dtype off the "
        "weights; its options may only be causal, dropout, rope, rope_base, rope_convention or max_seq_len — "
        "convert afterwards with module.to(device, dtype)",
    ),
}
for bias, size in (("q_bias", 4), ("k_bias", 4), ("v_bias", 4), ("o_bias", 5)):
    BAD_CALLS[f"projections: {bias}"] = (
        lambda bias=bias: from_projection_weights(*W, num_heads=2, layout="out_in", **{bias: t(3)}),
        ValueError,
        f"{bias} must have shape ({size},), got shape (3,)",
    )
for layout_name, convert in (
    ("per head to stacked", fused_qkv_per_head_to_stacked),
    ("stacked to per head", fused_qkv_stacked_to_per_head),
):
    BAD_CALLS |= {
        f"{layout_name}: not a tensor": (
            lambda c=convert: c("w", 2),
            TypeError,
            "weight must be a torch.Tensor, got str",
        ),
        f"{layout_name}: 3-D": (
            lambda c=convert: c(t(6, 2, 2), 2),
            ValueError,
            "weight must be a (3 * d_model, d_in) weight or a (3 * d_model,) bias, got shape (6, 2, 2)",
        ),
        f"{layout_name}: rows": (
            lambda c=convert: c(t(6, 2), 4),
            ValueError,
            "3 * num_heads must divide weight.shape[0]: expected weight.shape[0] % (3 * num_heads) == 0, "
            "got weight.shape[0]=6, 3 * num_heads=12",
        ),
        f"{layout_name}: heads a float": (
            lambda c=convert: c(t(6, 2), 2.0),
            TypeError,
            "num_heads must be an int, got float 2.0 (expected >= 1)",
        ),
    }


@pytest.mark.parametrize("case", list(BAD_CALLS))
def test_every_check_of_the_loaders_names_the_argument_what_was_expected_and_what_was_given(case):
    call, kind, message = BAD_CALLS[case]
    with raises(kind, message):
        call()


def test_one_key_value_head_of_one_row_is_grouped_query_attention():
    # d_head = 1: a single key/value head is one row, shared by an odd number of query heads.
    torch.manual_seed(3)
    q_w, k_w, v_w, o_w = torch.randn(3, 2), torch.randn(1, 2), torch.randn(1, 2), torch.randn(3, 3)
    module = from_projection_weights(q_w, k_w, v_w, o_w, num_heads=3, layout="out_in")
    assert (module.num_heads, module.num_kv_heads, module.d_head) == (3, 1, 1)
    assert torch.equal(module.qkv_proj.weight, torch.cat([q_w, k_w, v_w]))


def test_a_single_head_loads_from_head_weights():
    torch.manual_seed(4)
    q, k, v, o = torch.randn(2, 3), torch.randn(2, 3), torch.randn(2, 3), torch.randn(3, 2)
    module = from_head_weights([q], [k], [v], o, layout="out_in")
    assert (module.num_heads, module.d_head) == (1, 2)
    assert torch.equal(module.qkv_proj.weight, torch.cat([q, k, v])) and torch.equal(module.out_proj.weight, o)
