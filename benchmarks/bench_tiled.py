"""Tiled attention (the online softmax, FlashAttention's idea in plain PyTorch) against the naive
path and F.scaled_dot_product_attention, on the CPU: peak memory and time.

    python benchmarks/bench_tiled.py [--memory-sizes 4096 8192] [--time-sizes 1024 2048 4096] [--quick]

Causal self-attention on q, k, v of shape (1, heads, n, d_head), float32, three implementations:

* naive (scores materialised): ``softmax(mask(q @ k^T * scale)) @ v``, the (heads, n, n) scores
  and weights held in memory, the causal mask built in the call;
* tiled_attention: :func:`mhsa_helpers.tiled_attention.tiled_attention`, a Python loop over
  (tile, tile) blocks, skipping the blocks above the diagonal;
* F.sdpa: ``torch.nn.functional.scaled_dot_product_attention(..., is_causal=True)``, fused kernels.

All three are checked against each other first. Peak memory is measured in a fresh Python
process per (implementation, n): on Linux the kernel's peak-RSS counter is reset right before
the call (``/proc/self/clear_refs``) and the table shows how far resident memory rose above
its level before the call (``VmHWM - VmRSS``); the inputs are resident before, so they are not
counted, the output is. Elsewhere ``ru_maxrss`` before and after the call is used (a rougher
bound). Times: median of a few calls, every implementation once per round in a fresh random
order, after one warm-up call each.

Reported, never asserted: tiled peak memory against the naive path's (target: at most 10 %),
its growth from the smallest to the largest n (target: linear, at most 2.5x when n doubles),
and the time ratio tiled / F.sdpa. tiled_attention is a teaching implementation: its Python
loop and separate exp/matmul calls do what the fused kernel does in compiled code, so expect
it slower; by how much depends on n, the tile size and the threads (``--threads 2`` helps the
fused kernel more than the loop).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from mhsa_helpers.tiled_attention import tiled_attention

WORKER = "memory-worker"
IMPLEMENTATIONS = ("naive", "tiled", "sdpa")
LABELS = {"naive": "naive (scores materialised)", "tiled": "tiled_attention", "sdpa": "F.sdpa (fused)"}
MIB = 2**20
MEMORY_TARGET = 0.10  # tiled peak / naive peak, at most
GROWTH_TARGET = 2.5  # tiled peak growth when n doubles, at most (linear: 2)


def naive_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    n = q.shape[-2]
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    future = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(diagonal=1)
    weights = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
    return weights @ v


def implementations(tile_size: int) -> dict[str, Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]]:
    return {
        "naive": naive_attention,
        "tiled": lambda q, k, v: tiled_attention(q, k, v, causal=True, tile_size=tile_size),
        "sdpa": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
    }


def make_inputs(n: int, heads: int, d_head: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, heads, n, d_head, generator=g) for _ in range(3))
    return q, k, v


# --------------------------------------------------------------------------- memory


def status_kib(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field} line")


def ru_maxrss_mib() -> float:
    import resource

    raw = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return raw / MIB if sys.platform == "darwin" else raw / 1024


def memory_worker(argv: list[str]) -> None:
    """Body of the measuring subprocess: one call of one implementation; prints one JSON line."""
    impl, n, heads, d_head, tile_size, threads = argv[0], *map(int, argv[1:])
    torch.set_num_threads(threads)
    fn = implementations(tile_size)[impl]
    q, k, v = make_inputs(n, heads, d_head)
    out = None  # kept alive until the peak is read: the output is part of the call's memory
    with torch.inference_mode():
        small = min(n, 2 * tile_size)
        fn(q[..., :small, :], k[..., :small, :], v[..., :small, :])  # one-time set-up is not counted
        gc.collect()
        try:
            before = status_kib("VmRSS")
            with open("/proc/self/clear_refs", "w") as handle:
                handle.write("5")  # peak RSS := current RSS
            out = fn(q, k, v)
            result = {"peak_mb": (status_kib("VmHWM") - before) / 1024, "method": "vmhwm"}
        except OSError:
            before_mb = ru_maxrss_mib()
            out = fn(q, k, v)
            result = {"peak_mb": ru_maxrss_mib() - before_mb, "method": "ru_maxrss"}
    del out
    print(json.dumps(result))


def measure_peak(impl: str, n: int, heads: int, d_head: int, tile_size: int, threads: int) -> dict[str, float | str]:
    args = [impl, n, heads, d_head, tile_size, threads]
    completed = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), WORKER, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if completed.returncode != 0:
        raise RuntimeError(f"memory measurement of {impl} at n={n} failed:\n{completed.stderr[-2000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- time


def time_calls(
    fns: dict[str, Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]],
    inputs: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    repeats: int,
) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {name: [] for name in fns}
    order = list(fns)
    shuffler = random.Random(0)
    with torch.inference_mode():
        for fn in fns.values():
            fn(*inputs)
        for _ in range(repeats):
            shuffler.shuffle(order)
            for name in order:
                start = time.perf_counter()
                fns[name](*inputs)
                samples[name].append((time.perf_counter() - start) * 1e3)
    return samples


def median_and_iqr(values: list[float]) -> str:
    if len(values) < 2:
        return f"{statistics.median(values):.1f}"
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return f"{statistics.median(values):.1f} [{q3 - q1:.1f}]"


def cross_check(tile_size: int, heads: int, d_head: int) -> None:
    q, k, v = make_inputs(3 * tile_size + 5, heads, d_head, seed=1)
    outputs = {name: fn(q, k, v) for name, fn in implementations(tile_size).items()}
    for name in ("naive", "tiled"):
        torch.testing.assert_close(outputs[name], outputs["sdpa"], rtol=1e-4, atol=1e-5)


def load_average() -> str:
    try:
        return " ".join(f"{value:.2f}" for value in os.getloadavg())
    except (AttributeError, OSError):
        return "n/a"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--memory-sizes", type=int, nargs="*", default=[4096, 8192])
    parser.add_argument("--time-sizes", type=int, nargs="*", default=[1024, 2048, 4096])
    parser.add_argument("--repeats", type=int, default=None, help="timed rounds per n (default: 7, 5, 3 by size)")
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--d-head", type=int, default=64)
    parser.add_argument("--tile-size", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: stable on a shared machine)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks that everything runs")
    args = parser.parse_args()
    if args.quick:
        args.memory_sizes, args.time_sizes, args.repeats = [512, 1024], [256, 512], 2
    torch.set_num_threads(args.threads)
    started = time.perf_counter()

    print("# Tiled attention vs naive vs F.sdpa (causal, float32, CPU)\n")
    print(
        f"torch {torch.__version__}, {args.threads} thread(s), q/k/v (1, {args.heads}, n, {args.d_head}), "
        f"tile_size {args.tile_size}, load average {load_average()}\n"
    )
    cross_check(args.tile_size, args.heads, args.d_head)
    print("Cross-check: naive and tiled_attention equal F.sdpa (assert_close, n = 3 * tile + 5).\n")

    peaks: dict[tuple[str, int], float] = {}
    if args.memory_sizes:
        print("## Peak memory of one call (MiB above the level before the call, fresh process each)\n")
        print(
            "| n | "
            + " | ".join(LABELS[name] for name in IMPLEMENTATIONS)
            + " | one (heads, n, n) matrix | tiled / naive |"
        )
        print("|---:|" + "---:|" * (len(IMPLEMENTATIONS) + 2))
        method = ""
        for n in args.memory_sizes:
            for name in IMPLEMENTATIONS:
                data = measure_peak(name, n, args.heads, args.d_head, args.tile_size, args.threads)
                peaks[name, n] = float(data["peak_mb"])
                method = str(data["method"])
            matrix_mb = args.heads * n * n * 4 / MIB
            ratio = peaks["tiled", n] / peaks["naive", n]
            cells = " | ".join(f"{peaks[name, n]:.1f}" for name in IMPLEMENTATIONS)
            print(f"| {n} | {cells} | {matrix_mb:.0f} | {ratio:.3f} |")
        print(f"\n(method: {method})\n")
        small, large = min(args.memory_sizes), max(args.memory_sizes)
        worst = max(peaks["tiled", n] / peaks["naive", n] for n in args.memory_sizes)
        verdict = "PASS" if worst <= MEMORY_TARGET else "MISS"
        print(f"- {verdict}: tiled peak <= {MEMORY_TARGET:.0%} of naive at every n (worst {worst:.3f})")
        if large > small:
            for name in IMPLEMENTATIONS:
                growth = peaks[name, large] / peaks[name, small]
                print(f"- growth of {LABELS[name]} from n={small} to n={large} ({large / small:g}x): {growth:.2f}x")
            growth = peaks["tiled", large] / peaks["tiled", small]
            allowed = GROWTH_TARGET ** math.log2(large / small)
            verdict = "PASS" if growth <= allowed else "MISS"
            print(f"- {verdict}: tiled peak grows linearly (<= {allowed:.2f}x; measured {growth:.2f}x)")
        print()

    if args.time_sizes:
        print("## Time of one call (ms, median of the rounds; IQR in brackets)\n")
        print(
            "| n | rounds | "
            + " | ".join(LABELS[name] for name in IMPLEMENTATIONS)
            + " | tiled / F.sdpa | naive / F.sdpa |"
        )
        print("|---:|---:|" + "---:|" * (len(IMPLEMENTATIONS) + 2))
        fns = implementations(args.tile_size)
        for n in args.time_sizes:
            repeats = args.repeats or (7 if n <= 1024 else 5 if n <= 2048 else 3)
            samples = time_calls(fns, make_inputs(n, args.heads, args.d_head), repeats)
            medians = {name: statistics.median(values) for name, values in samples.items()}

            cells = " | ".join(median_and_iqr(samples[name]) for name in IMPLEMENTATIONS)
            print(
                f"| {n} | {repeats} | {cells} | {medians['tiled'] / medians['sdpa']:.1f}x | "
                f"{medians['naive'] / medians['sdpa']:.1f}x |"
            )
        print(
            "\ntiled_attention is a teaching implementation: a Python loop over blocks, each an exp and two"
            "\nmatmuls in separate calls; F.sdpa does the same work in one compiled kernel."
        )
    print(f"\nTotal time: {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    if sys.argv[1:2] == [WORKER]:
        memory_worker(sys.argv[2:])
    else:
        main()
