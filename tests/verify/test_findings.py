"""Findings: JSON round trip, Bedrock payload conversion, aggregation."""

from __future__ import annotations

import json

import pytest

from awarl.verify.findings import (
    Finding,
    FindingsError,
    Result,
    Scenario,
    aggregate,
    findings_from_bedrock,
    findings_from_json,
    findings_to_json,
    sort_findings,
)
from awarl.verify.reasoner import Reasoner

ARN = "arn:aws:bedrock:us-east-1:123456789012:automated-reasoning-policy/abc123:1"


def _stmt(logic, nl):
    return {"logic": logic, "naturalLanguage": nl}


def _translation(confidence=1.0):
    return {
        "premises": [_stmt("(= plan premium)", "The customer has a premium plan.")],
        "claims": [_stmt("approved", "The loan is approved.")],
        "untranslatedPremises": [{"text": "Hi!"}],
        "untranslatedClaims": [],
        "confidence": confidence,
    }


# One member of each kind of Bedrock's findings union, as its API reference documents them.
BEDROCK_RESPONSE = {
    "usage": {"topicPolicyUnits": 0, "automatedReasoningPolicyUnits": 2},
    "action": "NONE",
    "outputs": [],
    "assessments": [
        {
            "automatedReasoningPolicy": {
                "findings": [
                    {"valid": {
                        "translation": _translation(),
                        "claimsTrueScenario": {"statements": [_stmt("(= plan premium)", ""), _stmt("approved", ""), _stmt("(= income 30000)", "")]},
                        "supportingRules": [{"identifier": "premium_approved", "policyVersionArn": ARN}],
                        "logicWarning": {"type": "ALWAYS_TRUE", "premises": [], "claims": [_stmt("(or approved (not approved))", "")]},
                    }},
                    {"invalid": {"translation": _translation(), "contradictingRules": [{"identifier": "default_blocks", "policyVersionArn": ARN}]}},
                    {"satisfiable": {
                        "translation": _translation(),
                        "claimsTrueScenario": {"statements": [_stmt("(= has_default false)", ""), _stmt("(= rate 3.5)", "")]},
                        "claimsFalseScenario": {"statements": [_stmt("(= has_default true)", ""), _stmt("(= income (- 5))", "")]},
                    }},
                    {"impossible": {"translation": _translation(), "contradictingRules": [{"identifier": "income_floor", "policyVersionArn": ARN}]}},
                    {"translationAmbiguous": {
                        "options": [{"translations": [_translation(0.5)]}, {"translations": [_translation(0.5)]}],
                        "differenceScenarios": [{"statements": [_stmt("(not approved)", "")]}],
                    }},
                    {"tooComplex": {}},
                    {"noTranslations": {}},
                ]
            }
        }
    ],
}


def test_bedrock_response_converts_member_by_member():
    check = findings_from_bedrock(BEDROCK_RESPONSE)
    assert check.ran and check.policy_units == 2
    results = [f.result for f in check.findings]
    assert results == [Result.VALID, Result.INVALID, Result.SATISFIABLE, Result.IMPOSSIBLE,
                       Result.TRANSLATION_AMBIGUOUS, Result.TOO_COMPLEX, Result.NO_TRANSLATIONS]
    valid, invalid, sat, impossible, ambiguous = check.findings[:5]
    assert valid.supporting_rules[0].identifier == "premium_approved"
    assert valid.supporting_rules[0].policy_version_arn == ARN
    assert valid.claims_true_scenario.assignments == {"plan": "premium", "approved": True, "income": 30000}
    assert valid.logic_warning.type.value == "ALWAYS_TRUE"
    assert valid.translation.premises[0].natural_language == "The customer has a premium plan."
    assert valid.translation.untranslated_premises == ["Hi!"]
    assert [r.identifier for r in invalid.contradicting_rules] == ["default_blocks"]
    assert sat.claims_false_scenario.assignments == {"has_default": True, "income": -5}
    assert sat.claims_true_scenario.assignments["rate"] == 3.5
    assert [r.identifier for r in impossible.contradicting_rules] == ["income_floor"]
    assert len(ambiguous.options) == 2 and ambiguous.options[0][0].confidence == 0.5
    assert ambiguous.difference_scenarios[0].assignments == {"approved": False}
    assert aggregate(check.findings) is Result.TRANSLATION_AMBIGUOUS


def test_bedrock_round_trip_keeps_the_documented_shape():
    members = BEDROCK_RESPONSE["assessments"][0]["automatedReasoningPolicy"]["findings"]
    again = [f.to_bedrock() for f in findings_from_bedrock(members).findings]
    assert [list(m) for m in again] == [list(m) for m in members]
    assert again[0]["valid"]["supportingRules"] == members[0]["valid"]["supportingRules"]
    assert again[2]["satisfiable"]["claimsFalseScenario"]["statements"][1]["logic"] == "(= income (- 5))"
    assert again[4]["translationAmbiguous"]["options"][1]["translations"][0]["confidence"] == 0.5


