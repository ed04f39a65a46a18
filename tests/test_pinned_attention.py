"""attend's defaults, which mutation testing (``make mutate``) showed unpinned: no causal mask
and no weights unless asked. The expected output is softmax(q kᵀ / √d) v written out here."""

from __future__ import annotations

import math

import torch

from mhsa_helpers.attention import attend


def test_attend_by_default_is_unmasked_and_returns_no_weights():
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 3, 4), torch.randn(1, 3, 4), torch.randn(1, 3, 2)
    out, weights = attend(q, k, v)
    assert weights is None
    expected = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(4), dim=-1) @ v
    torch.testing.assert_close(out, expected)  # the first query sees the last key: not causal


def test_half_precision_weights_use_the_scale_given():
    # float16 scores are computed in float32 (their own path): the scale must reach it too.
    torch.manual_seed(1)
    q, k, v = (torch.randn(1, 2, 4) for _ in range(3))
    _, weights = attend(q.half(), k.half(), v.half(), scale=0.1, need_weights=True)
    expected = torch.softmax(q.half().float() @ k.half().float().transpose(-2, -1) * 0.1, dim=-1)
    torch.testing.assert_close(weights.float(), expected, atol=2e-3, rtol=0)
