"""Findings of an automated-reasoning check, in the shapes Amazon Bedrock documents.

A `Finding` holds exactly one of seven results. Its fields mirror the members of Bedrock's
``automatedReasoningPolicy.findings[]`` union (``valid``, ``invalid``, ``satisfiable``,
``impossible``, ``translationAmbiguous``, ``tooComplex``, ``noTranslations``), so a finding can be
written as awarl's JSON (snake_case, `Finding.to_dict`) or as Bedrock's (`Finding.to_bedrock`), and a
Bedrock ApplyGuardrail response converts into awarl findings (`findings_from_bedrock`).

Citation problems (a fabricated or unsupported citation, a known error) are findings too: their
result is INVALID and `Finding.citation` says what went wrong, so they rank with INVALID.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from awarl.errors import AwarlError


class Result(str, enum.Enum):
    VALID = "VALID"
    INVALID = "INVALID"
    SATISFIABLE = "SATISFIABLE"
    IMPOSSIBLE = "IMPOSSIBLE"
    TRANSLATION_AMBIGUOUS = "TRANSLATION_AMBIGUOUS"
    TOO_COMPLEX = "TOO_COMPLEX"
    NO_TRANSLATIONS = "NO_TRANSLATIONS"


# Most severe first (AWS's guidance); TOO_COMPLEX and NO_TRANSLATIONS are handled apart.
SEVERITY: tuple[Result, ...] = (
    Result.TRANSLATION_AMBIGUOUS,
    Result.IMPOSSIBLE,
    Result.INVALID,
    Result.SATISFIABLE,
    Result.VALID,
)

_BEDROCK_KEY = {
    Result.VALID: "valid",
    Result.INVALID: "invalid",
    Result.SATISFIABLE: "satisfiable",
    Result.IMPOSSIBLE: "impossible",
    Result.TRANSLATION_AMBIGUOUS: "translationAmbiguous",
    Result.TOO_COMPLEX: "tooComplex",
    Result.NO_TRANSLATIONS: "noTranslations",
}
_RESULT_OF_KEY = {v: k for k, v in _BEDROCK_KEY.items()}

Value = bool | int | float | str


class FindingsError(AwarlError, ValueError):
    """A findings payload that does not have the documented shape; the message names the path."""


@dataclass(frozen=True)
class Statement:
    """One logical statement: SMT-LIB ``logic`` and its ``natural_language`` reading."""

    logic: str
    natural_language: str = ""

    def to_dict(self) -> dict[str, str]:
        return {"logic": self.logic, "natural_language": self.natural_language}

    def to_bedrock(self) -> dict[str, str]:
        return {"logic": self.logic, "naturalLanguage": self.natural_language}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str = "statement") -> "Statement":
        if not isinstance(d, Mapping) or not isinstance(d.get("logic"), str):
            raise FindingsError(f"{where}: expected an object with a string 'logic', got {d!r}")
        nl = d.get("natural_language", d.get("naturalLanguage", ""))
        return cls(logic=d["logic"], natural_language=nl or "")


@dataclass
class Translation:
    """Premises and claims of one logical statement of a question and answer."""

    premises: list[Statement] = field(default_factory=list)
    claims: list[Statement] = field(default_factory=list)
    untranslated_premises: list[str] = field(default_factory=list)
    untranslated_claims: list[str] = field(default_factory=list)
    confidence: float = 1.0

    @property
    def is_empty(self) -> bool:
        return not self.premises and not self.claims

    def to_dict(self) -> dict[str, Any]:
        return {
            "premises": [s.to_dict() for s in self.premises],
            "claims": [s.to_dict() for s in self.claims],
            "untranslated_premises": list(self.untranslated_premises),
            "untranslated_claims": list(self.untranslated_claims),
            "confidence": self.confidence,
        }

    def to_bedrock(self) -> dict[str, Any]:
        return {
            "premises": [s.to_bedrock() for s in self.premises],
            "claims": [s.to_bedrock() for s in self.claims],
            "untranslatedPremises": [{"text": t} for t in self.untranslated_premises],
            "untranslatedClaims": [{"text": t} for t in self.untranslated_claims],
            "confidence": self.confidence,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str = "translation") -> "Translation":
        if not isinstance(d, Mapping):
            raise FindingsError(f"{where}: expected an object, got {type(d).__name__}")
        up = d.get("untranslated_premises", d.get("untranslatedPremises", []))
        uc = d.get("untranslated_claims", d.get("untranslatedClaims", []))
        confidence = d.get("confidence", 1.0)
        if not isinstance(confidence, (int, float)) or not 0.0 <= confidence <= 1.0:
            raise FindingsError(f"{where}.confidence: expected a number in [0, 1], got {confidence!r}")
        return cls(
            premises=[Statement.from_dict(s, f"{where}.premises[{i}]") for i, s in enumerate(d.get("premises", []))],
            claims=[Statement.from_dict(s, f"{where}.claims[{i}]") for i, s in enumerate(d.get("claims", []))],
            untranslated_premises=[_span_text(t, f"{where}.untranslatedPremises[{i}]") for i, t in enumerate(up)],
            untranslated_claims=[_span_text(t, f"{where}.untranslatedClaims[{i}]") for i, t in enumerate(uc)],
            confidence=float(confidence),
        )


def _span_text(item: Any, where: str) -> str:
    if isinstance(item, str):
        return item
    if isinstance(item, Mapping) and isinstance(item.get("text"), str):
        return item["text"]
    raise FindingsError(f"{where}: expected a string or {{'text': ...}}, got {item!r}")


@dataclass
class Scenario:
    """A situation the policy allows, as variable assignments.

    ``statements`` keeps the SMT-LIB form (what Bedrock sends); ``assignments`` the values.
    Either can be derived from the other for simple ``(= var value)`` statements.
    """

    assignments: dict[str, Value] = field(default_factory=dict)
    statements: list[Statement] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.assignments and not self.statements:
            self.statements = [Statement(assignment_logic(k, v)) for k, v in self.assignments.items()]
        elif self.statements and not self.assignments:
            self.assignments = _assignments_of(self.statements)

    def to_dict(self) -> dict[str, Value]:
        return dict(self.assignments)

    def to_bedrock(self) -> dict[str, Any]:
        return {"statements": [s.to_bedrock() for s in self.statements]}

    @classmethod
    def from_bedrock(cls, d: Mapping[str, Any], where: str) -> "Scenario":
        statements = d.get("statements") if isinstance(d, Mapping) else None
        if not isinstance(statements, list):
            raise FindingsError(f"{where}: expected an object with a 'statements' list, got {d!r}")
        return cls(statements=[Statement.from_dict(s, f"{where}.statements[{i}]") for i, s in enumerate(statements)])


def assignment_logic(name: str, value: Value) -> str:
    """SMT-LIB for ``name = value``: ``(= tenure 12)``, ``(= member true)``, ``(= plan Gold)``."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, (int, float)):
        text = str(value) if value >= 0 else f"(- {-value})"
    else:
        text = str(value)
    return f"(= {name} {text})"


