"""Replace an output folder as a whole: build the new one beside it, then swap it in.

`rename` cannot replace a non-empty folder, so the swap is two renames and a clean-up::

    OUT -> .OUT.awarl-old        (skipped when OUT does not exist)
    .OUT.awarl-new -> OUT
    delete .OUT.awarl-old

A reader of ``OUT`` sees the old folder or the new one, never a mix, and a crash can stop between
any two steps. `recover`, run at the start of the next write to ``OUT``, finishes or undoes it:

======================================  ==============================  =======================
left behind                             meaning                         recovery
======================================  ==============================  =======================
``.awarl-new`` (``OUT`` as before)      crashed while building          delete ``.awarl-new``
``.awarl-old`` + ``.awarl-new``, no OUT  crashed between the renames     finish: rename, delete
``.awarl-old`` + ``OUT``                crashed before the clean-up     delete ``.awarl-old``
======================================  ==============================  =======================

``.awarl-new`` is renamed only once it is complete (every file written and synced), so finishing a
swap from it never publishes half a folder. A lock file ``.OUT.awarl-lock`` keeps two processes
from building the same folder at once (each would otherwise delete the other's work as a leftover).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from collections.abc import Collection, Iterator
from pathlib import Path

from awarl.data.records import DataError

log = logging.getLogger(__name__)


def _sibling(out: Path, kind: str) -> Path:
    return out.with_name(f".{out.name}.awarl-{kind}")


def _fsync_dir(folder: Path) -> None:
    """Make renames and new entries in ``folder`` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def recover(out: str | Path) -> None:
    """Finish or undo a swap into ``out`` that a crash interrupted (see the module docstring)."""
    out = Path(out)
    new, old = _sibling(out, "new"), _sibling(out, "old")
    if old.exists():
        if not out.exists() and new.exists():
            os.rename(new, out)
            log.warning("%s: finished replacing it (an earlier run stopped between two renames)", out)
        elif not out.exists():
            os.rename(old, out)  # nothing newer to publish: put the old folder back
            log.warning("%s: restored the previous folder (an earlier run stopped mid-replacement)", out)
            return
        shutil.rmtree(old)
        _fsync_dir(out.parent)
    if new.exists():
        shutil.rmtree(new)
        log.warning("%s: removed an unfinished replacement left by an interrupted run", out)


def check_target(out: Path, *, force: bool, owned: Collection[str] | None) -> None:
    """``out`` must be absent, an empty folder, or (with ``force``) a folder holding only ``owned``
    names; anything else would be overwritten silently or lost, so it is refused."""
    if out.exists() and not out.is_dir():
        raise DataError(out, "", "is a file; the output must be a folder")
    if not out.is_dir():
        return
    entries = sorted(p.name for p in out.iterdir())
    if not entries:
        return
    if not force:
        shown = ", ".join(entries[:5]) + (" …" if len(entries) > 5 else "")
        raise DataError(out, "", f"already holds {shown}; pass --force to replace the folder, or choose another output")
    foreign = [name for name in entries if owned is not None and name not in owned]
    if foreign:
        shown = ", ".join(foreign[:5]) + (" …" if len(foreign) > 5 else "")
        raise DataError(out, "", f"also holds {shown}, which --force would delete with the folder; "
                                 "move it away or choose another output")


@contextlib.contextmanager
def _locked(out: Path) -> Iterator[None]:
    """An exclusive, non-blocking lock on ``.OUT.awarl-lock`` for the whole build and swap.

    The lock file is removed on release; a process that locked a file just unlinked by the
    previous holder sees that its inode is no longer the one on disk and backs off, so two
    writers never both hold the lock.
    """
    try:
        import fcntl
    except ImportError:  # no flock (Windows): single-writer use is the caller's responsibility
        yield
        return
    lock = _sibling(out, "lock")
    busy = DataError(out, "", "another process is writing this folder right now; wait for it to finish")
    try:
        fh = lock.open("a")
    except OSError as exc:
        raise DataError(out.parent, "", f"cannot write here ({exc.strerror or exc})") from None
    with fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise busy from None
        try:
            if os.fstat(fh.fileno()).st_ino != os.stat(lock).st_ino:
                raise busy
        except FileNotFoundError:
            raise busy from None
        try:
            yield
        finally:
            lock.unlink(missing_ok=True)
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


@contextlib.contextmanager
def replace_folder(out: str | Path, *, force: bool = False, owned: Collection[str] | None = None) -> Iterator[Path]:
    """Yield an empty staging folder beside ``out``; when the block ends normally, swap it in as
    ``out`` (crash-safe, see the module docstring). When the block raises, the staging folder is
    removed and ``out`` is left exactly as it was.

    ``out`` must be absent or empty unless ``force``; with ``force`` it may hold only the names in
    ``owned`` (``None``: anything), so a mistaken ``--out`` never deletes unrelated files.
    """
    out = Path(out)
    if out.is_symlink() or out.name in ("", ".", ".."):
        out = out.resolve()  # replace what a link points at (the link stays); name "." and ".."
    cwd = Path.cwd().resolve()
    if out.resolve() == cwd or out.resolve() in cwd.parents:
        raise DataError(out, "", "is the current folder or holds it; choose an output folder below it")
    if out.exists() and not out.is_dir():
        check_target(out, force=force, owned=owned)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DataError(out.parent, "", f"cannot create the output's parent folder ({exc.strerror or exc})") from None
    with _locked(out):
        recover(out)
        check_target(out, force=force, owned=owned)
        staging = _sibling(out, "new")
        staging.mkdir()
        try:
            yield staging
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        _fsync_dir(staging)
        _swap_in(out)


def _swap_in(out: Path) -> None:
    """The two renames and the clean-up; each step leaves a state `recover` understands."""
    staging, old = _sibling(out, "new"), _sibling(out, "old")
    if out.exists():
        os.rename(out, old)
        _fsync_dir(out.parent)
    os.rename(staging, out)
    _fsync_dir(out.parent)
    if old.exists():
        shutil.rmtree(old)
