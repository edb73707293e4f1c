"""Fidelity study: does AWA-RL do what the paper claims, on the synthetic world, on a CPU?

Every arm trains GRPO for the same number of optimizer steps from the same SFT checkpoint and p_i
(one base per seed: ``awarl demo --until p_i``), then is evaluated greedily on the held-out split.
One run folder per arm x seed; everything resumes (a finished run is skipped, a killed GRPO run
continues from its last checkpoint, evaluation from its last question), so the study can run for
hours in the background across sessions.

    python scripts/fidelity.py run --out runs/fidelity --seeds 0 1 --arms awa_g0.5 static_0.5 none
    python scripts/fidelity.py run --out runs/fidelity --seeds 0 1 2           # every arm
    python scripts/fidelity.py aggregate --out runs/fidelity                   # table + plots + claims
    python scripts/fidelity.py arms                                            # list the arms

Citation rewards use the gold judge (the world's supporting passages): no judge model runs offline.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

ARMS: dict[str, dict[str, Any]] = {
    "awa_g0.3": {"reward.kind": "awa", "reward.gamma": 0.3},
    "awa_g0.5": {"reward.kind": "awa", "reward.gamma": 0.5},
    "awa_g0.7": {"reward.kind": "awa", "reward.gamma": 0.7},
    "static_0.5": {"reward.kind": "static", "reward.static_reward": 0.5},
    "ternary": {"reward.kind": "ternary"},
    "none": {"reward.kind": "none"},
    # The paper's data-manipulation baseline: unanswerable questions are part of the training data
    # (30% of the RL split) and abstaining pays only on those.
    "data_manip": {"reward.kind": "unanswerable_only"},
    "awa_uncapped": {"reward.kind": "awa", "reward.gamma": 0.5, "reward.cap_abstain": False},
    "awa_search_first": {"reward.kind": "awa", "reward.gamma": 0.5, "reward.abstain_requires_search": True},
}
"""Arm name -> recipe overrides (dotted keys)."""

DEFAULT_STEPS = 600
"""Optimizer steps per arm: 150 generation batches of 16 prompts x 4 (4 optimizer steps each)."""

FINAL_KEYS = ("precision", "accuracy", "ra_f1", "refusal_rate", "abstain_recall", "over_refusal")


# -- running -------------------------------------------------------------------------------------------------
def run_arm(out: Path, arm: str, seed: int, steps: int, recipe: Path, overrides: list[str] | None = None) -> Path:
    """Train and evaluate one arm x seed (resuming); returns its folder. ``overrides``
    (``section.field=value``) change the recipe of the base and of every arm."""
    from awarl.demo import Demo, DemoPaths, DemoRecipe, Display, expected_refusal, outcome_rows, run_demo
    from awarl.train.callbacks import quiet_terminal
    from awarl.train.config import apply_override

    base = out / f"base-seed{seed}"
    folder = out / arm / f"seed{seed}"
    if (folder / "result.json").exists():
        return folder
    overrides = list(overrides or [])
    run_demo(base, seed=seed, recipe=recipe, until="p_i", progress=False, overrides=overrides)
    changes: dict[str, Any] = {}
    for key, value in {**ARMS[arm], "grpo.max_steps": steps}.items():
        apply_override(changes, f"{key}={json.dumps(value)}")
    folder.mkdir(parents=True, exist_ok=True)
    with quiet_terminal(folder / "run.log") as terminal:
        demo = Demo(DemoPaths(base), DemoRecipe.load(recipe, seed=seed, overrides=overrides),
                    Display(terminal, enabled=False), quick=False, seed=seed)
        # the study's arms replace the demo's: every arm is the recipe's training sections plus its changes
        demo.recipe.arms = {arm: changes}
        config = demo.train_arm(arm, folder=folder / "grpo")
        metrics = demo.evaluate(folder / "grpo" / "final", folder / "eval", f"{arm} seed {seed}")
    rows = outcome_rows(folder / "eval")
    overall = metrics["overall"]
    summary = {"arm": arm, "seed": seed, "steps": steps, "overrides": ARMS[arm], "recipe_overrides": overrides,
               "final": {k: overall.get(k) for k in FINAL_KEYS},
               "expected_refusal": expected_refusal(rows, config.reward) if config.reward.kind == "awa" else None}
    (folder / "result.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return folder


def _check_study(out: Path, recipe: Path, overrides: list[str]) -> None:
    """A study folder holds one recipe (file and ``--set`` overrides): its bases and finished arms
    are reused, so running it again with other settings is refused rather than mixed in. The
    check is the demo's (`awarl.demo.check_settings`), on the recipe as every seed shares it
    (without the demo's own ``arms:``: the study trains its own)."""
    from awarl.demo import DemoError, DemoRecipe, check_settings

    loaded = DemoRecipe.load(recipe, seed=0, overrides=overrides)
    loaded.arms = {}
    try:
        check_settings(out / "study.json", loaded)
    except DemoError as exc:
        raise SystemExit(str(exc)) from None


def _bar(mean: float, sd: float | None) -> list[list[float]]:
    """An error bar of ± ``sd`` around a rate, cut at 0 and 1 (a rate cannot leave them)."""
    sd = sd or 0.0
    return [[min(sd, mean)], [min(sd, 1.0 - mean)]]


# -- aggregation ---------------------------------------------------------------------------------------------
def load_runs(out: Path) -> list[dict[str, Any]]:
    """Every finished arm x seed under ``out``: its result.json plus its per-step log."""
    from awarl.train.callbacks import read_metrics_log

    runs = []
    for result in sorted(out.glob("*/seed*/result.json")):
        row = json.loads(result.read_text(encoding="utf-8"))
        row["steps_log"] = read_metrics_log(result.parent / "metrics_log.jsonl")
        runs.append(row)
    return runs


def _mean_sd(values: list[float]) -> tuple[float | None, float | None]:
    values = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    if not values:
        return None, None
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def _window(log: list[dict[str, Any]], key: str, last: int = 20) -> float | None:
    values = [s[key] for s in log[-last:] if isinstance(s.get(key), (int, float))]
    return statistics.fmean(values) if values else None


def aggregate(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per arm: seeds, mean and spread of every final metric, the late batch refusal rate and its
    expected rate (mean of the last 20 logged steps), and the mean refusal trajectory."""
    by_arm: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        by_arm.setdefault(run["arm"], []).append(run)
    table = {}
    for arm, group in by_arm.items():
        entry: dict[str, Any] = {"seeds": sorted(r["seed"] for r in group), "steps": sorted({r["steps"] for r in group})}
        for key in FINAL_KEYS:
            entry[key] = _mean_sd([r["final"].get(key) for r in group])
        entry["batch_refusal_late"] = _mean_sd([_window(r["steps_log"], "awa/refusal_rate") for r in group])
        # The sampled policy (T = 1) in the last training batches: greedy evaluation can hide its guesses.
        entry["batch_precision_late"] = _mean_sd([_window(r["steps_log"], "awa/precision") for r in group])
        entry["batch_accuracy_late"] = _mean_sd([_window(r["steps_log"], "awa/accuracy") for r in group])
        entry["batch_expected_late"] = _mean_sd([_window(r["steps_log"], "awa/expected_refusal_rate") for r in group])
        entry["eval_expected"] = _mean_sd([r.get("expected_refusal") for r in group])
        for name, key in (("trajectory", "awa/refusal_rate"), ("expected_trajectory", "awa/expected_refusal_rate")):
            steps: dict[int, list[float]] = {}
            for r in group:
                for s in r["steps_log"]:
                    if isinstance(s.get(key), (int, float)):
                        steps.setdefault(s["step"], []).append(s[key])
            entry[name] = [(k, statistics.fmean(v)) for k, v in sorted(steps.items())]
        table[arm] = entry
    return table


def claims(table: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The paper's claims, each with the numbers and whether they hold here (None: arms missing)."""
    out = []

    def m(arm: str, key: str) -> float | None:
        return table.get(arm, {}).get(key, (None, None))[0]

    static = m("static_0.5", "batch_refusal_late")
    out.append({"claim": "a static refusal reward drifts to refusal > 0.9", "numbers": {"static_0.5 late batch refusal": static},
                "holds": None if static is None else static > 0.9})
    gaps = {a: (m(a, "refusal_rate"), m(a, "eval_expected")) for a in ("awa_g0.3", "awa_g0.5", "awa_g0.7")}
    ok = [abs(r - e) <= 0.1 for r, e in gaps.values() if r is not None and e is not None]
    out.append({"claim": "AWA's held-out refusal settles within 0.1 of its expected rate",
                "numbers": {a: {"refusal": r, "expected": e} for a, (r, e) in gaps.items()},
                "holds": all(ok) if ok else None})
    rates = [m(a, "refusal_rate") for a in ("awa_g0.3", "awa_g0.5", "awa_g0.7")]
    out.append({"claim": "AWA's refusal rises monotonically with gamma (0.3 < 0.5 < 0.7)",
                "numbers": dict(zip(("0.3", "0.5", "0.7"), rates)),
                "holds": None if None in rates else rates[0] < rates[1] < rates[2]})
    pa, aa, pn, an = m("awa_g0.5", "precision"), m("awa_g0.5", "accuracy"), m("none", "precision"), m("none", "accuracy")
    holds = None if None in (pa, aa, pn, an) else (pa - pn >= 0.05 and an - aa <= 0.05)
    out.append({"claim": "AWA (gamma 0.5) raises precision by >= 5 points over `none` at <= 5 points accuracy cost",
                "numbers": {"precision awa/none": (pa, pn), "accuracy awa/none": (aa, an)}, "holds": holds})
    return out


def markdown(table: dict[str, dict[str, Any]], found: list[dict[str, Any]]) -> str:
    fmt = (lambda ms: "–" if ms[0] is None else f"{ms[0]:.3f} ± {ms[1]:.3f}")
    cols = [*FINAL_KEYS, "eval_expected", "batch_refusal_late", "batch_precision_late", "batch_accuracy_late"]
    lines = ["| arm | seeds | steps | " + " | ".join(cols) + " |", "|---" * (len(cols) + 3) + "|"]
    for arm in [a for a in ARMS if a in table] + sorted(set(table) - set(ARMS)):
        e = table[arm]
        lines.append(f"| {arm} | {','.join(map(str, e['seeds']))} | {','.join(map(str, e['steps']))} | "
                     + " | ".join(fmt(e[c]) for c in cols) + " |")
    lines += ["", "| claim | holds here | numbers |", "|---|---|---|"]
    for c in found:
        verdict = {True: "yes", False: "**no**", None: "not measured"}[c["holds"]]
        lines.append(f"| {c['claim']} | {verdict} | `{json.dumps(c['numbers'])}` |")
    return "\n".join(lines) + "\n"


SMOOTH = 20
"""Steps per moving mean in the trajectory plot (one step's batch of 16 rollouts is noise)."""


def _smooth(values: tuple[float, ...]) -> list[float]:
    out, window = [], []
    for v in values:
        window = (window + [v])[-SMOOTH:]
        out.append(statistics.fmean(window))
    return out


def plot(table: dict[str, dict[str, Any]], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for arm, e in table.items():
        if e["trajectory"]:
            xs, ys = zip(*e["trajectory"])
            line, = ax.plot(xs, _smooth(ys), label=arm, lw=1.2)
            if arm.startswith("awa") and e.get("expected_trajectory"):
                xs, ys = zip(*e["expected_trajectory"])
                ax.plot(xs, _smooth(ys), ls="--", lw=1, color=line.get_color(), label=f"{arm}: expected rate")
    ax.set_xlabel("GRPO optimizer step")
    ax.set_ylabel(f"batch refusal rate (mean over seeds, {SMOOTH}-step mean)")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=7)
    fig.tight_layout()
    paths.append(out / "fidelity_refusal.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(6, 5))
    for arm, e in table.items():
        if e["precision"][0] is not None:
            ax.errorbar(e["accuracy"][0], e["precision"][0], xerr=_bar(*e["accuracy"]), yerr=_bar(*e["precision"]), fmt="o",
                        label=arm, capsize=3)
    gam = [table[a] for a in ("awa_g0.3", "awa_g0.5", "awa_g0.7") if a in table and table[a]["precision"][0] is not None]
    if len(gam) > 1:
        ax.plot([e["accuracy"][0] for e in gam], [e["precision"][0] for e in gam], "k--", lw=1, label="AWA across gamma")
    ax.set_xlabel("accuracy (held-out)")
    ax.set_ylabel("precision (held-out)")
    ax.set_title("held-out precision vs accuracy (mean, bars: ± sd over seeds, within [0, 1])", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    paths.append(out / "fidelity_frontier.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="train + evaluate arms x seeds (resumes)")
    run.add_argument("--out", type=Path, default=ROOT / "runs" / "fidelity")
    run.add_argument("--arms", nargs="*", default=list(ARMS), help=f"any of: {', '.join(ARMS)}")
    run.add_argument("--seeds", nargs="*", type=int, default=[0, 1])
    run.add_argument("--steps", type=int, default=DEFAULT_STEPS, help="GRPO optimizer steps per arm (same for all)")
    run.add_argument("--recipe", type=Path, default=ROOT / "configs" / "demo_world.yaml")
    run.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                     help="override a recipe field for the base and every arm (repeatable), e.g. sft.args.max_steps=500; "
                          "use another --out for each recipe")
    agg = sub.add_parser("aggregate", help="table, claims and plots of the finished runs")
    agg.add_argument("--out", type=Path, default=ROOT / "runs" / "fidelity")
    sub.add_parser("arms", help="list the arms and their overrides")
    args = parser.parse_args(argv)
    if args.command == "arms":
        for name, overrides in ARMS.items():
            print(f"{name:18} {overrides}")
        return 0
    if args.command == "run":
        unknown = [a for a in args.arms if a not in ARMS]
        if unknown:
            parser.error(f"unknown arm(s) {unknown}; choose from {', '.join(ARMS)}")
        _check_study(args.out, args.recipe, args.overrides)
        for seed in args.seeds:
            for arm in args.arms:
                print(f"== {arm} seed {seed}", flush=True)
                folder = run_arm(args.out, arm, seed, args.steps, args.recipe, args.overrides)
                print(f"   -> {folder / 'result.json'}", flush=True)
    runs = load_runs(args.out)
    if not runs:
        print(f"no finished runs under {args.out}", file=sys.stderr)
        return 1
    table = aggregate(runs)
    found = claims(table)
    text = markdown(table, found)
    (args.out / "fidelity.md").write_text(text, encoding="utf-8")
    plot(table, args.out)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
