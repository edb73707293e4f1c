"""The verify-and-rewrite loop as an explicit state machine.

::

    GENERATE_INITIAL ─► VALIDATE ─► CHECK_QUESTIONS ─► HANDLE_RESULT ─► COMPLETED
                           ▲              │                  │
                           │              ▼                  ▼
                           │       AWAITING_INPUT      REWRITING_LOOP ─► COMPLETED (IMPOSSIBLE, ABSTAINED)
                           └──────────────┴──────────────────┘
    any state ─► ERROR (generator or checker down after retries, or a bug), audited

- GENERATE_INITIAL: the agent answers (or a given answer is taken, validate-only); an abstention
  ends the thread with its search trace — never rewritten into a guess.
- VALIDATE: automated-reasoning check + citation gates (`awarl.chat.validate`).
- CHECK_QUESTIONS: clarifying questions pending → AWAITING_INPUT (the thread pauses; answers,
  a skip or the timeout resume it at VALIDATE, the user's answers now among the premises).
- HANDLE_RESULT: the kind of the findings (`awarl.verify.findings.kind_of`). VALID → served.
  NO_TRANSLATIONS / partly valid, or ``max_iterations`` rewrites made → the best checked answer
  of the thread is served (`serve_rank`: VALID > SATISFIABLE > an abstention > other unvalidated
  > INVALID, never a worse one after a better) under the badge `KINDS` gives its kind.
  Anything else → a rewrite.
- REWRITING_LOOP: the top finding picks the template (citation problems have their own). A
  generator that follows the DECISION protocol rewrites, asks (≤ 5 questions) or declares the
  question impossible; for one that only answers (the tiny world agent) the loop first asks the
  user itself on an askable finding (`awarl.chat.prompts.loop_questions`: which namesake, or what
  the scenarios differ on), else re-asks it with the finding as feedback, sampled at the
  configured temperature (verify-and-resample).

``thread.rewrites`` counts REWRITING_LOOP entries, so ``max_iterations = 3`` means exactly three
rewrites.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from awarl.chat.generate import AgentReply, ChatGenerator, GeneratorDown, public_error, with_retries
from awarl.chat.parser import parse_decision
from awarl.chat.prompts import Prompts, loop_questions
from awarl.chat.thread import Badge, Clarification, Exit, Iteration, State, Status, Thread
from awarl.chat.validate import Validator
from awarl.protocol import extract_answer, format_final
from awarl.verify.findings import KINDS, Finding, Result, aggregate, kind_of, partly_valid, sort_findings
from awarl.verify.translate import qualified

log = logging.getLogger(__name__)

_TAGS_RE = re.compile(r"</?answer>", re.I)
ASKABLE = tuple(Result(k) for k, row in KINDS.items() if row.askable)


class CheckerDown(GeneratorDown):
    """Validation failed after every retry (e.g. the LLM translator's endpoint is down)."""


@dataclass
class LoopSettings:
    max_questions: int = 5
    """Clarifying questions kept from one ASK_QUESTIONS decision."""
    max_question_rounds: int = 1
    """How many times one thread may pause for questions."""
    temperature: float = 1.0
    """Sampling temperature when an answer-only agent is re-asked (verify-and-resample)."""
    first_temperature: float = 0.0
    """The first answer is greedy, as in evaluation."""
    resample_feedback: bool = True
    """Re-ask an answer-only agent with the finding as feedback; False re-asks the bare question (a
    small agent trained on bare questions may be derailed by any added text)."""
    retries: int = 3
    """Attempts per generation or validation call."""
    backoff_s: float = 0.5
    """First retry delay; doubles each retry."""


def display_text(answer: str) -> str:
    """What the user sees: the answer without ``<answer>`` tags (citations kept).

    >>> display_text("<answer>Ruvia</answer> [d1]")
    'Ruvia [d1]'
    """
    return " ".join(_TAGS_RE.sub(" ", answer or "").split())


class Loop:
    """Runs one thread until it completes, fails, or waits for the user."""

    def __init__(self, validator: Validator, generator: ChatGenerator | None, prompts: Prompts,
                 settings: LoopSettings | None = None, review_sink: Callable[[str], Any] | None = None):
        self.validator, self.generator, self.prompts = validator, generator, prompts
        self.settings = settings or LoopSettings()
        self.review_sink = review_sink or (lambda thread_id: None)
        self._handlers = {
            State.GENERATE_INITIAL: self._generate_initial,
            State.VALIDATE: self._validate,
            State.CHECK_QUESTIONS: self._check_questions,
            State.HANDLE_RESULT: self._handle_result,
            State.REWRITING_LOOP: self._rewrite,
        }

    def run(self, t: Thread, save: Callable[[Thread], None] = lambda t: None) -> Thread:
        """Step through states, saving after each, until COMPLETED, ERROR or AWAITING_INPUT."""
        while t.state in self._handlers:
            before = t.state
            try:
                self._handlers[t.state](t)
            except GeneratorDown as exc:
                self._fail(t, public_error(str(exc), exc.detail, log, f"thread {t.id}"))
            except Exception as exc:  # a bug or bad input must end the thread visibly, not leave it PROCESSING
                self._fail(t, public_error(f"internal error in {before.value}", f"{type(exc).__name__}: {exc}", log,
                                           f"thread {t.id}", trace=True))
            save(t)
        return t

    # -- states ----------------------------------------------------------------------------------
    def _generate_initial(self, t: Thread) -> None:
        if t.given_answer is not None:
            t.iterations.append(Iteration(index=0, type="given", prompt=t.prompt, answer=t.given_answer))
            self._set_answer(t, t.given_answer, _citations(t.given_answer))  # its cited passages are evidence too
            t.state = State.VALIDATE
            return
        question = self.prompts.agent_question(t.prompt, t.clarifications, self.validator.corrections.block(t.prompt))
        reply = self._ask(question, self.settings.first_temperature)
        t.iterations.append(Iteration(index=0, type="initial", prompt=question, answer=reply.text, raw=reply.text,
                                      search=reply.search(), generate_s=reply.seconds))
        self._after_reply(t, reply)

    def _validate(self, t: Thread) -> None:
        it = t.last
        assert it is not None
        if it.type == "revalidate" and _answered_after_abstaining(t):
            # An abstention has nothing to check: the user's answers go to the agent instead.
            if any(c.answered for c in _this_round(t)):
                t.note("the user answered after an abstention; the agent is asked again")
                t.state = State.REWRITING_LOOP
            else:
                self._serve_best(t)
            return
        sink = self.review_sink(t.id)
        clarifications = [_restated(t, c) for c in t.clarifications]
        returned = _returned(t)
        v = with_retries(lambda: self.validator.validate(t.prompt, clarifications, t.answer, t.cited, sink, returned),
                         attempts=self.settings.retries, base_delay=self.settings.backoff_s,
                         what=f"validation of thread {t.id}", retry_on=(OSError, RuntimeError), error=CheckerDown)
        if v.recited is not None:  # the search's own passages cite what it proved; the reply's ids did not
            t.note("citations replaced", before=_citations(t.answer), after=_citations(v.recited))
            self._set_answer(t, v.recited, _citations(v.recited))
        it.findings = [f.to_dict() for f in v.findings]
        result = aggregate(v.findings)
        it.result = result.value if result else None
        it.partly_valid = partly_valid(v.findings)
        it.premises_text, it.validate_s, it.solver_s, it.given = v.premises, v.seconds, v.solver_seconds, v.given
        it.answer, it.cited, it.namesakes = t.answer, list(t.cited), list(v.extras.get("namesakes", []))
        it.trace_premises, it.recited = list(v.trace), v.recited is not None
        it.hedged = list(v.extras.get("hedged", []))
        t.note("validated", result=it.result)
        t.state = State.CHECK_QUESTIONS

    def _check_questions(self, t: Thread) -> None:
        if t.pending_questions:
            t.state, t.status, t.awaiting_since = State.AWAITING_INPUT, Status.AWAITING_INPUT, time.time()
            t.note("awaiting input", questions=len(t.pending_questions))
        else:
            t.state = State.HANDLE_RESULT

    def _handle_result(self, t: Thread) -> None:
        it = _last_checked(t)
        assert it is not None
        kind = _kind(it)
        if kind in ("VALID", "VALID_GIVEN_YOUR_STATEMENT"):
            self._serve(t, it, Exit.VALID_RESPONSE)
        elif self.generator is None or t.generator is None:
            self._serve(t, it, Exit.CHECKED_ONLY if kind not in (None, "NO_TRANSLATIONS", "PARTLY_VALID") else Exit.NO_TRANSLATIONS,
                        checked_only=True)
        elif kind in (None, "NO_TRANSLATIONS", "PARTLY_VALID") or t.rewrites >= t.max_iterations:
            self._serve_best(t)
        else:
            t.state = State.REWRITING_LOOP

    def _rewrite(self, t: Thread) -> None:
        assert self.generator is not None
        prev = t.last
        assert prev is not None
        findings = [Finding.from_dict(d) for d in prev.findings]
        result = aggregate(findings)
        top = next((f for f in sort_findings(findings) if f.result is result), None)  # None: the last reply had no answer
        t.rewrites += 1
        policy = self.validator.policy
        corrections = self.validator.corrections.block(f"{t.prompt}\n{t.answer}")
        index = len(t.iterations)
        # What the user could settle is in the logic: an answer SATISFIABLE whose citations alone are
        # INVALID is asked about too (once its premise is given, the search's passages may cite it).
        logic = aggregate([f for f in findings if f.citation is None]) or result
        if (not self.generator.decisions and logic in ASKABLE and top is not None
                and t.question_rounds < self.settings.max_question_rounds):
            asked = loop_questions([f for f in findings if f.citation is None], policy, prev.namesakes)[: self.settings.max_questions]
            if asked:
                # An answer-only agent cannot write DECISION lines: the loop asks what the scenarios differ on.
                t.iterations.append(Iteration(index=index, type="ask", prompt="\n".join(q for q, _ in asked),
                                              answer=t.answer, template="loop_question",
                                              findings=prev.findings, result=prev.result, cited=list(prev.cited)))
                t.pending_questions = [q for q, _ in asked]
                t.question_options.update({q: options for q, options in asked if options})
                t.question_rounds += 1
                t.state = State.CHECK_QUESTIONS
                return
        if not self.generator.decisions or top is None:
            # after an abstention the user's answers are what is new: there is no rejected answer to tell of
            after_abstention = prev.type == "revalidate" and _answered_after_abstaining(t)
            feedback = (self.prompts.resample_feedback(top, policy)
                        if self.settings.resample_feedback and not after_abstention else "")
            # the user's replies as typed, after the questions they answer: restated as premises ("Talo Nast
            # was born in Dorin.") they cost the demo's agent 11-17 of 220 namesake questions (docs/chat.md)
            question = self.prompts.agent_question(t.prompt, t.clarifications, corrections, feedback)
            reply = self._ask(question, self.settings.temperature)
            t.iterations.append(Iteration(index=index, type="resample", prompt=question, answer=reply.text, raw=reply.text,
                                          template="resample_feedback" if feedback else None, search=reply.search(),
                                          generate_s=reply.seconds))
            self._after_reply(t, reply)
            return
        may_ask = result in ASKABLE and t.question_rounds < self.settings.max_question_rounds
        name, prompt = self.prompts.rewrite(question=t.prompt, answer=display_text(t.answer), findings=findings, top=top,
                                            policy=policy, clarifications=t.clarifications, evidence=t.cited,
                                            corrections=corrections, may_ask=may_ask)
        started = time.perf_counter()
        gen = self.generator
        raw = with_retries(lambda: gen.rewrite(prompt), attempts=self.settings.retries,
                           base_delay=self.settings.backoff_s, what=f"rewrite of thread {t.id} ({gen.name})")
        decision = parse_decision(raw, self.settings.max_questions)
        it = Iteration(index=index, type="rewrite", prompt=prompt, answer=t.answer, raw=raw, template=name,
                       decision=decision.to_dict(), generate_s=time.perf_counter() - started)
        t.iterations.append(it)
        if not decision.parsed:
            t.note("unparseable decision; the whole reply is the rewrite", reason=decision.note)
        if decision.kind == "IMPOSSIBLE" and result is Result.IMPOSSIBLE:
            # Only the checker can find the premises contradictory; then the explanation is served as such.
            self._complete(t, Exit.IMPOSSIBLE, Badge.IMPOSSIBLE, "The checker found the question's premises contradictory.",
                           final=decision.text or display_text(t.answer))
        elif decision.kind == "IMPOSSIBLE":
            # Declaring a checkable question impossible is no way out of the check: its text is a rewrite.
            t.note("IMPOSSIBLE declared but the checker found the premises consistent; the text is checked as a rewrite",
                   result=result.value if result else None)
            if decision.text.strip():
                it.answer = decision.text
                self._set_answer(t, decision.text, _citations(decision.text))
            t.state = State.VALIDATE
        elif decision.kind == "ASK_QUESTIONS" and may_ask:
            t.pending_questions = list(decision.questions)
            t.question_rounds += 1
            it.findings, it.result = prev.findings, prev.result  # nothing new was checked
            t.state = State.CHECK_QUESTIONS
        elif decision.kind == "ASK_QUESTIONS":
            t.note("questions are not allowed now; the earlier answer is checked again")
            t.state = State.VALIDATE
        else:
            it.answer = decision.text
            self._set_answer(t, decision.text, _citations(decision.text))
            t.state = State.VALIDATE

    # -- helpers ---------------------------------------------------------------------------------
    def _ask(self, question: str, temperature: float) -> AgentReply:
        if self.generator is None:
            raise GeneratorDown("no generator is configured (validate-only mode)")
        gen = self.generator
        return with_retries(lambda: gen.answer(question, temperature), attempts=self.settings.retries,
                            base_delay=self.settings.backoff_s, what=f"generation ({gen.name})")

    def _after_reply(self, t: Thread, reply: AgentReply) -> None:
        if reply.answer is None:
            # A reply without a final answer (a broken tool call, a spent budget) is neither checked nor
            # served; the agent is asked again while rewrites remain. The previous answer stays current.
            t.note("no final answer from the agent", stop_reason=reply.stop_reason)
            if t.rewrites < t.max_iterations:
                t.state = State.REWRITING_LOOP
            elif _last_checked(t) is not None:
                t.state = State.HANDLE_RESULT  # the last checked answer decides how the thread ends
            elif any(i.abstained for i in t.iterations):
                self._serve_best(t)  # asked again after abstaining, it gave nothing: the abstention stands
            else:
                self._complete(t, Exit.MAX_ITERATIONS_REACHED, Badge.NOT_VALIDATED,
                               f"The agent gave no final answer in {t.rewrites + 1} attempt(s).", final="")
            return
        it = t.last
        assert it is not None
        # The iteration's answer is what is checked and served (`raw` keeps the reply): the passages its
        # search returned are found by it (`_returned`), so a reply that repeats an id keeps its trace.
        it.answer = _served_text(reply)
        self._set_answer(t, it.answer, reply.citations)
        if reply.abstained:
            it.abstained, it.cited = True, list(t.cited)
            if not self._ask_which(t, it):
                self._serve_best(t)  # an abstention ends the thread; an earlier SATISFIABLE answer is still served first
        else:
            t.state = State.VALIDATE

    def _ask_which(self, t: Thread, it: Iteration) -> bool:
        """After an abstention on a question whose person has namesakes the corpus tells apart only by
        the fact the answer turns on, ask the user which one is meant (once per thread, while attempts
        remain); the agent is then asked again with the answer (`_validate`). False: nothing to ask."""
        if (self.generator is None or t.question_rounds >= self.settings.max_question_rounds
                or t.rewrites >= t.max_iterations):
            return False
        namesakes = self.validator.open_namesakes(t.prompt)
        settled = {c.question for c in t.clarifications if c.answered}
        asked = [(q, o) for q, o in loop_questions([], self.validator.policy, namesakes)
                 if q not in settled][: self.settings.max_questions]
        if not asked:
            return False
        it.namesakes = namesakes
        # the ask step's prompt is what it asked the user, one question per line (`_this_round`)
        t.iterations.append(Iteration(index=len(t.iterations), type="ask", prompt="\n".join(q for q, _ in asked),
                                      answer=t.answer, template="loop_question", cited=list(it.cited)))
        t.pending_questions = [q for q, _ in asked]
        t.question_options.update({q: options for q, options in asked if options})
        t.question_rounds += 1
        t.note("the agent abstained; asking which namesake is meant", questions=len(asked))
        t.state = State.CHECK_QUESTIONS
        return True

    def _serve_best(self, t: Thread) -> None:
        """Serve the best answer the thread produced (`serve_rank`), never a worse one after a better."""
        best = min(_servable(t), key=serve_rank)
        kind = _kind(best)
        if kind == "ABSTAINED":
            exit = Exit.ABSTAINED
        elif kind in (None, "NO_TRANSLATIONS", "PARTLY_VALID"):
            exit = Exit.NO_TRANSLATIONS
        else:
            exit = Exit.MAX_ITERATIONS_REACHED
        self._serve(t, best, exit)

    def _serve(self, t: Thread, it: Iteration, exit: Exit, checked_only: bool = False) -> None:
        """Complete the thread with ``it``'s answer under the badge `KINDS` gives its kind."""
        kind = _kind(it)
        row = KINDS[kind or "NO_TRANSLATIONS"]
        if checked_only and kind not in ("INVALID", "NO_TRANSLATIONS", "PARTLY_VALID", None):
            row = KINDS["CHECKED_ONLY"]
            warning = f"{row.summary} The checker found it {kind}."
        elif kind == "VALID":  # (re-cited, the trace passages are its citations now: said below)
            warning = (None if not it.trace_premises or it.recited else "Valid with a premise from the agent's search "
                       "trace that it did not cite: " + " ".join(f"[{i}]" for i in it.trace_premises) + ".")
        elif kind == "VALID_GIVEN_YOUR_STATEMENT":
            warning = "Valid given your statement: " + " ".join(f"“{g}”" for g in it.given) + " (taken as you said it, not checked)."
        elif kind is None:
            warning = "Not validated: the checker returned no findings for this answer."
        else:
            warning = row.summary
            if checked_only and kind == "INVALID":
                warning += " Validate-only mode has no agent to rewrite it."
        if kind in ("VALID", "VALID_GIVEN_YOUR_STATEMENT") and it.recited:
            warning = _then(warning, (
                "The agent's own citations did not support it; it is cited with passages its search returned: "
                + " ".join(f"[{c['id']}]" for c in it.cited) + ".") if it.cited else (
                "The agent's own citations did not support it and were removed; it follows from what you said and "
                "the policy's rules."))
        if it.hedged and kind not in ("VALID", "VALID_GIVEN_YOUR_STATEMENT"):
            warning = _then(warning,
                "Not taken as facts, as they qualify what they state: " + " ".join(f"“{h}”" for h in it.hedged)
                + "; state them plainly to have them used.")
        clash = next((i for i in t.iterations if i.result == Result.IMPOSSIBLE.value and i.type != "ask"), None)
        if clash is not None and kind != "IMPOSSIBLE":
            # What the user stated and what was cited then cannot both hold: whatever is served, the user hears it.
            cited = " ".join(f"[{c['id']}]" for c in clash.cited) or "none"
            warning = _then(warning,
                f"When checking an earlier answer, the checker found your question's statements, the policy and the "
                f"passages cited then ({cited}) contradictory: check what you stated.")
        if kind == "ABSTAINED" and any(c.answered for c in t.clarifications) and any(
                i.type == "ask" and i.index > 0 and t.iterations[i.index - 1].abstained for i in t.iterations):
            warning = _then(warning, "Asked again with your answer, it still did not answer.")
        if exit is Exit.MAX_ITERATIONS_REACHED:
            attempts = "rewrite(s)" if self.generator is not None and self.generator.decisions else "more attempt(s)"
            warning = f"{warning} Best found: {kind}, after {t.rewrites} {attempts}."
        # the answers checked, each once (`_servable`)
        checked = _servable(t)
        if warning and len(checked) > 1 and it in checked:
            warning += f" The best of {len(checked)} checked answers is shown (answer {checked.index(it) + 1})."
        t.answer, t.cited, t.served = it.answer, list(it.cited), it.index
        self._complete(t, exit, Badge(row.badge), warning)

    def _set_answer(self, t: Thread, answer: str, citations: list[str]) -> None:
        t.answer = answer
        corpus: Mapping[str, Any] = self.validator.corpus or {}
        t.cited = [{"id": c, "title": corpus[c].title, "text": corpus[c].text} for c in citations if c in corpus]

    def _complete(self, t: Thread, exit: Exit, badge: Badge, warning: str | None = None, final: str | None = None) -> None:
        t.exit, t.badge, t.warning = exit, badge, warning
        t.final_response = final if final is not None else display_text(t.answer)
        t.state, t.status = State.COMPLETED, Status.COMPLETED
        t.pending_questions = []
        t.note("completed", exit=exit.value, badge=badge.value)

    def _fail(self, t: Thread, message: str) -> None:
        t.exit, t.badge, t.error = Exit.ERROR, Badge.ERROR, message
        t.state, t.status = State.ERROR, Status.ERROR
        t.note("error", message=message)


def _then(warning: str | None, more: str) -> str:
    """A warning with one more sentence."""
    return f"{warning} {more}" if warning else more


def _restated(t: Thread, c: Clarification) -> Clarification:
    """A reply to a question the loop built that names exactly one of its options, restated as the
    premise that option stands for ("Dorin" → "Talo Nast was born in Dorin.")."""
    options = t.question_options.get(c.question)
    if not options or not c.answer:
        return c
    found = [(m, s) for value, s in options.items() if (m := re.search(rf"(?<!\w){re.escape(value)}(?!\w)", c.answer, re.I))]
    if len(found) != 1 or qualified(c.answer, [found[0][0].span()]):  # "Not the one in Dorin." names no option
        return c
    return replace(c, answer=found[0][1])


def _served_text(reply: AgentReply) -> str:
    """The reply as the loop checks and serves it. A reply with an ``<answer>`` block is that block as the
    protocol reads it (`awarl.protocol.extract_answer`, the reader of rewards and evaluation) and the ids it
    cites: text outside the block is neither checked nor served, so the answer the checker proves is the one
    the evaluation scores ("<answer>Morland</answer> who" is served as "Morland"). A reply without tags (a
    scripted or plain-text agent) is its own answer.

    >>> _served_text(AgentReply.from_text("<answer>Morland</answer> who [d1]"))
    '<answer>Morland</answer> [d1]'
    >>> _served_text(AgentReply.from_text("<answer>Morland [d1]</answer> [d2]"))  # an id inside is not repeated
    '<answer>Morland [d1]</answer> [d2]'
    """
    if reply.answer is None or extract_answer(reply.text) is None:
        return reply.text
    return format_final(reply.answer, [c for c in reply.citations if f"[{c}]" not in reply.answer])


def _kind(it: Iteration) -> str | None:
    """The `KINDS` key of one iteration: ABSTAINED, VALID_GIVEN_YOUR_STATEMENT, a finding kind, or
    None when nothing was checked."""
    if it.abstained:
        return "ABSTAINED"
    kind = kind_of(Finding.from_dict(d) for d in it.findings)
    return "VALID_GIVEN_YOUR_STATEMENT" if kind == "VALID" and it.given else kind


def serve_rank(it: Iteration) -> tuple[int, int]:
    """Serving order: VALID > SATISFIABLE > an abstention > any other unvalidated answer > INVALID
    (`KINDS` ranks), the earlier answer first among equals."""
    kind = _kind(it)
    return (KINDS[kind].rank if kind else 3, it.index)


def _servable(t: Thread) -> list[Iteration]:
    """The answers a thread may serve: each checked answer as last checked (an answer checked again after
    the user's answers is judged by that check: "SATISFIABLE" before, INVALID once the user said which
    person is meant) and each abstention; an ask step only repeats the answer before it."""
    out = []
    for k, it in enumerate(t.iterations):
        if it.type == "ask" or not (it.abstained or it.result is not None or it.findings):
            continue
        if any(later.type == "revalidate" and later.answer == it.answer and (later.result is not None or later.findings)
               for later in t.iterations[k + 1:]):
            continue
        out.append(it)
    return out


def _returned(t: Thread) -> list[dict[str, str]]:
    """The passages the search behind the current answer returned to the agent: those of the latest
    iteration with this answer that has a search trace (a DECISION rewrite has none)."""
    it = next((i for i in reversed(t.iterations) if i.answer == t.answer and i.search), None)
    return list((it.search or {}).get("returned") or []) if it is not None else []


def _answered_after_abstaining(t: Thread) -> bool:
    """Whether the thread's current answer, the one the user's answers came after, is an abstention."""
    it = next((i for i in reversed(t.iterations) if i.type not in ("ask", "revalidate")), None)
    return it is not None and it.abstained and it.answer == t.answer


def _this_round(t: Thread) -> list[Clarification]:
    """The clarifications of the latest round the loop asked after an abstention (its ask step's lines)."""
    ask = next((i for i in reversed(t.iterations) if i.type == "ask"), None)
    n = len(ask.prompt.splitlines()) if ask is not None else 0
    return t.clarifications[-n:] if n else []


def _last_checked(t: Thread) -> Iteration | None:
    """The latest iteration whose answer was validated (replies without an answer are skipped)."""
    return next((i for i in reversed(t.iterations) if i.result is not None or i.findings), None)


def _citations(text: str) -> list[str]:
    from awarl.protocol import extract_citations

    return extract_citations(text)
