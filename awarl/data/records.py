"""The two data shapes every stage shares: `Passage` and `QARecord`, and their JSONL files.

Passage ids are stable strings: the dataset's own id when it has one, else ``d`` plus a short
hash of title and text, so a citation ``[d3f2a91c0b]`` names the same passage everywhere.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


class DataError(ValueError):
    """Bad input data; the message names the file, the line or index, and the field."""

    def __init__(self, path: str | Path, where: str, problem: str, field_name: str | None = None):
        self.path, self.where, self.problem, self.field = str(path), where, problem, field_name
        loc = f"{path}, {where}" + (f", field '{field_name}'" if field_name else "")
        super().__init__(f"{loc}: {problem}")


def passage_id(title: str, text: str) -> str:
    """Stable id of a passage: ``d`` + the first 10 hex digits of sha1(title, text).

    >>> passage_id("Paris", "Paris is the capital of France.")
    'd11651935d5'
    """
    digest = hashlib.sha1(f"{title}\n{text}".encode("utf-8")).hexdigest()
    return "d" + digest[:10]


@dataclass(frozen=True)
class Passage:
    id: str
    title: str
    text: str

    def to_dict(self) -> dict[str, str]:
        return {"id": self.id, "title": self.title, "text": self.text}

    @classmethod
    def from_dict(cls, row: dict[str, Any], *, path: str | Path = "<dict>", where: str = "") -> "Passage":
        for name in ("id", "text"):
            _require(row, name, str, path, where)
        title = row.get("title", "")
        if not isinstance(title, str):
            raise DataError(path, where, f"expected a string, got {type(title).__name__}", "title")
        return cls(id=row["id"], title=title, text=row["text"])


@dataclass
class QARecord:
    """One question. ``answers`` holds the answer and its aliases; ``passages`` are the ids this
    question may search in ``closed`` scope; ``supporting`` the gold evidence among them."""

    id: str
    question: str
    answers: list[str]
    dataset: str
    answerable: bool = True
    supporting: list[str] = field(default_factory=list)
    passages: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, row: dict[str, Any], *, path: str | Path = "<dict>", where: str = "") -> "QARecord":
        _require(row, "id", str, path, where)
        _require(row, "question", str, path, where)
        _require(row, "answers", list, path, where)
        _require(row, "dataset", str, path, where)
        if not all(isinstance(a, str) for a in row["answers"]):
            raise DataError(path, where, "every answer must be a string", "answers")
        answerable = row.get("answerable", True)
        if not isinstance(answerable, bool):
            raise DataError(path, where, f"expected true/false, got {answerable!r}", "answerable")
        for name in ("supporting", "passages"):
            value = row.get(name, [])
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise DataError(path, where, "expected a list of passage ids", name)
        meta = row.get("meta", {}) or {}
        extra = {k: v for k, v in row.items() if k not in _RECORD_FIELDS}
        return cls(
            id=row["id"],
            question=row["question"],
            answers=list(row["answers"]),
            dataset=row["dataset"],
            answerable=answerable,
            supporting=list(row.get("supporting", [])),
            passages=list(row.get("passages", [])),
            meta={**meta, **extra},
        )


_RECORD_FIELDS = {"id", "question", "answers", "dataset", "answerable", "supporting", "passages", "meta"}


def _require(row: dict[str, Any], name: str, kind: type, path: str | Path, where: str) -> None:
    if name not in row:
        raise DataError(path, where, "missing required field", name)
    if not isinstance(row[name], kind):
        raise DataError(path, where, f"expected {kind.__name__}, got {type(row[name]).__name__}", name)


def iter_jsonl(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, object)`` for each non-blank line; a broken line is a `DataError`."""
    path = Path(path)
    if not path.exists():
        raise DataError(path, "-", "file not found")
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(path, f"line {lineno}", f"broken JSON ({exc.msg} at column {exc.colno})") from None
            if not isinstance(obj, dict):
                raise DataError(path, f"line {lineno}", f"expected a JSON object, got {type(obj).__name__}")
            yield lineno, obj


def read_json(path: str | Path, missing: str = "file not found") -> Any:
    """Parse a whole JSON file; a missing file (with ``missing`` as the hint) or broken JSON is a `DataError`."""
    path = Path(path)
    if not path.exists():
        raise DataError(path, "-", missing)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DataError(path, f"line {exc.lineno}", f"broken JSON ({exc.msg} at column {exc.colno})") from None


def write_jsonl(path: str | Path, rows: Iterable[dict[str, Any]]) -> int:
    """Write rows atomically (temp file + rename) so a crash never leaves half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    n = 0
    with tmp.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
            n += 1
    tmp.replace(path)
    return n


def load_records(path: str | Path) -> list[QARecord]:
    """Read a prepared ``records.jsonl``."""
    return [QARecord.from_dict(row, path=path, where=f"line {n}") for n, row in iter_jsonl(path)]


def load_corpus(path: str | Path) -> list[Passage]:
    """Read a prepared ``corpus.jsonl``; duplicate ids are an error."""
    out: list[Passage] = []
    seen: dict[str, int] = {}
    for n, row in iter_jsonl(path):
        p = Passage.from_dict(row, path=path, where=f"line {n}")
        if p.id in seen:
            raise DataError(path, f"line {n}", f"duplicate passage id {p.id!r} (first on line {seen[p.id]})", "id")
        seen[p.id] = n
        out.append(p)
    return out


# -- resumable JSONL: append whole rows, cut a torn tail on restart --------------------------------------

def append_rows(sink: Any, rows: list[dict[str, Any]]) -> None:
    """Write whole rows, then flush and sync, so a crash loses at most the query in progress."""
    sink.write("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
    sink.flush()
    os.fsync(sink.fileno())


def drop_torn_tail(path: Path) -> None:
    """Cut an unfinished last line (a crash mid-write) off a JSONL file; add a missing final newline."""
    data = path.read_bytes()
    if not data or data.endswith(b"\n"):
        return
    cut = data.rfind(b"\n") + 1
    tail = data[cut:]
    try:
        json.loads(tail)
        with path.open("ab") as fh:  # a complete last row that only lacks its newline
            fh.write(b"\n")
    except ValueError:
        with path.open("r+b") as fh:
            fh.truncate(cut)
        log.warning("%s: dropped an unfinished last line (%d bytes) from an interrupted run", path, len(tail))
