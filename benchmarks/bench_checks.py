"""What the argument checks cost: one decoding step of notebook 06's module against the same operations
written bare, on toy sizes (where the checks are seen at all; on a real model the matrix multiplies hide them).

    python benchmarks/bench_checks.py [--rounds 7] [--steps 64] [--quick]

One table: microseconds per decoding step (causal, RoPE, grouped key/value heads, a preallocated cache, batch
1) for ``MultiHeadSelfAttention`` and for the bare steps (``F.linear``, ``view``/``transpose``, the rotation,
writing into the cache, ``F.scaled_dot_product_attention``), the module's extra time over the bare steps, and
the calls into ``mhsa_helpers/checks.py`` in one step: the module checks its arguments once, at its door
(``MultiHeadSelfAttention.expect_call``), and the functions it calls skip theirs (``arguments_checked``).
Reported, never asserted; the bare steps' output is checked equal to the module's.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from mhsa_helpers import MultiHeadSelfAttention, RotaryEmbedding
from mhsa_helpers.kv_cache import KVCache

D_MODEL, HEADS, KV_HEADS, PROMPT = 64, 4, 2, 8


def bare_steps(module: MultiHeadSelfAttention, x: torch.Tensor, steps: int) -> torch.Tensor:
    """Prompt, then ``steps`` one-token steps of ``x``'s tokens, written with PyTorch alone; the last output."""
    d_head, kv_dim = module.d_head, module.kv_dim
    rope = module.rope
    assert rope is not None
    cos_table, sin_table = rope.cos_cached, rope.sin_cached
    keys = x.new_empty(1, KV_HEADS, PROMPT + steps, d_head)
    values = torch.empty_like(keys)

    def step(tokens: torch.Tensor, past: int) -> torch.Tensor:
        seq = tokens.shape[1]
        q, k, v = F.linear(tokens, module.qkv_proj.weight, module.qkv_proj.bias).split(
            (D_MODEL, kv_dim, kv_dim), dim=-1
        )
        q = q.view(1, seq, HEADS, d_head).transpose(1, 2)
        k = k.view(1, seq, KV_HEADS, d_head).transpose(1, 2)
        v = v.view(1, seq, KV_HEADS, d_head).transpose(1, 2)
        cos, sin = cos_table[past : past + seq], sin_table[past : past + seq]

        def rotate(t: torch.Tensor) -> torch.Tensor:
            even, odd = t[..., 0::2], t[..., 1::2]
            return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)

        q, k = rotate(q), rotate(k)
        keys[:, :, past : past + seq], values[:, :, past : past + seq] = k, v
        k_all = keys[:, :, : past + seq].repeat_interleave(HEADS // KV_HEADS, dim=1)
        v_all = values[:, :, : past + seq].repeat_interleave(HEADS // KV_HEADS, dim=1)
        heads = F.scaled_dot_product_attention(q, k_all, v_all, is_causal=seq > 1)
        return F.linear(heads.transpose(1, 2).flatten(-2), module.out_proj.weight, module.out_proj.bias)

    out = step(x[:, :PROMPT], 0)
    for i in range(steps):
        out = step(x[:, PROMPT + i : PROMPT + i + 1], PROMPT + i)
    return out


def module_steps(module: MultiHeadSelfAttention, x: torch.Tensor, steps: int) -> torch.Tensor:
    cache = KVCache(PROMPT + steps)
    out = module(x[:, :PROMPT], cache=cache)
    for i in range(steps):
        out = module(x[:, PROMPT + i : PROMPT + i + 1], cache=cache)
    assert isinstance(out, torch.Tensor)
    return out


def microseconds_per_step(run, steps: int, rounds: int) -> float:
    run()  # warm-up
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        run()
        samples.append((time.perf_counter() - start) / (steps + 1) * 1e6)
    return statistics.median(samples)


def calls_into_checks(call) -> int:
    checks_file = sys.modules["mhsa_helpers.checks"].__file__
    calls = 0

    def profile(frame, event, arg):
        nonlocal calls
        calls += event == "call" and frame.f_code.co_filename == checks_file

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--quick", action="store_true", help="8 steps, 2 rounds: checks that it runs")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.rounds = 8, 2
    torch.manual_seed(0)
    torch.set_num_threads(1)
    module = MultiHeadSelfAttention(
        D_MODEL, HEADS, num_kv_heads=KV_HEADS, causal=True, rope=RotaryEmbedding(D_MODEL // HEADS)
    ).eval()
    x = torch.randn(1, PROMPT + args.steps, D_MODEL)
    with torch.inference_mode():
        torch.testing.assert_close(bare_steps(module, x, args.steps), module_steps(module, x, args.steps))
        ours = microseconds_per_step(lambda: module_steps(module, x, args.steps), args.steps, args.rounds)
        bare = microseconds_per_step(lambda: bare_steps(module, x, args.steps), args.steps, args.rounds)
        cache = KVCache(PROMPT + 1)
        module(x[:, :PROMPT], cache=cache)
        step_calls = calls_into_checks(lambda: module(x[:, PROMPT : PROMPT + 1], cache=cache))
        forward_calls = calls_into_checks(lambda: module(x[:, :PROMPT]))

    print(f"torch {torch.__version__}, 1 thread, float32, CPU; d_model {D_MODEL}, {HEADS} heads, {KV_HEADS} kv heads")
    print(f"prompt {PROMPT} tokens, then {args.steps} decoding steps, median of {args.rounds} rounds\n")
    print(f"{'':34} {'us/step':>8}")
    print(f"{'MultiHeadSelfAttention + KVCache':34} {ours:8.1f}")
    print(f"{'the same steps, bare PyTorch':34} {bare:8.1f}")
    print(f"{'the module over the bare steps':34} {ours - bare:+8.1f}  ({(ours - bare) / ours:.0%} of its time)")
    print(f"\ncalls into checks.py: {step_calls} in one decoding step, {forward_calls} in one forward without cache")


if __name__ == "__main__":
    main()
