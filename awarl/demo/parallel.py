"""The demo's independent jobs (p_i shards, GRPO arms, held-out evaluations) in several processes.

A tiny model does not keep two cores busy from one process: generation is a Python loop of small
matrix products, so a second thread adds little (docs/benchmarks.md, "demo workers"). ``awarl demo
--workers N`` runs up to N jobs of a stage at once instead, each in its own spawned process with
its share of the threads (``OMP_NUM_THREADS`` and ``torch.set_num_threads``), the working
directory of the demo and the demo's log as its stdout and stderr (inherited file descriptors).

A job is a top-level function and keyword arguments (both picklable). With one worker every job
runs in this process, one after another. A job that fails stops the stage: the others already
running finish, their outputs stay (every job resumes), and the first error is raised again in
this process, as its own type (so the CLI's exit codes hold), with a note naming the job. A worker
ends itself within a second of its parent ending by any means (a `kill`, a scheduler's SIGTERM, an
out-of-memory kill), so a killed demo leaves no job writing into its folder behind it, and a rerun
resumes alone.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Job:
    """One unit of a stage: ``func(**kwargs)`` in a worker; its return value comes back."""

    name: str
    func: Callable[..., Any]
    kwargs: dict[str, Any] = field(default_factory=dict)


def threads_per_worker(workers: int, cpus: int | None = None) -> int:
    """The threads each of ``workers`` processes gets: the machine's CPUs shared out, at least one.

    >>> threads_per_worker(2, cpus=2), threads_per_worker(2, cpus=8), threads_per_worker(4, cpus=2)
    (1, 4, 1)
    """
    cpus = cpus or os.cpu_count() or 1
    return max(1, cpus // max(1, workers))


def default_workers() -> int:
    """Two worker processes where there are two CPUs or more (what pays on a laptop: a third job of
    the same stage rarely exists), else one."""
    return 2 if (os.cpu_count() or 1) >= 2 else 1


def train_grpo(config: Any, folder: Path, resume: str | None, on_log: Any = None) -> None:
    """GRPO of one arm into ``folder``, its log rows appended to ``metrics_log.jsonl`` (a worker job)."""
    from awarl.train import grpo
    from awarl.train.callbacks import MetricsLog

    grpo.main(config, resume=resume, output_dir=str(folder),
              extra_callbacks=[MetricsLog(folder / "metrics_log.jsonl", on_log)])


def evaluate_metrics(config: Any) -> dict[str, Any]:
    """A held-out evaluation's metrics (a worker job)."""
    from awarl.eval.run import run_eval

    return run_eval(config, progress=False).metrics


def run_jobs(jobs: Sequence[Job], workers: int) -> dict[str, Any]:
    """Run ``jobs``, up to ``workers`` at once; returns each job's result by name."""
    if workers <= 1 or len(jobs) <= 1:
        return {job.name: job.func(**job.kwargs) for job in jobs}
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    threads = threads_per_worker(workers)
    context = multiprocessing.get_context("spawn")  # a fork would copy torch's thread pools and locks
    results: dict[str, Any] = {}
    with ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=context,
                             initializer=_start_worker, initargs=(threads, os.getcwd(), os.getpid())) as pool:
        futures = {pool.submit(_run, job.func, job.kwargs): job.name for job in jobs}
        failed: list[tuple[str, BaseException]] = []
        for future, name in futures.items():
            try:
                results[name] = future.result()
            except BaseException as exc:  # noqa: BLE001 - reported with the job's name below
                failed.append((name, exc))
                for other in futures:
                    other.cancel()  # jobs not started yet; the running ones finish and keep their output
        if failed:
            name, exc = failed[0]
            exc.add_note(f"in the demo's worker process for {name}")
            raise exc
    return results


def quiet_libraries() -> None:
    """Library warnings go to the log (through ``logging``), and nothing reaches the network."""
    import logging
    import warnings

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    logging.captureWarnings(True)
    warnings.simplefilter("default")


def _start_worker(threads: int, cwd: str, parent: int) -> None:
    os.environ["OMP_NUM_THREADS"] = str(threads)  # before torch is imported in this process
    os.chdir(cwd)
    quiet_libraries()
    end_with_parent(parent)


def end_with_parent(parent: int | None = None) -> None:
    """End this process (SIGTERM to itself) within a second of ``parent`` (default: the current parent)
    ending, by a thread that watches for it: a job must not outlive the command that started it, or a
    rerun would find it still writing the same checkpoints. The fidelity study's jobs use it too."""
    import threading

    parent = os.getppid() if parent is None else parent
    threading.Thread(target=_end_with, args=(parent,), name="awarl-parent-watch", daemon=True).start()


def _end_with(parent: int, every: float = 0.5) -> None:
    import signal
    import time

    while os.getppid() == parent:
        time.sleep(every)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(5.0)  # a library that catches SIGTERM gets a moment to stop, then the process ends regardless
    os._exit(143)


def _run(func: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    import torch

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    return func(**kwargs)
