"""The fidelity study's design and bookkeeping (docs/fidelity.md, "Study v2").

Tiers, each a table of its own, run in this order: T1 (world v2, the medium base: AWA at three
γ against static, data manipulation and ``none``), T1r (the same arms on world v2 with ``tie_order:
rollout``, a second world for claims 1-4), T2 (a weak base: can the controller's guards keep AWA from
collapsing into refusal) and T3 (world v1, the regression control). Every arm names every
reward switch (`STUDY_REWARD` holds one value for each `RewardConfig` field), so no arm moves when a
default does; every arm of a tier trains the same optimizer steps from the same base per seed.

One folder per tier / arm / seed (``<out>/<tier>/<arm>/seed<N>/``: GRPO's run and ``grpo/metrics_log.jsonl``,
``result.json`` once the arm is evaluated); ``<out>/<tier>/base-seed<N>/`` is the demo folder of the
base. `load_runs` reads whatever has finished, `aggregate` summarises it per tier, arm and seed.
The runner (``scripts/fidelity.py``) trains; this module never imports torch or the trainer.

Per generation batch, not per logged step: TRL logs the reward's ``awa/…`` terms on the optimizer
step that generated the batch (with ``logging_steps: 1`` the other steps of the batch carry none),
so a generation batch is a log row that carries ``awa/refusal_rate`` (`read_batches`).
"""

from __future__ import annotations

import functools
import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from awarl.data.records import read_log_rows

SEEDS = (0, 1, 2)
"""Training seeds shared by every arm; comparisons are paired per seed."""
K = 16
"""Rollouts per question for p_i: enough p values that γ 0.2 / 0.5 / 1.0 move the per-query threshold."""
LATE = 20
"""Generation batches whose mean is an arm's "late" value (where it ends)."""
PLATEAU = 50
"""The last generation batches whose 20-batch window means must not wander (claim 2)."""

STUDY_REWARD: dict[str, Any] = {
    "kind": "awa", "r_correct": 1.0, "r_wrong": 0.0, "p_clip": 0.1, "gamma": 0.5, "beta": 0.9, "tau": 0.05,
    "delta": 0.1, "max_penalty": 1.0, "cap_abstain": True, "floor_abstain": True, "anti_windup": "freeze",
    "min_penalty": -0.2, "windup_share": 0.8, "abstain_requires_search": False, "static_reward": 0.5,
    "attempt_bonus": False, "attempt_bonus_lambda": 0.1, "forced_answer": False, "collapse_warn_share": 0.9, "collapse_warn_batches": 10,
    "adaptive_p": False, "adaptive_p_every": 10, "adaptive_p_samples": 4, "adaptive_p_questions": 64,
    "adaptive_p_alpha": 0.05, "w_cite": 0.2, "cite_on": "correct", "w_red": 0.5, "judge": "gold",
}
"""One explicit value for every reward switch (`awarl.rewards.config.RewardConfig`, its judge section
aside: the gold judge needs none); an arm changes some of them. A test holds it to the config's fields."""


STUDY_BASE = ("sft.args.max_steps=1300", "warm_start.clarified_share=0.0", "grpo.max_steps=160",
              "grpo.save_steps=20", "grpo.num_iterations=1")
"""The warm start every tier's base is built with and the GRPO schedule its arms start from (a tier's own
overrides come after; an arm sets its steps): the demo recipe's values when the study was run, so its bases
and arms do not move when the demo's defaults do."""


def reward(**changes: Any) -> dict[str, Any]:
    """`STUDY_REWARD` with ``changes``; a name that is not a switch is an error."""
    unknown = sorted(set(changes) - set(STUDY_REWARD))
    if unknown:
        raise KeyError(f"not reward switches: {unknown} (known: {', '.join(STUDY_REWARD)})")
    return {**STUDY_REWARD, **changes}


