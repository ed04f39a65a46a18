"""What the KV cache costs: a calculator, and the published configurations of a few open models.

Taught in notebook 08 ("Attention at scale"), section 5.

While generating, every layer keeps the keys and the values of every earlier token, for
every key/value head::

    bytes = 2 (K and V) × layers × kv_heads × head_dim × tokens × batch × bytes_per_element

Query heads do not appear: grouped-query attention (GQA) lets several query heads share one
key/value head, and multi-query attention (MQA) lets all of them share a single one, which
divides the cache by ``num_heads / num_kv_heads``.

Multi-head latent attention (MLA, notebook 13) keeps every head but caches, per token and layer, one latent of
``d_latent`` numbers and one rotated key of ``d_rope`` numbers shared by the heads::

    bytes = layers × (d_latent + d_rope) × tokens × batch × bytes_per_element
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import NamedTuple

import torch

from .checks import expect_choice, expect_divisible, expect_int

__all__ = [
    "BYTES_PER_ELEMENT",
    "DEEPSEEK_V2",
    "PRESETS",
    "CacheVariant",
    "LatentConfig",
    "ModelConfig",
    "bytes_per_element",
    "format_bytes",
    "kv_cache_bytes",
    "kv_cache_bytes_for",
    "kv_cache_variants",
    "latent_cache_bytes",
]

BYTES_PER_ELEMENT: Mapping[str, int] = MappingProxyType(
    {"float32": 4, "float16": 2, "bfloat16": 2, "float8": 1, "int8": 1}
)


@dataclass(frozen=True)
class ModelConfig:
    """The attention shape of a model: what the KV cache's size depends on.

    ``num_kv_heads`` must divide ``num_heads``: equal for multi-head attention (MHA),
    1 for multi-query attention (MQA), in between for grouped-query attention (GQA).
    ``source`` says where the numbers were published.
    """

    name: str
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    source: str = ""

    def __post_init__(self) -> None:
        for field in ("num_layers", "num_heads", "num_kv_heads", "head_dim"):
            expect_int(field, getattr(self, field))
        if self.num_kv_heads > self.num_heads:
            raise ValueError(
                f"num_kv_heads must be <= num_heads (several query heads share one key/value head), "
                f"got num_kv_heads={self.num_kv_heads}, num_heads={self.num_heads}"
            )
        expect_divisible("num_heads", self.num_heads, "num_kv_heads", self.num_kv_heads)

    @property
    def attention(self) -> str:
        """``"MHA"``, ``"GQA"`` or ``"MQA"``, from ``num_kv_heads``."""
        if self.num_kv_heads == self.num_heads:
            return "MHA"
        return "MQA" if self.num_kv_heads == 1 else "GQA"


# Published configurations. head_dim = hidden size / num_heads for each of them.
PRESETS: Mapping[str, ModelConfig] = MappingProxyType(
    {
        # openai/gpt-2, src/model.py, default_hparams(): n_layer=12, n_head=12, n_embd=768 (the
        # 124M model); past_shape() there caches [2, n_head, sequence, n_embd // n_head] per layer.
        "GPT-2 small": ModelConfig(
            name="GPT-2 small",
            num_layers=12,
            num_heads=12,
            num_kv_heads=12,
            head_dim=64,
            source="openai/gpt-2, src/model.py (default_hparams)",
        ),
        # meta-llama/Llama-2-7b-hf, config.json: hidden_size=4096, num_hidden_layers=32,
        # num_attention_heads=32, num_key_value_heads=32; meta-llama/llama, MODEL_CARD.md: GQA only
        # for 70B. (meta-llama/llama-models' sku_list.py says n_kv_heads=8 for every Llama 2 size,
        # against both; it is not used for this preset.)
        "Llama-2-7B": ModelConfig(
            name="Llama-2-7B",
            num_layers=32,
            num_heads=32,
            num_kv_heads=32,
            head_dim=128,
            source="meta-llama/Llama-2-7b-hf, config.json; meta-llama/llama, MODEL_CARD.md",
        ),
        # meta-llama/llama-models, models/sku_list.py, llama2_base_models(), Llama 2 70b: dim=8192,
        # n_layers=80, n_heads=64, n_kv_heads=8; meta-llama/llama, MODEL_CARD.md: "The 70B version
        # uses Grouped-Query Attention (GQA)".
        "Llama-2-70B": ModelConfig(
            name="Llama-2-70B",
            num_layers=80,
            num_heads=64,
            num_kv_heads=8,
            head_dim=128,
            source="meta-llama/llama-models, models/sku_list.py; meta-llama/llama, MODEL_CARD.md",
        ),
        # meta-llama/llama-models, models/sku_list.py, llama3_base_models(), Llama 3 8b: dim=4096,
        # n_layers=32, n_heads=32, n_kv_heads=8 (as in meta-llama/Meta-Llama-3-8B-Instruct's config.json).
        "Llama-3-8B": ModelConfig(
            name="Llama-3-8B",
            num_layers=32,
            num_heads=32,
            num_kv_heads=8,
            head_dim=128,
            source="meta-llama/llama-models, models/sku_list.py; meta-llama/Meta-Llama-3-8B-Instruct, config.json",
        ),
        # mistralai/Mistral-7B-v0.1, config.json: hidden_size=4096, num_hidden_layers=32,
        # num_attention_heads=32, num_key_value_heads=8 (Mistral 7B paper, table 1: head_dim=128).
        # Its 4096-token sliding window lets mistral-inference cap the cache at 4096 tokens (a
        # rolling buffer); the formula here counts every token, as a cache without that cap does.
        "Mistral-7B-v0.1": ModelConfig(
            name="Mistral-7B-v0.1",
            num_layers=32,
            num_heads=32,
            num_kv_heads=8,
            head_dim=128,
            source="mistralai/Mistral-7B-v0.1, config.json",
        ),
    }
)


@dataclass(frozen=True)
class LatentConfig:
    """The attention shape of a model with multi-head latent attention (notebook 13): ``num_heads`` heads of
    ``head_dim`` (what MHA would cache per head), and per token a latent of ``d_latent`` numbers and a rotated key
    of ``d_rope`` numbers shared by the heads (what MLA caches). ``source`` says where the numbers were published.
    """

    name: str
    num_layers: int
    num_heads: int
    head_dim: int
    d_latent: int
    d_rope: int
    source: str = ""

    def __post_init__(self) -> None:
        for field in ("num_layers", "num_heads", "head_dim", "d_latent"):
            expect_int(field, getattr(self, field))
        expect_int("d_rope", self.d_rope, 0)


# deepseek-ai/DeepSeek-V2, config.json: num_hidden_layers=60, num_attention_heads=128, qk_nope_head_dim=128,
# v_head_dim=128, kv_lora_rank=512 (d_latent), qk_rope_head_dim=64 (d_rope); the paper's section 2.1.4: the cache
# "equal to GQA with only 2.25 groups".
DEEPSEEK_V2 = LatentConfig(
    name="DeepSeek-V2",
    num_layers=60,
    num_heads=128,
    head_dim=128,
    d_latent=512,
    d_rope=64,
    source="deepseek-ai/DeepSeek-V2, config.json; DeepSeek-AI (2024), section 2.1",
)


def bytes_per_element(dtype: str | torch.dtype) -> int:
    """Bytes of one cached number: ``"float32"`` 4, ``"float16"``/``"bfloat16"`` 2, ``"float8"``/``"int8"`` 1,
    or the size of a ``torch.dtype``."""
    if isinstance(dtype, torch.dtype):
        return torch.empty((), dtype=dtype).element_size()
    expect_choice("dtype", dtype, tuple(BYTES_PER_ELEMENT))
    return BYTES_PER_ELEMENT[dtype]


def kv_cache_bytes(
    *,
    num_layers: int,
    num_kv_heads: int,
    head_dim: int,
    tokens: int,
    batch: int = 1,
    bytes_per_element: int = 2,
) -> int:
    """Size in bytes of a full KV cache: ``2 × layers × kv_heads × head_dim × tokens × batch × bytes``.

    The 2 counts the keys *and* the values; each layer caches
    ``(batch, num_kv_heads, tokens, head_dim)`` of each. ``tokens = 0`` (an empty cache) gives 0.
    """
    expect_int("num_layers", num_layers)
    expect_int("num_kv_heads", num_kv_heads)
    expect_int("head_dim", head_dim)
    expect_int("tokens", tokens, 0)
    expect_int("batch", batch)
    expect_int("bytes_per_element", bytes_per_element)
    return 2 * num_layers * num_kv_heads * head_dim * tokens * batch * bytes_per_element


def latent_cache_bytes(
    *,
    num_layers: int,
    d_latent: int,
    d_rope: int,
    tokens: int,
    batch: int = 1,
    bytes_per_element: int = 2,
) -> int:
    """Size in bytes of a full latent-attention cache: ``layers × (d_latent + d_rope) × tokens × batch × bytes``.

    No factor 2 and no heads: each layer caches one latent ``(batch, tokens, d_latent)``, from which every head's
    keys and values are rebuilt, and one rotated key ``(batch, tokens, d_rope)`` shared by the heads.
    """
    expect_int("num_layers", num_layers)
    expect_int("d_latent", d_latent)
    expect_int("d_rope", d_rope, 0)
    expect_int("tokens", tokens, 0)
    expect_int("batch", batch)
    expect_int("bytes_per_element", bytes_per_element)
    return num_layers * (d_latent + d_rope) * tokens * batch * bytes_per_element


def _config(config: ModelConfig | str) -> ModelConfig:
    if isinstance(config, ModelConfig):
        return config
    expect_choice("config", config, tuple(PRESETS))
    return PRESETS[config]


def kv_cache_bytes_for(
    config: ModelConfig | str, *, tokens: int, batch: int = 1, dtype: str | torch.dtype = "bfloat16"
) -> int:
    """:func:`kv_cache_bytes` of a :class:`ModelConfig` or the name of one of :data:`PRESETS`."""
    model = _config(config)
    return kv_cache_bytes(
        num_layers=model.num_layers,
        num_kv_heads=model.num_kv_heads,
        head_dim=model.head_dim,
        tokens=tokens,
        batch=batch,
        bytes_per_element=bytes_per_element(dtype),
    )


class CacheVariant(NamedTuple):
    """One bar of the MHA / GQA / MQA comparison."""

    name: str
    num_kv_heads: int
    bytes: int


def kv_cache_variants(
    config: ModelConfig | str,
    *,
    tokens: int,
    batch: int = 1,
    dtype: str | torch.dtype = "bfloat16",
    gqa_kv_heads: int | None = None,
) -> list[CacheVariant]:
    """The cache of the same model (layers, heads, head size) as MHA, GQA and MQA.

    MHA keeps ``num_heads`` key/value heads, MQA one, GQA ``gqa_kv_heads`` (default: the
    model's own ``num_kv_heads``; give it for a model that is MHA itself, e.g. 8). Returns
    ``[CacheVariant("MHA", ...), CacheVariant("GQA", ...), CacheVariant("MQA", ...)]``.
    """
    model = _config(config)
    groups = model.num_kv_heads if gqa_kv_heads is None else expect_int("gqa_kv_heads", gqa_kv_heads)
    if groups > model.num_heads:
        raise ValueError(f"gqa_kv_heads must be <= num_heads={model.num_heads}, got {groups}")
    expect_divisible("num_heads", model.num_heads, "gqa_kv_heads", groups)
    size = bytes_per_element(dtype)
    return [
        CacheVariant(
            name,
            kv_heads,
            kv_cache_bytes(
                num_layers=model.num_layers,
                num_kv_heads=kv_heads,
                head_dim=model.head_dim,
                tokens=tokens,
                batch=batch,
                bytes_per_element=size,
            ),
        )
        for name, kv_heads in (("MHA", model.num_heads), ("GQA", groups), ("MQA", 1))
    ]


def format_bytes(n: int | float) -> str:
    """``1536`` -> ``"1.50 KiB"``: binary units (KiB = 1024 bytes, MiB, GiB, TiB)."""
    if isinstance(n, bool) or not isinstance(n, (int, float)):
        raise TypeError(f"n must be a number of bytes, got {type(n).__name__} {n!r}")
    if n < 0:
        raise ValueError(f"n must be >= 0 bytes, got {n}")
    value = float(n)
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        # Compared as printed: 1048575 bytes is 1023.999 KiB, which prints as 1.00 MiB, not 1024.00 KiB.
        if (value if unit == "bytes" else round(value, 2)) < 1024:
            return f"{int(value)} bytes" if unit == "bytes" else f"{value:.2f} {unit}"
        value /= 1024
    return f"{value:.2f} TiB"
