"""The KV-cache calculator: defaults, boundaries and argument names that mutation testing
(``make mutate``) showed unpinned. Expected sizes are the docstring's formula in plain
integers: 2 (K and V) × layers × kv_heads × head_dim × tokens × batch × bytes per element.
"""

from __future__ import annotations

import pytest
from pinning import raises

from mhsa_helpers.kv_cache_memory import (
    LatentConfig,
    ModelConfig,
    bytes_per_element,
    format_bytes,
    kv_cache_bytes,
    kv_cache_bytes_for,
    kv_cache_variants,
    latent_cache_bytes,
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


# ---------------------------------------------------------------- argument checks: the messages


@pytest.mark.parametrize("field", ["num_layers", "num_heads", "num_kv_heads", "head_dim"])
def test_a_model_config_names_the_field_that_is_not_a_positive_int(field):
    sizes = {"num_layers": 2, "num_heads": 4, "num_kv_heads": 2, "head_dim": 8} | {field: 0}
    with raises(ValueError, f"{field} must be >= 1, got 0"):
        ModelConfig("model", **sizes)


def test_a_model_config_says_how_kv_heads_must_relate_to_heads():
    with raises(
        ValueError,
        "num_kv_heads must be <= num_heads (several query heads share one key/value head), "
        "got num_kv_heads=8, num_heads=4",
    ):
        ModelConfig("model", 1, 4, 8, 8)
    with raises(
        ValueError,
        "num_kv_heads must divide num_heads: expected num_heads % num_kv_heads == 0, got num_heads=6, num_kv_heads=4",
    ):
        ModelConfig("model", 1, 6, 4, 8)
    assert ModelConfig("model", 1, 4, 4, 8).attention == "MHA"  # as many kv heads as heads is allowed


def test_the_calculator_names_its_bad_arguments():
    with raises(ValueError, "dtype must be one of 'float32', 'float16', 'bfloat16', 'float8', 'int8', got 'float64'"):
        bytes_per_element("float64")
    sizes = {"num_layers": 1, "num_kv_heads": 1, "head_dim": 1, "tokens": 1, "batch": 1, "bytes_per_element": 1}
    for name in sizes:
        low = 0 if name == "tokens" else 1
        with raises(ValueError, f"{name} must be >= {low}, got {low - 1}"):
            kv_cache_bytes(**(sizes | {name: low - 1}))
    with raises(
        ValueError,
        "config must be one of 'GPT-2 small', 'Llama-2-7B', 'Llama-2-70B', 'Llama-3-8B', 'Mistral-7B-v0.1', "
        "got 'GPT-3'",
    ):
        kv_cache_bytes_for("GPT-3", tokens=1)


def test_the_variants_name_a_bad_gqa_kv_heads():
    with raises(ValueError, "gqa_kv_heads must be <= num_heads=12, got 24"):
        kv_cache_variants("GPT-2 small", tokens=1, gqa_kv_heads=24)
    with raises(
        ValueError,
        "gqa_kv_heads must divide num_heads: expected num_heads % gqa_kv_heads == 0, got num_heads=12, gqa_kv_heads=5",
    ):
        kv_cache_variants("GPT-2 small", tokens=1, gqa_kv_heads=5)
    with raises(ValueError, "gqa_kv_heads must be >= 1, got 0"):
        kv_cache_variants("GPT-2 small", tokens=1, gqa_kv_heads=0)
    mha, gqa, mqa = kv_cache_variants("GPT-2 small", tokens=1, gqa_kv_heads=12)  # = num_heads: allowed
    assert mha.num_kv_heads == gqa.num_kv_heads == 12 and mqa.num_kv_heads == 1


def test_format_bytes_names_what_it_was_given():
    with raises(TypeError, "n must be a number of bytes, got str '1'"):
        format_bytes("1")
    with raises(TypeError, "n must be a number of bytes, got bool True"):
        format_bytes(True)
    with raises(ValueError, "n must be >= 0 bytes, got -1"):
        format_bytes(-1)
    assert format_bytes(0) == "0 bytes"


def test_format_bytes_below_1024_stays_in_bytes_however_close():
    # Bytes print as whole numbers, so a float just under 1024 must not be rounded up into "1.00 KiB".
    assert format_bytes(1023.999) == "1023 bytes"
    assert format_bytes(1024.0) == "1.00 KiB"


def test_latent_cache_bytes_counts_two_bytes_per_number_by_default():
    assert latent_cache_bytes(num_layers=1, d_latent=1, d_rope=0, tokens=1) == 1 * 2
    assert latent_cache_bytes(num_layers=3, d_latent=5, d_rope=2, tokens=7, batch=11) == 3 * (5 + 2) * 7 * 11 * 2


@pytest.mark.parametrize("name", ["num_layers", "d_latent", "batch", "bytes_per_element"])
def test_latent_cache_bytes_names_the_bad_argument_and_wants_at_least_1(name):
    arguments = {"num_layers": 1, "d_latent": 1, "d_rope": 0, "tokens": 1, "batch": 1, "bytes_per_element": 1}
    arguments[name] = 0
    with raises(ValueError, f"{name} must be >= 1, got 0"):
        latent_cache_bytes(**arguments)


@pytest.mark.parametrize("name", ["d_rope", "tokens"])
def test_latent_cache_bytes_takes_0_for_no_position_part_or_no_token_but_names_a_negative(name):
    arguments = {"num_layers": 2, "d_latent": 3, "d_rope": 0, "tokens": 0, "batch": 1, "bytes_per_element": 1}
    assert latent_cache_bytes(**arguments) == 0  # no token yet: an empty cache, with or without a position part
    arguments[name] = -1
    with raises(ValueError, f"{name} must be >= 0, got -1"):
        latent_cache_bytes(**arguments)


@pytest.mark.parametrize("name", ["num_layers", "num_heads", "head_dim", "d_latent"])
def test_latent_config_names_the_bad_setting(name):
    settings = {"num_layers": 1, "num_heads": 1, "head_dim": 1, "d_latent": 1, "d_rope": 0}
    LatentConfig("toy", **settings)  # d_rope 0: no position part
    settings[name] = 0
    with raises(ValueError, f"{name} must be >= 1, got 0"):
        LatentConfig("toy", **settings)
    with raises(ValueError, "d_rope must be >= 0, got -2"):
        LatentConfig("toy", **{**settings, name: 1, "d_rope": -2})
