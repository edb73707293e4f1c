"""Generators the loop can drive: the trained search agent, or a scripted one.

`AgentGenerator` runs the agent exactly as evaluation does — the rollout runner over a
`SearchEnv` with the rollout settings the checkpoint was trained with — so its answers carry
citations and its abstentions mean what they meant in training. An in-process model is not
thread-safe and batches well, so every request goes through one `GenerationQueue`: a single
thread that takes all waiting questions and runs them as one batch.

`ScriptedGenerator` answers from a script; tests and ``scripts/bench_chat.py`` use it to drive
the loop down each path without a model.

Both raise `GeneratorDown` when the backend cannot answer after the retries (`with_retries`:
exponential backoff), which ends the thread in ERROR instead of hanging it.
"""

from __future__ import annotations

import collections
import itertools
import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from awarl.llm.text import TextModel
from awarl.protocol import DEFAULT_REFUSAL_PHRASES, extract_answer, extract_citations, is_abstention

log = logging.getLogger(__name__)
T = TypeVar("T")


class GeneratorDown(RuntimeError):
    """The generator could not answer (unreachable, failing, or too slow) after every retry.

    ``str(exc)`` is what a client may read (the thread's error); ``detail`` is the cause (an exception's
    text, which may name hosts, paths or data), kept for the server log only (`public_error`)."""

    def __init__(self, message: str, detail: str | None = None):
        super().__init__(message)
        self.detail = detail


def public_error(message: str, detail: str | None, logger: logging.Logger, context: str, *, trace: bool = False) -> str:
    """The thread error a client reads: ``message`` and, where there is a cause, a reference to the server-log
    line that holds it (never the exception's text: it may name hosts, paths or data); ``trace`` logs the
    exception being handled with it."""
    if not detail:
        return message
    ref = uuid.uuid4().hex[:12]
    logger.error("%s: %s: %s (reference %s)", context, message, detail, ref, exc_info=trace)
    return f"{message} (reference {ref}: the server log has the cause)"


@dataclass
class AgentReply:
    """The agent's final message and how it got there."""

    text: str
    answer: str | None
    abstained: bool
    citations: list[str]
    queries: list[str] = field(default_factory=list)
    retrieved_ids: list[str] = field(default_factory=list)
    stop_reason: str = "answer"
    seconds: float = 0.0
    returned: list[dict[str, str]] = field(default_factory=list)
    """The passages the searches returned, as shown to the agent (``id``, ``title``, ``text``)."""

    def search(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items()
                if k in ("queries", "retrieved_ids", "citations", "stop_reason", "returned")}

    @classmethod
    def from_text(cls, text: str, phrases: tuple[str, ...] = DEFAULT_REFUSAL_PHRASES, **kw: Any) -> "AgentReply":
        """A reply from final text alone; text without ``<answer>`` tags is the answer itself, and text with
        a malformed block (`extract_answer` reads none) is no answer."""
        answer = extract_answer(text)
        if answer is None and "<answer>" in text.casefold():
            return cls(text=text, answer=None, abstained=False, citations=extract_citations(text), stop_reason="no_answer", **kw)
        if answer is None:
            answer = text.strip()
        return cls(text=text, answer=answer, abstained=is_abstention(answer, phrases), citations=extract_citations(text), **kw)


class ChatGenerator(Protocol):
    name: str
    decisions: bool
    """True: rewrite prompts are answered with DECISION / ANSWER / QUESTION lines. False: the
    generator only answers questions, so the loop re-asks it with the finding as feedback."""

    def answer(self, question: str, temperature: float) -> AgentReply: ...

    def rewrite(self, prompt: str) -> str: ...


_RETRYABLE: tuple[type[BaseException], ...] = (OSError, TimeoutError, ConnectionError, RuntimeError)


