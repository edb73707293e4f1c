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
import os, sys, time
from awarl.demo.parallel import Job, run_jobs
run_jobs([Job("a", time.sleep, {"secs": 600}), Job("b", time.sleep, {"secs": 600})], workers=2)
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/cmdline"), reason="reads /proc (Linux)")
def test_workers_end_when_the_demo_is_killed(tmp_path):
    """A demo killed outright (SIGKILL: no handler runs) leaves no worker behind."""
    parent = subprocess.Popen([sys.executable, "-c", _ORPHAN], cwd=tmp_path)
    try:
        workers: list[int] = []
        deadline = time.monotonic() + 60
        while len(workers) < 2 and time.monotonic() < deadline:  # both workers started and running a job
            time.sleep(0.2)
            out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(parent.pid)], capture_output=True, text=True).stdout
            workers = [int(pid) for pid in out.split() if b"spawn_main" in _cmdline(int(pid))]
        assert len(workers) == 2, "the workers did not start"
        time.sleep(1.0)
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        deadline = time.monotonic() + 10
        alive = workers
        while alive and time.monotonic() < deadline:
            time.sleep(0.2)
            alive = [pid for pid in workers if _alive(pid)]
        assert not alive, f"workers {alive} outlived the demo"
    finally:
        if parent.poll() is None:
            parent.kill()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = open(f"/proc/{pid}/stat").read() if os.path.exists(f"/proc/{pid}/stat") else ""
    return " Z " not in stat  # a zombie has ended; it waits only for its new parent to reap it


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""
