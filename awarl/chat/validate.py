"""One validation of one answer: the automated-reasoning check plus the citation gates.

Premises come from the question, the user's clarifications and the text of the passages the
agent cited (a search agent's evidence); claims come from the answer, without its ``<answer>``
tags and citation markers. Z3 objects are not thread-safe, so a `Validator` belongs to one
worker: it loads its own copy of the policy, which owns its own ``z3.Context``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from awarl.chat.thread import Clarification
from awarl.data.records import Passage
from awarl.verify.citations import Correction, CitationGate, LexicalJudge, check_corrections, render_corrections
from awarl.verify.findings import Finding, Result
from awarl.verify.policy import Policy, load_policy
from awarl.verify.reasoner import Reasoner, check

_TAGS_RE = re.compile(r"</?answer>", re.I)
_CITE_RE = re.compile(r"\s*\[[A-Za-z0-9][A-Za-z0-9_\-.:#]{0,63}\]")


def claim_text(answer: str) -> str:
    """The answer as the translator should read it: no tags, no citation markers.

    >>> claim_text("<answer>Ruvia</answer> [d1] [d2]")
    'Ruvia'
    """
    return " ".join(_CITE_RE.sub("", _TAGS_RE.sub(" ", answer or "")).split())


def premise_text(question: str, clarifications: Sequence[Clarification], evidence: Sequence[Mapping[str, str]]) -> str:
    """Question, then the user's answers to clarifying questions, then the cited passages' text.

    Only the user's answers are premises, not the questions asked: "Are the items on sale?"
    would read as "on sale" to a pattern translator whatever the user replied.
    """
    parts = [question.strip()]
    parts += [c.answer.strip().rstrip(".") + "." for c in clarifications if not c.skipped and c.answer and c.answer.strip()]
    parts += [p.get("text", "").strip() for p in evidence if p.get("text")]
    return "\n".join(p for p in parts if p)


class Corrections:
    """The corrections list: the shipped YAML (``topic``-matched) plus reviewer corrections (always shown).

    ``extra()`` returns the reviewer corrections currently approved (read from SQLite at each
    prompt, so an approval counts from the next prompt on).
    """

    def __init__(self, shipped: Sequence[Correction], extra: Any = None):
        self.shipped = list(shipped)
        self._extra = extra or (lambda: [])

    def all(self) -> list[Correction]:
        return [*self.shipped, *self._reviewed()]

    def _reviewed(self) -> list[Correction]:
        out = []
        for row in self._extra():
            error = row.get("error") or r"(?!)"  # a correction without an error pattern flags nothing
            out.append(Correction(id=f"review-{row['id']}", error=error, correction=row["text"], topic=None, source="review"))
        return out

    def block(self, text: str) -> str:
        """The prompt block: shipped corrections about ``text``, and every reviewer correction."""
        shipped = render_corrections(self.shipped, text)
        reviewed = self._reviewed()
        if not reviewed:
            return shipped
        lines = [shipped] if shipped else ["Known corrections (these override anything you may recall):"]
        lines += [f"- {c.correction}" for c in reviewed]
        return "\n".join(lines)


@dataclass
class Validation:
    findings: list[Finding]
    premises: str
    claims: str
    seconds: float
    solver_seconds: float
    extras: dict[str, Any] = field(default_factory=dict)


class Validator:
    """Checks answers against one policy (its own copy and Z3 context) and the citation gates."""

    def __init__(self, policy_path: str | Path, *, translator: Any = None, corpus: Mapping[str, Passage] | None = None,
                 corrections: Corrections | None = None, judge: Any = "lexical", timeout_ms: int = 5000):
        from awarl.verify.translate import PatternTranslator

        self.policy: Policy = load_policy(policy_path)
        self.reasoner = Reasoner(self.policy, timeout_ms=timeout_ms)
        self.translator = translator or PatternTranslator()
        self.corpus = corpus
        self.corrections = corrections or Corrections([])
        self.judge = LexicalJudge() if judge == "lexical" else judge

    def validate(self, question: str, clarifications: Sequence[Clarification], answer: str,
                 evidence: Sequence[Mapping[str, str]], review_sink: Any = None) -> Validation:
        started = time.perf_counter()
        premises = premise_text(question, clarifications, evidence)
        claims = claim_text(answer)
        findings = check(self.policy, premises, claims, self.translator, reasoner=self.reasoner)
        solver = time.perf_counter() - started
        corrections = self.corrections.all()
        if self.corpus is not None:
            gate = CitationGate(corpus=self.corpus, judge=self.judge, corrections=corrections, review_queue=review_sink)
            findings += gate.check(question, answer)
        else:  # no corpus: citations cannot be checked, known errors still can
            findings += [Finding(Result.INVALID, citation=i, detail=f"citation: {i.kind}") for i in check_corrections(answer, corrections)]
        return Validation(findings, premises, claims, time.perf_counter() - started, solver)
