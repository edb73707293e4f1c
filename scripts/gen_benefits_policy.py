"""Write configs/policies/benefits.yaml (an employee-benefits policy of 100+ rules) and its tests.

The policy is generated from the table `BENEFITS` below so that its rules stay consistent; the
expected result of every test comes from `eligible()`, a plain-Python reading of the same table,
not from running the checker, so the tests check the checker.

    python scripts/gen_benefits_policy.py            # rewrite both files
    python scripts/gen_benefits_policy.py --check    # exit 1 if the committed files are stale
"""

from __future__ import annotations

import argparse
import itertools
import random
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

OUT = Path(__file__).resolve().parents[1] / "configs" / "policies"
TYPES = ("full_time", "part_time", "contractor", "intern")
REGIONS = ("us", "eu", "uk", "apac")
PROBATION_MONTHS = 6
MAX_HOURS = 80


@dataclass(frozen=True)
class Benefit:
    key: str
    name: str  # how people write it; also the pattern translator's phrase
    min_tenure: int  # months
    min_hours: int  # per week
    excluded_types: tuple[str, ...] = ()
    excluded_regions: tuple[str, ...] = ()
    blocked_on_probation: bool = False
    needs_dependents: bool = False
    amount: int | None = None  # yearly value in dollars, when the benefit has one


BENEFITS = (
    Benefit("health_insurance", "health insurance", 0, 20, ("contractor",), amount=6000),
    Benefit("dental", "dental coverage", 3, 20, ("contractor",), amount=1200),
    Benefit("vision", "vision coverage", 3, 20, ("contractor",), amount=400),
    Benefit("life_insurance", "life insurance", 6, 30, ("contractor", "intern"), blocked_on_probation=True, amount=2000),
    Benefit("retirement_match", "retirement match", 12, 20, ("contractor", "intern"), blocked_on_probation=True, amount=3000),
    Benefit("parental_leave", "parental leave", 12, 20, ("contractor",), blocked_on_probation=True, needs_dependents=True, amount=10000),
    Benefit("sabbatical", "sabbatical", 60, 35, ("contractor", "intern", "part_time"), blocked_on_probation=True, amount=8000),
    Benefit("tuition", "tuition reimbursement", 12, 30, ("contractor",), ("apac",), True, amount=5000),
    Benefit("gym", "gym stipend", 0, 0, ("contractor",), amount=600),
    Benefit("commuter", "commuter benefit", 0, 0, (), ("apac",), amount=900),
    Benefit("remote", "remote work stipend", 6, 30, ("intern",), blocked_on_probation=True, amount=500),
    Benefit("stock", "stock options", 12, 35, ("contractor", "intern", "part_time"), blocked_on_probation=True, amount=20000),
    Benefit("bonus", "annual bonus", 6, 35, ("contractor", "intern"), blocked_on_probation=True, amount=4000),
    Benefit("relocation", "relocation support", 0, 35, ("contractor", "intern", "part_time"), ("uk",), amount=7000),
    Benefit("childcare", "childcare subsidy", 6, 20, ("contractor", "intern"), ("us",), True, True, amount=3600),
    Benefit("wellness", "wellness days", 3, 0, ("contractor",)),
    Benefit("volunteering", "paid volunteering", 6, 20, ("contractor",), blocked_on_probation=True),
    Benefit("mental_health", "mental health program", 1, 0),
    Benefit("pet_insurance", "pet insurance", 12, 30, ("contractor", "intern"), ("eu",), True, amount=300),
    Benefit("home_office", "home office budget", 3, 20, ("contractor",), blocked_on_probation=True, amount=1000),
    Benefit("language", "language courses", 6, 20, ("contractor",), ("us",), True, amount=800),
    Benefit("conference", "conference budget", 12, 35, ("contractor", "intern"), blocked_on_probation=True, amount=2500),
)


def _or_equal(var: str, values: tuple[str, ...]) -> str:
    terms = [f"(= {var} {v})" for v in values]
    return terms[0] if len(terms) == 1 else f"(or {' '.join(terms)})"


def _words(name: str) -> str:
    return r"\s+".join(name.split())


