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

from awarl.errors import DataError

log = logging.getLogger(__name__)




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
        if not isinstance(meta, dict):
            raise DataError(path, where, f"expected an object, got {json_type(meta)}", "meta")
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
    if not isinstance(row[name], kind) or (isinstance(row[name], bool) and kind is not bool):
        raise DataError(path, where, f"expected {kind_name(kind)}, got {json_type(row[name])}", name)


_BOM = b"\xef\xbb\xbf"


def _check_readable(path: Path, missing: str) -> None:
    """A missing file or a folder where a file belongs is a `DataError`, not an `OSError` traceback."""
    if path.is_dir():
        raise DataError(path, "", "is a folder; expected a file")
    if not path.exists():
        raise DataError(path, "", missing)


def _not_utf8(path: Path, data: bytes, exc: UnicodeDecodeError, offset: int) -> DataError:
    """Name the first byte that is not UTF-8 and where it is, so the user can find and re-save it."""
    bad = data[exc.start : exc.start + 1]
    hint = "save it as UTF-8"
    if data[:2] in (b"\xff\xfe", b"\xfe\xff") and offset == 0:
        hint = "it looks like UTF-16 (byte-order mark); save it as UTF-8"
    elif bad and 0xA0 <= bad[0] <= 0xFF:
        hint = "it may be Latin-1 or Windows-1252 text; save it as UTF-8"
    return DataError(path, "", f"not UTF-8 text: byte {bad!r} at byte offset {offset + exc.start} ({hint})")


def parse_json(path: str | Path, text: str, where: str | None = None, **kwargs: Any) -> Any:
    """``json.loads`` of ``text`` (read from ``path``) with every failure as a `DataError`: broken
    JSON, nesting deeper than the parser's recursion limit, numbers Python refuses (``ValueError``).
    ``where`` names the position for the message; by default the line the parser stopped at."""
    try:
        return json.loads(text, **kwargs)
    except DataError:  # raised by a hook in ``kwargs`` (e.g. a duplicate-key check)
        raise
    except json.JSONDecodeError as exc:
        position = where or f"line {exc.lineno}"
        at = "" if exc.msg.endswith(" at") else " at"  # "Unterminated string starting at" names its place already
        raise DataError(path, position, f"broken JSON ({exc.msg}{at} column {exc.colno})") from None
    except RecursionError:
        raise DataError(path, where or "", "JSON nested too deeply to read") from None
    except ValueError as exc:  # e.g. an integer with more digits than Python converts
        raise DataError(path, where or "", f"unreadable JSON value ({exc})") from None


