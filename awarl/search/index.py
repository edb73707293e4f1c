"""`load_index`: open any saved index folder (BM25 or dense) by what its ``awarl_index.json`` says.

The folder format and its atomic replacement live in `awarl.search.folder`; this module only
dispatches, so the index kinds import the folder helpers and nothing imports back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from awarl.search.bm25 import BM25Index
from awarl.search.dense import DenseIndex
from awarl.search.folder import FORMAT_VERSION, KINDS, META_FILE, read_meta, resolve, write_meta
from awarl.search.retriever import Retriever

__all__ = ["FORMAT_VERSION", "KINDS", "META_FILE", "load_index", "read_meta", "write_meta"]


def load_index(index_dir: str | Path, mmap: bool = True, **options: Any) -> Retriever:
    """Open any saved index folder. ``options`` go to the kind's loader (e.g. ``encoder`` for
    dense, ``scorer`` for BM25)."""
    folder = resolve(index_dir)
    kind = read_meta(folder)["kind"]
    if kind == "bm25":
        return BM25Index.load(folder, mmap=mmap, **options)
    return DenseIndex.load(folder, mmap=mmap, **options)
