"""The demo's report: ``metrics.json``, ``report/report.md`` and the plots, rebuilt from the run
folders (so a rerun rebuilds them), and the headline the terminal prints."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

COLUMNS = {
    "precision": "correct / answered: how often an answer the agent gives is right (abstentions excluded)",
    "accuracy": "correct / all questions",
    "RA-F1": "harmonic mean of precision and accuracy, 2PA / (P + A)",
    "refusal": "abstained / all questions",
    "abstain-recall": "share of UNANSWERABLE questions the agent abstained on (higher is better)",
    "over-refusal": "share of ANSWERABLE questions the agent abstained on (lower is better)",
    "acc. answerable": "correct / answerable questions",
    "cite coverage": "share of the gold supporting passages (both hops) an answer cites, over answered answerable questions",
    "right, all cited": "share of right answers that cite every supporting passage (what lets the chatbot's checker "
                        "prove an answer from its citations alone)",
    "cites not retrieved": "share of cited passages that the answer's own searches never returned (recalled from "
                           "training or guessed, not read from the results)",
    "expected refusal": "share of questions where refusing is the better bet under the AWA reward: "
                        "R_base(p) = 1 - max(p, p_clip)^gamma > the value of answering (p = the SFT checkpoint's p_i; "
                        "the citation term as training paid it late in the run included)",
}


def outcome_rows(run_dir: Path) -> list[dict[str, Any]]:
    """Per-question rows of an evaluation run: outcome, answerable, p."""
    from awarl.data.records import iter_jsonl

    return [row for _, row in iter_jsonl(run_dir / "trajectories.jsonl")]


def run_summary(metrics: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The report's numbers for one evaluated checkpoint."""
    o = metrics["overall"]
    answerable = [r for r in rows if r.get("answerable", True)]
    return {
        "n": o["n"], "precision": o["precision"], "accuracy": o["accuracy"], "ra_f1": o["ra_f1"],
        "refusal_rate": o["refusal_rate"], "abstain_recall": o.get("abstain_recall"),
        "over_refusal": o.get("over_refusal"),
        "accuracy_answerable": sum(r["outcome"] == "correct" for r in answerable) / len(answerable) if answerable else 0.0,
        "unparsable": sum(r.get("answer") is None for r in rows) / max(len(rows), 1),
        "searches_per_question": o.get("searches_per_question"),
        "support_coverage": o.get("support_coverage"), "all_support_share": o.get("all_support_share"),
        "unretrieved_share": o.get("unretrieved_share"),
    }


