"""ThreadManager, the chat service: threads persisted in SQLite, processed by a worker pool, audited on
every exit; its operations raise the domain errors of `awarl.chat.errors` (the app maps them to HTTP).

- Per-thread locks: a worker running a thread and a user answering its questions never
  interleave; different threads run in parallel.
- Workers: each owns its validators, hence its own policy copy and ``z3.Context`` (Z3 objects
  are not thread-safe). Generation goes through the generator's own queue (`AgentGenerator`).
- Persistence: a thread is saved after every state transition. On start, threads a crash left
  PROCESSING are resumed from their saved state or ended in ERROR (``recovery``), audited.
- Clarifying questions wait ``question_timeout_s`` at most; then a sweeper skips them.
- Review queue (`awarl.chat.reviews`): BORDERLINE citations (optionally cross-checked by a second
  judge first) and answers that end INVALID after max iterations; a reviewer's correction joins
  the corrections list and is in every prompt from the next one on.
- What the settings name (validators, translators, judges, generators, the corpus and the
  policies) is built by `awarl.chat.wiring.Wiring`.
"""

from __future__ import annotations

import json
import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from awarl.chat.audit import AuditLog, HeadNotMoved, load_or_create_key
from awarl.chat.config import ChatSettings
from awarl.chat.errors import ChatError, Conflict, Forbidden, Invalid, NotFound, Unavailable
from awarl.chat.generate import ChatGenerator, GeneratorDown, public_error, with_retries
from awarl.chat.loop import Loop
from awarl.chat.reviews import Reviews, ReviewSink
from awarl.chat.store import ServerLock, StorageDown, Store
from awarl.chat.thread import TERMINAL, Badge, Clarification, Exit, Iteration, State, Status, Thread
from awarl.chat.validate import Validator
from awarl.chat.wiring import Wiring

log = logging.getLogger(__name__)

UNSET: Any = object()
MAX_PROMPT_CHARS = 8000
MAX_ANSWER_CHARS = 16000


