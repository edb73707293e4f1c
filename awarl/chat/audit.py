"""Append-only audit log with a hash chain.

Every exit of a thread (VALID_RESPONSE, MAX_ITERATIONS_REACHED, IMPOSSIBLE, ABSTAINED,
NO_TRANSLATIONS, CHECKED_ONLY, ERROR) and every recovery after a crash is one JSON line. Each line
carries ``seq`` (1, 2, …), ``prev`` (the previous line's hash) and ``hash`` = SHA-256 — or
HMAC-SHA-256 when a secret is set — of the line's canonical JSON without ``hash``. Editing a line
breaks its hash, removing or reordering lines breaks ``seq``/``prev``, and cutting lines off the
end is caught against the head (last ``seq`` and ``hash``) kept in SQLite, which the file alone
cannot show. `verify_audit` reports each problem with its line number.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

GENESIS = "0" * 64


class HeadStore(Protocol):
    def audit_head(self, log: str) -> tuple[int, str] | None: ...

    def set_audit_head(self, log: str, seq: int, digest: str) -> None: ...


def canonical(record: Mapping[str, Any]) -> bytes:
    return json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def line_hash(record: Mapping[str, Any], secret: bytes | None = None) -> str:
    body = canonical({k: v for k, v in record.items() if k != "hash"})
    if secret:
        return hmac.new(secret, body, hashlib.sha256).hexdigest()
    return hashlib.sha256(body).hexdigest()


class AuditLog:
    """Appends chained lines; safe across threads (a lock) and processes (``flock`` on the file)."""

    def __init__(self, path: str | Path, heads: HeadStore, secret: bytes | None = None):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.key = str(self.path.resolve())
        self.heads, self.secret = heads, secret
        self._lock = threading.Lock()

    def append(self, record: Mapping[str, Any]) -> dict[str, Any]:
        with self._lock, self.path.open("a+", encoding="utf-8") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                head = self.heads.audit_head(self.key)
                seq, prev = (head[0] + 1, head[1]) if head else (1, GENESIS)
                line = {"seq": seq, "prev": prev, "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                        **record}
                line["hash"] = line_hash(line, self.secret)
                fh.write(json.dumps(line, ensure_ascii=False) + "\n")
                fh.flush()
                self.heads.set_audit_head(self.key, seq, line["hash"])
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)
        return line


@dataclass
class AuditReport:
    path: str
    lines: int = 0
    problems: list[str] = field(default_factory=list)
    head_checked: bool = False

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
            if line_hash(line, secret) != line["hash"]:
                report.problems.append(f"{path}, line {n} (seq {line['seq']}): hash mismatch — the line was edited"
                                       + ("" if secret else " (or was written with an HMAC secret)"))
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
