"""Per-token decode time against position, for the two key/value caches of notebook 08, on the CPU.

    python benchmarks/bench_decode.py [--positions 128 512 1024 2048 4096] [--steps 32] [--threads 2] [--quick]

A causal ``MultiHeadSelfAttention(512, 8, rope=RotaryEmbedding(64))``, batch 1, float32, under
``torch.inference_mode``. For each start position ``p`` and each cache, the cache is first filled
with ``p`` tokens (one untimed prefill), then ``--steps`` single tokens are decoded and each step is
timed; the table shows the median per-token time. The two caches decode the same tokens and
must give the same outputs (checked first, against the full forward pass).

* concatenating (``KVCache()``): each step ``torch.cat``-s the new row onto the cache, copying the
  whole cache: the copy grows with the position;
* preallocated (``KVCache(capacity=...)``): one buffer, each step writes one row in place.

Both still read every cached key once per step: attention itself is linear in the position. The
table also times ``F.scaled_dot_product_attention`` alone on one query and ``p`` keys (the
attention a decode step cannot avoid), and the preallocated step's time without it.

Reported, never asserted: each cache's time at the last position over its time at the first
(target for the preallocated cache: at most 1.3 between 128 and 4096), and the same ratio for
the preallocated step without its attention.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from mhsa_helpers import KVCache, MultiHeadSelfAttention, RotaryEmbedding

D_MODEL, HEADS = 512, 8
TARGET = 1.3


def decode_times(
    module: MultiHeadSelfAttention, prompt: torch.Tensor, tokens: torch.Tensor, cache: KVCache
) -> list[float]:
    """Milliseconds per decoded token, after an untimed prefill of ``prompt (1, p, d_model)``."""
    module(prompt, cache=cache)
    times = []
    for t in range(tokens.shape[1]):
        start = time.perf_counter()
        module(tokens[:, t : t + 1], cache=cache)
        times.append((time.perf_counter() - start) * 1000)
    return times


def attention_times(position: int, steps: int) -> list[float]:
    """Milliseconds of F.scaled_dot_product_attention alone: one query over ``position + 1`` keys."""
    q = torch.randn(1, HEADS, 1, D_MODEL // HEADS)
    k, v = torch.randn(2, 1, HEADS, position + 1, D_MODEL // HEADS).unbind(0)
    F.scaled_dot_product_attention(q, k, v)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        F.scaled_dot_product_attention(q, k, v)
        times.append((time.perf_counter() - start) * 1000)
    return times


def check_equal(module: MultiHeadSelfAttention) -> None:
    x = torch.randn(1, 40, D_MODEL)
    full = module(x)
    for cache in (KVCache(), KVCache(capacity=64)):
        out = torch.cat(
            [module(x[:, :8], cache=cache)] + [module(x[:, t : t + 1], cache=cache) for t in range(8, 40)], 1
        )
        torch.testing.assert_close(out, full, atol=1e-4, rtol=1e-4)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--positions", type=int, nargs="+", default=[128, 512, 1024, 2048, 4096])
    parser.add_argument("--steps", type=int, default=32, help="decoded tokens timed per position (default 32)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="positions 128 and 1024, 8 steps (a smoke test)")
    args = parser.parse_args()
    if args.quick:
        args.positions, args.steps = [128, 1024], 8
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    last = max(args.positions) + args.steps
    module = MultiHeadSelfAttention(
        D_MODEL, HEADS, causal=True, rope=RotaryEmbedding(D_MODEL // HEADS, max_seq_len=last)
    ).eval()
    rows = []
    with torch.inference_mode():
        check_equal(module)
        x = torch.randn(1, last, D_MODEL)
        for position in args.positions:
            prompt, tokens = x[:, :position], x[:, position : position + args.steps]
            # Alternate which cache goes first, so a slow drift of the machine hits both alike.
            growing = decode_times(module, prompt, tokens, KVCache())
            fixed = decode_times(module, prompt, tokens, KVCache(capacity=last))
            growing += decode_times(module, prompt, tokens, KVCache())
            fixed = decode_times(module, prompt, tokens, KVCache(capacity=last)) + fixed
            attention = attention_times(position, 2 * args.steps)
            rows.append((position, statistics.median(growing), statistics.median(fixed), statistics.median(attention)))
    print(
        f"Decoding one token at a time: d_model {D_MODEL}, {HEADS} heads, batch 1, float32, CPU, "
        f"{args.threads} threads, torch {torch.__version__}; median ms per token over {2 * args.steps} steps\n"
    )
    print(
        "| position | concatenating cache | preallocated cache | concatenating / preallocated "
        "| attention alone (F.sdpa) | preallocated without attention |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for position, growing, fixed, attention in rows:
        print(
            f"| {position} | {growing:.3f} | {fixed:.3f} | {growing / fixed:.2f} | {attention:.3f} "
            f"| {fixed - attention:.3f} |"
        )
    first, final = rows[0], rows[-1]
    growth_fixed, growth_growing = final[2] / first[2], final[1] / first[1]
    growth_rest = (final[2] - final[3]) / (first[2] - first[3])
    verdict = "meets" if growth_fixed <= TARGET else "misses"
    print(
        f"\nper-token time at position {final[0]} over position {first[0]}: preallocated {growth_fixed:.2f} "
        f"({verdict} the target of at most {TARGET}), concatenating {growth_growing:.2f}; "
        f"preallocated without the attention it cannot avoid: {growth_rest:.2f}"
    )


if __name__ == "__main__":
    main()
