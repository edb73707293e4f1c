"""Step time of awarl's GRPO (AWA reward + citation reward + SearchEnv + callbacks) against plain
TRL GRPO with an EM-only reward and the same tool, model, data and settings, in the same process.

    python scripts/bench_train.py [--model DIR] [--steps 6] [--rounds 2]

Runs alternate (plain, awarl, plain, awarl …) so machine load drifts hit both alike. The
learning rate is 0 so both arms generate the same trajectories and the ratio measures only
awarl's overhead (reward bookkeeping, global gather, penalty, callbacks), not a difference in
what the models happened to write. The first step of every run (warm-up) is left out.
Prints a table; the target is awarl / plain <= 1.15.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]


def em_reward(completions, answers, **kwargs):
    """Plain baseline: 1 for an exact match, else 0 (the protocol's one scorer)."""
    from awarl.agent.protocol import score_text

    return [score_text(c, golds).em for c, golds in zip(completions, answers)]


def prepare(work: Path, model: str | None) -> tuple[Path, Path, Path]:
    """records (with p) + corpus from the shipped HotpotQA sample; the tiny model."""
    from awarl.data.adapters import load_dataset_file
    from awarl.data.records import write_jsonl

    records, passages = load_dataset_file("hotpotqa", ROOT / "data/samples/hotpotqa_dev_distractor_sample.json")
    write_jsonl(work / "records.jsonl", [{**r.to_dict(), "p": 0.8 if i % 2 else 0.1} for i, r in enumerate(records)])
    write_jsonl(work / "corpus.jsonl", [p.to_dict() for p in passages])
    if model:
        return work / "records.jsonl", work / "corpus.jsonl", Path(model)
    cached = sorted((ROOT / ".cache/awarl-tests").glob("tiny-sft-*"), key=lambda p: p.stat().st_mtime)
    if cached:
        return work / "records.jsonl", work / "corpus.jsonl", cached[-1]
    from awarl.llm.tiny import build_tiny_model, sample_texts

    print("no warm-started tiny model found (run the test suite once); using a random one", file=sys.stderr)
    return work / "records.jsonl", work / "corpus.jsonl", build_tiny_model(work / "tiny", sample_texts(ROOT / "data/samples"))


def run(arm: str, config, steps: int, out: Path) -> list[float]:
    from trl import GRPOTrainer

    from awarl.train import grpo
    from awarl.train.callbacks import StepTimer

    timer = StepTimer()
    if arm == "awarl":
        trainer, _ = grpo.build_trainer(config, str(out), extra_callbacks=[timer], on_log=lambda line: None)
    else:
        records = grpo.load_training_records(config)
        model, tokenizer = grpo.load_model_and_tokenizer(config)
        trainer = GRPOTrainer(model=model, reward_funcs=[em_reward], args=grpo.grpo_args(config, str(out)),
                              train_dataset=grpo.build_dataset(records, config), processing_class=tokenizer,
                              environment_factory=grpo.configure_env(config), callbacks=[timer])
    trainer.train()
    assert len(timer.times) == steps
    return timer.times[1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="model folder (default: the warm-started tiny test model)")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch", type=int, default=16, help="rollouts per step")
    args = parser.parse_args()

    import torch

    from awarl.train.config import TrainConfig

    torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "1"))))
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        records, corpus, model = prepare(work, args.model)
        overrides = [
            f"model.path={model}", f"data.records={records}", "data.capability=null", f"data.corpus={corpus}",
            "logging.report_to=[none]", "logging.summary=false", f"grpo.max_steps={args.steps}",
            f"grpo.per_device_train_batch_size={args.batch}", "grpo.num_generations=4", "grpo.steps_per_generation=1",
            "grpo.learning_rate=0.0", "grpo.save_strategy=no", "grpo.report_to=[none]",
        ]
        config = TrainConfig.from_yaml(ROOT / "configs/tiny_cpu.yaml", overrides)
        times: dict[str, list[float]] = {"plain": [], "awarl": []}
        t0 = time.perf_counter()
        for r in range(args.rounds):
            for arm in ("plain", "awarl"):
                times[arm] += run(arm, config, args.steps, work / f"{arm}{r}")
        wall = time.perf_counter() - t0

    med = {arm: statistics.median(v) for arm, v in times.items()}
    mean = {arm: statistics.fmean(v) for arm, v in times.items()}
    print(f"\nGRPO step time, tiny model, {args.batch} rollouts/step, {args.rounds} x {args.steps - 1} timed steps "
          f"per arm ({wall:.0f} s total)")
    print(f"{'arm':<8}{'median s/step':>15}{'mean s/step':>13}{'steps':>7}")
    for arm in ("plain", "awarl"):
        print(f"{arm:<8}{med[arm]:>15.3f}{mean[arm]:>13.3f}{len(times[arm]):>7}")
    ratio = med["awarl"] / med["plain"]
    print(f"ratio awarl/plain (median): {ratio:.3f}  (target <= 1.15: {'met' if ratio <= 1.15 else 'NOT met'})")


if __name__ == "__main__":
    main()
