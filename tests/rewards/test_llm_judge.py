"""The LLM citation judge against a real local HTTP server replaying OpenAI-compatible replies."""

from __future__ import annotations

import asyncio
import json
import pickle
import socket

import pytest

from awarl.data.records import Passage
from awarl.rewards import LLMJudge, RewardConfig, build_reward_funcs
from awarl.rewards.citation import JudgeFailure, JudgeRequest, parse_needed

GOOD = (Passage("d1", "A", "SUPPORT one"), Passage("d2", "B", "SUPPORT two"), Passage("d3", "C", "noise"))


def request(question="q", cited=("d1", "d3"), passages=GOOD):
    return JudgeRequest(question=question, answer="x", cited=tuple(cited), passages=tuple(passages))


@pytest.fixture
def server(replay_server):
    with replay_server(hang_s=1.0) as srv:
        yield srv


def judge_for(server, tmp_path=None, **kw):
    settings = dict(timeout_s=2.0, max_retries=2, backoff_s=0.01, concurrency=8)
    settings.update(kw)
    cache = tmp_path / "judge.sqlite" if tmp_path is not None else None
    return LLMJudge(server.base_url, "judge-model", cache_path=cache, **settings)


def test_good_judgment_and_request_shape(server):
    judge = judge_for(server)
    [result] = judge.judge_many([request()])
    assert result.needed == ("d1", "d2")
    assert (result.coverage, result.redundancy) == (0.5, 0.5)
    body = server.requests[0]
    assert body["model"] == "judge-model" and body["response_format"] == {"type": "json_object"}
    assert body["messages"][0]["role"] == "system" and "[d3] C: noise" in body["messages"][1]["content"]
    assert "Answer: x" in body["messages"][1]["content"]
    assert judge.stats.requests == 1 and judge.stats.failed == 0


def test_cache_hits_avoid_repeat_calls_and_persist(server, tmp_path):
    judge = judge_for(server, tmp_path)
    batch = [request(f"q{i}") for i in range(5)] + [request("q0")]  # a repeat inside the batch
    first = judge.judge_many(batch)
    assert len(server.requests) == 5
    second = judge.judge_many(batch)
    assert len(server.requests) == 5 and judge.stats.cache_hits == 6 and second == first
    reopened = judge_for(server, tmp_path)  # a new process / run reading the same SQLite file
    assert reopened.judge_many(batch[:2]) == first[:2] and len(server.requests) == 5
    # Other citations, same question, answer and passages: the cached judgment still applies.
    [recited] = judge.judge_many([request("q0", cited=("d2", "d1"))])
    assert len(server.requests) == 5 and (recited.coverage, recited.redundancy) == (1.0, 0.0)
    # Other passages (in another order too) are other content: a new call.
    judge.judge_many([request("q0", passages=GOOD[::-1][:2])])
    assert len(server.requests) == 6
    judge.judge_many([request("q0", passages=GOOD[1:])])  # the same two passages, other order
    assert len(server.requests) == 6


def test_malformed_reply_is_excluded_counted_and_not_retried(server):
    judge = judge_for(server)
    results = judge.judge_many([request("[[malformed]]"), request("[[badshape]]"), request("fine")])
    assert results[0] is None and results[1] is None and results[2] is not None
    assert judge.stats.failures["malformed"] == 2
    assert len(server.requests) == 3  # strict parsing failures are not retried


def test_timeout_is_retried_then_excluded(server):
    judge = judge_for(server, timeout_s=0.2, max_retries=1)
    [result] = judge.judge_many([request("[[timeout]]")])
    assert result is None and judge.stats.failures["timeout"] == 1
    assert judge.stats.retries == 1 and server.by_content and max(server.by_content.values()) == 2


def test_server_errors_are_retried_with_backoff(server):
    judge = judge_for(server, max_retries=2)
    flaky, broken = judge.judge_many([request("[[flaky]]"), request("[[500]]")])
    assert flaky is not None and flaky.needed == ("d1", "d2")
    assert broken is None and judge.stats.failures["http_500"] == 1
    assert len(server.requests) == 6  # 3 attempts each
    again = judge.judge_many([request("[[500]]")])  # failures are not cached
    assert again == [None] and len(server.requests) == 9


def test_rate_limit_is_retried_and_client_errors_are_not(server):
    judge = judge_for(server, max_retries=2)
    limited, rejected = judge.judge_many([request("[[429]]"), request("[[400]]")])
    assert limited is not None and rejected is None
    assert judge.stats.failures == {"http_400": 1} and judge.stats.retries == 1
    assert sorted(server.by_content.values()) == [1, 2]


def test_judge_many_works_inside_a_running_event_loop(server):
    judge = judge_for(server)

    async def caller():
        return judge.judge_many([request()])  # sync call from async code: runs on a worker thread

    [result] = asyncio.run(caller())
    assert result is not None and result.needed == ("d1", "d2")


def test_strict_parsing():
    with pytest.raises(JudgeFailure, match="not shown"):
        parse_needed(json.dumps({"needed": ["d7"]}), ["d1"])
    with pytest.raises(JudgeFailure, match="id strings"):
        parse_needed(json.dumps({"needed": [1]}), ["d1"])
    with pytest.raises(JudgeFailure, match="malformed"):
        parse_needed('```json\n{"needed": []}\n```', ["d1"])


def test_connection_refused_is_a_counted_failure():
    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    judge = LLMJudge(f"http://127.0.0.1:{port}/v1", "m", timeout_s=0.5, max_retries=1, backoff_s=0.01)
    assert judge.judge_many([request()]) == [None]
    assert judge.stats.failures["connection"] == 1


def test_concurrency_is_bounded(replay_server):
    with replay_server(latency_s=0.05) as srv:
        judge = judge_for(srv, concurrency=4)
        results = judge.judge_many([request(f"q{i}") for i in range(16)])
        assert all(r is not None for r in results)
        assert 1 < srv.max_in_flight <= 4


def test_citation_reward_with_llm_judge(server, tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(p.to_dict()) + "\n" for p in GOOD))
    cfg = RewardConfig.from_dict({"judge": "llm", "w_red": 0.5, "llm_judge": {
        "base_url": server.base_url, "model": "judge-model", "max_retries": 0, "corpus_path": str(corpus)}})
    funcs, weights = build_reward_funcs(cfg)
    cite = funcs[1]
    assert cite.__name__ == "citation_reward" and weights == [1.0, 0.2]
    cite = pickle.loads(pickle.dumps(cite))  # what TRL's multiprocessing might do

    class Env:
        def __init__(self, retrieved):
            self.queries, self.retrieved = ["q"], retrieved

    prompts = [[{"role": "user", "content": "who?"}], [{"role": "user", "content": "[[malformed]] who?"}],
               [{"role": "user", "content": "who?"}]]
    completions = [[{"role": "assistant", "content": "<answer>x</answer> [d1] [d2]"}],
                   [{"role": "assistant", "content": "<answer>x</answer> [d1]"}],
                   [{"role": "assistant", "content": "<answer>not enough information</answer>"}]]
    logged: dict = {}
    out = cite(prompts, completions, environments=[Env([["d1", "d3"], ["d2"]])] * 3, answers=[["x"]] * 3,
               log_metric=lambda k, v: logged.setdefault(k, []).append(v))
    assert out == [1.0, None, None]
    assert logged["cite/judge_failures"] == [1.0] and logged["cite/judged"] == [0.5]
    assert logged["cite/coverage"] == [1.0]