@dataclass(frozen=True)
class Arm:
    """One arm: its reward (every switch), what it tests, and the seeds it runs at (None: the tier's)."""

    name: str
    reward: dict[str, Any]
    tests: str
    seeds: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Tier:
    """One tier: its base (demo recipe overrides on top of `K`), GRPO steps per arm and its arms."""

    name: str
    title: str
    base: tuple[str, ...]
    steps: int
    arms: tuple[Arm, ...]
    max_mean_p: float | None = None
    """The base's precondition: mean p_i on answerable RL questions at most this (checked before any arm)."""
    yardstick: str | None = None
    """An arm that runs first at every seed; the tier's other arms run only at the seeds where it shows that RL
    teaches the base (`yardstick_failures`): T2's `none`, which T2b and T2d compare with."""

    def arm(self, name: str) -> Arm:
        for arm in self.arms:
            if arm.name == name:
                return arm
        raise KeyError(f"tier {self.name} has no arm {name!r}; its arms: {', '.join(a.name for a in self.arms)}")

    def seeds_of(self, arm: Arm, seeds: Sequence[int] = SEEDS) -> list[int]:
        return [s for s in seeds if arm.seeds is None or s in arm.seeds]


_AWA = {"kind": "awa", "floor_abstain": True, "anti_windup": "freeze"}
CLAIM_ARMS = (
    Arm("awa_g0.2", reward(**_AWA, gamma=0.2), "a plateau at its own target (claims 2, 3)"),
    Arm("awa_g0.5", reward(**_AWA, gamma=0.5), "stays at its target while static drifts (claims 1, 2, 4)"),
    Arm("awa_g1.0", reward(**_AWA, gamma=1.0), "the highest plateau (claim 2)"),
    Arm("static_0.5", reward(kind="static", static_reward=0.5), "the static reward drifts (claim 1)"),
    Arm("data_manip", reward(kind="unanswerable_only"), "the paper's data-manipulation baseline (claims 3, 4)"),
    Arm("none", reward(kind="none"), "accuracy only (claim 3)"),
    Arm("ternary", reward(kind="ternary"), "a common abstention baseline (one seed)", seeds=(0,)),
    Arm("static_0.3", reward(kind="static", static_reward=0.3), "a second static value (one seed)", seeds=(0,)),
)
"""The arms of claims 1-4 and the two one-seed baselines, the same on every world that checks those claims."""
CLAIM_TIERS = ("T1", "T1r")
"""The tiers whose arms are `CLAIM_ARMS`: claims 1-4 are checked on each (T1r's numbered 1r-4r)."""
TIE_ORDER_ROLLOUT = ("world.tie_order=rollout",)
"""T1r's world: T1's with the order of tied passages drawn per rollout (`awarl.data.world_noise`), so a
reader that follows the first namesake shown has p_i near its ceiling rather than 0 or 1 (docs/fidelity.md,
"T1r"): chosen from the base-spread precondition T1's bases missed, before any T1r arm ran."""

TIERS: dict[str, Tier] = {t.name: t for t in (
    Tier("T1", "world v2, the medium base (claims 1-4)", (), 600, (
        *CLAIM_ARMS,
        # The anti-windup guard against the paper's controller, from the same base as awa_g0.5 (claim W)
        Arm("awa_off", reward(kind="awa", floor_abstain=True, anti_windup="off"),
            "the unguarded controller (the paper's): does P_t wind up where freeze holds the target (claim W)"),
        Arm("awa_bound", reward(kind="awa", floor_abstain=True, anti_windup="bound"),
            "the bound form of the guard (P_t >= min_penalty) beside freeze (claim W)"),
    )),
    Tier("T1r", "world v2 with tie_order: rollout, the medium base (claims 1-4 again, on a second world)",
         TIE_ORDER_ROLLOUT, 600, CLAIM_ARMS),
    # A weak base that reads: a noisy teacher (75% of the SFT answers to answerable questions name another
    # country, citations kept; `warm_start.misread_share`) at T1's learning rate and 2,400 SFT steps (the demo's,
    # past the reading and id-copying steps), so its weakness is set by a share and not by where SFT stops. The
    # lower learning rates tried before (5e-4, 2.5e-4) gave a base weak at one seed and not the next, then a
    # guesser whose `none` arm learned nothing (docs/fidelity.md, "T2's base"); chosen before any arm ran on it.
    Tier("T2", "world v2, a weak base (mean p_i <= 0.2): the controller's guards",
         ("sft.args.max_steps=2400", "warm_start.misread_share=0.75"), 600, (
             Arm("none", reward(kind="none"), "what RL can teach this base (the yardstick of adaptive p_i); runs first"),
             Arm("static_0.5", reward(kind="static", static_reward=0.5), "collapses from a weak base"),
             Arm("awa_g0.5", reward(**_AWA), "plain AWA collapses from a weak base"),
             Arm("awa_adaptive", reward(**_AWA, adaptive_p=True), "adaptive p_i follows learning"),
             Arm("awa_attempt", reward(**_AWA, attempt_bonus=True), "generation encouragement keeps groups mixed"),
             Arm("awa_forced", reward(**_AWA, forced_answer=True),
                 "a forced answer in every all-abstain group keeps a gradient"),
         ), max_mean_p=0.2, yardstick="none"),
    Tier("T3", "world v1, the regression control (claim 5)",
         ("world.version=1", "world.persons=500", "world.split=[0.6, 0.24, 0.16]", "warm_start.renamed_copies=0", "warm_start.rename_ids=false",
          "warm_start.originals=true", "sft.args.max_steps=700"), 400, (
             Arm("awa_g0.5", reward(**_AWA), "paying arms end alike on v1"),
             Arm("static_0.5", reward(kind="static", static_reward=0.5), "paying arms end alike on v1"),
             Arm("none", reward(kind="none"), "accuracy only"),
         )),
)}


