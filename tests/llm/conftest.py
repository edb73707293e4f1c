"""The llm tests' endpoint: the shared fake OpenAI server (tests/fake_openai.py) with a scripted agent
policy: search for the question first, then answer from the first passage the tool returned."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest


def agent_policy(body: dict[str, Any]) -> dict[str, Any]:
    """The next assistant message: a ``search`` call for the question, or, once a tool result is in,
    the title of its first passage cited by id (``not enough information`` when it has none)."""
    messages = body["messages"]
    tool_results = [m for m in messages if m["role"] == "tool"]
    question = next(m["content"] for m in messages if m["role"] == "user")
    if not tool_results:
        return {"role": "assistant", "content": None, "tool_calls": [{
            "id": f"call_{len(messages)}", "type": "function",  # unique within the conversation, as the API's are
            "function": {"name": "search", "arguments": json.dumps({"query": question})},
        }]}
    # a result line is "<title>: <text> [<id>]" (docs/search.md); the policy reads it as a model would
    first = re.match(r"([^:\n]*): [^\n]* \[([^\]\n]+)\]$", tool_results[-1]["content"], re.MULTILINE)
    content = f"<answer>{first.group(1)}</answer> [{first.group(2)}]" if first else "<answer>not enough information</answer>"
    return {"role": "assistant", "content": content}


@pytest.fixture
def replay_server(openai_server):
    return openai_server(agent_policy, model="agent")
