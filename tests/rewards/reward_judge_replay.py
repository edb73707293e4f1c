"""A local OpenAI-compatible judge server that replays scripted behaviours (for tests and benches).

It listens on 127.0.0.1 only and answers ``POST /v1/chat/completions`` in the documented
``chat.completion`` shape. What it does is chosen by a marker in the judged question:

- ``[[malformed]]``: a 200 whose message is not JSON;
- ``[[badshape]]``: a 200 whose body is not a chat.completion;
- ``[[timeout]]``: holds the request for ``hang_s`` before answering;
- ``[[500]]``: HTTP 500 every time;
- ``[[flaky]]``: HTTP 500 on the first two attempts for that content, then a good answer;
- ``[[429]]``: HTTP 429 (rate limited) on the first attempt, then a good answer;
- ``[[400]]``: HTTP 400 every time (a request the server will never accept);
- otherwise a good answer: ``{"needed": [ids of passages whose text contains SUPPORT]}``.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_PASSAGE_LINE = re.compile(r"^\[([^\]]+)\] (.*)$", re.M)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # the default backlog of 5 resets connections under 32 concurrent clients


class ReplayJudgeServer:
    def __init__(self, latency_s: float = 0.0, hang_s: float = 1.0):
        self.latency_s, self.hang_s = latency_s, hang_s
        self.requests = 0
        self.by_content: Counter = Counter()
        self.in_flight = self.max_in_flight = 0
        self.bodies: list[dict] = []
        self._lock = threading.Lock()
        self._httpd = _Server(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> "ReplayJudgeServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def _respond(self, body: dict) -> tuple[int, bytes, float]:
        user = body["messages"][-1]["content"]
        with self._lock:
            self.requests += 1
            self.by_content[user] += 1
            attempt = self.by_content[user]
            self.bodies.append(body)
        if "[[500]]" in user or ("[[flaky]]" in user and attempt <= 2):
            return 500, b'{"error": {"message": "internal error"}}', self.latency_s
        if "[[429]]" in user and attempt == 1:
            return 429, b'{"error": {"message": "rate limited"}}', self.latency_s
        if "[[400]]" in user:
            return 400, b'{"error": {"message": "bad request"}}', self.latency_s
        if "[[badshape]]" in user:
            return 200, b'{"id": "x", "object": "chat.completion"}', self.latency_s
        if "[[malformed]]" in user:
            content = "The needed passages are d1 and d2."
        else:
            passages = user.split("Passages:\n", 1)[-1]
            content = json.dumps({"needed": [pid for pid, rest in _PASSAGE_LINE.findall(passages)
                                             if "SUPPORT" in rest]})
        delay = self.hang_s if "[[timeout]]" in user else self.latency_s
        reply = {"id": f"chatcmpl-{attempt}", "object": "chat.completion", "created": int(time.time()),
                 "model": body.get("model", ""),
                 "choices": [{"index": 0, "finish_reason": "stop",
                              "message": {"role": "assistant", "content": content}}],
                 "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
        return 200, json.dumps(reply).encode(), delay

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out at once, no 40 ms ACK stall

            def do_POST(self):  # noqa: N802 (http.server's naming)
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length))
                if self.path != "/v1/chat/completions":
                    status, payload, delay = 404, b'{"error": "not found"}', 0.0
                else:
                    status, payload, delay = server._respond(body)
                with server._lock:
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    if delay:
                        time.sleep(delay)
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test): nothing to answer
                finally:
                    with server._lock:
                        server.in_flight -= 1

            def log_message(self, format, *args):  # keep test output clean
                pass

        return Handler
