"""default_device and compat.sdpa_zeroing_fully_masked_rows: branches that mutation testing (``make mutate``)
showed unpinned. The GPU branches are reached by telling torch that a GPU is there (monkeypatch):
this machine and CI have none."""

from __future__ import annotations

import math
import types

import torch

from mhsa_helpers import compat
from mhsa_helpers.devices import default_device


def test_cuda_first(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert default_device() == torch.device("cuda")


def test_apples_mps_when_there_is_no_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends, "mps", types.SimpleNamespace(is_available=lambda: True))
    assert default_device() == torch.device("mps")


def test_cpu_without_either(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends, "mps", types.SimpleNamespace(is_available=lambda: False))
    assert default_device() == torch.device("cpu")


def test_fused_attention_with_a_mask_uses_the_scale_given():
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 3, 4), torch.randn(1, 5, 4), torch.randn(1, 5, 2)
    mask = torch.tensor([[True, True, False, False, False]] * 3)
    scale = 0.1
    # By hand: softmax over the visible keys of q·k * scale.
    scores = (q @ k.transpose(-2, -1) * scale).masked_fill(~mask, -math.inf)
    expected = torch.softmax(scores, dim=-1) @ v
    got = compat.sdpa_zeroing_fully_masked_rows(q, k, v, mask, is_causal=False, scale=scale)
    torch.testing.assert_close(got, expected)


def test_a_key_mask_of_one_dimension_broadcasts_over_4d_heads():
    # (seq_k,) is broadcastable to (batch, heads, seq_q, seq_k); PyTorch's fused kernel alone
    # refuses it with an IndexError for 4-D queries (a bug found by mutation testing).
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 2, 3, 4), torch.randn(2, 2, 4, 4), torch.randn(2, 2, 4, 2)
    mask = torch.tensor([True, False, True, True])
    scores = (q @ k.transpose(-2, -1) / 2.0).masked_fill(~mask, -math.inf)
    expected = torch.softmax(scores, dim=-1) @ v
    got = compat.sdpa_zeroing_fully_masked_rows(q, k, v, mask, is_causal=False, scale=None)
    torch.testing.assert_close(got, expected)
    nothing = compat.sdpa_zeroing_fully_masked_rows(q, k, v, torch.tensor(False), is_causal=False, scale=None)
    assert torch.equal(nothing, torch.zeros(2, 2, 3, 2))


def test_a_one_dimensional_key_mask_keeps_2d_queries_2d():
    torch.manual_seed(1)
    q, k, v = torch.randn(3, 4), torch.randn(4, 4), torch.randn(4, 2)
    mask = torch.tensor([True, True, False, True])
    expected = torch.softmax((q @ k.T / 2.0).masked_fill(~mask, -math.inf), dim=-1) @ v
    got = compat.sdpa_zeroing_fully_masked_rows(q, k, v, mask, is_causal=False, scale=None)
    assert got.shape == (3, 2)
    torch.testing.assert_close(got, expected)
    every = compat.sdpa_zeroing_fully_masked_rows(q, k, v, torch.tensor(True), is_causal=False, scale=None)
    torch.testing.assert_close(every, torch.softmax(q @ k.T / 2.0, dim=-1) @ v)