def iter_jsonl(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, object)`` for each non-blank line.

    Every failure is a `DataError` naming the file and line: a missing file, a folder, bytes that
    are not UTF-8 (with the byte offset), broken JSON, a line that is not a JSON object. Lines
    are read as bytes and decoded one by one, so a bad byte is reported where it is rather than
    as a ``UnicodeDecodeError`` halfway through a read. The loop does only decode + parse per
    line; blank lines, a byte-order mark and errors are sorted out on the (rare) failure path.
    """
    path = Path(path)
    _check_readable(path, "file not found")
    try:
        fh = path.open("rb")
    except OSError as exc:
        raise DataError(path, "", f"cannot read ({exc.strerror or exc})") from None
    loads = json.loads
    with fh:
        for lineno, raw in enumerate(fh, start=1):
            try:
                obj = loads(raw.decode("utf-8"))
            except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
                obj = _parse_line(path, lineno, raw)
                if obj is _BLANK:
                    continue
            if type(obj) is not dict:
                raise DataError(path, f"line {lineno}", f"expected a JSON object, got {json_type(obj)}")
            yield lineno, obj


_BLANK = object()


def _parse_line(path: Path, lineno: int, raw: bytes) -> Any:
    """The failure path of `iter_jsonl`: skip a blank line (`_BLANK`), accept a byte-order mark
    on line 1, else raise the `DataError` for bytes that are not UTF-8 (with the file offset) or
    for broken JSON."""
    bom = len(_BOM) if lineno == 1 and raw.startswith(_BOM) else 0
    raw = raw[bom:]
    if not raw.strip():
        return _BLANK
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        with path.open("rb") as fh:  # offset of this line: the bytes of the lines before it
            start = sum(len(fh.readline()) for _ in range(lineno - 1))
        raise DataError(path, f"line {lineno}", _not_utf8(path, raw, exc, start + bom).problem) from None
    return parse_json(path, line, f"line {lineno}")


def read_text(path: str | Path, missing: str = "file not found") -> str:
    """A whole UTF-8 text file (a leading byte-order mark dropped); a missing file, a folder or
    bytes that are not UTF-8 are a `DataError` naming the file (and the byte offset)."""
    path = Path(path)
    _check_readable(path, missing)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DataError(path, "", f"cannot read ({exc.strerror or exc})") from None
    skip = len(_BOM) if data.startswith(_BOM) else 0
    try:
        return data[skip:].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _not_utf8(path, data[skip:], exc, skip) from None


def read_json(path: str | Path, missing: str = "file not found") -> Any:
    """Parse a whole JSON file. A missing file (with ``missing`` as the hint), a folder, bytes
    that are not UTF-8 and broken JSON are each a `DataError` naming the file."""
    path = Path(path)
    return parse_json(path, read_text(path, missing))


def kind_name(kind: type | tuple[type, ...]) -> str:
    """What a field must be, in JSON words: ``kind_name((str, int))`` -> ``'a string or a number'``."""
    names = {str: "a string", list: "a list", dict: "an object", int: "a number", float: "a number", bool: "true/false"}
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(dict.fromkeys(names.get(k, k.__name__) for k in kinds))


def json_type(value: Any) -> str:
    """JSON's own name for a parsed value's type (users read JSON, not Python)."""
    names = {dict: "an object", list: "a list", str: "a string", bool: "true/false", type(None): "null"}
    for kind, name in names.items():
        if type(value) is kind:
            return name
    return "a number"


def write_jsonl(path: str | Path, rows: Iterable[dict[str, Any]]) -> int:
    """Write rows atomically (temp file, fsync, rename) so a crash never leaves half a file; a
    failure while writing (a bad row, a full disk) removes the temp file and leaves ``path`` as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    n = 0
    try:
        with tmp.open("w", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
                n += 1
            fh.flush()
            os.fsync(fh.fileno())
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return n


def load_records(path: str | Path) -> list[QARecord]:
    """Read a prepared ``records.jsonl``; a repeated id is an error naming both lines (predictions
    and p_i rows are matched to records by id, so two records with one id would pair wrongly)."""
    lines = [(n, QARecord.from_dict(row, path=path, where=f"line {n}")) for n, row in iter_jsonl(path)]
    check_unique_ids(path, ((rec.id, f"line {n}") for n, rec in lines), "record id")
    return [rec for _, rec in lines]


def load_corpus(path: str | Path) -> list[Passage]:
    """Read a prepared ``corpus.jsonl``; duplicate ids are an error."""
    lines = [(n, Passage.from_dict(row, path=path, where=f"line {n}")) for n, row in iter_jsonl(path)]
    check_unique_ids(path, ((p.id, f"line {n}") for n, p in lines), "passage id")
    return [p for _, p in lines]


def capability_value(path: str | Path, where: str, value: Any, field: str = "p") -> float:
    """A record's capability p_i, which must be a number in [0, 1]; anything else is a `DataError` naming the
    file, the position and ``field``.

    >>> capability_value("p.jsonl", "line 3", "high")
    Traceback (most recent call last):
    ...
    awarl.errors.DataError: p.jsonl, line 3, field 'p': capability must be a number in [0, 1], got 'high'
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise DataError(path, where, f"capability must be a number in [0, 1], got {value!r}", field)
    return float(value)


def check_unique_ids(path: str | Path, ids: Iterable[tuple[str, str]], what: str = "id") -> None:
    """Refuse an id that appears twice (see `UniqueIds`); ``ids`` are ``(id, where)`` pairs such as
    ``("q1", "line 3")``.

    >>> check_unique_ids("r.jsonl", [("a", "line 1"), ("a", "line 2")], "record id")
    Traceback (most recent call last):
    ...
    awarl.errors.DataError: r.jsonl, line 2, field 'id': duplicate record id 'a' (first on line 1)
    """
    unique = UniqueIds(path, what)
    for key, where in ids:
        unique.add(key, where)


class UniqueIds:
    """The one duplicate-id check: records, passages and output rows are matched by id, so an id met
    again is a `DataError` naming both places. ``add`` as the rows are read; ``problem`` words a
    check of its own (an id allowed twice under a rule) and ``path`` names the file of the repeat
    when the ids come from several files.

    >>> ids = UniqueIds("hotpot.json", field="_id")
    >>> ids.add("a", "example 1 (index 0)")
    >>> ids.add("a", "example 2 (index 1)")
    Traceback (most recent call last):
    ...
    awarl.errors.DataError: hotpot.json, example 2 (index 1), field '_id': duplicate id 'a' (first at example 1 (index 0))
    """

    def __init__(self, path: str | Path, what: str = "id", field: str = "id"):
        self.path, self.what, self.field = path, what, field
        self.seen: dict[Any, str] = {}

    def add(self, key: Any, where: str, *, problem: str | None = None, path: str | Path | None = None) -> None:
        first = self.seen.get(key)
        if first is None:
            self.seen[key] = where
            return
        problem = problem or f"duplicate {self.what} {key!r}"
        at = "on" if first.startswith("line ") else "at"
        raise DataError(path or self.path, where, f"{problem} (first {at} {first})", self.field)


# -- resumable JSONL: append whole rows, cut a torn tail on restart --------------------------------------

def append_rows(sink: Any, rows: list[dict[str, Any]]) -> None:
    """Write whole rows, then flush and sync, so a crash loses at most the query in progress."""
    sink.write("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
    sink.flush()
    os.fsync(sink.fileno())


def append_log_row(path: Path, row: dict[str, Any]) -> None:
    """Append one row to a progress log (a training run's metrics, the probe's rounds), creating its
    folder; after a row torn by a kill the new row starts a line of its own, so it is not lost with it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+b") as sink:
        end = sink.seek(0, os.SEEK_END)
        if end and (sink.seek(end - 1), sink.read(1))[1] != b"\n":
            sink.write(b"\n")
        sink.write((json.dumps(row) + "\n").encode("utf-8"))


def read_log_rows(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a progress log in the order written; no file is no rows. A line that is not JSON (a
    row torn by a kill) is left out: a progress log records what happened, it is no input."""
    path = Path(path)
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


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
