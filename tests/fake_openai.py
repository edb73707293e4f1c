"""The one fake OpenAI-compatible server of the tests (and of scripts/bench_rewards.py).

A real HTTP server on 127.0.0.1 (an ephemeral port) speaking the documented chat-completions
shapes: ``GET /v1/models`` and ``POST /v1/chat/completions``. What it answers is the test's
``reply(body)`` function, which returns one of:

- an assistant message (a dict with ``role``): one choice holding it (``finish_reason`` is
  ``tool_calls`` when it calls tools, else ``stop``);
- a list of strings: one choice per string, each an assistant message with that content;
- a `Reply`: any status, body, headers and delay (errors, malformed bodies, slow answers).

A request with ``stream: true`` gets a 200 answer as the real API streams it: server-sent
``chat.completion.chunk`` events (the message, the finish reason, the usage) and ``data: [DONE]``.

Like the real endpoint it refuses a malformed request with 400 before ``reply`` sees it (another
model than the served one, no messages, a tool result answering no call, arguments that are not a
JSON string). It records every request body (``requests``) and path (``paths``), counts requests in
flight (``max_in_flight``), can delay every answer (``delay``) and returns queued ``faults``
(status, headers) before answering normally.

Tests get it from the ``openai_server`` fixture in tests/conftest.py::

    server = openai_server(lambda body: {"role": "assistant", "content": "<answer>Paris</answer>"})
    backend = load_backend(f"openai:{server.base_url}#{server.model}")
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One answer in full: ``body`` is a JSON object or raw bytes (a body that is not JSON)."""

    status: int = 200
    body: dict[str, Any] | bytes = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


ReplyFn = Callable[[dict[str, Any]], "Reply | dict[str, Any] | list[str]"]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # the default backlog of 5 resets connections under 32 concurrent clients


class FakeOpenAI:
    """A chat-completions endpoint answering with ``reply``; ``model`` is the one it serves (None:
    any model name is accepted and ``/v1/models`` lists none). Use as a context manager."""

    def __init__(self, reply: ReplyFn, model: str | None = "agent", delay: float = 0.0) -> None:
        self.reply_fn, self.model, self.delay = reply, model, delay
        self.requests: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.faults: list[tuple[int, dict[str, str]]] = []
        self.in_flight = self.max_in_flight = 0
        self._lock = threading.Lock()
        self._httpd = _Server(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> "FakeOpenAI":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def answer(self, body: dict[str, Any], n: int) -> Reply:
        """The reply to request number ``n`` (0-based) with ``body``."""
        problem = check_request(body, self.model)
        if problem:
            return Reply(400, {"error": {"message": problem, "type": "invalid_request_error", "code": None}})
        out = self.reply_fn(body)
        if isinstance(out, Reply):
            return out
        messages = [out] if isinstance(out, dict) else [{"role": "assistant", "content": c} for c in out]
        choices = [{"index": i, "message": m, "logprobs": None,
                    "finish_reason": "tool_calls" if m.get("tool_calls") else "stop"} for i, m in enumerate(messages)]
        prompt_tokens = sum(len(str(m.get("content") or "").split()) + 4 for m in body["messages"])
        completion_tokens = sum(len(json.dumps(m).split()) for m in messages)
        completion = {
            "id": f"chatcmpl-{n}", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model"), "choices": choices,
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
        }
        if body.get("stream"):
            return Reply(200, stream_events(completion), {"Content-Type": "text/event-stream"})
        return Reply(200, completion)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out at once, no 40 ms ACK stall

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def _send(self, reply: Reply) -> None:
                data = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", reply.headers.get("Content-Type", "application/json"))
                    self.send_header("Content-Length", str(len(data)))
                    for key, value in reply.headers.items():
                        if key != "Content-Type":
                            self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test): nothing to answer

            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                if self.path == "/v1/models":
                    served = [{"id": outer.model, "object": "model", "owned_by": "fake"}] if outer.model else []
                    self._send(Reply(200, {"object": "list", "data": served}))
                else:
                    self._send(Reply(404, {"error": {"message": f"no route {self.path}"}}))

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                if self.path != "/v1/chat/completions":
                    self._send(Reply(404, {"error": {"message": f"no route {self.path}"}}))
                    return
                with outer._lock:
                    n = len(outer.requests)
                    outer.requests.append(body)
                    outer.paths.append(self.path)
                    fault = outer.faults.pop(0) if outer.faults else None
                    outer.in_flight += 1
                    outer.max_in_flight = max(outer.max_in_flight, outer.in_flight)
                try:
                    if fault is not None:
                        status, headers = fault
                        reply = Reply(status, {"error": {"message": f"injected {status}"}}, headers)
                    else:
                        reply = outer.answer(body, n)
                    if outer.delay or reply.delay:
                        time.sleep(outer.delay + reply.delay)
                    self._send(reply)
                finally:
                    with outer._lock:
                        outer.in_flight -= 1

        return Handler


def stream_events(completion: dict[str, Any]) -> bytes:
    """A chat.completion as the server-sent events that stream it: per choice its message, then its
    finish reason; then the usage; then ``[DONE]``."""
    head = {k: completion[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    events = []
    for choice in completion["choices"]:
        message = choice["message"]
        delta: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
        if message.get("tool_calls"):
            delta["tool_calls"] = [{"index": i, **call} for i, call in enumerate(message["tool_calls"])]
        events.append({**head, "choices": [{"index": choice["index"], "delta": delta, "logprobs": None,
                                            "finish_reason": None}]})
        events.append({**head, "choices": [{"index": choice["index"], "delta": {}, "logprobs": None,
                                            "finish_reason": choice["finish_reason"]}]})
    events.append({**head, "choices": [], "usage": completion["usage"]})
    return ("".join(f"data: {json.dumps(event)}\n\n" for event in events) + "data: [DONE]\n\n").encode()


def check_request(body: dict[str, Any], model: str | None) -> str | None:
    """What the real endpoint would reject, as a message; None when the request is well formed."""
    if model is not None and body.get("model") != model:
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
