"""The OpenAI-compatible backend against a real local HTTP server speaking the documented shapes."""

from __future__ import annotations

import socket
import time

import pytest

from awarl.llm.base import BackendError, ChatPrompt, SamplingParams
from awarl.llm.openai_chat import OpenAIChatGenerator, from_openai_message, to_openai_messages
from awarl.llm.spec import load_backend

SEARCH_SCHEMA = {
    "name": "search",
    "description": "Search the passages.",
    "parameters": {"type": "object", "properties": {"query": {"type": "string", "description": "q"}}, "required": ["query"]},
}


def _conversation(question: str) -> list[dict]:
    return [{"role": "system", "content": "Answer."}, {"role": "user", "content": question}]


def test_tool_call_then_answer_round_trip(replay_server):
    gen = load_backend(f"openai:{replay_server.base_url}#agent")
    params = SamplingParams(temperature=0.0, max_new_tokens=64)
    first = gen.generate([ChatPrompt(_conversation("Who wrote Hamlet?"), [SEARCH_SCHEMA])], params)[0]
    call = first.message["tool_calls"][0]
    assert call["function"] == {"name": "search", "arguments": {"query": "Who wrote Hamlet?"}}
    assert first.prompt_tokens > 0 and first.completion_tokens > 0

    history = _conversation("Who wrote Hamlet?") + [
        first.message,
        {"role": "tool", "name": "search", "tool_call_id": call["id"], "content": "Shakespeare: wrote Hamlet [d7]"},
    ]
    second = gen.generate([ChatPrompt(history, [SEARCH_SCHEMA])], params)[0]
    assert second.message["content"] == "<answer>Shakespeare</answer> [d7]"
    assert "tool_calls" not in second.message
    sent = replay_server.requests[-1]
    assert sent["tools"][0] == {"type": "function", "function": SEARCH_SCHEMA}
    assert sent["max_tokens"] == 64 and sent["temperature"] == 0.0
    assert sent["messages"][2]["tool_calls"][0]["function"]["arguments"] == '{"query": "Who wrote Hamlet?"}'


def test_first_served_model_is_used_when_spec_names_none(replay_server):
    gen = load_backend(f"openai:{replay_server.base_url}")
    assert gen.model == "agent" and gen.name.endswith("#agent")


def test_unknown_model_is_a_clear_error(replay_server):
    with pytest.raises(BackendError, match="'nope' is not served .* serves \\['agent'\\]"):
        load_backend(f"openai:{replay_server.base_url}#nope")


def test_retries_5xx_and_429_then_succeeds(replay_server):
    replay_server.faults += [(503, {}), (429, {"Retry-After": "0"})]
    gen = OpenAIChatGenerator(replay_server.base_url, "agent", backoff=0.01, max_retries=3)
    out = gen.generate([ChatPrompt(_conversation("q"), [SEARCH_SCHEMA])], SamplingParams(max_new_tokens=8))
    assert out[0].message["tool_calls"]
    assert len(replay_server.requests) == 3  # two injected failures, then the answer


def test_gives_up_after_max_retries_naming_the_request(replay_server):
    replay_server.faults += [(502, {})] * 3
    gen = OpenAIChatGenerator(replay_server.base_url, "agent", backoff=0.01, max_retries=2)
    with pytest.raises(BackendError, match=r"POST .*/v1/chat/completions failed after 3 attempts: HTTP 502"):
        gen.generate([ChatPrompt(_conversation("q"))], SamplingParams(max_new_tokens=8))


def test_client_errors_are_not_retried(replay_server):
    gen = OpenAIChatGenerator(replay_server.base_url, "agent", backoff=0.01)
    bad = [{"role": "user", "content": "q"}, {"role": "tool", "tool_call_id": "ghost", "content": "x"}]
    with pytest.raises(BackendError, match="HTTP 400.*does not answer a preceding tool call"):
        gen.generate([ChatPrompt(bad)], SamplingParams(max_new_tokens=8))
    assert len(replay_server.requests) == 1


