"""The audit log survives crashes and is keyed by default: a torn append is cut and the cut audited,
a head that lagged is caught up, an exit is audited once, and `awarl audit verify` finds the head and
the key from the server's config — or fails loudly."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time

import pytest
import yaml
from typer.testing import CliRunner

from awarl.chat.audit import AuditLog, key_path, verify_audit
from awarl.chat.config import ChatSettings
from awarl.chat.generate import ScriptedGenerator
from awarl.chat.manager import ThreadManager
from awarl.chat.store import Store
from awarl.chat.thread import Badge, Exit, State, Status, Thread
from awarl.cli import app

from .conftest import GOLD_80, PRICING, ROOT


@pytest.fixture
def config(tmp_path):
    """A server config whose database is not called chat.sqlite (as the shipped pricing config's is not)."""
    path = tmp_path / "pricing.yaml"
    path.write_text(yaml.safe_dump({"policy": str(PRICING), "db": str(tmp_path / "pricing.sqlite"),
                                    "audit": str(tmp_path / "pricing.audit.jsonl"), "workers": 1}))
    return path


def settings(tmp_path) -> ChatSettings:
    return ChatSettings(policy=str(PRICING), db=str(tmp_path / "pricing.sqlite"), audit=str(tmp_path / "pricing.audit.jsonl"),
                        workers=1, backoff_s=0.01)


def serve_checks(tmp_path, n: int) -> ThreadManager:
    m = ThreadManager(settings(tmp_path)).start()
    for _ in range(n):
        m.wait(m.submit(GOLD_80, "You get 10% off.").id)
    return m


def verify_cli(*args):
    return CliRunner().invoke(app, ["audit", "verify", *map(str, args)])


def events(path):
    return [json.loads(x)["event"] for x in path.read_text().splitlines()]


def test_the_log_is_keyed_by_default_with_a_0600_key_beside_the_database(tmp_path, config, monkeypatch):
    monkeypatch.delenv("AWARL_AUDIT_SECRET", raising=False)
    serve_checks(tmp_path, 2).close()
    key = key_path(tmp_path / "pricing.sqlite")
    assert key.exists() and stat.S_IMODE(key.stat().st_mode) == 0o600
    lines = [json.loads(x) for x in (tmp_path / "pricing.audit.jsonl").read_text().splitlines()]
    assert [x["alg"] for x in lines] == ["hmac-sha256", "hmac-sha256"]
    ok = verify_cli("--config", config)
    assert ok.exit_code == 0 and "2 line(s) (2 keyed), 0 problem(s)" in ok.output, ok.output
    # A forger who rewrites the chain unkeyed (and even the head) cannot make it verify.
    forged = []
    prev = "0" * 64
    from awarl.chat.audit import line_hash

    for x in lines:
        x = {**x, "alg": "sha256", "prev": prev, "final_response": "You get 90% off."}
        x["hash"] = line_hash(x)
        prev = x["hash"]
        forged.append(json.dumps(x))
    (tmp_path / "pricing.audit.jsonl").write_text("\n".join(forged) + "\n")
    store = Store(tmp_path / "pricing.sqlite")
    store.set_audit_head(str((tmp_path / "pricing.audit.jsonl").resolve()), 2, prev)
    store.close()
    bad = verify_cli("--config", config)
    assert bad.exit_code == 1 and "not keyed in a keyed log" in bad.output


def test_verify_finds_the_head_from_the_config_and_fails_loudly_without_it(tmp_path, config):
    serve_checks(tmp_path, 3).close()
    log = tmp_path / "pricing.audit.jsonl"
    log.write_text("".join(log.read_text().splitlines(keepends=True)[:2]))  # the last line cut off
    cut = verify_cli("--config", config)
    assert cut.exit_code == 1 and "1 line(s) were cut off the end" in cut.output
    log.write_text("")  # wiped
    wiped = verify_cli("--config", config)
    assert wiped.exit_code == 1 and "cut off the end" in wiped.output
    # the file alone: its name pairs it with pricing.sqlite, which holds the head
    paired = verify_cli(log)
    assert paired.exit_code == 1 and "cut off the end" in paired.output
    # a log with no database of its name beside it: the end cannot be checked, and verify says so
    moved = tmp_path / "moved.audit.jsonl"
    moved.write_text("")
    alone = verify_cli(moved)
    assert alone.exit_code == 1 and "cannot be checked" in alone.output
    other = tmp_path / "elsewhere.jsonl"
    other.write_text("")
    assert "holds no head for" in verify_cli(other, "--db", tmp_path / "pricing.sqlite").output


def test_a_torn_append_is_cut_at_restart_audited_and_the_chain_verifies(tmp_path, config):
    serve_checks(tmp_path, 2).close()
    log = tmp_path / "pricing.audit.jsonl"
    whole = log.read_text().splitlines()[-1]
    with log.open("a") as fh:  # a crash in the middle of writing a line
        fh.write(whole[: len(whole) // 2])
    assert verify_cli("--config", config).exit_code == 1
    m = ThreadManager(settings(tmp_path)).start()
    m.wait(m.submit(GOLD_80, "As a gold member you get 15% off.").id)
    m.close()
    assert events(log) == ["EXIT", "EXIT", "TORN_TAIL_CUT", "EXIT"]
    cut = json.loads(log.read_text().splitlines()[2])
    assert cut["bytes"] == len(whole) // 2 and cut["cut"] == whole[: len(whole) // 2][:200]
    ok = verify_cli("--config", config)
    assert ok.exit_code == 0 and "4 line(s) (4 keyed), 0 problem(s)" in ok.output, ok.output


class HeadFailsOnce:
    """A head store whose next update fails (a crash after the line was written, before the head moved)."""

    def __init__(self, store):
        self.store, self.fail = store, True

    def audit_head(self, log):
        return self.store.audit_head(log)

    def set_audit_head(self, log, seq, digest, exit_of=None):
        if self.fail:
            self.fail = False
            raise OSError("killed before the head moved")
        self.store.set_audit_head(log, seq, digest, exit_of)


def test_a_line_written_before_the_head_moved_is_caught_up_at_restart(tmp_path, config):
    serve_checks(tmp_path, 1).close()
    store = Store(tmp_path / "pricing.sqlite")
    key = key_path(tmp_path / "pricing.sqlite").read_text().strip().encode()
    with pytest.raises(OSError):
        AuditLog(tmp_path / "pricing.audit.jsonl", HeadFailsOnce(store), key).append({"event": "EXIT", "thread_id": "x"})
    store.close()
    assert "lines after the database's head" in verify_cli("--config", config).output
    ThreadManager(settings(tmp_path)).start().close()
    ok = verify_cli("--config", config)
    assert ok.exit_code == 0 and "2 line(s)" in ok.output, ok.output


APPENDER = textwrap.dedent("""
    import sys
    from awarl.chat.audit import AuditLog, load_or_create_key
    from awarl.chat.store import Store
    db, log = sys.argv[1], sys.argv[2]
    store = Store(db)
    audit = AuditLog(log, store, load_or_create_key(db, log, None))
    print("ready", flush=True)
    n = 0
    while True:
        audit.append({"event": "EXIT", "thread_id": f"t{n}", "final_response": "x" * 200000})
        n += 1
""")


def test_kill_9_during_appends_then_restart_then_verify_clean(tmp_path, config, monkeypatch):
    monkeypatch.delenv("AWARL_AUDIT_SECRET", raising=False)
    db, log = tmp_path / "pricing.sqlite", tmp_path / "pricing.audit.jsonl"
    proc = subprocess.Popen([sys.executable, "-c", APPENDER, str(db), str(log)], cwd=ROOT, stdout=subprocess.PIPE,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.stdout.readline().strip() == b"ready"
    time.sleep(0.6)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    ThreadManager(settings(tmp_path)).start().close()
    ok = verify_cli("--config", config)
    assert ok.exit_code == 0, ok.output
    assert events(log)[:3] == ["EXIT"] * 3  # it did write several lines before the kill


def test_an_exit_is_audited_once_across_a_crash_before_or_after_its_line(tmp_path):
    gen = ScriptedGenerator(lambda q, n: "<answer>unused</answer>", None)
    store = Store(tmp_path / "pricing.sqlite")
    # ended, saved, not yet audited (the crash came between the save and the audit line)
    ended = Thread.new(GOLD_80, generator="scripted", policy="pricing", state=State.COMPLETED, status=Status.PROCESSING,
                       exit=Exit.VALID_RESPONSE, badge=Badge.VALID, final_response="As a gold member you get 15% off.")
    store.save_thread(ended)
    store.close()
    m = ThreadManager(settings(tmp_path), generators={"scripted": gen}).start()
    assert m.get(ended.id)["status"] == "COMPLETED"
    m.close()
    # audited, not yet shown as done (the crash came after the audit line): no second line
    store = Store(tmp_path / "pricing.sqlite")
    store.save_thread(ended)  # PROCESSING again, as the crash left it
    store.close()
    m = ThreadManager(settings(tmp_path), generators={"scripted": gen}).start()
    assert m.get(ended.id)["status"] == "COMPLETED"
    lines = [json.loads(x) for x in m.audit.path.read_text().splitlines()]
    assert [(x["event"], x.get("thread_id")) for x in lines] == [("EXIT", ended.id)]
    assert gen.prompts == []  # never re-run
    assert verify_audit(m.audit.path, m.store.audit_head(m.audit.key), m.audit.secret).ok
    m.close()


def test_verify_pairs_a_named_log_with_its_database(tmp_path):
    """`serve --db NAME.sqlite` keeps NAME.audit.jsonl (`audit_beside`); `verify` finds that database (its
    head and key) from the log's name alone."""
    from awarl.chat.cli import audit_beside

    assert audit_beside(tmp_path / "pricing.sqlite") == str(tmp_path / "pricing.audit.jsonl")
    serve_checks(tmp_path, 2).close()
    result = verify_cli(tmp_path / "pricing.audit.jsonl")
    assert result.exit_code == 0 and f"checked against the head in {tmp_path / 'pricing.sqlite'}" in result.output
