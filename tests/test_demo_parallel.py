"""`awarl.demo.parallel`: a stage's jobs in spawned worker processes."""

from __future__ import annotations

import os

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
