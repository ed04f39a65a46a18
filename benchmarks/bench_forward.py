"""Forward time and peak memory of causal multi-head self-attention on the CPU.

    python benchmarks/bench_forward.py [--sizes 128 512 ...] [--repeats N] [--memory-n 8192] [--quick]

Compares the package's fast path with its weights-returning path, a naive module that
materialises the (n, n) scores, nn.MultiheadAttention (need_weights False/True) and a hand-wired
F.scaled_dot_product_attention pipeline, all holding the same weights (checked first).
Prints Markdown tables; targets are reported as PASS/MISS, never asserted.
See benchmarks/README.md for how to read the output.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import harness
import torch
from competitors import IMPLEMENTATIONS, LABELS, REFERENCE, build_competitors, cross_check

DEFAULT_SIZES = (128, 512, 1024, 2048, 4096)
DEFAULT_MEMORY_IMPLS = ("package_fast", "naive", "hand_wired_sdpa")
FAST_TARGET = 1.10  # fast path / hand-wired, at most
MEMORY_TARGET = 0.10  # fast path peak / naive peak, at most ("well under": 10x smaller)
MATMUL_SHAPE = (4096, 512, 512)
NOISY_SPREAD = 0.25  # IQR / median above which a row is flagged as too noisy to judge


def default_repeats(n: int) -> int:
    """Rounds per size when --repeats is not given: fewer for the slow long sequences."""
    if n <= 512:
        return 60
    if n <= 1024:
        return 30
    if n <= 2048:
        return 15
    return 8


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def load_average() -> str:
    try:
        return " ".join(f"{value:.2f}" for value in os.getloadavg())
    except (AttributeError, OSError):
        return "n/a"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--sizes", type=int, nargs="+", default=None, help="sequence lengths n (default: 128 512 1024 2048 4096)"
    )
    parser.add_argument(
        "--repeats", type=int, default=None, help="timed rounds per n (default: 60 for n<=512 down to 8 for n>2048)"
    )
    parser.add_argument("--warmup", type=int, default=None, help="untimed calls of each competitor per n (default 2)")
    parser.add_argument(
        "--memory-n", type=int, default=None, help="sequence length of the peak-memory table (default 8192; 0 skips it)"
    )
    parser.add_argument(
        "--memory-impls", nargs="+", default=None, choices=IMPLEMENTATIONS, help="competitors in the memory table"
    )
    parser.add_argument(
        "--impls",
        nargs="+",
        default=None,
        choices=IMPLEMENTATIONS,
        help="competitors to time (default: all; the hand-wired yardstick is always added)",
    )
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--d-model", type=int, default=512)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="tiny sizes and few repeats: checks that everything runs, measures nothing useful",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes = args.sizes or [64, 128]
        args.repeats = args.repeats or 3
        args.warmup = 1 if args.warmup is None else args.warmup
        args.memory_n = 256 if args.memory_n is None else args.memory_n
        args.memory_impls = args.memory_impls or ["package_fast", "naive"]
    args.sizes = args.sizes or list(DEFAULT_SIZES)
    chosen = set(args.impls or IMPLEMENTATIONS) | {REFERENCE}
    args.impls = [name for name in IMPLEMENTATIONS if name in chosen]
    args.warmup = 2 if args.warmup is None else args.warmup
    args.memory_n = 8192 if args.memory_n is None else args.memory_n
    args.memory_impls = args.memory_impls or list(DEFAULT_MEMORY_IMPLS)
    return args


def pass_or_miss(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    torch.set_num_threads(args.threads)
    m, k, n_cols = MATMUL_SHAPE
    print("# Forward benchmark: causal multi-head self-attention, CPU\n")
    print(
        f"torch {torch.__version__}, torch.get_num_threads() = {torch.get_num_threads()}, "
        f"{os.cpu_count()} logical CPUs ({cpu_name()}), Python {platform.python_version()}, {platform.system()}"
    )
    print(
        f"d_model = {args.d_model}, heads = {args.heads}, batch = {args.batch}, float32, causal; "
        f"sizes n = {' '.join(map(str, args.sizes))}; load average at start: {load_average()}"
    )
    print(
        "Timings are wall clock (time.perf_counter) under torch.inference_mode, one call of every competitor "
        "per round in a random order; on a shared machine they are noisy — read the IQR column.\n"
    )

    competitors = build_competitors(args.d_model, args.heads, max_seq_len=max(args.sizes), names=args.impls)
    check_n = min(48, max(args.sizes))
    differences = cross_check(competitors, seq_len=check_n, batch=2)
    worst = max(differences.values())
    print(
        f"Cross-check at n = {check_n}, batch = 2: all {len(differences)} implementations match the hand-wired "
        f"output (assert_close atol=1e-4, rtol=1e-4; largest |difference| = {worst:.2e})"
        + (
            "; both weight-returning paths give the same per-head weights."
            if {"package_weights", "torch_mha_weights"} <= set(args.impls)
            else "."
        )
        + "\n"
    )

    matmul_fn, matmul_flops = harness.matmul_reference(m, k, n_cols)
    matmul_label = f"reference matmul ({m}x{k})@({k}x{n_cols})"
    results: dict[int, dict[str, harness.Timing]] = {}
    for n in args.sizes:
        generator = torch.Generator().manual_seed(n)
        x = torch.randn(args.batch, n, args.d_model, generator=generator)
        functions = dict(competitors.forward_functions(n))
        functions["matmul"] = matmul_fn
        repeats = args.repeats or default_repeats(n)
        t0 = time.perf_counter()
        results[n] = harness.time_interleaved(functions, x, repeats=repeats, warmup=args.warmup)
        print(f"  timed n = {n}: {repeats} rounds in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)

    print("## Forward time\n")
    print(
        "GFLOP/s use the useful causal FLOPs, batch * (8 n d^2 + 2 n (n+1) d) "
        "(benchmarks/harness.py, attention_forward_flops); '% matmul' compares with the "
        f"{matmul_label} timed in the same rounds.\n"
    )
    print("| n | implementation | median ms | IQR ms | min ms | × hand-wired | GFLOP/s | % matmul |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    for n, timings in results.items():
        flops = harness.attention_forward_flops(n, args.d_model, batch=args.batch)
        reference_ms = timings[REFERENCE].median_ms
        matmul_rate = matmul_flops / (timings["matmul"].median_ms * 1e-3) / 1e9
        for name in competitors.names:
            timing = timings[name]
            rate = flops / (timing.median_ms * 1e-3) / 1e9
            print(
                f"| {n} | {LABELS[name]} | {timing.median_ms:.3f} | {timing.iqr_ms:.3f} | {timing.min_ms:.3f} | "
                f"{timing.median_ms / reference_ms:.2f} | {rate:.1f} | {100 * rate / matmul_rate:.0f}% |"
            )
        mt = timings["matmul"]
        print(
            f"| {n} | {matmul_label} | {mt.median_ms:.3f} | {mt.iqr_ms:.3f} | {mt.min_ms:.3f} | — "
            f"| {matmul_rate:.1f} | 100% |"
        )

    print("\n## Targets (ratio of medians; paired = median of per-round ratios)\n")
    all_pass = True
    for n, timings in results.items():
        if "package_fast" not in timings:
            continue
        fast, wired = timings["package_fast"], timings[REFERENCE]
        to_wired = fast.median_ms / wired.median_ms
        ok = to_wired <= FAST_TARGET
        line = (
            f"- n = {n}: fast path / hand-wired = {to_wired:.3f} (paired {harness.paired_ratio(fast, wired):.3f}), "
            f"target <= {FAST_TARGET:.2f}: {pass_or_miss(ok)}"
        )
        if "torch_mha" in timings:
            mha = timings["torch_mha"]
            to_mha = fast.median_ms / mha.median_ms
            ok_mha = to_mha < 1.0
            ok = ok and ok_mha
            line += (
                f"; fast path / nn.MultiheadAttention(need_weights=False) = {to_mha:.3f} "
                f"(paired {harness.paired_ratio(fast, mha):.3f}), target < 1: {pass_or_miss(ok_mha)}"
            )
        spread = max(fast.iqr_ms / fast.median_ms, wired.iqr_ms / wired.median_ms)
        if spread > NOISY_SPREAD:
            line += (
                f" — noisy: IQR up to {100 * spread:.0f}% of the median, so this ratio of medians says little; "
                "trust the paired ratio more, or rerun on a quiet machine or with --threads 1"
            )
        all_pass &= ok
        print(line)
    print(f"\nTime targets at every n: {pass_or_miss(all_pass)}")

    if args.memory_n > 0:
        n = args.memory_n
        print(f"\n## Peak memory of one forward at n = {n}\n")
        measurements = {}
        for name in args.memory_impls:
            t0 = time.perf_counter()
            measurements[name] = harness.measure_peak_memory(
                name, n, d_model=args.d_model, num_heads=args.heads, batch=args.batch, threads=args.threads
            )
            print(f"  measured {name} at n = {n} in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
        method = next(iter(measurements.values())).method
        how = (
            "VmHWM - VmRSS around the call, peak counter reset just before it"
            if method == "vmhwm"
            else "ru_maxrss of a process running the call minus one that does not"
        )
        print(
            f"Each row is a fresh subprocess ({how}); 'module state' = parameters + buffers, resident before "
            f"the call and not part of the peak. One (batch, heads, n, n) float32 score tensor = "
            f"{harness.attention_matrix_mb(n, args.heads, batch=args.batch):.0f} MiB.\n"
        )
        fast_peak = measurements["package_fast"].peak_mb if "package_fast" in measurements else None
        print("| implementation | peak extra MiB during forward | module state MiB | × fast path |")
        print("|---|---:|---:|---:|")
        for name, result in measurements.items():
            ratio = f"{result.peak_mb / fast_peak:.1f}" if fast_peak else "—"
            print(f"| {LABELS[name]} | {result.peak_mb:.1f} | {result.state_mb:.1f} | {ratio} |")
        if "package_fast" in measurements and "naive" in measurements:
            share = measurements["package_fast"].peak_mb / measurements["naive"].peak_mb
            print(
                f"\nfast path peak / naive peak = {share:.3f}, target <= {MEMORY_TARGET:.2f} "
                f"('well under'): {pass_or_miss(share <= MEMORY_TARGET)}"
            )

    print(f"\nLoad average at end: {load_average()}; total run time {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
