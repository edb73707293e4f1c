"""Fixtures for the verify tests: small hand-built policies and a local chat-completions server."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from awarl.verify.policy import Policy, policy_from_dict

# A hand-built policy small enough to reason about by hand.
LOAN = {
    "version": "1.0",
    "types": [{"name": "Plan", "description": "Account plan.", "values": [{"value": "basic"}, {"value": "premium"}]}],
    "variables": [
        {"name": "plan", "type": "Plan", "description": "The customer's plan."},
        {"name": "income", "type": "int", "description": "Yearly income in dollars."},
        {"name": "has_default", "type": "bool", "description": "A past loan default is on record."},
        {"name": "approved", "type": "bool", "description": "The loan is approved."},
        {"name": "rate", "type": "real", "description": "Interest rate in percent."},
    ],
    "rules": [
        {"id": "default_blocks", "expression": "(=> has_default (not approved))", "description": "A past default blocks approval."},
        {"id": "income_floor", "expression": "(=> (< income 20000) (not approved))", "description": "Income under $20,000 blocks approval."},
        {"id": "premium_approved", "expression": "(=> (and (= plan premium) (>= income 20000) (not has_default)) approved)",
         "description": "Premium customers with enough income and no default are approved."},
        {"id": "premium_rate", "expression": "(=> (= plan premium) (= rate 3.5))", "description": "Premium customers pay 3.5%."},
        {"id": "basic_rate", "expression": "(=> (= plan basic) (= rate 6.0))", "description": "Basic customers pay 6%."},
    ],
}


@pytest.fixture
def loan() -> Policy:
    return policy_from_dict(LOAN, source="loan")


class ChatServer:
    """A real HTTP server on 127.0.0.1 answering POST /v1/chat/completions in OpenAI's shape.

    ``reply(body) -> (status, list of contents)`` scripts each answer; requests are recorded.
    """

    def __init__(self, reply: Callable[[dict], tuple[int, list[str]]]):
        self.reply, self.requests = reply, []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append({"path": self.path, "body": body})
                status, contents = outer.reply(body)
                if status == 200:
                    payload = {
                        "id": f"chatcmpl-{len(outer.requests)}", "object": "chat.completion", "model": body.get("model"),
                        "choices": [
                            {"index": i, "message": {"role": "assistant", "content": c}, "finish_reason": "stop"}
                            for i, c in enumerate(contents)
                        ],
                        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
                    }
                else:
                    payload = {"error": {"message": "scripted failure", "type": "server_error"}}
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"


@pytest.fixture
def chat_server() -> Iterator[Callable[[Callable[[dict], tuple[int, list[str]]]], ChatServer]]:
    servers: list[ChatServer] = []

    def start(reply):
        server = ChatServer(reply)
        server.thread.start()
        servers.append(server)
        return server

    yield start
    for s in servers:
        s.httpd.shutdown()
        s.httpd.server_close()
