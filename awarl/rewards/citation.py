"""Citation reward and its judges (docs/rewards.md).

For a rewarded answer (a correct one by default, see ``cite_on``) the reward is ``coverage − w_red · redundancy`` (TRL multiplies it by the
reward weight ``w_cite``): coverage is the share of the needed passages that the answer cites,
redundancy the share of cited passages that are not needed. Abstentions and unparsable answers
get None (no citation term). Which passages are *needed* comes from a judge:

- `GoldJudge`: the dataset's supporting passages (``supporting`` column); a question without
  any supporting passage is not judged, and an unanswerable record (``answerable: false``) is
  never judged, whatever passages it carries;
- `LLMJudge`: an OpenAI-compatible chat endpoint (a vLLM server, a hosted API) reads the
  question, the answer and the passages the agent saw or cited, and names the needed ones as
  strict JSON ``{"needed": [ids]}``, through `awarl.llm.openai_chat` (concurrent, bounded, with
  timeouts and retries with exponential backoff on timeouts / connection errors / 408 / 409 / 429 /
  5xx), and a cache keyed by a hash of the judged content. A judgment that fails is None: excluded from the reward,
  never scored 0, and counted in ``cite/judge_failures``.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import logging
import os
import sqlite3
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


from awarl.agent.settings import RolloutSettings
from awarl.data.records import Passage
from awarl.protocol import parse_final, score
from awarl.rewards.config import RewardConfig

log = logging.getLogger(__name__)

JUDGE_SYSTEM_PROMPT = (
    "You check the evidence behind an answer. You get a question, an answer and passages, each "
    "starting with its id in square brackets. List the ids of all passages needed to support the "
    "answer, and only those. Reply with a JSON object and nothing else: "
    '{"needed": ["<id>", ...]}. Use an empty list when no passage supports the answer.'
)


@dataclass(frozen=True)
class CitationJudgment:
    """Coverage and redundancy of one answer's citations against the needed passages."""

    coverage: float
    redundancy: float
    needed: tuple[str, ...]

    def reward(self, w_red: float) -> float:
        return self.coverage - w_red * self.redundancy


def coverage_redundancy(cited: Sequence[str], needed: Sequence[str]) -> CitationJudgment:
    """coverage = |cited ∩ needed| / |needed| (0 when nothing is needed: the answer has no
    support to cite); redundancy = |cited − needed| / |cited| (0 when nothing is cited).

    >>> j = coverage_redundancy(["a", "x"], ["a", "b"])
    >>> (j.coverage, j.redundancy)
    (0.5, 0.5)
    """
    cited_set, needed_set = set(cited), set(needed)
    coverage = len(cited_set & needed_set) / len(needed_set) if needed_set else 0.0
    redundancy = len(cited_set - needed_set) / len(cited_set) if cited_set else 0.0
    return CitationJudgment(coverage, redundancy, tuple(sorted(needed_set)))


class GoldJudge:
    """Needed passages = the dataset's supporting passages."""

    name = "gold"

    def judge(self, cited: Sequence[str], supporting: Sequence[str]) -> CitationJudgment | None:
        """None when the question has no supporting passage (nothing to judge against)."""
        if not supporting:
            return None
        return coverage_redundancy(cited, supporting)


@dataclass(frozen=True)
class JudgeRequest:
    """What the LLM judge sees for one answered rollout."""

    question: str
    answer: str
    cited: tuple[str, ...]
    passages: tuple[Passage, ...]


class JudgeFailure(Exception):
    """A judgment that could not be obtained; ``reason`` is a short category for the stats."""

    def __init__(self, reason: str, detail: str = ""):
        self.reason, self.detail = reason, detail
        super().__init__(f"{reason}: {detail}" if detail else reason)


@dataclass
class JudgeStats:
    """Counters over the judge's lifetime (requests sent, cache hits, failures by reason)."""

    requests: int = 0
    cache_hits: int = 0
    retries: int = 0
    failures: Counter = field(default_factory=Counter)

    @property
    def failed(self) -> int:
        return sum(self.failures.values())


