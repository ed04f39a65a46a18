"""Notebook 09's streaming experiment: streaming with the original positions computes what the full pass
with the sliding-window mask computes, StreamingLLM's positions within the cache change it, and
``streaming_losses`` checks its arguments."""

from __future__ import annotations

import pytest

from mhsa_helpers.long_context import sliding_window_mask


def test_streaming_with_original_positions_equals_the_full_pass_with_the_window_mask():
    from mhsa_helpers.lessons.long_context import long_batch, split_losses_with_mask, streaming_losses, stretched_model

    model = stretched_model(48)
    batch = long_batch(48, batch_size=16, max_repeat=10, seed=7)
    for sinks in (0, 1):
        streamed = streaming_losses(model, batch, window=12, sinks=sinks)
        masked = split_losses_with_mask(model, batch, sliding_window_mask(48, window=12, sinks=sinks))
        assert streamed == pytest.approx(masked, abs=1e-4)
    in_cache = streaming_losses(model, batch, window=12, sinks=1, rope_positions="cache")
    assert abs(in_cache["all"] - streamed["all"]) > 1e-3  # the sink's position changed what the model computes


def test_streaming_losses_checks_its_arguments():
    from mhsa_helpers.lessons.long_context import long_batch, streaming_losses, stretched_model
    from mhsa_helpers.teaching.induction import InductionConfig, build_model

    batch = long_batch(16, batch_size=2)
    with pytest.raises(ValueError, match="rope_positions must be one of"):
        streaming_losses(stretched_model(16), batch, window=4, rope_positions="slots")
    with pytest.raises(ValueError, match="window must be >= 1"):
        streaming_losses(stretched_model(16), batch, window=0)
    learned = build_model(InductionConfig(positions="learned", seq_len=32))
    with pytest.raises(ValueError, match="model must use RoPE"):
        streaming_losses(learned, batch, window=4)
