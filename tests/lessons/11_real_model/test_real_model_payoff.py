"""Notebook 11's payoff: the real model with the learner's attention (tests/learner_reference.py) in
every layer computes what the package's computes; GQA is multi-head attention with repeated K/V heads."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from learner_modules import causal_module
from learner_reference import MyCausalSelfAttention
from notebook_cells import payoff_cell_problems

from mhsa_helpers.kv_cache import KVCache
from mhsa_helpers.lessons.real_model import copy_loss, copying_test, load_model
from mhsa_helpers.lessons.real_model.swap import YourAttention, copy_gqa_weights, with_attention
from mhsa_helpers.mha import MultiHeadSelfAttention
from mhsa_helpers.real_model import generate
from mhsa_helpers.rope import RotaryEmbedding
from mhsa_helpers.teaching.claims import ClaimError, claim
from mhsa_helpers.teaching.modules import explained


@pytest.fixture(scope="module")
def models():
    torch.set_num_threads(1)
    model, tokenizer = load_model()
    return model, with_attention(model, MyCausalSelfAttention), tokenizer


def small_gqa(bias: bool = True, seed: int = 0) -> MultiHeadSelfAttention:
    torch.manual_seed(seed)
    theirs = MultiHeadSelfAttention(
        12, 6, num_kv_heads=2, causal=True, rope=RotaryEmbedding(2), qkv_bias=bias, out_bias=bias
    )
    with torch.no_grad():
        for p in theirs.parameters():
            p.normal_()  # biases too: a bias copied to the wrong head must show
    return theirs


@pytest.mark.parametrize("bias", [True, False])
def test_gqa_copied_into_a_multi_head_module_computes_the_same(bias):
    theirs = small_gqa(bias)
    mine = copy_gqa_weights(MyCausalSelfAttention(12, 6, bias=bias), theirs)
    x = torch.randn(3, 7, 12, generator=torch.Generator().manual_seed(1))
    want, want_weights = theirs(x, need_weights=True)
    got, got_weights = mine(x, need_weights=True)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got_weights, want_weights, atol=1e-6, rtol=1e-5)
    # Query heads 0-2 read key/value head 0, heads 3-5 key/value head 1 (each d_head = 2 rows).
    k = theirs.qkv_proj.weight[12:16]
    for head in range(6):
        torch.testing.assert_close(mine.w_k.weight[2 * head : 2 * head + 2], k[2 * (head // 3) : 2 * (head // 3) + 2])


def test_the_copy_needs_matching_biases_shapes_and_rope():
    with pytest.raises(ValueError, match="biases"):
        copy_gqa_weights(MyCausalSelfAttention(12, 6, bias=False), small_gqa(bias=True))
    with pytest.raises(ValueError, match=r"mine.w_q.weight must have shape \(12, 12\)"):
        copy_gqa_weights(MyCausalSelfAttention(12, 6, d_in=10), small_gqa())
    with pytest.raises(ValueError, match="RoPE on interleaved pairs"):
        copy_gqa_weights(MyCausalSelfAttention(12, 6), MultiHeadSelfAttention(12, 6, causal=True))
    with pytest.raises(TypeError, match=r"nn\.Linear named w_q"):
        copy_gqa_weights(torch.nn.Linear(12, 12), small_gqa())
    with pytest.raises(TypeError, match="MultiHeadSelfAttention"):
        copy_gqa_weights(MyCausalSelfAttention(12, 6), torch.nn.Linear(12, 12))


def test_every_layer_holds_the_learners_module_and_the_rest_is_shared(models):
    model, mine, _ = models
    assert len(mine.blocks) == len(model.blocks) == 30
    for theirs_block, block in zip(model.blocks, mine.blocks, strict=True):
        assert isinstance(block.attn, YourAttention) and isinstance(block.attn.module, MyCausalSelfAttention)
        assert block.attn.module.w_k.weight.shape == (576, 576)  # 9 heads, expanded from 3
        assert block.mlp is theirs_block.mlp and block.attn_norm is theirs_block.attn_norm
        assert isinstance(theirs_block.attn, MultiHeadSelfAttention)  # the package's model is unchanged
    assert mine.embed is model.embed and mine.lm_head.weight is model.embed.weight


def test_the_learners_model_gives_the_packages_logits_and_weights(models):
    model, mine, _ = models
    data = copying_test(model.config.vocab_size)
    with torch.no_grad():
        want, want_weights = model(data.tokens, need_weights=True)
        got, got_weights = mine(data.tokens, need_weights=True)
    scale = float(want.abs().max())
    assert scale > 10.0
    assert float((got - want).abs().max()) < 1e-5 * scale * 100  # float32 sums in another order: ~1e-4 here
    assert torch.equal(got.argmax(-1), want.argmax(-1))
    for layer, (w_got, w_want) in enumerate(zip(got_weights, want_weights, strict=True)):
        torch.testing.assert_close(w_got, w_want, atol=1e-4, rtol=0, msg=f"layer {layer}")


def test_greedy_generation_with_the_learners_modules_and_a_cache_gives_the_same_tokens(models):
    model, mine, tokenizer = models
    prompt = tokenizer.chat_prompt([{"role": "user", "content": "What is the capital of France?"}])
    ids = torch.tensor([tokenizer.encode(prompt)])
    want = generate(model, ids, 8, eos_token_id=tokenizer.eos_token_id)
    got = generate(mine, ids, 8, eos_token_id=tokenizer.eos_token_id)
    assert torch.equal(got, want) and "Paris" in tokenizer.decode(got[0, ids.shape[1] :])
    # The learner's cache holds all 9 heads' keys (the package's holds 3).
    cache = mine.new_cache()
    with torch.no_grad():
        mine(ids[:, :5], cache=cache)
    assert isinstance(cache[0], KVCache) and cache[0].keys.shape == (1, 9, 5, 64)


def test_zeroing_heads_works_on_the_learners_model_as_on_the_packages(models):
    model, mine, _ = models
    data = copying_test(model.config.vocab_size)
    heads = [(18, 6), (17, 3)]
    zeroed = copy_loss(mine, data, heads)
    assert zeroed == pytest.approx(copy_loss(model, data, heads), abs=1e-3)
    assert zeroed > copy_loss(mine, data) + 0.5  # the hook really zeroed something


def test_bad_arguments_are_named(models):
    model, _, _ = models
    with pytest.raises(TypeError, match="class such as MyCausalSelfAttention"):
        with_attention(model, MyCausalSelfAttention(576, 9))
    with pytest.raises(TypeError, match="model must be a CausalLM"):
        with_attention(torch.nn.Linear(2, 2), MyCausalSelfAttention)
    with pytest.raises(TypeError, match=r"must return an nn\.Module"):
        with_attention(model, lambda *args, **kwargs: 3)
    with pytest.raises(ValueError, match="token_positions"):
        YourAttention(MyCausalSelfAttention(8, 2))(torch.zeros(1, 2, 8), token_positions=torch.arange(2))


NOTEBOOK = Path(__file__).resolve().parents[3] / "notebooks" / "11_real_model.ipynb"


def test_the_payoff_cell_runs_its_claims_where_a_failure_is_explained():
    assert payoff_cell_problems(NOTEBOOK, "h22c-11-run") == []


@pytest.mark.parametrize(
    ("slips", "cause"),
    [
        ({"half_split": True}, "'rotating pairs half-split instead of interleaved'"),
        ({"mask_top_left": True}, "'mask not offset by the cache'"),
        ({"positions": "zero"}, "'positions not offset by the cache'"),
    ],
)
def test_a_wrong_module_in_the_real_model_is_told_its_cause(models, slips, cause, capsys):
    """The payoff cell's claims on the real model built from a learner's wrong module: the full pass breaks with
    the pairing, greedy decoding with a cache with the offsets; either way the cell says the cause in one line."""
    model, _, tokenizer = models
    ids = torch.tensor([tokenizer.encode("The capital of France is Paris. The capital of France is")])
    wrong = causal_module(**slips)
    with pytest.raises(ClaimError), explained(wrong):
        yours = with_attention(model, wrong)
        with torch.no_grad():
            same = torch.equal(yours(ids).argmax(-1), model(ids).argmax(-1))
        claim("and its most likely next token is the package's at every position", same)
        claim("greedy decoding with your modules and a KV cache writes the same tokens",
              torch.equal(generate(yours, ids, 3), generate(model, ids, 3)))  # fmt: skip
    printed = capsys.readouterr().out.strip().splitlines()
    assert (
        printed[-1].startswith("What the checker of notebook 06, exercise 4 finds in your module (the likely cause)")
        and cause in printed[-1]
    )
