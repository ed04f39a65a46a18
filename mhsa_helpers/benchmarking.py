"""Forward time and peak memory of multi-head self-attention, done several ways.

The competitors all hold the *same* weights, copied from one
``MultiHeadSelfAttention(d_model, num_heads, causal=True)``, so their outputs can be
checked against each other before anything is timed (:func:`cross_check`):

* ``"package_fast"`` — :class:`~mhsa_helpers.mha.MultiHeadSelfAttention`, the default call
  (heads computed by ``torch.nn.functional.scaled_dot_product_attention``);
* ``"package_weights"`` — the same module called with ``need_weights=True`` (explicit
  scores, mask and :func:`~mhsa_helpers.softmax.softmax`, returns the weights);
* ``"naive_seed_style"`` — :class:`NaiveSeedStyleAttention`, written like seed 002's
  ``MultiHeadAttention``: three ``nn.Linear``, explicit ``(seq, seq)`` scores, a registered
  ``triu`` mask, ``masked_fill``, ``torch.softmax``, ``weights @ v``;
* ``"torch_mha"`` / ``"torch_mha_weights"`` — ``torch.nn.MultiheadAttention`` with a causal
  ``attn_mask`` and ``is_causal=True``, ``need_weights=False`` / ``True`` (per-head weights);
* ``"hand_wired_sdpa"`` — :class:`HandWiredSDPA`, the nanoGPT pattern: one fused QKV
  ``nn.Linear``, split, view/transpose, ``F.scaled_dot_product_attention(is_causal=True)``,
  transpose back, output projection. The yardstick for the package's fast path.

Timing (:func:`time_forward`, :func:`time_interleaved`) uses ``time.perf_counter`` under
``torch.inference_mode`` and reports the median and the interquartile range in
milliseconds. :func:`time_interleaved` runs one call of every competitor per round, in a
fresh random order each round, so slow drifts of the machine (other jobs, clock changes)
hit every competitor alike. Peak memory (:func:`peak_memory_mb`) is measured in a fresh
Python process per measurement; see its docstring for the method.

Everything here is meant for the CPU (the benchmark question is about CPU time); the
timers synchronise CUDA when given CUDA tensors, but :func:`peak_memory_mb` measures
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
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, Mapping, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from .checks import check_choice, check_positive_int
from .mha import MultiHeadSelfAttention

__all__ = [
    "IMPLEMENTATIONS",
    "LABELS",
    "REFERENCE",
    "NaiveSeedStyleAttention",
    "HandWiredSDPA",
    "Competitors",
    "build_competitors",
    "cross_check",
    "Timing",
    "time_forward",
    "time_interleaved",
    "paired_ratio",
    "attention_forward_flops",
    "matmul_reference",
    "matmul_gflops",
    "attention_matrix_mb",
    "MemoryMeasurement",
    "measure_peak_memory",
    "peak_memory_mb",
]

IMPLEMENTATIONS = (
    "package_fast",
    "package_weights",
    "naive_seed_style",
    "torch_mha",
    "torch_mha_weights",
    "hand_wired_sdpa",
)
"""Names of the competitors, in the order the benchmark prints them."""

REFERENCE = "hand_wired_sdpa"
"""The competitor every time is divided by."""

LABELS = {
    "package_fast": "MultiHeadSelfAttention (fast path)",
    "package_weights": "MultiHeadSelfAttention need_weights=True",
    "naive_seed_style": "naive, seed-002 style",
    "torch_mha": "nn.MultiheadAttention need_weights=False",
    "torch_mha_weights": "nn.MultiheadAttention need_weights=True",
    "hand_wired_sdpa": "hand-wired F.sdpa (nanoGPT style)",
}
"""Human-readable name of each competitor, for tables and plots."""

MIB = 2**20

# A competitor takes x (batch, seq, d_model) and returns (output, weights or None).
ForwardFn = Callable[[torch.Tensor], Tuple[torch.Tensor, Optional[torch.Tensor]]]


# --------------------------------------------------------------------------- competitors


class NaiveSeedStyleAttention(nn.Module):
    """Causal multi-head attention written the way seed 002 writes it (the naive path).

    Separate ``W_query``, ``W_key``, ``W_value`` ``nn.Linear(d_in, d_out)``; the mask is a
    *float* ``triu(ones(context_length, context_length), diagonal=1)`` buffer (1 = blocked),
    sliced and turned to bool on every call, exactly as in the seed. Every call therefore
    materialises ``(batch, heads, seq, seq)`` scores and weights, and the module holds a
    ``context_length**2`` float buffer (256 MiB at 8192) for as long as it lives.

    Shapes: ``x (batch, seq, d_in)`` with ``seq <= context_length`` -> ``(batch, seq, d_out)``.
    """

    def __init__(
        self,
        d_in: int,
        d_out: int,
        dropout: float,
        context_length: int,
        num_heads: int,
        qkv_bias: bool = False,
    ) -> None:
        super().__init__()
        assert d_out % num_heads == 0, "d_out must be divisible by num_heads"
        self.d_out = d_out
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        self.op_proj = nn.Linear(d_out, d_out)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, num_tokens, _ = x.shape
        queries = self.W_query(x)
        keys = self.W_key(x)
        values = self.W_value(x)
        # (b, num_tokens, d_out) -> (b, num_heads, num_tokens, head_dim)
        queries = queries.view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        keys = keys.view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        values = values.view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        attn_scores = (queries @ keys.transpose(-2, -1)) / (self.head_dim**0.5)
        mask = self.mask[:num_tokens, :num_tokens].to(x.device).bool()
        attn_scores = attn_scores.masked_fill(mask.unsqueeze(0).unsqueeze(0), float("-inf"))
        attn_weights = torch.softmax(attn_scores, dim=-1)
        attn_weights = self.dropout(attn_weights)
        context = (attn_weights @ values).transpose(1, 2)
        context = context.reshape(b, num_tokens, self.d_out)
        return self.op_proj(context)


class HandWiredSDPA(nn.Module):
    """Causal self-attention wired by hand around ``F.scaled_dot_product_attention``
    (nanoGPT's ``CausalSelfAttention`` without dropout): the yardstick for the fast path.

    Parameters: ``c_attn = nn.Linear(d_model, 3 * d_model)`` with rows ``[W_Q; W_K; W_V]``,
    ``c_proj = nn.Linear(d_model, d_model)``.
    Shapes: ``x (batch, seq, d_model)`` -> ``(batch, seq, d_model)``.
    """

    def __init__(self, d_model: int, num_heads: int, bias: bool = True) -> None:
        super().__init__()
        assert d_model % num_heads == 0, "d_model must be divisible by num_heads"
        self.d_model = d_model
        self.num_heads = num_heads
        self.c_attn = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.c_proj = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(self.d_model, dim=2)
        h = self.num_heads
        q = q.view(B, T, h, C // h).transpose(1, 2)  # (B, h, T, d_head)
        k = k.view(B, T, h, C // h).transpose(1, 2)
        v = v.view(B, T, h, C // h).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


@dataclass
class Competitors:
    """The competing implementations, all holding the weights of ``reference``.

    ``modules`` maps a name of :data:`IMPLEMENTATIONS` to its ``nn.Module`` (the two
    package entries share ``reference``, the two ``nn.MultiheadAttention`` entries share
    one module). Call :meth:`forward_functions` to get callables for a given length.
    """

    reference: MultiHeadSelfAttention
    modules: Dict[str, nn.Module]
    names: Tuple[str, ...]

    def forward_functions(self, seq_len: int) -> Dict[str, ForwardFn]:
        """``{name: fn}`` with ``fn(x (batch, seq_len, d_model)) -> (output (batch, seq_len,
        d_model), weights (batch, heads, seq_len, seq_len) or None)``.

        The boolean ``attn_mask`` that ``nn.MultiheadAttention`` needs (``True`` = blocked)
        is built here, once per length, outside anything that is timed.
        """
        check_positive_int("seq_len", seq_len)
        fns: Dict[str, ForwardFn] = {}
        for name in self.names:
            module = self.modules[name]
            if name == "package_fast":
                fns[name] = lambda x, m=module: (m(x), None)
            elif name == "package_weights":
                fns[name] = lambda x, m=module: m(x, need_weights=True)
            elif name in ("naive_seed_style", "hand_wired_sdpa"):
                fns[name] = lambda x, m=module: (m(x), None)
            else:
                device = next(module.parameters()).device
                blocked = torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).triu(1)
                need = name == "torch_mha_weights"
                fns[name] = lambda x, m=module, mask=blocked, need=need: m(
                    x, x, x, attn_mask=mask, is_causal=True, need_weights=need, average_attn_weights=False
                )
        return fns


def build_competitors(
    d_model: int = 512,
    num_heads: int = 8,
    *,
    max_seq_len: int = 4096,
    names: Iterable[str] = IMPLEMENTATIONS,
    seed: int = 0,
    device: Optional[torch.device] = None,
    dtype: torch.dtype = torch.float32,
) -> Competitors:
    """Build the competitors named in ``names``, in eval mode, with identical weights.

    The weights come from ``MultiHeadSelfAttention(d_model, num_heads, causal=True)``
    initialised under ``torch.manual_seed(seed)`` (biases included). ``max_seq_len`` sizes
    the naive path's ``(max_seq_len, max_seq_len)`` float mask buffer; it is only allocated
    when ``"naive_seed_style"`` is requested.
    """
    names = tuple(names)
    for name in names:
        check_choice("names", name, IMPLEMENTATIONS)
    check_positive_int("max_seq_len", max_seq_len)
    factory = {"device": device, "dtype": dtype}
    torch.manual_seed(seed)
    reference = MultiHeadSelfAttention(d_model, num_heads, causal=True, **factory).eval()
    qkv_w, qkv_b = reference.qkv_proj.weight, reference.qkv_proj.bias
    o_w, o_b = reference.out_proj.weight, reference.out_proj.bias
    modules: Dict[str, nn.Module] = {}
    torch_mha: Optional[nn.MultiheadAttention] = None
    with torch.no_grad():
        for name in names:
            if name in ("package_fast", "package_weights"):
                modules[name] = reference
            elif name == "naive_seed_style":
                naive = NaiveSeedStyleAttention(d_model, d_model, 0.0, max_seq_len, num_heads, qkv_bias=True)
                naive = naive.to(**factory)
                for linear, w, b in zip(
                    (naive.W_query, naive.W_key, naive.W_value), qkv_w.chunk(3), qkv_b.chunk(3)
                ):
                    linear.weight.copy_(w)
                    linear.bias.copy_(b)
                naive.op_proj.weight.copy_(o_w)
                naive.op_proj.bias.copy_(o_b)
                modules[name] = naive.eval()
            elif name == "hand_wired_sdpa":
                wired = HandWiredSDPA(d_model, num_heads).to(**factory)
                wired.c_attn.weight.copy_(qkv_w)
                wired.c_attn.bias.copy_(qkv_b)
                wired.c_proj.weight.copy_(o_w)
                wired.c_proj.bias.copy_(o_b)
                modules[name] = wired.eval()
            else:
                if torch_mha is None:
                    torch_mha = nn.MultiheadAttention(d_model, num_heads, batch_first=True, **factory)
                    torch_mha.in_proj_weight.copy_(qkv_w)
                    torch_mha.in_proj_bias.copy_(qkv_b)
                    torch_mha.out_proj.weight.copy_(o_w)
                    torch_mha.out_proj.bias.copy_(o_b)
                    torch_mha.eval()
                modules[name] = torch_mha
    return Competitors(reference=reference, modules=modules, names=names)


def cross_check(
    competitors: Competitors,
    seq_len: int = 48,
    batch: int = 2,
    *,
    seed: int = 1,
    atol: float = 1e-5,
    rtol: float = 1e-4,
) -> Dict[str, float]:
    """Assert that every competitor gives the output of ``"hand_wired_sdpa"`` (or, if that
    is absent, of the first competitor) on ``x (batch, seq_len, d_model)``, and that the
    weight-returning competitors agree on the per-head weights ``(batch, heads, seq, seq)``.

    Raises ``AssertionError`` (from ``torch.testing.assert_close``) on a mismatch.
    Returns ``{name: max |output - reference output|}``.
    """
    d_model = competitors.reference.d_in
    param = competitors.reference.qkv_proj.weight
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, seq_len, d_model, generator=generator).to(device=param.device, dtype=param.dtype)
    fns = competitors.forward_functions(seq_len)
    with torch.inference_mode():
        results = {name: fn(x) for name, fn in fns.items()}
    base_name = REFERENCE if REFERENCE in results else competitors.names[0]
    base_out = results[base_name][0]
    differences = {}
    weights = [(name, w) for name, (_, w) in results.items() if w is not None]
    for name, (out, _) in results.items():
        torch.testing.assert_close(out, base_out, atol=atol, rtol=rtol, msg=lambda m, n=name: f"{n} vs {base_name}: {m}")
        differences[name] = float((out - base_out).abs().max())
    for name, w in weights[1:]:
        torch.testing.assert_close(w, weights[0][1], atol=atol, rtol=rtol, msg=lambda m, n=name: f"weights of {n}: {m}")
    return differences


# --------------------------------------------------------------------------- timing


@dataclass(frozen=True)
class Timing:
    """Wall-clock samples of one call, in milliseconds, with their median and quartiles."""

    samples_ms: Tuple[float, ...]

    @property
    def median_ms(self) -> float:
        return statistics.median(self.samples_ms)

    @property
    def min_ms(self) -> float:
        """Fastest sample: the least disturbed by other jobs, but an optimistic estimate."""
        return min(self.samples_ms)

    def _quartiles(self) -> Tuple[float, float]:
        if len(self.samples_ms) < 2:
            return self.samples_ms[0], self.samples_ms[0]
        q1, _, q3 = statistics.quantiles(self.samples_ms, n=4, method="inclusive")
        return q1, q3

    @property
    def q1_ms(self) -> float:
        return self._quartiles()[0]

    @property
    def q3_ms(self) -> float:
        return self._quartiles()[1]

    @property
    def iqr_ms(self) -> float:
        """Interquartile range ``q3 - q1`` (ms): the spread of the middle half of the samples."""
        q1, q3 = self._quartiles()
        return q3 - q1


def _synchronize(x: torch.Tensor) -> None:
    if x.device.type == "cuda":
        torch.cuda.synchronize(x.device)


def time_interleaved(
    functions: Mapping[str, Callable[[torch.Tensor], object]],
    x: torch.Tensor,
    *,
    repeats: int,
    warmup: int = 2,
    seed: int = 0,
) -> Dict[str, Timing]:
    """Time every ``functions[name](x)``, one call of each per round, ``repeats`` rounds.

    ``warmup`` untimed calls of each function come first. Each round runs the functions in
    a fresh random order (``random.Random(seed)``): on a shared machine a call that follows
    a long, all-cores one is often slowed down (the scheduler hands the cores back to other
    jobs), and a fixed or merely rotated order would always hand that penalty to the same
    function. All calls run under ``torch.inference_mode``. Returns ``{name: Timing}``;
    sample ``r`` of every Timing comes from round ``r``, which :func:`paired_ratio` relies on.
    """
    check_positive_int("repeats", repeats)
    check_positive_int("warmup", warmup, allow_zero=True)
    names = list(functions)
    if not names:
        raise ValueError("functions must hold at least one callable, got an empty mapping")
    samples: Dict[str, list] = {name: [] for name in names}
    with torch.inference_mode():
        for name in names:
            for _ in range(warmup):
                functions[name](x)
        _synchronize(x)
        order = list(names)
        shuffler = random.Random(seed)
        for _ in range(repeats):
            shuffler.shuffle(order)
            for name in order:
                fn = functions[name]
                start = time.perf_counter()
                fn(x)
                _synchronize(x)
                samples[name].append((time.perf_counter() - start) * 1e3)
    return {name: Timing(tuple(values)) for name, values in samples.items()}


def time_forward(
    fn: Callable[[torch.Tensor], object], x: torch.Tensor, repeats: int = 10, warmup: int = 2
) -> Timing:
    """Wall-clock time of ``fn(x)`` under ``torch.inference_mode``: ``warmup`` untimed calls,
    then ``repeats`` timed ones. Returns a :class:`Timing` (``.median_ms``, ``.iqr_ms``, ms).

    To compare several functions, prefer :func:`time_interleaved`, which alternates them.
    """
    return time_interleaved({"fn": fn}, x, repeats=repeats, warmup=warmup)["fn"]


def paired_ratio(numerator: Timing, denominator: Timing) -> float:
    """Median over rounds of ``numerator[r] / denominator[r]`` for two Timings from the same
    :func:`time_interleaved` call: less sensitive to slow drift than a ratio of medians."""
    if len(numerator.samples_ms) != len(denominator.samples_ms):
        raise ValueError(
            f"numerator and denominator must come from the same rounds, got "
            f"{len(numerator.samples_ms)} and {len(denominator.samples_ms)} samples"
        )
    return statistics.median(a / b for a, b in zip(numerator.samples_ms, denominator.samples_ms))


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
    check_positive_int("seq_len", seq_len)
    check_positive_int("d_model", d_model)
    check_positive_int("batch", batch)
    n, d = seq_len, d_model
    attention = 2 * n * (n + 1) * d if causal else 4 * n * n * d
    return batch * (8 * n * d * d + attention)


def matmul_reference(
    m: int = 4096, k: int = 512, n: int = 512, *, seed: int = 0, device: Optional[torch.device] = None
) -> Tuple[Callable[[object], torch.Tensor], int]:
    """A float32 ``(m, k) @ (k, n)`` matmul to measure the machine's GEMM throughput.

    Returns ``(fn, flops)``: ``fn(ignored)`` computes the product (the argument lets it sit
    in :func:`time_interleaved` next to the attention competitors) and ``flops = 2 m k n``.
    The default is the shape of a ``d_model = 512`` projection of 4096 tokens.
    """
    for name, value in (("m", m), ("k", k), ("n", n)):
        check_positive_int(name, value)
    generator = torch.Generator().manual_seed(seed)
    a = torch.randn(m, k, generator=generator).to(device)
    b = torch.randn(k, n, generator=generator).to(device)
    return (lambda _ignored=None: a @ b), 2 * m * k * n


def matmul_gflops(m: int = 4096, k: int = 512, n: int = 512, *, repeats: int = 20, warmup: int = 3) -> float:
    """Median throughput (GFLOP/s, 1e9 FLOP per second) of a float32 ``(m, k) @ (k, n)`` matmul
    on the current thread settings: the reference that attention GFLOP/s are compared with."""
    fn, flops = matmul_reference(m, k, n)
    timing = time_forward(fn, torch.empty(0), repeats=repeats, warmup=warmup)
    return flops / (timing.median_ms * 1e-3) / 1e9


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


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field} line")


def _can_reset_peak_rss() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


def _ru_maxrss_mib() -> float:
    import resource

    raw = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports KiB, macOS bytes.
    return raw / MIB if sys.platform == "darwin" else raw / 1024


def _memory_worker(argv: Sequence[str]) -> None:
    """Entry point of the measuring subprocess; prints one JSON line."""
    impl, seq_len, d_model, num_heads, batch, threads, method, run = argv
    seq_len, d_model, num_heads, batch, threads = map(int, (seq_len, d_model, num_heads, batch, threads))
    torch.set_num_threads(threads)
    competitors = build_competitors(d_model, num_heads, max_seq_len=seq_len, names=[impl])
    fn = competitors.forward_functions(seq_len)[impl]
    small = competitors.forward_functions(min(8, seq_len))[impl]
    x = torch.randn(batch, seq_len, d_model)
    state = {id(t): t for m in {id(m): m for m in competitors.modules.values()}.values() for t in m.state_dict().values()}
    state_mb = sum(t.numel() * t.element_size() for t in state.values()) / MIB
    out = None  # the forward's output stays alive until the peak is read
    with torch.inference_mode():
        # A tiny call first, so one-time set-up (thread pool, kernel selection) is not counted.
        small(x[:, : min(8, seq_len)])
        gc.collect()
        if method == "vmhwm":
            before_kib = _status_kib("VmRSS")
            with open("/proc/self/clear_refs", "w") as handle:
                handle.write("5")  # peak RSS := current RSS
            out = fn(x)
            peak_kib = _status_kib("VmHWM")
            result = {"baseline_mb": before_kib / 1024, "peak_mb": (peak_kib - before_kib) / 1024}
        else:
            if run == "1":
                out = fn(x)
            result = {"maxrss_mb": _ru_maxrss_mib()}
    result["state_mb"] = state_mb
    print(json.dumps(result))


def _run_worker(impl: str, seq_len: int, d_model: int, num_heads: int, batch: int, threads: int,
                method: str, run: bool, timeout: float) -> dict:
    code = "import sys; from mhsa_helpers.benchmarking import _memory_worker; _memory_worker(sys.argv[1:])"
    args = [impl, seq_len, d_model, num_heads, batch, threads, method, int(run)]
    completed = subprocess.run(
        [sys.executable, "-c", code, *map(str, args)],
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
    threads: Optional[int] = None,
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
    check_choice("impl_name", impl_name, IMPLEMENTATIONS)
    check_positive_int("seq_len", seq_len)
    threads = torch.get_num_threads() if threads is None else check_positive_int("threads", threads)
    common = (impl_name, seq_len, d_model, num_heads, batch, threads)
    if sys.platform.startswith("linux") and _can_reset_peak_rss():
        data = _run_worker(*common, "vmhwm", True, timeout)
        return MemoryMeasurement(impl_name, seq_len, data["peak_mb"], data["baseline_mb"], data["state_mb"], "vmhwm")
    try:
        import resource  # noqa: F401
    except ImportError:
        raise RuntimeError("peak memory is measured with the resource module, which this platform lacks") from None
    baseline = _run_worker(*common, "ru_maxrss", False, timeout)
    measured = _run_worker(*common, "ru_maxrss", True, timeout)
    return MemoryMeasurement(
        impl_name,
        seq_len,
        measured["maxrss_mb"] - baseline["maxrss_mb"],
        baseline["maxrss_mb"],
        measured["state_mb"],
        "ru_maxrss",
    )


def peak_memory_mb(impl_name: str, n: int, **options) -> float:
    """Peak extra memory (MiB) of one forward of ``impl_name`` on ``x (batch, n, d_model)``
    (default ``(1, n, 512)``, 8 heads), measured in a fresh subprocess; ``options``
    (``d_model``, ``num_heads``, ``batch``, ``threads``, ``timeout``) go to
    :func:`measure_peak_memory`, which documents the method. Linux/macOS only."""
    return measure_peak_memory(impl_name, n, **options).peak_mb
