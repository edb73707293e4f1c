"""A conversation thread and its iterations: what the loop works on and what the API returns.

A thread is saved after every state transition, so a restart resumes it where it stood; it is
a plain dataclass that round-trips through JSON (`Thread.to_dict` / `Thread.from_dict`).
"""

from __future__ import annotations

import enum
import secrets
import time
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from awarl.verify.findings import BADGE_KIND, KINDS


class State(str, enum.Enum):
    """Where a thread stands in the verify-and-rewrite loop (see `awarl.chat.loop`)."""

    GENERATE_INITIAL = "GENERATE_INITIAL"
    VALIDATE = "VALIDATE"
    CHECK_QUESTIONS = "CHECK_QUESTIONS"
    HANDLE_RESULT = "HANDLE_RESULT"
    REWRITING_LOOP = "REWRITING_LOOP"
    AWAITING_INPUT = "AWAITING_INPUT"
    COMPLETED = "COMPLETED"
    ERROR = "ERROR"


class Status(str, enum.Enum):
    """What a client needs to know: is the thread working, waiting for the user, or done."""

    PROCESSING = "PROCESSING"
    AWAITING_INPUT = "AWAITING_INPUT"
    COMPLETED = "COMPLETED"
    ERROR = "ERROR"


class Exit(str, enum.Enum):
    """How a thread ended; every exit is one audit line."""

    VALID_RESPONSE = "VALID_RESPONSE"
    MAX_ITERATIONS_REACHED = "MAX_ITERATIONS_REACHED"
    IMPOSSIBLE = "IMPOSSIBLE"
    ABSTAINED = "ABSTAINED"
    NO_TRANSLATIONS = "NO_TRANSLATIONS"
    CHECKED_ONLY = "CHECKED_ONLY"
    """Validate-only mode: a given answer was checked; there is no generator to rewrite it."""
    ERROR = "ERROR"


Badge = enum.Enum("Badge", {b: b for b in dict.fromkeys(kind.badge for kind in KINDS.values())},  # type: ignore[misc]
                  type=str, module=__name__)
Badge.__doc__ = """The validation badge the UI shows beside the final answer: the badges of the finding-kinds
table (`awarl.verify.findings.KINDS`), so a kind with a badge of its own needs nothing here."""


TERMINAL = (State.COMPLETED, State.ERROR)


@dataclass
class Clarification:
    """One clarifying question and what became of it: answered, skipped by the user, or timed out."""

    question: str
    answer: str | None = None
    skipped: bool = False
    reason: str = "answered"  # answered | skipped | timeout

    @property
    def answered(self) -> bool:
        """The user answered it (not skipped, not timed out, not blank)."""
        return not self.skipped and bool(self.answer and self.answer.strip())


@dataclass
class Iteration:
    """One answer the thread produced and what the checks said about it.

    ``type`` is ``given`` (validate-only), ``initial`` (the agent's first answer), ``rewrite`` (a
    DECISION turn), ``resample`` (the agent re-asked with the finding as feedback), ``ask`` (the loop
    asked the user about the answer before it, or which namesake is meant after an abstention) or
    ``revalidate`` (the same answer checked again after clarifications; after an abstention, the
    agent is asked again instead).
    """

    index: int
    type: str
    prompt: str
    answer: str
    raw: str = ""
    template: str | None = None
    findings: list[dict[str, Any]] = field(default_factory=list)
    result: str | None = None
    partly_valid: bool = False
    decision: dict[str, Any] | None = None
    search: dict[str, Any] | None = None
    cited: list[dict[str, str]] = field(default_factory=list)
    """The passages this answer cited that exist in the corpus (what it was checked against)."""
    namesakes: list[dict[str, Any]] = field(default_factory=list)
    """Cited passages kept out of the premises because their name means several entities, or (on an
    abstention) the namesakes the question leaves open (`Validator`)."""
    abstained: bool = False
    """The agent declined to answer (an abstention is served before an unvalidated guess)."""
    premises_text: str = ""
    given: list[str] = field(default_factory=list)
    """The user's statements the VALID proof rests on (question sentences, clarification answers)."""
    trace_premises: list[str] = field(default_factory=list)
    """Passages the agent's search returned but it did not cite, whose text the VALID proof needed."""
    recited: bool = False
    """Whether the loop replaced the reply's citations with passages its search returned (`Validation.recited`)."""
    hedged: list[str] = field(default_factory=list)
    """The user's statements left out of the premises because they qualify what they state (`Validator._plain`)."""
    generate_s: float = 0.0
    validate_s: float = 0.0
    solver_s: float = 0.0