def base_overrides(tier: Tier) -> list[str]:
    """The demo recipe overrides (``section.field=value``) of a tier's base: K, `STUDY_BASE`, then the tier's own."""
    return [f"capability.k={K}", *STUDY_BASE, *tier.base]


def arm_overrides(tier: Tier, arm: Arm) -> dict[str, Any]:
    """The dotted training overrides of one arm: every reward switch, the tier's steps, and one log row
    per optimizer step (so every generation batch keeps its own row)."""
    out = {f"reward.{k}": v for k, v in arm.reward.items()}
    out.update({"grpo.max_steps": tier.steps, "grpo.logging_steps": 1})
    return out


def base_folder(out: Path, tier: str, seed: int) -> Path:
    return Path(out) / tier / f"base-seed{seed}"


def arm_folder(out: Path, tier: str, arm: str, seed: int) -> Path:
    return Path(out) / tier / arm / f"seed{seed}"


def plan(out: Path, tiers: Sequence[str], seeds: Sequence[int], arms: Sequence[str] | None = None
         ) -> list[tuple[str, str, int]]:
    """(tier, arm, seed) still to run, in the study's order (tier by tier, seed by seed); finished ones
    (their ``result.json``) are left out, so a rerun resumes."""
    todo = []
    for name in tiers:
        tier = TIERS[name]
        chosen = [tier.arm(a) for a in arms] if arms else list(tier.arms)
        for seed in seeds:
            for arm in chosen:
                if seed in tier.seeds_of(arm, seeds) and not (arm_folder(out, name, arm.name, seed) / "result.json").exists():
                    todo.append((name, arm.name, seed))
    return todo


# -- what a run logged ---------------------------------------------------------------------------------------
BATCH_KEYS = {
    "refusal": "awa/refusal_rate", "target": "awa/expected_refusal_rate", "E": "awa/E", "E_ema": "awa/E_ema",
    "P": "awa/penalty", "capped": "awa/abstain_capped", "floored": "awa/abstain_floored",
    "all_abstain": "awa/all_abstain_groups", "three_outcome": "awa/three_outcome_groups",
    "zero_advantage": "awa/zero_advantage_groups", "value_correct": "awa/answer_value_correct",
    "value_wrong": "awa/answer_value_wrong", "precision": "awa/precision", "accuracy": "awa/accuracy",
    "probe_rollouts": "awa/probe_rollouts", "unparsable": "awa/unparsable",
}
"""Short name -> the logged key (docs/metrics.md) of each per-batch term the study reports."""


def read_batches(path: Path) -> list[dict[str, float]]:
    """The generation batches of a GRPO ``metrics_log.jsonl``, in order: each a dict of the `BATCH_KEYS`
    it logged plus its ``step``. Rows of one step merge, a later value winning, so a resumed run's repeated
    steps read as their last run; a torn last line (a killed run) is skipped."""
    by_step: dict[int, dict[str, Any]] = {}
    for row in read_log_rows(path) if Path(path).exists() else []:
        if "train_runtime" not in row and isinstance(row.get("step"), int):
            by_step.setdefault(row["step"], {}).update(row)
    batches = []
    for step in sorted(by_step):
        row = by_step[step]
        if _finite(row.get(BATCH_KEYS["refusal"])):
            batches.append({"step": step, **{k: float(row[key]) for k, key in BATCH_KEYS.items()
                                             if _finite(row.get(key))}})
    return batches


