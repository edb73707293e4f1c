"""``awarl eval report``: one table and two plots over one or more evaluation runs.

- ``report.md`` / ``report.json``: per run, each data set and the macro average: precision,
  accuracy, RA-F1, refusal rate, EM, F1, searches per question; abstain-recall and over-refusal
  where the data has unanswerable questions (MuSiQue-Full); citation integrity (fabricated and
  unsupported shares).
- ``frontier.png``: precision against accuracy, one point per run (e.g. a γ sweep), with the
  runs no other run beats on both joined up.
- ``calibration.png``: refusal rate per p_i decile, one line per run, for runs whose records
  carry ``p`` (from ``awarl capability estimate``). A calibrated agent refuses more as p_i falls.
- How sure each number is (`awarl.eval.stats`): a 95% bootstrap interval of every run's macro
  metrics, and, for each later run on the same questions as the first, the paired difference with
  its interval and whether it is beyond 2 standard errors; the passages each run searched, by
  fingerprint, so two runs over different corpora are not compared unawares.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from awarl.data.records import DataError, iter_jsonl, json_type, read_json
from awarl.errors import ConfigError

COLUMNS = (
    ("precision", "P"),
    ("accuracy", "A"),
    ("ra_f1", "RA-F1"),
    ("refusal_rate", "refusal"),
    ("em", "EM"),
    ("f1", "F1"),
    ("searches_per_question", "searches/q"),
    ("abstain_recall", "abstain-recall"),
    ("over_refusal", "over-refusal"),
    ("fabricated_share", "fabricated cites"),
    ("unsupported_share", "unsupported cites"),
    ("unretrieved_share", "cites not retrieved"),
    ("support_coverage", "support coverage"),
)
DECILES = 10


@dataclass
class RunSummary:
    name: str
    path: Path
    metrics: dict[str, Any]
    calibration: list[dict[str, Any]]


def load_run(path: str | Path) -> RunSummary:
    """A run folder's metrics and its refusal rate per p_i decile."""
    path = Path(path)
    metrics_path = path / "metrics.json"
    metrics = read_json(metrics_path, "not an evaluation run folder (run `awarl eval run … --out DIR` first)")
    if not isinstance(metrics, dict):
        raise DataError(metrics_path, "top level", f"expected a JSON object, got {json_type(metrics)}")
    for key in ("per_dataset", "macro"):
        if key not in metrics:
            raise DataError(metrics_path, "", "missing required field", key)
        if not isinstance(metrics[key], dict):
            raise DataError(metrics_path, "", f"expected an object, got {json_type(metrics[key])}", key)
    for name, value in metrics["per_dataset"].items():
        if not isinstance(value, dict):
            raise DataError(metrics_path, f"per_dataset[{name!r}]", f"expected an object, got {json_type(value)}")
    _check_numbers(metrics_path, metrics)
    for key, inner in (("settings", None), ("settings", "rollout"), ("recipe", None)):
        value = metrics.get(key)
        if inner is not None and isinstance(value, dict):
            key, value = f"{key}.{inner}", value.get(inner)
        if value is not None and not isinstance(value, dict):
            raise DataError(metrics_path, "", f"expected an object, got {json_type(value)}", key)
    traj_path = path / "trajectories.jsonl"
    rows = [row for _, row in iter_jsonl(traj_path)] if traj_path.exists() else []
    for n, row in enumerate(rows, start=1):
        p = row.get("p")
        if p is not None and (isinstance(p, bool) or not isinstance(p, (int, float))):
            raise DataError(traj_path, f"row {n}", f"expected a number or null, got {json_type(p)}", "p")
    return RunSummary(metrics.get("name") or path.name, path, metrics, refusal_by_decile(rows))


def _check_numbers(metrics_path: Path, metrics: dict[str, Any]) -> None:
    """The table's columns must be numbers (or null) in every data set and the macro average, so a
    damaged file is named here instead of failing inside number formatting."""
    sections = [(f"per_dataset[{name!r}]", m) for name, m in metrics["per_dataset"].items()]
    for where, section in [*sections, ("macro", metrics["macro"])]:
        for key in ("n", *(k for k, _ in COLUMNS)):
            value = section.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise DataError(metrics_path, where, f"expected a number or null, got {json_type(value)}", key)


