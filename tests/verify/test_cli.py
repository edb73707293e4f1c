"""`awarl verify check | lint | test` in-process through the root CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from awarl.cli import app

from .conftest import LOAN

POLICIES = Path(__file__).resolve().parents[2] / "configs" / "policies"
PRICING = str(POLICIES / "pricing.yaml")


@pytest.fixture
def runner():
    return CliRunner()


def test_check_premises_and_claims_prints_findings_json(runner):
    out = runner.invoke(app, ["verify", "check", "--policy", PRICING, "--premise", "(= tier gold)", "--premise", "(not is_sale_item)",
                              "--claim", "(= discount_percent 15)", "--json"])
    assert out.exit_code == 0, out.output
    [f] = json.loads(out.output)["findings"]
    assert f["result"] == "VALID" and f["supporting_rules"] == ["gold_discount"] and f["contradicting_rules"] == []
    assert f["claims_true_scenario"] == {"tier": "gold", "is_sale_item": False, "discount_percent": 15}


def test_check_satisfiable_shows_both_scenarios(runner):
    out = runner.invoke(app, ["verify", "check", "--policy", PRICING, "--premise", "(= tier gold)", "--claim", "(= discount_percent 15)", "--json"])
    [f] = json.loads(out.output)["findings"]
    assert f["result"] == "SATISFIABLE"
    assert f["claims_true_scenario"] == {"is_sale_item": False, "discount_percent": 15}
    assert f["claims_false_scenario"] == {"is_sale_item": True, "discount_percent": 0}


def test_check_question_and_answer_with_the_pattern_translator(runner):
    out = runner.invoke(app, ["verify", "check", "--policy", PRICING, "--question", "I have a silver membership and my order is $30.",
                              "--answer", "You get 10% off. Your order ships for free.", "--translator", "pattern", "--json"])
    assert out.exit_code == 0, out.output
    results = [(f["result"], f["contradicting_rules"]) for f in json.loads(out.output)["findings"]]
    assert results == [("SATISFIABLE", []), ("INVALID", ["small_orders_pay_shipping"])]
    human = runner.invoke(app, ["verify", "check", "--policy", PRICING, "--question", "I have a silver membership and my order is $30.",
                                "--answer", "Your order ships for free."])
    assert human.output.startswith("aggregated: INVALID")
    assert "contradicting rule small_orders_pay_shipping: Orders under $50 pay shipping" in human.output


def test_check_with_the_llm_translator_and_citation_gates(runner, chat_server, tmp_path):
    sample = json.dumps({"statements": [{"premises": [{"logic": "(= tier gold)", "natural_language": "gold member"}],
                                         "claims": [{"logic": "free_shipping", "natural_language": "free shipping"}]}]})
    server = chat_server(lambda body: (200, [sample] * body["n"]))
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"id": "p1", "title": "Shipping", "text": "Gold members always get free shipping."}) + "\n", encoding="utf-8")
    out = runner.invoke(app, ["verify", "check", "--policy", PRICING, "--question", "I am a gold member.",
                              "--answer", "You get free shipping [p1] [p9].", "--translator", "llm", "--llm-url", server.base_url,
                              "--llm-model", "m", "--samples", "3", "--corpus", str(corpus), "--json"])
    assert out.exit_code == 0, out.output
    findings = json.loads(out.output)["findings"]
    assert findings[0]["result"] == "VALID" and findings[0]["translation"]["confidence"] == 1.0
    assert findings[0]["supporting_rules"] == ["gold_free_shipping"]
    assert [(f["result"], f["citation"]["kind"], f["citation"]["passage_id"]) for f in findings[1:]] == [("INVALID", "fabricated", "p9")]


def test_check_errors_are_clear(runner, tmp_path):
    out = runner.invoke(app, ["verify", "check", "--policy", PRICING, "--claim", "(= discount 15)"])
    assert out.exit_code == 2 and "claim 0: unknown variable 'discount'" in out.output
    out = runner.invoke(app, ["verify", "check", "--policy", str(tmp_path / "none.yaml"), "--claim", "x"])
    assert out.exit_code == 2 and "file not found" in out.output
    out = runner.invoke(app, ["verify", "check", "--policy", PRICING])
    assert out.exit_code == 2 and "give --claim" in out.output
    out = runner.invoke(app, ["verify", "check", "--policy", PRICING, "--answer", "x", "--translator", "llm"])
    assert out.exit_code == 2 and "--llm-url" in out.output


def test_lint_exit_codes(runner, tmp_path):
    assert runner.invoke(app, ["verify", "lint", PRICING]).exit_code == 0
    bad = dict(LOAN, rules=[*LOAN["rules"], {"id": "never", "expression": "(=> (and (> income 10) (< income 5)) approved)"}])
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad), encoding="utf-8")
    out = runner.invoke(app, ["verify", "lint", str(path), "--json"])
    assert out.exit_code == 1
    assert [i["kind"] for i in json.loads(out.stdout)["issues"]] == ["never_fires"]


@pytest.mark.parametrize("name", ["pricing", "benefits"])
def test_shipped_policy_tests_pass(runner, name):
    out = runner.invoke(app, ["verify", "test", str(POLICIES / f"{name}.yaml"), "--json"])
    assert out.exit_code == 0, out.output
    report = json.loads(out.output)
    assert report["failed"] == 0 and report["passed"] >= 10


def test_a_failing_policy_test_fails_the_command(runner, tmp_path):
    tests = tmp_path / "t.yaml"
    tests.write_text(yaml.safe_dump({"tests": [{"queryContent": "I am a gold member buying a regular-priced jacket for $80.",
                                                 "guardContent": "You get 10% off.", "expectedAggregatedFindingsResult": "VALID"}]}), encoding="utf-8")
    out = runner.invoke(app, ["verify", "test", PRICING, "--tests", str(tests)])
    assert out.exit_code == 1 and "FAIL test 0: expected VALID, got INVALID" in out.output
    tests.write_text(yaml.safe_dump({"tests": [{"question": "q", "expected": "VALID"}]}), encoding="utf-8")
    out = runner.invoke(app, ["verify", "test", PRICING, "--tests", str(tests)])
    assert out.exit_code == 2 and "tests[0], field 'answer': missing" in out.output


def test_verify_package_imports_without_torch():
    code = ("import sys, awarl.verify.cli, awarl.verify.reasoner, awarl.verify.translate, awarl.verify.citations, "
            "awarl.verify.lint, awarl.verify.policy_tests; assert 'torch' not in sys.modules, 'torch imported'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
