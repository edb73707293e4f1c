"""Benchmark the verification checks: latency per finding on the 100+-rule benefits policy, and
the cost of the LLM translator's N-sample equivalence check.

    python scripts/bench_verify.py [--checks 300] [--seed 0]

Table 1 times `Reasoner.check` per finding (p50 / p95 / mean, ms) and compares it with two
same-run baselines: the same check without core minimisation, and a single bare satisfiability
call (R ∧ P ∧ ¬C), the least any checker must do. Table 2 times `LLMTranslator.translate` with a
scripted backend (no model, so only the SMT clustering is measured) for N samples that all
agree (N−1 equivalence checks) or all differ (N(N−1)/2 checks).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections import Counter
from pathlib import Path

import z3

from awarl.verify.findings import Statement, Translation
from awarl.verify.policy import Policy, load_policy
from awarl.verify.reasoner import Reasoner
from awarl.verify.translate import LLMTranslator

POLICY = Path(__file__).resolve().parents[1] / "configs" / "policies" / "benefits.yaml"


def random_translation(policy: Policy, rng: random.Random) -> Translation:
    """Facts about one employee (some left out) and one claim about one benefit."""
    facts = {
        "employment_type": rng.choice(["full_time", "part_time", "contractor", "intern"]),
        "region": rng.choice(["us", "eu", "uk", "apac"]),
        "tenure_months": rng.randint(0, 80),
        "weekly_hours": rng.choice([10, 20, 30, 35, 40]),
        "dependents": rng.randint(0, 3),
    }
    premises = [Statement(policy.assignment(k, v)) for k, v in facts.items() if rng.random() < 0.8]
    claim_vars = [v.name for v in policy.variables if v.role == "claim"]
    name = rng.choice(claim_vars)
    if policy.kind(name) == "bool":
        claim = policy.assignment(name, rng.random() < 0.5)
    else:
        claim = f"(= {name} {rng.choice([0, 300, 500, 1000, 1200, 6000])})"
    return Translation(premises=premises, claims=[Statement(claim)])


def bare_check(policy: Policy, t: Translation) -> z3.CheckSatResult:
    s = z3.Solver(ctx=policy.ctx)
    s.add(*policy.compiled.values(), *[policy.parse(p.logic) for p in t.premises])
    s.add(z3.Not(z3.And(*[policy.parse(c.logic) for c in t.claims])))
    return s.check()


def timed(fn, items) -> list[float]:
    out = []
    for item in items:
        start = time.perf_counter()
        fn(item)
        out.append((time.perf_counter() - start) * 1000)
    return out


def row(name: str, ms: list[float], base: float | None) -> str:
    p50 = statistics.median(ms)
    p95 = sorted(ms)[max(0, int(round(0.95 * len(ms))) - 1)]
    ratio = f"{p50 / base:.1f}x" if base else "1.0x"
    return f"| {name:<38} | {p50:8.2f} | {p95:8.2f} | {statistics.fmean(ms):8.2f} | {ratio:>9} |"


class Agreeing:
    """Scripted backend: N samples, all SMT-equivalent, textually different."""

    def __init__(self, agree: bool):
        self.agree = agree

    def generate(self, prompts, n, temperature):
        samples = []
        for k in range(n):
            tenure = 14 if self.agree else 14 + k
            premise = f"(>= tenure_months {tenure})" if k % 2 else f"(not (< tenure_months {tenure}))"
            samples.append(json.dumps({"statements": [{"premises": [{"logic": premise}, {"logic": "(= employment_type full_time)"}],
                                                       "claims": [{"logic": "eligible_dental"}]}]}))
        return [samples for _ in prompts]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checks", type=int, default=300, help="Findings to time per configuration.")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    start = time.perf_counter()
    policy = load_policy(POLICY)
    load_ms = (time.perf_counter() - start) * 1000
    rng = random.Random(args.seed)
    items = [random_translation(policy, rng) for _ in range(args.checks)]
    print(f"policy: {POLICY.name}: {len(policy.rules)} rules, {len(policy.variables)} variables (loaded and parsed in {load_ms:.0f} ms)")

    full, plain = Reasoner(policy), Reasoner(policy, minimize_cores=False)
    results = Counter(full.check(t).result.value for t in items)
    print(f"{args.checks} random checks: " + ", ".join(f"{k} {v}" for k, v in sorted(results.items())))
    bare = timed(lambda t: bare_check(policy, t), items)
    base = statistics.median(bare)
    print("\n| check (per finding)                    |  p50 ms  |  p95 ms  |  mean ms | vs bare  |")
    print("|----------------------------------------|----------|----------|----------|----------|")
    print(row("bare sat call R∧P∧¬C (baseline)", bare, None))
    print(row("Reasoner.check, no core minimisation", timed(plain.check, items), base))
    print(row("Reasoner.check (full)", timed(full.check, items), base))

    print("\n| LLM translator, N samples              |  p50 ms  |  p95 ms  | equiv. checks | ms / check |")
    print("|----------------------------------------|----------|----------|---------------|------------|")
    reps = max(5, args.checks // 20)
    for agree in (True, False):
        for n in (1, 3, 5, 10):
            translator = LLMTranslator(Agreeing(agree), samples=n, threshold=0.0)
            ms = timed(lambda _: translator.translate("q", "a", policy), range(reps))
            checks = (n - 1) if agree else n * (n - 1) // 2
            p50, p95 = statistics.median(ms), sorted(ms)[max(0, int(round(0.95 * len(ms))) - 1)]
            per = f"{p50 / checks:10.2f}" if checks else f"{'-':>10}"
            label = f"N={n}, samples {'agree' if agree else 'all differ'}"
            print(f"| {label:<38} | {p50:8.2f} | {p95:8.2f} | {checks:13d} | {per} |")

if __name__ == "__main__":
    main()