_ASSIGN_RE = re.compile(r"^\(\s*=\s+([A-Za-z_][\w.]*)\s+(.+?)\s*\)$")
_NEG_RE = re.compile(r"^\(\s*-\s+([0-9.]+)\s*\)$")


def _parse_value(text: str) -> Value:
    text = text.strip()
    if text in ("true", "false"):
        return text == "true"
    m = _NEG_RE.match(text)
    sign, text = (-1, m.group(1)) if m else (1, text)
    try:
        return sign * int(text)
    except ValueError:
        pass
    try:
        return sign * float(text)
    except ValueError:
        return text


def _assignments_of(statements: Iterable[Statement]) -> dict[str, Value]:
    out: dict[str, Value] = {}
    for s in statements:
        logic = s.logic.strip()
        if m := _ASSIGN_RE.match(logic):
            out[m.group(1)] = _parse_value(m.group(2))
        elif m := re.match(r"^\(\s*not\s+([A-Za-z_][\w.]*)\s*\)$", logic):
            out[m.group(1)] = False
        elif re.match(r"^[A-Za-z_][\w.]*$", logic):
            out[logic] = True
    return out


@dataclass(frozen=True)
class RuleRef:
    """A policy rule behind a finding; ``description`` is its natural-language reading."""

    identifier: str
    policy_version_arn: str = ""
    description: str = ""

    def to_dict(self) -> dict[str, str]:
        return {"identifier": self.identifier, "policy_version_arn": self.policy_version_arn, "description": self.description}

    def to_bedrock(self) -> dict[str, str]:
        return {"identifier": self.identifier, "policyVersionArn": self.policy_version_arn}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | str, where: str = "rule") -> "RuleRef":
        if isinstance(d, str):
            return cls(identifier=d)
        if not isinstance(d, Mapping) or not isinstance(d.get("identifier"), str):
            raise FindingsError(f"{where}: expected an object with a string 'identifier', got {d!r}")
        arn = d.get("policy_version_arn", d.get("policyVersionArn", "")) or ""
        return cls(identifier=d["identifier"], policy_version_arn=arn, description=d.get("description", "") or "")


