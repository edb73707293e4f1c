"""The REST API's contract, in-process (TestClient) and over uvicorn on loopback: shapes, every
documented error code, and the one error envelope — bodies FastAPI rejects included."""

from __future__ import annotations

import time

import httpx
import pytest
from fastapi.testclient import TestClient

from awarl.chat.app import create_app
from awarl.chat.config import ChatSettings
from awarl.chat.generate import ScriptedGenerator

from .conftest import ADMIN_HEADERS, GOLD_80, GOLD_UNKNOWN, serving, settings_for


def _generator() -> ScriptedGenerator:
    return ScriptedGenerator(
        lambda q, n: "<answer>You get 15% off your order.</answer>" if "What discount" in q and "$" not in q
        else "<answer>You get 10% off.</answer>",
        lambda p, n: ("DECISION: ASK_QUESTIONS\nQUESTION: Are the items on sale?" if "rewrite_satisfiable" in p or "some situations" in p
                      else "DECISION: REWRITE\nANSWER: As a gold member you get 15% off."))


@pytest.fixture(params=["in-process", "uvicorn"])
def client(request, tmp_path):
    app = create_app(settings_for(tmp_path, generator="scripted"), generators={"scripted": _generator()})
    if request.param == "in-process":
        with TestClient(app, base_url="http://127.0.0.1", headers=ADMIN_HEADERS) as c:
            yield c
        return
    with serving(app) as url, httpx.Client(base_url=url, timeout=10, headers=ADMIN_HEADERS) as c:
        yield c


def wait(client, tid, until=("COMPLETED", "ERROR", "AWAITING_INPUT")):
    for _ in range(500):
        t = client.get(f"/api/thread/{tid}").json()["thread"]
        if t["status"] in until:
            return t
        time.sleep(0.02)
    raise AssertionError(f"thread {tid} did not finish")


def envelope(r, status, code):
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "details"}
    assert body["error"]["code"] == code and body["error"]["message"]
    return body["error"]


def test_chat_thread_and_threads(client):
    r = client.post("/api/chat", json={"prompt": GOLD_80})
    assert r.status_code == 200 and set(r.json()) == {"thread_id", "status", "token"}
    t = wait(client, r.json()["thread_id"])
    assert t["status"] == "COMPLETED" and t["badge"] == "VALID_GIVEN_YOUR_STATEMENT" and t["final_response"] == "As a gold member you get 15% off."
    assert t["warning"].startswith("Valid given your statement: “I am a gold member") and t["rewrites"] == 1
    it = t["iterations"][1]
    assert {"type", "prompt", "answer", "findings", "decision", "result", "template"} <= set(it)
    assert it["type"] == "rewrite" and it["decision"]["kind"] == "REWRITE" and it["findings"][0]["result"] == "VALID"
    listed = client.get("/api/threads").json()["threads"]
    assert [x["id"] for x in listed] == [t["id"]] and listed[0]["badge"] == "VALID_GIVEN_YOUR_STATEMENT"
    assert client.get("/api/threads", params={"status": "ERROR"}).json()["threads"] == []


def test_given_answer_is_validated_without_generation(client):
    tid = client.post("/api/chat", json={"prompt": GOLD_80, "answer": "As a gold member you get 15% off."}).json()["thread_id"]
    t = wait(client, tid)
    assert t["badge"] == "VALID_GIVEN_YOUR_STATEMENT" and [i["type"] for i in t["iterations"]] == ["given"]


def test_questions_round_trip_and_409_when_not_waiting(client):
    tid = client.post("/api/chat", json={"prompt": GOLD_UNKNOWN}).json()["thread_id"]
    t = wait(client, tid)
    assert t["status"] == "AWAITING_INPUT" and t["pending_questions"] == ["Are the items on sale?"]
    envelope(client.post(f"/api/thread/{tid}/answer", json={"answers": ["a", "b"]}), 422, "too_many_answers")
    envelope(client.post(f"/api/thread/{tid}/answer", json={"answers": []}), 422, "no_answers")
    # each answer joins every later prompt of the thread: capped like a prompt
    envelope(client.post(f"/api/thread/{tid}/answer", json={"answers": ["x" * 8001]}), 422, "answer_too_long")
    r = client.post(f"/api/thread/{tid}/answer", json={"answers": ["No, they are regular-priced."]})
    assert r.status_code == 200
    assert wait(client, tid, ("COMPLETED", "ERROR"))["badge"] == "VALID_GIVEN_YOUR_STATEMENT"
    err = envelope(client.post(f"/api/thread/{tid}/answer", json={"skipped": True}), 409, "not_awaiting_input")
    assert err["details"] == {"status": "COMPLETED"}


