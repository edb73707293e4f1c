"""Time of the demo's SFT conversations (`awarl.train.tiny.world_trajectories`, what `awarl demo`'s SFT
stage builds before it trains), and of their renamed copies: one `awarl.data.world.Renamer` for the
world against `awarl.data.world.renamed_conversation` called per copy (which builds a `Renamer`, sorting
the world's pools, on every call). The code before `Renamer` also sorted the pools on every call and
tested every name against the conversation; it is not kept here (docs/benchmarks.md gives its time).

    python scripts/bench_sft_data.py [--seed 0] [--rounds 3] [--recipe configs/demo_world.yaml]

Both arms rename the same conversations with the same seeds in the same run; the script checks that
they give the same copies and prints a table of median seconds over the rounds and their ratio.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--recipe", type=Path, default=ROOT / "configs" / "demo_world.yaml")
    args = parser.parse_args()

    import tempfile

    from awarl.agent.env import search_env_factory
    from awarl.agent.settings import RolloutSettings
    from awarl.data.world import Renamer, WorldConfig, generate_world, renamed_conversation, write_world
    from awarl.demo.recipe import DemoRecipe
    from awarl.search.bm25 import BM25Index
    from awarl.train.tiny import world_trajectories

    recipe = DemoRecipe.load(args.recipe, quick=False, seed=args.seed, overrides=())
    world = generate_world(WorldConfig.from_dict(recipe.world, f"{args.recipe}: world"))
    folder = tempfile.TemporaryDirectory(prefix="awarl-bench-")
    noise = write_world(world, Path(folder.name))["noise"]
    rollout = RolloutSettings.from_dict({**recipe.train.get("rollout", {}), "world_noise": str(noise)})
    index = BM25Index.build(world.passages)
    # a factory counts the rollouts of each question (a reset draws the next rollout seed): one per build
    env = search_env_factory(index, rollout)
    options = dict(abstain_share=recipe.abstain_share, originals=True, rename_ids=recipe.rename_ids,
                   clarified_share=recipe.clarified_share, misread_share=recipe.misread_share)
    copies = recipe.renamed_copies
    originals = world_trajectories(world, env, ("sft",), rollout.system_prompt, **options)  # the gold conversations

    def digest(rows: list) -> str:
        return hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()[:16]

    def per_call() -> list:
        return [renamed_conversation(world, row["messages"], rng, ids=recipe.rename_ids)
                for i, row in enumerate(originals) for rng in [random.Random(i)] for _ in range(copies)]

    def one_renamer() -> list:
        rename = Renamer(world)
        return [rename(row["messages"], rng, ids=recipe.rename_ids)
                for i, row in enumerate(originals) for rng in [random.Random(i)] for _ in range(copies)]

    def stage() -> list:
        return world_trajectories(world, search_env_factory(index, rollout), ("sft",), rollout.system_prompt,
                                  **{**options, "originals": recipe.originals}, renamed_copies=copies)

    arms = {"renamed_conversation per copy (a Renamer per copy)": per_call, "one Renamer": one_renamer,
            "world_trajectories (the SFT stage's build)": stage}
    times: dict[str, list[float]] = {name: [] for name in arms}
    digests: dict[str, str] = {}
    for round_ in range(args.rounds):
        for name, build in arms.items():
            t0 = time.perf_counter()
            rows = build()
            times[name].append(time.perf_counter() - t0)
            if digests.setdefault(name, digest(rows)) != digest(rows):
                sys.exit(f"{name}: another result in round {round_ + 1}")
    first, second = list(arms)[:2]
    if digests[first] != digests[second]:
        sys.exit(f"the two renamings differ: {digests[first]} vs {digests[second]}")
    base = statistics.median(times[first])
    print(f"world seed {args.seed}: {len(originals)} conversations x {copies} renamed copies; "
          f"renamed copies identical in both arms (sha256 {digests[first]})")
    print("| arm | median s | min s | max s | speed-up over per copy |")
    print("|---|---:|---:|---:|---:|")
    for name, values in times.items():
        ratio = f"{base / statistics.median(values):.2f}x" if name in (first, second) else "–"
        print(f"| {name} | {statistics.median(values):.2f} | {min(values):.2f} | {max(values):.2f} | {ratio} |")
    print(f"world_trajectories rows: sha256 {digests[list(arms)[2]]} (the same in every round)")
    folder.cleanup()


if __name__ == "__main__":
    main()
