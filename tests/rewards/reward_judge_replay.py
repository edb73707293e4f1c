"""The citation judge's endpoint for tests and benches: the shared fake OpenAI server
(tests/fake_openai.py) replaying scripted behaviours.

What it does is chosen by a marker in the judged question:

- ``[[malformed]]``: a 200 whose message is not JSON;
- ``[[badshape]]``: a 200 whose body is not a chat.completion;
- ``[[timeout]]``: holds the request for ``hang_s`` before answering;
- ``[[500]]``: HTTP 500 every time;
- ``[[flaky]]``: HTTP 500 on the first two attempts for that content, then a good answer;
- ``[[429]]``: HTTP 429 (rate limited) on the first attempt, then a good answer;
- ``[[400]]``: HTTP 400 every time (a request the server will never accept);
- otherwise a good answer: ``{"needed": [ids of passages whose text contains SUPPORT]}``.

``by_content`` counts the attempts per judged content.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

_PASSAGE_LINE = re.compile(r"^\[([^\]]+)\] (.*)$", re.M)


def _fake_openai() -> Any:
    if "fake_openai" not in sys.modules:
        spec = importlib.util.spec_from_file_location("fake_openai", Path(__file__).parents[1] / "fake_openai.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["fake_openai"] = module
        spec.loader.exec_module(module)
    return sys.modules["fake_openai"]


_fake = _fake_openai()
Reply = _fake.Reply


class ReplayJudgeServer(_fake.FakeOpenAI):
    """``with ReplayJudgeServer(latency_s=…, hang_s=…) as server``: any model name is served."""

    def __init__(self, latency_s: float = 0.0, hang_s: float = 1.0):
        super().__init__(self._judge, model=None)
        self.latency_s, self.hang_s = latency_s, hang_s
        self.by_content: Counter = Counter()
        self._count = threading.Lock()

    def _judge(self, body: dict[str, Any]) -> Any:
        user = body["messages"][-1]["content"]
        with self._count:
            self.by_content[user] += 1
            attempt = self.by_content[user]
        delay = self.latency_s
        if "[[500]]" in user or ("[[flaky]]" in user and attempt <= 2):
            return Reply(500, {"error": {"message": "internal error"}}, delay=delay)
        if "[[429]]" in user and attempt == 1:
            return Reply(429, {"error": {"message": "rate limited"}}, delay=delay)
        if "[[400]]" in user:
            return Reply(400, {"error": {"message": "bad request"}}, delay=delay)
        if "[[badshape]]" in user:
            return Reply(200, {"id": "x", "object": "chat.completion"}, delay=delay)
        if "[[malformed]]" in user:
            content = "The needed passages are d1 and d2."
        else:
            passages = user.split("Passages:\n", 1)[-1]
            content = json.dumps({"needed": [pid for pid, rest in _PASSAGE_LINE.findall(passages) if "SUPPORT" in rest]})
        reply = self.answer_with(body, content)
        reply.delay = self.hang_s if "[[timeout]]" in user else delay
        return reply

    def answer_with(self, body: dict[str, Any], content: str) -> Any:
        """A good chat.completion holding ``content``."""
        return Reply(200, {"id": "chatcmpl-judge", "object": "chat.completion", "model": body.get("model", ""),
                           "choices": [{"index": 0, "finish_reason": "stop",
                                        "message": {"role": "assistant", "content": content}}],
                           "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})
