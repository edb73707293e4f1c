"""SFT and GRPO step time on CPU with TRL's fused LM head against awarl's plain one
(`awarl.train.lm_head`), in the same run, from a finished `awarl demo` folder. A third arm runs the
plain head computing every field of TRL's output instead of the fields the trainer asked for.

    python scripts/bench_lm_head.py --demo runs/demo [--sft-steps 30] [--grpo-steps 12] [--rounds 2]

Each round builds the trainers of the demo's own recipes (``sft/awarl_recipe.yaml`` from the
demo's untrained model, ``grpo/awa/awarl_recipe.yaml`` from its SFT checkpoint) three times: with
TRL's tiles (the plain head switched off), with awarl's plain head computing every field, and with
awarl's plain head as shipped (the fields the trainer asked for), reversing the order between rounds
so drifting machine load hits each alike. Nothing is saved. SFT's first two steps and
GRPO's first generation batch (4 optimizer steps) are left out of the timing; a GRPO step's time
includes its share of the generation. Prints a table with the mean seconds per optimizer step
(median over rounds), the ratios, and the first SFT step's loss of each arm (they must agree:
the heads compute the same function).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


from transformers import TrainerCallback  # noqa: E402


class StepClock(TrainerCallback):
    """The wall time of every optimizer step, and the logged losses."""

    def __init__(self) -> None:
        self.ends: list[float] = []
        self.losses: list[float] = []

    def on_train_begin(self, *args, **kwargs) -> None:
        self.ends = [time.perf_counter()]

    def on_step_end(self, *args, **kwargs) -> None:
        self.ends.append(time.perf_counter())

    def on_log(self, args, state, control, logs=None, **kwargs) -> None:
        if logs and "loss" in logs:
            self.losses.append(float(logs["loss"]))

    def per_step(self, skip: int) -> float:
        gaps = [b - a for a, b in zip(self.ends, self.ends[1:])][skip:]
        return statistics.fmean(gaps)


ARMS = ("trl", "plain, every field", "plain")


def run(stage: str, demo: Path, arm: str, steps: int) -> StepClock:
    from awarl.train import lm_head
    from awarl.train.config import TrainConfig

    original, requested = lm_head.use_plain_lm_head, lm_head.requested_fields
    if arm == "trl":
        lm_head.use_plain_lm_head = lambda *args, **kwargs: False
    elif arm == "plain, every field":
        lm_head.requested_fields = lambda forward: lm_head.FIELDS
    clock = StepClock()
    cwd = Path.cwd()
    try:
        os.chdir(demo)  # the recipes name their inputs relative to the demo folder
        with tempfile.TemporaryDirectory() as out:
            if stage == "sft":
                from awarl.train import sft

                config = TrainConfig.from_yaml("sft/awarl_recipe.yaml")
                config.sft.args.update(max_steps=steps, save_strategy="no", logging_steps=1, report_to=[])
                config.logging.summary = False
                trainer = sft.build_trainer(config, out)
            else:
                from awarl.train import grpo

                config = TrainConfig.from_yaml("grpo/awa/awarl_recipe.yaml")
                config.grpo.update(max_steps=steps, save_strategy="no", logging_steps=1, report_to=[])
                config.logging.summary = False
                trainer, _ = grpo.build_trainer(config, out)
            trainer.add_callback(clock)
            trainer.train()
    finally:
        os.chdir(cwd)
        lm_head.use_plain_lm_head, lm_head.requested_fields = original, requested
    return clock


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--demo", type=Path, required=True, help="a finished `awarl demo` folder")
    parser.add_argument("--sft-steps", type=int, default=30)
    parser.add_argument("--grpo-steps", type=int, default=12, help="optimizer steps (4 per generation batch)")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    demo = args.demo.resolve()
    for needed in ("sft/awarl_recipe.yaml", "grpo/awa/awarl_recipe.yaml", "sft/final"):
        if not (demo / needed).exists():
            sys.exit(f"{demo}: no {needed}; point --demo at a finished `awarl demo` folder")
    import torch

    times: dict[tuple[str, str], list[float]] = {}
    first_loss: dict[str, float] = {}
    for round_ in range(args.rounds):
        order = ARMS if round_ % 2 == 0 else ARMS[::-1]
        for stage, steps, skip in (("sft", args.sft_steps, 2), ("grpo", args.grpo_steps, 4)):
            for arm in order:
                clock = run(stage, demo, arm, steps)
                times.setdefault((stage, arm), []).append(clock.per_step(skip))
                if stage == "sft":
                    first_loss[arm] = clock.losses[0]
                print(f"round {round_ + 1} {stage} {arm}: {times[(stage, arm)][-1]:.3f} s/step", file=sys.stderr)
    print(f"\ntorch threads {torch.get_num_threads()}, {args.rounds} rounds; mean s per optimizer step, median over rounds\n")
    print("| stage | TRL fused head | plain head, every field | plain head, the trainer's fields "
          "| ratio TRL / plain | ratio every field / the trainer's |")
    print("|---|---:|---:|---:|---:|---:|")
    for stage in ("sft", "grpo"):
        trl, every, plain = (statistics.median(times[(stage, arm)]) for arm in ARMS)
        print(f"| {stage} | {trl:.3f} | {every:.3f} | {plain:.3f} | {trl / plain:.2f}x | {every / plain:.2f}x |")
    print("\nfirst SFT step loss: " + ", ".join(f"{arm} {first_loss[arm]:.5f}" for arm in ARMS))


if __name__ == "__main__":
    main()
