"""Notebook 07's live training: time to learn induction heads, and what was learned, per seed.

    python benchmarks/bench_training.py                    # seeds 0-4, torch threads 2 and 1
    python benchmarks/bench_training.py --seeds 0 1 --threads 2
    python benchmarks/bench_training.py --trap             # also the fixed-offset shortcut trap

Target: the default ``InductionConfig`` learns (10-step mean induction loss below 1.0) and the whole
run finishes in <= 20 s on a 2-core machine. Set OMP_NUM_THREADS to match --threads for honest
numbers; on a shared machine the times are upper bounds.
"""

from __future__ import annotations

import argparse
import dataclasses
import math

import torch

from mhsa_helpers.teaching.induction import (
    InductionConfig,
    ablation_losses,
    evaluation_batch,
    find_induction_circuit,
    head_scores,
    in_context_loss,
    train_induction,
)

TARGET_SECONDS = 20.0


def learned_at(losses: list[float], below: float = 1.0, window: int = 10) -> int | None:
    for step in range(window, len(losses) + 1):
        if sum(losses[step - window : step]) / window < below:
            return step
    return None


def describe(config: InductionConfig, seed: int) -> dict:
    run = train_induction(config, seed=seed, device="cpu")
    varied = evaluation_batch(dataclasses.replace(config, fixed_offset=False))
    with torch.no_grad():
        _, weights = run.model(varied.tokens)
    scores = head_scores(weights, varied)
    (_, prev), (_, ind) = find_induction_circuit(scores)
    row = {
        "seed": seed,
        "seconds": run.seconds,
        "learned_at": learned_at(run.induction_loss),
        "ind_first": sum(run.induction_loss[:10]) / 10,
        "ind_last": sum(run.induction_loss[-10:]) / 10,
        "prev_L0": float(scores["previous_token"][0, prev]),
        "ind_L1": float(scores["induction"][1, ind]),
        "bos_max": float(scores["bos"].max()),
        "varied_loss": in_context_loss(run.model, varied),
    }
    if config.fixed_offset:
        fixed = evaluation_batch(config)
        with torch.no_grad():
            _, weights = run.model(fixed.tokens)
        row["fixed_loss"] = in_context_loss(run.model, fixed)
        row["fixed_ind"] = float(head_scores(weights, fixed)["induction"].max())
    else:
        losses = ablation_losses(run.model, varied)
        others0 = [float(losses[0, h]) for h in range(config.num_heads) if h != prev]
        row["abl_prev"] = float(losses[0, prev])
        row["abl_other_L0"] = max(others0)
        row["abl_L1"] = f"{float(losses[1].min()):.2f}-{float(losses[1].max()):.2f}"
    return row


def print_table(rows: list[dict]) -> None:
    keys = list(rows[0])
    print(" | ".join(f"{k:>12}" for k in keys))
    for row in rows:
        cells = []
        for k in keys:
            v = row[k]
            cells.append(f"{v:12.2f}" if isinstance(v, float) else f"{v!s:>12}")
        print(" | ".join(cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--threads", type=int, nargs="+", default=[2, 1])
    parser.add_argument("--trap", action="store_true", help="also train on fixed-offset data (the shortcut trap)")
    args = parser.parse_args()
    config = InductionConfig()
    print(f"config: {config}")
    print(f"chance level (uniform over {config.vocab_size - 1} tokens): {math.log(config.vocab_size - 1):.2f}")
    for threads in args.threads:
        torch.set_num_threads(threads)
        print(f"\n## varied offsets, torch threads = {threads}")
        rows = [describe(config, seed) for seed in args.seeds]
        print_table(rows)
        worst = max(r["seconds"] for r in rows)
        ok = all(r["learned_at"] is not None for r in rows) and worst <= TARGET_SECONDS
        print(f"{'PASS' if ok else 'MISS'}: every seed learned; slowest run {worst:.1f} s (target {TARGET_SECONDS} s)")
        if args.trap:
            print(
                f"\n## shortcut trap (fixed offset, {config.max_repeat}-token chunk at position 1), threads = {threads}"
            )
            trap = dataclasses.replace(config, fixed_offset=True, steps=150)
            print_table([describe(trap, seed) for seed in args.seeds])


if __name__ == "__main__":
    main()
