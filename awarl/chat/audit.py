"""Append-only audit log with a keyed hash chain, safe against crashes.

Every exit of a thread (VALID_RESPONSE, MAX_ITERATIONS_REACHED, IMPOSSIBLE, ABSTAINED,
NO_TRANSLATIONS, CHECKED_ONLY, ERROR), every recovery after a crash, every review decision and
every repair of the file itself is one JSON line. Each line carries ``seq`` (1, 2, …), ``prev``
(the previous line's hash), ``alg`` and ``hash`` = HMAC-SHA-256 (``alg: hmac-sha256``, keyed by a
secret) or SHA-256 (``alg: sha256``) of the line's canonical JSON without ``hash``. Editing a line
breaks its hash, removing or reordering lines breaks ``seq``/``prev``, and cutting lines off the
end is caught against the head (last ``seq`` and ``hash``) kept in SQLite, which the file alone
cannot show. Without the key a forger cannot rewrite a keyed chain so that it verifies.

Crash safety: a line is one ``write`` on an ``O_APPEND`` descriptor, then ``fsync``, and only then
does the head in SQLite move. A crash mid-write leaves a torn last line (no newline); `repair`
(run at every start, before anything else is appended) cuts it and audits the cut as its own
``TORN_TAIL_CUT`` line. A crash after the write but before the head moved leaves a whole, chained
line one past the head: `repair` moves the head to it.

`verify_audit` reports each problem with its line number.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import logging
import os
import secrets
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger(__name__)

GENESIS = "0" * 64
KEYED, UNKEYED = "hmac-sha256", "sha256"


class HeadStore(Protocol):
    def audit_head(self, log: str) -> tuple[int, str] | None: ...

    def set_audit_head(self, log: str, seq: int, digest: str, exit_of: str | None = None) -> None: ...


def canonical(record: Mapping[str, Any]) -> bytes:
    return json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def line_hash(record: Mapping[str, Any], secret: bytes | None = None) -> str:
    body = canonical({k: v for k, v in record.items() if k != "hash"})
    if secret:
        return hmac.new(secret, body, hashlib.sha256).hexdigest()
    return hashlib.sha256(body).hexdigest()


def key_path(db: str | Path) -> Path:
    """Where the audit key of a database lives: ``<db>.audit-key``, beside it."""
    return Path(f"{db}.audit-key")


def load_or_create_key(db: str | Path, audit: str | Path, env: str | None) -> bytes | None:
    """The audit chain's secret: ``$env`` when set, else the key file beside the database, generated
    (0600, 32 random bytes as hex) when missing — unless the log already holds unkeyed lines, which
    stay unkeyed (a warning says to start a new log to key it)."""
    if env and os.environ.get(env):
        return os.environ[env].encode("utf-8")
    path = key_path(db)
    if path.exists():
        return _read_key(path)
    audit = Path(audit)
    if audit.exists() and audit.stat().st_size > 0:
        log.warning("audit log %s has unkeyed lines and no key file (%s): it stays unkeyed; start a new log to key it",
                    audit, path)
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process made it meanwhile
        return _read_key(path)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(secrets.token_hex(32) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    return _read_key(path)


def _read_key(path: Path) -> bytes:
    key = path.read_text(encoding="utf-8").strip()
    if not key:
        raise ValueError(f"{path}: the audit key file is empty")
    return key.encode("utf-8")


class HeadNotMoved(OSError):
    """The line was written whole and synced, but the head in the database could not move; the next
    start's `AuditLog.repair` catches the head up to it."""