def test_timeouts_are_retried_then_reported(replay_server):
    replay_server.delay = 0.5
    gen = OpenAIChatGenerator(replay_server.base_url, "agent", timeout=0.1, max_retries=1, backoff=0.01, check=False)
    with pytest.raises(BackendError, match="failed after 2 attempts: timed out"):
        gen.generate([ChatPrompt(_conversation("q"))], SamplingParams(max_new_tokens=8))


def test_unreachable_endpoint_fails_at_load():
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.perf_counter()
    with pytest.raises(BackendError, match=rf"GET http://127.0.0.1:{port}/v1/models failed after 2 attempts: cannot connect"):
        load_backend(f"openai:http://127.0.0.1:{port}/v1#m", max_retries=1)
    assert time.perf_counter() - t0 < 10


def test_concurrency_limit_is_respected(replay_server):
    replay_server.delay = 0.05
    gen = OpenAIChatGenerator(replay_server.base_url, "agent", concurrency=3)
    prompts = [ChatPrompt(_conversation(f"q{i}"), [SEARCH_SCHEMA]) for i in range(9)]
    out = gen.generate(prompts, SamplingParams(max_new_tokens=8))
    assert [o.message["tool_calls"][0]["function"]["arguments"]["query"] for o in out] == [f"q{i}" for i in range(9)]
    assert 1 < replay_server.max_in_flight <= 3


def test_message_conversion_round_trips_arguments():
    internal = {"role": "assistant", "content": "",
                "tool_calls": [{"type": "function", "function": {"name": "search", "arguments": {"query": "x"}}}]}
    wire = to_openai_messages([internal, {"role": "tool", "name": "search", "content": "r"}])
    assert wire[1]["tool_call_id"] == wire[0]["tool_calls"][0]["id"]
    back = from_openai_message(wire[0])
    assert back["tool_calls"][0]["function"] == internal["tool_calls"][0]["function"]
    broken = from_openai_message({"content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "search", "arguments": "{not json"}}]})
    assert broken["tool_calls"][0]["function"]["arguments"] == "{not json"


def test_runner_drives_the_chat_endpoint_with_the_search_tool(replay_server, hotpot_prepared):
    """The runner's chat path: the server gets SearchEnv's tool schema, calls search, and the tool
    result goes back tied to its call id; the final answer cites the passage the server read."""
    from awarl.agent.env import tool_schema
    from awarl.agent.runner import Rollout, Runner, RunnerConfig
    from awarl.agent.env import search_env_factory
    from awarl.agent.settings import RolloutSettings
    from awarl.search.bm25 import BM25Index

    records, passages = hotpot_prepared
    env = search_env_factory(BM25Index.build(passages), RolloutSettings(scope="closed", topk=2, passage_words=30))
    backend = load_backend(f"openai:{replay_server.base_url}#agent", concurrency=4)
    trajs = Runner(backend, env, RunnerConfig(rollout=RolloutSettings(max_searches=2, max_completion_tokens=4096))).run(
        [Rollout(r) for r in records[:5]])
    titles = {p.id: p.title for p in passages}
    for rec, t in zip(records, trajs):
        assert t.queries == [rec.question] and t.stop_reason == "answer"
        assert t.retrieved_ids and set(t.retrieved_ids) <= set(rec.passages)
        assert t.citations == [t.retrieved_ids[0]] and t.answer == titles[t.retrieved_ids[0]]
        assert [m["role"] for m in t.messages] == ["assistant", "tool", "assistant"]
        assert t.outcome in ("correct", "wrong") and t.prompt_tokens > 0 and t.completion_tokens > 0
    assert replay_server.requests[0]["tools"] == [tool_schema()]
    assert len(replay_server.requests) == 10  # two turns per question
    backend.close()
