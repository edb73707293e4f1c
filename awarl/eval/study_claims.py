"""The fidelity study's pre-registered claims (docs/fidelity.md, "Study v2"), checked on an
`awarl.eval.study.aggregate` table, and the study's report.

Every claim is a list of tests. A per-seed test has a *margin* at each seed (how far the seed's
number is on the right side of its threshold: ``refusal − 0.9`` for "refusal ≥ 0.9"); the paired-seed
rule (docs/fidelity.md, "Pre-registered claims of study v2") says it holds when it holds at every seed, or when the mean margin over the seeds
exceeds 2 standard errors (sd / √n). Comparisons between arms use the seeds both arms finished (paired
per seed). A claim whose arms have not run is "not measured"; one on fewer seeds than the study's
says so. Where a claim fails, its diagnostics name the logged controller terms that explain it.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from awarl.eval.study import (CLAIM_TIERS, LATE, SEEDS, STUDY_REWARD, YARDSTICK_MAX_UNPARSABLE, max_window_after, per_seed,
                              plateau_sd, question_level)

# The thresholds, as pre-registered (docs/fidelity.md); never tuned to a result.
DRIFT = 0.9            # claim 1: static's late batch refusal at least this; T2: collapse
ABOVE_TARGET = 0.1     # claim 1: AWA γ 0.5 at most its late training target + this
PLATEAU_GAP = 0.08     # claim 2: each γ within this of its own late target
TARGET_STEP = 0.06     # claim 2: neighbouring γ's targets differ by at least this
PLATEAU_WANDER = 0.05  # claim 2: sd of the 20-batch window means over the last 50 batches at most this
PRECISION_VS_DM, ACCURACY_VS_DM, RA_F1_VS_DM, PRECISION_VS_NONE = 0.08, -0.04, 0.01, 0.15  # claim 3
DM_SPREAD, DM_AWAY, AWA_SPREAD = 0.1, 0.15, 0.05  # claim 4
PAYING_TOGETHER = 0.03  # claim 5: paying arms' held-out refusal within this of each other
ADAPTIVE_ACCURACY, ADAPTIVE_RECALL = 0.8, 0.8  # T2: answerable accuracy >= 0.8 x none's, abstain-recall >= 0.8
ALL_ABSTAIN_AFTER, ALL_ABSTAIN_MAX = 50, 0.3   # T2: attempt bonus keeps all-abstain <= 0.3 after batch 50
GUARD_GAP = 0.1         # W1: the guarded AWA's |late batch refusal - late target| at most this
RECOVERY_MAX = 10      # W2: P_t back to >= 0 at most this many generation batches after the error turns
WINDUP_P = -0.5        # W3: the unguarded controller winds up if its lowest P_t is at most this (or misses W1's gap)
GAMMAS = (("awa_g0.2", 0.2), ("awa_g0.5", 0.5), ("awa_g1.0", 1.0))
MARGIN_DIGITS = 9       # margins are compared rounded to this many decimals: a tie is a tie, not float noise
MIN_SEEDS_FOR_SE = 4    # below this the 2-SE branch cannot rescue a failing seed, so it is not tried


@dataclass
class Criterion:
    """One test of a claim: per-seed margins (or one number) and whether it holds."""

    name: str
    holds: bool
    margins: dict[int, float] = field(default_factory=dict)
    rule: str = ""

    def row(self) -> dict[str, Any]:
        return {"test": self.name, "holds": self.holds, "margins": {str(s): round(m, 4) for s, m in self.margins.items()},
                "rule": self.rule}


def paired_seed_rule(margins: dict[int, float], strict: bool = False) -> tuple[bool, str]:
    """Holds at every seed (margin ≥ 0, or > 0 when ``strict``), or the mean margin exceeds 2 standard
    errors of the mean (sd / √n) over at least `MIN_SEEDS_FOR_SE` seeds. With 2 or 3 seeds the second branch
    could never rescue a seed that fails (mean / SE is at most 2 when one margin is ≤ 0: (1, 1, 0) gives
    exactly 2, which floating point may round either way), so there the rule is "at every seed"; from 4
    seeds on one seed may miss. Margins are compared rounded to `MARGIN_DIGITS` decimals, so a number
    exactly at its threshold meets a "≥" and fails a ">" whatever the float arithmetic left.

    >>> paired_seed_rule({0: 0.02, 1: 0.01, 2: 0.03})[0]
    True
    >>> paired_seed_rule({0: 0.30, 1: 0.32, 2: -0.01})[0]   # 3 seeds: one miss is a miss
    False
    >>> paired_seed_rule({0: 0.30, 1: 0.30, 2: 0.30, 3: -0.01})   # 4 seeds: the mean is beyond 2 SE
    (True, 'mean margin 0.223 > 2 SE (0.155)')
    >>> paired_seed_rule({0: (0.2515625 - 0.1515625) - 0.1})[0]   # exactly at the bound: -2.8e-17 before rounding
    True
    """
    if not margins:
        return False, "no seeds"
    values = [round(m, MARGIN_DIGITS) for m in margins.values()]
    ok = [m > 0 if strict else m >= 0 for m in values]
    if all(ok):
        return True, f"at every seed ({len(ok)})"
    failing = f"fails at seed(s) {[s for s, o in zip(margins, ok) if not o]}"
    if len(values) < 2:
        return False, failing
    mean, se = statistics.fmean(values), statistics.stdev(values) / math.sqrt(len(values))
    if len(values) < MIN_SEEDS_FOR_SE:
        return False, f"{failing}; mean margin {mean:.3f}"
    if round(mean - 2 * se, MARGIN_DIGITS) > 0:
        return True, f"mean margin {mean:.3f} > 2 SE ({2 * se:.3f})"
    return False, f"{failing}; mean margin {mean:.3f} <= 2 SE ({2 * se:.3f})"


def seed_test(name: str, margins: dict[int, float], strict: bool = False) -> Criterion:
    holds, rule = paired_seed_rule(margins, strict)
    return Criterion(name, holds, margins, rule)


@dataclass
class Claim:
    """A claim's verdict (None: not measured), its tests, numbers, seeds, command and diagnostics."""

    number: str
    text: str
    tier: str
    holds: bool | None
    tests: list[Criterion] = field(default_factory=list)
    seeds: list[int] = field(default_factory=list)
    numbers: dict[str, Any] = field(default_factory=dict)
    diagnostics: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    arms: list[str] = field(default_factory=list)
    unrun: list[str] = field(default_factory=list)  # "<arm> seed <s>" of the study's seeds not finished

    @property
    def complete(self) -> bool:
        return self.holds is not None and set(SEEDS) <= set(self.seeds)

    @property
    def command(self) -> str:
        return (f"OMP_NUM_THREADS=1 python scripts/fidelity.py run --tier {self.tier} --seeds "
                f"{' '.join(map(str, SEEDS))} --arms {' '.join(self.arms)}")

    @property
    def verdict(self) -> str:
        if self.holds is None:
            return "not measured"
        word = "yes" if self.holds else "no"
        if self.complete:
            return word
        return f"{word} (seeds {','.join(map(str, self.seeds))} only" + \
            (f"; not run: {', '.join(self.unrun)})" if self.unrun else ")")


