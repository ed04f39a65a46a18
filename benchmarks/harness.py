"""Timers, FLOP counts and the peak-memory worker behind the benchmark scripts.

Timing (:func:`time_interleaved`) uses ``time.perf_counter`` under ``torch.inference_mode``
and reports the median and the interquartile range in milliseconds. It runs one call of
every function per round, in a fresh random order each round, so slow drifts of the
machine (other jobs, clock changes) hit every function alike. Peak memory
(:func:`measure_peak_memory`) is measured in a fresh Python process per measurement: this
file, run as ``python benchmarks/harness.py memory-worker ...``, is that process.

Everything here is meant for the CPU (the benchmark question is about CPU time); the
timers synchronise CUDA when given CUDA tensors, but :func:`measure_peak_memory` measures
host memory only.
"""

from __future__ import annotations

import gc
import json
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from competitors import IMPLEMENTATIONS, build_competitors

from mhsa_helpers.checks import expect_choice, expect_int

__all__ = [
    "MemoryMeasurement",
    "Timing",
    "attention_forward_flops",
    "attention_matrix_mb",
    "matmul_reference",
    "measure_peak_memory",
    "memory_worker",
    "paired_ratio",
    "time_interleaved",
]

MIB = 2**20
WORKER_COMMAND = "memory-worker"


# --------------------------------------------------------------------------- timing


@dataclass(frozen=True)
class Timing:
    """Wall-clock samples of one call, in milliseconds, with their median and quartiles."""

    samples_ms: tuple[float, ...]

    @property
    def median_ms(self) -> float:
        return statistics.median(self.samples_ms)

    @property
    def min_ms(self) -> float:
        """Fastest sample: the least disturbed by other jobs, but an optimistic estimate."""
        return min(self.samples_ms)

    @property
    def q1_ms(self) -> float:
        return self.quartiles()[0]

    @property
    def q3_ms(self) -> float:
        return self.quartiles()[1]

    @property
    def iqr_ms(self) -> float:
        """Interquartile range ``q3 - q1`` (ms): the spread of the middle half of the samples."""
        q1, q3 = self.quartiles()
        return q3 - q1

    def quartiles(self) -> tuple[float, float]:
        """``(q1, q3)`` in ms, inclusive method; a single sample is both quartiles."""
        if len(self.samples_ms) < 2:
            return self.samples_ms[0], self.samples_ms[0]
        q1, _, q3 = statistics.quantiles(self.samples_ms, n=4, method="inclusive")
        return q1, q3


def synchronize(x: torch.Tensor) -> None:
    """Wait for queued CUDA work on ``x``'s device, so a timer stops after the kernels do."""
    if x.device.type == "cuda":
        torch.cuda.synchronize(x.device)


def time_interleaved(
    functions: Mapping[str, Callable[[torch.Tensor], object]],
    x: torch.Tensor,
    *,
    repeats: int,
    warmup: int = 2,
    seed: int = 0,
) -> dict[str, Timing]:
    """Time every ``functions[name](x)``, one call of each per round, ``repeats`` rounds.

    ``warmup`` untimed calls of each function come first. Each round runs the functions in
    a fresh random order (``random.Random(seed)``): on a shared machine a call that follows
    a long, all-cores one is often slowed down (the scheduler hands the cores back to other
    jobs), and a fixed or merely rotated order would always hand that penalty to the same
    function. All calls run under ``torch.inference_mode``. Returns ``{name: Timing}``;
    sample ``r`` of every Timing comes from round ``r``, which :func:`paired_ratio` relies on.
    """
    expect_int("repeats", repeats)
    expect_int("warmup", warmup, 0)
    names = list(functions)
    if not names:
        raise ValueError("functions must hold at least one callable, got an empty mapping")
    samples: dict[str, list[float]] = {name: [] for name in names}
    with torch.inference_mode():
        for name in names:
            for _ in range(warmup):
                functions[name](x)
        synchronize(x)
        order = list(names)
        shuffler = random.Random(seed)
        for _ in range(repeats):
            shuffler.shuffle(order)
            for name in order:
                fn = functions[name]
                start = time.perf_counter()
                fn(x)
                synchronize(x)
                samples[name].append((time.perf_counter() - start) * 1e3)
    return {name: Timing(tuple(values)) for name, values in samples.items()}


def paired_ratio(numerator: Timing, denominator: Timing) -> float:
    """Median over rounds of ``numerator[r] / denominator[r]`` for two Timings from the same
    :func:`time_interleaved` call: less sensitive to slow drift than a ratio of medians."""
    if len(numerator.samples_ms) != len(denominator.samples_ms):
        raise ValueError(
            f"numerator and denominator must come from the same rounds, got "
            f"{len(numerator.samples_ms)} and {len(denominator.samples_ms)} samples"
        )
    return statistics.median(a / b for a, b in zip(numerator.samples_ms, denominator.samples_ms, strict=True))


# --------------------------------------------------------------------------- FLOPs