def late(batches: Sequence[dict[str, float]], key: str, n: int = LATE) -> float | None:
    """Mean of ``key`` over the last ``n`` batches that logged it (None when none did)."""
    values = [b[key] for b in batches if key in b][-n:]
    return statistics.fmean(values) if values else None


def window_means(values: Sequence[float], window: int = LATE) -> list[float]:
    """Sliding means of ``window`` consecutive values."""
    return [statistics.fmean(values[i:i + window]) for i in range(len(values) - window + 1)]


def plateau_sd(batches: Sequence[dict[str, float]], key: str = "refusal", last: int = PLATEAU,
               window: int = LATE) -> float | None:
    """Standard deviation of the ``window``-batch sliding means over the last ``last`` batches (None when
    fewer batches ran): how much the late value still wanders."""
    values = [b[key] for b in batches if key in b][-last:]
    if len(values) < last:
        return None
    means = window_means(values, window)
    return statistics.pstdev(means) if len(means) > 1 else 0.0


def max_window_after(batches: Sequence[dict[str, float]], key: str, after: int, window: int = LATE) -> float | None:
    """The largest ``window``-batch sliding mean of ``key`` over the batches after the first ``after`` (None
    when fewer than ``window`` of them ran: a shorter window is not the claim's)."""
    values = [b[key] for b in batches[after:] if key in b]
    return max(window_means(values, window)) if len(values) >= window else None


RECOVERY_WINDOW = 10
"""Generation batches over which the error's mean must be >= 0 for it to have turned (`recovery_lags`)."""


def recovery_lags(batches: Sequence[dict[str, float]], window: int = RECOVERY_WINDOW) -> list[tuple[int, bool]]:
    """How fast a negative P_t comes back once the error turns: for every stretch of batches with P_t < 0,
    from the first batch t of it at which the mean of E over batches t … t + ``window`` − 1 (those that ran)
    is >= 0, the batches until P_t >= 0 again, and whether it came back (False: still negative when the
    run ended, the lag then a lower bound). A stretch in which the error never turns is left out.

    >>> b = [{"P": p, "E": e} for p, e in [(0, -.2), (-.1, -.2), (-.2, .1), (-.1, .1), (0, .1), (0, .1)]]
    >>> recovery_lags(b, window=2)
    [(2, True)]
    """
    P = [b.get("P") for b in batches]
    E = [b.get("E") for b in batches]
    lags, i, n = [], 0, len(batches)
    while i < n:
        if P[i] is None or P[i] >= 0:
            i += 1
            continue
        j = i
        while j < n and P[j] is not None and P[j] < 0:
            j += 1
        for t in range(i, j):
            ahead = [e for e in E[t:t + window] if e is not None]
            if ahead and statistics.fmean(ahead) >= 0:
                lags.append((j - t, j < n))
                break
        i = j
    return lags


# -- finished runs -------------------------------------------------------------------------------------------
@dataclass
class Run:
    """One finished tier / arm / seed: its ``result.json`` (held-out metrics, compute) and its batches."""

    tier: str
    arm: str
    seed: int
    result: dict[str, Any]
    batches: list[dict[str, float]] = field(default_factory=list)
    folder: Path | None = None

    def late(self, key: str) -> float | None:
        """The mean of ``key`` over the last `LATE` batches; None when fewer logged it (a run stopped early is
        not late yet, and a claim then says "no value at seed …")."""
        if sum(key in b for b in self.batches) < LATE:
            return None
        return late(self.batches, key)

    def metric(self, key: str, mode: str = "greedy") -> float | None:
        """A held-out metric: ``greedy``, or ``sampled`` (the mean over the sampled evaluations)."""
        if mode == "greedy":
            value = (self.result.get("greedy") or {}).get(key)
            return float(value) if _finite(value) else None
        values = [s[key] for s in self.result.get("sampled") or [] if _finite(s.get(key))]
        return statistics.fmean(values) if values else None

    @property
    def training_rollouts(self) -> int:
        return len(self.batches) * int(self.result.get("rollouts_per_batch", 0))

    @property
    def probe_rollouts(self) -> int:
        values = [b["probe_rollouts"] for b in self.batches if "probe_rollouts" in b]
        return int(values[-1]) if values else 0


