"""`awarl verify check | lint | test`: automated-reasoning and citation checks from the shell."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Optional

import typer

from awarl.cli_errors import fail
from awarl.progress import Bar, Progress

app = typer.Typer(no_args_is_help=True, help="Automated-reasoning checks (Z3) and citation checks.")


def _translator(name: str, llm_url: Optional[str], llm_model: Optional[str], samples: int, threshold: float, temperature: float,
                timeout_ms: int = 5000):
    from awarl.llm.text import TextModel
    from awarl.verify.translate import LLMTranslator, PatternTranslator

    if name == "pattern":
        return PatternTranslator(timeout_ms=timeout_ms)
    if name == "llm":
        if not llm_url or not llm_model:
            fail("--translator llm needs --llm-url and --llm-model", 2)
        return LLMTranslator(TextModel.openai(llm_url, llm_model), samples=samples, threshold=threshold, temperature=temperature)
    fail(f"unknown translator {name!r} (pattern or llm)", 2)


@app.command("check")
def check_command(
    policy: Path = typer.Option(..., "--policy", help="Policy YAML or Bedrock policy-definition JSON."),
    premise: list[str] = typer.Option([], "--premise", help="A premise in SMT-LIB over the policy's variables (repeatable)."),
    claim: list[str] = typer.Option([], "--claim", help="A claim in SMT-LIB over the policy's variables (repeatable)."),
    question: Optional[str] = typer.Option(None, "--question", help="The user's question (translated into premises)."),
    answer: Optional[str] = typer.Option(None, "--answer", help="The answer to check (translated into claims)."),
    translator: str = typer.Option("pattern", "--translator", help="pattern (offline, from the policy) or llm."),
    llm_url: Optional[str] = typer.Option(None, "--llm-url", help="OpenAI-compatible API root for the llm translator / judge."),
    llm_model: Optional[str] = typer.Option(None, "--llm-model", help="Model name at --llm-url."),
    samples: int = typer.Option(5, "--samples", help="Independent translations the llm translator draws."),
    threshold: float = typer.Option(1.0, "--threshold", help="Confidence below which a translation is TRANSLATION_AMBIGUOUS."),
    temperature: float = typer.Option(0.7, "--temperature", help="Sampling temperature of the llm translator."),
    corpus: Optional[Path] = typer.Option(None, "--corpus", help="corpus.jsonl: also run the citation gates on --answer."),
    corrections: Optional[Path] = typer.Option(None, "--corrections", help="Corrections YAML checked against --answer."),
    review_queue: Optional[Path] = typer.Option(None, "--review-queue", help="JSONL file for borderline citations."),
    llm_judge: bool = typer.Option(False, "--llm-judge", help="Judge citation support with the model at --llm-url."),
    timeout_ms: int = typer.Option(5000, "--timeout-ms", min=1, help="Time budget of one finding's check, and of the pattern translator's matching; past it, TOO_COMPLEX."),
    as_json: bool = typer.Option(False, "--json", help="Print {\"findings\": [...]} as JSON."),
) -> None:
    """Check premises and claims given in SMT-LIB, or a question and answer through a translator."""
    from awarl.verify.findings import aggregate, findings_to_json, sort_findings
    from awarl.verify.policy import load_policy
    from awarl.verify.reasoner import Reasoner, check

    if not (premise or claim or answer is not None):
        fail("give --claim (and optionally --premise), or --answer (and optionally --question)", 2)
    pol = load_policy(policy)
    reasoner = Reasoner(pol, timeout_ms=timeout_ms)
    findings = []
    if premise or claim:
        findings.append(reasoner.check_expressions(premise, claim))
    if answer is not None:
        tr = _translator(translator, llm_url, llm_model, samples, threshold, temperature, timeout_ms)
        findings += check(pol, question or "", answer, tr, reasoner=reasoner)
        findings += _citation_findings(question or "", answer, corpus, corrections, review_queue, llm_judge, llm_url, llm_model)
    if as_json:
        typer.echo(json.dumps(findings_to_json(findings), indent=2, ensure_ascii=False))
        return
    result = aggregate(findings)
    typer.echo(f"aggregated: {result.value if result else 'none'}")
    for f in sort_findings(findings):
        typer.echo(_describe(f))


def _citation_findings(question, answer, corpus, corrections, review_queue, llm_judge, llm_url, llm_model):
    if corpus is None and corrections is None:
        return []
    from awarl.data.records import load_corpus
    from awarl.verify.citations import CitationGate, LexicalJudge, LLMSupportJudge, ReviewQueue, load_corrections
    from awarl.llm.text import TextModel

    judge = LexicalJudge()
    if llm_judge:
        if not llm_url or not llm_model:
            fail("--llm-judge needs --llm-url and --llm-model", 2)
        judge = LLMSupportJudge(TextModel.openai(llm_url, llm_model))
    gate = CitationGate(
        corpus={p.id: p for p in load_corpus(corpus)} if corpus else {},
        judge=judge if corpus else None,
        corrections=load_corrections(corrections) if corrections else (),
        review_queue=ReviewQueue(review_queue) if review_queue else None,
    )
    return gate.check(question, answer)


def _describe(f) -> str:
    lines = [f"- {f.result.value}" + (f" ({f.detail})" if f.detail else "")]
    if f.citation:
        lines.append(f"    citation {f.citation.kind}: {f.citation.passage_id} {f.citation.sentence!r} {f.citation.detail}")
    if f.translation:
        for s in f.translation.premises:
            lines.append(f"    premise {s.logic}  {s.natural_language!r}")
        for s in f.translation.claims:
            lines.append(f"    claim   {s.logic}  {s.natural_language!r}")
        for text in f.translation.untranslated_claims:
            lines.append(f"    untranslated {text!r}")
    for label, rules in (("supporting", f.supporting_rules), ("contradicting", f.contradicting_rules)):
        for r in rules:
            lines.append(f"    {label} rule {r.identifier}: {r.description}")
    for label, sc in (("claims-true", f.claims_true_scenario), ("claims-false", f.claims_false_scenario)):
        if sc is not None:
            lines.append(f"    {label} scenario: {sc.assignments}")
    for sc in f.difference_scenarios:
        lines.append(f"    difference scenario: {sc.assignments}")
    if f.logic_warning:
        lines.append(f"    logic warning: {f.logic_warning.type.value}")
    return "\n".join(lines)


@app.command("lint")
def lint_command(
    policy: Path = typer.Argument(..., help="Policy YAML or Bedrock policy-definition JSON."),
    budget: float = typer.Option(60.0, "--budget", min=0.001, help="Seconds the whole lint may take; what is left unchecked is reported as too_complex."),
    timeout_ms: int = typer.Option(2000, "--timeout-ms", min=1, help="Time limit of one solver call (ms); an undecided call is reported as too_complex."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show progress on stderr."),
    as_json: bool = typer.Option(False, "--json", help="Print the issues as JSON."),
) -> None:
    """Report conflicting rules, unused variables and rules that can never fire (exit 1 on errors).

    The lint stops at --budget and reports what it could not finish (too_complex, a warning)."""
    from awarl.verify.lint import lint
    from awarl.verify.policy import load_policy

    pol = load_policy(policy)
    with Progress(enabled=progress, transient=True) as display:
        issues = lint(pol, timeout_ms=timeout_ms, budget_s=budget, progress=_stage_bars(display))
    if as_json:
        typer.echo(json.dumps({"issues": [i.to_dict() for i in issues]}, indent=2))
    else:
        for i in issues:
            typer.echo(f"{i.severity}: {i.kind}: {i.message}")
        unfinished = sum(i.kind == "too_complex" for i in issues)
        note = f" (lint incomplete: {unfinished} too_complex)" if unfinished else ""
        typer.echo(f"{len(issues)} issue(s){note}")
    if any(i.severity == "error" for i in issues):
        raise typer.Exit(1)


def _stage_bars(display: Progress) -> Callable[[str, int, int], None]:
    """The lint's ``progress(stage, done, total)`` as a bar per stage."""
    bars: dict[str, Bar] = {}

    def update(stage: str, done: int, total: int) -> None:
        if stage not in bars:
            bars[stage] = display.add(f"lint: {stage}", total)
        bars[stage].update(completed=done, total=total)

    return update