class LogicWarningType(str, enum.Enum):
    ALWAYS_TRUE = "ALWAYS_TRUE"
    ALWAYS_FALSE = "ALWAYS_FALSE"


@dataclass
class LogicWarning:
    """The translated premises or claims are true (or false) on their own, whatever the policy says."""

    type: LogicWarningType
    premises: list[Statement] = field(default_factory=list)
    claims: list[Statement] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": self.type.value,
            "premises": [s.to_dict() for s in self.premises],
            "claims": [s.to_dict() for s in self.claims],
        }

    def to_bedrock(self) -> dict[str, Any]:
        return {
            "type": self.type.value,
            "premises": [s.to_bedrock() for s in self.premises],
            "claims": [s.to_bedrock() for s in self.claims],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str = "logic_warning") -> "LogicWarning":
        try:
            kind = LogicWarningType(d["type"])
        except (KeyError, TypeError, ValueError):
            raise FindingsError(f"{where}.type: expected ALWAYS_TRUE or ALWAYS_FALSE, got {d!r}") from None
        return cls(
            type=kind,
            premises=[Statement.from_dict(s, f"{where}.premises[{i}]") for i, s in enumerate(d.get("premises", []))],
            claims=[Statement.from_dict(s, f"{where}.claims[{i}]") for i, s in enumerate(d.get("claims", []))],
        )


@dataclass
class CitationIssue:
    """A citation problem: ``kind`` is fabricated, unsupported or correction."""

    kind: str
    sentence: str
    passage_id: str = ""
    detail: str = ""

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "sentence": self.sentence, "passage_id": self.passage_id, "detail": self.detail}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "CitationIssue":
        return cls(kind=d["kind"], sentence=d.get("sentence", ""), passage_id=d.get("passage_id", ""), detail=d.get("detail", ""))


