"""The benchmark's code (benchmarks/competitors.py, benchmarks/harness.py): the competitors
compute the same attention, the helpers count and summarise correctly, and the benchmark
script runs end to end.

No test here measures or asserts a speed: speed targets live in benchmarks/bench_forward.py.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from mhsa_helpers import LatentCache

# benchmarks/ is a folder of scripts, not a package: its modules import each other by name.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import bench_mla
import competitors as comp
import harness

ROOT = Path(__file__).resolve().parent.parent


def float64_causal_attention(reference, x: torch.Tensor):
    """Causal MHSA from the reference module's weights, in float64, written out from the
    formula: per head softmax(q k^T / sqrt(d_head) with future keys at -inf) v."""
    d, h = reference.d_model, reference.num_heads
    d_head = d // h
    w = reference.qkv_proj.weight.detach().double()
    b = reference.qkv_proj.bias.detach().double()
    x = x.double()
    _, n, _ = x.shape
    q, k, v = (x @ w[i * d : (i + 1) * d].T + b[i * d : (i + 1) * d] for i in range(3))
    heads, weights = [], []
    allowed = torch.ones(n, n, dtype=torch.bool).tril()
    for i in range(h):
        cols = slice(i * d_head, (i + 1) * d_head)
        scores = q[..., cols] @ k[..., cols].transpose(-2, -1) / math.sqrt(d_head)
        scores = scores.masked_fill(~allowed, float("-inf"))
        weight = torch.softmax(scores, dim=-1)
        weights.append(weight)
        heads.append(weight @ v[..., cols])
    merged = torch.cat(heads, dim=-1)
    out = merged @ reference.out_proj.weight.detach().double().T + reference.out_proj.bias.detach().double()
    return out, torch.stack(weights, dim=1)  # (batch, n, d), (batch, heads, n, n)


@pytest.fixture(scope="module")
def competitors():
    return comp.build_competitors(64, 4, max_seq_len=32)


def test_every_competitor_computes_causal_attention(competitors):
    x = torch.randn(2, 19, 64, generator=torch.Generator().manual_seed(3))
    expected_out, expected_weights = float64_causal_attention(competitors.reference, x)
    fns = competitors.forward_functions(19)
    assert set(fns) == set(comp.IMPLEMENTATIONS)
    with torch.inference_mode():
        for name, fn in fns.items():
            out, weights = fn(x)
            torch.testing.assert_close(
                out.double(), expected_out, atol=2e-5, rtol=1e-4, msg=lambda m, n=name: f"{n}: {m}"
            )
            if name in ("package_weights", "torch_mha_weights"):
                assert weights is not None, name
                torch.testing.assert_close(weights.double(), expected_weights, atol=1e-6, rtol=1e-5)
            else:
                assert weights is None, name


def test_cross_check_catches_a_competitor_with_other_weights():
    broken = comp.build_competitors(64, 4, max_seq_len=32, names=["hand_wired_sdpa", "naive"])
    assert set(comp.cross_check(broken, seq_len=12)) == {"hand_wired_sdpa", "naive"}
    with torch.no_grad():
        broken.modules["naive"].W_key.weight[0, 0] += 0.5
    with pytest.raises(AssertionError, match="naive"):
        comp.cross_check(broken, seq_len=12)


def test_attention_forward_flops_by_hand():
    # n = 4, d = 2: projections 8 * 4 * 2**2 = 128; causal attention 2 * 4 * 5 * 2 = 80
    # (10 visible pairs, 2 matmuls, d multiply-adds each); dense 4 * 16 * 2 = 128.
    assert harness.attention_forward_flops(4, 2) == 208
    assert harness.attention_forward_flops(4, 2, causal=False) == 256
    assert harness.attention_forward_flops(4, 2, batch=3) == 3 * 208
    with pytest.raises(ValueError, match="seq_len"):
        harness.attention_forward_flops(0, 2)


def test_timing_statistics_by_hand():
    timing = harness.Timing((5.0, 1.0, 4.0, 2.0, 3.0))
    assert timing.median_ms == 3.0
    assert timing.min_ms == 1.0
    # Sorted 1..5, inclusive quartiles at positions 1 and 3 (0-based): 2 and 4.
    assert (timing.q1_ms, timing.q3_ms, timing.iqr_ms) == (2.0, 4.0, 2.0)
    assert harness.paired_ratio(harness.Timing((2.0, 9.0, 3.0)), harness.Timing((1.0, 3.0, 3.0))) == 2.0
    with pytest.raises(ValueError, match="same rounds"):
        harness.paired_ratio(harness.Timing((1.0,)), harness.Timing((1.0, 2.0)))


def test_time_interleaved_calls_each_function_warmup_plus_repeats_times():
    calls = {"a": 0, "b": 0}

    def counter(name):
        def fn(_x):
            calls[name] += 1

        return fn

    timings = harness.time_interleaved({"a": counter("a"), "b": counter("b")}, torch.zeros(1), repeats=4, warmup=2)
    assert calls == {"a": 6, "b": 6}
    assert {name: len(t.samples_ms) for name, t in timings.items()} == {"a": 4, "b": 4}
    assert all(s >= 0 for t in timings.values() for s in t.samples_ms)


def test_attention_matrix_mb():
    # (1, 8, 1024, 1024) float32 = 8 * 2**20 elements * 4 bytes = 32 MiB.
    assert harness.attention_matrix_mb(1024, 8) == 32.0


def run_script(name: str, *args: str, timeout: int = 300) -> str:
    """``benchmarks/<name>``'s printed output, after checking it exited cleanly (the timeout only guards
    against a hang; nothing about speed is asserted)."""
    completed = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / name), *args], capture_output=True, text=True, timeout=timeout,
        cwd=ROOT,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr[-3000:]
    return completed.stdout


def test_bench_forward_quick_mode_runs_end_to_end():
    out = run_script("bench_forward.py", "--quick", timeout=600)
    assert "Cross-check at n = 48" in out
    assert "| n | implementation | median ms |" in out
    for label in comp.LABELS.values():
        assert label in out
    assert "fast path / hand-wired" in out
    assert "## Peak memory of one forward at n = 256" in out
    assert "fast path peak / naive peak" in out


def test_bench_sinks_quick_mode_prints_both_paths_and_every_option():
    out = run_script("bench_sinks.py", "--quick")
    assert "Cross-check: the fused decoding step written out equals attend's explicit one." in out
    for row in (
        "full pass, sink (fused: an extra key)",
        "decoding step, sink (explicit softmax)",
        "gate='elementwise'",
    ):
        assert f"| {row} |" in out


def test_bench_mla_quick_mode_checks_both_paths_equal_and_counts_what_each_builds():
    out = run_script("bench_mla.py", "--quick")
    assert "Cross-check: both paths give the same outputs for every call timed." in out
    # past 16, one new token: the materialised step rebuilds 2 x 17 tokens x 8 heads x 128 float32 numbers
    assert re.search(r"\| 16 \| materialised \| [\d.]+ \| [\d.]+ \| [\d.]+ \| 0\.13 \| 1\.00 \|", out), out
    assert re.search(r"\| 16 \| absorbed \| [\d.]+ \| [\d.]+ \| [\d.]+ \| 0\.00 \| [\d.]+ \|", out), out
    assert "## A prompt of 8 tokens, no cache (past 0)" in out


@pytest.mark.parametrize(("new", "past"), [(1, 5), (3, 0)])
@pytest.mark.parametrize("absorbed", [False, True])
def test_bench_mla_counts_the_multiply_adds_torchs_flop_counter_counts(new, past, absorbed):
    layer = bench_mla.module()
    cache = LatentCache()
    if past:
        cache.append(torch.randn(1, past, bench_mla.D_LATENT), torch.randn(1, past, bench_mla.D_ROPE))
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        layer(torch.randn(1, new, bench_mla.D_MODEL), cache=cache, absorbed=absorbed)
    path = "absorbed" if absorbed else "materialised"
    assert bench_mla.multiply_adds(path, new, past)[0] == counter.get_total_flops() // 2


@pytest.mark.skipif(torch.cuda.is_available(), reason="with CUDA the script measures (minutes): run make bench-gpu")
def test_bench_gpu_says_there_is_nothing_to_measure_without_cuda():
    assert run_script("bench_gpu.py").startswith("no CUDA device here: nothing to measure")


def test_bench_checks_quick_mode_compares_the_module_with_the_bare_steps_and_counts_the_checks():
    out = run_script("bench_checks.py", "--quick")
    for row in ("MultiHeadSelfAttention + KVCache", "the same steps, bare PyTorch", "the module over the bare steps"):
        assert row in out
    # one door per call: the checks of a step are the door's (and the `checking()` answers), not 60 of them
    calls = re.search(r"calls into checks.py: (\d+) in one decoding step, (\d+) in one forward", out)
    assert calls is not None and int(calls[1]) <= 16 and int(calls[2]) <= 16, out