@app.command("test")
def test_command(
    policy: Path = typer.Argument(..., help="Policy YAML or Bedrock policy-definition JSON, or its <policy>.tests.yaml."),
    tests: Optional[Path] = typer.Option(None, "--tests", help="Tests file (default: <policy stem>.tests.yaml beside the policy)."),
    translator: str = typer.Option("pattern", "--translator", help="pattern or llm."),
    llm_url: Optional[str] = typer.Option(None, "--llm-url", help="OpenAI-compatible API root for the llm translator."),
    llm_model: Optional[str] = typer.Option(None, "--llm-model", help="Model name at --llm-url."),
    samples: int = typer.Option(5, "--samples", help="Independent translations the llm translator draws."),
    timeout_ms: int = typer.Option(5000, "--timeout-ms", min=1, help="Time budget of one finding's check."),
    as_json: bool = typer.Option(False, "--json", help="Print the outcomes as JSON."),
) -> None:
    """Run the policy's tests (question, answer, expected aggregated result); exit 1 on a failure."""
    from awarl.verify.policy import load_policy
    from awarl.verify.policy_tests import load_policy_tests, policy_and_tests, run_policy_tests
    from awarl.verify.reasoner import Reasoner

    policy_path, tests_path = policy_and_tests(policy, tests)
    pol = load_policy(policy_path)
    cases = load_policy_tests(tests_path)

    def translator_for(case):
        thr = case.confidence_threshold if case.confidence_threshold is not None else 1.0
        return _translator(translator, llm_url, llm_model, samples, thr, 0.7, timeout_ms)

    outcomes = run_policy_tests(pol, cases, translator_for, Reasoner(pol, timeout_ms=timeout_ms))
    failed = [o for o in outcomes if not o.passed]
    if as_json:
        typer.echo(json.dumps({"passed": len(outcomes) - len(failed), "failed": len(failed), "tests": [o.to_dict() for o in outcomes]}, indent=2))
    else:
        for o in outcomes:
            mark = "PASS" if o.passed else "FAIL"
            got = o.actual.value if o.actual else "none"
            typer.echo(f"{mark} {o.test.name}: expected {o.test.expected.value}, got {got}")
        typer.echo(f"{len(outcomes) - len(failed)} passed, {len(failed)} failed")
    if failed:
        raise typer.Exit(1)
