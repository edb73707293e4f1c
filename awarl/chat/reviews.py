"""The review queue: what goes to a person, and what a reviewer's decision does.

- `ReviewSink`: where the citation gate writes BORDERLINE and unjudgeable citations, after an
  optional second judge (a YES from it keeps the case out of the queue). Answers that end INVALID
  after max iterations are queued by the service when the thread exits.
- `Reviews`: the API side, listing reviews and deciding them. A ``reject`` marks the review's
  sentence wrong: the citation gate flags an answer repeating it from then on, and prompts quote
  it as marked wrong. Marking wrong a sentence the corpus supports needs an override and a reason.
  Every decision is audited with the reviewer's name.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Mapping
from typing import Any

from awarl.chat.audit import AuditLog
from awarl.chat.errors import Conflict, Invalid, NotFound
from awarl.chat.store import Store, StoreError
from awarl.chat.validate import Validator, claim_text
from awarl.chat.wiring import Wiring

log = logging.getLogger(__name__)


class ReviewSink:
    """What the citation gate writes BORDERLINE and unjudgeable citations to: the SQLite review queue,
    after an optional second judge (a YES from it keeps the case out of the queue)."""

    def __init__(self, store: Store, thread_id: str, corpus: Mapping[str, Any] | None, second_judge: Any = None):
        self.store, self.thread_id, self.corpus, self.second_judge = store, thread_id, corpus or {}, second_judge

    def add(self, entry: Mapping[str, Any]) -> None:
        entry = dict(entry)
        if self.second_judge is not None and entry.get("reason") == "borderline":
            passages = [self.corpus[i] for i in entry.get("passage_ids", []) if i in self.corpus]
            try:
                verdict = self.second_judge.judge(entry.get("sentence", ""), passages, entry.get("question", ""))
                entry["second_judge"] = verdict.value
                if verdict.value == "YES":
                    log.info("thread %s: second judge cleared a borderline citation", self.thread_id)
                    return
            except Exception as exc:  # a judge that could not judge leaves the case to a person
                entry["second_judge"] = f"failed: {exc}"
        self.store.add_review(entry.get("reason", "borderline"), entry, self.thread_id)


class Reviews:
    """Listing and deciding reviews; ``active_policy()`` names the policy served now (the one a review
    without a thread of a known policy is checked under)."""

    def __init__(self, store: Store, audit: AuditLog, wiring: Wiring, active_policy: Callable[[], str]):
        self.store, self.audit, self.wiring, self.active_policy = store, audit, wiring, active_policy
        self._validators: dict[str, Validator] = {}
        self._lock = threading.Lock()

    def list(self, status: str | None = None) -> list[dict[str, Any]]:
        if status not in (None, "pending", "decided"):
            raise Invalid("bad_status", f"status must be pending or decided, got {status!r}")
        return [r.to_dict() for r in self.store.reviews(status)]

    def decide(self, review_id: int, verdict: str, correction: str | None, *, reviewer: str | None = None,
               override: bool = False, reason: str | None = None) -> dict[str, Any]:
        """A reviewer's decision. ``reject`` marks the review's sentence wrong: from then on the citation
        gate flags an answer repeating it, and prompts quote it as marked wrong. Marking wrong a sentence
        the corpus supports (the checker proves it from its passages, or the support judge says YES)
        needs ``override`` and a ``reason``. Every decision is audited with the reviewer's name."""
        if verdict not in ("approve", "reject"):
            raise Invalid("bad_verdict", f"verdict must be approve or reject, got {verdict!r}")
        review = self.store.review(review_id)
        if review is None:
            raise NotFound("review_not_found", f"no review {review_id}")
        if review.status != "pending":
            raise Conflict("review_decided", f"review {review_id} was already decided")
        note = correction.strip() if correction and correction.strip() else None
        reason = reason.strip() if reason and reason.strip() else None
        if override and not reason:
            raise Invalid("override_needs_reason", "override: true needs a reason (why the corpus is wrong here)")
        sentence = display_sentence(review.data.get("sentence") or "")
        marked = sentence if verdict == "reject" and len(sentence) >= 8 else None
        support = self._support(review) if marked else None
        if support and not override:
            raise Conflict("sentence_supported",
                           f"the corpus supports {sentence!r} ({support}); to mark it wrong anyway send override: true "
                           "and a reason", {"sentence": sentence, "support": support})
        error = re.escape(marked) if marked else None
        try:
            decided = self.store.decide_review(review_id, verdict, note, sentence=marked, error=error, reviewer=reviewer,
                                               override=override, reason=reason)
        except StoreError as exc:
            raise Conflict("review_decided", str(exc)) from None
        self.audit.append({"event": "REVIEW_DECIDED", "review_id": review_id, "thread_id": review.thread_id,
                           "reviewer": reviewer, "verdict": verdict, "sentence_marked_wrong": marked, "note": note,
                           "supported_by_corpus": support, "override": override, "reason": reason})
        return decided.to_dict()

    def _support(self, review: Any) -> str | None:
        """Why the corpus supports the review's sentence, or None: the checker proves it from the passages
        it cites (VALID, nothing INVALID), or the support judge says YES for them."""
        from awarl.verify.citations import Verdict

        corpus = self.wiring.corpus
        thread = self.store.load_thread(review.thread_id) if review.thread_id else None
        ids = list(review.data.get("passage_ids") or []) or [p["id"] for p in (thread.cited if thread else [])]
        evidence = [{"id": i, "title": corpus[i].title, "text": corpus[i].text} for i in ids if corpus and i in corpus]
        if not evidence:
            return None
        sentence = review.data.get("sentence") or ""
        question = review.data.get("question") or (thread.prompt if thread else "")
        policy = thread.policy if thread and thread.policy in self.wiring.settings.policies else self.active_policy()
        with self._lock:  # one validator per policy for the API side, used by one request at a time
            if policy not in self._validators:
                self._validators[policy] = self.wiring.validator(policy)
            v = self._validators[policy]
            cites = " ".join(f"[{p['id']}]" for p in evidence)
            found = v.validate(question, thread.clarifications if thread else [], f"{sentence} {cites}", evidence).findings
            if any(f.result.value == "VALID" for f in found) and not any(f.result.value == "INVALID" for f in found):
                return "the checker proves it from passages " + ", ".join(p["id"] for p in evidence)
            passages = [corpus[p["id"]] for p in evidence]
            if v.judge is not None and v.judge.judge(sentence, passages, question) is Verdict.YES:
                return "the support judge says YES for passages " + ", ".join(p["id"] for p in evidence)
        return None


def display_sentence(text: str) -> str:
    """A sentence as a reviewer saw it: no ``<answer>`` tags, no citation markers."""
    return claim_text(text)
