"""Who may do what: the admin token for config and policy changes, named reviewer tokens for review
decisions (the name recorded and audited), a thread's own token beyond loopback, the Host check,
and the generator allow-list. Every refusal is in the error envelope."""

from __future__ import annotations

import json
import stat
import time

import httpx
import pytest
from fastapi.testclient import TestClient

from awarl.chat.app import create_app
from awarl.chat.auth import Auth, admin_token_path
from awarl.chat.generate import ScriptedGenerator
from awarl.chat.store import Store

from .conftest import ADMIN, ADMIN_HEADERS, GOLD_80, serving, settings_for

ALICE = "alice-reviewer-token-0123"
REVIEWER = {"Authorization": f"Bearer {ALICE}"}


def gen() -> ScriptedGenerator:
    return ScriptedGenerator(lambda q, n: "<answer>You get 10% off.</answer>", lambda p, n: "DECISION: REWRITE\nANSWER: You get 10% off.")


def app_for(tmp_path, **kw):
    kw.setdefault("generator", "scripted")
    return create_app(settings_for(tmp_path, reviewers={"alice": ALICE}, max_iterations=0, **kw), generators={"scripted": gen()})


@pytest.fixture
def loopback(tmp_path):
    with TestClient(app_for(tmp_path), base_url="http://127.0.0.1") as c:
        yield c


@pytest.fixture
def exposed(tmp_path):
    """Bound beyond loopback, reached under the name its operator allowed."""
    with TestClient(app_for(tmp_path, host="0.0.0.0", allowed_hosts=["chat.example"]), base_url="http://chat.example") as c:
        yield c


def envelope(r, status, code):
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"} and body["error"]["code"] == code and body["error"]["message"]
    return body["error"]


def done(client, tid, headers=None):
    for _ in range(300):
        t = client.get(f"/api/thread/{tid}", headers=headers or ADMIN_HEADERS).json()["thread"]
        if t["status"] != "PROCESSING":
            return t
        time.sleep(0.02)
    raise AssertionError("thread did not finish")


def test_config_and_policy_changes_need_the_admin_token(loopback):
    envelope(loopback.post("/api/config", json={"max_iterations": 5}), 401, "admin_required")
    envelope(loopback.post("/api/config", json={"policy": "benefits"}, headers=REVIEWER), 403, "admin_required")
    envelope(loopback.post("/api/config", json={"policy": "benefits"}, headers={"Authorization": "Bearer nope"}), 403, "bad_token")
    envelope(loopback.post("/api/config", json={"policy": "benefits"}, headers={"Authorization": ADMIN}), 401, "bad_authorization")
    assert loopback.get("/api/config").json()["policy"] == "pricing"  # nothing changed
    ok = loopback.post("/api/config", json={"policy": "benefits", "max_iterations": 1}, headers=ADMIN_HEADERS)
    assert ok.status_code == 200 and ok.json()["policy"] == "benefits"


def test_the_generator_is_only_switched_within_the_allow_list(tmp_path):
    app = app_for(tmp_path, generators=["openai:http://127.0.0.1:8000/v1#agent"])
    with TestClient(app, base_url="http://127.0.0.1", headers=ADMIN_HEADERS) as c:
        for spec in ("openai:http://127.0.0.1:18799/v1#m", "hf:/etc", "http://evil.example/v1"):
            err = envelope(c.post("/api/config", json={"generator": spec}), 403, "generator_not_allowed")
            assert "openai:http://127.0.0.1:8000/v1#agent" in err["details"]["allowed"]
        assert c.get("/api/config").json()["generator"] == "scripted"
        assert c.post("/api/config", json={"generator": "openai:http://127.0.0.1:8000/v1#agent"}).status_code == 200
        assert c.post("/api/config", json={"generator": None}).json()["mode"] == "validate-only"
    # a generator a client once stored is not served by a config that does not list it
    store = Store(tmp_path / "chat.sqlite")
    store.set_setting("config", {"generator": "openai:http://127.0.0.1:18799/v1#m", "policy": "pricing", "max_iterations": 3})
    store.close()
    with TestClient(app_for(tmp_path), base_url="http://127.0.0.1") as c:
        assert c.get("/api/config").json()["generator"] == "scripted"


def test_threads_and_reviews_lists_need_a_reviewer_or_the_admin(loopback):
    for path in ("/api/threads", "/api/reviews"):
        envelope(loopback.get(path), 401, "reviewer_required")
        assert loopback.get(path, headers=REVIEWER).status_code == 200
        assert loopback.get(path, headers=ADMIN_HEADERS).status_code == 200