def policy() -> dict:
    variables = [
        {"name": "employment_type", "type": "EmploymentType", "role": "premise",
         "description": "How the person is employed: full-time, part-time, contractor or intern.",
         "patterns": [{"phrase": "full-time", "value": "full_time"}, {"phrase": "part-time", "value": "part_time"},
                      {"regex": r"\bcontractors?\b", "value": "contractor"}, {"regex": r"\binterns?\b|\binternship\b", "value": "intern"}]},
        {"name": "region", "type": "Region", "role": "premise",
         "description": "Where the person is employed: US, EU, UK or APAC.",
         "patterns": [{"regex": r"\bthe (US|USA|United States)\b|\bAmerica\b", "value": "us"},
                      {"regex": r"\bthe EU\b|\bEurope\b|\bGermany\b|\bFrance\b", "value": "eu"},
                      {"regex": r"\bthe UK\b|\bUnited Kingdom\b|\bBritain\b|\bLondon\b", "value": "uk"},
                      {"regex": r"\bAPAC\b|\bAsia\b|\bSingapore\b|\bAustralia\b", "value": "apac"}]},
        {"name": "tenure_months", "type": "int", "role": "premise",
         "description": "Months since the person joined (years count 12 months each).",
         "patterns": [{"extract": r"(\d+)\s*months?"}, {"extract": r"(\d+)\s*years?", "scale": 12}]},
        {"name": "weekly_hours", "type": "int", "role": "premise",
         "description": "Contracted working hours per week.",
         "patterns": [{"extract": r"(\d+)\s*hours"}]},
        {"name": "dependents", "type": "int", "role": "premise",
         "description": "Number of children or other dependents.",
         "patterns": [{"regex": r"\bno (children|kids|dependents)\b", "value": 0},
                      {"extract": r"(\d+)\s*(?:children|kids|dependents)\b"}]},
        {"name": "on_probation", "type": "bool", "role": "premise",
         "description": "True during the first six months of employment (the probation period).",
         "patterns": [{"regex": r"\b(not on probation|passed (my )?probation|finished (my )?probation)\b", "value": False},
                      {"regex": r"\bon probation\b", "value": True}]},
    ]
    rules = [
        {"id": "tenure_nonnegative", "expression": "(>= tenure_months 0)", "description": "Tenure is never negative."},
        {"id": "hours_range", "expression": f"(and (>= weekly_hours 0) (<= weekly_hours {MAX_HOURS}))",
         "description": f"Contracted hours are between 0 and {MAX_HOURS} a week."},
        {"id": "dependents_nonnegative", "expression": "(>= dependents 0)", "description": "The number of dependents is never negative."},
        {"id": "probation_first_months", "expression": f"(=> (< tenure_months {PROBATION_MONTHS}) on_probation)",
         "description": f"Everyone is on probation during their first {PROBATION_MONTHS} months."},
        {"id": "probation_ends", "expression": f"(=> (>= tenure_months {PROBATION_MONTHS}) (not on_probation))",
         "description": f"Probation ends after {PROBATION_MONTHS} months."},
    ]
    for b in BENEFITS:
        elig = f"eligible_{b.key}"
        neg = r"(?:not|n't)\s+(?:be\s+)?(?:eligible|entitled|qualify|qualified)\s+(?:for|to)|\bineligible\s+for|(?:not|n't)\s+(?:get|receive)|\bno"
        pos = r"(?:eligible|entitled|qualify|qualified)\s+(?:for|to)|\b(?:get|receive|have)"
        variables.append({
            "name": elig, "type": "bool", "role": "claim",
            "description": f"True when the person is eligible for {b.name}.",
            "patterns": [{"regex": rf"(?:{neg})\s+(?:the\s+|a\s+|an\s+)?{_words(b.name)}\b", "value": False},
                         {"regex": rf"(?:{pos})\s+(?:the\s+|a\s+|an\s+)?{_words(b.name)}\b", "value": True}],
        })
        blocks = []
        if b.min_tenure > 0:
            blocks.append((f"{b.key}_tenure", f"(< tenure_months {b.min_tenure})", f"{b.name} needs at least {b.min_tenure} months of tenure"))
        if b.min_hours > 0:
            blocks.append((f"{b.key}_hours", f"(< weekly_hours {b.min_hours})", f"{b.name} needs at least {b.min_hours} contracted hours a week"))
        if b.excluded_types:
            blocks.append((f"{b.key}_employment", _or_equal("employment_type", b.excluded_types),
                           f"{', '.join(b.excluded_types)} are not eligible for {b.name}"))
        if b.excluded_regions:
            blocks.append((f"{b.key}_region", _or_equal("region", b.excluded_regions), f"{b.name} is not offered in {', '.join(b.excluded_regions)}"))
        if b.blocked_on_probation:
            blocks.append((f"{b.key}_probation", "on_probation", f"{b.name} is not available during probation"))
        if b.needs_dependents:
            blocks.append((f"{b.key}_dependents", "(< dependents 1)", f"{b.name} needs at least one dependent"))
        for rid, cond, text in blocks:
            rules.append({"id": rid, "expression": f"(=> {cond} (not {elig}))", "description": text[0].upper() + text[1:] + "."})
        conds = [f"(not {cond})" for _, cond, _ in blocks]
        grant = conds[0] if len(conds) == 1 else f"(and {' '.join(conds)})"
        rules.append({"id": f"{b.key}_grant", "expression": f"(=> {grant} {elig})",
                      "description": f"Everyone who meets all conditions of {b.name} is eligible for it."})
        if b.amount is not None:
            amount = f"{b.key}_amount"
            variables.append({
                "name": amount, "type": "int", "role": "claim",
                "description": f"Yearly value of {b.name} in dollars (0 when not eligible).",
                "patterns": [{"extract": rf"{_words(b.name)}\s+(?:is\s+worth|is|of|worth)\s+\$\s*(\d+)"}],
            })
            rules.append({"id": f"{b.key}_value", "expression": f"(=> {elig} (= {amount} {b.amount}))",
                          "description": f"{b.name[0].upper() + b.name[1:]} is worth ${b.amount} a year."})
            rules.append({"id": f"{b.key}_no_value", "expression": f"(=> (not {elig}) (= {amount} 0))",
                          "description": f"Without eligibility, {b.name} is worth nothing."})
    return {
        "version": "1.0",
        "types": [
            {"name": "EmploymentType", "description": "Kinds of employment.",
             "values": [{"value": v, "description": v.replace("_", "-")} for v in TYPES]},
            {"name": "Region", "description": "Regions with their own benefits.",
             "values": [{"value": v, "description": v.upper()} for v in REGIONS]},
        ],
        "variables": variables,
        "rules": rules,
    }


