"""Storage faults: a locked or full database ends the thread in ERROR (audited), never PROCESSING for
ever; /api/health says what the database can do; errors reach clients in the envelope without
exception text; a damaged database is named at start."""

from __future__ import annotations

import json
import sqlite3
import time

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from awarl.chat.app import create_app
from awarl.chat.audit import verify_audit
from awarl.chat.generate import ScriptedGenerator
from awarl.chat.manager import ThreadManager
from awarl.chat.store import StoreError
from awarl.cli import app as cli

from .conftest import ADMIN_HEADERS, GOLD_80, settings_for


def faulty(tmp_path, fault):
    """A manager whose generator runs ``fault(manager)`` as it answers, so the next save meets it."""
    holder = {}

    def answer(q, n):
        fault(holder["m"])
        return "<answer>As a gold member you get 15% off. " + "Thanks for asking. " * 700 + "</answer>"

    m = ThreadManager(settings_for(tmp_path, generator="scripted", db_timeout_s=0.05, retries=2, backoff_s=0.01,
                                   question_timeout_s=0.2),
                      generators={"scripted": ScriptedGenerator(answer, None)})
    holder["m"] = m
    return m.start()


def exits(m):
    return [json.loads(x) for x in m.audit.path.read_text().splitlines() if json.loads(x)["event"] == "EXIT"]


def test_a_locked_database_ends_the_thread_in_error_then_it_is_saved_when_the_lock_goes(tmp_path):
    blocker = sqlite3.connect(tmp_path / "chat.sqlite", isolation_level=None, check_same_thread=False)
    m = faulty(tmp_path, lambda m: blocker.execute("BEGIN EXCLUSIVE"))
    try:
        t = m.wait(m.submit(GOLD_80).id, timeout=30)
        assert (t["status"], t["exit"], t["badge"]) == ("ERROR", "ERROR", "ERROR")
        assert "could not be saved: the database is unavailable" in t["error"]
        health = m.health()
        assert health["ok"] is False and health["db"]["writable"] is False and "locked" in health["db"]["error"]
        assert health["unsaved_threads"] == [t["id"]]
        assert [x["exit"] for x in exits(m)] == ["ERROR"]  # audited once, while the database was locked
        blocker.execute("ROLLBACK")
        for _ in range(400):  # the sweeper saves it within a period once the lock is gone
            if m.store.thread_json(t["id"])["status"] == "ERROR":
                break
            time.sleep(0.05)
        assert m.store.thread_json(t["id"])["status"] == "ERROR" and m.health()["ok"] is True
    finally:
        m.close()
        blocker.close()
    m = ThreadManager(settings_for(tmp_path)).start()  # the head catches up over the line written meanwhile
    assert verify_audit(m.audit.path, m.store.audit_head(m.audit.key), m.audit.secret).ok
    assert m.store.count_threads() == {"ERROR": 1} and [x["exit"] for x in exits(m)] == ["ERROR"]
    m.close()


def test_a_full_database_ends_the_thread_in_error_and_is_reported(tmp_path):
    def fill(m):
        pages = m.store._db.execute("PRAGMA page_count").fetchone()[0]
        m.store._db.execute(f"PRAGMA max_page_count = {pages}")

    m = faulty(tmp_path, fill)
    try:
        t = m.wait(m.submit(GOLD_80).id, timeout=30)
        assert (t["status"], t["badge"]) == ("ERROR", "ERROR") and "could not be saved" in t["error"]
        assert m.health()["unsaved_threads"] == [t["id"]] and m.health()["ok"] is False
        assert [x["exit"] for x in exits(m)] == ["ERROR"]
    finally:
        m.close()


def test_errors_reach_clients_in_the_envelope_without_exception_text(tmp_path, monkeypatch):
    app = create_app(settings_for(tmp_path))
    with TestClient(app, base_url="http://127.0.0.1", headers=ADMIN_HEADERS, raise_server_exceptions=False) as c:
        monkeypatch.setattr(app.state.manager, "policies", lambda: (_ for _ in ()).throw(RuntimeError("/secret/path x=1")))
        r = c.get("/api/config/policies")
        assert r.status_code == 500 and r.json()["error"]["code"] == "internal_error"
        assert "/secret/path" not in r.text and "RuntimeError" not in r.text and "reference" in r.json()["error"]["message"]
        monkeypatch.setattr(app.state.manager, "config", lambda: (_ for _ in ()).throw(sqlite3.OperationalError("database is locked at /x")))
        r = c.get("/api/config")
        assert r.status_code == 503 and r.json()["error"]["code"] == "database_unavailable" and "/x" not in r.text
        health = c.get("/api/health").json()
        assert health["ok"] is True and health["db"]["writable"] is True


def test_a_damaged_database_is_named_at_start(tmp_path):
    (tmp_path / "chat.sqlite").write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError, match=r"chat\.sqlite: not a usable chat database"):
        ThreadManager(settings_for(tmp_path))
    config = tmp_path / "chat.yaml"
    config.write_text(f"policy: {settings_for(tmp_path).policy}\ndb: {tmp_path / 'chat.sqlite'}\naudit: {tmp_path / 'a.jsonl'}\n")
    result = CliRunner().invoke(cli, ["chat", "serve", "--config", str(config)])
    assert result.exit_code == 1 and "not a usable chat database" in result.output and "Traceback" not in result.output