@dataclass
class Finding:
    """One result about one logical statement (or one citation problem).

    Which fields are filled depends on ``result``, as in Bedrock: VALID has a claims-true scenario
    and supporting rules; INVALID and IMPOSSIBLE have contradicting rules; SATISFIABLE has both
    scenarios; TRANSLATION_AMBIGUOUS has ``options`` (alternative translations) and
    ``difference_scenarios``; TOO_COMPLEX and NO_TRANSLATIONS carry at most a translation and a
    ``detail``. awarl also gives INVALID a claims-false scenario when it has one.
    """

    result: Result
    translation: Translation | None = None
    supporting_rules: list[RuleRef] = field(default_factory=list)
    contradicting_rules: list[RuleRef] = field(default_factory=list)
    claims_true_scenario: Scenario | None = None
    claims_false_scenario: Scenario | None = None
    logic_warning: LogicWarning | None = None
    options: list[list[Translation]] = field(default_factory=list)
    difference_scenarios: list[Scenario] = field(default_factory=list)
    citation: CitationIssue | None = None
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "result": self.result.value,
            "translation": self.translation.to_dict() if self.translation else None,
            "supporting_rules": [r.identifier for r in self.supporting_rules],
            "contradicting_rules": [r.identifier for r in self.contradicting_rules],
            "rules": {r.identifier: r.description for r in [*self.supporting_rules, *self.contradicting_rules]},
            "claims_true_scenario": self.claims_true_scenario.to_dict() if self.claims_true_scenario else None,
            "claims_false_scenario": self.claims_false_scenario.to_dict() if self.claims_false_scenario else None,
            "logic_warning": self.logic_warning.to_dict() if self.logic_warning else None,
            "options": [[t.to_dict() for t in opt] for opt in self.options],
            "difference_scenarios": [s.to_dict() for s in self.difference_scenarios],
            "citation": self.citation.to_dict() if self.citation else None,
            "detail": self.detail,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str = "finding") -> "Finding":
        try:
            result = Result(d["result"])
        except (KeyError, TypeError, ValueError):
            raise FindingsError(f"{where}.result: expected one of {[r.value for r in Result]}, got {d.get('result')!r}") from None
        descriptions = d.get("rules", {}) or {}

        def refs(key: str) -> list[RuleRef]:
            return [
                RuleRef(identifier=r, description=descriptions.get(r, "")) if isinstance(r, str) else RuleRef.from_dict(r)
                for r in d.get(key, [])
            ]

        def scenario(key: str) -> Scenario | None:
            value = d.get(key)
            return Scenario(assignments=dict(value)) if value is not None else None

        return cls(
            result=result,
            translation=Translation.from_dict(d["translation"], f"{where}.translation") if d.get("translation") else None,
            supporting_rules=refs("supporting_rules"),
            contradicting_rules=refs("contradicting_rules"),
            claims_true_scenario=scenario("claims_true_scenario"),
            claims_false_scenario=scenario("claims_false_scenario"),
            logic_warning=LogicWarning.from_dict(d["logic_warning"]) if d.get("logic_warning") else None,
            options=[[Translation.from_dict(t, f"{where}.options") for t in opt] for opt in d.get("options", [])],
            difference_scenarios=[Scenario(assignments=dict(s)) for s in d.get("difference_scenarios", [])],
            citation=CitationIssue.from_dict(d["citation"]) if d.get("citation") else None,
            detail=d.get("detail", "") or "",
        )

    def to_bedrock(self) -> dict[str, Any]:
        """This finding as one member of Bedrock's findings union (citation findings and awarl's own
        kinds, those without a `_BEDROCK_KEY`, have no Bedrock form)."""
        if self.citation is not None:
            raise FindingsError("a citation finding has no Bedrock form")
        if self.result not in _BEDROCK_KEY:
            raise FindingsError(f"a {self.result.value} finding has no Bedrock form")
        body: dict[str, Any] = {}
        if self.result is Result.TRANSLATION_AMBIGUOUS:
            body["options"] = [{"translations": [t.to_bedrock() for t in opt]} for opt in self.options]
            body["differenceScenarios"] = [s.to_bedrock() for s in self.difference_scenarios]
        elif self.result not in (Result.TOO_COMPLEX, Result.NO_TRANSLATIONS):
            if self.translation is not None:
                body["translation"] = self.translation.to_bedrock()
            if self.result is Result.VALID:
                body["supportingRules"] = [r.to_bedrock() for r in self.supporting_rules]
            if self.result in (Result.INVALID, Result.IMPOSSIBLE):
                body["contradictingRules"] = [r.to_bedrock() for r in self.contradicting_rules]
            if self.claims_true_scenario is not None and self.result in (Result.VALID, Result.SATISFIABLE):
                body["claimsTrueScenario"] = self.claims_true_scenario.to_bedrock()
            if self.claims_false_scenario is not None and self.result is Result.SATISFIABLE:
                body["claimsFalseScenario"] = self.claims_false_scenario.to_bedrock()
            if self.logic_warning is not None:
                body["logicWarning"] = self.logic_warning.to_bedrock()
        return {_BEDROCK_KEY[self.result]: body}

    @classmethod
    def from_bedrock(cls, member: Mapping[str, Any], where: str = "findings[0]") -> "Finding":
        """One member of Bedrock's findings union, e.g. ``{"valid": {...}}``."""
        if not isinstance(member, Mapping):
            raise FindingsError(f"{where}: expected an object, got {type(member).__name__}")
        keys = [k for k in member if k in _RESULT_OF_KEY]
        if len(keys) != 1:
            raise FindingsError(
                f"{where}: expected exactly one of {sorted(_RESULT_OF_KEY)}, got keys {sorted(member)}"
            )
        key = keys[0]
        result, body = _RESULT_OF_KEY[key], member[key] or {}
        here = f"{where}.{key}"
        finding = cls(result=result)
        if body.get("translation"):
            finding.translation = Translation.from_dict(body["translation"], f"{here}.translation")
        finding.supporting_rules = [RuleRef.from_dict(r, f"{here}.supportingRules[{i}]") for i, r in enumerate(body.get("supportingRules", []))]
        finding.contradicting_rules = [
            RuleRef.from_dict(r, f"{here}.contradictingRules[{i}]") for i, r in enumerate(body.get("contradictingRules", []))
        ]
        if body.get("claimsTrueScenario"):
            finding.claims_true_scenario = Scenario.from_bedrock(body["claimsTrueScenario"], f"{here}.claimsTrueScenario")
        if body.get("claimsFalseScenario"):
            finding.claims_false_scenario = Scenario.from_bedrock(body["claimsFalseScenario"], f"{here}.claimsFalseScenario")
        if body.get("logicWarning"):
            finding.logic_warning = LogicWarning.from_dict(body["logicWarning"], f"{here}.logicWarning")
        for i, opt in enumerate(body.get("options", [])):
            translations = opt.get("translations") if isinstance(opt, Mapping) else None
            if not isinstance(translations, list):
                raise FindingsError(f"{here}.options[{i}]: expected an object with a 'translations' list")
            finding.options.append([Translation.from_dict(t, f"{here}.options[{i}].translations[{j}]") for j, t in enumerate(translations)])
        finding.difference_scenarios = [
            Scenario.from_bedrock(s, f"{here}.differenceScenarios[{i}]") for i, s in enumerate(body.get("differenceScenarios", []))
        ]
        return finding


