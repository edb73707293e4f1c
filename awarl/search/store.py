"""Passage storage inside an index folder: text and id lookup memory-mapped, nothing per passage
held in Python objects.

An index folder holds ``passages.jsonl`` (one passage per line, in index row order, each line
starting with its id), ``passages.offsets.npy`` (byte offset of every line, plus the end), and an
id lookup table: ``passages.idhash.npy`` (a 64-bit hash of every id, sorted) with
``passages.idrow.npy`` (the row of each). An id is found by binary search over the hashes and
confirmed against the start of its line, so a 21M-passage store opens in milliseconds and every
server worker shares the same pages instead of building its own id dictionary (about 100 bytes
per passage).

`PassageWriter` writes a store one passage at a time, so building never holds the corpus.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import tempfile
from array import array
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from awarl.data.records import DataError, Passage
from awarl.search.retriever import UnknownPassageError

PASSAGES_FILE = "passages.jsonl"
OFFSETS_FILE = "passages.offsets.npy"
IDHASH_FILE = "passages.idhash.npy"
IDROW_FILE = "passages.idrow.npy"
PASSAGES_SHA_FILE = "passages.sha256.json"
"""The SHA-256 of `PASSAGES_FILE` and its size, written with it, so `awarl.eval.stats.fingerprint` need not read
a large store on every evaluation."""


def id_hash(pid: str) -> int:
    return int.from_bytes(hashlib.blake2b(pid.encode("utf-8"), digest_size=8).digest(), "little")


def passage_line(p: Passage, errors: str = "strict") -> bytes:
    """A passage as the store writes it: one JSON line (its bytes are what `awarl.eval.stats.fingerprint` hashes;
    it passes ``errors="surrogatepass"`` so a lone surrogate escaped in a corpus hashes instead of failing)."""
    return (json.dumps(p.to_dict(), ensure_ascii=False) + "\n").encode("utf-8", errors)


def _id_prefix(pid: str) -> bytes:
    """How the line of passage ``pid`` starts (`Passage.to_dict` puts the id first)."""
    return ('{"id": ' + json.dumps(pid, ensure_ascii=False) + ",").encode("utf-8")


class _MappedIds:
    """id -> row over the sorted hash table, confirmed against the passage line."""

    def __init__(self, hashes: np.ndarray, rows: np.ndarray, mm: mmap.mmap | None, offsets: np.ndarray):
        self._hashes, self._rows, self._mm, self._offsets = hashes, rows, mm, offsets

    def get(self, pid: str, default: int | None = None) -> int | None:
        if not isinstance(pid, str) or self._mm is None:
            return default
        h = np.uint64(id_hash(pid))
        i = int(np.searchsorted(self._hashes, h))
        prefix = _id_prefix(pid)
        while i < len(self._hashes) and self._hashes[i] == h:
            row = int(self._rows[i])
            start = int(self._offsets[row])
            if self._mm[start : start + len(prefix)] == prefix:
                return row
            i += 1
        return default

    def __contains__(self, pid: object) -> bool:
        return isinstance(pid, str) and self.get(pid) is not None

    def __getitem__(self, pid: str) -> int:
        row = self.get(pid)
        if row is None:
            raise KeyError(pid)
        return row

    def __len__(self) -> int:
        return len(self._hashes)


class PassageStore:
    """Row-addressable passages with an id -> row map (`row_of`). Reads are thread-safe (no
    shared cursor) and fork-safe (read-only mappings)."""

    def __init__(self, ids: list[str] | None = None, rows: Sequence[Passage] | None = None,
                 mapped: tuple[mmap.mmap | None, np.ndarray] | None = None, row_of: _MappedIds | None = None,
                 source: str | Path = "the corpus"):
        if row_of is None:
            ids = list(ids or [])
            lookup = {pid: i for i, pid in enumerate(ids)}
            if len(lookup) != len(ids):
                later = next(i for i, pid in enumerate(ids) if lookup[pid] != i)
                first = ids.index(ids[later])
                raise DataError(source, f"passage {later + 1}", f"duplicate passage id {ids[later]!r} (passages "
                                f"{first + 1} and {later + 1})", "id")
            self.row_of: dict[str, int] | _MappedIds = lookup
            self._size = len(ids)
        else:
            self.row_of = row_of
            self._size = len(row_of)
        self._rows = list(rows) if rows is not None else None
        self._mapped = mapped

    @classmethod
    def from_passages(cls, passages: Sequence[Passage], source: str | Path = "the corpus") -> "PassageStore":
        """An in-memory store; a repeated id is a `DataError` naming ``source`` (the corpus file)."""
        return cls([p.id for p in passages], rows=passages, source=source)

    def __len__(self) -> int:
        return self._size

    @property
    def ids(self) -> list[str]:
        """Every id in row order (reads the whole store when it is memory-mapped)."""
        return [self.row(i).id for i in range(len(self))]

    def row(self, i: int) -> Passage:
        if self._rows is not None:
            return self._rows[i]
        mm, offsets = self._mapped
        start, end = offsets[i : i + 2].tolist()
        obj = json.loads(mm[start:end])
        return Passage(obj["id"], obj.get("title", ""), obj["text"])

    def get(self, pid: str) -> Passage:
        row = self.row_of.get(pid)
        if row is None:
            raise UnknownPassageError(pid)
        return self.row(row)

    def rows_for(self, pids: Sequence[str]) -> np.ndarray:
        """Index rows of ``pids`` (unknown ids are an error; repeats are dropped)."""
        rows = []
        for pid in pids:
            row = self.row_of.get(pid)
            if row is None:
                raise UnknownPassageError(pid)
            rows.append(row)
        return np.unique(np.asarray(rows, dtype=np.int64))

    def save(self, out_dir: Path) -> None:
        with PassageWriter(out_dir) as writer:
            for i in range(len(self)):
                writer.add(self.row(i))

    @classmethod
    def load(cls, index_dir: Path, mmap_text: bool = True) -> "PassageStore":
        from awarl.search.postings import load_array

        index_dir = Path(index_dir)
        for name in (PASSAGES_FILE, OFFSETS_FILE, IDHASH_FILE, IDROW_FILE):
            if not (index_dir / name).exists():
                raise DataError(index_dir / name, "-", "missing index file (rebuild the index with `awarl index build`)")
        # a plain ndarray view of the map: np.memmap's Python-level indexing costs ~5 us a call
        offsets = np.asarray(load_array(index_dir / OFFSETS_FILE))
        with (index_dir / PASSAGES_FILE).open("rb") as fh:
            mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) if offsets[-1] > 0 else None
        if (len(mm) if mm is not None else 0) != int(offsets[-1]):
            raise DataError(index_dir / PASSAGES_FILE, "-", "size does not match its offsets; the index is damaged")
        hashes = np.asarray(load_array(index_dir / IDHASH_FILE))
        rows = np.asarray(load_array(index_dir / IDROW_FILE))
        if len(hashes) != len(rows) or len(offsets) != len(hashes) + 1:
            raise DataError(index_dir / IDHASH_FILE, "-", f"{len(hashes)} id hashes, {len(rows)} rows and "
                            f"{len(offsets) - 1} offsets disagree; the index is damaged")
        store = cls(mapped=(mm, offsets), row_of=_MappedIds(hashes, rows, mm, offsets))
        if not mmap_text:
            store._rows = [store.row(i) for i in range(len(store))]
        return store


class PassageWriter:
    """Writes a store passage by passage; memory stays at 16 bytes per passage (hash + row, for the
    final sort of the id table) whatever the text size. Duplicate ids are an error at `close`,
    naming ``source`` (the corpus file)."""

    def __init__(self, out_dir: Path, source: str | Path = "the corpus"):
        self.out_dir, self.source = Path(out_dir), source
        self._fh = (self.out_dir / PASSAGES_FILE).open("wb")
        self._spill = tempfile.TemporaryFile(dir=self.out_dir)  # offsets, 8 bytes each, off the heap
        self._buf = array("q", [0])
        self._hashes = array("Q")
        self._pos = 0
        self._digest = hashlib.sha256()
        self.count = 0

    def __enter__(self) -> "PassageWriter":
        return self

    def __exit__(self, exc_type, *exc: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self._fh.close()
            self._spill.close()

    def add(self, p: Passage) -> None:
        line = passage_line(p)
        self._fh.write(line)
        self._digest.update(line)
        self._pos += len(line)
        self._buf.append(self._pos)
        self._hashes.append(id_hash(p.id))
        self.count += 1
        if len(self._buf) >= 1 << 16:
            self._buf.tofile(self._spill)
            self._buf = array("q")

    def add_all(self, passages: Iterable[Passage]) -> None:
        for p in passages:
            self.add(p)

    def close(self) -> None:
        self._fh.close()
        (self.out_dir / PASSAGES_SHA_FILE).write_text(
            json.dumps({"sha256": self._digest.hexdigest(), "bytes": self._pos}) + "\n", encoding="utf-8")
        self._buf.tofile(self._spill)
        self._spill.flush()
        self._spill.seek(0)
        offsets = np.lib.format.open_memmap(self.out_dir / OFFSETS_FILE, mode="w+", dtype=np.int64, shape=(self.count + 1,))
        offsets[:] = np.fromfile(self._spill, dtype=np.int64, count=self.count + 1)
        offsets.flush()
        self._spill.close()
        hashes = np.frombuffer(self._hashes, dtype=np.uint64)
        order = np.argsort(hashes, kind="stable")
        sorted_hashes = hashes[order]
        self._check_unique(sorted_hashes, order, offsets)
        np.save(self.out_dir / IDHASH_FILE, sorted_hashes)
        np.save(self.out_dir / IDROW_FILE, order.astype(np.int64))
        del offsets
        self._hashes = array("Q")

    def _check_unique(self, hashes: np.ndarray, order: np.ndarray, offsets: np.ndarray) -> None:
        same = np.flatnonzero(hashes[1:] == hashes[:-1])
        if not len(same):
            return
        with (self.out_dir / PASSAGES_FILE).open("rb") as fh:
            def pid(row: int) -> str:
                fh.seek(int(offsets[row]))
                return json.loads(fh.read(int(offsets[row + 1] - offsets[row])))["id"]

            for i in same:
                a, b = sorted((int(order[i]), int(order[i + 1])))
                if pid(a) == pid(b):
                    raise DataError(self.source, f"passage {b + 1}", f"duplicate passage id {pid(a)!r} (passages "
                                    f"{a + 1} and {b + 1})", "id")