def with_retries(fn: Callable[[], T], *, attempts: int, base_delay: float, what: str,
                 retry_on: tuple[type[BaseException], ...] = _RETRYABLE,
                 error: Callable[..., Exception] = GeneratorDown) -> T:
    """Call ``fn``; on a retryable error wait ``base_delay * 2**k`` and try again, ``attempts`` times in all.
    Then raise ``error(message, detail=cause)`` (`GeneratorDown`, `awarl.chat.store.StorageDown`): the message a
    client may read, the cause for the server log."""
    last: BaseException | None = None
    for k in range(max(1, attempts)):
        try:
            return fn()
        except retry_on as exc:
            last = exc
            if k + 1 < attempts:
                delay = base_delay * (2**k)
                log.warning("%s failed (%s); retry %d/%d in %.2fs", what, exc, k + 1, attempts - 1, delay)
                time.sleep(delay)
    said = f": {last}" if isinstance(last, GeneratorDown) else ""  # its message is already one a client may read
    detail = getattr(last, "detail", None) or f"{type(last).__name__}: {last}"
    raise error(f"{what} failed after {attempts} attempt(s){said}", detail=detail) from last


# -- scripted --------------------------------------------------------------------------------------
class ScriptedGenerator:
    """Answers from functions: ``answer_fn(question, n)`` returns the agent's final text, or None for
    a reply without a final answer (``n`` counts calls); ``rewrite_fn(prompt, n)`` returns the reply to a rewrite prompt. ``down=True`` fails every
    call the way an unreachable server does. Every prompt it receives is kept in ``prompts``."""

    def __init__(self, answer_fn: Callable[[str, int], str], rewrite_fn: Callable[[str, int], str] | None = None, *,
                 decisions: bool | None = None, name: str = "scripted", down: bool = False, delay: float = 0.0,
                 phrases: tuple[str, ...] = DEFAULT_REFUSAL_PHRASES):
        self.answer_fn, self.rewrite_fn = answer_fn, rewrite_fn
        self.decisions = rewrite_fn is not None if decisions is None else decisions
        self.name, self.down, self.delay, self.phrases = name, down, delay, phrases
        self.prompts: list[tuple[str, str]] = []
        self._n = {"answer": 0, "rewrite": 0}
        self._lock = threading.Lock()

    def _count(self, kind: str, prompt: str) -> int:
        with self._lock:
            self.prompts.append((kind, prompt))
            n = self._n[kind]
            self._n[kind] += 1
        if self.down:
            raise ConnectionError(f"{self.name}: connection refused")
        if self.delay:
            time.sleep(self.delay)
        return n

    def answer(self, question: str, temperature: float) -> AgentReply:
        n = self._count("answer", question)
        started = time.perf_counter()
        text = self.answer_fn(question, n)
        if text is None:  # the script's way to say "the agent ended without a final answer"
            return AgentReply(text="", answer=None, abstained=False, citations=[], stop_reason="no_answer")
        return AgentReply.from_text(text, self.phrases, seconds=time.perf_counter() - started)

    def rewrite(self, prompt: str) -> str:
        n = self._count("rewrite", prompt)
        if self.rewrite_fn is None:
            raise RuntimeError(f"{self.name} has no rewrite script")
        return self.rewrite_fn(prompt, n)


