"""Write the checkpoints that notebook 07 opens without training.

    python scripts/make_induction_checkpoints.py                      # writes CHECKPOINT_FILE (induction_steps.pt)
    python scripts/make_induction_checkpoints.py --positions learned  # writes LEARNED_CHECKPOINT_FILE
    python scripts/make_induction_checkpoints.py --out X.pt           # somewhere else

both in mhsa_helpers/teaching/induction/checkpoints/.

Trains the default model of ``InductionConfig`` on the CPU with seed ``CHECKPOINT_SEED`` and keeps
float16 weights at ``CHECKPOINT_STEPS``; with ``--positions learned``, the same settings with
``positions="learned"``, keeping only ``LEARNED_CHECKPOINT_STEPS``. In ``tests/lessons/07_induction_heads/``,
``test_induction_heads.py`` regenerates a prefix of the first and compares it with the shipped file;
``test_induction_heads_learned_positions.py`` retrains the second and compares its losses.
"""

from __future__ import annotations

import argparse

import torch

from mhsa_helpers.teaching.induction import (
    CHECKPOINT_FILE,
    CHECKPOINT_SEED,
    CHECKPOINT_STEPS,
    LEARNED_CHECKPOINT_FILE,
    LEARNED_CHECKPOINT_STEPS,
    InductionConfig,
    make_checkpoints,
    save_checkpoints,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--positions", choices=("rope", "learned"), default="rope", help="the run to write (default: rope)"
    )
    parser.add_argument("--out", default=None, help="output file (default: the shipped one)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.positions == "rope":
        checkpoints = make_checkpoints()
        default_out = CHECKPOINT_FILE
    else:
        config = InductionConfig(positions="learned")
        checkpoints = make_checkpoints(steps=LEARNED_CHECKPOINT_STEPS, seed=CHECKPOINT_SEED, config=config)
        default_out = LEARNED_CHECKPOINT_FILE
    assert checkpoints.steps[-1] == CHECKPOINT_STEPS[-1]
    path = save_checkpoints(checkpoints, default_out if args.out is None else args.out)
    history = checkpoints.history
    print(f"wrote {path} ({path.stat().st_size / 1024:.0f} kB), steps {list(checkpoints.steps)}")
    for step in checkpoints.steps:
        if step == 0:
            continue
        window = history["induction_loss"][max(0, step - 10) : step]
        print(f"  step {step:4d}: induction loss (last 10 steps) {sum(window) / len(window):.3f}")


if __name__ == "__main__":
    main()
