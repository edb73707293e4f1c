"""Fixtures of the integration tests: a few world questions with their corpus, and the tests' one
fake OpenAI-compatible server (tests/fake_openai.py, the ``openai_server`` fixture) scripted to
answer them right, wrong or not at all."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from awarl.protocol import ABSTAIN_PHRASE, format_final

N_QUESTIONS = 12


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
def scripted_agent(world_eval_files, openai_server):
    """The fake server playing the scripted agent on the world questions."""
    return openai_server(scripted_policy(world_eval_files["list"], world_eval_files["script"]), model="agent")
