"""Read the model's decision after a rewrite prompt: ``DECISION:`` then ``ANSWER:`` or ``QUESTION:`` lines.

Models dress the format up: bold labels, headings, bullets or numbers before ``QUESTION:``, a
preamble before the decision, answers spread over several lines, lower case. `parse_decision`
accepts all of those and never raises: a reply it cannot read becomes a REWRITE whose answer is
the whole reply, marked ``parsed=False`` and logged, so the loop validates what the model said
instead of dropping it (the sample chatbot silently lost bulleted questions).
"""

from __future__ import annotations

import logging
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

log = logging.getLogger(__name__)

DecisionKind = Literal["REWRITE", "ASK_QUESTIONS", "IMPOSSIBLE"]
MAX_QUESTIONS = 5
"""At most this many clarifying questions are kept (AWS's guidance and the sample chatbot's limit)."""

# Markdown a model may wrap a label in: heading hashes, quote marks, bullets, numbers, emphasis.
_LEAD_RE = re.compile(r"^\s*(?:#{1,6}\s*|>\s*)*(?:(?:[-*+•]|\d{1,2}[.)])\s+)?")
_EMPH_RE = re.compile(r"(\*\*|__|\*|`)")
_LABEL_RE = re.compile(r"^(decision|answer|explanation|question|questions)\s*(?:\d{1,2}\s*)?[:：\-–—]\s*(.*)$", re.I)
_KINDS = {
    "REWRITE": "REWRITE",
    "REWRITTEN": "REWRITE",
    "ASK_QUESTIONS": "ASK_QUESTIONS",
    "ASK_QUESTION": "ASK_QUESTIONS",
    "ASK": "ASK_QUESTIONS",
    "QUESTIONS": "ASK_QUESTIONS",
    "CLARIFY": "ASK_QUESTIONS",
    "IMPOSSIBLE": "IMPOSSIBLE",
}


@dataclass(frozen=True)
class Decision:
    """What the model decided.

    ``text`` is the rewritten answer (REWRITE), the explanation (IMPOSSIBLE) or any text that came
    with the questions (ASK_QUESTIONS). ``parsed`` is False when the reply had no readable decision
    and the whole reply is taken as a rewrite; ``note`` says why.
    """

    kind: DecisionKind
    text: str
    questions: list[str] = field(default_factory=list)
    parsed: bool = True
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _clean(line: str) -> str:
    """A line without markdown dressing: ``**1. Question:** Are you a member?`` → ``Question: Are you a member?``."""
    line = _EMPH_RE.sub("", line)
    return _LEAD_RE.sub("", line, count=1).strip()


def _kind_of(value: str) -> str | None:
    word = re.sub(r"[\s\-]+", "_", value.strip().strip(".:!").upper())
    word = re.split(r"[^A-Z_]", word, maxsplit=1)[0].strip("_")
    return _KINDS.get(word)


def parse_decision(text: str | None, max_questions: int = MAX_QUESTIONS) -> Decision:
    """Parse a reply to a rewrite prompt.

    >>> parse_decision("DECISION: REWRITE\\nANSWER: You get 15% off.")
    Decision(kind='REWRITE', text='You get 15% off.', questions=[], parsed=True, note='')
    >>> d = parse_decision("Thinking...\\n**Decision:** ask questions\\n1. **Question:** Is it on sale?")
    >>> d.kind, d.questions
    ('ASK_QUESTIONS', ['Is it on sale?'])
    >>> parse_decision("You get 10% off.").parsed
    False
    """
    raw = (text or "").strip()
    kind: str | None = None
    answer_lines: list[str] | None = None
    questions: list[str] = []
    in_questions = False  # after a bare "QUESTIONS:" header, list items are questions
    loose: list[str] = []  # lines after the decision that belong to no label
    for line in raw.splitlines():
        cleaned = _clean(line)
        m = _LABEL_RE.match(cleaned)
        label = m.group(1).lower() if m else None
        if label == "decision":
            found = _kind_of(m.group(2))
            if found is not None and kind is None:
                kind = found
            in_questions, answer_lines = False, answer_lines
            continue
        if label in ("answer", "explanation"):
            answer_lines = [m.group(2)] if m.group(2) else []
            in_questions = False
            continue
        if label in ("question", "questions"):
            rest = m.group(2).strip()
            if rest:
                questions.append(rest)
            in_questions = label == "questions" or in_questions
            answer_lines = None
            continue
        if in_questions and cleaned and cleaned != line.strip():  # a list item under QUESTIONS:
            questions.append(cleaned)
            continue
        if answer_lines is not None:
            answer_lines.append(line.rstrip())
        elif kind is not None and cleaned:
            loose.append(line.rstrip())
    answer = "\n".join(answer_lines).strip() if answer_lines is not None else ""
    if not answer and loose and kind != "ASK_QUESTIONS":
        answer = "\n".join(loose).strip()
    questions = [q for q in questions if q]

    if kind is None:
        if answer:
            kind = "REWRITE"
        elif questions:
            kind = "ASK_QUESTIONS"
    note = ""
    if kind == "ASK_QUESTIONS" and not questions:
        kind, note = None, "ASK_QUESTIONS without any QUESTION: line"
    if kind == "REWRITE" and not answer:
        kind, note = None, "REWRITE without an answer"
    if kind is None:
        note = note or ("empty reply" if not raw else "no DECISION:, ANSWER: or QUESTION: line")
        log.warning("unparseable decision (%s); the whole reply is taken as the rewrite: %.200r", note, raw)
        return Decision("REWRITE", raw, [], parsed=False, note=note)
    if kind == "ASK_QUESTIONS" and len(questions) > max_questions:
        note = f"{len(questions)} questions asked, the first {max_questions} kept"
        questions = questions[:max_questions]
    return Decision(kind, answer, questions if kind == "ASK_QUESTIONS" else [], parsed=True, note=note)  # type: ignore[arg-type]
