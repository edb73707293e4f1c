"""The fidelity study's report: one table per tier, the claims with their numbers, and the plots
(per-batch trajectories of refusal, target and P_t; the precision–accuracy frontier across γ)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from awarl.eval.study import CLAIM_TIERS, HELD_OUT, TIERS, mean_sd
from awarl.eval.study_claims import GAMMAS, Claim

BATCH_COLUMNS = ("refusal", "target", "E", "E_ema", "P", "capped", "all_abstain", "three_outcome")


def _fmt(ms: tuple[float | None, float | None]) -> str:
    return "–" if ms[0] is None else f"{ms[0]:.3f} ± {ms[1]:.3f}"


def tier_table(tier: str, arms: dict[str, Any]) -> list[str]:
    """Mean ± sd over seeds per arm, in two tables: held-out greedy and sampled; the late batch terms
    (training target beside batch refusal) and compute (training and probe rollouts)."""
    held = [("greedy", k) for k in HELD_OUT] + [("sampled", k) for k in ("precision", "accuracy", "refusal_rate")]
    terms = [("late", k) for k in BATCH_COLUMNS] + [("", "min_P"), ("", "plateau_sd"), ("", "heldout_target")]
    names = arm_order(tier, arms)
    lines = [f"### {tier}: {TIERS[tier].title}" if tier in TIERS else f"### {tier}", ""]
    for cols, extra in ((held, False), (terms, True)):
        head = [f"{mode} {key}".strip() for mode, key in cols] + (
            ["training rollouts per run", "probe rollouts per run"] if extra else [])
        lines += ["| arm | seeds | " + " | ".join(head) + " |", "|---" * (len(head) + 2) + "|"]
        for arm in names:
            summaries = list(arms[arm]["per_seed"].values())
            cells = [_fmt(mean_sd([(s[mode] if mode else s).get(key) for s in summaries])) for mode, key in cols]
            if extra:
                cells += [f"{mean_sd([s[k] for s in summaries])[0]:.0f}" for k in ("training_rollouts", "probe_rollouts")]
            lines.append(f"| {arm} | {','.join(map(str, arms[arm]['seeds']))} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def arm_order(tier: str, arms: dict[str, Any]) -> list[str]:
    """A tier's arms in the order its design lists them, then any others by name."""
    order = [a.name for a in TIERS[tier].arms if a.name in arms] if tier in TIERS else []
    return order + sorted(set(arms) - set(order))


@dataclass
class _KindMeans:
    """One kind's numbers over a tier's seeds, gathered before they are averaged."""

    answerable: bool
    n: list[float] = field(default_factory=list)
    u: list[float | None] = field(default_factory=list)
    p: list[float | None] = field(default_factory=list)
    runs: dict[str, list[dict[str, float]]] = field(default_factory=dict)

    def row(self, kind: str) -> dict[str, Any]:
        return {"kind": kind, "answerable": self.answerable, "n": mean_sd(self.n)[0], "u": mean_sd(self.u)[0],
                "p": mean_sd(self.p)[0],
                "runs": {name: {key: mean_sd([r[key] for r in rs])[0] for key in ("accuracy", "refusal")}
                         for name, rs in self.runs.items()}}


def kind_table(tier: str, arms: dict[str, Any]) -> list[str]:
    """Held-out greedy accuracy / refusal per kind of question (world v2), mean over each arm's seeds; u and the
    base's p_i are means over the seeds' worlds and bases. Empty where no run has the rows (world v1)."""
    from awarl.eval.world_audit import kind_markdown, kind_order

    names = [a for a in arm_order(tier, arms) if any(s.get("by_kind") for s in arms[a]["per_seed"].values())]
    if not names:
        return []
    kinds: dict[str, _KindMeans] = {}
    for arm in names:
        for summary in arms[arm]["per_seed"].values():
            for k in summary.get("by_kind") or []:
                entry = kinds.setdefault(k["kind"], _KindMeans(k["answerable"]))
                entry.n.append(k["n"])
                entry.u.append(k["u"])
                entry.p.append(k["p"])
                for name, r in k["runs"].items():
                    entry.runs.setdefault(name, []).append(r)
    rows = sorted((e.row(kind) for kind, e in kinds.items()), key=kind_order)
    return [f"Held-out greedy accuracy / refusal by kind of question ({tier}; `m/j@f`: m namesakes, j lead to the "
            "gold country, silent noise f; u the best reader's expected accuracy; p_i the base's; means over seeds):",
            "", *kind_markdown(rows, names, "questions per seed"), ""]