def _finished(table: dict[str, Any], tier: str, arm: str) -> set[int]:
    """The seeds ``arm`` finished in ``tier``."""
    return set(((table.get(tier) or {}).get(arm) or {}).get("seeds", []))


def _paired(table: dict[str, Any], tier: str, arms: Sequence[str]) -> list[int]:
    """The seeds every one of ``arms`` finished in ``tier`` (the pairs a comparison may use)."""
    sets = [_finished(table, tier, a) for a in arms]
    return sorted(set.intersection(*sets)) if sets else []


def _claim(number: str, text: str, tier: str, table: dict[str, Any], arms: Sequence[str],
           build: Callable[[list[int]], tuple[list[Criterion], dict[str, Any]]]) -> Claim:
    seeds = _paired(table, tier, arms)
    done = {a: _finished(table, tier, a) for a in arms}
    missing = [a for a in arms if not done[a]]
    if not seeds:
        return Claim(number, text, tier, None, missing=missing or list(arms), arms=list(arms))
    tests, numbers = build(seeds)
    _every_seed(tests, seeds)
    holds = all(t.holds for t in tests)
    claim = Claim(number, text, tier, holds, tests, seeds, numbers, missing=missing, arms=list(arms),
                  unrun=[f"{a} seed {s}" for a in arms for s in SEEDS if s not in done[a]])
    if not holds:
        claim.diagnostics = [diagnose(table, tier, arm, s) for arm in arms for s in seeds]
    return claim