@dataclass
class Ambiguity:
    """Translations that disagree: the leading ``options`` (each a list of statements' translations)
    and the share of samples that agreed with the first one."""

    options: list[list[Translation]]
    confidence: float


def findings_to_json(findings: Iterable[Finding]) -> dict[str, Any]:
    """``{"findings": [...]}`` — what ``awarl verify check --json`` prints."""
    return {"findings": [f.to_dict() for f in findings]}


def findings_from_json(payload: Mapping[str, Any]) -> list[Finding]:
    items = payload.get("findings") if isinstance(payload, Mapping) else None
    if not isinstance(items, list):
        raise FindingsError("expected an object with a 'findings' list")
    return [Finding.from_dict(f, f"findings[{i}]") for i, f in enumerate(items)]


@dataclass
class BedrockCheck:
    """Findings read from an ApplyGuardrail response, and whether the checker really ran."""

    findings: list[Finding]
    ran: bool
    policy_units: int | None = None


def findings_from_bedrock(payload: Mapping[str, Any] | list[Any]) -> BedrockCheck:
    """Convert Bedrock findings into awarl findings.

    Accepts a whole ApplyGuardrail response (``assessments[].automatedReasoningPolicy.findings``
    with ``usage.automatedReasoningPolicyUnits``), one ``automatedReasoningPolicy`` object, or the
    bare findings list. ``ran`` is False when the usage block counts zero policy units: the checker
    did not run, so an empty findings list must not be read as VALID.
    """
    units: int | None = None
    if isinstance(payload, list):
        members, where = payload, "findings"
    elif isinstance(payload, Mapping) and "assessments" in payload:
        members = []
        for a, assessment in enumerate(payload["assessments"] or []):
            ar = assessment.get("automatedReasoningPolicy") if isinstance(assessment, Mapping) else None
            if ar is None:
                continue
            found = ar.get("findings")
            if not isinstance(found, list):
                raise FindingsError(f"assessments[{a}].automatedReasoningPolicy.findings: expected a list")
            members.extend(found)
        where = "assessments[].automatedReasoningPolicy.findings"
        usage = payload.get("usage") or {}
        if "automatedReasoningPolicyUnits" in usage:
            units = int(usage["automatedReasoningPolicyUnits"])
    elif isinstance(payload, Mapping) and isinstance(payload.get("findings"), list):
        members, where = payload["findings"], "findings"
    else:
        raise FindingsError("expected an ApplyGuardrail response, an automatedReasoningPolicy object or a findings list")
    findings = [Finding.from_bedrock(m, f"{where}[{i}]") for i, m in enumerate(members)]
    ran = bool(findings) if units is None else units > 0
    return BedrockCheck(findings=findings, ran=ran, policy_units=units)


