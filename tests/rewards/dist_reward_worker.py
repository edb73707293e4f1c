"""Worker of the 2-process reward test: ``torchrun --nproc_per_node 2 dist_reward_worker.py OUT``.

Each process scores its contiguous slice of every generation batch (as TRL splits it), with one
prompt's rollouts split across the two processes, and writes what it saw to ``OUT/rank<r>.json``.
`batches()` is also what the test scores in a single process to compare.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

GENERATIONS = 4      # rollouts per prompt
PROMPTS = 5          # per batch: 20 rollouts, so process 0 holds prompts 0-1 and half of prompt 2
STEPS = 6


def batches(seed: int = 7) -> list[dict]:
    """Deterministic generation batches in TRL's order (a prompt's rollouts are consecutive)."""
    rng = random.Random(seed)
    out = []
    for step in range(STEPS):
        rows = {"prompts": [], "completions": [], "answers": [], "p": [], "id": []}
        for q in range(PROMPTS):
            p = rng.choice([0.0, 0.125, 0.5, 0.875, 1.0])
            refuse_prob = 0.9 if step < 3 else 0.1  # over-refusal first, then under-refusal
            for _ in range(GENERATIONS):
                r = rng.random()
                text = ("<answer>not enough information</answer>" if r < refuse_prob
                        else "<answer>gold</answer>" if rng.random() < p else "<answer>other</answer>")
                rows["prompts"].append([{"role": "user", "content": f"question {step}-{q}"}])
                rows["completions"].append([{"role": "assistant", "content": text}])
                rows["answers"].append(["gold"])
                rows["p"].append(p)
                rows["id"].append(f"s{step}q{q}")
        out.append(rows)
    return out


def run(reward, batch_list, rank: int = 0, world: int = 1) -> list[dict]:
    """Score each batch's slice for ``rank`` of ``world``; return rewards, logged metrics, state."""
    seen = []
    for rows in batch_list:
        n = len(rows["completions"])
        lo, hi = rank * n // world, (rank + 1) * n // world
        part = {k: v[lo:hi] for k, v in rows.items()}
        logged: dict[str, float] = {}
        rewards = reward(part.pop("prompts"), part.pop("completions"), completion_ids=None,
                         log_metric=logged.__setitem__, **part)
        seen.append({"rewards": rewards, "metrics": logged, "state": reward.state_dict()})
    return seen


def main(out_dir: str) -> None:
    from accelerate import PartialState

    state = PartialState(cpu=True)  # torchrun env -> gloo process group, as the trainer sets it up

    from awarl.rewards import AnswerAbstainReward, RewardConfig
    from awarl.rewards.batch import distributed_world

    rank, world = distributed_world()
    assert (rank, world) == (state.process_index, state.num_processes) and world == 2, (rank, world)
    reward = AnswerAbstainReward(RewardConfig(beta=0.5))
    seen = run(reward, batches(), rank, world)
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps({"rank": rank, "world": world, "steps": seen}))
    state.wait_for_everyone()
    # Tear the gloo group down before exit: left to interpreter shutdown, its threads can abort.
    state.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