def refusal_by_p(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Refusal share per p_i VALUE (K samples give K + 1 values; deciles would merge them)."""
    bins: dict[float, list[bool]] = {}
    for r in rows:
        if isinstance(r.get("p"), (int, float)):
            bins.setdefault(round(float(r["p"]), 4), []).append(bool(r.get("abstained")))
    return [{"p": p, "n": len(v), "refusal": sum(v) / len(v)} for p, v in sorted(bins.items())]


def expected_refusal(rows: list[dict[str, Any]], reward: Any, value_correct: float | None = None,
                     value_wrong: float | None = None) -> float | None:
    """Share of the rows where refusing is the better bet under an AWA ``reward`` (None for other kinds): the
    training target's formula (`awarl.rewards.refusal.target_refusal_rate`); ``value_correct`` / ``value_wrong``
    are what training paid a correct / wrong answer, citation term included (default: the outcome rewards)."""
    from awarl.rewards.refusal import target_refusal_rate

    ps = [float(r["p"]) for r in rows if isinstance(r.get("p"), (int, float))]
    if not ps or reward.kind != "awa":
        return None
    return target_refusal_rate(ps, reward, value_correct, value_wrong)


def refusal_by_target(rows: list[dict[str, Any]], reward: Any, value_correct: float | None = None,
                      value_wrong: float | None = None) -> dict[str, dict[str, Any]] | None:
    """Refusal of one evaluated run by what an AWA ``reward``'s target asks of each question (the formula of
    `expected_refusal`, p = the SFT checkpoint's p_i): unanswerable questions, answerable ones where refusing
    is the better bet, and answerable ones where answering is. Where a run's refusal misses its target, this
    says on which questions (None for other reward kinds, or rows without p)."""
    from awarl.rewards.refusal import refusal_preferred

    rows = [r for r in rows if isinstance(r.get("p"), (int, float))]
    if not rows or reward.kind != "awa":
        return None
    prefer = refusal_preferred([float(r["p"]) for r in rows], reward.p_clip, reward.gamma,
                               reward.r_correct if value_correct is None else value_correct,
                               reward.r_wrong if value_wrong is None else value_wrong,
                               reward.attempt_bonus_lambda if reward.attempt_bonus else 0.0)
    groups: dict[str, list[bool]] = {k: [] for k in TARGET_GROUPS}
    for r, refuse in zip(rows, prefer.tolist()):
        key = TARGET_GROUPS[0] if not r.get("answerable", True) else TARGET_GROUPS[1 if refuse else 2]
        groups[key].append(r.get("outcome") == "abstain")
    return {k: {"n": len(v), "refusal": sum(v) / len(v) if v else None} for k, v in groups.items()}


TARGET_GROUPS = ("unanswerable", "answerable, refusing the better bet", "answerable, answering the better bet")


def capability_section(path: Path, world_json: Path | None = None) -> dict[str, Any]:
    """`awarl.capability.summarize` of a p_i file, with what the report shows beside it: K, the mean p
    over answerable questions, the histogram of p by value and, for a world that records ceilings
    (``world_json`` of a world v2), the base-spread checks of `awarl.eval.world_audit.base_spread`."""
    from awarl.capability import summarize
    from awarl.data.records import iter_jsonl
    from awarl.eval.world_audit import base_spread

    rows = [row for _, row in iter_jsonl(path)]
    hist: dict[str, int] = {}
    for row in rows:
        hist[f"{row['p']:.3f}"] = hist.get(f"{row['p']:.3f}", 0) + 1
    answerable = [row["p"] for row in rows if row.get("answerable", True)]
    return {
        **asdict(summarize(path)),
        "k": max(((row.get("capability") or {}).get("k", 0) for row in rows), default=0),
        "temperature": next(((row.get("capability") or {}).get("temperature", 1.0) for row in rows), 1.0),
        "mean_p_answerable": sum(answerable) / len(answerable) if answerable else 0.0,
        "histogram": dict(sorted(hist.items(), key=lambda kv: float(kv[0]))),
        "spread": ([asdict(c) for c in base_spread(path, world_json).checks]
                   if world_json is not None and world_json.exists() else None),
    }


def quality_checks(demo: Any, before: dict[str, Any], arms: dict[str, dict[str, Any]],
                   mean_u: float | None = None) -> dict[str, Any]:
    """The recipe's floors against this run (`awarl.demo.recipe.FLOORS`: the refusal gap for every arm with a
    training target, the ceiling gap for every `none` arm where the world records ceilings, ``mean_u`` over the
    held-out answerable questions); a miss is a loud warning."""
    floors = demo.recipe.floors
    checks = {}
    if "sft_accuracy_answerable" in floors:
        value = before["accuracy_answerable"]
        checks["sft_accuracy_answerable"] = {"value": value, "floor": floors["sft_accuracy_answerable"],
                                             "passed": value >= floors["sft_accuracy_answerable"]}
    for name, arm in arms.items():
        expected = arm["expected_refusal"]
        if "refusal_gap" in floors and expected is not None:
            refusal = arm["after_rl"]["refusal_rate"]
            gap = abs(refusal - expected)
            checks[f"refusal_gap ({name})"] = {"value": gap, "floor": floors["refusal_gap"],
                                               "passed": gap <= floors["refusal_gap"], "refusal_after": refusal,
                                               "expected": expected}
        if "ceiling_gap" in floors and mean_u is not None and arm["reward"]["kind"] == "none":
            value = arm["after_rl"]["accuracy_answerable"]
            checks[f"ceiling_gap ({name})"] = {"value": abs(value - mean_u), "floor": floors["ceiling_gap"],
                                               "passed": abs(value - mean_u) <= floors["ceiling_gap"],
                                               "accuracy_answerable": value, "mean_u": mean_u}
    for name, check in checks.items():
        if not check["passed"]:
            where = {"refusal_gap": ", \"Refusal where the AWA target abstains and where it answers\"",
                     "ceiling_gap": ", \"By kind of question\""}.get(name.split(" ")[0], "")
            demo.warn(f"quality floor missed: {name} = {check['value']:.3f} (floor {check['floor']}); see report.md{where}")
    return checks


REWARD_KEYS = ("kind", "gamma", "p_clip", "beta", "tau", "delta", "max_penalty", "cap_abstain", "r_correct", "r_wrong")


def arm_section(demo: Any, name: str, result: dict[str, Any], before_rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One arm's part of metrics.json: its reward, held-out numbers, training target and GRPO log."""
    from awarl.eval.study import late
    from awarl.train.callbacks import read_metrics_log

    reward = demo.train_config(arm=name).reward
    rows = outcome_rows(demo.paths.eval / name)
    steps = read_metrics_log(demo.paths.arm(name) / "metrics_log.jsonl")
    values = (late(steps, "awa/answer_value_correct"), late(steps, "awa/answer_value_wrong"))
    return {"reward": {k: getattr(reward, k) for k in REWARD_KEYS if hasattr(reward, k)},
            "after_rl": run_summary(result, rows),
            # the training target's formula, with what training paid an answer late in the run (citation term included)
            "expected_refusal": expected_refusal(before_rows, reward, *values),
            "refusal_by_target": refusal_by_target(rows, reward, *values),
            "refusal_by_p": refusal_by_p(rows), "grpo_steps": len(steps), "grpo_last": last_window(steps),
            "steps": steps}


