"""Index folders: the ``awarl_index.json`` that says what an index is, and `load_index`.

Every index folder holds ``awarl_index.json`` (kind, format version, passage count, the
settings it was built with) next to the passage store (`awarl.search.store`) and the
kind's own files (``bm25s/`` for BM25, ``faiss.index`` + ``embeddings.npy`` for dense).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from awarl.data.records import DataError, read_json
from awarl.search.retriever import Retriever

META_FILE = "awarl_index.json"
FORMAT_VERSION = 1
KINDS = ("bm25", "dense")


def write_meta(out_dir: Path, kind: str, passages: int, settings: dict[str, Any]) -> None:
    meta = {"kind": kind, "format": FORMAT_VERSION, "passages": passages, "settings": settings}
    (out_dir / META_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")


def read_meta(index_dir: str | Path, expect_kind: str | None = None) -> dict[str, Any]:
    """The checked ``awarl_index.json`` of an index folder."""
    path = Path(index_dir) / META_FILE
    meta = read_json(path, "not an awarl index folder (build one with `awarl index build --corpus … --out …`)")
    if meta.get("format") != FORMAT_VERSION:
        raise DataError(path, "-", f"index format {meta.get('format')!r}, this awarl reads {FORMAT_VERSION}; rebuild it", "format")
    if meta.get("kind") not in KINDS:
        raise DataError(path, "-", f"unknown index kind {meta.get('kind')!r}; expected one of {', '.join(KINDS)}", "kind")
    if expect_kind is not None and meta["kind"] != expect_kind:
        raise DataError(path, "-", f"index kind is {meta['kind']!r}, expected {expect_kind!r}", "kind")
    return meta


def load_index(index_dir: str | Path, mmap: bool = True, **options: Any) -> Retriever:
    """Open any saved index folder. ``options`` go to the kind's loader (e.g. ``encoder`` for dense)."""
    kind = read_meta(index_dir)["kind"]
    if kind == "bm25":
        from awarl.search.bm25 import BM25Index

        return BM25Index.load(index_dir, mmap=mmap, **options)
    from awarl.search.dense import DenseIndex

    return DenseIndex.load(index_dir, mmap=mmap, **options)
