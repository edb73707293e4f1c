"""SQLite persistence for threads, the review queue, reviewer corrections and the audit head.

One file (default ``runs/chat/chat.sqlite``) so a restart — or a second process on the same
file — sees every thread. WAL mode lets readers (``GET /api/thread/{id}``) run beside the
workers' writes; one connection per store guarded by a lock keeps sqlite3's threading rules.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from awarl.chat.thread import Status, Thread

log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS threads (
    id TEXT PRIMARY KEY, status TEXT NOT NULL, state TEXT NOT NULL,
    created REAL NOT NULL, updated REAL NOT NULL, data TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS threads_status ON threads(status);
CREATE INDEX IF NOT EXISTS threads_created ON threads(created);
CREATE TABLE IF NOT EXISTS reviews (
    id INTEGER PRIMARY KEY AUTOINCREMENT, thread_id TEXT, reason TEXT NOT NULL, status TEXT NOT NULL,
    data TEXT NOT NULL, verdict TEXT, correction TEXT, created REAL NOT NULL, decided REAL, reviewer TEXT);
CREATE TABLE IF NOT EXISTS corrections (
    id INTEGER PRIMARY KEY AUTOINCREMENT, text TEXT NOT NULL, error TEXT, review_id INTEGER, created REAL NOT NULL,
    sentence TEXT, reviewer TEXT, thread_id TEXT, override INTEGER NOT NULL DEFAULT 0, reason TEXT);
CREATE TABLE IF NOT EXISTS audit_head (
    log TEXT PRIMARY KEY, seq INTEGER NOT NULL, hash TEXT NOT NULL, updated REAL NOT NULL);
CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS thread_tokens (thread_id TEXT PRIMARY KEY, hash TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS exits (thread_id TEXT PRIMARY KEY, log TEXT NOT NULL, seq INTEGER NOT NULL);
"""


_ADDED_COLUMNS = (("reviews", "reviewer", "TEXT"), ("corrections", "sentence", "TEXT"), ("corrections", "reviewer", "TEXT"),
                  ("corrections", "thread_id", "TEXT"), ("corrections", "override", "INTEGER NOT NULL DEFAULT 0"),
                  ("corrections", "reason", "TEXT"))


class StoreError(RuntimeError):
    """A store operation that cannot be done (unknown id, bad state); the message says which."""


class StorageDown(RuntimeError):
    """A database write failed after every retry (locked past its timeout, full disk, deleted file);
    ``detail`` holds the last error's text, for the server log."""

    def __init__(self, message: str, detail: str | None = None):
        super().__init__(message)
        self.detail = detail


class DatabaseInUse(StoreError):
    """Another chat server holds this database; the message names it (pid, host, since when)."""


class ServerLock:
    """One server per database: an exclusive ``flock`` on ``<db>.lock``, held for the server's life.

    Taken before the database is opened, so a second server (even one whose port turns out to be
    busy) never recovers, re-runs or audits the first one's threads. The file says who holds it;
    the lock itself is the kernel's, so it dies with the process that held it (``kill -9`` too).
    """

    def __init__(self, db: str | Path):
        self.path = Path(f"{db}.lock")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = None

    def acquire(self) -> "ServerLock":
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 512, 0).decode("utf-8", "replace").strip() or "a process that wrote no pid"
            os.close(fd)
            db = str(self.path)[: -len(".lock")]
            raise DatabaseInUse(f"{db} is in use by another awarl chat server ({holder}); one server per database: "
                                "stop it, or give this one another --db") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()} since "
                      f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n".encode(), 0)
        os.fsync(fd)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


@dataclass
class Review:
    id: int
    thread_id: str | None
    reason: str
    status: str  # pending | decided
    data: dict[str, Any]
    verdict: str | None
    correction: str | None
    created: float
    decided: float | None
    reviewer: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__}


