"""Policies: YAML and Bedrock JSON load alike; bad policies fail naming the rule and the problem; lint."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from awarl.verify.lint import lint
from awarl.verify.policy import PolicyError, load_policy, policy_from_dict
from awarl.verify.reasoner import Reasoner

from .conftest import LOAN

POLICIES = Path(__file__).resolve().parents[2] / "configs" / "policies"


def test_yaml_and_bedrock_json_definitions_load_to_the_same_checks(tmp_path, loan):
    yaml_path = tmp_path / "loan.yaml"
    yaml_path.write_text(yaml.safe_dump(LOAN), encoding="utf-8")
    # Bedrock's export: rule readings as alternateExpression, wrapped in policyDefinition.
    json_path = tmp_path / "loan.json"
    json_path.write_text(json.dumps({"policyDefinition": loan.to_definition()}), encoding="utf-8")
    from_yaml, from_json = load_policy(yaml_path), load_policy(json_path)
    assert [r.description for r in from_json.rules] == [r["description"] for r in LOAN["rules"]]
    for premises, claims in ([["(= plan premium)", "(= income 25000)", "(not has_default)"], ["approved"]], [["(= plan basic)"], ["(= rate 3.5)"]]):
        a = Reasoner(from_yaml).check_expressions(premises, claims).to_dict()
        b = Reasoner(from_json).check_expressions(premises, claims).to_dict()
        assert a == b


def _broken(mutate):
    data = copy.deepcopy(LOAN)
    mutate(data)
    return data


@pytest.mark.parametrize(
    "mutate, where, problem",
    [
        (lambda d: d["rules"][1].update(expression="(=> (< salary 20000) (not approved))"), "rule 'income_floor'", "unknown variable 'salary'"),
        (lambda d: d["rules"][0].update(expression="(=> has_default (+ income 1))"), "rule 'default_blocks'", "type mismatch"),
        (lambda d: d["rules"][0].update(expression="(=> has_default income)"), "rule 'default_blocks'", "type mismatch"),
        (lambda d: d["rules"][3].update(expression="(=> (= plan 3) (= rate 3.5))"), "rule 'premium_rate'", "type mismatch"),
        (lambda d: d["rules"][0].update(expression="(+ income 1)"), "rule 'default_blocks'", "not boolean"),
        (lambda d: d["rules"][0].update(expression="(=> has_default (not approved)"), "rule 'default_blocks'", "bad SMT-LIB"),
        (lambda d: d["rules"][0].update(expression="has_default) (assert approved"), "rule 'default_blocks'", "bad SMT-LIB"),
        (lambda d: d["rules"][0].update(expression="(not has_default approved)"), "rule 'default_blocks'", "bad SMT-LIB: wrong number of arguments to 'not'"),
        (lambda d: d["rules"][0].update(expression="(ite has_default)"), "rule 'default_blocks'", "wrong number of arguments to 'ite': 3 expected, 1 given"),
        (lambda d: d["rules"][0].update(expression="(=> (= plan gold) approved)"), "rule 'default_blocks'", "unknown variable 'gold'"),
        (lambda d: d["rules"].append(dict(d["rules"][0])), "rule 'default_blocks'", "duplicate rule id"),
        (lambda d: d["rules"][0].update(expression=""), "rule 'default_blocks'", "missing or empty field 'expression'"),
        (lambda d: d["variables"][0].update(type="Tier"), "variable 'plan'", "unknown type 'Tier'"),
        (lambda d: d["variables"].append({"name": "approved", "type": "bool"}), "variable 'approved'", "name already used"),
        (lambda d: d["variables"].append({"name": "basic", "type": "bool"}), "variable 'basic'", "name already used"),
        (lambda d: d["variables"][2].update(patterns=[{"regex": "(", "value": True}]), "variable 'has_default', patterns[0]", "bad regex"),
        (lambda d: d["variables"][2].update(patterns=[{"phrase": "default", "value": 3}]), "variable 'has_default', patterns[0]", "is bool"),
        (lambda d: d["variables"][2].update(patterns=[{"extract": r"(\d+)"}]), "variable 'has_default', patterns[0]", "int or real"),
        (lambda d: d["types"][0].update(values=[]), "type 'Plan'", "at least one value"),
        (lambda d: d["types"][0].update(values="basic"), "type 'Plan', values", "expected a list, got str"),
        (lambda d: d["variables"][2].update(patterns={"phrase": "x"}), "variable 'has_default', patterns",
         "expected a list, got dict"),
        (lambda d: d.update(rules={"id": "r"}), "rules", "expected a list, got dict"),
    ],
)
def test_bad_policies_name_the_element_and_the_problem(mutate, where, problem):
    with pytest.raises(PolicyError) as err:
        policy_from_dict(_broken(mutate), source="loan.yaml")
    assert err.value.source == "loan.yaml"
    assert err.value.where == where
    assert problem in err.value.problem
    assert str(err.value).startswith(f"loan.yaml, {where}: ")


def test_unreadable_files_are_clear_errors(tmp_path):
    with pytest.raises(PolicyError, match="file not found"):
        load_policy(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text('version: "1.0"\nvariables: {a: 1\nrules: []\n', encoding="utf-8")
    with pytest.raises(PolicyError, match=r"bad.yaml, line 3: not valid YAML: .*','"):
        load_policy(bad)
    bad.write_text('{"version": "1.0",\n "rules": [,]}', encoding="utf-8")
    with pytest.raises(PolicyError, match=r"bad.yaml, line 2: not valid JSON: Expecting value \(column 12\)"):
        load_policy(bad)


def test_a_policy_file_is_parsed_once_and_each_load_gets_its_own_copy(tmp_path):
    from awarl.verify.policy import read_document

    path = tmp_path / "p.yaml"
    path.write_text((POLICIES / "pricing.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    first = read_document(path)
    first["rules"].clear()  # a caller changing its copy changes nobody else's
    assert read_document(path)["rules"] and len(load_policy(path).rules) == len(load_policy(POLICIES / "pricing.yaml").rules)
    one_rule = {**read_document(path), "rules": read_document(path)["rules"][:1]}
    path.write_text(json.dumps(one_rule), encoding="utf-8")
    assert len(read_document(path)["rules"]) == 1  # new bytes: parsed anew


def test_premise_parse_errors_name_the_expression(loan):
    with pytest.raises(PolicyError, match=r"premise 0: unknown variable 'salary'"):
        Reasoner(loan).check_expressions(["(> salary 3)"], ["approved"])


def test_lint_reports_conflicts_unused_variables_and_dead_rules():
    data = _broken(lambda d: d["rules"].extend([
        # conflicts with premium_approved when both conditions hold
        {"id": "premium_manual_review", "expression": "(=> (and (= plan premium) (> income 100000)) (not approved))"},
        # its condition contradicts income_floor ∧ premium_approved? no: it is impossible on its own
        {"id": "never", "expression": "(=> (and (> income 10) (< income 5)) approved)"},
    ]))
    data["variables"].append({"name": "region", "type": "int", "description": "unused"})
    issues = lint(policy_from_dict(data))
    kinds = {(i.kind, i.rules[:2] if i.rules else i.variable) for i in issues}
    assert ("unused_variable", "region") in kinds
    assert ("never_fires", ("never",)) in kinds
    conflicts = [i for i in issues if i.kind == "conflict"]
    assert len(conflicts) == 1 and set(conflicts[0].rules) == {"premium_approved", "premium_manual_review"}


def test_lint_reports_an_inconsistent_rule_set_with_its_minimal_core():
    data = _broken(lambda d: d["rules"].extend([
        {"id": "always_approved", "expression": "approved"},
        {"id": "always_default", "expression": "has_default"},
    ]))
    issues = lint(policy_from_dict(data))
    assert [i.kind for i in issues if i.severity == "error"] == ["conflict"]
    assert set(issues[-1].rules) == {"default_blocks", "always_approved", "always_default"}


@pytest.mark.parametrize("name", ["pricing", "benefits"])
def test_shipped_policies_load_and_lint_clean(name):
    policy = load_policy(POLICIES / f"{name}.yaml")
    assert not [i for i in lint(policy) if i.severity != "info"]
    if name == "benefits":
        assert len(policy.rules) >= 100
    # each rule's variables, as the sort checker read them, are those its Z3 term holds
    assert {r.id: set(policy.variables_in([policy.compiled[r.id]])) for r in policy.rules} == \
        {r.id: set(policy.rule_variables[r.id]) for r in policy.rules}


def test_benefits_policy_is_up_to_date_with_its_generator():
    import subprocess
    import sys

    script = POLICIES.parents[1] / "scripts" / "gen_benefits_policy.py"
    done = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