def write_result(folder: Path, result: dict[str, Any]) -> Path:
    """``result.json`` of a finished arm (written last: its presence marks the arm done)."""
    path = Path(folder) / "result.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def load_run(folder: Path) -> Run:
    """The finished arm in ``folder`` (``<out>/<tier>/<arm>/seed<N>``, holding its ``result.json``)."""
    folder = Path(folder)
    result = json.loads((folder / "result.json").read_text(encoding="utf-8"))
    return Run(folder.parts[-3], folder.parts[-2], int(folder.name[len("seed"):]), result,
               read_batches(folder / "grpo" / "metrics_log.jsonl"), folder)


def load_runs(out: Path) -> list[Run]:
    """Every finished tier / arm / seed under ``out`` (whatever has finished so far)."""
    return [load_run(path.parent) for path in sorted(Path(out).glob("*/*/seed*/result.json"))]


YARDSTICK_GAIN = 0.10
"""A yardstick arm's late batch accuracy (the last `LATE` generation batches) must exceed the mean of its first
`EARLY` by at least this: RL teaches the base something (docs/fidelity.md, "T2's base: a noisy teacher")."""
EARLY = 10
YARDSTICK_MAX_UNPARSABLE = 0.5
"""A yardstick's held-out greedy unparsable share must be below this (it answers in the protocol's format)."""


def yardstick_failures(run: Run) -> list[str]:
    """Why ``run`` (a tier's yardstick arm) does not show that RL teaches its base; empty when it does. It must
    gain `YARDSTICK_GAIN` in batch accuracy from its first `EARLY` generation batches to its last `LATE`, and
    on the held-out questions answer in format (unparsable share < `YARDSTICK_MAX_UNPARSABLE`) and be right
    sometimes (answerable accuracy > 0)."""
    why = []
    accuracy = [b["accuracy"] for b in run.batches if "accuracy" in b]
    if len(accuracy) < EARLY + LATE:
        why.append(f"{len(accuracy)} generation batches logged accuracy, fewer than {EARLY + LATE}")
    else:
        early, end = statistics.fmean(accuracy[:EARLY]), statistics.fmean(accuracy[-LATE:])
        if end - early < YARDSTICK_GAIN:
            why.append(f"batch accuracy {early:.3f} over the first {EARLY} batches and {end:.3f} over the last {LATE}: "
                       f"a gain of {end - early:+.3f} < {YARDSTICK_GAIN}")
    unparsable, answerable = run.metric("unparsable"), run.metric("accuracy_answerable")
    if unparsable is None or unparsable >= YARDSTICK_MAX_UNPARSABLE:
        why.append(f"held-out unparsable share {unparsable} (at most {YARDSTICK_MAX_UNPARSABLE} allowed)")
    if answerable is None or answerable <= 0.0:
        why.append(f"held-out answerable accuracy {answerable} (must be > 0)")
    return why


HELD_OUT = ("precision", "accuracy", "ra_f1", "refusal_rate", "abstain_recall", "over_refusal", "accuracy_answerable",
            "unparsable")
"""The held-out metrics reported greedy and sampled (`awarl.demo.report.run_summary`'s keys)."""
LATE_TERMS = ("refusal", "target", "E", "E_ema", "P", "capped", "floored", "all_abstain", "three_outcome",
              "zero_advantage", "unparsable")


def run_summary(run: Run) -> dict[str, Any]:
    """One run's numbers: late batch terms, the plateau's wander, held-out greedy and sampled, compute."""
    return {
        "batches": len(run.batches),
        "late": {k: run.late(k) for k in LATE_TERMS},
        "plateau_sd": plateau_sd(run.batches),
        "min_P": min((b["P"] for b in run.batches if "P" in b), default=None),
        "recovery_lags": recovery_lags(run.batches),
        "greedy": {k: run.metric(k) for k in HELD_OUT},
        "sampled": {k: run.metric(k, "sampled") for k in HELD_OUT},
        "heldout_target": run.result.get("heldout_target"),
        "unanswerable_share": run.result.get("unanswerable_share_rl"),
        "training_rollouts": run.training_rollouts,
        "probe_rollouts": run.probe_rollouts,
        "by_kind": run_by_kind(run),
    }


