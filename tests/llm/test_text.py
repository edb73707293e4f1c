"""The one text-in/text-out adapter (`awarl.llm.text.TextModel`) over the shared fake OpenAI server:
what it sends, what it returns, and how it fails."""

from __future__ import annotations

import pytest

from awarl.llm.openai_chat import RetriesExhausted
from awarl.llm.text import TextModel


def test_n_completions_of_a_conversation_in_one_request(openai_server):
    server = openai_server(lambda body: [f"reply {i}" for i in range(body.get("n", 1))], model="m")
    model = TextModel.openai(server.base_url, "m", max_new_tokens=64)
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    assert model.chat(messages, n=3, temperature=0.7) == ["reply 0", "reply 1", "reply 2"]
    [body] = server.requests
    assert body["n"] == 3 and body["messages"] == messages and body["temperature"] == 0.7 and body["max_tokens"] == 64
    assert "tools" not in body  # plain text: no tool schemas
    assert model.requests == 1 and model.retries == 0


def test_prompts_become_user_messages_answered_in_prompt_order(openai_server):
    server = openai_server(lambda body: [body["messages"][-1]["content"].upper()], model="m")
    model = TextModel.openai(server.base_url, "m")
    assert model.generate(["one", "two"]) == [["ONE"], ["TWO"]]
    assert [b["messages"] for b in server.requests] == [[{"role": "user", "content": "one"}],
                                                        [{"role": "user", "content": "two"}]]


def test_a_failure_after_every_retry_names_the_url_and_keeps_its_kind(openai_server):
    server = openai_server(lambda body: openai_server.Reply(503, {"error": {"message": "busy"}}), model="m")
    model = TextModel.openai(server.base_url, "m", retries=1, backoff_s=0.01)
    with pytest.raises(RetriesExhausted, match=r"/v1/chat/completions: failed after 2 attempts; last error: HTTP 503") as err:
        model.chat([{"role": "user", "content": "hi"}])
    assert err.value.reason == "http_503" and len(server.requests) == 2
    with pytest.raises(ValueError, match="n must be >= 1"):
        model.generate(["hi"], n=0)
