"""What absorption trades in latent attention (notebook 13), on the CPU: FLOPs, bytes and time per call.

    python benchmarks/bench_mla.py [--contexts 256 1024 4096] [--prompt 512] [--repeats N] [--quick]

``MultiHeadLatentAttention(1024, 8, d_latent=512, d_head=128, rope=RotaryEmbedding(64))`` (DeepSeek-V2's head,
latent and RoPE sizes, with 8 heads instead of 128), batch 1, float32, the two paths of its forward:

* materialised: every head's keys and values rebuilt from the cached latents, then attention over them;
* absorbed: ``W_UK`` taken into the queries, attention over the latents themselves, ``W_UV`` after.

One table per kind of call, each measured in one run with its rows interleaved (harness.time_interleaved):
a decoding step (one new token over ``past`` cached tokens, a fresh ``LatentCache`` holding them each call) at
each context, and a prompt of ``--prompt`` tokens with no cache. Beside each time, the multiply-adds counted from
the shapes (projections, the keys and values rebuilt, scores, weighted sum) and the bytes of the keys and values
the path builds and reads (the cache's latents are read by both). Before timing, the two paths are checked equal.
Nothing else is asserted: the script prints the medians, the counts and the ratios.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import harness
import torch

from mhsa_helpers import LatentCache, MultiHeadLatentAttention, RotaryEmbedding

D_MODEL, HEADS, D_HEAD, D_LATENT, D_ROPE = 1024, 8, 128, 512, 64
NOTHING = torch.empty(0)


def multiply_adds(path: str, new: int, past: int) -> tuple[int, int]:
    """(multiply-adds, bytes of per-head keys and values built) of one call: ``new`` tokens after ``past``.

    Both: the projections of the new tokens (queries, latent, rotated key) and ``W_O``. Materialised: every
    head's keys and values rebuilt for all ``past + new`` tokens, then scores over ``d_head + d_rope`` and a
    weighted sum over ``d_head``. Absorbed: each query taken into the latent space (``d_head x d_latent`` per
    head), scores over ``d_latent + d_rope``, a weighted sum over ``d_latent``, then ``W_UV`` per head.
    Causal masking is not discounted: the fused kernels compute the full rectangle or close to it.
    """
    keys = past + new
    width = HEADS * D_HEAD
    shared = new * (D_MODEL * (width + HEADS * D_ROPE + D_LATENT + D_ROPE) + width * D_MODEL)
    if path == "materialised":
        rebuilt = 2 * keys * D_LATENT * width
        attention = HEADS * new * keys * ((D_HEAD + D_ROPE) + D_HEAD)
        return shared + rebuilt + attention, 2 * keys * width * 4
    absorb = 2 * HEADS * new * D_HEAD * D_LATENT
    attention = HEADS * new * keys * ((D_LATENT + D_ROPE) + D_LATENT)
    return shared + absorb + attention, 0


def module() -> MultiHeadLatentAttention:
    torch.manual_seed(0)
    layer = MultiHeadLatentAttention(D_MODEL, HEADS, D_LATENT, d_head=D_HEAD, rope=RotaryEmbedding(D_ROPE, 8192))
    return layer.eval()


def step_rows(layer: MultiHeadLatentAttention, contexts: list[int]) -> dict[str, Callable[[torch.Tensor], object]]:
    """One decoding step per context and path, each call on a fresh cache holding the same past."""
    generator = torch.Generator().manual_seed(1)
    rows: dict[str, Callable[[torch.Tensor], object]] = {}
    for past in contexts:
        latents = torch.randn(1, past, D_LATENT, generator=generator)
        rope_keys = torch.randn(1, past, D_ROPE, generator=generator)
        x = torch.randn(1, 1, D_MODEL, generator=generator)

        def step(absorbed: bool, latents: torch.Tensor = latents, rope_keys: torch.Tensor = rope_keys, x=x) -> object:
            cache = LatentCache()
            cache.append(latents, rope_keys)  # the first append keeps the tensors: no copy
            return layer(x, cache=cache, absorbed=absorbed)

        torch.testing.assert_close(step(True), step(False), rtol=1e-4, atol=1e-5)
        for path in ("materialised", "absorbed"):
            rows[f"{past} {path}"] = lambda _, step=step, path=path: step(path == "absorbed")
    return rows


def print_table(title: str, timings: dict[str, harness.Timing], calls: list[tuple[str, int, int]]) -> None:
    """One row per (name, new, past); the ratio compares each absorbed row with its materialised one."""
    print(f"\n## {title}\n")
    print("| past | path | median ms | IQR ms | multiply-adds (M) | keys and values built (MiB) | × materialised |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for name, new, past in calls:
        path = name.split()[-1]
        macs, built = multiply_adds(path, new, past)
        timing = timings[name]
        ratio = harness.paired_ratio(timing, timings[name.replace("absorbed", "materialised")])
        print(
            f"| {past} | {path} | {timing.median_ms:.3f} | {timing.iqr_ms:.3f} | {macs / 1e6:.1f} | "
            f"{built / 2**20:.2f} | {ratio:.2f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contexts", type=int, nargs="+", default=[256, 1024, 4096], help="cached tokens")
    parser.add_argument("--prompt", type=int, default=512, help="tokens of the prompt pass (default 512)")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="tiny sizes and 3 rounds: checks that it runs")
    args = parser.parse_args()
    if args.quick:
        args.contexts, args.prompt, args.repeats = [8, 16], 8, 3
    torch.set_num_threads(args.threads)
    layer = module()
    print(
        f"# Latent attention, absorbed or materialised: d_model {D_MODEL}, {HEADS} heads of {D_HEAD}, d_latent "
        f"{D_LATENT}, d_rope {D_ROPE}; {args.threads} threads, {args.repeats} rounds"
    )
    print("Cross-check: both paths give the same outputs for every call timed.")

    rows = step_rows(layer, args.contexts)
    timings = harness.time_interleaved(rows, NOTHING, repeats=args.repeats)
    calls = [(name, 1, int(name.split()[0])) for name in rows]
    print_table("One decoding step (one new token over `past` cached ones)", timings, calls)

    prompt = torch.randn(1, args.prompt, D_MODEL, generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(layer(prompt, absorbed=True), layer(prompt), rtol=1e-4, atol=1e-5)
    rows = {
        "0 materialised": lambda _: layer(prompt),
        "0 absorbed": lambda _: layer(prompt, absorbed=True),
    }
    timings = harness.time_interleaved(rows, NOTHING, repeats=args.repeats)
    print_table(f"A prompt of {args.prompt} tokens, no cache (past 0)", timings, [(n, args.prompt, 0) for n in rows])


if __name__ == "__main__":
    main()