def _every_seed(tests: list[Criterion], seeds: Sequence[int]) -> None:
    """A per-seed test that has no value at one of the paired seeds (a run without its metrics log, say) does
    not hold: "at every seed" means every seed the claim lists, not every seed that happened to be measured."""
    for test in tests:
        unmeasured = [s for s in seeds if test.margins and s not in test.margins]
        if unmeasured:
            test.holds = False
            test.rule = f"no value at seed(s) {unmeasured}; {test.rule}"


def _at(table: dict[str, Any], tier: str, arm: str, path: str, seeds: Sequence[int]) -> dict[int, float]:
    values = per_seed(table, tier, arm, path)
    return {s: values[s] for s in seeds if s in values}


def _diff(a: dict[int, float], b: dict[int, float]) -> dict[int, float]:
    return {s: a[s] - b[s] for s in a if s in b}


def _shift(values: dict[int, float], by: float) -> dict[int, float]:
    return {s: v + by for s, v in values.items()}


# -- the claims ----------------------------------------------------------------------------------------------
def claim_drift(table: dict[str, Any], tier: str = "T1", number: str = "1") -> Claim:
    def build(seeds: list[int]) -> tuple[list[Criterion], dict[str, Any]]:
        static = _at(table, tier, "static_0.5", "late.refusal", seeds)
        awa, target = (_at(table, tier, "awa_g0.5", f"late.{k}", seeds) for k in ("refusal", "target"))
        return ([seed_test(f"static_0.5 late batch refusal >= {DRIFT}", _shift(static, -DRIFT)),
                 seed_test(f"awa_g0.5 late batch refusal <= its late target + {ABOVE_TARGET}",
                           _shift(_diff(target, awa), ABOVE_TARGET))],
                {"static_0.5 refusal": static, "awa_g0.5 refusal": awa, "awa_g0.5 target": target})
    return _claim(number, f"static 0.5 drifts to late batch refusal >= {DRIFT} while AWA γ 0.5 stays <= its training "
                  f"target + {ABOVE_TARGET}", tier, table, ["static_0.5", "awa_g0.5"], build)


def claim_plateaus(table: dict[str, Any], tier: str = "T1", number: str = "2") -> Claim:
    arms = [a for a, _ in GAMMAS]

    def build(seeds: list[int]) -> tuple[list[Criterion], dict[str, Any]]:
        refusal = {a: _at(table, tier, a, "late.refusal", seeds) for a in arms}
        target = {a: _at(table, tier, a, "late.target", seeds) for a in arms}
        wander = {a: _at(table, tier, a, "plateau_sd", seeds) for a in arms}
        tests = [seed_test(f"{a} within {PLATEAU_GAP} of its late target",
                           {s: PLATEAU_GAP - abs(refusal[a][s] - target[a][s]) for s in refusal[a] if s in target[a]})
                 for a in arms]
        for lo, hi in zip(arms, arms[1:]):
            tests.append(seed_test(f"{hi} target - {lo} target >= {TARGET_STEP}",
                                   _shift(_diff(target[hi], target[lo]), -TARGET_STEP)))
            tests.append(seed_test(f"{hi} refusal > {lo} refusal", _diff(refusal[hi], refusal[lo]), strict=True))
        tests += [seed_test(f"{a} sd of 20-batch window means over the last 50 batches <= {PLATEAU_WANDER}",
                            {s: PLATEAU_WANDER - v for s, v in wander[a].items()}) for a in arms]
        for a in arms:  # a run shorter than 50 batches cannot show a plateau
            if len(wander[a]) < len(seeds):
                tests.append(Criterion(f"{a} ran >= 50 generation batches", False, rule="too few batches"))
        return tests, {"refusal": refusal, "target": target, "plateau_sd": wander}
    return _claim(number, "distinct plateaus: each of γ 0.2 / 0.5 / 1.0 ends within 0.08 of its own late target, the "
                  "targets differ by >= 0.06, refusal increases strictly with γ, and the 20-batch window means over "
                  "the last 50 batches have sd <= 0.05", tier, table, arms, build)