def attention_forward_flops(seq_len: int, d_model: int = 512, *, batch: int = 1, causal: bool = True) -> int:
    """Floating-point operations of one self-attention forward (multiply + add = 2 FLOPs).

    For ``x (batch, n, d)`` with ``d = d_model = heads * d_head``:

    * QKV projection ``(n, d) @ (d, 3d)``: ``6 n d^2``;
    * scores ``Q K^T``, per head ``(n, d_head) @ (d_head, n)``, all heads: ``2 n^2 d``;
    * ``weights @ V``, all heads: ``2 n^2 d``;
    * output projection ``(n, d) @ (d, d)``: ``2 n d^2``.

    Dense total ``batch * (8 n d^2 + 4 n^2 d)``. With ``causal=True`` (the default, used by
    the benchmark) only the ``n (n + 1) / 2`` visible (query, key) pairs count, so the two
    attention matmuls give ``2 n (n + 1) d`` instead of ``4 n^2 d``: the *useful* work,
    whether an implementation skips the masked half (flash kernels) or computes and
    discards it (the naive path). Softmax, masking, scaling and biases are not counted
    (``O(n^2)`` and ``O(n d)`` against ``O(n^2 d)``). The head count does not appear.
    """
    expect_int("seq_len", seq_len)
    expect_int("d_model", d_model)
    expect_int("batch", batch)
    n, d = seq_len, d_model
    attention = 2 * n * (n + 1) * d if causal else 4 * n * n * d
    return batch * (8 * n * d * d + attention)


def matmul_reference(
    m: int = 4096, k: int = 512, n: int = 512, *, seed: int = 0, device: torch.device | None = None
) -> tuple[Callable[[object], torch.Tensor], int]:
    """A float32 ``(m, k) @ (k, n)`` matmul to measure the machine's GEMM throughput.

    Returns ``(fn, flops)``: ``fn(ignored)`` computes the product (the argument lets it sit
    in :func:`time_interleaved` next to the attention competitors) and ``flops = 2 m k n``.
    The default is the shape of a ``d_model = 512`` projection of 4096 tokens.
    """
    for name, value in (("m", m), ("k", k), ("n", n)):
        expect_int(name, value)
    generator = torch.Generator().manual_seed(seed)
    a = torch.randn(m, k, generator=generator).to(device)
    b = torch.randn(k, n, generator=generator).to(device)
    return (lambda _ignored=None: a @ b), 2 * m * k * n


# --------------------------------------------------------------------------- memory


def attention_matrix_mb(seq_len: int, num_heads: int = 8, *, batch: int = 1, bytes_per_element: int = 4) -> float:
    """Size in MiB (2**20 bytes) of one ``(batch, heads, seq, seq)`` score or weight tensor,
    the tensor the naive path materialises (several times) and the fused path never does."""
    return batch * num_heads * seq_len * seq_len * bytes_per_element / MIB


@dataclass(frozen=True)
class MemoryMeasurement:
    """Result of :func:`measure_peak_memory`; sizes in MiB (2**20 bytes).

    ``peak_mb``: how far resident memory rose above its level just before the forward call.
    ``baseline_mb``: resident memory of the process before the call (interpreter, torch,
    module, input). ``state_mb``: parameters + buffers of the competitor's module(s).
    ``method``: ``"vmhwm"`` or ``"ru_maxrss"`` (see :func:`measure_peak_memory`).
    """

    implementation: str
    seq_len: int
    peak_mb: float
    baseline_mb: float
    state_mb: float
    method: str


