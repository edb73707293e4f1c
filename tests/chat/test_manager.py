"""ThreadManager: many threads at once, persistence across a real second process, crash recovery."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import yaml

from awarl.chat.audit import verify_audit
from awarl.chat.generate import ScriptedGenerator
from awarl.chat.store import Store
from awarl.chat.thread import State, Status, Thread

from .conftest import GOLD_80, PRICING, ROOT


def test_fifty_threads_submitted_at_once_all_complete_none_lost_or_mixed(make_manager):
    def answer(q, n):
        k = re.search(r"#(\d+)", q).group(1)
        # odd orders start wrong, so half the threads go through a rewrite
        return f"<answer>Order #{k}: as a gold member you get {10 if int(k) % 2 else 15}% off.</answer>"

    def rewrite(p, n):
        k = re.search(r"#(\d+)", p).group(1)
        return f"DECISION: REWRITE\nANSWER: Order #{k}: as a gold member you get 15% off."

    gen = ScriptedGenerator(answer, rewrite, delay=0.005)
    m = make_manager(gen, workers=4)
    prompts = [f"I am a gold member buying regular-priced item #{k} for $80. What discount do I get?" for k in range(50)]
    with ThreadPoolExecutor(50) as pool:
        ids = list(pool.map(lambda p: m.submit(p).id, prompts))
    assert len(set(ids)) == 50
    done = [m.wait(tid, timeout=120) for tid in ids]
    for k, t in enumerate(done):
        assert t["status"] == "COMPLETED" and t["badge"] == "VALID_GIVEN_YOUR_STATEMENT", t
        assert t["prompt"] == prompts[k] and t["final_response"] == f"Order #{k}: as a gold member you get 15% off."
        assert t["rewrites"] == (1 if k % 2 else 0)
    assert m.store.count_threads() == {"COMPLETED": 50}
    report = verify_audit(m.audit.path, m.store.audit_head(m.audit.key), m.audit.secret)
    assert report.ok and report.lines == 50
    assert sorted(json.loads(x)["thread_id"] for x in m.audit.path.read_text().splitlines()) == sorted(ids)


def test_crashed_processing_threads_are_resumed_and_audited(tmp_path, make_manager):
    store = Store(tmp_path / "chat.sqlite")
    left = Thread.new(GOLD_80, generator="scripted", policy="pricing", state=State.GENERATE_INITIAL, status=Status.PROCESSING)
    store.save_thread(left)
    store.close()
    gen = ScriptedGenerator(lambda q, n: "<answer>As a gold member you get 15% off.</answer>", None)
    m = make_manager(gen)
    t = m.wait(left.id)
    assert t["status"] == "COMPLETED" and t["badge"] == "VALID_GIVEN_YOUR_STATEMENT"
    assert any(e["event"] == "resumed after a restart" for e in t["events"])
    events = [json.loads(x)["event"] for x in m.audit.path.read_text().splitlines()]
    assert events == ["RESUMED", "EXIT"]


def test_crashed_threads_can_be_ended_in_error_instead(tmp_path, make_manager):
    store = Store(tmp_path / "chat.sqlite")
    left = Thread.new(GOLD_80, generator="scripted", policy="pricing", state=State.VALIDATE, status=Status.PROCESSING)
    store.save_thread(left)
    store.close()
    m = make_manager(ScriptedGenerator(lambda q, n: "x", None), recovery="error")
    t = m.get(left.id)
    assert t["status"] == "ERROR" and "interrupted by a restart in VALIDATE" in t["error"]
    [line] = [json.loads(x) for x in m.audit.path.read_text().splitlines()]
    assert line["exit"] == "ERROR" and line["thread_id"] == left.id


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(config: Path, port: int, log: Path) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "awarl.cli", "chat", "serve", "--config", str(config), "--port", str(port)]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)


def _up(port: int, proc: subprocess.Popen, log: Path, timeout: float = 60) -> httpx.Client:
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"server exited with {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            if client.get("/api/health").status_code == 200:
                return client
        except httpx.HTTPError:
            time.sleep(0.2)
    pytest.fail(f"server did not come up: {log.read_text()[-2000:]}")


def _stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _done(client: httpx.Client, tid: str) -> dict:
    for _ in range(300):
        t = client.get(f"/api/thread/{tid}").json()["thread"]
        if t["status"] != "PROCESSING":
            return t
        time.sleep(0.05)
    pytest.fail(f"thread {tid} still PROCESSING")


def test_threads_survive_a_restart_in_a_real_second_process(tmp_path):
    config = tmp_path / "chat.yaml"
    config.write_text(yaml.safe_dump({"policy": str(PRICING), "db": str(tmp_path / "chat.sqlite"),
                                      "audit": str(tmp_path / "audit.jsonl"), "workers": 1}))
    port = _free_port()
    first = _serve(config, port, tmp_path / "first.log")
    try:
        client = _up(port, first, tmp_path / "first.log")
        assert client.get("/api/config").json()["mode"] == "validate-only"
        tid = client.post("/api/chat", json={"prompt": GOLD_80, "answer": "You get 10% off."}).json()["thread_id"]
        before = _done(client, tid)
        assert before["badge"] == "INVALID" and before["exit"] == "CHECKED_ONLY"
        token = (tmp_path / "chat.sqlite.admin-token").read_text().strip()  # generated at first start, 0600
        assert client.post("/api/config", json={"max_iterations": 5}).status_code == 401  # not without it
        admin = {"Authorization": f"Bearer {token}"}
        assert client.post("/api/config", json={"max_iterations": 5}, headers=admin).status_code == 200
    finally:
        _stop(first)
    second = _serve(config, port, tmp_path / "second.log")
    try:
        client = _up(port, second, tmp_path / "second.log")
        assert client.get(f"/api/thread/{tid}").json()["thread"] == before  # nothing lost, nothing changed
        assert client.get("/api/config").json()["max_iterations"] == 5  # runtime config persisted too
        tid2 = client.post("/api/chat", json={"prompt": GOLD_80, "answer": "As a gold member you get 15% off."}).json()["thread_id"]
        assert _done(client, tid2)["badge"] == "VALID_GIVEN_YOUR_STATEMENT"
        assert client.get("/api/threads").status_code == 401  # the thread list is for reviewers and the admin
        assert [t["id"] for t in client.get("/api/threads", headers=admin).json()["threads"]] == [tid2, tid]
    finally:
        _stop(second)
    out = subprocess.run([sys.executable, "-m", "awarl.cli", "audit", "verify", str(tmp_path / "audit.jsonl")],
                         cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0 and "2 line(s) (2 keyed), 0 problem(s); checked against the head" in out.stdout
    assert "Validate-only mode" in (tmp_path / "first.log").read_text()  # the log says how it serves
    assert f"admin token (shown once; kept in {tmp_path / 'chat.sqlite.admin-token'}, mode 0600): {token}" in \
        (tmp_path / "first.log").read_text()
    assert token not in (tmp_path / "second.log").read_text()  # printed once


def test_a_second_manager_on_the_same_database_is_refused_before_recovery(tmp_path, make_manager):
    from awarl.chat.config import ChatSettings
    from awarl.chat.manager import ThreadManager
    from awarl.chat.store import DatabaseInUse

    first = make_manager(None)
    left = Thread.new(GOLD_80, policy="pricing", given_answer="You get 10% off.", status=Status.AWAITING_INPUT)
    first.store.save_thread(left)
    with pytest.raises(DatabaseInUse, match=rf"in use by another awarl chat server \(pid {os.getpid()} on "):
        ThreadManager(ChatSettings(policy=str(PRICING), db=first.settings.db, audit=str(tmp_path / "other.jsonl")))
    assert not (tmp_path / "other.jsonl").exists()
    first.close()
    ThreadManager(ChatSettings(policy=str(PRICING), db=first.settings.db, audit=str(tmp_path / "other.jsonl"))).close()


def test_a_second_server_exits_with_one_line_naming_the_holder_and_runs_nothing(tmp_path):
    config = tmp_path / "chat.yaml"
    config.write_text(yaml.safe_dump({"policy": str(PRICING), "db": str(tmp_path / "chat.sqlite"),
                                      "audit": str(tmp_path / "audit.jsonl"), "workers": 1}))
    port = _free_port()
    first = _serve(config, port, tmp_path / "first.log")
    try:
        client = _up(port, first, tmp_path / "first.log")
        tid = client.post("/api/chat", json={"prompt": GOLD_80, "answer": "You get 10% off."}).json()["thread_id"]
        _done(client, tid)
        lines_before = (tmp_path / "audit.jsonl").read_text()
        # the same port (busy) and the same database: refused before recovery and before the bind
        second = subprocess.run([sys.executable, "-m", "awarl.cli", "chat", "serve", "--config", str(config), "--port", str(port)],
                                cwd=ROOT, capture_output=True, text=True, timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"})
        assert second.returncode == 1, second.stderr
        errors = [line for line in second.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and f"pid {first.pid} on " in errors[0] and "Traceback" not in second.stderr
        assert (tmp_path / "audit.jsonl").read_text() == lines_before
        assert client.get("/api/health").status_code == 200
    finally:
        _stop(first)