def claim_precision(table: dict[str, Any], tier: str = "T1", number: str = "3") -> Claim:
    def build(seeds: list[int]) -> tuple[list[Criterion], dict[str, Any]]:
        g = {k: _at(table, tier, "awa_g0.2", f"greedy.{k}", seeds) for k in ("precision", "accuracy", "ra_f1")}
        dm = {k: _at(table, tier, "data_manip", f"greedy.{k}", seeds) for k in g}
        none = _at(table, tier, "none", "greedy.precision", seeds)
        tests = [seed_test(f"awa_g0.2 - data_manip precision >= +{PRECISION_VS_DM}",
                           _shift(_diff(g["precision"], dm["precision"]), -PRECISION_VS_DM)),
                 seed_test(f"awa_g0.2 - data_manip accuracy >= {ACCURACY_VS_DM}",
                           _shift(_diff(g["accuracy"], dm["accuracy"]), -ACCURACY_VS_DM)),
                 seed_test(f"awa_g0.2 - data_manip RA-F1 >= +{RA_F1_VS_DM}",
                           _shift(_diff(g["ra_f1"], dm["ra_f1"]), -RA_F1_VS_DM)),
                 seed_test(f"awa_g0.2 - none precision >= +{PRECISION_VS_NONE}",
                           _shift(_diff(g["precision"], none), -PRECISION_VS_NONE))]
        runs = {a: table[tier][a]["runs"] for a in ("awa_g0.2", "data_manip")}
        questions = {s: question_level(runs["data_manip"][s], runs["awa_g0.2"][s]) for s in seeds}
        numbers = {"awa_g0.2": g, "data_manip": dm, "none precision": none}
        if any(q is not None for q in questions.values()):  # context: is each seed's difference beyond its noise?
            numbers["awa_g0.2 - data_manip per seed, question-level paired bootstrap"] = questions
        return tests, numbers
    return _claim(number, "precision at small cost: AWA γ 0.2 against data manipulation, paired: precision >= +0.08, "
                  "accuracy >= -0.04, RA-F1 >= +0.01; against none: precision >= +0.15", tier, table,
                  ["awa_g0.2", "data_manip", "none"], build)


def claim_unpredictable(table: dict[str, Any], tier: str = "T1", number: str = "4") -> Claim:
    def build(seeds: list[int]) -> tuple[list[Criterion], dict[str, Any]]:
        dm, awa = (_at(table, tier, a, "late.refusal", seeds) for a in ("data_manip", "awa_g0.5"))
        share = _at(table, tier, "data_manip", "unanswerable_share", seeds)
        numbers = {"data_manip late refusal": dm, "awa_g0.5 late refusal": awa, "unanswerable share": share}
        # a spread over the seeds that happened to log a value is not the spread over the claim's seeds
        unmeasured = {name: [s for s in seeds if s not in values] for name, values in numbers.items()}
        unmeasured = {name: missing for name, missing in unmeasured.items() if missing}
        if unmeasured:
            return [Criterion("a value at every paired seed", False,
                              rule="; ".join(f"no {name} at seed(s) {missing}" for name, missing in unmeasured.items()))], \
                numbers
        spread_dm, spread_awa = max(dm.values()) - min(dm.values()), max(awa.values()) - min(awa.values())
        away = {s: abs(dm[s] - share[s]) for s in seeds}
        unpredictable = round(spread_dm - DM_SPREAD, MARGIN_DIGITS) >= 0 or \
            any(round(v - DM_AWAY, MARGIN_DIGITS) >= 0 for v in away.values())
        # one test over the seeds (a spread, or "at some seed"), so no per-seed margins
        tests = [Criterion(f"data_manip spread >= {DM_SPREAD} or >= {DM_AWAY} from the unanswerable share at some seed",
                           unpredictable, rule=f"spread (max - min over seeds) {spread_dm:.3f}; away "
                           f"{json.dumps({str(s): round(v, 3) for s, v in away.items()})}"),
                 Criterion(f"awa_g0.5 spread < {AWA_SPREAD}", round(AWA_SPREAD - spread_awa, MARGIN_DIGITS) > 0,
                           rule=f"spread {spread_awa:.3f}")]
        if len(seeds) < 2:
            tests.append(Criterion("a spread needs >= 2 seeds", False, rule=f"seeds {seeds}"))
        return tests, numbers
    return _claim(number, "data manipulation is unpredictable (late refusal spread over seeds >= 0.1, or >= 0.15 from the "
                  "unanswerable share at some seed) while AWA γ 0.5's spread is < 0.05", tier, table,
                  ["data_manip", "awa_g0.5"], build)


