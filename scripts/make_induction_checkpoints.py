"""Write the checkpoints that notebook 07's explorer opens without training.

    python scripts/make_induction_checkpoints.py            # writes mhsa_helpers/lessons/induction_heads/checkpoints/
    python scripts/make_induction_checkpoints.py --out X.pt # somewhere else

Trains the default model of ``InductionConfig`` on the CPU with seed ``CHECKPOINT_SEED`` and keeps
float16 weights at ``CHECKPOINT_STEPS``. ``tests/test_induction_heads.py`` regenerates a prefix and
compares it with the shipped file.
"""

from __future__ import annotations

import argparse

import torch

from mhsa_helpers.lessons.induction_heads import CHECKPOINT_FILE, make_checkpoints, save_checkpoints


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(CHECKPOINT_FILE), help="output file (default: the shipped one)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    checkpoints = make_checkpoints()
    path = save_checkpoints(checkpoints, args.out)
    history = checkpoints.history
    print(f"wrote {path} ({path.stat().st_size / 1024:.0f} kB), steps {list(checkpoints.steps)}")
    for step in checkpoints.steps[1:]:
        window = history["induction_loss"][max(0, step - 10) : step]
        print(f"  step {step:4d}: induction loss (last 10 steps) {sum(window) / len(window):.3f}")


if __name__ == "__main__":
    main()
