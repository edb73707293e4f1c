"""Speed of the tiny path: tokens per world trajectory and SFT step time, before vs after the
tokenizer keeps the fixed prompt text and the passage ids as whole tokens.

    python scripts/bench_tiny.py [--steps 12] [--batch 16]

Both arms train the same world model shape (2 layers, 128 hidden) with ``awarl train sft``'s
trainer on the same gold trajectories in the same run; only the tokenizer differs:

- ``before``: byte-level BPE trained on the world's text (names are single tokens, but the chat
  template's ~300 tokens of tool instructions and schema and the ~12-piece passage ids remain);
- ``after``: the same, plus the system prompt, the tool preamble and each ``[passage id]`` as one
  added token (what ``awarl demo`` and the test fixtures build).

Prints a table: mean tokens per trajectory, median SFT step seconds (first 2 steps dropped).
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


def main() -> None:
    import yaml

    from awarl.agent.env import search_env_factory, tool_schema
    from awarl.agent.settings import RolloutSettings
    from awarl.data.adapters import load_dataset_file
    from awarl.data.records import write_jsonl
    from awarl.data.world import WorldConfig, generate_world, world_texts, write_world
    from awarl.search.bm25 import BM25Index
    from awarl.train import sft
    from awarl.train.callbacks import StepTimer
    from awarl.train.config import TrainConfig
    from awarl.train.tiny import WORLD_SHAPE, build_tiny_model, build_world_model, world_trajectories

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args()
    recipe = yaml.safe_load((ROOT / "configs" / "demo_world.yaml").read_text())
    rollout = RolloutSettings.from_dict(recipe["rollout"])
    world = generate_world(WorldConfig(persons=200))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        files = write_world(world, work / "world")
        records, _ = load_dataset_file("musique", files["sft"])
        write_jsonl(work / "records.jsonl", (r.to_dict() for r in records))
        env = search_env_factory(BM25Index.build(world.passages), rollout)
        trajectories = world_trajectories(world, env, ("sft",), rollout.system_prompt)
        write_jsonl(work / "traj.jsonl", trajectories)
        arms = {
            "before (BPE only)": lambda d: build_tiny_model(d, world_texts(world, rollout.system_prompt), WORLD_SHAPE,
                                                            system_prompts=(), whole_tokens=()),
            "after (whole-token prompt + ids)": lambda d: build_world_model(d, world, system_prompt=rollout.system_prompt),
        }
        for name, build in arms.items():
            model = work / name.split()[0]
            build(model)
            from transformers import AutoTokenizer

            tok = AutoTokenizer.from_pretrained(model)
            lengths = [len(tok.apply_chat_template(t["messages"], tools=[tool_schema()], tokenize=True, return_dict=False))
                       for t in trajectories]
            config = TrainConfig.from_dict({
                "output_dir": str(work / "out"), "model": {"path": str(model)},
                "data": {"records": str(work / "records.jsonl"), "corpus": str(files["corpus"])},
                "rollout": rollout.to_dict(),
                "sft": {"init_from": str(model), "source": "trajectories", "trajectories": str(work / "traj.jsonl"),
                        "args": {"max_steps": args.steps, "per_device_train_batch_size": args.batch,
                                 "learning_rate": 2e-3, "use_cpu": True, "bf16": False, "disable_tqdm": True,
                                 "report_to": "none"}},
                "logging": {"report_to": [], "summary": False},
            })
            trainer = sft.build_trainer(config, work / f"sft-{model.name}")
            timer = StepTimer()
            trainer.add_callback(timer)
            t0 = time.perf_counter()
            trainer.train()
            rows.append((name, statistics.fmean(lengths), statistics.median(timer.times[2:] or timer.times),
                         time.perf_counter() - t0))
    threads = os.environ.get("OMP_NUM_THREADS", "default")
    print(f"\nSFT of the world model, batch {args.batch}, {args.steps} steps per arm (OMP_NUM_THREADS={threads}), "
          f"load average at the end {os.getloadavg()[0]:.1f}")
    print(f"| tokenizer | tokens / trajectory | s / SFT step (median) | speed-up |")
    print("|---|---|---|---|")
    base = rows[0][2]
    for name, tokens, step, _ in rows:
        print(f"| {name} | {tokens:.0f} | {step:.3f} | {base / step:.2f}x |")


if __name__ == "__main__":
    main()
