"""The resumable rollout stage shared by capability estimation and evaluation.

Both stages run the agent over records and append one row per record to a JSONL file as soon as
the record's rollouts finish (whole rows, flushed and synced: `awarl.data.records.append_rows`), so
an interrupted run restarts where it stopped. The stage here is that skeleton, once:

- `StageConfig`: the settings both stages share (model, data, out, the agent, retrieval, sampling);
- `OutputLock`: one writer per output: a second run on the same ``--out`` stops at once with a
  one-line error naming the process that holds it;
- `read_rows`: the rows already written (a torn last line cut off, a repeated id refused);
- `run_stage`: the records in chunks, each chunk's rollouts in one pass of the runner, rows appended
  as records finish, a progress bar over records.

Resume is aligned to whole chunks, so a resumed run writes exactly the rows an uninterrupted one
writes. Chunks are consecutive slices of the run's record list (``chunk`` records each); a chunk
runs whole, alone in the runner (its last conversations finish before the next chunk starts). Every
rollout samples from its own seeded stream (`awarl.agent.runner.rollout_seed`), so its tokens do not
depend on the batch; running a chunk exactly as the uninterrupted run did also keeps the batches,
and with them the last bits of the logits, the same. A chunk with a finished and an unfinished
record runs again whole; only the missing rows are written. The rows then match exactly when the
resumed run uses the same settings, ``max_concurrent`` and backend batch size.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from awarl.agent.settings import RolloutSettings
from awarl.data.records import DataError, QARecord, UniqueIds, append_rows, drop_torn_tail, iter_jsonl
from awarl.errors import ConfigError

CHUNK_POOLS = 4
"""A chunk holds about this many pool-fulls (``max_concurrent``) of rollouts: larger chunks keep the
pool full for longer (the pool drains at a chunk's end); smaller ones redo less after a crash."""


@dataclass
class StageConfig:
    """What capability estimation and evaluation share: the checkpoint, the records, the output, the
    agent, what it searches and how it samples."""

    model: str
    """Backend spec: PATH, hf:PATH, vllm:PATH or openai:URL#MODEL."""
    data: Path
    """The records to run (a prepared records.jsonl; evaluation also reads official files)."""
    out: Path
    """Where the rows go (a JSONL file or a run folder); resumed when it exists."""
    rollout: RolloutSettings = field(default_factory=RolloutSettings)
    """The agent: prompt, search tool, budgets, correctness metric (a recipe's ``rollout:`` section or the
    settings saved with the checkpoint); recorded with the output."""
    index: Path | None = None
    """Saved index folder to search."""
    corpus: Path | None = None
    """corpus.jsonl to index with BM25 (default: the one beside ``data``)."""
    retriever_url: str | None = None
    """A running `awarl search serve` to search instead."""
    temperature: float = 0.0
    """Sampling temperature; 0 is greedy."""
    max_concurrent: int = 64
    """Rollouts in flight at once."""
    seed: int = 0
    """Run seed: rollout k of record q samples from a stream seeded by (seed, q's id, k)."""
    backend_options: dict[str, Any] = field(default_factory=dict)
    """Extra `awarl.llm.spec.BackendOptions` (device, dtype, batch_size, tensor_parallel_size …)."""
    chunk: int | None = None
    """Records per chunk, the unit of resume (default: about 4 × max_concurrent rollouts' worth)."""

    def __post_init__(self) -> None:
        if self.max_concurrent < 1:
            raise ConfigError(f"max_concurrent must be >= 1, got {self.max_concurrent}")
        if self.temperature < 0:
            raise ConfigError(f"temperature must be >= 0, got {self.temperature}")
        if self.chunk is not None and self.chunk < 1:
            raise ConfigError(f"chunk must be >= 1, got {self.chunk}")

    def chunk_size(self, samples: int) -> int:
        """Records per chunk when each record has ``samples`` rollouts."""
        return self.chunk or max(1, CHUNK_POOLS * self.max_concurrent // samples)


class OutputLock:
    """An exclusive lock on an output (a JSONL file or a run folder), held while a run writes to it.

    The lock is ``flock`` (POSIX) on ``OUT.lock`` beside a file or ``OUT/.lock`` inside a folder,
    which records the holder's pid; the kernel releases it when the holder exits, however it exits,
    so a crashed run never blocks the next one. A second writer gets a `DataError` naming the holder.
    """

    def __init__(self, out: Path, *, folder: bool = False) -> None:
        self.out = Path(out)
        self.path = self.out / ".lock" if folder else self.out.with_name(self.out.name + ".lock")
        self._fd: int | None = None

    def __enter__(self) -> "OutputLock":
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise DataError(self.out, "-", f"another run (pid {holder}) is writing here; wait for it to finish or "
                            "write to another --out") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = None


def read_rows(path: Path, key: str, check: Callable[[int, dict[str, Any]], None] | None = None) -> dict[str, dict[str, Any]]:
    """Rows already written to ``path``, by ``row[key]``. A broken last line (a crash mid-write) is cut
    off; a broken line anywhere else, a row without ``key``, or a repeated id is an error; ``check(lineno,
    row)`` may refuse a row (e.g. one written under other settings)."""
    if not path.exists():
        return {}
    drop_torn_tail(path)
    rows: dict[str, dict[str, Any]] = {}
    unique = UniqueIds(path, field=key)
    for lineno, row in iter_jsonl(path):
        if key not in row:
            raise DataError(path, f"line {lineno}", "missing required field", key)
        unique.add(row[key], f"line {lineno}", problem=f"id {row[key]!r} appears twice (this file mixes two runs)")
        if check is not None:
            check(lineno, row)
        rows[row[key]] = row
    return rows


def chunks(records: Sequence[QARecord], size: int) -> list[Sequence[QARecord]]:
    """Consecutive slices of ``size`` records (the last may be shorter).

    >>> [len(c) for c in chunks(list(range(5)), 2)]
    [2, 2, 1]
    """
    return [records[i : i + size] for i in range(0, len(records), size)]


@dataclass
class StageRun:
    """What one `run_stage` call did."""

    written: int
    """Records whose rows this run wrote."""
    rollouts: int
    """Rollouts of those records."""
    seconds: float


RowOf = Callable[[QARecord, list[Any]], dict[str, Any]]
"""Builds a record's output row from its trajectories (sorted by sample)."""


def run_stage(config: StageConfig, records: Sequence[QARecord], out: Path, *, done: Container[str], samples: int,
              row_of: RowOf, retriever: Any, backend: Any = None, trajectories: Path | None = None,
              label: str, unit: str, progress: bool = True) -> StageRun:
    """Run ``samples`` rollouts of every record not in ``done`` and append its row to ``out``
    (and each trajectory to ``trajectories``), chunk by chunk; see the module's notes on resume."""
    from awarl.agent.runner import Rollout
    from awarl.agent.setup import build_runner
    from awarl.progress import progress_bar

    todo = [r for r in records if r.id not in done]
    if not todo:
        return StageRun(0, 0, 0.0)
    if backend is None:
        from awarl.llm.spec import load_backend

        backend = load_backend(config.model, seed=config.seed, **config.backend_options)
    runner = build_runner(backend, retriever, config.rollout, temperature=config.temperature, seed=config.seed,
                          max_concurrent=config.max_concurrent)
    pending: dict[str, list[Any]] = {}
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with out.open("a", encoding="utf-8") as sink, _optional_sink(trajectories) as traj_sink, \
            progress_bar(label, len(todo), unit, rate_unit="rollouts", enabled=progress) as bar:
        by_id = {r.id: r for r in todo}

        def on_done(traj: Any) -> None:
            if traj.record_id not in by_id:  # a finished record of a chunk that runs again: already written
                return
            bar.count()
            group = pending.setdefault(traj.record_id, [])
            group.append(traj)
            if len(group) < samples:
                return
            group.sort(key=lambda t: t.sample)
            if traj_sink is not None:
                append_rows(traj_sink, [t.to_dict() for t in group])
            append_rows(sink, [row_of(by_id[traj.record_id], group)])
            del pending[traj.record_id]
            bar.advance()

        for chunk in chunks(records, config.chunk_size(samples)):
            if all(r.id in done for r in chunk):
                continue
            runner.run([Rollout(r, s) for r in chunk for s in range(samples)], on_done=on_done)
    return StageRun(len(todo), len(todo) * samples, time.perf_counter() - t0)


class _optional_sink:
    """``open(path, "a")`` when a path is given, else a context yielding None."""

    def __init__(self, path: Path | None) -> None:
        self.path, self.fh = path, None

    def __enter__(self) -> Any:
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.fh = self.path.open("a", encoding="utf-8")
        return self.fh

    def __exit__(self, *exc: object) -> None:
        if self.fh is not None:
            self.fh.close()
