"""A local HTTP server that speaks the OpenAI chat-completions shapes (a stand-in for a hosted or
``vllm serve`` endpoint): ``GET /v1/models`` and ``POST /v1/chat/completions`` with ``tools`` and
``tool_calls``. It checks each request the way the real API does (400 on a malformed one), records
it, and answers with a scripted policy: search for the question first, then answer from the first
passage the tool returned. ``faults`` queues status codes to return before answering normally.
"""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


class ReplayServer:
    def __init__(self, model: str = "agent", delay: float = 0.0) -> None:
        self.model = model
        self.delay = delay
        self.requests: list[dict[str, Any]] = []
        self.faults: list[tuple[int, dict[str, str]]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> "ReplayServer":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def reply(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        problem = _check_request(body, self.model)
        if problem:
            return 400, {"error": {"message": problem, "type": "invalid_request_error", "code": None}}
        messages = body["messages"]
        tool_results = [m for m in messages if m["role"] == "tool"]
        question = next(m["content"] for m in messages if m["role"] == "user")
        n = len(self.requests)
        if not tool_results:
            message = {"role": "assistant", "content": None, "tool_calls": [{
                "id": f"call_{n}", "type": "function",
                "function": {"name": "search", "arguments": json.dumps({"query": question})},
            }]}
            finish = "tool_calls"
        else:
            first = re.match(r"\[([^\]]+)\] ([^:]*):", tool_results[-1]["content"])
            content = (f"<answer>{first.group(2)}</answer> [{first.group(1)}]" if first
                       else "<answer>not enough information</answer>")
            message, finish = {"role": "assistant", "content": content}, "stop"
        prompt_tokens = sum(len(str(m.get("content") or "").split()) + 4 for m in messages)
        completion_tokens = len(json.dumps(message).split())
        return 200, {
            "id": f"chatcmpl-{n}", "object": "chat.completion", "created": int(time.time()), "model": self.model,
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
        }

    def _handler(self):
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def _send(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path == "/v1/models":
                    self._send(200, {"object": "list", "data": [{"id": outer.model, "object": "model", "owned_by": "replay"}]})
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:
                if self.path != "/v1/chat/completions":
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with outer._lock:
                    outer.requests.append(body)
                    fault = outer.faults.pop(0) if outer.faults else None
                    outer.in_flight += 1
                    outer.max_in_flight = max(outer.max_in_flight, outer.in_flight)
                try:
                    if outer.delay:
                        time.sleep(outer.delay)
                    if fault is not None:
                        status, headers = fault
                        self._send(status, {"error": {"message": f"injected {status}"}}, headers)
                        return
                    self._send(*outer.reply(body))
                finally:
                    with outer._lock:
                        outer.in_flight -= 1

        return Handler


def _check_request(body: dict[str, Any], model: str) -> str | None:
    """What the real endpoint would reject, as a message; None when the request is well formed."""
    if body.get("model") != model:
        return f"The model `{body.get('model')}` does not exist."
    if not isinstance(body.get("messages"), list) or not body["messages"]:
        return "messages must be a non-empty list"
    for tool in body.get("tools", []):
        if tool.get("type") != "function" or not isinstance(tool.get("function", {}).get("name"), str):
            return "each tool must be {'type': 'function', 'function': {'name': ...}}"
        if "parameters" not in tool["function"]:
            return "tool function needs 'parameters'"
    open_calls: set[str] = set()
    for i, m in enumerate(body["messages"]):
        if m.get("role") not in ("system", "user", "assistant", "tool"):
            return f"messages[{i}].role invalid"
        for call in m.get("tool_calls") or []:
            if not isinstance(call["function"]["arguments"], str):
                return f"messages[{i}].tool_calls arguments must be a JSON string"
            json.loads(call["function"]["arguments"])
            open_calls.add(call["id"])
        if m["role"] == "tool":
            if m.get("tool_call_id") not in open_calls:
                return f"messages[{i}].tool_call_id does not answer a preceding tool call"
            if not isinstance(m.get("content"), str):
                return f"messages[{i}].content must be a string"
    return None


@pytest.fixture
def replay_server():
    with ReplayServer() as server:
        yield server