class ThreadManager:
    """The chat service (see the module docstring): `start` it, call its operations, `close` it."""

    def __init__(self, settings: ChatSettings, *, generators: Mapping[str, ChatGenerator] | None = None):
        self.settings = settings
        self.lock = ServerLock(settings.db).acquire()  # before the database is opened or recovered
        try:
            self._open(generators)
        except BaseException:
            if hasattr(self, "store"):
                self.store.close()
            self.lock.release()
            raise

    def _open(self, generators: Mapping[str, ChatGenerator] | None) -> None:
        settings = self.settings
        self.store = Store(settings.db, timeout_s=settings.db_timeout_s, check=True)
        self._unsaved: dict[str, Thread] = {}  # threads whose last state the database refused; shown from here
        self._exits_written: set[str] = set()
        self.audit = AuditLog(settings.audit, self.store, load_or_create_key(settings.db, settings.audit, settings.audit_secret_env))
        self.wiring = Wiring(settings, self.store, generators)
        self.corrections, self.corpus = self.wiring.corrections, self.wiring.corpus
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._locks: dict[str, threading.Lock] = {}
        self._locks_lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()
        runtime = self.store.setting("config") or {}
        generator = runtime.get("generator", settings.generator)
        if generator is not None and generator not in self.allowed_generators():
            log.warning("the saved runtime generator %r is not on this config's allow-list; serving %r", generator,
                        settings.generator)
            generator = settings.generator
        self.runtime = {
            "generator": generator,
            "policy": runtime.get("policy", settings.policy_name) if runtime.get("policy") in settings.policies else settings.policy_name,
            "max_iterations": runtime.get("max_iterations", settings.max_iterations),
        }
        self.review_queue = Reviews(self.store, self.audit, self.wiring, lambda: self.runtime["policy"])
        log.info("chat: %s mode: %s", self.mode, self.mode_note)

    # -- life cycle ------------------------------------------------------------------------------
    def start(self) -> "ThreadManager":
        self.audit.repair()  # a torn last line cut (and audited) before anything else is appended
        self._recover()
        for n in range(self.settings.workers):
            th = threading.Thread(target=self._worker, name=f"chat-worker-{n}", daemon=True)
            th.start()
            self._threads.append(th)
        sweeper = threading.Thread(target=self._sweeper, name="chat-sweeper", daemon=True)
        sweeper.start()
        self._threads.append(sweeper)
        return self

    def close(self) -> None:
        self._stop.set()
        for _ in range(self.settings.workers):
            self._queue.put(None)
        for th in self._threads:
            th.join(timeout=10)
        self.wiring.close()
        self.store.close()
        self.lock.release()

    # -- API operations ----------------------------------------------------------------------------
    @property
    def mode(self) -> str:
        return "agent" if self.runtime["generator"] else "validate-only"

    @property
    def mode_note(self) -> str:
        """Why the server serves as it does now: the config's note, unless POST /api/config chose another
        generator (saved in the database, so it holds after a restart too)."""
        generator = self.runtime["generator"]
        if generator == self.settings.generator:
            return self.settings.mode_note or f"generator {generator}, policy {self.runtime['policy']}"
        if generator is None:
            return (f"Validate-only mode, chosen in the config panel (POST /api/config) over the configured "
                    f"{self.settings.generator}: POST /api/chat with an `answer` to check it, or pick a generator.")
        return f"Serving {generator}, chosen in the config panel (POST /api/config); policy {self.runtime['policy']}."

    def submit(self, prompt: str, answer: str | None = None, *, token_hash: str | None = None) -> Thread:
        if not prompt or not prompt.strip():
            raise Invalid("empty_prompt", "prompt is empty")
        if len(prompt) > MAX_PROMPT_CHARS:
            raise Invalid("prompt_too_long", f"prompt has {len(prompt)} characters; at most {MAX_PROMPT_CHARS}")
        if answer is not None and not answer.strip():
            raise Invalid("empty_answer", "answer is empty; leave it out to let the agent answer")
        if answer is not None and len(answer) > MAX_ANSWER_CHARS:
            raise Invalid("answer_too_long", f"answer has {len(answer)} characters; at most {MAX_ANSWER_CHARS}")
        generator = self.runtime["generator"]
        if answer is None and not generator:
            raise Unavailable("no_generator", "Validate-only mode: no agent is loaded, so questions cannot be answered. "
                            "Send the answer to check with the prompt ({\"prompt\": ..., \"answer\": ...}), or build the "
                            "world agent with `awarl demo --out runs/demo` and restart `awarl chat serve` "
                            "(or serve any checkpoint with --config configs/chat/<name>.yaml).",
                            {"mode": "validate-only", "note": self.mode_note})
        policy = self.runtime["policy"]
        t = Thread.new(prompt.strip(), given_answer=answer, generator=generator, policy=policy,
                       policy_version=self.wiring.policy_version(policy), max_iterations=int(self.runtime["max_iterations"]))
        t.note("submitted", mode=self.mode)
        self.store.save_thread(t, token_hash=token_hash)
        self._queue.put(t.id)
        return t

    def submit_with_token(self, prompt: str, answer: str | None = None) -> tuple[Thread, str]:
        """`submit`, and the thread's capability token (only its hash is kept)."""
        from awarl.chat.auth import new_token, token_hash

        token = new_token()
        t = self.submit(prompt, answer, token_hash=token_hash(token))
        return t, token

    def get(self, thread_id: str) -> dict[str, Any]:
        return json.loads(self.get_raw(thread_id))

    def get_raw(self, thread_id: str) -> str:
        unsaved = self._unsaved.get(thread_id)
        if unsaved is not None:
            return json.dumps(unsaved.to_dict(), ensure_ascii=False)
        raw = self.store.thread_raw(thread_id)
        if raw is None:
            raise NotFound("thread_not_found", f"no thread {thread_id!r}")
        return raw

    def answer(self, thread_id: str, answers: list[str | None], skipped: bool, reason: str | None = None) -> Thread:
        with self._lock_for(thread_id):
            t = self.store.load_thread(thread_id)
            if t is None:
                raise NotFound("thread_not_found", f"no thread {thread_id!r}")
            if t.status is not Status.AWAITING_INPUT:
                raise Conflict("not_awaiting_input", f"thread {thread_id} is {t.status.value}, not waiting for answers",
                                {"status": t.status.value})
            if not skipped and len(answers) > len(t.pending_questions):
                raise Invalid("too_many_answers",
                                f"{len(answers)} answers for {len(t.pending_questions)} question(s)",
                                {"questions": t.pending_questions})
            if not skipped and not any(a and a.strip() for a in answers):
                raise Invalid("no_answers", "no answer given; send skipped: true to skip the questions")
            for i, a in enumerate(answers):
                if a is not None and len(a) > MAX_PROMPT_CHARS:  # each answer joins every later prompt of the thread
                    raise Invalid("answer_too_long", f"answers[{i}] has {len(a)} characters; at most {MAX_PROMPT_CHARS}")
            why = reason or ("skipped" if skipped else "answered")
            for i, q in enumerate(t.pending_questions):
                a = None if skipped or i >= len(answers) else answers[i]
                if a and a.strip():
                    t.clarifications.append(Clarification(q, a.strip(), False, "answered"))
                else:
                    t.clarifications.append(Clarification(q, None, True, why if skipped else "skipped"))
            t.pending_questions, t.awaiting_since = [], None
            prev = t.last
            t.iterations.append(Iteration(index=len(t.iterations), type="revalidate", prompt="", answer=t.answer,
                                          raw="", search=prev.search if prev else None))
            t.state, t.status = State.VALIDATE, Status.PROCESSING
            t.note("questions " + why)
            self.store.save_thread(t)
        self._queue.put(thread_id)
        return t

    def wait(self, thread_id: str, timeout: float = 30.0, interval: float = 0.02) -> dict[str, Any]:
        """Poll until the thread leaves PROCESSING (tests, benchmarks, scripts)."""
        deadline = time.monotonic() + timeout
        while True:
            d = self.get(thread_id)
            if d["status"] != Status.PROCESSING.value or time.monotonic() > deadline:
                return d
            time.sleep(interval)

    def health(self) -> dict[str, Any]:
        """What /api/health reports: the mode, the database's state, threads waiting to be saved."""
        db = self.store.health()
        try:
            counts = self.store.count_threads() if db["readable"] else None
        except sqlite3.Error:
            counts = None
        return {"ok": bool(db["writable"]) and not self._unsaved, "mode": self.mode, "mode_note": self.mode_note,
                "db": db, "unsaved_threads": sorted(self._unsaved), "threads": counts}

    # -- config ------------------------------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        return {**self.runtime, "mode": self.mode, "mode_note": self.mode_note,
                "generators": sorted(self.allowed_generators()),
                "policies": sorted(self.settings.policies), "decisions": self.settings.uses_decisions(self.runtime["generator"]),
                "question_timeout_s": self.settings.question_timeout_s,
                "corpus": Path(self.settings.corpus).name if self.settings.corpus else None}  # a name, never a server path

    def set_config(self, generator: Any = UNSET, policy: str | None = None, max_iterations: int | None = None) -> dict[str, Any]:
        if policy is not None and policy not in self.settings.policies:
            raise NotFound("policy_not_found", f"no policy named {policy!r}", {"policies": sorted(self.settings.policies)})
        if max_iterations is not None and not 0 <= max_iterations <= 20:
            raise Invalid("bad_max_iterations", f"max_iterations must be in [0, 20], got {max_iterations}")
        if generator is not UNSET and generator is not None and generator not in self.allowed_generators():
            # Never a spec a client invents: a URL would receive every later prompt, a path would be loaded.
            raise Forbidden("generator_not_allowed", f"generator {generator!r} is not on this server's allow-list "
                            "(the config's generator and generators)", {"allowed": sorted(self.allowed_generators())})
        if policy is not None:
            self.wiring.policy_version(policy)
            self.runtime["policy"] = policy
        if max_iterations is not None:
            self.runtime["max_iterations"] = max_iterations
        if generator is not UNSET:
            self.runtime["generator"] = generator or None
        # Only the fields this call set are saved, and only where they differ from the config file: a field
        # left out, or set to the file's value, keeps following the file (a restart after editing it too).
        chosen = {k: self.runtime[k] for k, given in (("policy", policy), ("max_iterations", max_iterations))
                  if given is not None}
        if generator is not UNSET:
            chosen["generator"] = self.runtime["generator"]
        configured = {"policy": self.settings.policy_name, "max_iterations": self.settings.max_iterations,
                      "generator": self.settings.generator}
        saved = {**(self.store.setting("config") or {}), **chosen}
        self.store.set_setting("config", {k: v for k, v in saved.items() if v != configured.get(k)})
        return self.config()

    def allowed_generators(self) -> set[str]:
        """The specs this server may serve (`Wiring.allowed_generators`)."""
        return self.wiring.allowed_generators()

    def policies(self) -> list[dict[str, Any]]:
        from awarl.verify.policy_tests import default_tests_path

        out = []
        for name, path in sorted(self.settings.policies.items()):
            pol = self.wiring.policy(name)
            out.append({"name": name, "file": Path(path).name, "version": pol.version, "variables": len(pol.variables),
                        "rules": [{"id": r.id, "description": r.description} for r in pol.rules],
                        "has_tests": default_tests_path(path).exists(), "active": name == self.runtime["policy"]})
        return out

    def policy_tests(self, name: str, run: bool = False) -> dict[str, Any]:
        from awarl.verify.policy_tests import default_tests_path, load_policy_tests, run_policy_tests
        from awarl.verify.translate import PatternTranslator

        if name not in self.settings.policies:
            raise NotFound("policy_not_found", f"no policy named {name!r}", {"policies": sorted(self.settings.policies)})
        path = default_tests_path(self.settings.policies[name])
        if not path.exists():
            raise NotFound("no_policy_tests", f"policy {name!r} has no tests file ({path.name})")
        tests = load_policy_tests(path)
        rows = [{"name": t.name, "question": t.question, "answer": t.answer, "expected": t.expected.value} for t in tests]
        if run:
            outcomes = run_policy_tests(self.wiring.policy(name), tests, lambda _t: PatternTranslator())
            for row, o in zip(rows, outcomes):
                row.update(actual=o.actual.value if o.actual else None, passed=o.passed)
        return {"policy": name, "tests": rows}

    # -- reviews -----------------------------------------------------------------------------------
    def reviews(self, status: str | None = None) -> list[dict[str, Any]]:
        return self.review_queue.list(status)

    def decide(self, review_id: int, verdict: str, correction: str | None, *, reviewer: str | None = None,
               override: bool = False, reason: str | None = None) -> dict[str, Any]:
        """A reviewer's decision (`Reviews.decide`); a note or reason joins every later prompt, so each is capped."""
        for name, text in (("correction", correction), ("reason", reason)):
            if text is not None and len(text) > MAX_PROMPT_CHARS:
                raise Invalid(f"{name}_too_long", f"{name} has {len(text)} characters; at most {MAX_PROMPT_CHARS}")
        return self.review_queue.decide(review_id, verdict, correction, reviewer=reviewer, override=override,
                                        reason=reason)

    # -- workers -----------------------------------------------------------------------------------
    def _lock_for(self, thread_id: str) -> threading.Lock:
        with self._locks_lock:
            return self._locks.setdefault(thread_id, threading.Lock())

    def _worker(self) -> None:
        validators: dict[str, Validator] = {}  # this worker's own policies and Z3 contexts
        while True:
            tid = self._queue.get()
            if tid is None:
                return
            try:
                self._process(tid, validators)
            except Exception:  # never let one thread kill the worker
                log.exception("worker failed on thread %s", tid)

    def _process(self, tid: str, validators: dict[str, Validator]) -> None:
        with self._lock_for(tid):
            t = self.store.load_thread(tid)
            if t is None or t.status is not Status.PROCESSING:
                return
            try:
                if t.policy not in validators:
                    validators[t.policy] = self.wiring.validator(t.policy)
                generator = self.wiring.generator(t.generator) if t.generator else None
            except Exception as exc:
                detail = exc.detail if isinstance(exc, GeneratorDown) else None
                t.state, t.status, t.exit = State.ERROR, Status.ERROR, Exit.ERROR
                t.error = public_error(f"setup failed: {exc}" if isinstance(exc, GeneratorDown) else "setup failed",
                                       detail or f"{type(exc).__name__}: {exc}", log, f"thread {tid}")
                self._save(t)
                return
            loop = Loop(validators[t.policy], generator, self.wiring.prompts, self.wiring.loop_settings,
                        review_sink=lambda thread_id: ReviewSink(self.store, thread_id, self.corpus, self.wiring.second_judge))
            loop.run(t, self._save)

    def _save(self, t: Thread) -> None:
        """Save after a transition. An exit is saved first (its final state, still PROCESSING to clients),
        then audited once, then shown as done: whoever sees COMPLETED or ERROR finds its audit line, and a
        crash anywhere in between is finished by recovery without a second EXIT line or a re-run."""
        try:
            if t.state in TERMINAL:
                done, t.status = t.status, Status.PROCESSING
                self._store(t)
                self._finish(t)
                t.status = done
            self._store(t)
        except StorageDown as exc:
            self._storage_failed(t, exc)

    def _store(self, t: Thread) -> None:
        """One save, retried with backoff (a lock held past ``db_timeout_s``, a full disk) until StorageDown."""
        with_retries(lambda: self.store.save_thread(t), attempts=self.settings.retries, base_delay=self.settings.backoff_s,
                     what=f"saving thread {t.id}", retry_on=(sqlite3.Error, OSError), error=StorageDown)
        self._unsaved.pop(t.id, None)

    def _storage_failed(self, t: Thread, exc: Exception) -> None:
        """The database refused the thread's state after every retry: the thread ends in ERROR (its exit,
        if it had reached one, is kept), is audited, and is shown from memory until a save succeeds."""
        log.error("thread %s: %s: %s", t.id, exc, getattr(exc, "detail", None))
        if t.state not in TERMINAL:
            t.exit, t.badge = Exit.ERROR, Badge.ERROR
            t.error = "the thread could not be saved: the database is unavailable (locked, full or missing)"
            t.state = State.ERROR
            t.note("error", message=t.error)
        t.status = Status.COMPLETED if t.state is State.COMPLETED else Status.ERROR
        try:
            self._finish(t)
        except (StorageDown, sqlite3.Error, OSError) as audit_exc:
            log.error("thread %s: its exit could not be audited now (%s); the head catches up at the next start",
                      t.id, audit_exc)
        self._unsaved[t.id] = t  # shown from here on: its audit line is written first

    def _finish(self, t: Thread) -> None:
        """Audit the exit and queue a review for it; each at most once per thread."""
        if t.exit is Exit.MAX_ITERATIONS_REACHED and not self.store.has_review(t.id, "max_iterations"):
            last = t.last
            self.store.add_review("max_iterations", {
                "question": t.prompt, "answer": t.final_response, "result": last.result if last else None,
                "rewrites": t.rewrites, "sentence": t.final_response or ""}, t.id)
        if t.id in self._exits_written:
            return
        try:
            audited = self.store.exit_audited(t.id)
        except sqlite3.Error:
            audited = False
        if not audited:
            try:
                self.audit.append(audit_record(t), exit_of=t.id)
            except HeadNotMoved:
                pass  # the line is in the file; the head catches up at the next start
            self._exits_written.add(t.id)

    def _sweeper(self) -> None:
        """Skip clarifying questions nobody answered within ``question_timeout_s``; save the threads the
        database refused once it takes writes again."""
        period = max(0.05, min(1.0, self.settings.question_timeout_s / 4))
        while not self._stop.wait(period):
            for t in list(self._unsaved.values()):
                try:
                    self.store.save_thread(t)
                    self._unsaved.pop(t.id, None)
                    log.info("thread %s saved now that the database takes writes", t.id)
                except (sqlite3.Error, OSError):
                    break
            try:
                for tid in self.store.thread_ids(Status.AWAITING_INPUT):
                    t = self.store.load_thread(tid)
                    if t and t.awaiting_since and time.time() - t.awaiting_since >= self.settings.question_timeout_s:
                        try:
                            self.answer(tid, [], skipped=True, reason="timeout")
                        except ChatError:
                            pass  # answered meanwhile
            except Exception:
                log.exception("question-timeout sweeper")

    def _recover(self) -> None:
        for tid in self.store.thread_ids(Status.PROCESSING):
            t = self.store.load_thread(tid)
            if t is None:
                continue
            if t.state not in TERMINAL and self.store.exit_audited(tid):
                # its exit is in the audit log but the database kept an older state (it refused the last saves)
                t.error = f"ended before a restart, but the database kept an older state ({t.state.value}); see its EXIT line"
                t.state, t.status, t.exit, t.badge = State.ERROR, Status.ERROR, Exit.ERROR, Badge.ERROR
                self.store.save_thread(t)
                log.warning("thread %s: exit audited, state older; ended in ERROR without a second EXIT line", tid)
                continue
            if t.state in TERMINAL:  # it had ended; a crash came before its exit was audited or shown
                t.status = Status.COMPLETED if t.state is State.COMPLETED else Status.ERROR
                self._finish(t)
                self.store.save_thread(t)
                log.warning("thread %s had ended before a restart; its exit is audited once and shown", tid)
                continue
            if self.settings.recovery == "resume":
                t.note("resumed after a restart")
                self.store.save_thread(t)
                self.audit.append({"event": "RESUMED", "thread_id": t.id, "state": t.state.value, "prompt": t.prompt})
                self._queue.put(tid)
            else:
                t.error = f"interrupted by a restart in {t.state.value} (recovery: error)"
                t.state, t.status, t.exit = State.ERROR, Status.ERROR, Exit.ERROR
                t.note("ended in ERROR after a restart")
                self._save(t)
            log.warning("thread %s was left PROCESSING by a restart: %s", tid,
                        "resumed" if self.settings.recovery == "resume" else "ended in ERROR")


def audit_record(t: Thread) -> dict[str, Any]:
    """The audit line of a thread's exit: who asked what, what was served, and every check on the way."""
    return {
        "event": "EXIT",
        "exit": t.exit.value if t.exit else Exit.ERROR.value,
        "thread_id": t.id,
        "prompt": t.prompt,
        "final_response": t.final_response,
        "badge": t.badge.value if t.badge else None,
        "warning": t.warning,
        "error": t.error,
        "model": t.generator or "validate-only",
        "policy": {"name": t.policy, "version": t.policy_version},
        "rewrites": t.rewrites,
        "max_iterations": t.max_iterations,
        "served": t.served,
        "findings": t.iterations[t.served].findings if t.served is not None else t.last.findings if t.last else [],
        "iterations": [{"index": i.index, "type": i.type, "template": i.template, "answer": i.answer, "result": i.result,
                        "decision": (i.decision or {}).get("kind"), "findings": i.findings} for i in t.iterations],
        "clarifications": [{"question": c.question, "answer": c.answer, "skipped": c.skipped, "reason": c.reason}
                           for c in t.clarifications],
    }