def build_report(demo: Any, world: Any, results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """metrics.json, report.md and the plots of a `awarl.demo.run.Demo`, from its run folders (so a
    rerun rebuilds them). ``results``: evaluation metrics keyed sft / arm name."""
    from awarl.demo.plots import write_plots

    p = demo.paths
    p.report.mkdir(parents=True, exist_ok=True)
    before_rows = outcome_rows(p.eval / "sft")
    before = run_summary(results["sft"], before_rows)
    arms = {name: arm_section(demo, name, results[name], before_rows) for name in demo.arms}
    steps = {name: arm.pop("steps") for name, arm in arms.items()}
    kinds = kind_section(p, world, before_rows, demo.arms)
    stats = world.stats()
    metrics = {
        "mode": "quick" if demo.quick else "full", "seed": demo.seed, "workers": demo.workers, "world": stats,
        "warm_start_abstain_share": demo.recipe.abstain_share, "rollout": demo.rollout.to_dict(),
        "warm_start_clarified_share": demo.recipe.clarified_share, "warm_start_misread_share": demo.recipe.misread_share,
        "capability": {split: capability_section(p.p_file(split), p.world / "world.json" if world.config.version >= 2
                                                 else None) for split in ("rl", "eval")},
        "before_rl": before, "before_rl_refusal_by_p": refusal_by_p(before_rows), "arms": arms,
        "by_kind": kinds,
        "checks": quality_checks(demo, before, arms, stats["eval"].get("mean_u")), "timings_s": demo.timings,
        "warnings": demo.warnings,
    }
    plots = write_plots(p.report, steps, metrics)
    metrics["plots"] = {k: str(v.relative_to(p.root)) for k, v in plots.items() if v is not None}
    check_finite(metrics)
    (p.root / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n", encoding="utf-8")
    (p.report / "report.md").write_text(report_markdown(metrics), encoding="utf-8")
    metrics["headline"] = headline(metrics)
    return metrics


def kind_section(paths: Any, world: Any, before_rows: list[dict[str, Any]], arms: Any) -> list[dict[str, Any]] | None:
    """Held-out accuracy and refusal per kind of question, before RL and per arm (world v2 only:
    `awarl.eval.world_audit.by_kind`)."""
    from awarl.eval.world_audit import by_kind

    if world.config.version < 2:
        return None
    return by_kind(paths.world / "world.json",
                   {"before RL": before_rows, **{name: outcome_rows(paths.eval / name) for name in arms}})


def last_window(steps: list[dict[str, Any]], n: int = 10) -> dict[str, float]:
    """Means of the controller's terms over the last ``n`` logged GRPO steps."""
    keys = ("awa/refusal_rate", "awa/expected_refusal_rate", "awa/penalty", "awa/accuracy", "awa/precision", "reward")
    out = {}
    for key in keys:
        values = [s[key] for s in steps[-n:] if isinstance(s.get(key), (int, float))]
        if values:
            out[key] = sum(values) / len(values)
    return out


def check_finite(value: Any, where: str = "metrics") -> None:
    """Refuse a report holding NaN or infinity, naming where it is."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{where} is {value}: a stage produced a non-finite number")
    if isinstance(value, dict):
        for k, v in value.items():
            check_finite(v, f"{where}.{k}")
    if isinstance(value, list):
        for i, v in enumerate(value):
            check_finite(v, f"{where}[{i}]")


HEADLINE = (("precision", "precision"), ("accuracy", "accuracy"), ("ra_f1", "RA-F1"), ("refusal_rate", "refusal rate"),
            ("abstain_recall", "abstain-recall (unanswerable)"), ("over_refusal", "over-refusal (answerable)"))


def headline(m: dict[str, Any]) -> list[str]:
    """What the terminal prints at the end: the held-out table, before RL and after RL per arm."""
    runs = [("before RL", m["before_rl"])] + [(f"{name}", arm["after_rl"]) for name, arm in m["arms"].items()]
    lines = [f"  held-out ({m['before_rl']['n']} questions)    " + "".join(f"{label:>11}" for label, _ in runs)]
    for key, label in HEADLINE:
        if all(r.get(key) is not None for _, r in runs):
            lines.append(f"  {label:<30}" + "".join(f"{r[key]:>11.2f}" for _, r in runs))
    for name, arm in m["arms"].items():
        if arm["expected_refusal"] is not None:
            lines.append(f"  training target of {name} (expected refusal from p_i): {arm['expected_refusal']:.2f}")
    return lines


def _fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def _runs(m: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [("before RL (SFT checkpoint)", m["before_rl"])] + [
        (f"after RL: {name} (reward `{arm['reward']['kind']}`)", arm["after_rl"]) for name, arm in m["arms"].items()]


def _results_table(m: dict[str, Any]) -> list[str]:
    rows = [("precision", "precision"), ("accuracy", "accuracy"), ("RA-F1", "ra_f1"), ("refusal", "refusal_rate"),
            ("abstain-recall", "abstain_recall"), ("over-refusal", "over_refusal"),
            ("acc. answerable", "accuracy_answerable"), ("cite coverage", "support_coverage"),
            ("right, all cited", "all_support_share"), ("cites not retrieved", "unretrieved_share")]
    table = ["| run | " + " | ".join(label for label, _ in rows) + " | expected refusal |",
             "|---" * (len(rows) + 2) + "|"]
    targets = [None] + [arm["expected_refusal"] for arm in m["arms"].values()]
    for (label, r), target in zip(_runs(m), targets):
        table.append(f"| {label} | " + " | ".join(_fmt(r.get(key)) for _, key in rows) + f" | {_fmt(target)} |")
    return table


def _what_the_reward_buys(m: dict[str, Any]) -> list[str]:
    """The first arm against each other arm, from the same SFT checkpoint and p_i: the differences."""
    names = list(m["arms"])
    if len(names) < 2:
        return []
    first = m["arms"][names[0]]["after_rl"]
    lines = []
    for other in names[1:]:
        r = m["arms"][other]["after_rl"]
        diffs = ", ".join(f"{label} {first[key] - r[key]:+.3f}" for key, label in HEADLINE
                          if first.get(key) is not None and r.get(key) is not None)
        lines.append(f"- **{names[0]} − {other}**: {diffs}")
    return ["What the reward buys: the arms differ only in their reward (the same SFT checkpoint, p_i, steps and "
            "seed). Held-out differences:", "", *lines, ""]


def _citation_lines(m: dict[str, Any]) -> list[str]:
    """A note where most cited passages were never returned to the agent: its ids are recalled, not read."""
    recalled = [(label, r["unretrieved_share"]) for label, r in _runs(m) if (r.get("unretrieved_share") or 0) >= 0.5]
    if not recalled:
        return []
    shares = ", ".join(f"{label.split(' (')[0]} {share:.0%}" for label, share in recalled)
    return ["**Citations are recalled, not read** (cites not retrieved: " + shares + "): the ids the agent cites "
            "were mostly never returned by its own searches, so cite coverage says little about its reading. The tiny "
            "world model learns to copy the id that follows the answer's country in a result, not yet the person's "
            "(docs/benchmarks.md, \"Citing what it read\"); the chatbot's checker adds the passages its searches returned but it did not "
            "cite as premises, and says so (docs/chat.md, \"Premises from the agent's search trace\").", ""]


def _refusal_by_p_table(m: dict[str, Any]) -> list[str]:
    runs = [("before RL", m["before_rl_refusal_by_p"])] + [(n, a["refusal_by_p"]) for n, a in m["arms"].items()]
    ps = sorted({q["p"] for _, pts in runs for q in pts})
    if not ps:
        return []
    lines = ["| run | " + " | ".join(f"p = {p:g}" for p in ps) + " |", "|---" * (len(ps) + 1) + "|"]
    for label, pts in runs:
        by = {q["p"]: q for q in pts}
        lines.append(f"| {label} | " + " | ".join(f"{by[p]['refusal']:.2f} (n={by[p]['n']})" if p in by else "–"
                                                    for p in ps) + " |")
    return lines + [""]


def _refusal_by_target_lines(m: dict[str, Any]) -> list[str]:
    """Each AWA arm's held-out refusal where its target asks for an abstention and where it asks for an answer."""
    arms = {n: a["refusal_by_target"] for n, a in m["arms"].items() if a.get("refusal_by_target")}
    if not arms:
        return []
    cell = (lambda g: "–" if g["refusal"] is None else f"{g['refusal']:.2f} (n={g['n']})")
    return ["### Refusal where the AWA target abstains and where it answers", "",
            "Held-out refusal of each AWA arm by what its target asks of the question (p = the SFT checkpoint's p_i; "
            "the formula of the expected refusal). The refusal gap of the quality checks is the arm's refusal against "
            "that target; this says on which questions they differ.", "",
            "| arm | " + " | ".join(TARGET_GROUPS) + " | refusal | target |", "|---" * (len(TARGET_GROUPS) + 3) + "|",
            *(f"| {n} | " + " | ".join(cell(g[k]) for k in TARGET_GROUPS)
              + f" | {m['arms'][n]['after_rl']['refusal_rate']:.2f} | {m['arms'][n]['expected_refusal']:.2f} |"
              for n, g in arms.items()), ""]


def _by_kind_table(m: dict[str, Any]) -> list[str]:
    """Held-out accuracy / refusal per kind of question (world v2): where each run's numbers come from."""
    from awarl.eval.world_audit import kind_markdown

    kinds = m.get("by_kind")
    if not kinds:
        return []
    return ["### By kind of question", "",
            "Held-out accuracy / refusal per kind of question. Answerable kinds are named by their ceiling's cues, "
            "`m/j@f`: m people share the person's name, j of them lead to the gold country, and the search silently "
            "returns a conflicting passage in a share f of rollouts; u is what the best reader reaches there in "
            "expectation (a sample of questions can land above it), p_i the SFT checkpoint's mean. Unanswerable "
            "kinds: `missing` (the needed fact is absent), `near_miss_variant` (a city one letter away has it), "
            "`near_miss_relation` (the other relation's city has it). Abstaining is the better bet where p_i is low; "
            "on the unanswerable kinds it is the only right reply.", "",
            *kind_markdown(kinds, list(kinds[0]["runs"])), ""]


def _capability_table(cap: dict[str, dict[str, Any]]) -> list[str]:
    return [
        "| split | questions | mean p | mean p (answerable) | unparsable rollouts | p histogram (value: count) |",
        "|---|---|---|---|---|---|",
        *(f"| {s} | {c['queries']} | {c['mean_p']:.3f} | {c['mean_p_answerable']:.3f} | {c['unparsable']:.1%} | "
          + ", ".join(f"{k}: {v}" for k, v in c["histogram"].items()) + " |" for s, c in cap.items()),
    ]


def _spread_table(cap: dict[str, dict[str, Any]]) -> list[str]:
    """The base-spread checks per split (world v2 only): is p_i graded by the world's ceilings?"""
    splits = {s: c["spread"] for s, c in cap.items() if c.get("spread")}
    if not splits:
        return []
    names = [c["name"] for c in next(iter(splits.values()))]
    lines = ["A base with spread (answerable questions; the bounds of docs/fidelity.md, World v2):", "",
             "| check | bound | " + " | ".join(splits) + " |", "|---|---|" + "---|" * len(splits)]
    for i, name in enumerate(names):
        first = next(iter(splits.values()))[i]
        lines.append(f"| {name} | {first['bound']} | " + " | ".join(
            f"{c[i]['value']:.3f}" + ("" if c[i]["ok"] else " **missed**") for c in splits.values()) + " |")
    return lines + [""]


def _grpo_lines(m: dict[str, Any]) -> list[str]:
    return [f"- **{name}** (reward `{arm['reward']['kind']}`): {arm['grpo_steps']} logged optimizer steps; mean of the "
            "last 10: " + ", ".join(f"{k} {v:.3f}" for k, v in arm["grpo_last"].items()) for name, arm in m["arms"].items()]


WARM_START_SENTENCES = {
    "clarified_share": " On {share:.0%} of its answerable questions about a person who has namesakes, it also saw the "
                       "conversation the chatbot has with the agent once the user has said which one is meant "
                       "(`warm_start.clarified_share`): the user's city, then that city's country.",
    "misread_share": " On {share:.0%} of its answered answerable questions the gold reply names another country than "
                     "the passages it cites (`warm_start.misread_share`, a noisy teacher): the warm start learns to "
                     "read, but answers right less often when sampled.",
}
"""What report.md says of a warm-start share that is on (metrics key ``warm_start_<name>``); nothing when it is 0."""


def _share_line(m: dict[str, Any], name: str) -> str:
    share = m.get(f"warm_start_{name}") or 0.0
    return WARM_START_SENTENCES[name].format(share=share) if share else ""


def _clarified_line(m: dict[str, Any]) -> str:
    return _share_line(m, "clarified_share")


def _misread_line(m: dict[str, Any]) -> str:
    return _share_line(m, "misread_share")


def report_markdown(m: dict[str, Any]) -> str:
    """report.md from the metrics."""
    from awarl.demo.recipe import FLOORS

    lines = [
        f"# awarl demo report ({m['mode']}, seed {m['seed']})", "",
        "GRPO arms that differ only in their reward, trained from one SFT checkpoint and its p_i and evaluated on this "
        "machine, on a synthetic world. Held-out questions are about persons never seen in SFT or RL; "
        f"{m['world']['eval']['unanswerable']} of {m['world']['eval']['questions']} cannot be answered from the "
        "corpus, so abstaining is right there. The SFT warm start saw gold conversations of other persons; on "
        f"{1 - m.get('warm_start_abstain_share', 1.0):.0%} of its unanswerable ones the gold reply guesses from an "
        "irrelevant passage instead of abstaining (`warm_start.abstain_share` in the recipe), as instruction data "
        "that never says \"I don't know\" would teach." + _clarified_line(m) + _misread_line(m), "",
        "## Held-out evaluation (greedy)", "", *_results_table(m), "", *_what_the_reward_buys(m), *_citation_lines(m),
        "The expected refusal rate is an AWA arm's training target: the share of these questions where refusing is "
        "the better bet under its reward, from the SFT checkpoint's p_i. What each column means:", "",
        *(f"- **{k}**: {v}" for k, v in COLUMNS.items()), "",
        "### Refusal by p_i (held-out questions, binned by the SFT checkpoint's p_i value)", "",
        *_refusal_by_p_table(m), *_refusal_by_target_lines(m), *_by_kind_table(m),
        "## Capability p_i of the SFT checkpoint", "",
        f"K = {m['capability']['rl']['k']} sampled rollouts per question at temperature "
        f"{m['capability']['rl'].get('temperature', 1.0):g} (GRPO's), same rollout settings as training and evaluation.", "",
        *_capability_table(m["capability"]), "", *_spread_table(m["capability"]),
        "## GRPO", "", *_grpo_lines(m), "",
        "The **penalty P_t** is the AWA reward's dynamic correction, subtracted from the abstain reward: it turns "
        "positive when the batch refuses more than the expected rate and negative when it refuses less. It is not "
        "precision (correct / answered), which is an evaluation metric.", "",
        "![refusal rate vs step](refusal_vs_step.png)", "", "![reward terms](reward_terms.png)", "",
        "![before vs after](before_after.png)", "", "![refusal by p_i](refusal_by_p.png)", "",
        "## Quality checks", "",
        *(f"- {name}: {c['value']:.3f} (floor {c['floor']}) — {'passed' if c['passed'] else '**missed**'}"
          + (f" ({FLOORS[name.split(' ')[0]]})" if name.split(" ")[0] in FLOORS else "")
          for name, c in m["checks"].items()), "",
        f"## Time (seconds, this machine, workers: {m.get('workers', 1)})", "",
        *(f"- {k}: {v}" for k, v in m["timings_s"].items()), "",
    ]
    if m["warnings"]:
        lines += ["## Warnings", "", *(f"- {w}" for w in m["warnings"]), ""]
    return "\n".join(lines)
