"""The KV-cache calculator: defaults, boundaries and argument names that mutation testing
(``make mutate``) showed unpinned. Expected sizes are the docstring's formula in plain
integers: 2 (K and V) × layers × kv_heads × head_dim × tokens × batch × bytes per element.
"""

from __future__ import annotations

import pytest

from mhsa_helpers.kv_cache_memory import (
    ModelConfig,
    format_bytes,
    kv_cache_bytes,
    kv_cache_bytes_for,
    kv_cache_variants,
)


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (1023, "1023 bytes"),
        (1024, "1.00 KiB"),  # the unit boundary: never "1024 bytes"
        (1024.5, "1.00 KiB"),
        (1024**2, "1.00 MiB"),
        (1024**2 - 1, "1.00 MiB"),  # 1023.999 KiB rounds up: never "1024.00 KiB"
        (1024**2 - 6, "1023.99 KiB"),  # still below what rounds up
        (1024**3 - 1, "1.00 GiB"),
        (3 * 1024**2, "3.00 MiB"),
        (1024**3, "1.00 GiB"),
        (1024**4, "1.00 TiB"),
    ],
)
def test_format_bytes_changes_unit_at_each_power_of_1024(n, text):
    assert format_bytes(n) == text


@pytest.mark.parametrize("n", ["1024", None, True])
def test_format_bytes_refuses_what_is_not_a_number_and_names_it(n):
    with pytest.raises(TypeError, match=rf"^n must be a number of bytes, got {type(n).__name__} "):
        format_bytes(n)


def test_kv_cache_bytes_counts_two_bytes_per_number_by_default():
    assert kv_cache_bytes(num_layers=1, num_kv_heads=1, head_dim=1, tokens=1) == 2 * 2
    assert kv_cache_bytes(num_layers=3, num_kv_heads=2, head_dim=5, tokens=7, batch=11) == 2 * 3 * 2 * 5 * 7 * 11 * 2


@pytest.mark.parametrize("name", ["num_layers", "num_kv_heads", "head_dim", "batch", "bytes_per_element"])
def test_kv_cache_bytes_names_the_bad_argument(name):
    arguments = {"num_layers": 1, "num_kv_heads": 1, "head_dim": 1, "tokens": 1, "batch": 1, "bytes_per_element": 1}
    arguments[name] = 0
    with pytest.raises(ValueError, match=rf"^{name} must be"):
        kv_cache_bytes(**arguments)


def test_presets_default_to_bfloat16_two_bytes():
    # GPT-2 small: 12 layers, 12 key/value heads of 64.
    assert kv_cache_bytes_for("GPT-2 small", tokens=10) == 2 * 12 * 12 * 64 * 10 * 2
    variants = kv_cache_variants("GPT-2 small", tokens=10, gqa_kv_heads=4)
    assert [v.bytes for v in variants] == [2 * 12 * h * 64 * 10 * 2 for h in (12, 4, 1)]


def test_gqa_with_as_many_kv_heads_as_query_heads_is_mha():
    variants = kv_cache_variants("GPT-2 small", tokens=10, gqa_kv_heads=12)
    assert variants[1].num_kv_heads == 12 and variants[1].bytes == variants[0].bytes
    with pytest.raises(ValueError, match="gqa_kv_heads must be <= num_heads"):
        kv_cache_variants("GPT-2 small", tokens=10, gqa_kv_heads=24)
    with pytest.raises(ValueError, match=r"^gqa_kv_heads must be"):
        kv_cache_variants("GPT-2 small", tokens=10, gqa_kv_heads=0)


def test_a_model_with_as_many_kv_heads_as_heads_is_mha():
    assert ModelConfig("toy", num_layers=2, num_heads=4, num_kv_heads=4, head_dim=8).attention == "MHA"
    with pytest.raises(ValueError, match="num_kv_heads must be <= num_heads"):
        ModelConfig("toy", num_layers=2, num_heads=4, num_kv_heads=5, head_dim=8)