def status_kib(field: str) -> int:
    """A ``kB`` field of ``/proc/self/status`` (Linux), e.g. ``"VmRSS"`` or ``"VmHWM"``."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field} line")


def can_reset_peak_rss() -> bool:
    """Whether this process may reset its peak-RSS counter (Linux ``/proc/self/clear_refs``)."""
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


def ru_maxrss_mib() -> float:
    """Peak resident memory of this process so far, in MiB (``resource.getrusage``)."""
    import resource

    raw = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports KiB, macOS bytes.
    return raw / MIB if sys.platform == "darwin" else raw / 1024


def memory_worker(argv: Sequence[str]) -> None:
    """Body of the measuring subprocess: one forward of one competitor; prints one JSON line.

    ``argv``: implementation, seq_len, d_model, num_heads, batch, threads, method
    (``"vmhwm"`` or ``"ru_maxrss"``), run (``"1"`` to call the forward, ``"0"`` not to).
    """
    impl, seq_len, d_model, num_heads, batch, threads, method, run = argv
    seq_len, d_model, num_heads, batch, threads = map(int, (seq_len, d_model, num_heads, batch, threads))
    torch.set_num_threads(threads)
    competitors = build_competitors(d_model, num_heads, max_seq_len=seq_len, names=[impl])
    fn = competitors.forward_functions(seq_len)[impl]
    small = competitors.forward_functions(min(8, seq_len))[impl]
    x = torch.randn(batch, seq_len, d_model)
    modules = {id(m): m for m in competitors.modules.values()}.values()
    state = {id(t): t for m in modules for t in m.state_dict().values()}
    state_mb = sum(t.numel() * t.element_size() for t in state.values()) / MIB
    out = None  # the forward's output stays alive until the peak is read
    with torch.inference_mode():
        # A tiny call first, so one-time set-up (thread pool, kernel selection) is not counted.
        small(x[:, : min(8, seq_len)])
        gc.collect()
        if method == "vmhwm":
            before_kib = status_kib("VmRSS")
            with open("/proc/self/clear_refs", "w") as handle:
                handle.write("5")  # peak RSS := current RSS
            out = fn(x)
            peak_kib = status_kib("VmHWM")
            result = {"baseline_mb": before_kib / 1024, "peak_mb": (peak_kib - before_kib) / 1024}
        else:
            if run == "1":
                out = fn(x)
            result = {"maxrss_mb": ru_maxrss_mib()}
    del out
    result["state_mb"] = state_mb
    print(json.dumps(result))


def run_worker(
    impl: str,
    seq_len: int,
    d_model: int,
    num_heads: int,
    batch: int,
    threads: int,
    method: str,
    run: bool,
    timeout: float,
) -> dict[str, float]:
    """Run :func:`memory_worker` in a fresh Python process and return its JSON result."""
    args = [impl, seq_len, d_model, num_heads, batch, threads, method, int(run)]
    completed = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), WORKER_COMMAND, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if completed.returncode != 0:
        raise RuntimeError(
            f"memory measurement of {impl!r} at seq_len={seq_len} failed "
            f"(exit code {completed.returncode}):\n{completed.stderr[-2000:]}"
        )
    return json.loads(completed.stdout.strip().splitlines()[-1])


def measure_peak_memory(
    impl_name: str,
    seq_len: int,
    *,
    d_model: int = 512,
    num_heads: int = 8,
    batch: int = 1,
    threads: int | None = None,
    timeout: float = 900.0,
) -> MemoryMeasurement:
    """Peak extra host memory of one forward call of ``impl_name`` on ``x (batch, seq_len,
    d_model)``, measured in a fresh Python process (so nothing earlier in *this* process —
    cached allocations, other competitors — can hide or inflate it).

    Method, Linux (``"vmhwm"``): the subprocess builds the module and the input, makes one
    tiny call (so one-time library set-up is not counted), reads its resident set size
    ``VmRSS``, resets the kernel's peak-RSS counter (``echo 5 > /proc/self/clear_refs``),
    runs the forward once, and reads the peak ``VmHWM``; the result is ``VmHWM - VmRSS``.
    Elsewhere (``"ru_maxrss"``): two subprocesses, one building module and input without
    the forward call, one with it; the result is the difference of their
    ``resource.getrusage(...).ru_maxrss``.

    Why resident memory rather than ``torch.profiler(profile_memory=True)``: it counts
    every byte the forward makes the OS hand over (tensors, but also library workspaces),
    needs no private profiler event format, and a peak of several GiB dwarfs the
    allocator's page-level noise. It does *not* count memory that was already resident
    before the call (the naive path's ``(context, context)`` mask buffer is part of
    ``state_mb``, not of ``peak_mb``). Not available on Windows (no ``resource`` module).
    """
    expect_choice("impl_name", impl_name, IMPLEMENTATIONS)
    expect_int("seq_len", seq_len)
    threads = torch.get_num_threads() if threads is None else expect_int("threads", threads)
    common = (impl_name, seq_len, d_model, num_heads, batch, threads)
    if sys.platform.startswith("linux") and can_reset_peak_rss():
        data = run_worker(*common, "vmhwm", True, timeout)
        return MemoryMeasurement(impl_name, seq_len, data["peak_mb"], data["baseline_mb"], data["state_mb"], "vmhwm")
    try:
        import resource  # noqa: F401  (only to fail early, with a clear message)
    except ImportError:
        raise RuntimeError("peak memory is measured with the resource module, which this platform lacks") from None
    baseline = run_worker(*common, "ru_maxrss", False, timeout)
    measured = run_worker(*common, "ru_maxrss", True, timeout)
    return MemoryMeasurement(
        impl_name,
        seq_len,
        measured["maxrss_mb"] - baseline["maxrss_mb"],
        baseline["maxrss_mb"],
        measured["state_mb"],
        "ru_maxrss",
    )


if __name__ == "__main__":
    if sys.argv[1:2] != [WORKER_COMMAND] or len(sys.argv) != 10:
        sys.exit(
            f"usage: python {sys.argv[0]} {WORKER_COMMAND} IMPL SEQ_LEN D_MODEL HEADS BATCH THREADS METHOD RUN\n"
            "(started by measure_peak_memory; run benchmarks/bench_forward.py instead)"
        )
    memory_worker(sys.argv[2:])
