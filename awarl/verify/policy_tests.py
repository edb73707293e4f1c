"""Policy tests in the shape of Bedrock's: a question, an answer, the expected aggregated result.

A tests file (YAML or JSON) holds ``tests: [...]``; each test has ``question`` (Bedrock:
``queryContent``), ``answer`` (``guardContent``, required), ``expected`` (Bedrock:
``expectedAggregatedFindingsResult``) and optionally ``name`` and ``confidence_threshold``
(``confidenceThreshold``). ``awarl verify test POLICY`` reads ``<policy stem>.tests.yaml`` next to
the policy unless ``--tests`` names another file; given the tests file itself, it finds the policy
beside it (`policy_and_tests`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from awarl.errors import ConfigError
from awarl.verify.findings import Finding, Result, aggregate
from awarl.verify.policy import Policy, read_document
from awarl.verify.reasoner import Reasoner, check
from awarl.verify.translate import Translator

_MAX_CHARS = 1024  # Bedrock's limit for both the question and the answer of a test


@dataclass(frozen=True)
class PolicyTest:
    name: str
    question: str
    answer: str
    expected: Result
    confidence_threshold: float | None = None


@dataclass
class PolicyTestOutcome:
    test: PolicyTest
    actual: Result | None
    findings: list[Finding]

    @property
    def passed(self) -> bool:
        return self.actual is self.test.expected

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.test.name, "expected": self.test.expected.value,
            "actual": self.actual.value if self.actual else None, "passed": self.passed,
            "findings": [f.to_dict() for f in self.findings],
        }


_TESTS_SUFFIXES = (".tests.yaml", ".tests.yml", ".tests.json")
_POLICY_SUFFIXES = (".yaml", ".yml", ".json")


def default_tests_path(policy_path: str | Path) -> Path:
    p = Path(policy_path)
    return p.with_name(p.stem + ".tests.yaml")


def policy_and_tests(path: str | Path, tests: str | Path | None = None) -> tuple[Path, Path]:
    """(policy file, tests file) from what a user names: the policy (its tests are
    ``<stem>.tests.yaml`` beside it) or the tests file (its policy is ``<stem>.yaml``, ``.yml`` or
    ``.json`` beside it). ``tests`` overrides the tests file."""
    path = Path(path)
    name = path.name
    suffix = next((s for s in _TESTS_SUFFIXES if name.endswith(s)), None)
    if suffix is None:
        return path, Path(tests) if tests is not None else default_tests_path(path)
    if tests is not None:
        raise ConfigError(f"{path} is a tests file; give the policy as the argument when --tests names the tests")
    stem = name[: -len(suffix)]
    for ext in _POLICY_SUFFIXES:
        candidate = path.with_name(stem + ext)
        if candidate.is_file():
            return candidate, path
    tried = ", ".join(stem + ext for ext in _POLICY_SUFFIXES)
    raise ConfigError(f"{path} is a tests file, and no policy is beside it (looked for {tried})")


def load_policy_tests(path: str | Path) -> list[PolicyTest]:
    path = Path(path)
    data = read_document(path)  # a PolicyError (a ValueError) names the file and the problem
    items = data.get("tests") if isinstance(data, Mapping) else None
    if not isinstance(items, list):
        hint = " (this looks like a policy; its tests go in a separate <policy>.tests.yaml)" if isinstance(data, Mapping) and "rules" in data else ""
        raise ConfigError(f"{path}: expected a mapping with a 'tests' list{hint}")
    return [_test_from(item, f"{path}, tests[{i}]", i) for i, item in enumerate(items)]


def _pick(item: Mapping[str, Any], *keys: str) -> Any:
    for k in keys:
        if k in item:
            return item[k]
    return None


def _test_from(item: Any, where: str, i: int) -> PolicyTest:
    if not isinstance(item, Mapping):
        raise ConfigError(f"{where}: expected a mapping")
    question = _pick(item, "question", "queryContent", "query_content") or ""
    answer = _pick(item, "answer", "guardContent", "guard_content")
    expected = _pick(item, "expected", "expectedAggregatedFindingsResult", "expected_aggregated_findings_result")
    if not isinstance(answer, str) or not answer.strip():
        raise ConfigError(f"{where}, field 'answer': missing or empty (Bedrock requires guard content)")
    for field_name, value in (("question", question), ("answer", answer)):
        if not isinstance(value, str) or len(value) > _MAX_CHARS:
            raise ConfigError(f"{where}, field '{field_name}': expected a string of at most {_MAX_CHARS} characters")
    try:
        result = Result(expected)
    except ValueError:
        raise ConfigError(f"{where}, field 'expected': expected one of {[r.value for r in Result]}, got {expected!r}") from None
    threshold = _pick(item, "confidence_threshold", "confidenceThreshold")
    if threshold is not None and (isinstance(threshold, bool) or not (isinstance(threshold, (int, float)) and 0 <= threshold <= 1)):
        raise ConfigError(f"{where}, field 'confidence_threshold': expected a number in [0, 1]")
    return PolicyTest(str(item.get("name") or f"test {i}"), question, answer, result, threshold)


def run_policy_tests(
    policy: Policy,
    tests: Sequence[PolicyTest],
    translator_for: Callable[[PolicyTest], Translator],
    reasoner: Reasoner | None = None,
) -> list[PolicyTestOutcome]:
    """Run each test through translation and checking; ``translator_for`` may honour a test's
    confidence threshold (the LLM translator does)."""
    reasoner = reasoner or Reasoner(policy)
    outcomes = []
    for t in tests:
        findings = check(policy, t.question, t.answer, translator_for(t), reasoner=reasoner)
        outcomes.append(PolicyTestOutcome(t, aggregate(findings), findings))
    return outcomes
