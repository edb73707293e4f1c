"""Benchmark the rewards: the non-LLM reward path on one generation batch, and the LLM judge's
throughput against a local OpenAI-compatible replay server at concurrency 1 vs 32.

    python scripts/bench_rewards.py                      # 4,096 rollouts, 128 judge requests
    python scripts/bench_rewards.py --rollouts 1024 --judge-requests 64 --latency-ms 20

Every row is timed in the same run, so the ratios compare like with like on this machine.
"""

from __future__ import annotations

import argparse
import importlib.util
import platform
import random
import time
from collections.abc import Callable
from pathlib import Path

from awarl.protocol import ABSTAIN_PHRASE, score_text
from awarl.data.records import Passage
from awarl.rewards import AnswerAbstainReward, CitationReward, LLMJudge, RewardConfig, refusal_base_reward
from awarl.rewards.citation import JudgeRequest
from awarl.rewards.refusal import refusal_base_rewards

ROOT = Path(__file__).resolve().parents[1]
REPLAY = ROOT / "tests" / "rewards" / "reward_judge_replay.py"


def make_batch(n: int, generations: int = 8, seed: int = 0) -> dict:
    """A generation batch shaped like TRL's: message-list completions and the dataset columns."""
    rng = random.Random(seed)
    rows: dict[str, list] = {k: [] for k in ("prompts", "completions", "answers", "p", "id", "supporting")}
    for i in range(n):
        q = i // generations
        roll = rng.random()
        if roll < 0.3:
            text = f"<answer>{ABSTAIN_PHRASE}</answer>"
        elif roll < 0.35:
            text = "I think it is Paris."  # no answer tags: unparsable
        else:
            answer = "Ronald Shusett" if rng.random() < 0.6 else "Dan O'Bannon"
            text = f"Both passages agree. <answer>{answer}</answer> [d{q}a] [d{q}b]"
        rows["prompts"].append([{"role": "system", "content": "…"}, {"role": "user", "content": f"question {q}?"}])
        rows["completions"].append([{"role": "assistant", "content": "", "tool_calls": []},
                                    {"role": "tool", "content": f"[d{q}a] A: text"},
                                    {"role": "assistant", "content": text}])
        rows["answers"].append(["Ronald Shusett", "Ronald Shusett Jr."])
        rows["p"].append(rng.choice([0.0, 0.125, 0.25, 0.5, 0.75, 1.0]))
        rows["id"].append(f"q{q}")
        rows["supporting"].append([f"d{q}a", f"d{q}c"])
    return rows


def best_of(repeats: int, fn: Callable[[], object]) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def bench_reward(n: int, repeats: int) -> list[tuple[str, float, str]]:
    batch = make_batch(n)
    cols = {k: v for k, v in batch.items() if k not in ("prompts", "completions")}
    awa, cite = AnswerAbstainReward(RewardConfig()), CitationReward(RewardConfig())
    metrics: dict[str, float] = {}
    p = batch["p"]
    t_score = best_of(repeats, lambda: [score_text(c, a) for c, a in zip(batch["completions"], batch["answers"])])
    t_awa = best_of(repeats, lambda: awa(batch["prompts"], batch["completions"], log_metric=metrics.__setitem__, **cols))
    t_cite = best_of(repeats, lambda: cite(batch["prompts"], batch["completions"], log_metric=metrics.__setitem__,
                                           **cols))
    t_scalar = best_of(repeats, lambda: [refusal_base_reward(x, 0.1, 0.5) for x in p])
    t_vector = best_of(repeats, lambda: refusal_base_rewards(p, 0.1, 0.5))
    return [
        (f"protocol.score_text x {n} (baseline)", t_score, "1.00x"),
        (f"awa_reward, {n} rollouts (score + global stats + penalty)", t_awa, f"{t_awa / t_score:.2f}x"),
        (f"citation_reward (gold judge), {n} rollouts", t_cite, f"{t_cite / t_score:.2f}x"),
        (f"R_base scalar loop x {n} (baseline)", t_scalar, "1.00x"),
        (f"R_base vectorised (numpy), {n} values", t_vector, f"{t_scalar / t_vector:.1f}x faster"),
    ]


def bench_judge(requests: int, latency_s: float) -> list[tuple[str, float, str]]:
    spec = importlib.util.spec_from_file_location("reward_judge_replay", REPLAY)
    replay = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(replay)
    passages = tuple(Passage(f"d{i}", f"T{i}", ("SUPPORT " if i % 2 else "") + "text " * 40) for i in range(5))
    reqs = [JudgeRequest(f"question {i}?", "answer", ("d1", "d2"), passages) for i in range(requests)]
    rows = []
    with replay.ReplayJudgeServer(latency_s=latency_s) as server:
        base = None
        for concurrency in (1, 32):
            judge = LLMJudge(server.base_url, "judge", concurrency=concurrency, timeout_s=10, max_retries=0)
            start = time.perf_counter()
            results = judge.judge_many(reqs)
            elapsed = time.perf_counter() - start
            assert all(r is not None for r in results), judge.stats
            base = base or elapsed
            rows.append((f"llm judge, {requests} requests, concurrency {concurrency} "
                         f"({requests / elapsed:.0f} req/s)", elapsed, f"{base / elapsed:.1f}x"))
        start = time.perf_counter()
        judge.judge_many(reqs)  # every request is now a cache hit
        elapsed = time.perf_counter() - start
        rows.append((f"llm judge, same {requests} again (cache hits: {judge.stats.cache_hits})", elapsed,
                     f"{base / elapsed:.0f}x"))
        assert len(server.requests) == 2 * requests, "cache hits must not reach the server"
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--judge-requests", type=int, default=128)
    parser.add_argument("--latency-ms", type=float, default=20.0, help="replay server latency per request")
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {platform.processor() or 'cpu'}, python {platform.python_version()}")
    rows = bench_reward(args.rollouts, args.repeats) + bench_judge(args.judge_requests, args.latency_ms / 1000)
    width = max(len(r[0]) for r in rows)
    print(f"{'what':<{width}}  {'seconds':>9}  ratio")
    for name, seconds, ratio in rows:
        print(f"{name:<{width}}  {seconds:>9.4f}  {ratio}")


if __name__ == "__main__":
    main()