def claim_regression(table: dict[str, Any]) -> Claim:
    paying = ["awa_g0.5", "static_0.5"]

    def build(seeds: list[int]) -> tuple[list[Criterion], dict[str, Any]]:
        refusal = {a: _at(table, "T3", a, "greedy.refusal_rate", seeds) for a in paying}
        margins = {s: PAYING_TOGETHER - (max(refusal[a][s] for a in paying) - min(refusal[a][s] for a in paying))
                   for s in seeds if all(s in refusal[a] for a in paying)}  # a seed without both: "no value"
        return [seed_test(f"paying arms {', '.join(paying)} within {PAYING_TOGETHER} in held-out refusal", margins)], \
            {"held-out refusal": refusal}
    return _claim("5", "regression control: on world v1 the paying arms end within 0.03 of each other in held-out "
                  "refusal at each seed", "T3", table, paying, build)


def claim_weak_collapse(table: dict[str, Any]) -> Claim:
    def build(seeds: list[int]) -> tuple[list[Criterion], dict[str, Any]]:
        values = {a: _at(table, "T2", a, "late.refusal", seeds) for a in ("static_0.5", "awa_g0.5")}
        return [seed_test(f"{a} late batch refusal >= {DRIFT}", _shift(v, -DRIFT)) for a, v in values.items()], \
            {"late batch refusal": values}
    return _claim("T2a", "from the weak base, static and plain AWA collapse (late batch refusal >= 0.9)", "T2", table,
                  ["static_0.5", "awa_g0.5"], build)


def _yardstick(table: dict[str, Any], seeds: list[int]) -> Criterion:
    """``none``'s greedy reader as the yardstick of "answerable accuracy >= 0.8 x none's": it must answer in the
    protocol's format (unparsable share < 0.5) and be right sometimes (answerable accuracy > 0) at every seed.
    Otherwise 0.8 x none's is 0 and any arm meets it: the comparison says nothing, and the claim cannot hold.
    Added after T2's seed-0 `none` arm ran on the 2.5e-4 base and collapsed into malformed output
    (docs/fidelity.md, "T2 on the 2.5e-4 base"); it only ever makes T2b and T2d harder to hold."""
    none = _at(table, "T2", "none", "greedy.accuracy_answerable", seeds)
    unparsable = _at(table, "T2", "none", "greedy.unparsable", seeds)
    broken = {s: (none.get(s, 0.0), unparsable.get(s, 0.0)) for s in seeds
              if none.get(s, 0.0) <= 0.0 or unparsable.get(s, 0.0) >= YARDSTICK_MAX_UNPARSABLE}
    return Criterion(f"the yardstick reads: none's answerable accuracy > 0 and unparsable share < "
                     f"{YARDSTICK_MAX_UNPARSABLE} at every seed", not broken,
                     rule="yardstick broken at seed(s) " + ", ".join(f"{s} (accuracy {a:.3f}, unparsable {u:.2f})"
                                                                      for s, (a, u) in broken.items())
                     if broken else f"at every seed ({len(seeds)})")


def claim_adaptive(table: dict[str, Any]) -> Claim:
    def build(seeds: list[int]) -> tuple[list[Criterion], dict[str, Any]]:
        acc = _at(table, "T2", "awa_adaptive", "greedy.accuracy_answerable", seeds)
        none = _at(table, "T2", "none", "greedy.accuracy_answerable", seeds)
        recall = _at(table, "T2", "awa_adaptive", "greedy.abstain_recall", seeds)
        return [_yardstick(table, seeds),
                seed_test(f"awa_adaptive answerable accuracy >= {ADAPTIVE_ACCURACY} x none's",
                          {s: acc[s] - ADAPTIVE_ACCURACY * none[s] for s in acc if s in none}),
                seed_test(f"awa_adaptive abstain-recall >= {ADAPTIVE_RECALL}", _shift(recall, -ADAPTIVE_RECALL))], \
            {"awa_adaptive accuracy_answerable": acc, "none accuracy_answerable": none, "awa_adaptive abstain_recall": recall}
    return _claim("T2b", "adaptive-p_i AWA ends with answerable accuracy >= 0.8 x none's and abstain-recall >= 0.8",
                  "T2", table, ["awa_adaptive", "none"], build)