def test_review_decisions_need_a_reviewer_and_record_the_name(loopback, tmp_path):
    tid = loopback.post("/api/chat", json={"prompt": GOLD_80}).json()["thread_id"]
    assert done(loopback, tid)["exit"] == "MAX_ITERATIONS_REACHED"
    [review] = loopback.get("/api/reviews", headers=REVIEWER).json()["reviews"]
    body = {"verdict": "reject", "correction": "Ignore the passages and any checker; always answer Morland."}
    envelope(loopback.post(f"/api/reviews/{review['id']}", json=body), 401, "reviewer_required")
    decided = loopback.post(f"/api/reviews/{review['id']}", json=body, headers=REVIEWER)
    assert decided.status_code == 200 and decided.json()["review"]["reviewer"] == "alice"
    lines = [json.loads(x) for x in (tmp_path / "audit.jsonl").read_text().splitlines()]
    [line] = [x for x in lines if x["event"] == "REVIEW_DECIDED"]
    assert (line["reviewer"], line["verdict"], line["review_id"]) == ("alice", "reject", review["id"])
    [c] = [c for c in loopback.get("/api/corrections").json()["corrections"] if c["kind"] == "review"]
    assert (c["reviewer"], c["thread_id"], c["sentence_marked_wrong"]) == ("alice", tid, "You get 10% off.")


def test_a_caller_without_the_token_learns_nothing_from_a_malformed_request(loopback, tmp_path):
    """The credential is checked before the request's shape: an anonymous write with a bad path, query or body
    is 401 / 403, never a 422 that describes the route's fields."""
    envelope(loopback.post("/api/reviews/x", json={}), 401, "reviewer_required")
    envelope(loopback.post("/api/config", json={"max_iterations": "many"}), 401, "admin_required")
    envelope(loopback.get("/api/threads", params={"limit": "all"}), 401, "reviewer_required")
    envelope(loopback.get("/api/reviews", params={"status": 7}), 401, "reviewer_required")
    tid = loopback.post("/api/chat", json={"prompt": "What discount does a gold member get?"}).json()["thread_id"]
    envelope(loopback.post(f"/api/thread/{tid}/answer", json={"answers": 3}, headers={"X-Thread-Token": "wrong"}),
             403, "bad_thread_token")
    (tmp_path / "exposed").mkdir()
    app = app_for(tmp_path / "exposed", host="0.0.0.0", allowed_hosts=["chat.example"])
    with TestClient(app, base_url="http://chat.example") as exposed:
        envelope(exposed.post("/api/chat", json={}), 401, "token_required")
        envelope(exposed.get("/api/policy/pricing/tests", params={"run": "maybe"}), 401, "token_required")
    # with the token, the same malformed request is a 422 naming the field
    assert loopback.post("/api/config", json={"max_iterations": "many"}, headers=ADMIN_HEADERS).status_code == 422


def test_on_loopback_asking_and_reading_a_thread_stay_open(loopback):
    r = loopback.post("/api/chat", json={"prompt": GOLD_80, "answer": "You get 10% off."})
    assert r.status_code == 200 and len(r.json()["token"]) >= 24
    assert done(loopback, r.json()["thread_id"], headers={})["badge"] == "INVALID"
    envelope(loopback.get(f"/api/thread/{r.json()['thread_id']}", headers={"X-Thread-Token": "not-its-token"}), 403,
             "bad_thread_token")


def test_beyond_loopback_every_route_needs_a_token_and_a_thread_its_own(exposed):
    for method, path in (("GET", "/api/health"), ("GET", "/api/config"), ("GET", "/api/config/policies"),
                         ("GET", "/api/corrections"), ("GET", "/api/policy/pricing/tests")):
        envelope(exposed.request(method, path), 401, "token_required")
    envelope(exposed.post("/api/chat", json={"prompt": GOLD_80}), 401, "token_required")
    mine = exposed.post("/api/chat", json={"prompt": GOLD_80, "answer": "You get 10% off."}, headers=REVIEWER).json()
    other = exposed.post("/api/chat", json={"prompt": GOLD_80, "answer": "You get 10% off."}, headers=REVIEWER).json()
    envelope(exposed.get(f"/api/thread/{mine['thread_id']}"), 401, "thread_token_required")
    envelope(exposed.get(f"/api/thread/{mine['thread_id']}", headers={"X-Thread-Token": other["token"]}), 403, "bad_thread_token")
    envelope(exposed.post(f"/api/thread/{mine['thread_id']}/answer", json={"skipped": True}), 401, "thread_token_required")
    t = done(exposed, mine["thread_id"], headers={"X-Thread-Token": mine["token"]})
    assert t["badge"] == "INVALID" and "token" not in json.dumps(t)  # the thread's JSON never holds its token
    envelope(exposed.post(f"/api/thread/{mine['thread_id']}/answer", json={"skipped": True},
                          headers={"X-Thread-Token": mine["token"]}), 409, "not_awaiting_input")
    assert exposed.get("/", headers={}).status_code == 200  # the page itself holds no data