def aggregate(findings: Iterable[Finding]) -> Result | None:
    """The one result that speaks for a set of findings.

    The most severe of TRANSLATION_AMBIGUOUS > IMPOSSIBLE > INVALID > SATISFIABLE > VALID when any
    is present (citation findings count as INVALID); else TOO_COMPLEX; else NO_TRANSLATIONS; None
    for no findings at all, which never means VALID.

    VALID covers only what was translated and checked, so VALID is returned only when every part
    of the answer was: VALID beside a TOO_COMPLEX finding is TOO_COMPLEX, and VALID beside a
    NO_TRANSLATIONS finding or untranslated answer text is NO_TRANSLATIONS ("partly validated",
    see `partly_valid`). Untranslated question text does not count: a question's own "What
    discount do I get?" asserts nothing.

    >>> aggregate([Finding(Result.VALID), Finding(Result.SATISFIABLE), Finding(Result.NO_TRANSLATIONS)])
    <Result.SATISFIABLE: 'SATISFIABLE'>
    >>> aggregate([Finding(Result.VALID), Finding(Result.NO_TRANSLATIONS)])
    <Result.NO_TRANSLATIONS: 'NO_TRANSLATIONS'>
    """
    findings = list(findings)
    results = {f.result for f in findings}
    for result in (*SEVERITY, Result.TOO_COMPLEX, Result.NO_TRANSLATIONS):
        if result in results:
            break
    else:
        return None
    if result is Result.VALID:
        if Result.TOO_COMPLEX in results:
            return Result.TOO_COMPLEX
        if Result.NO_TRANSLATIONS in results or _untranslated_claims(findings):
            return Result.NO_TRANSLATIONS
    return result


def _untranslated_claims(findings: Iterable[Finding]) -> bool:
    return any(f.translation is not None and any(t.strip() for t in f.translation.untranslated_claims) for f in findings)


def partly_valid(findings: Iterable[Finding]) -> bool:
    """True when some statements are VALID but the answer as a whole is not (see `aggregate`):
    what the user sees is "partly validated", never plain VALID.

    >>> partly_valid([Finding(Result.VALID), Finding(Result.NO_TRANSLATIONS)])
    True
    >>> partly_valid([Finding(Result.VALID)])
    False
    """
    findings = list(findings)
    return any(f.result is Result.VALID for f in findings) and aggregate(findings) in (Result.TOO_COMPLEX, Result.NO_TRANSLATIONS)