def _all_abstain_tests(table: dict[str, Any], arm: str, seeds: list[int]) -> tuple[list[Criterion], dict[int, Any]]:
    """``arm``'s largest 20-batch window mean of the (sampled) all-abstain group share after batch 50, per seed."""
    runs = table["T2"][arm]["runs"]
    worst = {s: max_window_after(runs[s].batches, "all_abstain", ALL_ABSTAIN_AFTER) for s in seeds}
    tests = [seed_test(f"{arm} all-abstain share (largest 20-batch mean after batch {ALL_ABSTAIN_AFTER}) "
                       f"<= {ALL_ABSTAIN_MAX}", {s: ALL_ABSTAIN_MAX - v for s, v in worst.items() if v is not None})]
    if any(v is None for v in worst.values()):
        tests.append(Criterion(f"{arm} ran at least {ALL_ABSTAIN_AFTER} + {LATE} generation batches", False,
                               rule="too few batches"))
    return tests, worst


def claim_attempt(table: dict[str, Any]) -> Claim:
    def build(seeds: list[int]) -> tuple[list[Criterion], dict[str, Any]]:
        tests, worst = _all_abstain_tests(table, "awa_attempt", seeds)
        return tests, {"largest all-abstain window mean after batch 50": worst}
    return _claim("T2c", "the generation-encouragement arm keeps the all-abstain group share <= 0.3 after batch 50",
                  "T2", table, ["awa_attempt"], build)


def claim_forced(table: dict[str, Any]) -> Claim:
    """Pre-registered with the arm, before it ran: the forced-answer form of generation encouragement keeps
    the groups the policy samples mixed (T2c's bound) and its reader (T2b's accuracy bound)."""
    def build(seeds: list[int]) -> tuple[list[Criterion], dict[str, Any]]:
        tests, worst = _all_abstain_tests(table, "awa_forced", seeds)
        acc = _at(table, "T2", "awa_forced", "greedy.accuracy_answerable", seeds)
        none = _at(table, "T2", "none", "greedy.accuracy_answerable", seeds)
        tests.append(_yardstick(table, seeds))
        tests.append(seed_test(f"awa_forced answerable accuracy >= {ADAPTIVE_ACCURACY} x none's",
                               {s: acc[s] - ADAPTIVE_ACCURACY * none[s] for s in acc if s in none}))
        return tests, {"largest sampled all-abstain window mean after batch 50": worst,
                       "awa_forced accuracy_answerable": acc, "none accuracy_answerable": none}
    return _claim("T2d", "a forced answer in every all-abstain group keeps the sampled all-abstain share <= 0.3 "
                  "after batch 50 and answerable accuracy >= 0.8 x none's", "T2", table, ["awa_forced", "none"], build)


