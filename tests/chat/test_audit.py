"""The audit log's hash chain: every kind of tampering is found, with its line."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from awarl.chat.audit import AuditLog, verify_audit
from awarl.chat.store import Store
from awarl.cli import app


@pytest.fixture
def log(tmp_path):
    store = Store(tmp_path / "chat.sqlite")
    audit = AuditLog(tmp_path / "audit.jsonl", store)
    for i in range(5):
        audit.append({"event": "EXIT", "exit": "VALID_RESPONSE", "thread_id": f"t{i}", "final_response": f"answer {i}"})
    yield audit, store
    store.close()


def lines(audit):
    return audit.path.read_text().splitlines()


def write(audit, rows):
    audit.path.write_text("".join(r + "\n" for r in rows))


def head(audit, store):
    return store.audit_head(audit.key)


def test_an_untouched_chain_verifies(log):
    audit, store = log
    report = verify_audit(audit.path, head(audit, store))
    assert report.ok and report.lines == 5 and report.head_checked
    rows = [json.loads(x) for x in lines(audit)]
    assert [r["seq"] for r in rows] == [1, 2, 3, 4, 5]
    assert all(rows[i]["prev"] == rows[i - 1]["hash"] for i in range(1, 5))
    assert head(audit, store) == (5, rows[-1]["hash"])


def test_an_edited_line_is_found(log):
    audit, store = log
    rows = lines(audit)
    rows[2] = rows[2].replace("answer 2", "answer 2 (edited)")
    write(audit, rows)
    report = verify_audit(audit.path, head(audit, store))
    assert not report.ok and any("line 3" in p and "edited" in p for p in report.problems)


def test_a_removed_line_is_found(log):
    audit, store = log
    rows = lines(audit)
    del rows[1]
    write(audit, rows)
    report = verify_audit(audit.path, head(audit, store))
    assert any("line 2" in p and "removed" in p for p in report.problems)


def test_reordered_lines_are_found(log):
    audit, store = log
    rows = lines(audit)
    rows[1], rows[3] = rows[3], rows[1]
    write(audit, rows)
    report = verify_audit(audit.path, head(audit, store))
    assert any("line 2" in p and "reordered" in p for p in report.problems)


def test_truncation_at_the_end_is_found_only_with_the_database_head(log):
    audit, store = log
    write(audit, lines(audit)[:3])
    assert verify_audit(audit.path).ok  # the file alone cannot show it
    report = verify_audit(audit.path, head(audit, store))
    assert any("2 line(s) were cut off the end" in p for p in report.problems)


def test_hmac_keyed_chain_needs_the_key(tmp_path):
    store = Store(tmp_path / "chat.sqlite")
    audit = AuditLog(tmp_path / "audit.jsonl", store, secret=b"k3y")
    audit.append({"event": "EXIT", "exit": "ERROR"})
    assert verify_audit(audit.path, store.audit_head(audit.key), secret=b"k3y").ok
    # Without the key (or with another) a forger who rewrites the hashes cannot make the chain verify.
    assert not verify_audit(audit.path, secret=b"other").ok
    store.close()


def test_appends_continue_the_chain_across_restarts(tmp_path):
    store = Store(tmp_path / "chat.sqlite")
    AuditLog(tmp_path / "audit.jsonl", store).append({"event": "EXIT"})
    store.close()
    store = Store(tmp_path / "chat.sqlite")
    second = AuditLog(tmp_path / "audit.jsonl", store).append({"event": "EXIT"})
    assert second["seq"] == 2 and verify_audit(tmp_path / "audit.jsonl", store.audit_head(str((tmp_path / "audit.jsonl").resolve()))).ok
    store.close()


def test_cli_reports_tampering_and_exits_1(log):
    audit, store = log
    runner = CliRunner()
    ok = runner.invoke(app, ["audit", "verify", str(audit.path)])
    assert ok.exit_code == 0, ok.output
    assert "5 line(s) (unkeyed), 0 problem(s); checked against the head" in ok.output
    write(audit, lines(audit)[:-1])
    bad = runner.invoke(app, ["audit", "verify", str(audit.path)])
    assert bad.exit_code == 1 and "cut off the end" in bad.output
    missing = runner.invoke(app, ["audit", "verify", str(audit.path.with_name("nope.jsonl"))])
    assert missing.exit_code == 2