# -- the oracle: a plain reading of BENEFITS --------------------------------------------------
def eligible(b: Benefit, facts: dict) -> bool:
    probation = facts["tenure_months"] < PROBATION_MONTHS
    return (
        facts["tenure_months"] >= b.min_tenure
        and facts["weekly_hours"] >= b.min_hours
        and facts["employment_type"] not in b.excluded_types
        and facts["region"] not in b.excluded_regions
        and not (b.blocked_on_probation and probation)
        and not (b.needs_dependents and facts["dependents"] < 1)
    )


def _domain(name: str) -> list:
    if name == "employment_type":
        return list(TYPES)
    if name == "region":
        return list(REGIONS)
    if name == "tenure_months":
        return sorted({0, 200} | {b.min_tenure for b in BENEFITS} | {max(0, b.min_tenure - 1) for b in BENEFITS} | {5, 6})
    if name == "weekly_hours":
        return sorted({0, MAX_HOURS} | {b.min_hours for b in BENEFITS} | {max(0, b.min_hours - 1) for b in BENEFITS})
    return [0, 1, 3]


def possible(b: Benefit, facts: dict, omitted: tuple[str, ...]) -> set[bool]:
    out = set()
    for values in itertools.product(*[_domain(n) for n in omitted]):
        out.add(eligible(b, {**facts, **dict(zip(omitted, values))}))
    return out


