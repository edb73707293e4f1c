"""Passage storage inside an index folder: text memory-mapped, ids in memory.

An index folder holds ``passages.jsonl`` (one passage per line, in index row order),
``passages.offsets.npy`` (byte offset of every line, plus the end) and ``passages.ids.json``.
Loading reads only the ids; a passage's text is read from the mapped file when it is asked for,
so a large corpus opens in well under a second and shares pages between processes.
"""

from __future__ import annotations

import json
import mmap
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from awarl.data.records import DataError, Passage
from awarl.search.retriever import UnknownPassageError

PASSAGES_FILE = "passages.jsonl"
OFFSETS_FILE = "passages.offsets.npy"
IDS_FILE = "passages.ids.json"


class PassageStore:
    """Row-addressable passages with an id -> row map. Reads are thread-safe (no shared cursor)."""

    def __init__(self, ids: list[str], rows: Sequence[Passage] | None = None, mapped: tuple[mmap.mmap, np.ndarray] | None = None):
        self.ids = ids
        self.row_of: dict[str, int] = {pid: i for i, pid in enumerate(ids)}
        if len(self.row_of) != len(ids):
            dup = next(pid for i, pid in enumerate(ids) if self.row_of[pid] != i)
            raise ValueError(f"duplicate passage id {dup!r}")
        self._rows = list(rows) if rows is not None else None
        self._mapped = mapped

    @classmethod
    def from_passages(cls, passages: Sequence[Passage]) -> "PassageStore":
        return cls([p.id for p in passages], rows=passages)

    def __len__(self) -> int:
        return len(self.ids)

    def row(self, i: int) -> Passage:
        if self._rows is not None:
            return self._rows[i]
        mm, offsets = self._mapped
        obj = json.loads(mm[int(offsets[i]) : int(offsets[i + 1])])
        return Passage(obj["id"], obj.get("title", ""), obj["text"])

    def get(self, pid: str) -> Passage:
        try:
            return self.row(self.row_of[pid])
        except KeyError:
            raise UnknownPassageError(pid) from None

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
        offsets = [0]
        with (out_dir / PASSAGES_FILE).open("wb") as fh:
            for i in range(len(self)):
                line = (json.dumps(self.row(i).to_dict(), ensure_ascii=False) + "\n").encode("utf-8")
                fh.write(line)
                offsets.append(offsets[-1] + len(line))
        np.save(out_dir / OFFSETS_FILE, np.asarray(offsets, dtype=np.int64))
        (out_dir / IDS_FILE).write_text(json.dumps(self.ids), encoding="utf-8")

    @classmethod
    def load(cls, index_dir: Path, mmap_text: bool = True) -> "PassageStore":
        for name in (PASSAGES_FILE, OFFSETS_FILE, IDS_FILE):
            if not (index_dir / name).exists():
                raise DataError(index_dir / name, "-", "missing index file (rebuild the index with `awarl index build`)")
        ids = json.loads((index_dir / IDS_FILE).read_text(encoding="utf-8"))
        offsets = np.load(index_dir / OFFSETS_FILE)
        if len(offsets) != len(ids) + 1:
            raise DataError(index_dir / OFFSETS_FILE, "-", f"{len(offsets) - 1} offsets for {len(ids)} ids; the index is damaged")
        with (index_dir / PASSAGES_FILE).open("rb") as fh:
            mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) if offsets[-1] > 0 else None
        if mm is not None and len(mm) != int(offsets[-1]):
            raise DataError(index_dir / PASSAGES_FILE, "-", "size does not match its offsets; the index is damaged")
        store = cls(ids, mapped=(mm, offsets))
        if not mmap_text:
            store._rows = [store.row(i) for i in range(len(ids))]
            store._mapped = None
        return store
