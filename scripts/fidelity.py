"""Fidelity study v2: does AWA-RL do what the paper says on the synthetic world, on a CPU?
(docs/fidelity.md, "Study v2"; the design, claims and report live in awarl.eval.study*.)

    python scripts/fidelity.py arms                                   # tiers, arms and every reward switch
    OMP_NUM_THREADS=1 python scripts/fidelity.py run --tier T1 --seeds 0 1 2 --jobs 2
    python scripts/fidelity.py run --tier T2 --seeds 0 --arms awa_adaptive none
    python scripts/fidelity.py aggregate                              # tables, claims, plots of what finished

Resumable: one folder per tier / arm / seed under --out (default runs/fidelity); a finished arm
(its result.json) is skipped, a killed GRPO run continues from its last checkpoint, an evaluation
from its last question. Each job runs in its own process with OMP_NUM_THREADS=1; --jobs 2 runs two
at a time (the bases of a tier first, then its arms). Citation rewards use the gold judge.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from awarl.eval.study import (  # noqa: E402
    SEEDS, TIERS, arm_folder, arm_overrides, base_folder, base_overrides, late, load_run, load_runs, plan, read_batches,
    write_result, yardstick_failures,
)

RECIPE = ROOT / "configs" / "demo_world.yaml"
SAMPLED = 2
"""Sampled held-out evaluations per arm (T = 1), each its own seed."""
PARENT_ENV = "AWARL_STUDY_PARENT"
"""The `run` process's id, handed to each job it spawns (a job ends when it does; read before the imports)."""


def _demo(out: Path, tier: str, seed: int, recipe: Path, terminal: Any):
    """The base's demo, its paths relative to the base folder (run it inside that folder, as `run_demo` does:
    the base's p_i and settings record paths relative to it)."""
    from awarl.demo import Demo, DemoPaths, DemoRecipe, Display

    loaded = DemoRecipe.load(recipe, seed=seed, overrides=base_overrides(TIERS[tier]))
    return Demo(DemoPaths(Path("."), shown=base_folder(out, tier, seed)), loaded, Display(terminal, enabled=False),
                quick=False, seed=seed)


def build_base(out: Path, tier: str, seed: int, recipe: Path) -> None:
    """The tier's base for one seed: world, SFT checkpoint and p_i (the demo up to p_i), resumable."""
    from awarl.demo import run_demo

    run_demo(base_folder(out, tier, seed), seed=seed, recipe=Path(recipe).resolve(), until="p_i", progress=False,
             overrides=base_overrides(TIERS[tier]))


def base_mean_p(out: Path, tier: str, seed: int) -> float:
    from awarl.demo.report import capability_section
    from awarl.demo.run import DemoPaths

    return capability_section(DemoPaths(base_folder(out, tier, seed)).p_file("rl"))["mean_p_answerable"]


def run_arm(out: Path, tier: str, arm: str, seed: int, recipe: Path) -> Path:
    """Train one arm from its tier's base, evaluate it greedy and sampled, write its result.json."""
    from awarl.demo.report import expected_refusal, outcome_rows, run_summary
    from awarl.demo.run import inside, prompts_per_batch
    from awarl.eval.run import EvalConfig, run_eval
    from awarl.train.callbacks import quiet_terminal
    from awarl.train.config import apply_override

    spec = TIERS[tier].arm(arm)
    out = Path(out).resolve()
    folder = arm_folder(out, tier, arm, seed)
    folder.mkdir(parents=True, exist_ok=True)
    changes: dict[str, Any] = {}
    for key, value in arm_overrides(TIERS[tier], spec).items():
        apply_override(changes, f"{key}={json.dumps(value)}")
    recipe = Path(recipe).resolve()
    with quiet_terminal(folder / "run.log") as terminal, inside(base_folder(out, tier, seed)):
        demo = _demo(out, tier, seed, recipe, terminal)
        demo.recipe.arms = {arm: changes}  # the study's arm replaces the demo's: the recipe's sections plus its changes
        config = demo.train_arm(arm, folder=folder / "grpo")
        model = folder / "grpo" / "final"
        greedy = demo.evaluate(model, folder / "eval", f"{tier} {arm} seed {seed}")
        sampled = []
        for k in range(SAMPLED):
            run = EvalConfig(model=str(model), data=demo.eval_records_with_p(), out=folder / f"eval-sampled{k}",
                             name=f"{tier} {arm} seed {seed} sample {k}", rollout=demo.rollout, corpus=demo.paths.corpus,
                             temperature=1.0, seed=1000 * seed + k + 1, backend_options={"device": "cpu"})
            sampled.append(run_summary(run_eval(run, progress=False).metrics, outcome_rows(folder / f"eval-sampled{k}")))
        rl = [json.loads(line) for line in demo.paths.records("rl").read_text(encoding="utf-8").splitlines() if line.strip()]
    batches = read_batches(folder / "grpo" / "metrics_log.jsonl")
    rows = outcome_rows(folder / "eval")
    result = {"tier": tier, "arm": arm, "seed": seed, "steps": TIERS[tier].steps, "reward": spec.reward,
              "base": base_overrides(TIERS[tier]), "greedy": run_summary(greedy, rows), "sampled": sampled,
              "heldout_target": expected_refusal(rows, config.reward, late(batches, "value_correct"),
                                                 late(batches, "value_wrong")),
              "unanswerable_share_rl": sum(not r.get("answerable", True) for r in rl) / max(len(rl), 1),
              "rollouts_per_batch": prompts_per_batch(config) * int(config.grpo.get("num_generations", 1))}
    return write_result(folder, result)


