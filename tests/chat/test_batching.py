"""Batched generation: the questions of concurrent threads run as one batched rollout, each under a
rollout id of its own; greedy answers are those of one-at-a-time generation, and a request that
fails in a batch fails alone."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from awarl.chat.generate import AgentGenerator, GenerationQueue
from awarl.llm.base import Generation
from awarl.search.bm25 import BM25Index


def test_requests_within_the_window_run_as_one_batch_up_to_max_batch():
    seen: list[list[int]] = []
    q = GenerationQueue(lambda kind, xs: seen.append(list(xs)) or [x * 2 for x in xs], max_batch=4, window_s=0.3)
    try:
        futures = []
        for x in range(6):
            futures.append(q.submit("answer", x))
            time.sleep(0.01)
        assert [f.result(timeout=5) for f in futures] == [0, 2, 4, 6, 8, 10]
    finally:
        q.close()
    assert seen == [[0, 1, 2, 3], [4, 5]] and q.sizes == {4: 1, 2: 1}


def test_a_batch_holds_one_kind_of_request():
    seen: list[tuple[str, list[str]]] = []
    q = GenerationQueue(lambda kind, xs: seen.append((kind, list(xs))) or list(xs), max_batch=8, window_s=0.2)
    try:
        futures = [q.submit(kind, f"{kind}{n}") for n, kind in enumerate(["answer", "rewrite", "answer"])]
        assert [f.result(timeout=5) for f in futures] == ["answer0", "rewrite1", "answer2"]
    finally:
        q.close()
    assert seen == [("answer", ["answer0", "answer2"]), ("rewrite", ["rewrite1"])]


def test_one_failing_request_does_not_lose_the_others():
    def run(kind, xs):
        if "bad" in xs:
            raise ValueError("cannot answer 'bad'")
        return [x.upper() for x in xs]

    q = GenerationQueue(run, max_batch=8, window_s=0.2)
    try:
        futures = [q.submit("answer", x) for x in ("a", "bad", "c")]
        assert futures[0].result(timeout=5) == "A" and futures[2].result(timeout=5) == "C"
        with pytest.raises(ValueError, match="bad"):
            futures[1].result(timeout=5)
    finally:
        q.close()
    assert q.sizes == {3: 1, 1: 3}  # the failed batch, then each request alone


class Recorder:
    """A chat backend that answers at once, fails on questions containing 'boom', and records each
    prompt's rollout seed."""

    accepts, tokenizer, eos_token_ids, max_model_len, name = "messages", None, [], None, "recorder"

    def __init__(self):
        self.seeds: dict[str, list[int]] = {}
        self.batches: list[int] = []
        self._lock = threading.Lock()

    def generate(self, prompts, params):
        with self._lock:
            self.batches.append(len(prompts))
        questions = [prompt.messages[-1]["content"] for prompt in prompts]
        for i, question in enumerate(questions):
            self.seeds.setdefault(question, []).append(params.seeds[i])
        if any("boom" in q for q in questions):
            raise ConnectionError("the backend failed on a prompt of this batch")
        out = []
        for question in questions:
            text = f"<answer>{question.split()[-1]}</answer>"
            out.append(Generation(text=text, message={"role": "assistant", "content": text}, prompt_tokens=10,
                                  completion_tokens=5))
        return out

    def close(self):
        pass


def test_a_failed_batch_rerun_one_by_one_keeps_each_requests_draws():
    backend = Recorder()
    gen = AgentGenerator(backend, _index(), max_batch=8, window_s=0.3)
    questions = ["Where is q1?", "Where is boom?", "Where is q3?"]
    try:
        with ThreadPoolExecutor(3) as pool:
            futures = [pool.submit(gen.answer, q, 1.0) for q in questions]
            time.sleep(0.01)
            replies = [f.exception(timeout=10) or f.result() for f in futures]
    finally:
        gen.close()
    assert isinstance(replies[1], ConnectionError)
    assert [replies[0].answer, replies[2].answer] == ["q1?", "q3?"]
    assert backend.batches[0] == 3  # one batch first
    for q in (questions[0], questions[2]):  # its draw in the batch and alone are the same stream
        assert len(backend.seeds[q]) == 2 and len(set(backend.seeds[q])) == 1


def _index():
    from awarl.data.records import Passage

    return BM25Index.build([Passage("d1", "Paris", "Paris is the capital of France.")])


def test_concurrent_greedy_questions_batched_get_the_one_at_a_time_answers(tiny_world_sft_model_dir, test_world):
    """The tiny world agent (a real checkpoint) answers 4 questions greedily one at a time, then the same
    4 asked at once by 4 threads: one batched rollout, the same answers, searches and citations."""
    from awarl.chat.generate import rollout_of
    from awarl.llm.hf import HFGenerator

    backend = HFGenerator(tiny_world_sft_model_dir, device="cpu")
    retriever = BM25Index.build(list(test_world.passages))
    rollout = rollout_of(tiny_world_sft_model_dir)
    questions = [q.question for q in test_world.split("eval")][:4]

    def key(r):
        return (r.text, r.answer, r.citations, r.queries, r.retrieved_ids, r.stop_reason)

    single = AgentGenerator(backend, retriever, rollout, max_batch=1)
    try:
        alone = [key(single.answer(q, 0.0)) for q in questions]
    finally:
        single.close()
    batched = AgentGenerator(backend, retriever, rollout, max_batch=8, window_s=0.5)
    try:
        with ThreadPoolExecutor(len(questions)) as pool:
            together = [key(r) for r in pool.map(lambda q: batched.answer(q, 0.0), questions)]
    finally:
        batched.close()
    assert batched.batch_sizes == {4: 1}
    assert together == alone
    assert any(a[1] for a in alone)  # it answered something (the check is not over empty replies)


def test_batch_settings_are_checked():
    from awarl.chat.config import ChatSettings
    from awarl.config_fields import ConfigError

    with pytest.raises(ConfigError, match="batch_size"):
        ChatSettings(batch_size=0)
    with pytest.raises(ConfigError, match="batch_window_ms"):
        ChatSettings(batch_window_ms=-1)