def refusal_by_decile(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Refusal rate in each tenth of p_i ([0, 0.1), …, [0.9, 1.0]); rows without ``p`` are left out.

    >>> refusal_by_decile([{"p": 0.0, "abstained": True}, {"p": 0.05, "abstained": False}, {"p": 1.0, "abstained": False}])[0]
    {'decile': 0, 'low': 0.0, 'high': 0.1, 'n': 2, 'refusal_rate': 0.5}
    """
    counts = [[0, 0] for _ in range(DECILES)]
    for row in rows:
        p = row.get("p")
        if p is None:
            continue
        d = min(int(float(p) * DECILES), DECILES - 1)
        counts[d][0] += 1
        counts[d][1] += bool(row.get("abstained"))
    return [
        {"decile": d, "low": d / DECILES, "high": (d + 1) / DECILES, "n": n,
         "refusal_rate": refused / n if n else None}
        for d, (n, refused) in enumerate(counts)
    ]


def table_rows(runs: Sequence[RunSummary]) -> list[dict[str, Any]]:
    """One row per (run, data set) plus a macro-average row per run."""
    rows = []
    for run in runs:
        for dataset, m in run.metrics["per_dataset"].items():
            rows.append({"run": run.name, "dataset": dataset, "n": m.get("n"), **{k: m.get(k) for k, _ in COLUMNS}})
        macro = run.metrics["macro"]
        rows.append({"run": run.name, "dataset": "macro avg", "n": macro.get("n"), **{k: macro.get(k) for k, _ in COLUMNS}})
    return rows


def to_markdown(rows: Sequence[dict[str, Any]], runs: Sequence[RunSummary]) -> str:
    shown = [(k, label) for k, label in COLUMNS if any(r.get(k) is not None for r in rows)]
    head = ["run", "dataset", "n", *[label for _, label in shown]]
    lines = ["# Evaluation report", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [str(r["run"]), str(r["dataset"]), str(r.get("n", ""))]
        cells += ["–" if r.get(k) is None else f"{r[k]:.3f}" for k, _ in shown]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "P = correct / answered, A = correct / all, RA-F1 = 2PA / (P + A); refusal, EM and F1 over all "
              "questions; macro avg = mean over data sets. Citations: fabricated = cited ids not in the corpus, "
              "unsupported = cited passages not among the gold supporting passages, not retrieved = cited passages "
              "that the answer's own searches never returned (recalled or guessed, not read).", ""]
    lines += _settings_section(runs)
    if any(any(d["n"] for d in run.calibration) for run in runs):
        lines += ["## Refusal rate by p_i decile", "", "| run | " + " | ".join(f"{d / 10:.1f}–{(d + 1) / 10:.1f}"
                                                                          for d in range(DECILES)) + " |",
                  "|" + "---|" * (DECILES + 1)]
        for run in runs:
            cells = ["–" if d["refusal_rate"] is None else f"{d['refusal_rate']:.2f} ({d['n']})" for d in run.calibration]
            lines.append(f"| {run.name} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def _settings_section(runs: Sequence[RunSummary]) -> list[str]:
    """What each run's agent and training were: the rollout settings of the evaluation and, for an awarl
    checkpoint, the reward hyperparameters it was trained with."""
    out = ["## Runs", "", "| run | model | rollout (scope, topk, words, searches, tokens, metric) | trained with |",
           "|---|---|---|---|"]
    for run in runs:
        rollout = (run.metrics.get("settings") or {}).get("rollout") or {}
        agent = ", ".join(str(rollout.get(k, "–")) for k in ("scope", "topk", "passage_words", "max_searches",
                                                              "max_completion_tokens", "metric"))
        recipe = run.metrics.get("recipe") or {}
        keys = ("reward/kind", "reward/gamma", "reward/p_clip", "reward/beta", "reward/tau", "reward/delta",
                "reward/w_cite", "reward/cite_on")
        trained = ("SFT only (no RL)" if recipe.get("stage") == "sft"
                   else ", ".join(f"{k.split('/')[1]}={recipe[k]}" for k in keys if k in recipe) or "–")
        out.append(f"| {run.name} | {run.metrics.get('model', '–')} | {agent} | {trained} |")
    return out + [""]


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of points no other point beats on both coordinates, by increasing first coordinate.

    >>> pareto_front([(0.2, 0.9), (0.3, 0.8), (0.25, 0.7), (0.4, 0.5)])
    [0, 1, 3]
    """
    keep = [i for i, (x, y) in enumerate(points)
            if not any((x2 >= x and y2 >= y) and (x2, y2) != (x, y) for x2, y2 in points)]
    return sorted(keep, key=lambda i: points[i][0])


def plot_frontier(runs: Sequence[RunSummary], path: Path) -> Path:
    plt = pyplot()
    points = [(float(r.metrics["macro"].get("accuracy") or 0.0), float(r.metrics["macro"].get("precision") or 0.0))
              for r in runs]
    fig, ax = plt.subplots(figsize=(5.5, 4.5))
    ax.scatter([x for x, _ in points], [y for _, y in points], zorder=3)
    for run, (x, y) in zip(runs, points):
        ax.annotate(run.name, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
    front = pareto_front(points)
    if len(front) > 1:
        ax.plot([points[i][0] for i in front], [points[i][1] for i in front], "--", color="gray", zorder=2,
                label="frontier")
        ax.legend(loc="lower left", fontsize=8)
    ax.set_xlabel("accuracy (macro avg)")
    ax.set_ylabel("precision (macro avg)")
    ax.set_title("Precision–accuracy frontier")
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


@dataclass
class RefusalCurve:
    """One line of a refusal-by-p_i plot: ``(p, refusal rate, questions)`` points."""

    label: str
    points: list[tuple[float, float, int]]
    color: str | None = None
    marker: str = "o"


def decile_curves(runs: Sequence[RunSummary]) -> list[RefusalCurve]:
    """Each run's refusal rate per p_i decile, at the decile midpoints (empty deciles left out)."""
    return [RefusalCurve(run.name, [((d["low"] + d["high"]) / 2, d["refusal_rate"], d["n"])
                                    for d in run.calibration if d["n"]]) for run in runs]


def pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend: plots go to files, no display is needed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_calibration(curves: Sequence[RefusalCurve], path: Path, *, title: str = "Refusal rate by p_i decile",
                     xlabel: str = "capability p_i (decile midpoint)",
                     better_bet: tuple[Sequence[float], Sequence[bool], str] | None = None,
                     counts: bool = False) -> Path:
    """Refusal rate against p_i, one line per curve. ``better_bet`` = (p values, refusing pays more?,
    label) draws where the reward makes refusing the better bet; ``counts`` writes the first curve's
    number of questions under each of its points. A calibrated agent refuses more as p_i falls."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    plotted = [c for c in curves if c.points]
    for c in plotted:
        ax.plot([x for x, _, _ in c.points], [y for _, y, _ in c.points], marker=c.marker, color=c.color,
                label=c.label)
    if better_bet is not None and len(better_bet[0]):
        ax.step(list(better_bet[0]), [float(v) for v in better_bet[1]], where="mid", color="tab:green", ls="--",
                label=better_bet[2])
    if counts and plotted:
        for x, _, n in plotted[0].points:
            ax.annotate(f"n={n}", (x, -0.06), ha="center", fontsize=7, color="dimgray")
    if plotted:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no run has p_i on its records\n(run `awarl capability estimate` first)",
                ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("refusal rate")
    ax.set_title(title, fontsize=10)
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(-0.1 if counts else -0.02, 1.05)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def uncertainty(runs: Sequence[RunSummary], samples: int) -> dict[str, Any]:
    """Bootstrap intervals per run and paired differences of every later run against the first
    (where they hold the same questions); runs without predictions are left out."""
    from awarl.eval.stats import bootstrap_ci, paired_comparison, run_questions

    questions = {}
    for run in runs:
        if (run.path / "predictions.jsonl").exists() and (run.path / "records.jsonl").exists():
            questions[run.name] = run_questions(run.path)
    ci = {name: bootstrap_ci(qs, samples=samples) for name, qs in questions.items()} if samples > 0 else {}
    paired: dict[str, Any] = {}
    unpaired: dict[str, str] = {}
    first = runs[0].name
    for run in runs[1:]:  # which runs can be paired is checked with or without resamples
        a, b = questions.get(first), questions.get(run.name)
        if a is None or b is None:
            unpaired[run.name] = f"no predictions.jsonl and records.jsonl in {(runs[0] if a is None else run).path}"
        elif not a or not b or {q.id for q in a} != {q.id for q in b}:
            shared = len({q.id for q in a} & {q.id for q in b})
            unpaired[run.name] = f"its questions differ from {first}'s ({len(b)} and {len(a)}, {shared} shared)"
        elif samples > 0:
            paired[run.name] = paired_comparison(a, b, samples=samples)
    return {"samples": max(samples, 0), "baseline": first, "ci": ci, "paired": paired, "unpaired": unpaired}


def comparability_warnings(runs: Sequence[RunSummary], unc: dict[str, Any]) -> list[str]:
    """What keeps the runs' numbers from being compared as they stand: different passages searched, a run
    whose passages are not recorded beside runs whose are, a run left out of the paired comparison."""
    recorded = {run.name: run.metrics.get("fingerprint") or {} for run in runs}
    prints = {name: fp.get("sha256") for name, fp in recorded.items()}
    version = {name: recorded[name].get("version", 1) for name, sha in prints.items() if sha}  # 1: recorded none
    out = []
    if any(len({prints[n] for n in version if version[n] == v}) > 1 for v in set(version.values())):
        out.append("the runs searched different passages; their numbers are not comparable as they stand")
    newest = max(version.values(), default=None)
    out += [f"{name}'s fingerprint was recorded by an older awarl (another hash): whether it searched the same "
            "passages as the others is unknown" for name, v in version.items() if v != newest]
    if any(prints.values()):
        out += [f"{name} records no fingerprint (a remote retriever or an older run): whether it searched the same "
                "passages as the others is unknown" for name, fp in prints.items() if not fp]
    out += [f"{name} has no paired difference against {unc['baseline']}: {why}"
            for name, why in (unc.get("unpaired") or {}).items()]
    return out


def _uncertainty_section(unc: dict[str, Any], runs: Sequence[RunSummary], warnings: Sequence[str]) -> list[str]:
    out: list[str] = []
    if unc.get("ci"):
        out += [f"## 95% intervals (bootstrap over questions, {unc['samples']} resamples, within each data set)", "",
                "| run | " + " | ".join(label for _, label in _CI_COLUMNS) + " |", "|" + "---|" * (len(_CI_COLUMNS) + 1)]
        for name, ci in unc["ci"].items():
            cells = ["–" if ci[k]["value"] is None else f"{ci[k]['value']:.3f} [{ci[k]['low']:.3f}, {ci[k]['high']:.3f}]"
                     + ("†" if ci[k].get("exact") else "") for k, _ in _CI_COLUMNS]
            out.append(f"| {name} | " + " | ".join(cells) + " |")
        if any(c.get("exact") for ci in unc["ci"].values() for c in ci.values()):
            out += ["", "† the rate is 0 or 1 on every data set, where every resample repeats it: the interval is the "
                        "exact (Clopper–Pearson) one of each data set's count, averaged over data sets"]
        out.append("")
    if unc.get("paired"):
        out += [f"## Paired differences against {unc['baseline']} (same questions; * = beyond 2 standard errors)", "",
                "| run | " + " | ".join(label for _, label in _CI_COLUMNS) + " |", "|" + "---|" * (len(_CI_COLUMNS) + 1)]
        for name, diffs in unc["paired"].items():
            cells = ["–" if k not in diffs else f"{diffs[k]['diff']:+.3f} [{diffs[k]['low']:+.3f}, {diffs[k]['high']:+.3f}]"
                     + ("*" if diffs[k]["beyond_2se"] else "") for k, _ in _CI_COLUMNS]
            out.append(f"| {name} | " + " | ".join(cells) + " |")
        out.append("")
    prints = {run.name: (run.metrics.get("fingerprint") or {}).get("sha256") for run in runs}
    if any(prints.values()):
        out += ["## Passages searched (fingerprint)", ""]
        out += [f"- {name}: {fp[:16] if fp else 'not recorded (a remote retriever or an older run)'}" for name, fp in prints.items()]
        out.append("")
    if warnings:
        out += ["## Warnings", "", *[f"- **warning: {w}**" for w in warnings], ""]
    return out


_CI_COLUMNS = (("precision", "P"), ("accuracy", "A"), ("ra_f1", "RA-F1"), ("refusal_rate", "refusal"),
               ("abstain_recall", "abstain-recall"), ("over_refusal", "over-refusal"))


def build_report(run_dirs: Sequence[str | Path], out: str | Path, *, bootstrap: int = 1000) -> dict[str, Path]:
    """Write report.md, report.json, frontier.png and calibration.png into ``out``; ``bootstrap``
    resamples per interval (0: no intervals)."""
    if not run_dirs:
        raise ConfigError("give at least one run folder")
    runs = [load_run(d) for d in run_dirs]
    names = [r.name for r in runs]
    if len(set(names)) < len(names):  # two folders with one name: tell them apart by path
        for r in runs:
            r.name = str(r.path)
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise DataError(out, "", "is a file; the report goes into a folder")
    out.mkdir(parents=True, exist_ok=True)
    rows = table_rows(runs)
    unc = uncertainty(runs, bootstrap)
    paths = {"markdown": out / "report.md", "json": out / "report.json"}
    warnings = comparability_warnings(runs, unc)
    paths["markdown"].write_text("\n".join([to_markdown(rows, runs), *_uncertainty_section(unc, runs, warnings)]),
                                 encoding="utf-8")
    paths["json"].write_text(json.dumps({
        "runs": [{"name": r.name, "path": str(r.path), "model": r.metrics.get("model"),
                  "recipe": r.metrics.get("recipe"), "rollout": (r.metrics.get("settings") or {}).get("rollout"),
                  "overall": r.metrics.get("overall"), "macro": r.metrics["macro"],
                  "per_dataset": r.metrics["per_dataset"], "refusal_by_p_decile": r.calibration,
                  "fingerprint": r.metrics.get("fingerprint")} for r in runs],
        "table": rows,
        "uncertainty": unc,
        "warnings": warnings,
    }, indent=2) + "\n", encoding="utf-8")
    paths["frontier"] = plot_frontier(runs, out / "frontier.png")
    paths["calibration"] = plot_calibration(decile_curves(runs), out / "calibration.png")
    return paths