def claims_markdown(found: list[Claim]) -> list[str]:
    lines = ["| claim | tier | holds | seeds | tests |", "|---|---|---|---|---|"]
    for c in found:
        tests = "; ".join(f"{t.name}: {'yes' if t.holds else 'no'} ({t.rule})" for t in c.tests) or \
            f"missing arms: {', '.join(c.missing)}"
        lines.append(f"| {c.number}. {c.text} | {c.tier} | {c.verdict} | {','.join(map(str, c.seeds)) or '–'} | {tests} |")
    lines.append("")
    for c in found:
        if c.holds is None:
            continue
        lines += [f"**Claim {c.number}** — {c.verdict}. `{c.command}`", "",
                  f"- numbers: `{json.dumps(_rounded(c.numbers))}`"]
        lines += [f"- margins of *{t.name}*: `{json.dumps(t.row()['margins'])}`" for t in c.tests if t.margins]
        lines += [f"- diagnostic: {d}" for d in c.diagnostics]
        lines.append("")
    return lines


def _rounded(value: Any) -> Any:
    """Floats to 4 places, inside any mapping or list (seed keys become strings, as JSON has them)."""
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, dict):
        return {str(k): _rounded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_rounded(v) for v in value]
    return value


def markdown(table: dict[str, Any], found: list[Claim], oracle: list[Any] | None = None,
             pending: list[tuple[str, str, int]] | None = None) -> str:
    """The study's report: per tier a table, the oracle bounds, the claims; what has not finished."""
    lines = ["# Fidelity study v2", ""]
    if pending:
        lines += [f"Not finished: {len(pending)} runs ({', '.join(f'{t}/{a}/seed{s}' for t, a, s in pending[:12])}"
                  + (" …" if len(pending) > 12 else "") + "). The numbers below are of what has finished.", ""]
    for tier in [t for t in TIERS if t in table] + sorted(set(table) - set(TIERS)):
        lines += tier_table(tier, table[tier]) + kind_table(tier, table[tier])
        if tier in CLAIM_TIERS and (found_frontier := frontier(table[tier])) is not None:
            lines += frontier_markdown(tier, found_frontier)
    if oracle:
        lines += ["Oracle that knows u_q (upper bounds; `awarl.eval.world_audit.oracle_frontier`):", "",
                  "| γ | refusal | precision | accuracy |", "|---|---|---|---|"]
        lines += [f"| {p.gamma} | {p.refusal:.3f} | {p.precision:.3f} | {p.accuracy:.3f} |" for p in oracle] + [""]
    lines += ["## Claims", "", *claims_markdown(found)]
    return "\n".join(lines) + "\n"


def plot(table: dict[str, Any], out: Path, oracle: list[Any] | None = None) -> list[Path]:
    """``study_<tier>_batches.png`` (per generation batch, mean over seeds: refusal, target dashed, P_t
    below) and, per claim tier, ``study_frontier.png`` (T1; ``study_frontier_<tier>.png`` for the others:
    held-out greedy precision against accuracy across γ)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    for tier, arms in table.items():
        fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True, height_ratios=(2, 1))
        for arm, entry in arms.items():
            curves = {k: _mean_curve([r.batches for r in entry["runs"].values()], k) for k in ("refusal", "target", "P")}
            if curves["refusal"]:
                line, = top.plot(range(1, len(curves["refusal"]) + 1), curves["refusal"], lw=1.2,
                                 label=f"{arm} (seeds {','.join(map(str, entry['seeds']))})")
                if curves["target"]:
                    top.plot(range(1, len(curves["target"]) + 1), curves["target"], ls="--", lw=1, color=line.get_color())
                if curves["P"]:
                    bottom.plot(range(1, len(curves["P"]) + 1), curves["P"], lw=1, color=line.get_color())
        top.set_ylabel("batch refusal (— ), target (- -)")
        top.set_ylim(0, 1)
        top.legend(fontsize=7)
        bottom.set_ylabel("P_t")
        bottom.set_xlabel("generation batch (64 rollouts each; mean over seeds)")
        fig.tight_layout()
        paths.append(Path(out) / f"study_{tier}_batches.png")
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
    for tier in CLAIM_TIERS:
        path = _frontier(table.get(tier, {}), Path(out) / ("study_frontier.png" if tier == "T1" else f"study_frontier_{tier}.png"),
                         oracle, tier)
        if path is not None:
            paths.append(path)
    return paths


@dataclass
class Frontier:
    """One claim tier's held-out greedy (accuracy, precision, refusal) across γ: per seed, and the mean over
    the seeds every γ arm shown has finished (a mean over different seed sets would mix seeds into γ)."""

    per_seed: dict[int, list[tuple[float, tuple[float, float, float]]]]
    shared: list[int]
    mean: list[tuple[float, tuple[float, float, float]]]
    baselines: dict[str, tuple[list[int], tuple[float, float, float]]]

    def ordered_seeds(self) -> list[int]:
        """The seeds where held-out refusal rises strictly with γ across all three γ arms."""
        return [s for s, pts in self.per_seed.items()
                if len(pts) == len(GAMMAS) and all(a[1][2] < b[1][2] for a, b in zip(pts, pts[1:]))]


def _xyr(summary: dict[str, Any]) -> tuple[float, float, float] | None:
    greedy = summary.get("greedy") or {}
    values = [greedy.get(k) for k in ("accuracy", "precision", "refusal_rate")]
    return None if any(not isinstance(v, (int, float)) for v in values) else tuple(float(v) for v in values)


def frontier(arms: dict[str, Any]) -> Frontier | None:
    """`Frontier` of one tier's arms; None before any of its γ arms finished."""
    shown = [(a, g) for a, g in GAMMAS if a in arms]
    per_arm = {a: {s: xyr for s, summary in arms[a]["per_seed"].items() if (xyr := _xyr(summary))} for a, _ in shown}
    shown = [(a, g) for a, g in shown if per_arm[a]]
    if not shown:
        return None
    seeds = sorted({s for a, _ in shown for s in per_arm[a]})
    per_seed = {s: [(g, per_arm[a][s]) for a, g in shown if s in per_arm[a]] for s in seeds}
    shared = [s for s in seeds if all(s in per_arm[a] for a, _ in shown)]

    def mean(points: list[tuple[float, float, float]]) -> tuple[float, float, float]:
        return tuple(sum(p[i] for p in points) / len(points) for i in range(3))

    baselines = {}
    for arm in ("static_0.5", "data_manip", "none"):
        own = {s: xyr for s, summary in (arms.get(arm) or {}).get("per_seed", {}).items() if (xyr := _xyr(summary))}
        use = [s for s in shared if s in own] or sorted(own)
        if use:
            baselines[arm] = (use, mean([own[s] for s in use]))
    return Frontier(per_seed, shared, [(g, mean([per_arm[a][s] for s in shared])) for a, g in shown] if shared else [],
                    baselines)