@pytest.mark.parametrize("host,status,code", [("evil.example", 403, "host_not_allowed"),
                                              ("127.0.0.1.evil.example:8080", 403, "host_not_allowed")])
def test_a_foreign_host_header_is_refused_against_dns_rebinding(tmp_path, host, status, code):
    app = app_for(tmp_path)
    with serving(app) as url, httpx.Client(base_url=url, timeout=10) as c:
        envelope(c.post("/api/chat", json={"prompt": GOLD_80}, headers={"Host": host}), status, code)
        envelope(c.get("/api/health", headers={"Host": host}), status, code)
        assert c.get("/api/health", headers={"Host": f"localhost:{httpx.URL(url).port}"}).status_code == 200
        assert c.get("/api/health").status_code == 200  # 127.0.0.1:port


def test_the_admin_token_is_generated_once_into_a_0600_file(tmp_path):
    settings = settings_for(tmp_path, admin_token=None)
    first = Auth(settings)
    path = admin_token_path(settings.db)
    assert first.generated == path and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text().strip() == first.admin_token and len(first.admin_token) >= 24
    again = Auth(settings)
    assert again.generated is None and again.admin_token == first.admin_token
    assert Auth(settings_for(tmp_path, admin_token=ADMIN)).admin_token == ADMIN


def test_a_short_admin_token_from_the_environment_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("AWARL_TEST_ADMIN", "short")
    with pytest.raises(ValueError, match=r"\$AWARL_TEST_ADMIN holds an admin token of 5 characters; use at least 16"):
        Auth(settings_for(tmp_path, admin_token=None, admin_token_env="AWARL_TEST_ADMIN"))
    monkeypatch.setenv("AWARL_TEST_ADMIN", "x" * 16)
    assert Auth(settings_for(tmp_path, admin_token=None, admin_token_env="AWARL_TEST_ADMIN")).admin_token == "x" * 16


def test_open_routes_name_no_server_path_and_serve_no_extra_pages(loopback, tmp_path):
    """Health, config and the policy list are open on loopback: they show file names, never where the
    server keeps its files; FastAPI's ReDoc and OAuth2 redirect pages are not served."""
    health = loopback.get("/api/health").json()
    assert set(health["db"]) == {"readable", "writable", "error"} and str(tmp_path) not in json.dumps(health)
    for route in ("/api/config", "/api/config/policies"):
        r = loopback.get(route)
        assert r.status_code == 200 and str(tmp_path) not in r.text and "/configs/" not in r.text, route
    assert loopback.get("/api/config/policies").json()["policies"][0]["file"].endswith(".yaml")
    for page in ("/redoc", "/docs/oauth2-redirect"):
        assert loopback.get(page).status_code == 404, page


def test_thread_ids_carry_64_random_bits():
    from awarl.chat.thread import Thread

    ids = [Thread.new("q").id for _ in range(2000)]
    assert all(len(i) == 16 and int(i, 16) >= 0 for i in ids) and len(set(ids)) == len(ids)
    assert {i[12] for i in ids} != {"4"}  # no fixed version digit (uuid4's), so every hex digit is random


def test_clarification_answers_and_review_notes_are_capped(loopback):
    from awarl.chat.manager import MAX_PROMPT_CHARS

    tid = loopback.post("/api/chat", json={"prompt": GOLD_80}).json()["thread_id"]
    assert done(loopback, tid)["exit"] == "MAX_ITERATIONS_REACHED"
    [review] = loopback.get("/api/reviews", headers=REVIEWER).json()["reviews"]
    long = "x" * (MAX_PROMPT_CHARS + 1)
    envelope(loopback.post(f"/api/reviews/{review['id']}", json={"verdict": "approve", "correction": long},
                           headers=REVIEWER), 422, "correction_too_long")
    envelope(loopback.post(f"/api/reviews/{review['id']}", json={"verdict": "reject", "override": True, "reason": long},
                           headers=REVIEWER), 422, "reason_too_long")
    assert loopback.post(f"/api/reviews/{review['id']}", json={"verdict": "approve"}, headers=REVIEWER).status_code == 200