def sort_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Most severe first (see `aggregate`); the order is stable among equals."""
    order = {r: i for i, r in enumerate((*SEVERITY, Result.TOO_COMPLEX, Result.NO_TRANSLATIONS))}
    return sorted(findings, key=lambda f: order[f.result])


# -- what a user is shown ----------------------------------------------------------------------
@dataclass(frozen=True)
class Kind:
    """How one kind of outcome is shown: the badge, its words, its CSS class, and whether the loop
    may ask the user a clarifying question about it (the scenarios differ in what the user knows)."""

    badge: str
    label: str
    summary: str
    askable: bool = False
    style: str = ""
    rank: int = 3
    """Serving order of a checked sample, best first (see `serve_rank`)."""
    template: str = ""
    """The rewrite prompt of a finding of this kind (``awarl/chat/prompts/<template>.txt``); empty: the
    loop never rewrites for it."""
    feedback: str = ""
    """Why the answer failed, in words for the agent (verify-and-resample's feedback)."""


KINDS: dict[str, Kind] = {
    "VALID": Kind("VALID", "Valid", "Proved from the question and the cited passages.", style="VALID", rank=0),
    "VALID_GIVEN_YOUR_STATEMENT": Kind(
        "VALID_GIVEN_YOUR_STATEMENT", "Valid given your statement",
        "Proved, from a statement of yours that nobody checked.", style="VALID_GIVEN_YOUR_STATEMENT", rank=0),
    "SATISFIABLE": Kind("NOT_VALIDATED", "Not validated",
                        "Not validated: the evidence allows this answer but does not prove it.", True, "NOT_VALIDATED", 1,
                        template="rewrite_satisfiable", feedback="it is true only in some situations"),
    "TRANSLATION_AMBIGUOUS": Kind("NOT_VALIDATED", "Not validated",
                                  "Not validated: the answer reads two ways and the readings disagree.", True, "NOT_VALIDATED",
                                  template="rewrite_translation_ambiguous", feedback="it can be read in more than one way"),
    "TOO_COMPLEX": Kind("NOT_VALIDATED", "Not validated", "Not validated: the check did not finish in time.",
                        style="NOT_VALIDATED", template="rewrite_too_complex", feedback="it was too complex to check"),
    "NO_TRANSLATIONS": Kind("NOT_VALIDATED", "Not validated",
                            "Not validated: nothing in this answer maps to the policy's rules.", style="NOT_VALIDATED"),
    "PARTLY_VALID": Kind("PARTLY_VALIDATED", "Partly valid",
                         "Partly validated: some statements were proved, others could not be checked against the policy.",
                         style="PARTLY_VALIDATED"),
    "INVALID": Kind("INVALID", "Invalid", "Invalid: the policy, the cited passages or your own statements contradict this answer.",
                    style="INVALID", rank=4, template="rewrite_invalid", feedback="it contradicts the rules"),
    "IMPOSSIBLE": Kind("IMPOSSIBLE", "Impossible", "The checker found the question's premises contradictory.",
                       style="IMPOSSIBLE", template="rewrite_impossible",
                       feedback="its premises contradict each other or the rules"),
    "ABSTAINED": Kind("ABSTAINED", "Abstained",
                      "The agent found no evidence that settles the question, so it did not answer.", style="ABSTAINED", rank=2),
    "CHECKED_ONLY": Kind("CHECKED_ONLY", "Checked only",
                         "Checked only: validate-only mode has no agent to rewrite the answer or ask you.", style="NOT_VALIDATED"),
    "ERROR": Kind("ERROR", "Error", "The thread failed; see its error.", style="ERROR", rank=5),
}
"""Every outcome a thread can show, keyed by the finding's result (or ABSTAINED, PARTLY_VALID,
VALID_GIVEN_YOUR_STATEMENT, CHECKED_ONLY, ERROR): the one table of finding kinds. The chat loop
picks badges (`awarl.chat.thread.Badge` is its badges), serving order, askable kinds, rewrite
templates and resample feedback from it; the thread JSON carries its ``badge_label`` and
``badge_style`` (a class of ``awarl/chat/static/style.css``). docs/extending.md, "A finding
kind", shows a new row."""

BADGE_KIND = {k.badge: k for k in reversed(KINDS.values())}
"""A badge's own row (the first row that names it)."""


def kind_of(findings: Iterable[Finding]) -> str | None:
    """The `KINDS` key of a checked answer: its aggregate result, PARTLY_VALID when some statements
    were proved; None for no findings."""
    findings = list(findings)
    result = aggregate(findings)
    if result is None:
        return None
    return "PARTLY_VALID" if partly_valid(findings) else result.value