_TYPE_TEXT = {"full_time": "a full-time employee", "part_time": "a part-time employee", "contractor": "a contractor", "intern": "an intern"}
_REGION_TEXT = {"us": "the US", "eu": "the EU", "uk": "the UK", "apac": "APAC"}


def _question(facts: dict, omitted: tuple[str, ...], b: Benefit) -> str:
    parts = []
    if "employment_type" not in omitted:
        parts.append(f"I am {_TYPE_TEXT[facts['employment_type']]}")
    else:
        parts.append("I work here")
    if "region" not in omitted:
        parts.append(f"based in {_REGION_TEXT[facts['region']]}")
    text = " ".join(parts)
    extras = []
    if "tenure_months" not in omitted:
        extras.append(f"I joined {facts['tenure_months']} months ago")
    if "weekly_hours" not in omitted:
        extras.append(f"I work {facts['weekly_hours']} hours a week")
    if "dependents" not in omitted:
        extras.append(f"I have {facts['dependents']} children" if facts["dependents"] else "I have no children")
    return f"{text}. {'. '.join(extras)}. Can I get {b.name}?"


def tests(seed: int = 7, n: int = 36) -> dict:
    rng = random.Random(seed)
    cases = []
    fact_names = ("employment_type", "region", "tenure_months", "weekly_hours", "dependents")
    for i in range(n):
        b = BENEFITS[i % len(BENEFITS)]
        facts = {
            "employment_type": rng.choice(TYPES), "region": rng.choice(REGIONS),
            "tenure_months": rng.choice(_domain("tenure_months")), "weekly_hours": rng.choice([10, 20, 25, 32, 40]),
            "dependents": rng.choice([0, 1, 2]),
        }
        omitted = (rng.choice(fact_names),) if i % 3 == 2 else ()
        can = possible(b, facts, omitted)
        if i % 4 == 3 and b.amount is not None and not omitted:
            value = b.amount if rng.random() < 0.5 else b.amount + 100
            answer = f"Your {b.name} is worth ${value}."
            expected = "VALID" if can == {True} and value == b.amount else "INVALID"
        else:
            claim = rng.random() < 0.5
            answer = f"Yes, you are eligible for {b.name}." if claim else f"No, you are not eligible for {b.name}."
            expected = "VALID" if can == {claim} else "INVALID" if claim not in can else "SATISFIABLE"
        cases.append({"name": f"{b.key} #{i}", "question": _question(facts, omitted, b), "answer": answer, "expected": expected})
    cases += [
        {"name": "probation contradicts tenure", "question": "I am a full-time employee in the UK. I joined 3 months ago and I am not on probation.",
         "answer": "You are eligible for dental coverage.", "expected": "IMPOSSIBLE"},
        {"name": "hours beyond the contract limit", "question": "I am a full-time employee in the US and I work 95 hours a week.",
         "answer": "You are eligible for the gym stipend.", "expected": "IMPOSSIBLE"},
        {"name": "nothing about benefits", "question": "What time does the office open?",
         "answer": "The office opens at nine.", "expected": "NO_TRANSLATIONS"},
    ]
    return {"tests": cases}


def _render(data: dict, what: str) -> str:
    header = f"# {what}\n# Generated by scripts/gen_benefits_policy.py; edit the script, not this file.\n"
    return header + yaml.safe_dump(data, sort_keys=False, width=200, allow_unicode=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="Only check that the committed files are up to date.")
    args = parser.parse_args()
    files = {
        OUT / "benefits.yaml": _render(policy(), "Employee benefits: eligibility and yearly value of 22 benefits."),
        OUT / "benefits.tests.yaml": _render(tests(), "Policy tests for benefits.yaml (question, answer, expected aggregated result)."),
    }
    stale = [p for p, text in files.items() if not p.exists() or p.read_text(encoding="utf-8") != text]
    if args.check:
        for p in stale:
            print(f"stale: {p}")
        return 1 if stale else 0
    for p, text in files.items():
        p.write_text(text, encoding="utf-8")
        print(f"wrote {p}")
    print(f"{len(policy()['rules'])} rules, {len(policy()['variables'])} variables, {len(tests()['tests'])} tests")
    return 0


if __name__ == "__main__":
    sys.exit(main())