def test_config_get_set_and_policies(client):
    cfg = client.get("/api/config").json()
    assert cfg["generator"] == "scripted" and cfg["policy"] == "pricing" and cfg["max_iterations"] == 3
    assert cfg["mode"] == "agent"
    new = client.post("/api/config", json={"policy": "benefits", "max_iterations": 1}).json()
    assert new["policy"] == "benefits" and new["max_iterations"] == 1
    policies = {p["name"]: p for p in client.get("/api/config/policies").json()["policies"]}
    assert {"pricing", "benefits"} <= set(policies) and policies["benefits"]["active"]
    assert policies["pricing"]["rules"][0]["description"] == "Gold members get 15% off regular-priced items."
    tests = client.get("/api/policy/pricing/tests", params={"run": "true"}).json()["tests"]
    assert tests and all(t["passed"] for t in tests)


def test_every_documented_error_code_in_one_envelope(client):
    envelope(client.post("/api/chat", content=b"{not json", headers={"content-type": "application/json"}), 400, "malformed_json")
    envelope(client.post("/api/config", json={"generator": "nosuch:thing"}), 403, "generator_not_allowed")
    envelope(client.get("/api/thread/nope"), 404, "thread_not_found")
    envelope(client.post("/api/thread/nope/answer", json={"skipped": True}), 404, "thread_not_found")
    envelope(client.get("/api/no/such/route"), 404, "not_found")
    envelope(client.post("/api/reviews/999", json={"verdict": "approve"}), 404, "review_not_found")
    envelope(client.post("/api/config", json={"policy": "nosuch"}), 404, "policy_not_found")
    envelope(client.get("/api/policy/nosuch/tests"), 404, "policy_not_found")
    envelope(client.delete("/api/chat"), 405, "method_not_allowed")
    err = envelope(client.post("/api/chat", json={}), 422, "invalid_request")
    assert err["details"][0]["loc"] == ["body", "prompt"]
    envelope(client.post("/api/chat", json={"prompt": 3}), 422, "invalid_request")
    envelope(client.post("/api/chat", json={"prompt": "x", "extra": 1}), 422, "invalid_request")
    envelope(client.post("/api/chat", json={"prompt": "   "}), 422, "empty_prompt")
    envelope(client.post("/api/chat", json={"prompt": "x" * 9000}), 422, "prompt_too_long")
    envelope(client.post("/api/config", json={"max_iterations": 99}), 422, "invalid_request")
    envelope(client.post("/api/reviews/1", json={"verdict": "maybe"}), 422, "bad_verdict")
    envelope(client.get("/api/threads", params={"limit": 0}), 422, "bad_limit")
    envelope(client.get("/api/reviews", params={"status": "weird"}), 422, "bad_status")
    # validate-only: a question without an answer cannot be served, and the error says how to fix it
    assert client.post("/api/config", json={"generator": None}).json()["mode"] == "validate-only"
    err = envelope(client.post("/api/chat", json={"prompt": GOLD_80}), 503, "no_generator")
    assert "awarl demo" in err["message"] and "answer" in err["message"]


def test_openapi_schema_and_ui_are_served(client):
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/api/chat", "/api/thread/{thread_id}", "/api/threads", "/api/thread/{thread_id}/answer", "/api/config",
            "/api/config/policies", "/api/policy/{name}/tests", "/api/reviews", "/api/reviews/{review_id}"} <= set(paths)
    page = client.get("/")
    assert page.status_code == 200 and "awarl chat" in page.text
    assert client.get("/static/app.js").status_code == 200


def test_loopback_is_the_default_bind():
    assert ChatSettings(policy="x").host == "127.0.0.1"