def _check_study(out: Path, tier: str, recipe: Path) -> None:
    """A tier folder holds one recipe: rerunning it with other settings is refused (`check_settings`)."""
    from awarl.demo import DemoError, DemoRecipe, check_settings

    loaded = DemoRecipe.load(recipe, seed=0, overrides=base_overrides(TIERS[tier]))
    loaded.arms = {}
    try:
        check_settings(Path(out) / tier / "study.json", loaded)
    except DemoError as exc:
        raise SystemExit(str(exc)) from None


def _spawn(args: list[str]) -> int:
    env = {**os.environ, "OMP_NUM_THREADS": "1", PARENT_ENV: str(os.getpid())}
    print("== " + " ".join(args), flush=True)
    return subprocess.call([sys.executable, str(Path(__file__).resolve()), "run-one", *args], env=env)


def run(out: Path, tiers: list[str], seeds: list[int], arms: list[str] | None, recipe: Path, jobs: int) -> int:
    failed = 0
    for tier in tiers:
        _check_study(out, tier, recipe)
        todo = plan(out, [tier], seeds, arms)
        common = ["--out", str(out), "--recipe", str(recipe), "--tier", tier]
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            needed = sorted({s for _, _, s in todo})
            codes = dict(zip(needed, pool.map(lambda s: _spawn([*common, "--seed", str(s), "--arm", "base"]), needed)))
        for seed, code in codes.items():
            if code != 0:
                # e.g. another `run` is building the same base: an arm must not start from a half-built one
                print(f"!! {tier} seed {seed}: its base did not finish (exit {code}; the job's output above says why); "
                      f"its arms are not run. Rerun to resume it.", flush=True)
                failed += 1
                todo = [t for t in todo if t[2] != seed]
        limit = TIERS[tier].max_mean_p
        if limit is not None:
            for seed in [s for s in sorted({s for _, _, s in todo}) if base_folder(out, tier, s).exists()]:
                mean = base_mean_p(out, tier, seed)
                if mean > limit:
                    print(f"!! {tier} seed {seed}: the base's mean p_i on answerable RL questions is {mean:.3f} > {limit} "
                          f"(the tier's precondition); its arms are not run. Change the tier's base in "
                          f"awarl/eval/study.py before any arm runs.", flush=True)
                    todo = [t for t in todo if t[2] != seed]
        yardstick = TIERS[tier].yardstick
        if yardstick and any(arm != yardstick for _, arm, _ in todo):
            # the yardstick first, at every seed; the other arms only where it shows RL teaches the base
            first = [t for t in todo if t[1] == yardstick]
            with ThreadPoolExecutor(max_workers=jobs) as pool:
                failed += sum(pool.map(lambda t: _spawn([*common, "--arm", t[1], "--seed", str(t[2])]) != 0, first))
            todo = [t for t in todo if t[1] != yardstick]
            for seed in sorted({s for _, _, s in todo}):
                folder = arm_folder(out, tier, yardstick, seed)
                why = yardstick_failures(load_run(folder)) if (folder / "result.json").exists() else ["it has not finished"]
                if why:
                    print(f"!! {tier} seed {seed}: the yardstick arm {yardstick} does not show that RL teaches this base "
                          f"({'; '.join(why)}); the tier's other arms are not run at this seed.", flush=True)
                    todo = [t for t in todo if t[2] != seed]
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            failed += sum(pool.map(lambda t: _spawn([*common, "--arm", t[1], "--seed", str(t[2])]) != 0, todo))
    return 1 if failed else 0


