"""How long a small /retrieve request waits behind a large one, by the server's slice size.

A client sends one request of ``--big`` queries; ``--delay-ms`` later a second client sends one
query. Measured per setting (same index, same queries, same run): the small request's latency
(p50 / max over ``--repeats`` rounds) and the large request's total time, so the price of
fairness in throughput shows beside it. The baseline is a slice of 256 queries per index call.

The server answers a large request a slice (``max_batch`` queries) at a time and queues each
slice behind whatever arrived meanwhile, so the small request waits for at most the slice in
progress. The baseline row is the same server taking jobs first come, first served (a small job
then shares an index call with the large request's next slice), at a slice of 256.

Usage: python scripts/bench_search_fairness.py [--passages 100000] [--big 1000] [--slices 256,64]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_search import load_samples, perturbed_corpus  # noqa: E402  (a sibling script)


def fifo_take(self) -> list:
    """The baseline batch: the first pending job, then more in arrival order while the batch holds
    fewer than max_batch queries (so a small job and the large request's next slice share a call)."""
    chosen, size = [], 0
    for job in list(self.pending):
        if chosen and size >= self.settings.max_batch:
            break
        chosen.append(job)
        size += len(job.queries)
    self.pending = self.pending[len(chosen):]
    return chosen


def one_round(url: str, queries: list[str], big: int, delay_s: float) -> tuple[float, float]:
    """(small request's latency, large request's latency) in seconds."""
    big_q = [queries[i % len(queries)] for i in range(big)]
    result: dict[str, float] = {}

    def send_big() -> None:
        t0 = time.perf_counter()
        httpx.post(f"{url}/retrieve", json={"queries": big_q, "topk": 5}, timeout=600).raise_for_status()
        result["big"] = time.perf_counter() - t0

    thread = threading.Thread(target=send_big)
    thread.start()
    time.sleep(delay_s)
    t0 = time.perf_counter()
    httpx.post(f"{url}/retrieve", json={"queries": [queries[7]], "topk": 5}, timeout=600).raise_for_status()
    small = time.perf_counter() - t0
    thread.join()
    return small, result["big"]


def main() -> None:
    from awarl.search.bm25 import BM25Index
    from awarl.search.server import ServerSettings, background_server

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--passages", type=int, default=100_000)
    ap.add_argument("--big", type=int, default=1000, help="queries in the large request")
    ap.add_argument("--delay-ms", type=float, default=100.0, help="when the small request is sent")
    ap.add_argument("--slices", default="256,64", help="max_batch values to compare (smallest requests first)")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()

    records, base = load_samples()
    queries = [r.question for r in records]
    t0 = time.perf_counter()
    index = BM25Index.build(perturbed_corpus(base, args.passages))
    print(f"index: {args.passages:,} passages built in {time.perf_counter() - t0:.1f} s; "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}, {os.cpu_count()} CPUs")

    import awarl.search.server as server

    rows = []
    settings_list = [("first come, first served", 256)] + [("smallest first", int(x)) for x in args.slices.split(",")]
    for policy, slice_size in settings_list:
        settings = ServerSettings(max_batch=slice_size, max_queries=max(args.big, 1000))
        smallest_first = server._Batcher.take
        if policy.startswith("first"):
            server._Batcher.take = fifo_take
        try:
            with background_server(index, settings=settings) as url:
                one_round(url, queries, 50, 0.0)  # warm the server and the index pages
                smalls, bigs = [], []
                for _ in range(args.repeats):
                    small, big = one_round(url, queries, args.big, args.delay_ms / 1000)
                    smalls.append(small)
                    bigs.append(big)
        finally:
            server._Batcher.take = smallest_first
        rows.append((policy, slice_size, statistics.median(smalls), max(smalls), statistics.median(bigs)))

    base_small, base_big = rows[0][2], rows[0][4]
    print(f"\n1-query request sent {args.delay_ms:.0f} ms after a {args.big}-query one ({args.repeats} rounds)")
    print("| batch order | max_batch (slice) | small p50 (s) | small max (s) | vs baseline | large request (s) | vs baseline |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for policy, slice_size, small, small_max, big in rows:
        print(f"| {policy} | {slice_size} | {small:.3f} | {small_max:.3f} | {small / base_small:.2f}x | {big:.2f} | "
              f"{big / base_big:.2f}x |")


if __name__ == "__main__":
    main()
