"""Benchmark the verification checks: latency per finding on the 100+-rule benefits policy, the
cost of the LLM translator's N-sample equivalence check, policy load time on large policies, and
lint time.

    python scripts/bench_verify.py [--checks 300] [--seed 0] [--sizes 250,500,1000,2000] [--no-lint]

Table 1 times `Reasoner.check` per finding (p50 / p95 / mean, ms) and compares it with two
same-run baselines: the same check without core minimisation, and a single bare satisfiability
call (R ∧ P ∧ ¬C), the least any checker must do. Table 2 times `LLMTranslator.translate` with a
scripted backend (no model, so only the SMT clustering is measured) for N samples that all
agree (N−1 equivalence checks) or all differ (N(N−1)/2 checks).

Table 3 times loading policy files of 250 to 2,000 rules (the benefits policy replicated with
renamed benefits, so variables grow with rules) with awarl's loader and, as the same-run
baseline, the per-rule loader (pure-Python YAML, then every rule handed to Z3's SMT-LIB parser
with every declaration), plus what one `awarl verify check` costs on each after start-up (load,
reasoner, one finding).
Table 4 times `lint` (pruned by models) against a plain pairwise lint on the benefits
policy and a 250-rule one. Table 5 (``--only-pattern`` runs it alone) times the pattern translator
on the demo world's policy (one pattern per city and relation) over held-out evidence and answers,
alone and from 32 threads at once as the chat server runs it, against the same translator without
its literal prefilter.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import re
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import yaml
import z3

from awarl.verify.findings import Statement, Translation
from awarl.verify.lint import lint
from awarl.verify.policy import Policy, load_policy, policy_from_dict
from awarl.verify.reasoner import Reasoner
from awarl.verify.translate import LLMTranslator

ROOT = Path(__file__).resolve().parents[1]
POLICY = ROOT / "configs" / "policies" / "benefits.yaml"


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
    parser.add_argument("--sizes", default="250,500,1000,2000", help="Rule counts of the load-time table (comma-separated).")
    parser.add_argument("--repeats", type=int, default=3, help="Repeats per load time (the best is shown).")
    parser.add_argument("--no-lint", action="store_true", help="Skip the lint table (about a minute).")
    parser.add_argument("--only-large", action="store_true", help="Only the load-time and lint tables.")
    parser.add_argument("--only-pattern", action="store_true", help="Only the pattern-translator table.")
    args = parser.parse_args()
    if args.only_pattern:
        pattern_table(args.checks, args.seed)
        return
    if args.only_large:
        load_table([int(n) for n in args.sizes.split(",") if n.strip()], args.repeats)
        if not args.no_lint:
            lint_table()
        return

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

    load_table([int(n) for n in args.sizes.split(",") if n.strip()], args.repeats)
    if not args.no_lint:
        lint_table()
    pattern_table(args.checks, args.seed)


# -- pattern translation on the world policy -----------------------------------------------------
def pattern_table(checks: int, seed: int) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from awarl.data.world import WorldConfig, evidence_text, generate_world, policy_yaml
    from awarl.verify.translate import PatternTranslator

    world = generate_world(WorldConfig(version=2, seed=seed))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "policy.yaml"
        path.write_text(policy_yaml(world), encoding="utf-8")
        policy = load_policy(path)
    countries = sorted({q.answer for q in world.questions})
    held = [q for q in world.questions if q.split == "eval"][:checks]
    pairs = [(evidence_text(world, q), f"{countries[i % len(countries)]} [p{i}]") for i, q in enumerate(held)]
    patterns = sum(len(v.patterns) for v in policy.variables)
    print(f"\nworld v2 policy (seed {seed}): {patterns} patterns over {len(policy.variables)} variables; "
          f"{len(pairs)} held-out evidence texts with an answer")
    print("\n| pattern translation (per check)        |  p50 ms  |  p95 ms  |  mean ms | vs prefilter |")
    print("|----------------------------------------|----------|----------|----------|--------------|")
    base = None
    for label, translator in (("prefilter (default)", PatternTranslator(timeout_ms=600_000)),
                              ("no prefilter", PatternTranslator(timeout_ms=600_000, prefilter=False))):
        alone = timed(lambda qa: translator.translate(qa[0], qa[1], policy), pairs)

        def one(qa):
            start = time.perf_counter()
            translator.translate(qa[0], qa[1], policy)
            return (time.perf_counter() - start) * 1000

        with ThreadPoolExecutor(32) as pool:
            together = list(pool.map(one, pairs))
        base = base or statistics.median(alone)
        print(row(f"{label}, alone", alone, base).replace("x |", "x    |"))
        print(row(f"{label}, 32 threads", together, base).replace("x |", "x    |"))


# -- large policies ------------------------------------------------------------------------------
def _benefits_generator():
    spec = importlib.util.spec_from_file_location("gen_benefits_policy", ROOT / "scripts" / "gen_benefits_policy.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def large_policy(rules: int) -> dict:
    """The benefits policy with its benefits copied under new names (``dental_3`` …) until it has
    ``rules`` rules; the employee facts and their five rules are shared by every copy."""
    base = _benefits_generator().policy()
    shared_vars = [v for v in base["variables"] if v["role"] == "premise"]
    own_vars = [v for v in base["variables"] if v["role"] != "premise"]
    shared_rules, own_rules = base["rules"][:5], base["rules"][5:]
    out = {"version": "1.0", "types": base["types"], "variables": list(shared_vars), "rules": list(shared_rules)}
    token = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
    copy = 0
    while len(out["rules"]) < rules:
        names = {v["name"]: f"{v['name']}_{copy}" for v in own_vars}
        out["variables"] += [{**v, "name": names[v["name"]]} for v in own_vars]
        for r in own_rules[: rules - len(out["rules"])]:
            expression = token.sub(lambda m: names.get(m.group(0), m.group(0)), r["expression"])
            out["rules"].append({**r, "id": f"{r['id']}_{copy}", "expression": expression})
        copy += 1
    return out


def per_rule_load(path: Path) -> None:
    """The per-rule loader: PyYAML's pure-Python safe loader, then every rule given to Z3's parser
    with every declaration (declarations built by today's code, so only these two steps differ)."""
    definition = yaml.safe_load(path.read_text(encoding="utf-8"))
    declared = policy_from_dict({**definition, "rules": []})
    for r in definition["rules"]:
        z3.parse_smt2_string(f"(assert {r['expression']})", sorts=declared.sorts, decls=declared.consts, ctx=declared.ctx)


def one_check(path: Path) -> None:
    """What `awarl verify check --premise … --claim …` does after start-up: load, build the
    reasoner, check one finding."""
    policy = load_policy(path)
    Reasoner(policy).check_expressions(["(= employment_type full_time)", "(= tenure_months 14)", "(= weekly_hours 40)"], ["eligible_dental_0"])


def best_ms(fn, arg, repeats: int) -> tuple[float, float]:
    """(wall ms, CPU ms) of the fastest of ``repeats`` runs. CPU time is what the work costs on a
    machine shared with other jobs, where wall time also counts the waiting."""
    out = []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        fn(arg)
        out.append(((time.perf_counter() - wall) * 1000, (time.process_time() - cpu) * 1000))
    return min(out)


def load_table(sizes: list[int], repeats: int) -> None:
    print("\n| rules | variables | YAML MB | per-rule load ms (CPU) | load ms (CPU), awarl | speed-up (CPU) | load + reasoner + 1 finding ms (CPU) |")
    print("|------:|----------:|--------:|-----------------------:|---------------------:|---------------:|-------------------------------------:|")
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            definition = large_policy(n)
            path = Path(tmp) / f"policy_{n}.yaml"
            path.write_text(yaml.safe_dump(definition, sort_keys=False, width=200), encoding="utf-8")
            old = best_ms(per_rule_load, path, 1 if n >= 1000 else repeats)
            new = best_ms(load_policy, path, repeats)
            check = best_ms(one_check, path, repeats)
            mb = path.stat().st_size / 1e6
            print(f"| {n:5d} | {len(definition['variables']):9d} | {mb:7.2f} | {old[0]:12.0f} ({old[1]:6.0f}) | {new[0]:10.0f} ({new[1]:6.0f}) |"
                  f" {old[1] / new[1]:13.1f}x | {check[0]:25.0f} ({check[1]:6.0f}) |", flush=True)


def pairwise_lint(policy: Policy) -> int:
    """The pairwise lint: one solver call per rule and per pair of implications sharing a
    variable, each with every rule as an assumption; returns the number of issues."""
    ctx, ids = policy.ctx, [r.id for r in policy.rules]
    lits = [z3.Bool(f"__prev_{i}", ctx) for i in range(len(ids))]
    s = z3.Solver(ctx=ctx)
    s.set("timeout", 2000)
    for lit, rid in zip(lits, ids):
        s.add(z3.Implies(lit, policy.compiled[rid]))
    issues = 0
    conds = {i: policy.compiled[r].arg(0) for i, r in enumerate(ids) if z3.is_app_of(policy.compiled[r], z3.Z3_OP_IMPLIES)}
    guards = {i: z3.Bool(f"__prevc_{i}", ctx) for i in conds}
    for i, g in guards.items():
        s.add(z3.Implies(g, conds[i]))
    for i, g in guards.items():
        issues += s.check(*[lits[j] for j in range(len(ids)) if j != i], g) == z3.unsat
    live = list(guards)
    shared = {i: set(policy.variables_in([policy.compiled[ids[i]]])) for i in live}
    for p, a in enumerate(live):
        for b in live[p + 1 :]:
            if shared[a] & shared[b]:
                issues += s.check(*lits, guards[a], guards[b]) == z3.unsat  # before core minimisation
    return issues


def lint_table() -> None:
    print("\n| policy                   | rules | pairwise lint s (CPU) | lint s (CPU), awarl | speed-up (CPU) |")
    print("|--------------------------|------:|-------------------------------:|--------------------:|---------------:|")
    for name, policy in (("benefits.yaml", load_policy(POLICY)), ("benefits x2 (250 rules)", policy_from_dict(large_policy(250)))):
        old = best_ms(pairwise_lint, policy, 1)
        new = best_ms(lambda p: lint(p, budget_s=None), policy, 1)
        print(f"| {name:<24} | {len(policy.rules):5d} | {old[0] / 1000:21.1f} ({old[1] / 1000:5.1f}) |"
              f" {new[0] / 1000:11.1f} ({new[1] / 1000:5.1f}) | {old[1] / new[1]:13.1f}x |", flush=True)


if __name__ == "__main__":
    main()
