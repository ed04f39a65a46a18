"""Notebook 11's real model on a GPU: host synchronisations per decoded token, and decoding against transformers.

    python benchmarks/bench_gpu.py [--device cuda] [--new-tokens 64] [--dtype float32]

Written for the first machine with a GPU to run as it is (this project's machines have none; without CUDA
it says so and stops, unless ``--device cpu`` asks for the same table on the CPU).

* **Host synchronisations.** Each time the host waits for the device (a tensor's value read back into
  Python: ``.item()``, ``int(t)``, ``bool(t)``, a ``.tolist()``, a copy to the CPU), the GPU's queue runs
  dry. ``torch.cuda.set_sync_debug_mode("warn")`` warns at each one; the script counts the warnings during
  a greedy ``generate`` of ``--new-tokens`` tokens and during the prompt alone, and prints the
  difference per decoded token with the first places they come from. The aim: none per step but the
  one that reads the next token (``generate`` appends it on the device; an ``eos_token_id`` check reads one
  bool).
* **Decode speed.** Tokens per second of our ``generate`` (a preallocated ``KVCache`` per layer) against
  transformers' ``generate`` on the same GGUF file, same device, same dtype, after one warm-up run each,
  with ``torch.cuda.synchronize()`` around the timed region; both must produce the same greedy tokens.

Reported, never asserted, like the other benchmarks (``benchmarks/README.md``).
"""

from __future__ import annotations

import argparse
import collections
import os
import warnings

os.environ["TQDM_DISABLE"] = "1"  # transformers' GGUF reader draws a progress bar per tensor (read at import)

import torch
from bench_real_model import load_transformers, timed  # this folder is on sys.path when run as a file

from mhsa_helpers.real_model import generate, load_smollm2


def synchronised_seconds(function, device: torch.device) -> tuple[object, float]:
    """``function()``'s result and its wall time (``timed``), the device's queue drained before and after."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)

    def drained():
        result = function()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return result

    return timed(drained)


def count_synchronisations(function) -> tuple[int, collections.Counter]:
    """How many times ``function()`` makes the host wait for the GPU, and where (file:line of our code)."""
    places: collections.Counter = collections.Counter()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            function()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    found = [w for w in caught if "synchroniz" in str(w.message)]
    for w in found:
        places[f"{os.path.relpath(w.filename)}:{w.lineno}"] += 1
    return len(found), places


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", help="cuda (default), cuda:1, ... or cpu")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default="float32")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("no CUDA device here: nothing to measure (run `--device cpu` for the same table on the CPU)")
        return
    dtype = getattr(torch, args.dtype)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"torch {torch.__version__}, {name}, {args.dtype}\n")

    ours, tokenizer = load_smollm2()
    ours = ours.to(device=device, dtype=dtype)
    theirs = load_transformers().to(device=device, dtype=dtype)
    prompt = tokenizer.chat_prompt([{"role": "user", "content": "Tell me a story about a river bank."}])
    ids = torch.tensor([tokenizer.encode(prompt)[-32:]], device=device)
    new = args.new_tokens

    if device.type == "cuda":
        generate(ours, ids, 2)  # warm-up: kernels chosen and cached before counting
        prompt_only, _ = count_synchronisations(lambda: generate(ours, ids, 1))
        total, places = count_synchronisations(lambda: generate(ours, ids, new))
        per_token = (total - prompt_only) / max(new - 1, 1)
        print(f"host synchronisations: {prompt_only} for the prompt and the first token, {total} for {new} tokens")
        print(f"  -> {per_token:.2f} per decoded token after the first")
        for place, count in places.most_common(8):
            print(f"     {count:5d}  {place}")
        print()

    with torch.inference_mode():
        synchronised_seconds(lambda: generate(ours, ids, new), device)  # warm-up
        mine, seconds_ours = synchronised_seconds(lambda: generate(ours, ids, new), device)
        kwargs = {"max_new_tokens": new, "min_new_tokens": new, "do_sample": False}
        synchronised_seconds(lambda: theirs.generate(ids, **kwargs), device)
        theirs_out, seconds_theirs = synchronised_seconds(lambda: theirs.generate(ids, **kwargs), device)
    same = mine.tolist() == theirs_out.tolist()
    ours_rate, theirs_rate = new / seconds_ours, new / seconds_theirs
    print(f"{'':44} {'ours':>9} {'transformers':>13}  {'speed-up of ours':>16}")
    print(
        f"{f'decode, {new} tokens, tokens/s':44} {ours_rate:9.1f} {theirs_rate:13.1f}  {ours_rate / theirs_rate:15.2f}x"
    )
    print(f"\ngreedy tokens identical to transformers': {same}")
    if not same:
        raise SystemExit("the two models generated different tokens")


if __name__ == "__main__":
    main()
