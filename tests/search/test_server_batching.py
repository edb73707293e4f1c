"""The retrieval server's batch order: the smallest requests first, so a one-query request never
waits behind the slices of a large one, and a job passed over too often goes first (no starvation).
Timing is measured in scripts/bench_search_fairness.py, not here."""

from __future__ import annotations

import asyncio

from awarl.search.server import ServerSettings, _Batcher, _Job


def _job(loop, n, request_size, seq):
    return _Job([f"q{seq}-{i}" for i in range(n)], 5, None, loop.create_future(), request_size=request_size, seq=seq)


def _batcher(*jobs):
    batcher = _Batcher(retriever=None, settings=ServerSettings(max_batch=64))
    batcher.pending = list(jobs)
    return batcher


def test_a_small_request_goes_before_the_next_slice_of_a_large_one():
    loop = asyncio.new_event_loop()
    try:
        big, small = _job(loop, 64, 1000, 1), _job(loop, 1, 1, 2)
        batcher = _batcher(big, small)
        assert batcher.take() == [small]  # 1 + 64 queries exceed max_batch: the slice waits
        assert batcher.take() == [big] and batcher.pending == []
    finally:
        loop.close()


def test_small_requests_share_a_batch_up_to_max_batch():
    loop = asyncio.new_event_loop()
    try:
        jobs = [_job(loop, 1, 1, i) for i in range(70)]
        batcher = _batcher(*jobs)
        assert batcher.take() == jobs[:64] and batcher.pending == jobs[64:]
    finally:
        loop.close()


def test_a_large_job_passed_over_enough_times_goes_first():
    loop = asyncio.new_event_loop()
    try:
        big = _job(loop, 64, 1000, 0)
        batcher = _batcher(big)
        seq = 1
        for _ in range(_Batcher.PATIENCE):  # a steady stream of small requests
            batcher.pending.append(_job(loop, 1, 1, seq))
            seq += 1
            assert big not in batcher.take()
        batcher.pending.append(_job(loop, 1, 1, seq))
        assert batcher.take()[0] is big
    finally:
        loop.close()
