"""Fixtures of the integration tests: a few world questions with their corpus, and the tests' one
fake OpenAI-compatible server (tests/fake_openai.py) scripted to answer them right, wrong or not at
all, streaming its replies when asked to (`stream: true`), as vLLM and the OpenAI API do."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from awarl.protocol import ABSTAIN_PHRASE, format_final

N_QUESTIONS = 12


def _fake_openai():
    """tests/fake_openai.py as a module, loaded once (as tests/conftest.py loads it)."""
    import importlib.util

    if "fake_openai" not in sys.modules:
        spec = importlib.util.spec_from_file_location("fake_openai", Path(__file__).parents[1] / "fake_openai.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["fake_openai"] = module
        spec.loader.exec_module(module)
    return sys.modules["fake_openai"]


fake_openai = _fake_openai()


def scripted_policy(records, script: dict[str, str]):
    """The agent's next message: search the question first; then answer it with ``script[question]``:
    ``"correct"`` (the record's first answer, citing its supporting passages), ``"wrong"`` or
    ``"abstain"``."""
    by_question = {r.question: r for r in records}

    def reply(body: dict[str, Any]) -> dict[str, Any]:
        messages = body["messages"]
        question = next(_text(m) for m in messages if m["role"] == "user")
        if not any(m["role"] == "tool" for m in messages):
            return {"role": "assistant", "content": None, "tool_calls": [{
                "id": f"call_{len(messages)}", "type": "function",
                "function": {"name": "search", "arguments": json.dumps({"query": question})}}]}
        record, move = by_question[question], script[question]
        text = (format_final(record.answers[0], record.supporting) if move == "correct"
                else format_final("Nobody Atall") if move == "wrong" else format_final(ABSTAIN_PHRASE))
        return {"role": "assistant", "content": text}

    return reply


class StreamingFakeOpenAI(fake_openai.FakeOpenAI):
    """The fake server, answering a ``stream: true`` request with server-sent ``chat.completion.chunk``
    events ending in ``data: [DONE]``."""

    def answer(self, body: dict[str, Any], n: int):
        reply = super().answer(body, n)
        if not body.get("stream") or reply.status != 200 or not isinstance(reply.body, dict):
            return reply
        events = "".join(f"data: {json.dumps(event)}\n\n" for event in _chunks(reply.body)) + "data: [DONE]\n\n"
        return fake_openai.Reply(200, events.encode(), {"Content-Type": "text/event-stream"}, reply.delay)

    def _handler(self):
        base = super()._handler()

        class Handler(base):
            def send_header(self, keyword: str, value: str) -> None:
                # The base sends application/json first; an event stream says so instead.
                if keyword == "Content-Type" and value == "application/json" and getattr(self, "_sse", False):
                    return
                super().send_header(keyword, value)

            def _send(self, reply) -> None:
                self._sse = reply.headers.get("Content-Type") == "text/event-stream"
                super()._send(reply)

        return Handler


def _chunks(body: dict[str, Any]) -> list[dict[str, Any]]:
    """A chat.completion as the chunks that stream it: the message, the finish reason, the usage."""
    [choice] = body["choices"]
    message = choice["message"]
    delta: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
    if message.get("tool_calls"):
        delta["tool_calls"] = [{"index": i, **call} for i, call in enumerate(message["tool_calls"])]
    head = {"id": body["id"], "object": "chat.completion.chunk", "created": body["created"], "model": body["model"]}
    return [{**head, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}]},
            {**head, "choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": choice["finish_reason"]}]},
            {**head, "choices": [], "usage": body["usage"]}]


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):  # content parts
        content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return re.sub(r"\s+", " ", str(content or "")).strip()


@pytest.fixture(scope="session")
def world_eval_files(world_prepared, tmp_path_factory) -> dict[str, Any]:
    """The first held-out world questions (records.jsonl with ``p``) and the world's corpus.jsonl."""
    from awarl.data.records import write_jsonl

    records, passages = world_prepared
    records = records[:N_QUESTIONS]
    out = tmp_path_factory.mktemp("world_eval")
    write_jsonl(out / "records.jsonl", [{**r.to_dict(), "p": round(0.1 + 0.07 * i, 2)} for i, r in enumerate(records)])
    write_jsonl(out / "corpus.jsonl", [p.to_dict() for p in passages])
    moves = ("correct", "wrong", "abstain", "correct")
    script = {r.question: moves[i % len(moves)] for i, r in enumerate(records)}
    return {"records": out / "records.jsonl", "corpus": out / "corpus.jsonl", "list": records, "script": script}


@pytest.fixture
def scripted_agent(world_eval_files):
    """The fake server playing the scripted agent on the world questions."""
    policy = scripted_policy(world_eval_files["list"], world_eval_files["script"])
    with StreamingFakeOpenAI(policy, model="agent") as server:
        yield server
