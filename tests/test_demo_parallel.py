"""`awarl.demo.parallel`: a stage's jobs in spawned worker processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from awarl.capability.shards import parse_shard
from awarl.demo.parallel import Job, run_jobs, threads_per_worker
from awarl.errors import ConfigError


def test_jobs_come_back_by_name_from_workers_with_their_share_of_threads(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    jobs = [Job("pid", os.getpid), Job("cwd", os.getcwd), Job("threads", os.getenv, {"key": "OMP_NUM_THREADS"}),
            Job("shard", parse_shard, {"text": "1/4"})]
    results = run_jobs(jobs, workers=2)
    assert set(results) == {"pid", "cwd", "threads", "shard"}
    assert results["pid"] != os.getpid()  # ran in another process
    assert results["cwd"] == str(tmp_path)  # the demo's folder
    assert results["threads"] == str(threads_per_worker(2))
    assert results["shard"] == (1, 4)


def test_one_worker_runs_every_job_here():
    results = run_jobs([Job("a", os.getpid), Job("b", os.getpid)], workers=1)
    assert results == {"a": os.getpid(), "b": os.getpid()}


def test_a_failed_job_raises_its_own_error_naming_the_job():
    jobs = [Job("fine", parse_shard, {"text": "0/2"}), Job("bad shard", parse_shard, {"text": "5/2"})]
    with pytest.raises(ConfigError, match="0 <= i < n") as caught:
        run_jobs(jobs, workers=2)
    assert any("bad shard" in note for note in caught.value.__notes__)


_ORPHAN = """
import functools, time
from awarl.demo.parallel import Job, run_jobs
run_jobs([Job("a", functools.partial(time.sleep, 600)), Job("b", functools.partial(time.sleep, 600))], workers=2)
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads /proc (Linux)")
def test_workers_end_when_the_demo_is_killed(tmp_path):
    """A demo killed outright (SIGKILL: no handler runs) while its workers run their jobs leaves no worker behind."""
    parent = subprocess.Popen([sys.executable, "-c", _ORPHAN], cwd=tmp_path)
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # both workers started and inside their job (torch imported first)
            workers = [pid for pid in _children(parent.pid) if b"spawn_main" in _read(f"/proc/{pid}/cmdline")]
            if len(workers) == 2 and all(b"torch" in _read(f"/proc/{pid}/maps") for pid in workers):
                break
            time.sleep(0.2)
        assert len(workers) == 2, "the workers did not start"
        time.sleep(1.0)
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        deadline = time.monotonic() + 10
        while any(_running(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [pid for pid in workers if _running(pid)], "a worker outlived the demo"
    finally:
        for pid in [parent.pid, *workers]:
            if _running(pid):
                os.kill(pid, signal.SIGKILL)


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def _stat(pid: int) -> list[bytes]:
    """The fields of /proc/<pid>/stat after the command name: state, parent pid, … (empty once it is gone)."""
    text = _read(f"/proc/{pid}/stat")
    return text[text.rfind(b")") + 2:].split() if text else []


def _children(pid: int) -> list[int]:
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit() and _stat(int(entry))[1:2] == [str(pid).encode()]]


def _running(pid: int) -> bool:
    """Alive and not a zombie (a zombie has ended; it waits only for its new parent to reap it)."""
    state = _stat(pid)[:1]
    return bool(state) and state != [b"Z"]
