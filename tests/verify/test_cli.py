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
    out = runner.invoke(app, ["verify", "check", "--policy", PRICING, "--premise", "(= is_sale_item 1)", "--claim", "(= discount_percent 0)"])
    assert out.exit_code == 2 and "premise 0: type mismatch: '=' compares bool 'is_sale_item' with int '1'" in " ".join(out.output.split())
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


@pytest.mark.parametrize(
    "text, problem",
    [
        ("foo: 1\n", "not a policy: missing 'variables' and 'rules'; found 'foo'"),
        ("", "not a policy: the file is empty"),
        ("- a\n- b\n", "not a policy: expected a mapping"),
        ((POLICIES / "corrections.yaml").read_text(encoding="utf-8"), "not a policy: missing 'variables' and 'rules'; found 'corrections' (this looks like a corrections file)"),
        ((POLICIES / "pricing.tests.yaml").read_text(encoding="utf-8"), "not a policy: missing 'variables' and 'rules'; found 'tests' (this looks like a policy tests file)"),
        ("variables: [{name: a, type: bool}]\n", "not a policy: missing 'rules'; found 'variables'"),
    ],
)
def test_lint_refuses_files_that_are_not_policies(runner, tmp_path, text, problem):
    path = tmp_path / "some.yaml"
    path.write_text(text, encoding="utf-8")
    out = runner.invoke(app, ["verify", "lint", str(path)])
    assert out.exit_code == 2, out.output
    assert f"{path}: {problem}" in " ".join(out.output.split()), out.output
    assert "issue(s)" not in out.output


def test_lint_and_check_name_unreadable_files(runner, tmp_path):
    latin = tmp_path / "latin.yaml"
    text = "variables: [{name: a, type: bool, description: 'caf\xe9'}]\n"
    latin.write_bytes(text.encode("latin-1"))
    out = runner.invoke(app, ["verify", "lint", str(latin)])
    assert out.exit_code == 2 and f"{latin}, byte {text.index(chr(0xe9))}: not UTF-8 text (byte 0xe9)" in " ".join(out.output.split())
    out = runner.invoke(app, ["verify", "check", "--policy", str(tmp_path), "--claim", "a"])
    assert out.exit_code == 2 and "is a folder" in out.output
    out = runner.invoke(app, ["verify", "lint", str(tmp_path / "missing.yaml")])
    assert out.exit_code == 2 and "missing.yaml: file not found" in " ".join(out.output.split())


def test_lint_budget_reports_unfinished_work_and_exits_0(runner, tmp_path):
    from .test_limits import big_policy

    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump(big_policy(600)), encoding="utf-8")
    out = runner.invoke(app, ["verify", "lint", str(path), "--budget", "0.5", "--json"])
    assert out.exit_code == 0, out.output
    issues = json.loads(out.stdout)["issues"]
    assert any(i["kind"] == "too_complex" and i["severity"] == "warning" for i in issues)
    assert "lint: consistency" in out.stderr  # progress is on stderr, never mixed into the JSON
    human = runner.invoke(app, ["verify", "lint", str(path), "--budget", "0.5", "--no-progress"])
    assert "lint incomplete" in human.stdout and human.stderr == ""


def test_test_accepts_the_tests_file_or_the_policy(runner, tmp_path):
    by_tests = runner.invoke(app, ["verify", "test", str(POLICIES / "pricing.tests.yaml"), "--json"])
    by_policy = runner.invoke(app, ["verify", "test", PRICING, "--json"])
    assert by_tests.exit_code == 0, by_tests.output
    assert json.loads(by_tests.output) == json.loads(by_policy.output)
    lonely = tmp_path / "orphan.tests.yaml"
    lonely.write_text((POLICIES / "pricing.tests.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    out = runner.invoke(app, ["verify", "test", str(lonely)])
    assert out.exit_code == 2 and "is a tests file, and no policy is beside it (looked for orphan.yaml" in " ".join(out.output.split())
    out = runner.invoke(app, ["verify", "test", PRICING, "--tests", PRICING])
    assert out.exit_code == 2 and "this looks like a policy" in out.output
