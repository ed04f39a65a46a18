"""What a sink logit and an output gate cost (notebook 12), on the CPU.

    python benchmarks/bench_sinks.py [--seq 256] [--past 1024] [--repeats N] [--quick]

Two tables, each measured in one run with every row interleaved (harness.time_interleaved):

1. ``attend`` over ``(batch 4, heads 8, seq, 64)``, causal: no sink (PyTorch's fused kernel), a sink on
   the fused path (the sink as one more key with a zero value and an additive mask column), a sink on the
   explicit path (scores, one more softmax column, dropped), for a full pass (``seq`` queries) and for one
   decoding step (one query over ``past`` cached keys). The ratios say which path ``attend`` should take:
   it takes the fused one for more than one query and the explicit one for a single query.
2. ``MultiHeadSelfAttention(512, 8, causal=True)`` forward, ``(1, seq, 512)``, with each of notebook 12's
   options against none.

Nothing is asserted: the script prints the medians and the ratios, measured together.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import harness
import torch
import torch.nn.functional as F

from mhsa_helpers import MultiHeadSelfAttention
from mhsa_helpers.attention import attend

#: The calls hold their own inputs; the harness hands each the same unused tensor.
NOTHING = torch.empty(0)


def attend_rows(seq: int, past: int) -> dict[str, Callable[[torch.Tensor], object]]:
    """The calls of table 1, each on the same tensors."""
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(4, 8, seq, 64, generator=generator)
    step, cached = torch.randn(4, 8, 1, 64, generator=generator), torch.randn(4, 8, past, 64, generator=generator)
    sink = torch.randn(8, 1, generator=generator)
    return {
        "full pass, no sink (fused)": lambda _: attend(q, q, q, is_causal=True),
        "full pass, sink (fused: an extra key)": lambda _: attend(q, q, q, is_causal=True, sink=sink),
        "full pass, sink (explicit softmax)": lambda _: attend(q, q, q, is_causal=True, sink=sink, need_weights=True),
        "decoding step, no sink (fused)": lambda _: attend(step, cached, cached, is_causal=True),
        "decoding step, sink (explicit softmax)": lambda _: attend(step, cached, cached, is_causal=True, sink=sink),
        "decoding step, sink (fused: an extra key)": lambda _: sink_as_a_key(step, cached, sink),
    }


def sink_as_a_key(q: torch.Tensor, k: torch.Tensor, sink: torch.Tensor) -> torch.Tensor:
    """The fused path written out for one query, which attend does not take: one more key of zeros whose
    score is the sink (an additive mask column) and whose value is zero. ``q (batch, heads, 1, d)``, ``k`` as
    keys and values ``(batch, heads, past, d)``, ``sink (heads, 1)``."""
    zeros = k.new_zeros((*k.shape[:-2], 1, k.shape[-1]))
    keys = torch.cat([k, zeros], dim=-2)
    column = torch.zeros((*k.shape[:-2], 1, k.shape[-2] + 1))
    column[..., -1] = sink
    return F.scaled_dot_product_attention(q, keys, keys, attn_mask=column)


def module_rows(seq: int) -> dict[str, Callable[[torch.Tensor], object]]:
    """The calls of table 2: one module per option, the same input."""
    x = torch.randn(1, seq, 512, generator=torch.Generator().manual_seed(1))
    options = {
        "no option": {},
        "sink='learned'": {"sink": "learned"},
        "sink='plus_one'": {"sink": "plus_one"},
        "gate='headwise'": {"gate": "headwise"},
        "gate='elementwise'": {"gate": "elementwise"},
    }
    rows = {}
    for name, kwargs in options.items():
        module = MultiHeadSelfAttention(512, 8, causal=True, **kwargs).eval()
        rows[name] = lambda _, module=module: module(x)
    return rows


def print_table(title: str, timings: dict[str, harness.Timing], baseline: str) -> None:
    print(f"\n## {title}\n")
    print("| call | median ms | IQR ms | × " + baseline + " |")
    print("|---|---|---|---|")
    base = timings[baseline].median_ms
    for name, timing in timings.items():
        print(f"| {name} | {timing.median_ms:.3f} | {timing.iqr_ms:.3f} | {timing.median_ms / base:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, default=256, help="queries of the full pass (default 256)")
    parser.add_argument("--past", type=int, default=1024, help="cached keys of the decoding step (default 1024)")
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="tiny sizes and 3 rounds: checks that it runs")
    args = parser.parse_args()
    if args.quick:
        args.seq, args.past, args.repeats = 16, 32, 3
    torch.set_num_threads(args.threads)
    print(f"# Sink logits and output gates, {args.threads} threads, {args.repeats} rounds")
    calls = attend_rows(args.seq, args.past)
    # The written-out fused step must be attend's step, or its row would time something else.
    torch.testing.assert_close(
        calls["decoding step, sink (fused: an extra key)"](NOTHING),
        calls["decoding step, sink (explicit softmax)"](NOTHING)[0],  # attend returns (output, weights)
    )
    print("Cross-check: the fused decoding step written out equals attend's explicit one.")
    timings = harness.time_interleaved(calls, NOTHING, repeats=args.repeats)
    full = {name: timing for name, timing in timings.items() if name.startswith("full")}
    step = {name: timing for name, timing in timings.items() if name.startswith("decoding")}
    print_table(f"attend, a full pass of {args.seq} queries", full, "full pass, no sink (fused)")
    print_table(f"attend, one decoding step over {args.past} keys", step, "decoding step, no sink (fused)")
    print("\n(attend takes the explicit path for one query; the last row is the fused path written out for it.)")
    calls = module_rows(args.seq)
    timings = harness.time_interleaved(calls, NOTHING, repeats=args.repeats)
    print_table(f"MultiHeadSelfAttention(512, 8) forward, seq {args.seq}", timings, "no option")


if __name__ == "__main__":
    main()
