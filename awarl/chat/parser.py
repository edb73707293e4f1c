"""Read the model's decision after a rewrite prompt: ``DECISION:`` then ``ANSWER:`` or ``QUESTION:`` lines.

Models dress the format up: bold labels, headings, bullets or numbers before ``QUESTION:``,
``Q1:`` labels, a label alone on its line with its text on the next, several questions on one
line, code fences, a preamble before the decision, answers spread over several lines, lower
case. `parse_decision` accepts all of those and never raises: a reply it cannot read becomes a
REWRITE whose answer is the whole reply, marked ``parsed=False`` and logged, so the loop
validates what the model said instead of dropping it. When a reply holds several DECISION lines
the last one counts, with the lines that follow it.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

log = logging.getLogger(__name__)

DecisionKind = Literal["REWRITE", "ASK_QUESTIONS", "IMPOSSIBLE"]
MAX_QUESTIONS = 5
"""At most this many clarifying questions are kept (AWS's guidance for clarifying questions)."""

# Markdown a model may wrap a label in: heading hashes, quote marks, bullets, numbers, emphasis.
_LEAD_RE = re.compile(r"^\s*(?:#{1,6}\s*|>\s*)*(?:(?:[-*+•]|\d{1,2}[.)])\s+)?")
_EMPH_RE = re.compile(r"(\*\*|__|\*|`)")
_LABEL_RE = re.compile(
    r"^(decision|answer|explanation|questions?|q(?=\s*\d{0,2}\s*[:：)]))\s*(?:\d{1,2}\s*)?[:：)\-–—]\s*(.*)$", re.I
)
# A second question label inside a line that starts with one: "QUESTION: a? QUESTION: b?", "Q1: a? Q2: b?".
_INLINE_QUESTION_RE = re.compile(r"(?<=\S)\s+(?=(?:\*\*)?(?:question\s*\d{0,2}|q\s*\d{1,2})\s*(?:\*\*)?[:：])", re.I)
_FENCE_RE = re.compile(r"^\s*(```|~~~)[\w+-]*\s*$")
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


def _lines(raw: str) -> list[str]:
    """The reply's lines without code fences, a line of several question labels split in one per label."""
    out: list[str] = []
    for line in raw.splitlines():
        if _FENCE_RE.match(line):
            continue
        m = _LABEL_RE.match(_clean(line))
        if m and m.group(1).lower() in ("question", "q"):
            out.extend(_INLINE_QUESTION_RE.split(line))
        else:
            out.append(line)
    return out


@dataclass
class _Block:
    """What one DECISION block holds so far; a later DECISION line starts a new block."""

    kind: str | None = None
    answer_lines: list[str] | None = None
    questions: list[str] = field(default_factory=list)
    loose: list[str] = field(default_factory=list)  # lines after the decision that belong to no label
    in_questions: bool = False  # after a bare "QUESTIONS:" header, list items are questions
    awaiting_question: bool = False  # after a bare "QUESTION:" label, the next line is the question

    def read(self, line: str) -> None:
        cleaned = _clean(line)
        m = _LABEL_RE.match(cleaned)
        label = m.group(1).lower() if m else None
        if label in ("answer", "explanation"):
            self.answer_lines = [m.group(2)] if m.group(2) else []
            self.in_questions = self.awaiting_question = False
        elif label in ("question", "questions", "q"):
            rest = m.group(2).strip()
            if rest:
                self.questions.append(rest)
            self.awaiting_question = not rest and label != "questions"
            self.in_questions = label == "questions" or self.in_questions
            self.answer_lines = None
        elif self.awaiting_question and cleaned:
            self.questions.append(cleaned)
            self.awaiting_question = False
        elif self.in_questions and cleaned and (cleaned != line.strip() or cleaned.endswith("?")):
            self.questions.append(cleaned)  # a list item (or a plain question) under QUESTIONS:
        elif self.answer_lines is not None:
            self.answer_lines.append(line.rstrip())
        elif self.kind is not None and cleaned:
            self.loose.append(line.rstrip())

    def answer(self) -> str:
        answer = "\n".join(self.answer_lines).strip() if self.answer_lines is not None else ""
        if not answer and self.loose and self.kind != "ASK_QUESTIONS":
            answer = "\n".join(self.loose).strip()
        return _unquoted(answer)


def _unquoted(text: str) -> str:
    """A reply that copied the prompt's quoting (the earlier answer is shown as a JSON string) and wrote its
    answer as one JSON string: the text inside it; any other text unchanged.

    >>> _unquoted('"You get 15% off [d1]."'), _unquoted('"Quoted" words stay.')
    ('You get 15% off [d1].', '"Quoted" words stay.')
    """
    if len(text) >= 2 and text[0] == text[-1] == '"':
        try:
            inner = json.loads(text)
        except ValueError:
            return text
        if isinstance(inner, str):
            return inner.strip()
    return text


def _last_block(raw: str) -> _Block:
    block = _Block()
    for line in _lines(raw):
        m = _LABEL_RE.match(_clean(line))
        if m and m.group(1).lower() == "decision":
            found = _kind_of(m.group(2))
            if found is not None:
                block = _Block(kind=found) if block.kind is not None else _Block(kind=found, answer_lines=block.answer_lines,
                                                                                 questions=block.questions)
            continue
        block.read(line)
    return block


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
    block = _last_block(raw)
    kind, answer = block.kind, block.answer()
    questions = [q for q in block.questions if q]
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