class Store:
    """``timeout_s``: how long a statement waits for another connection's lock before it fails (the
    caller retries with backoff); ``check``: run SQLite's ``quick_check`` first, so a damaged file is
    named at start instead of failing requests later."""

    def __init__(self, path: str | Path, *, timeout_s: float = 30.0, check: bool = False):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.timeout_s = timeout_s
        self._lock = threading.RLock()
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._db = sqlite3.connect(self.path, check_same_thread=False, timeout=timeout_s, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        try:
            with self._lock:
                if check:
                    problems = [r[0] for r in self._db.execute("PRAGMA quick_check").fetchall()]
                    if problems != ["ok"]:
                        raise sqlite3.DatabaseError("; ".join(problems[:3]))
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")
                self._db.executescript(_SCHEMA)
                self._add_columns()
        except sqlite3.DatabaseError as exc:
            self._db.close()
            raise StoreError(f"{self.path}: not a usable chat database ({exc}); restore it from a backup or move it "
                             "aside to start an empty one") from None

    def _add_columns(self) -> None:
        """Columns a database made by an earlier schema lacks (CREATE TABLE IF NOT EXISTS keeps its tables)."""
        for table, column, decl in _ADDED_COLUMNS:
            have = {r["name"] for r in self._db.execute(f"PRAGMA table_info({table})")}
            if column not in have:
                self._db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {decl}")

    def health(self) -> dict[str, Any]:
        """Can the database be read and written now? A write probe (an immediate transaction, rolled
        back) on its own connection that waits at most a second."""
        state: dict[str, Any] = {"readable": False, "writable": False, "error": None}
        if not self.path.exists():
            state["error"] = "the database file is missing"
            return state
        try:
            conn = sqlite3.connect(self.path, timeout=1.0, isolation_level=None)
            try:
                conn.execute("SELECT COUNT(*) FROM threads").fetchone()
                state["readable"] = True
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("CREATE TABLE IF NOT EXISTS health_probe (x INTEGER)")
                conn.execute("ROLLBACK")
                state["writable"] = True
            finally:
                conn.close()
        except sqlite3.Error as exc:  # a fixed message for clients (the route is open); the text goes to the log
            log.error("database health probe of %s: %s", self.path, exc)
            state["error"] = ("the database is locked" if "locked" in str(exc)
                              else "the database cannot be read or written (the server log has the cause)")
        return state

    def _reader(self) -> sqlite3.Connection:
        """A read-only connection of the calling thread: API reads run beside the workers' writes
        (WAL) instead of queueing behind the writer's lock."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, check_same_thread=False, timeout=self.timeout_s)
            conn.row_factory = sqlite3.Row
            self._local.conn = conn
            with self._lock:
                self._readers.append(conn)
        return conn

    def close(self) -> None:
        with self._lock:
            for conn in self._readers:
                conn.close()
            self._readers.clear()
            self._db.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE … COMMIT: a read-modify-write no other process can interleave with."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                if self._db.in_transaction:  # SQLite has already rolled back after some errors (a full disk)
                    self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    # -- threads -------------------------------------------------------------------------------
    def save_thread(self, t: Thread, *, token_hash: str | None = None) -> None:
        """Save a thread; ``token_hash`` (its capability's hash, kept apart from the thread's JSON, which the
        API returns) is stored in the same transaction."""
        t.updated = time.time()
        data = json.dumps(t.to_dict(), ensure_ascii=False)
        with self.transaction() as db:
            db.execute(
                "INSERT INTO threads(id, status, state, created, updated, data) VALUES (?,?,?,?,?,?) "
                "ON CONFLICT(id) DO UPDATE SET status=excluded.status, state=excluded.state, "
                "updated=excluded.updated, data=excluded.data",
                (t.id, t.status.value, t.state.value, t.created, t.updated, data),
            )
            if token_hash is not None:
                db.execute("INSERT OR REPLACE INTO thread_tokens(thread_id, hash) VALUES (?,?)", (t.id, token_hash))

    def thread_token(self, thread_id: str) -> str | None:
        """The hash of the thread's capability token, or None."""
        row = self._reader().execute("SELECT hash FROM thread_tokens WHERE thread_id=?", (thread_id,)).fetchone()
        return row["hash"] if row else None

    def load_thread(self, thread_id: str) -> Thread | None:
        with self._lock:
            row = self._db.execute("SELECT data FROM threads WHERE id=?", (thread_id,)).fetchone()
        return Thread.from_dict(json.loads(row["data"])) if row else None

    def thread_json(self, thread_id: str) -> dict[str, Any] | None:
        raw = self.thread_raw(thread_id)
        return json.loads(raw) if raw is not None else None

    def thread_raw(self, thread_id: str) -> str | None:
        """The thread's stored JSON text, as is (the API sends it without decoding and re-encoding)."""
        row = self._reader().execute("SELECT data FROM threads WHERE id=?", (thread_id,)).fetchone()
        return row["data"] if row else None

    def list_threads(self, limit: int = 100, status: str | None = None) -> list[dict[str, Any]]:
        """Newest first, as summaries (no iterations)."""
        sql = "SELECT data FROM threads" + (" WHERE status=?" if status else "") + " ORDER BY created DESC LIMIT ?"
        args: tuple[Any, ...] = (status, limit) if status else (limit,)
        with self._lock:
            rows = self._db.execute(sql, args).fetchall()
        out = []
        for row in rows:
            d = json.loads(row["data"])
            out.append({k: d.get(k) for k in ("id", "prompt", "status", "state", "badge", "exit", "final_response",
                                              "warning", "created", "updated", "rewrites", "policy", "generator")})
        return out

    def thread_ids(self, status: Status) -> list[str]:
        with self._lock:
            rows = self._db.execute("SELECT id FROM threads WHERE status=? ORDER BY created", (status.value,)).fetchall()
        return [r["id"] for r in rows]

    def count_threads(self) -> dict[str, int]:
        with self._lock:
            rows = self._db.execute("SELECT status, COUNT(*) AS n FROM threads GROUP BY status").fetchall()
        return {r["status"]: r["n"] for r in rows}

    # -- review queue --------------------------------------------------------------------------
    def add_review(self, reason: str, data: dict[str, Any], thread_id: str | None = None) -> int:
        with self._lock:
            cur = self._db.execute(
                "INSERT INTO reviews(thread_id, reason, status, data, created) VALUES (?,?,?,?,?)",
                (thread_id, reason, "pending", json.dumps(data, ensure_ascii=False), time.time()),
            )
            return int(cur.lastrowid)

    def reviews(self, status: str | None = None) -> list[Review]:
        sql = "SELECT * FROM reviews" + (" WHERE status=?" if status else "") + " ORDER BY id"
        with self._lock:
            rows = self._db.execute(sql, (status,) if status else ()).fetchall()
        return [self._review(r) for r in rows]

    def review(self, review_id: int) -> Review | None:
        with self._lock:
            row = self._db.execute("SELECT * FROM reviews WHERE id=?", (review_id,)).fetchone()
        return self._review(row) if row else None

    @staticmethod
    def _review(r: sqlite3.Row) -> Review:
        return Review(r["id"], r["thread_id"], r["reason"], r["status"], json.loads(r["data"]), r["verdict"],
                      r["correction"], r["created"], r["decided"], r["reviewer"])

    def decide_review(self, review_id: int, verdict: str, note: str | None, *, sentence: str | None = None,
                      error: str | None = None, reviewer: str | None = None, override: bool = False,
                      reason: str | None = None) -> Review:
        """Record a reviewer's verdict. A sentence marked wrong (``sentence``, with its ``error`` pattern)
        or a note joins the corrections list in the same transaction, with the reviewer and the thread."""
        with self.transaction() as db:
            row = db.execute("SELECT status, thread_id FROM reviews WHERE id=?", (review_id,)).fetchone()
            if row is None:
                raise StoreError(f"review {review_id} does not exist")
            if row["status"] != "pending":
                raise StoreError(f"review {review_id} was already decided")
            now = time.time()
            db.execute("UPDATE reviews SET status='decided', verdict=?, correction=?, decided=?, reviewer=? WHERE id=?",
                       (verdict, note, now, reviewer, review_id))
            if sentence or note:
                db.execute("INSERT INTO corrections(text, error, review_id, created, sentence, reviewer, thread_id, override, "
                           "reason) VALUES (?,?,?,?,?,?,?,?,?)",
                           (note or "", error, review_id, now, sentence, reviewer, row["thread_id"], int(override), reason))
        review = self.review(review_id)
        assert review is not None
        return review

    def corrections(self) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._db.execute("SELECT * FROM corrections ORDER BY id").fetchall()
        return [dict(r) for r in rows]

    # -- audit head ----------------------------------------------------------------------------
    def audit_head(self, log: str) -> tuple[int, str] | None:
        with self._lock:
            row = self._db.execute("SELECT seq, hash FROM audit_head WHERE log=?", (log,)).fetchone()
        return (row["seq"], row["hash"]) if row else None

    def set_audit_head(self, log: str, seq: int, digest: str, exit_of: str | None = None) -> None:
        """Move the head; with ``exit_of``, record in the same transaction that line ``seq`` is that
        thread's exit (so a retried or recovered exit is never audited twice)."""
        with self.transaction() as db:
            db.execute(
                "INSERT INTO audit_head(log, seq, hash, updated) VALUES (?,?,?,?) "
                "ON CONFLICT(log) DO UPDATE SET seq=excluded.seq, hash=excluded.hash, updated=excluded.updated",
                (log, seq, digest, time.time()),
            )
            if exit_of is not None:
                db.execute("INSERT OR IGNORE INTO exits(thread_id, log, seq) VALUES (?,?,?)", (exit_of, log, seq))

    def exit_audited(self, thread_id: str) -> bool:
        with self._lock:
            return self._db.execute("SELECT 1 FROM exits WHERE thread_id=?", (thread_id,)).fetchone() is not None

    def has_review(self, thread_id: str, reason: str) -> bool:
        with self._lock:
            return self._db.execute("SELECT 1 FROM reviews WHERE thread_id=? AND reason=?",
                                    (thread_id, reason)).fetchone() is not None

    # -- settings changed at run time (POST /api/config) ----------------------------------------
    def setting(self, key: str) -> Any:
        with self._lock:
            row = self._db.execute("SELECT value FROM settings WHERE key=?", (key,)).fetchone()
        return json.loads(row["value"]) if row else None

    def set_setting(self, key: str, value: Any) -> None:
        with self._lock:
            self._db.execute("INSERT INTO settings(key, value) VALUES (?,?) ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                             (key, json.dumps(value)))