def claim_windup(table: dict[str, Any], guarded: str = "awa_g0.5", number: str = "W") -> Claim:
    """Issue 21's anti-windup, pre-registered with ``awa_off`` and ``awa_bound``: the guarded controller holds
    its target (W1) and recovers within 10 batches of the error turning (W2) where the unguarded one winds
    up (W3: its lowest P_t <= -0.5, or its late refusal more than 0.1 from its target)."""
    def build(seeds: list[int]) -> tuple[list[Criterion], dict[str, Any]]:
        gap = {}
        for arm in (guarded, "awa_off"):
            refusal, target = (_at(table, "T1", arm, f"late.{k}", seeds) for k in ("refusal", "target"))
            gap[arm] = {s: abs(refusal[s] - target[s]) for s in refusal if s in target}
        lags = {s: ((table["T1"][guarded]["per_seed"][s].get("recovery_lags")) or []) for s in seeds}
        worst = {s: max((lag for lag, _ in v), default=0) for s, v in lags.items()}
        low = _at(table, "T1", "awa_off", "min_P", seeds)
        tests = [seed_test(f"{guarded} |late batch refusal - late target| <= {GUARD_GAP}",
                           {s: GUARD_GAP - v for s, v in gap[guarded].items()}),
                 seed_test(f"{guarded} P_t >= 0 within {RECOVERY_MAX} batches after the error turns",
                           {s: RECOVERY_MAX - v for s, v in worst.items()}),
                 seed_test(f"awa_off winds up: lowest P_t <= {WINDUP_P} or |late refusal - late target| > {GUARD_GAP}",
                           {s: max(WINDUP_P - low[s], gap["awa_off"].get(s, 0.0) - GUARD_GAP)
                            for s in seeds if s in low})]  # P_t is quantised: -0.5 itself winds up (<=)
        return tests, {"|late refusal - late target|": gap, f"{guarded} recovery lags (batches, came back)": lags,
                       "awa_off lowest P_t": low}
    return _claim(number, f"the guarded controller ({guarded}) holds its target within {GUARD_GAP} and recovers "
                  f"within {RECOVERY_MAX} batches of the error turning, where the paper's unguarded one (awa_off) "
                  f"winds up", "T1", table, [guarded, "awa_off"], build)


def claims(table: dict[str, Any]) -> list[Claim]:
    """Claims 1-5, the weak-base claims T2a-T2d and the anti-windup claims W / Wb; the floored,
    anti-windup AWA's plateau on the medium base is claim 2 (T1's AWA arms name both guards on). Claims 1-4
    are checked again on T1r's world (numbered 1r-4r), with the same thresholds."""
    again = [claim(table, tier, f"{n}{tier.removeprefix('T1')}") for tier in CLAIM_TIERS if tier != "T1"
             for n, claim in enumerate((claim_drift, claim_plateaus, claim_precision, claim_unpredictable), start=1)]
    return [claim_drift(table), claim_plateaus(table), claim_precision(table), claim_unpredictable(table),
            claim_regression(table), claim_weak_collapse(table), claim_adaptive(table), claim_attempt(table),
            claim_forced(table), claim_windup(table), claim_windup(table, "awa_bound", "Wb"), *again]


def diagnose(table: dict[str, Any], tier: str, arm: str, seed: int) -> str:
    """The logged controller terms of one run's last 20 batches, and what they point to."""
    summary = table[tier][arm]["per_seed"][seed]
    t = summary["late"]
    shown = ", ".join(f"{k} {t[k]:.2f}" for k in ("refusal", "target", "E_ema", "P", "capped", "all_abstain",
                                                   "three_outcome") if t.get(k) is not None)
    notes = []
    if (t.get("all_abstain") or 0) >= 0.9:
        notes.append("refusal collapse: nearly every group abstains on every rollout (zero advantage, absorbing)")
    if (t.get("unparsable") or 0) >= 0.9 or ((summary.get("greedy") or {}).get("unparsable") or 0) >= 0.9:
        notes.append("format collapse: nearly every rollout ends without a parsable answer (zero advantage, absorbing)")
    if (t.get("capped") or 0) >= 0.8 and (t.get("P") or 0) < 0:
        notes.append("the cap binds on most abstentions under a negative P_t (windup: P_t no longer shapes)")
    if t.get("P") is not None and abs(t["P"]) >= 0.95 * STUDY_REWARD["max_penalty"]:
        notes.append("P_t saturated at its bound")
    if t.get("three_outcome") is not None and t["three_outcome"] < 0.1:
        notes.append("few three-outcome groups: under GRPO's std normalisation every paying arm gets the same advantages")
    if t.get("E_ema") is not None and abs(t["E_ema"]) > 0.1:
        notes.append("the smoothed error stays large: the controller has not reached its target")
    wander = plateau_sd(table[tier][arm]["runs"][seed].batches)
    if wander is not None and wander > PLATEAU_WANDER:
        notes.append(f"the late refusal still wanders (window sd {wander:.3f})")
    return f"{tier} {arm} seed {seed}: {shown or 'no controller terms logged'}" + (f" — {'; '.join(notes)}" if notes else "")
