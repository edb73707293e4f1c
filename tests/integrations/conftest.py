"""Fixtures of the integration tests: a few world questions with their corpus, and the tests' one
OpenAI-compatible replay server (tests/llm/conftest.py) scripted to answer them right, wrong or
not at all."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import pytest

from awarl.protocol import ABSTAIN_PHRASE, format_final

_spec = importlib.util.spec_from_file_location("llm_replay", Path(__file__).parents[1] / "llm" / "conftest.py")
llm_replay = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(llm_replay)

N_QUESTIONS = 12


class ScriptedAgent(llm_replay.ReplayServer):
    """Searches the question first; then answers it with ``script[question]``: ``"correct"`` (the gold
    answer, citing the supporting passages), ``"wrong"`` or ``"abstain"``."""

    def __init__(self, records, script: dict[str, str], model: str = "agent") -> None:
        super().__init__(model=model)
        self.by_question = {r.question: r for r in records}
        self.script = script

    def reply(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        problem = llm_replay._check_request(body, self.model)
        if problem:
            return 400, {"error": {"message": problem, "type": "invalid_request_error", "code": None}}
        messages = body["messages"]
        question = next(_text(m) for m in messages if m["role"] == "user")
        n = len(self.requests)
        if not any(m["role"] == "tool" for m in messages):
            message = {"role": "assistant", "content": None, "tool_calls": [{
                "id": f"call_{n}", "type": "function",
                "function": {"name": "search", "arguments": json.dumps({"query": question})}}]}
            finish = "tool_calls"
        else:
            record = self.by_question[question]
            move = self.script[question]
            text = (format_final(record.answers[0], record.supporting) if move == "correct"
                    else format_final("Nobody Atall") if move == "wrong" else format_final(ABSTAIN_PHRASE))
            message, finish = {"role": "assistant", "content": text}, "stop"
        return 200, {
            "id": f"chatcmpl-{n}", "object": "chat.completion", "created": 0, "model": self.model,
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }


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
    with ScriptedAgent(world_eval_files["list"], world_eval_files["script"]) as server:
        yield server