def test_zero_policy_units_means_the_checker_did_not_run():
    response = {"usage": {"automatedReasoningPolicyUnits": 0}, "assessments": [{"automatedReasoningPolicy": {"findings": []}}]}
    check = findings_from_bedrock(response)
    assert not check.ran and check.findings == []
    assert aggregate(check.findings) is None  # "no findings" never reads as VALID


@pytest.mark.parametrize(
    "payload, message",
    [
        ([{"valid": {}, "invalid": {}}], "exactly one of"),
        ([{"bogus": {}}], "exactly one of"),
        ([{"valid": {"translation": {"premises": [{"naturalLanguage": "x"}]}}}], "findings[0].valid.translation.premises[0]"),
        ([{"valid": {"translation": {"confidence": 2}}}], "confidence"),
        ({"something": 1}, "expected an ApplyGuardrail response"),
    ],
)
def test_malformed_bedrock_payloads_name_the_path(payload, message):
    with pytest.raises(FindingsError, match=message.replace("[", r"\[").replace("]", r"\]")):
        findings_from_bedrock(payload)


def test_json_round_trip_of_reasoner_findings(loan):
    reasoner = Reasoner(loan)
    findings = [
        reasoner.check_expressions(["(= plan premium)", "(= income 30000)", "(not has_default)"], ["approved"]),
        reasoner.check_expressions(["has_default"], ["approved"]),
        reasoner.check_expressions(["(= plan premium)"], ["approved"]),
        reasoner.check_expressions(["has_default", "(not has_default)"], ["approved"]),
    ]
    text = json.dumps(findings_to_json(findings))
    back = findings_from_json(json.loads(text))
    assert [f.to_dict() for f in back] == [f.to_dict() for f in findings]
    assert back[0].supporting_rules[0].description == "Premium customers with enough income and no default are approved."


def test_aggregate_and_sort_follow_one_severity_order():
    fs = [Finding(Result.VALID), Finding(Result.NO_TRANSLATIONS), Finding(Result.INVALID), Finding(Result.TOO_COMPLEX), Finding(Result.SATISFIABLE)]
    assert aggregate(fs) is Result.INVALID
    assert [f.result for f in sort_findings(fs)] == [Result.INVALID, Result.SATISFIABLE, Result.VALID, Result.TOO_COMPLEX, Result.NO_TRANSLATIONS]
    assert aggregate([Finding(Result.TOO_COMPLEX), Finding(Result.NO_TRANSLATIONS)]) is Result.TOO_COMPLEX
    assert aggregate([Finding(Result.IMPOSSIBLE), Finding(Result.TRANSLATION_AMBIGUOUS)]) is Result.TRANSLATION_AMBIGUOUS


def test_scenario_statements_and_assignments_agree():
    s = Scenario(assignments={"approved": False, "income": -3, "plan": "basic", "rate": 2.5})
    assert [st.logic for st in s.statements] == ["(= approved false)", "(= income (- 3))", "(= plan basic)", "(= rate 2.5)"]
    assert Scenario(statements=s.statements).assignments == s.assignments


def test_the_kinds_table_covers_every_result_and_orders_serving():
    from awarl.verify.findings import BADGE_KIND, KINDS, kind_of

    assert {r.value for r in Result} <= set(KINDS)
    assert {k for k, row in KINDS.items() if row.askable} == {"SATISFIABLE", "TRANSLATION_AMBIGUOUS"}
    rank = {k: row.rank for k, row in KINDS.items()}
    assert rank["VALID"] < rank["SATISFIABLE"] < rank["ABSTAINED"] < rank["NO_TRANSLATIONS"] < rank["INVALID"]
    assert all(row.badge in BADGE_KIND and row.style and row.label and row.summary for row in KINDS.values())
    assert kind_of([Finding(Result.VALID), Finding(Result.NO_TRANSLATIONS)]) == "PARTLY_VALID"
    assert kind_of([Finding(Result.SATISFIABLE)]) == "SATISFIABLE" and kind_of([]) is None


def test_a_kind_bedrock_has_no_member_for_is_refused_by_to_bedrock(monkeypatch):
    import awarl.verify.findings as findings

    monkeypatch.delitem(findings._BEDROCK_KEY, Result.TOO_COMPLEX)  # as for a kind of awarl's own
    with pytest.raises(FindingsError, match="a TOO_COMPLEX finding has no Bedrock form"):
        Finding(Result.TOO_COMPLEX).to_bedrock()