def run_by_kind(run: Run) -> list[dict[str, Any]] | None:
    """Held-out greedy accuracy and refusal per kind of question (`awarl.eval.world_audit.by_kind`), from the
    run's ``eval/`` folder and its base's world.json; None where either is missing (a recorded run), the world is
    v1, or the evaluation is of another world than the base's (a base rebuilt after the run: logged, so one
    stale run does not stop the aggregate)."""
    import logging

    from awarl.data.records import iter_jsonl
    from awarl.errors import DataError
    from awarl.eval.world_audit import by_kind

    if run.folder is None:
        return None
    world = base_folder(run.folder.parents[2], run.tier, run.seed) / "world" / "world.json"
    trajectories = run.folder / "eval" / "trajectories.jsonl"
    if not world.exists() or not trajectories.exists():
        return None
    data = _world_json(world)
    if data["config"].get("version", 1) < 2:
        return None
    try:
        return by_kind(data, {run.arm: [row for _, row in iter_jsonl(trajectories)]})
    except DataError as exc:
        logging.getLogger(__name__).warning("%s: no table by kind for %s/%s/seed%d: %s", world, run.tier, run.arm,
                                            run.seed, exc)
        return None


@functools.lru_cache(maxsize=8)
def _world_json(path: Path) -> dict[str, Any]:
    """A base's world.json, read once for all the arms that train from that base (read only)."""
    return json.loads(path.read_text(encoding="utf-8"))


def mean_sd(values: Sequence[float | None]) -> tuple[float | None, float | None]:
    """Mean and sample standard deviation of the numbers among ``values`` (sd 0 for one)."""
    nums = [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    if not nums:
        return None, None
    return statistics.fmean(nums), (statistics.stdev(nums) if len(nums) > 1 else 0.0)


def aggregate(runs: Sequence[Run]) -> dict[str, dict[str, dict[str, Any]]]:
    """tier -> arm -> ``{"seeds", "per_seed": {seed: run_summary}, "runs": {seed: Run}}``."""
    table: dict[str, dict[str, dict[str, Any]]] = {}
    for run in sorted(runs, key=lambda r: (r.tier, r.arm, r.seed)):
        entry = table.setdefault(run.tier, {}).setdefault(run.arm, {"seeds": [], "per_seed": {}, "runs": {}})
        entry["seeds"].append(run.seed)
        entry["per_seed"][run.seed] = run_summary(run)
        entry["runs"][run.seed] = run
    return table


def per_seed(table: dict[str, Any], tier: str, arm: str, path: str) -> dict[int, float]:
    """seed -> the number at ``path`` (``"late.refusal"``, ``"greedy.precision"``) of one arm's summaries."""
    out = {}
    for seed, summary in ((table.get(tier) or {}).get(arm) or {}).get("per_seed", {}).items():
        value: Any = summary
        for part in path.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if _finite(value):
            out[seed] = float(value)
    return out


def _finite(value: Any) -> bool:
    """A logged or recorded number the study can use: a NaN or infinity (a metric of an empty set, a diverged
    run) counts as missing, so a claim says "no value at seed …" instead of comparing with it."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def question_level(a: Run, b: Run, samples: int = 1000) -> dict[str, dict[str, Any]] | None:
    """``b − a`` on the same held-out questions (greedy ``eval/`` folders), by the paired bootstrap of
    `awarl.eval.stats.paired_comparison`: precision, accuracy and RA-F1 with their standard errors.
    None when either run has no evaluation folder."""
    from awarl.eval.stats import paired_comparison, run_questions

    folders = [r.folder / "eval" if r.folder else None for r in (a, b)]
    if not all(f is not None and (f / "predictions.jsonl").exists() for f in folders):
        return None
    diffs = paired_comparison(run_questions(folders[0]), run_questions(folders[1]), samples=samples, seed=a.seed)
    return {k: {"diff": round(d["diff"], 4), "stderr": round(d["stderr"], 4), "beyond_2se": d["beyond_2se"]}
            for k, d in diffs.items() if k in ("precision", "accuracy", "ra_f1")}