class JudgeCache:
    """Judgments by content hash, in SQLite (shared by processes and runs) or in memory."""

    def __init__(self, path: str | Path | None = None):
        self.path = str(path) if path else None
        self._memory: dict[str, str] = {}
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            # Several training processes may share one file: wait on locks instead of failing.
            conn = sqlite3.connect(self.path, timeout=60.0, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("CREATE TABLE IF NOT EXISTS judgments (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            conn.commit()
            self._conn = conn
        return self._conn

    def get(self, key: str) -> str | None:
        if self.path is None:
            return self._memory.get(key)
        with self._lock:
            row = self._db().execute("SELECT value FROM judgments WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def put(self, key: str, value: str) -> None:
        if self.path is None:
            self._memory[key] = value
            return
        with self._lock:
            db = self._db()
            db.execute("INSERT OR REPLACE INTO judgments (key, value) VALUES (?, ?)", (key, value))
            db.commit()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "_memory": dict(self._memory)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"])
        self._memory = state["_memory"]


class LLMJudge:
    """Citation judge backed by an OpenAI-compatible ``/chat/completions`` endpoint, through awarl's one
    text-in/text-out adapter (`awarl.llm.text.TextModel`: timeouts, retries with backoff on
    timeouts / connection errors / 408 / 409 / 429 / 5xx, bounded concurrency)."""

    name = "llm"

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None, timeout_s: float = 30.0,
                 max_retries: int = 3, backoff_s: float = 0.5, concurrency: int = 16,
                 cache_path: str | Path | None = None, json_mode: bool = True, max_passage_chars: int = 1500):
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        self.base_url, self.model, self.api_key = base_url, model, api_key
        self.timeout_s, self.max_retries, self.backoff_s = timeout_s, max_retries, backoff_s
        self.concurrency, self.json_mode, self.max_passage_chars = concurrency, json_mode, max_passage_chars
        self.cache = JudgeCache(cache_path)
        self.stats = JudgeStats()
        self._client: Any = None

    @property
    def client(self) -> Any:
        """The judge model (a `TextModel`), made on first use (and again after unpickling)."""
        if self._client is None:
            from awarl.llm.text import TextModel

            self._client = TextModel.openai(
                self.base_url, self.model, api_key=self.api_key or "", timeout_s=self.timeout_s,
                retries=self.max_retries, backoff_s=self.backoff_s, concurrency=self.concurrency, max_new_tokens=256,
                extra_body={"response_format": {"type": "json_object"}} if self.json_mode else None)
        return self._client

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_client": None}

    def messages(self, req: JudgeRequest) -> list[dict[str, str]]:
        """The judge's prompt. It leaves out which passages were cited, and lists passages in id
        order, so rollouts that differ only in their citations share one (cached) judgment."""
        shown = sorted({p.id: p for p in req.passages}.values(), key=lambda p: p.id)
        lines = [f"[{p.id}] {p.title}: {p.text[: self.max_passage_chars]}" for p in shown]
        user = f"Question: {req.question}\nAnswer: {req.answer}\nPassages:\n" + "\n".join(lines)
        return [{"role": "system", "content": JUDGE_SYSTEM_PROMPT}, {"role": "user", "content": user}]

    def cache_key(self, req: JudgeRequest) -> str:
        """Hash of everything the judgment depends on: model and prompt (question, answer, passages)."""
        payload = json.dumps({"model": self.model, "messages": self.messages(req)}, sort_keys=True)
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()

    def judge_many(self, requests: Sequence[JudgeRequest]) -> list[CitationJudgment | None]:
        """Judge a batch (blocking; safe from async code too): cached judgments first, then one request per
        distinct uncached prompt, at most ``concurrency`` in flight. None where the judgment failed."""
        results: list[CitationJudgment | None] = [None] * len(requests)
        pending: dict[str, list[int]] = {}
        for i, req in enumerate(requests):
            if not req.passages:  # nothing to judge against: no support, no call
                results[i] = coverage_redundancy(req.cited, [])
                continue
            key = self.cache_key(req)
            hit = self.cache.get(key)
            if hit is not None:
                self.stats.cache_hits += 1
                results[i] = coverage_redundancy(req.cited, json.loads(hit))
            else:
                pending.setdefault(key, []).append(i)
        if not pending:
            return results
        keys = list(pending)
        client = self.client
        before = (client.requests, client.retries)
        with concurrent.futures.ThreadPoolExecutor(max_workers=min(self.concurrency, len(keys))) as pool:
            outcomes = list(pool.map(self._judge_one, [requests[pending[k][0]] for k in keys]))
        self.stats.requests += client.requests - before[0]
        self.stats.retries += client.retries - before[1]
        for key, outcome in zip(keys, outcomes):
            if isinstance(outcome, JudgeFailure):
                self.stats.failures[outcome.reason] += len(pending[key])
                log.warning("citation judge failed (%s) for %d rollout(s): %s", outcome.reason,
                            len(pending[key]), outcome.detail)
                continue
            self.cache.put(key, json.dumps(outcome))
            for i in pending[key]:
                results[i] = coverage_redundancy(requests[i].cited, outcome)
        return results

    def _judge_one(self, req: JudgeRequest) -> list[str] | JudgeFailure:
        from awarl.llm.base import BackendError

        try:
            [reply] = self.client.chat(self.messages(req), n=1, temperature=0.0)
            return parse_needed(reply, [p.id for p in req.passages])
        except JudgeFailure as failure:
            return failure
        except BackendError as err:  # reason: timeout, connection, http_<status>; else a malformed body
            return JudgeFailure(getattr(err, "reason", "malformed"), str(err)[:300])


def parse_needed(content: str, candidate_ids: Sequence[str]) -> list[str]:
    """Strictly parse the judge's reply: a JSON object whose ``needed`` is a list of candidate ids.

    >>> parse_needed('{"needed": ["d1"]}', ["d1", "d2"])
    ['d1']
    """
    try:
        data = json.loads(content.strip())
    except (json.JSONDecodeError, AttributeError) as err:
        raise JudgeFailure("malformed", f"reply is not JSON: {str(content)[:120]!r} ({err})") from None
    if not isinstance(data, dict) or not isinstance(data.get("needed"), list):
        raise JudgeFailure("malformed", f'reply lacks a "needed" list: {str(content)[:120]!r}')
    needed = data["needed"]
    if not all(isinstance(x, str) for x in needed):
        raise JudgeFailure("malformed", f'"needed" must hold passage id strings: {needed!r}'[:200])
    unknown = [x for x in needed if x not in set(candidate_ids)]
    if unknown:
        raise JudgeFailure("malformed", f"reply names passages that were not shown: {unknown[:5]}")
    return list(dict.fromkeys(needed))


class CitationReward:
    """TRL reward function: ``coverage − w_red · redundancy`` per rewarded answer, else None.

    Which answers are rewarded is ``cite_on``: ``correct`` (default) pays only correct answers, so
    citing the right passages never makes a wrong answer worth more than abstaining;
    ``answered`` pays every answer to an answerable question (kept for ablations). A record with
    ``answerable: false`` is never paid the term. Columns read from ``kw``: ``answers`` and
    ``answerable`` (to know which answers are correct), ``supporting`` (gold judge), ``question``
    (else the prompt's last user message), ``environments`` (SearchEnv with ``.retrieved``, the
    passages the LLM judge may count as needed). Logs ``cite/…`` metrics.
    """

    def __init__(self, cfg: RewardConfig, judge: GoldJudge | LLMJudge | None = None,
                 passages: Mapping[str, Passage] | None = None, rollout: RolloutSettings | None = None):
        if cfg.judge == "off" and judge is None:
            raise ValueError("CitationReward needs a judge: set judge to gold or llm")
        self.cfg = cfg
        self.judge = judge if judge is not None else build_judge(cfg)
        self.passages: Mapping[str, Passage] = passages if passages is not None else {}
        self.rollout = rollout or RolloutSettings()
        self.phrases = self.rollout.phrases
        self.__name__ = "citation_reward"

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], completion_ids: Any = None,
                 **kw: Any) -> list[float | None]:
        failures_before = self._failures()
        judgments, rewarded = self._judge(prompts, completions, kw)
        self._log(kw.get("log_metric"), rewarded, judgments, self._failures() - failures_before)
        return self._rewards(len(completions), judgments)

    def terms(self, prompts: Sequence[Any], completions: Sequence[Any], kw: dict[str, Any],
              verdicts: Sequence[Any] | None = None) -> list[float | None]:
        """The unweighted term each rollout earns (None: none paid), without logging. The LLM judge's
        cache makes the reward's own call that follows free."""
        judgments, _ = self._judge(prompts, completions, kw, verdicts)
        return self._rewards(len(completions), judgments)

    def _rewards(self, n: int, judgments: dict[int, CitationJudgment | None]) -> list[float | None]:
        rewards: list[float | None] = [None] * n
        for i, judgment in judgments.items():
            if judgment is not None:
                rewards[i] = judgment.reward(self.cfg.w_red)
        return rewards

    def _judge(self, prompts: Sequence[Any], completions: Sequence[Any], kw: dict[str, Any],
               verdicts: Sequence[Any] | None = None) -> tuple[dict[int, CitationJudgment | None], list[int]]:
        n = len(completions)
        parsed = [parse_final(c, self.phrases) for c in completions]
        answerable = kw.get("answerable") or [True] * n
        if len(answerable) != n:
            raise ValueError(f"reward column 'answerable' has {len(answerable)} values for {n} completions")
        # An unanswerable record has nothing to cite: its passages (e.g. the person's own page) do not
        # support any answer, so a hallucinated answer citing them is never paid (also under cite_on: answered).
        rewarded = [i for i, p in enumerate(parsed) if p.parsable and not p.abstained and bool(answerable[i])]
        if self.cfg.cite_on == "correct":
            outcomes = ([v.score.outcome for v in verdicts] if verdicts is not None
                        else self._outcomes(parsed, kw, n))
            rewarded = [i for i in rewarded if outcomes[i] == "correct"]
        judgments: dict[int, CitationJudgment | None] = {}
        if isinstance(self.judge, GoldJudge):
            supporting = kw.get("supporting")
            if supporting is None or len(supporting) != n:
                raise ValueError("the gold citation judge needs the dataset column 'supporting' "
                                 "(one list of passage ids per rollout)")
            for i in rewarded:
                judgments[i] = self.judge.judge(parsed[i].citations, supporting[i] or [])
        else:
            requests = [self._request(i, prompts, parsed[i], kw) for i in rewarded]
            judgments = dict(zip(rewarded, self.judge.judge_many(requests)))
        return judgments, rewarded

    def _outcomes(self, parsed: Sequence[Any], kw: dict[str, Any], n: int) -> list[str]:
        answers = kw.get("answers")
        if answers is None or len(answers) != n:
            raise ValueError("cite_on: correct needs the dataset column 'answers' to know which answers are "
                             "correct (or set reward.cite_on: answered)")
        answerable = kw.get("answerable") or [True] * n
        return [score(parsed[i], answers[i], answerable=bool(answerable[i]), metric=self.rollout.metric).outcome
                for i in range(n)]

    def _failures(self) -> int:
        return self.judge.stats.failed if isinstance(self.judge, LLMJudge) else 0

    def _request(self, i: int, prompts: Sequence[Any], parsed: Any, kw: dict[str, Any]) -> JudgeRequest:
        questions = kw.get("question")
        question = questions[i] if questions is not None else _last_user_text(prompts[i])
        envs = kw.get("environments")
        seen: dict[str, None] = {}
        if envs and hasattr(envs[i], "retrieved"):
            for ids in envs[i].retrieved:
                for pid in ids if isinstance(ids, (list, tuple)) else [ids]:
                    seen.setdefault(str(pid), None)
        for pid in parsed.citations:
            seen.setdefault(pid, None)
        shown = tuple(self.passages[pid] for pid in seen if pid in self.passages)
        return JudgeRequest(question=question, answer=parsed.answer, cited=tuple(parsed.citations), passages=shown)

    def _log(self, log_metric: Any, rewarded: list[int], judgments: dict[int, CitationJudgment | None],
             failures: int) -> None:
        if log_metric is None:
            return
        done = [j for j in judgments.values() if j is not None]
        if done:
            log_metric("cite/coverage", sum(j.coverage for j in done) / len(done))
            log_metric("cite/redundancy", sum(j.redundancy for j in done) / len(done))
        if rewarded:
            log_metric("cite/judged", len(done) / len(rewarded))
        log_metric("cite/judge_failures", float(failures))


def _last_user_text(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    for message in reversed(prompt or []):
        if message.get("role") == "user":
            return message.get("content") or ""
    return ""


def build_judge(cfg: RewardConfig) -> GoldJudge | LLMJudge:
    """The judge ``cfg.judge`` names (gold or llm)."""
    if cfg.judge == "gold":
        return GoldJudge()
    if cfg.judge == "llm":
        judge = cfg.llm_judge
        api_key = os.environ.get(judge.api_key_env) if judge.api_key_env else None
        if judge.api_key_env and not api_key:
            raise ValueError(f"reward.llm_judge.api_key_env names ${judge.api_key_env}, which is not set")
        return LLMJudge(judge.base_url, judge.model, api_key=api_key, timeout_s=judge.timeout_s,
                        max_retries=judge.max_retries, backoff_s=judge.backoff_s, concurrency=judge.concurrency,
                        cache_path=judge.cache_path, json_mode=judge.json_mode,
                        max_passage_chars=judge.max_passage_chars)
    raise ValueError(f"no citation judge for judge={cfg.judge!r}")