@dataclass
class Thread:
    id: str
    prompt: str
    given_answer: str | None = None
    generator: str | None = None
    policy: str = ""
    policy_version: str = ""
    max_iterations: int = 3
    status: Status = Status.PROCESSING
    state: State = State.GENERATE_INITIAL
    created: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)
    iterations: list[Iteration] = field(default_factory=list)
    clarifications: list[Clarification] = field(default_factory=list)
    pending_questions: list[str] = field(default_factory=list)
    question_options: dict[str, dict[str, str]] = field(default_factory=dict)
    """For a question the loop built: each option the user may name, and the premise it states."""
    awaiting_since: float | None = None
    question_rounds: int = 0
    rewrites: int = 0
    answer: str = ""
    """The current answer (final message text, citations included)."""
    cited: list[dict[str, str]] = field(default_factory=list)
    """Passages the current answer cites that exist in the corpus: their text is evidence (premises)."""
    final_response: str | None = None
    served: int | None = None
    """The index of the iteration whose answer was served (the best checked one, see `awarl.chat.loop`)."""
    exit: Exit | None = None
    badge: Badge | None = None
    warning: str | None = None
    error: str | None = None
    events: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def new(cls, prompt: str, **kw: Any) -> "Thread":
        return cls(id=secrets.token_hex(8), prompt=prompt, **kw)  # 64 random bits

    @property
    def last(self) -> Iteration | None:
        return self.iterations[-1] if self.iterations else None

    def note(self, what: str, **data: Any) -> None:
        """A line of the thread's own log, shown in the debug panel."""
        self.events.append({"time": time.time(), "state": self.state.value, "event": what, **data})

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for key in ("status", "state", "exit", "badge"):
            d[key] = getattr(self, key).value if getattr(self, key) is not None else None
        kind = BADGE_KIND.get(self.badge.value) if self.badge is not None else None
        d["badge_label"], d["badge_style"] = (kind.label, kind.style) if kind else (None, None)
        d["valid_from"] = self.valid_from
        return d

    @property
    def valid_from(self) -> str | None:
        """What a VALID served answer was proved from: ``citations`` (its cited passages and the user's
        statements alone), ``search trace`` (it also needed a passage it was shown but did not cite, or
        its own citations were replaced by such passages) or ``your statement`` (its citations did not
        support it and were removed: the user's statements and the policy's rules prove it)."""
        if self.badge not in (Badge.VALID, Badge.VALID_GIVEN_YOUR_STATEMENT) or self.served is None:
            return None
        served = self.iterations[self.served]
        if served.recited and not served.cited:
            return "your statement"
        return "search trace" if served.trace_premises or served.recited else "citations"

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Thread":
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in known}
        kw["status"] = Status(kw.get("status", "PROCESSING"))
        kw["state"] = State(kw.get("state", "GENERATE_INITIAL"))
        kw["exit"] = Exit(kw["exit"]) if kw.get("exit") else None
        kw["badge"] = Badge(kw["badge"]) if kw.get("badge") else None
        kw["iterations"] = [Iteration(**i) for i in kw.get("iterations", [])]
        kw["clarifications"] = [Clarification(**c) for c in kw.get("clarifications", [])]
        return cls(**kw)
