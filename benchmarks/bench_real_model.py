"""The real model of notebook 11 (SmolLM2-135M-Instruct), built from the package's parts, on the CPU.

    python benchmarks/bench_real_model.py [--threads 2] [--new-tokens 64] [--rounds 5] [--quick]

One run, one table:

* load: reading and dequantising the GGUF file and building the model (`load_smollm2`), against
  `transformers`' `AutoModelForCausalLM.from_pretrained(..., gguf_file=...)` on the same file;
* prompt forward: one full forward pass over 128 and 512 tokens (median of ``--rounds``), ours
  against transformers';
* decode: greedy generation of ``--new-tokens`` tokens after a 32-token prompt, ours (`generate`,
  a preallocated `KVCache` per layer) against transformers' `generate` (its own cache), tokens per
  second; both must produce the same tokens (checked).

The floor: each new token reads every weight once (134.5 M parameters, 538 MB in float32, or
340 MB without the output layer's second use of the embedding) and does about 2 FLOP per weight
(~0.27 GFLOP); the table prints the tokens per second that the measured memory bandwidth of a
large copy and the measured matrix-multiply throughput would allow, as a yardstick.

Reported, never asserted: ours / transformers for each row (the target for decoding: ours at least
as fast, aiming for twice).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import warnings

os.environ["TQDM_DISABLE"] = "1"  # transformers' GGUF reader draws a progress bar per tensor (read at import)

import torch

from mhsa_helpers.real_model import generate, gguf_path, load_smollm2


def median_seconds(function, rounds: int) -> float:
    function()  # warm-up
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        function()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def timed(function):
    start = time.perf_counter()
    result = function()
    return result, time.perf_counter() - start


def load_transformers():
    from transformers import AutoModelForCausalLM

    path = gguf_path()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    return model.eval()


def bandwidth_gb_s() -> float:
    """A large copy's bytes read + written per second (the memory bandwidth a decode step can hope for)."""
    src = torch.empty(64 * 2**20 // 4)
    dst = torch.empty_like(src)
    seconds = median_seconds(lambda: dst.copy_(src), 9)
    return 2 * src.numel() * 4 / seconds / 1e9


def matmul_gflop_s(column_major: bool) -> float:
    """Throughput of a (1, 576) x (576, 49152) product, the shape of a decode step's largest matrix, with the
    matrix stored row-major (as PyTorch makes an ``nn.Linear`` weight) or column-major (as ``load_smollm2``
    keeps it)."""
    x, w = torch.randn(1, 576), torch.randn(49152, 576)
    if column_major:
        w = w.t().contiguous().t()
    seconds = median_seconds(lambda: torch.nn.functional.linear(x, w), 15)
    return 2 * w.numel() / seconds / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="16 new tokens, 2 rounds, prompt 128 only")
    args = parser.parse_args()
    if args.quick:
        args.new_tokens, args.rounds = 16, 2
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, float32, CPU\n")

    (ours, tokenizer), load_ours = timed(load_smollm2)
    theirs, load_theirs = timed(load_transformers)
    rows = [("load (read, dequantise, build)", load_ours, load_theirs, "s")]

    generator = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        for n in (128,) if args.quick else (128, 512):
            ids = torch.randint(0, ours.config.vocab_size, (1, n), generator=generator)
            a = median_seconds(lambda ids=ids: ours(ids), args.rounds)
            b = median_seconds(lambda ids=ids: theirs(ids).logits, args.rounds)
            rows.append((f"prompt forward, {n} tokens", a * 1000, b * 1000, "ms"))

    prompt = tokenizer.chat_prompt([{"role": "user", "content": "Tell me a story about a river bank."}])
    ids = torch.tensor([tokenizer.encode(prompt)[-32:]])
    new = args.new_tokens
    with torch.inference_mode():  # as both generate() run anyway: the same conditions for the two
        mine, seconds_ours = timed(lambda: generate(ours, ids, new))
        mine, seconds_ours = timed(lambda: generate(ours, ids, new))  # the second run: no first-call costs
        kwargs = {"max_new_tokens": new, "min_new_tokens": new, "do_sample": False}
        theirs_out, _ = timed(lambda: theirs.generate(ids, **kwargs))
        theirs_out, seconds_theirs = timed(lambda: theirs.generate(ids, **kwargs))
    same = mine.tolist() == theirs_out.tolist()
    rows.append((f"decode, {new} tokens after a 32-token prompt", new / seconds_ours, new / seconds_theirs, "tok/s"))

    parameters = sum(p.numel() for p in ours.parameters())
    bytes_per_token = parameters * 4
    flop_per_token = 2 * parameters
    bandwidth, row_major, throughput = bandwidth_gb_s(), matmul_gflop_s(False), matmul_gflop_s(True)

    print(f"{'':44} {'unit':>6} {'ours':>9} {'transformers':>13}  {'speed-up of ours':>16}")
    for name, a, b, unit in rows:
        speedup = b / a if unit != "tok/s" else a / b
        print(f"{name:44} {unit:>6} {a:9.1f} {b:13.1f}  {speedup:15.2f}x")
    print(f"\ngreedy tokens identical to transformers': {same}")
    print(
        f"floor per decoded token: {parameters / 1e6:.1f} M parameters = {bytes_per_token / 1e6:.0f} MB read "
        f"and {flop_per_token / 1e9:.2f} GFLOP"
    )
    print(
        f"this machine: {bandwidth:.1f} GB/s (large copy), {throughput:.1f} GFLOP/s (a decode step's largest "
        f"product, the matrix column-major as ours; {row_major:.1f} row-major) -> at most "
        f"{min(bandwidth * 1e9 / bytes_per_token, throughput * 1e9 / flop_per_token):.0f} tokens/s for batch 1 "
        "in float32"
    )
    if not same:
        raise SystemExit("the two models generated different tokens")


if __name__ == "__main__":
    main()