# -- the trained agent -------------------------------------------------------------------------------
class GenerationQueue:
    """One thread runs every generation; callers wait on a future (with a timeout, never forever).

    ``batch_fn(kind, payloads)`` handles a list of same-kind requests at once, so the requests of
    concurrent threads become one batched rollout: after the first request the queue waits up to
    ``window_s`` for more, ``max_batch`` at most (1: one at a time). A batch that fails is run again
    one request at a time, so a bad request fails alone and the others still get their results.
    ``sizes`` counts the batches run by size.
    """

    def __init__(self, batch_fn: Callable[[str, list[Any]], list[Any]], *, max_batch: int = 16, window_s: float = 0.0,
                 name: str = "generation"):
        if max_batch < 1 or window_s < 0:
            raise ValueError(f"max_batch must be >= 1 and window_s >= 0, got {max_batch} and {window_s}")
        self.batch_fn, self.max_batch, self.window_s = batch_fn, max_batch, window_s
        self.sizes: collections.Counter[int] = collections.Counter()
        self._q: queue.Queue[tuple[str, Any, Future] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, kind: str, payload: Any) -> Future:
        fut: Future = Future()
        self._q.put((kind, payload, fut))
        return fut

    def close(self) -> None:
        self._q.put(None)

    def _run(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            batch, held = self._gather(item)
            for h in held:
                self._q.put(h)
            self._answer(item[0], batch)

    def _gather(self, first: tuple[str, Any, Future]) -> tuple[list[tuple[str, Any, Future]], list[Any]]:
        """``first`` and the same-kind requests that arrive within the window; the others are held."""
        batch, held = [first], []
        deadline = time.monotonic() + self.window_s
        while len(batch) < self.max_batch:
            wait = deadline - time.monotonic()
            try:
                nxt = self._q.get(timeout=wait) if wait > 0 else self._q.get_nowait()
            except queue.Empty:
                break
            if nxt is not None and nxt[0] == first[0]:
                batch.append(nxt)
            else:
                held.append(nxt)
                if nxt is None:  # closing: run what is here without waiting
                    break
        return batch, held

    def _answer(self, kind: str, batch: list[tuple[str, Any, Future]]) -> None:
        self.sizes[len(batch)] += 1
        try:
            results = self.batch_fn(kind, [b[1] for b in batch])
            if len(results) != len(batch):
                raise RuntimeError(f"{len(results)} results for a batch of {len(batch)} {kind} requests")
        except BaseException as exc:
            if len(batch) > 1:
                log.warning("a batch of %d %s requests failed (%s); running each alone", len(batch), kind, exc)
                for b in batch:
                    self._answer(kind, [b])
                return
            batch[0][2].set_exception(exc)  # the waiting caller learns why
            return
        for (_, _, fut), res in zip(batch, results):
            fut.set_result(res)


def rollout_of(checkpoint: str | Path | None, recorded: Mapping[str, Any] | None = None) -> Any:
    """The `RolloutSettings` a served agent runs under: those saved with the checkpoint
    (``rollout.json`` / ``awarl_recipe.yaml``), else ``recorded`` (a demo manifest's), else the defaults.
    Chat questions have no passage list of their own, so the scope is always ``global``; and the chatbot
    serves without a synthetic world's search noise (``world_noise`` off: its users get the index's results)."""
    from awarl.agent.settings import RolloutSettings, load_rollout
    from awarl.config_fields import ConfigError

    settings = None
    if checkpoint is not None:
        try:
            settings = load_rollout(checkpoint)
        except ConfigError as exc:
            log.warning("%s", exc)
    if settings is None and recorded:
        settings = RolloutSettings.from_dict(recorded if isinstance(recorded, RolloutSettings) else dict(recorded),
                                             "rollout settings")
    settings = settings or RolloutSettings()
    if settings.world_noise is not None:
        log.info("serving without the world's search noise (%s): the chatbot shows the index's results", settings.world_noise)
        settings = RolloutSettings.from_dict({**settings.to_dict(), "world_noise": None}, "rollout settings")
    return settings.replace(scope="global") if settings.scope != "global" else settings


class AgentGenerator:
    """The trained agent: `awarl.agent.runner.Runner` + ``search`` over the corpus, via one queue.

    ``rewrite_backend`` (default: the same backend) answers rewrite prompts when ``decisions``, as
    plain text through `awarl.llm.text.TextModel` (greedy, at most 512 new tokens). The questions of
    concurrent threads run as one batched rollout of up to ``max_batch`` (gathered for ``window_s``
    after the first; 1 runs them one at a time), each still under a rollout id of its own.
    """

    def __init__(self, backend: Any, retriever: Any, rollout: Any = None, *,
                 rewrite_backend: Any = None, decisions: bool = False, name: str | None = None,
                 timeout_s: float = 300.0, max_batch: int = 16, window_s: float = 0.0):
        self.backend, self.retriever = backend, retriever
        self.rollout = rollout if rollout is not None else rollout_of(None)
        self.rewrite_backend = rewrite_backend or backend
        self._rewriter = TextModel(self.rewrite_backend, max_new_tokens=512)
        self.decisions = decisions
        self.name = name or getattr(backend, "name", "agent")
        self.timeout_s = timeout_s
        self.phrases = tuple(self.rollout.phrases)
        self._runners: dict[float, Any] = {}
        # Sampling is seeded per rollout id (awarl.agent.runner.rollout_seed), so every request gets an id
        # of its own: a resample of the same question draws a new answer, and a restarted server repeats
        # the same sequence of draws.
        self._requests = itertools.count()
        self._queue = GenerationQueue(self._batch, max_batch=max_batch, window_s=window_s)

    def close(self) -> None:
        self._queue.close()

    @property
    def batch_sizes(self) -> collections.Counter[int]:
        """How many generation batches ran, by size."""
        return self._queue.sizes

    def answer(self, question: str, temperature: float) -> AgentReply:
        # The id is the request's, taken at submission: a batch that fails and is run again one by one
        # keeps each request's draws.
        request = f"chat-{next(self._requests)}"
        return self._wait(self._queue.submit("answer", (question, temperature, request)), "the agent's answer")

    def rewrite(self, prompt: str) -> str:
        return self._wait(self._queue.submit("rewrite", prompt), "the rewrite")

    def _wait(self, fut: Future, what: str) -> Any:
        try:
            return fut.result(timeout=self.timeout_s)
        except TimeoutError as exc:  # concurrent.futures.TimeoutError is TimeoutError since 3.11
            raise TimeoutError(f"{what} took longer than {self.timeout_s:.0f}s") from exc

    # -- runs on the generation thread ---------------------------------------------------------
    def _runner(self, temperature: float) -> Any:
        if temperature not in self._runners:
            from awarl.agent.setup import build_runner

            self._runners[temperature] = build_runner(self.backend, self.retriever, self.rollout, temperature=temperature)
        return self._runners[temperature]

    def _batch(self, kind: str, payloads: list[Any]) -> list[Any]:
        if kind == "rewrite":
            return [self._rewriter.generate([p], n=1, temperature=0.0)[0][0] for p in payloads]
        from awarl.agent.runner import Rollout
        from awarl.data.records import QARecord

        out: list[Any] = [None] * len(payloads)
        by_temp: dict[float, list[int]] = {}
        for i, (_, temp, _) in enumerate(payloads):
            by_temp.setdefault(temp, []).append(i)
        for temp, idx in by_temp.items():
            rollouts = [Rollout(QARecord(id=payloads[i][2], question=payloads[i][0], answers=[""], dataset="chat"))
                        for i in idx]
            trajs = self._runner(temp).run(rollouts)
            for i, t in zip(idx, trajs):
                # No <answer> block (a broken tool call, a spent budget) is no answer: it is never checked
                # or served as one, whatever text the model left.
                out[i] = AgentReply(text=t.final_text, answer=t.answer, abstained=is_abstention(t.answer, self.phrases),
                                    citations=list(t.citations), queries=list(t.queries),
                                    retrieved_ids=list(t.retrieved_ids), stop_reason=t.stop_reason, seconds=t.seconds,
                                    returned=returned_passages(t, self.retriever))
        return out


def returned_passages(trajectory: Any, retriever: Any) -> list[dict[str, str]]:
    """The passages the agent's searches returned, each once, with the text as the search result showed it
    (``<title>: <text> [<id>]``, cut to the rollout's passage words): all the agent saw, and so the only
    passages the loop may take an uncited premise from (`awarl.chat.validate.Validator`)."""
    from awarl.protocol import parse_results

    out: list[dict[str, str]] = []
    seen: set[str] = set()
    results = [call.result or "" for turn in trajectory.turns for call in turn.tool_calls if not call.failed]
    for result in results:
        for pid, head, text in parse_results(result):
            if pid in seen:
                continue
            try:
                title = retriever.get_passage(pid).title
            except KeyError:
                continue
            shown = f"{head}: {text}"
            if shown.startswith(f"{title}: "):  # the corpus's title, which may hold ": " itself
                seen.add(pid)
                out.append({"id": pid, "title": title, "text": shown[len(title) + 2:]})
    return out
