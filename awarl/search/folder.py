"""Index folders: the ``awarl_index.json`` that says what an index is, and the atomic swap that
replaces a folder without a reader ever seeing half of it.

Every index folder holds ``awarl_index.json`` (kind, format version, passage count, the settings
it was built with) next to the passage store (`awarl.search.store`) and the kind's own files.

Why a swap: a server memory-maps the files of its index. Rewriting them in place truncates pages
under the mapping (the server dies of SIGBUS), and a build killed half-way leaves neither the
old index nor the new one. So an index is always written into a fresh sibling folder
(``.NAME.building-PID``), marked complete by renaming it to ``.NAME.new``, and swapped in with two
renames (``NAME`` -> ``.NAME.old``, ``.NAME.new`` -> ``NAME``); the old folder is deleted last.
Files are never modified once written, so a process that mapped the old files keeps reading the
old, intact index until it reopens the folder (deleted files live on while mapped).

A crash can stop the swap between its two renames. Readers never write: if ``NAME`` is missing
they read the complete ``.NAME.new`` (or, before it was made, ``.NAME.old``). The next writer
finishes or undoes the interrupted swap (`recover`) before it starts.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from awarl.data.records import DataError, read_json

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


def _sibling(target: Path, tag: str) -> Path:
    return target.with_name(f".{target.name}.{tag}")


def resolve(index_dir: str | Path) -> Path:
    """The folder to read for ``index_dir``: itself, or the complete side folder of a swap that
    was interrupted between its two renames (readers never repair; the next build does)."""
    index_dir = Path(index_dir)
    if index_dir.exists():
        return index_dir
    for tag in ("new", "old"):
        side = _sibling(index_dir, tag)
        if (side / META_FILE).exists():
            return side
    return index_dir


def recover(target: Path) -> None:
    """Finish or undo a swap a crash interrupted, and delete abandoned build folders."""
    new, old = _sibling(target, "new"), _sibling(target, "old")
    if not target.exists():
        if (new / META_FILE).exists():
            new.rename(target)
        elif (old / META_FILE).exists():
            old.rename(target)
    for side in (new, old):
        if side.exists() and target.exists():
            shutil.rmtree(side, ignore_errors=True)
    for stale in target.parent.glob(f".{target.name}.building-*"):
        pid = stale.name.rsplit("-", 1)[-1]
        if not (pid.isdigit() and _alive(int(pid))):
            shutil.rmtree(stale, ignore_errors=True)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def check_target(target: Path) -> None:
    """Refuse to replace something that is not an index folder (a typo must not delete data)."""
    if target.exists() and not target.is_dir():
        raise DataError(target, "-", "exists and is a file; --out must be a folder")
    if target.is_dir() and any(target.iterdir()) and not (target / META_FILE).exists():
        raise DataError(target, "-", "exists, is not empty and is not an awarl index folder; refusing to replace it "
                        "(choose another --out or remove it)")


@contextlib.contextmanager
def staged(target: str | Path) -> Iterator[Path]:
    """Yield an empty folder to write a new index into; on success it replaces ``target``
    atomically, on any error it is deleted and ``target`` is left as it was."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    check_target(target)
    recover(target)
    building = _sibling(target, f"building-{os.getpid()}")
    shutil.rmtree(building, ignore_errors=True)
    building.mkdir()
    try:
        yield building
        _fsync_tree(building)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    swap_in(building, target)


def swap_in(complete: Path, target: Path) -> None:
    """Make the complete folder ``complete`` the new ``target`` (two renames, see the module doc)."""
    new, old = _sibling(target, "new"), _sibling(target, "old")
    shutil.rmtree(new, ignore_errors=True)
    complete.rename(new)  # from here on the new index is complete and findable
    _fsync_dir(target.parent)
    if target.exists():
        shutil.rmtree(old, ignore_errors=True)
        target.rename(old)
    new.rename(target)
    _fsync_dir(target.parent)
    shutil.rmtree(old, ignore_errors=True)  # a server that mapped the old files keeps them alive


def _fsync_tree(folder: Path) -> None:
    for path in folder.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    for sub in [folder, *(p for p in folder.rglob("*") if p.is_dir())]:
        _fsync_dir(sub)


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