def frontier_markdown(tier: str, found: Frontier) -> list[str]:
    """Held-out greedy refusal, precision and accuracy across γ at each seed, and where refusal rises with γ."""
    gammas = [g for _, g in GAMMAS]
    lines = [f"### {tier}: the frontier across γ, per seed (held-out, greedy: refusal / precision / accuracy)", "",
             "| seed | " + " | ".join(f"γ {g}" for g in gammas) + " |", "|---" * (len(gammas) + 1) + "|"]
    for seed, points in found.per_seed.items():
        by_g = dict(points)
        lines.append(f"| {seed} | " + " | ".join(
            f"{by_g[g][2]:.3f} / {by_g[g][1]:.3f} / {by_g[g][0]:.3f}" if g in by_g else "–" for g in gammas) + " |")
    complete = [s for s, pts in found.per_seed.items() if len(pts) == len(GAMMAS)]
    ordered = found.ordered_seeds()
    lines += ["", f"Refusal rises strictly with γ at {len(ordered)} of the {len(complete)} seeds where all three γ "
              f"finished ({', '.join(map(str, ordered)) or 'none'}).", ""]
    return lines


def _frontier(arms: dict[str, Any], path: Path, oracle: list[Any] | None, tier: str) -> Path | None:
    """One claim tier's held-out greedy precision against accuracy across γ: a thin line per seed, the mean over
    the seeds all γ arms share, the baselines over those seeds and the oracle (the oracle knows u_q, which T1r's
    tie order leaves as T1's); None before any of its γ arms finished."""
    import matplotlib.pyplot as plt

    found = frontier(arms)
    if found is None:
        return None
    fig, ax = plt.subplots(figsize=(6, 5))
    for seed, points in found.per_seed.items():
        ax.plot([xyr[0] for _, xyr in points], [xyr[1] for _, xyr in points], ".-", lw=0.8, alpha=0.45,
                label=f"AWA across γ, seed {seed}")
    if found.mean:
        ax.plot([xyr[0] for _, xyr in found.mean], [xyr[1] for _, xyr in found.mean], "o-", color="k", lw=1.6,
                label=f"AWA across γ ({tier}), mean over seeds {','.join(map(str, found.shared))}")
        for i, (g, (x, y, _)) in enumerate(found.mean):  # alternate sides: the arms' points often lie close
            ax.annotate(f"γ {g}", (x, y), xytext=(6, -10 if i % 2 else 4), textcoords="offset points", fontsize=8)
    if oracle:
        ax.plot([p.accuracy for p in oracle], [p.precision for p in oracle], "k^--", lw=1, label="oracle (knows u_q)")
        for p in oracle:
            ax.annotate(f"γ {p.gamma}", (p.accuracy, p.precision), xytext=(6, 0), textcoords="offset points", fontsize=8)
    for arm, (seeds, (x, y, _)) in found.baselines.items():
        ax.plot(x, y, "s", label=f"{arm} (seeds {','.join(map(str, seeds))})")
    ax.set_xlabel("accuracy (held-out, greedy)")
    ax.set_ylabel("precision")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _mean_curve(runs: list[list[dict[str, float]]], key: str) -> list[float]:
    """Per batch index, the mean over the runs that logged ``key`` there."""
    n = max((len(r) for r in runs), default=0)
    out = []
    for i in range(n):
        values = [r[i][key] for r in runs if i < len(r) and key in r[i]]
        if not values:
            break
        out.append(sum(values) / len(values))
    return out
