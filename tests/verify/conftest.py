"""Fixtures for the verify tests: small hand-built policies and a local chat-completions server."""

from __future__ import annotations

from collections.abc import Callable

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


@pytest.fixture
def chat_server(openai_server) -> Callable[[Callable[[dict], tuple[int, list[str]]]], object]:
    """``chat_server(reply)``: the shared fake OpenAI server (tests/fake_openai.py) answering with
    ``reply(body) -> (status, list of contents)``; any model name is served."""

    def start(reply: Callable[[dict], tuple[int, list[str]]]):
        def answer(body: dict):
            status, contents = reply(body)
            if status != 200:
                return openai_server.Reply(status, {"error": {"message": "scripted failure", "type": "server_error"}})
            return contents

        return openai_server(answer, model=None)

    return start