def aggregate(out: Path) -> int:
    from awarl.eval.study import aggregate as table_of
    from awarl.eval.study_claims import claims
    from awarl.eval.study_report import markdown, plot

    runs = load_runs(out)
    if not runs:
        print(f"no finished runs under {out}", file=sys.stderr)
        return 1
    table = table_of(runs)
    found = claims(table)
    text = markdown(table, found, _oracle(out), plan(out, list(TIERS), list(SEEDS)))
    (Path(out) / "fidelity.md").write_text(text, encoding="utf-8")
    plot(table, Path(out), _oracle(out))
    print(text)
    return 0


def _oracle(out: Path) -> list[Any] | None:
    """The oracle bounds on T1's world (seed 0's base, regenerated from its recorded config), once built."""
    from awarl.data.world import WorldConfig, generate_world
    from awarl.eval.world_audit import oracle_frontier

    path = base_folder(out, "T1", 0) / "world" / "world.json"
    if not path.exists():
        return None
    config = json.loads(path.read_text(encoding="utf-8"))["config"]
    return oracle_frontier(generate_world(WorldConfig.from_dict(config, f"{path}: config")))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("run", "run-one"):
        p = sub.add_parser(name, help="train + evaluate (resumes)" if name == "run" else "one job (run uses it)")
        p.add_argument("--out", type=Path, default=ROOT / "runs" / "fidelity")
        p.add_argument("--recipe", type=Path, default=RECIPE)
        p.add_argument("--tier", choices=list(TIERS), nargs="+" if name == "run" else None, required=name == "run-one",
                       default=list(TIERS))
        if name == "run":
            p.add_argument("--seeds", nargs="+", type=int, default=list(SEEDS))
            p.add_argument("--arms", nargs="+", help="arms of the tier (default: all)")
            p.add_argument("--jobs", type=int, default=1, help="processes at a time (each OMP_NUM_THREADS=1)")
        else:
            p.add_argument("--seed", type=int, required=True)
            p.add_argument("--arm", required=True, help="an arm of the tier, or 'base'")
    agg = sub.add_parser("aggregate", help="tables, claims and plots of what has finished")
    agg.add_argument("--out", type=Path, default=ROOT / "runs" / "fidelity")
    sub.add_parser("arms", help="the tiers, their bases and arms, every reward switch")
    args = parser.parse_args(argv)
    if args.command == "arms":
        for tier in TIERS.values():
            print(f"{tier.name}: {tier.title}; base {base_overrides(tier)}; {tier.steps} optimizer steps per arm")
            for arm in tier.arms:
                seeds = f" (seeds {list(arm.seeds)})" if arm.seeds else ""
                print(f"  {arm.name:14} {arm.tests}{seeds}\n                 {json.dumps(arm.reward)}")
        return 0
    if args.command == "aggregate":
        return aggregate(args.out)
    if args.command == "run-one":
        from awarl.demo.parallel import end_with_parent

        # killing `run` (to pause the study) ends its jobs too; a rerun resumes them
        end_with_parent(int(os.environ[PARENT_ENV]) if os.environ.get(PARENT_ENV, "").isdigit() else None)
        if args.arm == "base":
            build_base(args.out, args.tier, args.seed, args.recipe)
        else:
            run_arm(args.out, args.tier, args.arm, args.seed, args.recipe)
        return 0
    for tier in args.tier:
        for arm in args.arms or []:
            try:
                TIERS[tier].arm(arm)
            except KeyError as exc:
                parser.error(str(exc))
    code = run(args.out, args.tier, args.seeds, args.arms, args.recipe, max(1, args.jobs))
    aggregate(args.out)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