class AuditLog:
    """Appends chained lines; safe across threads (a lock) and processes (``flock`` on the file)."""

    def __init__(self, path: str | Path, heads: HeadStore, secret: bytes | None = None):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.key = str(self.path.resolve())
        self.heads, self.secret = heads, secret
        self._lock = threading.Lock()

    def append(self, record: Mapping[str, Any], *, exit_of: str | None = None) -> dict[str, Any]:
        """Write one line whole (one write, fsynced), then move the head; ``exit_of`` records in the same
        transaction that this line is that thread's exit, so it is never written twice."""
        with self._lock:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                head = self.heads.audit_head(self.key)
                seq, prev = (head[0] + 1, head[1]) if head else (1, GENESIS)
                line = {"seq": seq, "prev": prev, "alg": KEYED if self.secret else UNKEYED,
                        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **record}
                line["hash"] = line_hash(line, self.secret)
                data = (json.dumps(line, ensure_ascii=False) + "\n").encode("utf-8")
                written = os.write(fd, data)
                if written != len(data):  # a full disk mid-line: cut what was written, fail the append
                    os.ftruncate(fd, os.fstat(fd).st_size - written)
                    raise OSError(f"{self.path}: only {written} of {len(data)} bytes of an audit line were written")
                os.fsync(fd)
                try:
                    self.heads.set_audit_head(self.key, seq, line["hash"], exit_of)
                except Exception as exc:
                    raise HeadNotMoved(f"{self.path}: seq {seq} written; the head could not move ({exc})") from exc
            finally:
                os.close(fd)  # releases the flock
        return line

    def repair(self) -> list[dict[str, Any]]:
        """Make the file and the head agree after a crash (see the module doc); the lines it audited."""
        if not self.path.exists():
            return []
        done: list[dict[str, Any]] = []
        with self._lock:
            with self.path.open("rb+") as fh:
                fcntl.flock(fh, fcntl.LOCK_EX)
                data = fh.read()
                cut = b""
                if data and not data.endswith(b"\n"):
                    keep = data.rfind(b"\n") + 1
                    cut = data[keep:]
                    fh.truncate(keep)
                    fh.flush()
                    os.fsync(fh.fileno())
                    data = data[:keep]
                self._catch_up_head(data)
        if cut:
            log.warning("%s: cut a torn last line of %d bytes (a crash during an append)", self.path, len(cut))
            done.append(self.append({"event": "TORN_TAIL_CUT", "bytes": len(cut),
                                     "cut": cut[:200].decode("utf-8", "replace")}))
        return done

    def _catch_up_head(self, data: bytes) -> None:
        """Whole lines past the head, each chained to the one before and hashed right, were written while
        the head could not move (a crash after the write, a database that was locked or full): move the
        head over them, recording the exits they hold."""
        head = self.heads.audit_head(self.key)
        seq, prev = (head[0], head[1]) if head else (0, GENESIS)
        moved = 0
        for raw in data.splitlines()[seq:]:
            try:
                line = json.loads(raw)
            except ValueError:
                break  # verify reports it
            if not (isinstance(line, dict) and line.get("seq") == seq + 1 and line.get("prev") == prev
                    and line.get("hash") == line_hash(line, self.secret if line.get("alg") == KEYED else None)):
                break
            seq, prev = line["seq"], line["hash"]
            exit_of = line.get("thread_id") if line.get("event") == "EXIT" else None
            self.heads.set_audit_head(self.key, seq, prev, exit_of)
            moved += 1
        if moved:
            log.warning("%s: the head lagged %d line(s) behind the file; moved to seq %d", self.path, moved, seq)


@dataclass
class AuditReport:
    path: str
    lines: int = 0
    problems: list[str] = field(default_factory=list)
    head_checked: bool = False
    keyed: int = 0
    """Lines hashed with the HMAC key."""

    @property
    def ok(self) -> bool:
        return not self.problems


def verify_audit(path: str | Path, head: tuple[int, str] | None = None, secret: bytes | None = None) -> AuditReport:
    """Check the chain of an audit file; with ``head`` (from SQLite) also that nothing was cut off the end."""
    path = Path(path)
    report = AuditReport(str(path), head_checked=head is not None)
    if not path.exists():
        report.problems.append(f"{path}: file not found")
        return report
    prev_hash, prev_seq = GENESIS, 0
    with path.open(encoding="utf-8") as fh:
        for n, text in enumerate(fh, start=1):
            if not text.strip():
                report.problems.append(f"{path}, line {n}: empty line")
                continue
            report.lines += 1
            try:
                line = json.loads(text)
            except json.JSONDecodeError as exc:
                report.problems.append(f"{path}, line {n}: not JSON ({exc.msg}) — edited or torn")
                continue
            if not isinstance(line, dict) or not {"seq", "prev", "hash"} <= line.keys():
                report.problems.append(f"{path}, line {n}: missing seq/prev/hash")
                continue
            keyed = line.get("alg") == KEYED
            if keyed:
                report.keyed += 1
            if keyed and not secret:
                report.problems.append(f"{path}, line {n} (seq {line['seq']}): keyed (HMAC) but no key was given — "
                                       "pass the server's --config or --db (its key file), or set the key's variable")
            elif not keyed and secret:
                report.problems.append(f"{path}, line {n} (seq {line['seq']}): not keyed in a keyed log — "
                                       "written without the secret (a forged or downgraded line)")
            elif line_hash(line, secret if keyed else None) != line["hash"]:
                report.problems.append(f"{path}, line {n} (seq {line['seq']}): hash mismatch — the line was edited"
                                       + (" or another key was given" if keyed else ""))
            if line["seq"] != prev_seq + 1:
                report.problems.append(f"{path}, line {n}: seq {line['seq']} follows seq {prev_seq} — "
                                       "a line was removed or lines were reordered")
            elif line["prev"] != prev_hash:
                report.problems.append(f"{path}, line {n} (seq {line['seq']}): prev does not match the line before — "
                                       "the chain is broken")
            prev_hash, prev_seq = line["hash"], line["seq"]
    if head is not None:
        seq, digest = head
        if seq > prev_seq:
            report.problems.append(f"{path}: the file ends at seq {prev_seq} but the database's head is seq {seq} — "
                                   f"{seq - prev_seq} line(s) were cut off the end")
        elif seq == prev_seq and digest != prev_hash:
            report.problems.append(f"{path}: the last line's hash differs from the database's head (seq {seq})")
        elif seq < prev_seq:
            report.problems.append(f"{path}: the file has lines after the database's head (seq {seq}) — "
                                   "lines were added outside the chatbot or the database is older")
    return report
