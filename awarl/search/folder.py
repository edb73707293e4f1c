"""Index folders: the ``awarl_index.json`` that says what an index is, and the atomic swap that
replaces a folder without a reader ever seeing half of it.

Every index folder holds ``awarl_index.json`` (kind, format version, passage count, the settings
it was built with) next to the passage store (`awarl.search.store`) and the kind's own files.

Why a swap: a server memory-maps the files of its index. Rewriting them in place truncates pages
under the mapping (the server dies of SIGBUS), and a build killed half-way leaves neither the
old index nor the new one. So an index is always written into a fresh sibling folder and
swapped in whole by `awarl.data.folders.replace_folder` (the one crash-safe folder swap awarl
has: two renames, a lock, recovery at the next write). Files are never modified once written,
so a process that mapped the old files keeps reading the old, intact index until it reopens the
folder (deleted files live on while mapped). Readers never write: if a crash stopped a swap
between its renames, `resolve` points them at the complete folder.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

from awarl.data.records import DataError, read_json

SettingsT = TypeVar("SettingsT")

META_FILE = "awarl_index.json"
FORMAT_VERSION = 1
KINDS = ("bm25", "dense")


def write_meta(out_dir: Path, kind: str, passages: int, settings: dict[str, Any]) -> None:
    meta = {"kind": kind, "format": FORMAT_VERSION, "passages": passages, "settings": settings}
    (out_dir / META_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")


def read_meta(index_dir: str | Path, expect_kind: str | None = None) -> dict[str, Any]:
    """The checked ``awarl_index.json`` of an index folder (a `DataError` naming the file otherwise)."""
    path = Path(index_dir) / META_FILE
    meta = read_json(path, "not an awarl index folder (build one with `awarl index build --corpus … --out …`)")
    if not isinstance(meta, dict):
        raise DataError(path, "-", f"expected a JSON object, got {type(meta).__name__}; the index is damaged, rebuild it")
    if meta.get("format") != FORMAT_VERSION:
        raise DataError(path, "-", f"index format {meta.get('format')!r}, this awarl reads {FORMAT_VERSION}; rebuild it", "format")
    if meta.get("kind") not in KINDS:
        raise DataError(path, "-", f"unknown index kind {meta.get('kind')!r}; expected one of {', '.join(KINDS)}", "kind")
    if expect_kind is not None and meta["kind"] != expect_kind:
        raise DataError(path, "-", f"index kind is {meta['kind']!r}, expected {expect_kind!r}", "kind")
    if not isinstance(meta.get("settings"), dict):
        raise DataError(path, "-", "missing or malformed settings; the index is damaged, rebuild it", "settings")
    if not isinstance(meta.get("passages"), int) or isinstance(meta.get("passages"), bool) or meta["passages"] < 1:
        raise DataError(path, "-", f"bad passage count {meta.get('passages')!r}; the index is damaged, rebuild it", "passages")
    return meta


def read_index_meta(index_dir: Path, kind: str, settings_type: type[SettingsT]) -> tuple[dict[str, Any], SettingsT]:
    """The checked ``awarl_index.json`` of a ``kind`` index folder and the settings it records, built as
    ``settings_type`` (settings that type refuses are a `DataError` naming the file)."""
    meta = read_meta(index_dir, expect_kind=kind)
    try:
        settings = settings_type(**meta["settings"])
    except (TypeError, ValueError) as exc:
        raise DataError(index_dir / META_FILE, "-", f"bad settings: {exc}", "settings") from None
    return meta, settings


def check_passage_count(index_dir: Path, meta: dict[str, Any], stored: int) -> None:
    """The passage count the meta records must be the store's."""
    if meta["passages"] != stored:
        raise DataError(index_dir / META_FILE, "-", f"says {meta['passages']} passages, the store holds {stored}; "
                        "the index is damaged, rebuild it", "passages")


def _sibling(target: Path, kind: str) -> Path:
    return target.with_name(f".{target.name}.awarl-{kind}")  # `awarl.data.folders`' naming


def resolve(index_dir: str | Path) -> Path:
    """The folder to read for ``index_dir``: itself, or, when a swap was interrupted between its
    two renames (``.NAME.awarl-old`` exists, ``NAME`` does not), the complete new folder (it is
    renamed into place only once complete) or else the old one. Readers never repair; the next
    build does (`awarl.data.folders.recover`)."""
    index_dir = Path(index_dir)
    if index_dir.exists() or not _sibling(index_dir, "old").exists():
        return index_dir
    for kind in ("new", "old"):
        if (_sibling(index_dir, kind) / META_FILE).exists():
            return _sibling(index_dir, kind)
    return index_dir


def check_target(target: Path) -> None:
    """Refuse to replace something that is not an index folder (a typo must not delete data)."""
    target = Path(target)
    if target.exists() and not target.is_dir():
        raise DataError(target, "-", "exists and is a file; --out must be a folder")
    if target.is_dir() and any(target.iterdir()) and not (target / META_FILE).exists():
        raise DataError(target, "-", "exists, is not empty and is not an awarl index folder; refusing to replace it "
                        "(choose another --out or remove it)")


@contextlib.contextmanager
def staged(target: str | Path) -> Iterator[Path]:
    """Yield an empty folder to write a new index into; on success every file is synced and the
    folder replaces ``target`` atomically (`awarl.data.folders.replace_folder`: two renames, a
    lock against a second writer, crash recovery at the next write); on any error it is deleted
    and ``target`` is left as it was. Only an index folder (or an empty one) is ever replaced."""
    from awarl.data.folders import replace_folder

    target = Path(target)
    check_target(target)
    with replace_folder(target, force=True) as building:
        yield building
        _fsync_tree(building)


def _fsync_tree(folder: Path) -> None:
    for path in folder.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
