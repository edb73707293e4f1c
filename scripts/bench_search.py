"""Benchmark awarl's search stack on a corpus of >= 100k passages, with same-run baselines.

The corpus repeats the shipped samples' real passages (HotpotQA, 2Wiki, MuSiQue) with
perturbation (words dropped and swapped per copy, a fresh id each), so term statistics look
like wiki text and every passage is distinct. Queries are the samples' questions.

Measured:
  1. BM25 index build: seconds and memory growth; index size on disk; mmap load time.
  2. Global search, batches of 1 / 32 / 256 queries: queries/s and p50/p95 batch latency for
     awarl's MaxScore scorer (default) and its exhaustive scorer (the reference), for bm25s's own
     ``retrieve`` on the same index, and per-query time of
     rank_bm25 (BM25Okapi) on the same corpus and tokens (a subset of queries: it is slow).
  3. Closed scope (each query restricted to its 10 passages): awarl's posting binary search
     against bm25s ``weight_mask`` and against scoring the corpus then filtering.
  4. The HTTP server (``awarl search serve`` in its own process) under concurrent clients on
     127.0.0.1: requests/s, p50/p95 latency, errors; micro-batching on vs off, 1 vs 2 workers.

Usage: python scripts/bench_search.py [--passages 100000] [--json results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "data" / "samples"


def rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


# -- corpus ----------------------------------------------------------------------------------------
def load_samples():
    from awarl.data.adapters import load_dataset_file

    files = [("hotpotqa", "hotpotqa_dev_distractor_sample.json"), ("2wiki", "2wikimultihopqa_dev_sample.json"),
             ("musique", "musique_ans_dev_sample.jsonl"), ("musique", "musique_full_train_sample.jsonl")]
    records, passages, seen = [], [], set()
    for dataset, name in files:
        recs, ps = load_dataset_file(dataset, SAMPLES / name)
        records += recs
        for p in ps:
            if p.id not in seen:
                seen.add(p.id)
                passages.append(p)
    return records, passages


def perturbed_corpus(base, n: int, seed: int = 0):
    """``n`` passages: copy c of base passage i drops ~15% of its words and swaps ~5% for words
    drawn from the whole sample vocabulary. Copy 0 is the original passage."""
    from awarl.data.records import Passage

    rng = random.Random(seed)
    vocab = [w for p in base for w in p.text.split()]
    out = []
    for j in range(n):
        p = base[j % len(base)]
        copy = j // len(base)
        if copy == 0:
            out.append(p)
            continue
        words = [w for w in p.text.split() if rng.random() > 0.15]
        words = [rng.choice(vocab) if rng.random() < 0.05 else w for w in words] or [rng.choice(vocab)]
        out.append(Passage(f"{p.id}-{copy}", p.title, " ".join(words)))
    return out


# -- benchmarks -------------------------------------------------------------------------------------
def bench_build(passages, workdir: Path) -> tuple[object, dict]:
    from awarl.search.bm25 import BM25Index

    rss0 = rss_mb()
    t0 = time.perf_counter()
    index = BM25Index.build(passages)
    build_s = time.perf_counter() - t0
    grew = rss_mb() - rss0
    peak = peak_rss_mb()
    t0 = time.perf_counter()
    out = index.save(workdir / "bm25")
    save_s = time.perf_counter() - t0
    disk_mb = sum(f.stat().st_size for f in out.rglob("*") if f.is_file()) / 2**20
    t0 = time.perf_counter()
    loaded = BM25Index.load(out, mmap=True)
    load_s = time.perf_counter() - t0
    return loaded, {"passages": len(passages), "build_s": build_s, "rss_growth_mb": grew, "peak_rss_mb": peak,
                    "save_s": save_s, "disk_mb": disk_mb, "mmap_load_s": load_s, "index_dir": str(out)}


def time_batches(fn, queries: list[str], batch: int, min_batches: int = 3, min_seconds: float = 2.0) -> dict:
    """Run ``fn(batch_of_queries)`` over consecutive batches until both minimums are met."""
    lat, done, start, i = [], 0, time.perf_counter(), 0
    while len(lat) < min_batches or time.perf_counter() - start < min_seconds:
        qs = [queries[(i + j) % len(queries)] for j in range(batch)]
        i += batch
        t0 = time.perf_counter()
        fn(qs)
        lat.append(time.perf_counter() - t0)
        done += batch
        if len(lat) >= 200:
            break
    total = sum(lat)
    return {"batch": batch, "qps": done / total, "p50_ms": pct(lat, 50) * 1e3, "p95_ms": pct(lat, 95) * 1e3, "batches": len(lat)}


def _bm25s_model(index_dir: str):
    import bm25s

    return bm25s.BM25.load(Path(index_dir) / "bm25s", mmap=True, load_corpus=False, show_progress=False)


def bench_global(index, index_dir: str, queries: list[str], rank_queries: int) -> list[dict]:
    model = _bm25s_model(index_dir)
    terms = lambda qs: [index.tokenizer.terms(q) or [""] for q in qs]  # noqa: E731

    def scorer(name):
        def call(qs):
            index.scorer = name
            index.search(qs, 10)
        return call

    rows = []
    for batch in (1, 32, 256):
        ours = time_batches(scorer("maxscore"), queries, batch)
        exhaustive = time_batches(scorer("exhaustive"), queries, batch)
        base = time_batches(lambda qs: model.retrieve(terms(qs), k=10, show_progress=False, n_threads=1), queries, batch)
        rows.append({"batch": batch, "awarl": ours, "awarl_exhaustive": exhaustive, "bm25s_retrieve": base})
    index.scorer = "maxscore"
    return rows


def bench_rank_bm25(passages, index, queries: list[str], n_queries: int) -> dict:
    """rank_bm25.BM25Okapi on the same tokens (bm25s tokenizer, stemmed, stop words removed)."""
    import bm25s
    from rank_bm25 import BM25Okapi

    texts = [f"{p.title} {p.text}" if p.title else p.text for p in passages]
    tokens = [index.tokenizer.terms(t) for t in texts]
    t0 = time.perf_counter()
    okapi = BM25Okapi(tokens)
    build_s = time.perf_counter() - t0
    q_tokens = [index.tokenizer.terms(q) for q in queries[:n_queries]]
    lat = []
    for q in q_tokens:
        t0 = time.perf_counter()
        scores = okapi.get_scores(q)
        np.argpartition(-scores, 10)[:10]
        lat.append(time.perf_counter() - t0)
    return {"build_s": build_s, "queries": len(lat), "per_query_ms": statistics.mean(lat) * 1e3,
            "p50_ms": pct(lat, 50) * 1e3, "p95_ms": pct(lat, 95) * 1e3}


def bench_closed(index, index_dir: str, records, n: int = 200) -> dict:
    from awarl.search.scoring import best_of

    recs = [r for r in records if r.passages][:n]
    queries, allowed = [r.question for r in recs], [r.passages for r in recs]
    out = {}
    t0 = time.perf_counter()
    index.search(queries, 5, allowed=allowed)
    out["awarl_binary_search_ms"] = (time.perf_counter() - t0) / len(recs) * 1e3

    t0 = time.perf_counter()
    for q, ids in zip(queries, allowed):
        scores = index._score_all(index._query_token_ids([q])[0])
        rows = index.store.rows_for(ids)
        best_of(rows, scores[rows], 5)
    out["score_all_then_filter_ms"] = (time.perf_counter() - t0) / len(recs) * 1e3

    model = _bm25s_model(index_dir)
    sub = list(zip(queries, allowed))[:50]
    t0 = time.perf_counter()
    for q, ids in sub:
        mask = np.zeros(len(index), dtype=np.float32)
        mask[index.store.rows_for(ids)] = 1
        model.retrieve([index.tokenizer.terms(q) or [""]], k=5, weight_mask=mask, show_progress=False)
    out["bm25s_weight_mask_ms"] = (time.perf_counter() - t0) / len(sub) * 1e3
    out["queries"] = len(recs)
    return out


def bench_server(index_dir: str, queries: list[str], requests: int, concurrency: int, max_batch: int, workers: int = 1) -> dict:
    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "awarl.cli", "search", "serve", "--index", index_dir, "--port", str(port),
           "--log-level", "warning", "--max-batch", str(max_batch), "--workers", str(workers)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"server did not start: {proc.stderr.read().decode()[-2000:]}")
                time.sleep(0.2)
        lat: list[float] = []
        errors: list[str] = []
        lock = threading.Lock()
        counter = iter(range(requests))

        def worker() -> None:
            with httpx.Client(base_url=url, timeout=60) as http:
                for i in counter:
                    body = {"queries": [queries[i % len(queries)]], "topk": 3, "return_scores": True}
                    t0 = time.perf_counter()
                    try:
                        resp = http.post("/retrieve", json=body)
                        ok = resp.status_code == 200 and len(resp.json()["result"]) == 1
                        err = None if ok else f"HTTP {resp.status_code}"
                    except httpx.HTTPError as exc:
                        err = type(exc).__name__
                    with lock:
                        lat.append(time.perf_counter() - t0)
                        if err:
                            errors.append(err)

        threads = [threading.Thread(target=worker) for _ in range(concurrency)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        batches = httpx.get(f"{url}/health", timeout=5).json()["batches"]
        return {"max_batch": max_batch, "workers": workers, "concurrency": concurrency, "requests": len(lat), "errors": len(errors),
                "rps": len(lat) / wall, "p50_ms": pct(lat, 50) * 1e3, "p95_ms": pct(lat, 95) * 1e3,
                "index_calls": batches}
    finally:
        proc.terminate()
        proc.wait(timeout=30)


# -- report -----------------------------------------------------------------------------------------
def report(res: dict) -> str:
    b = res["build"]
    lines = [
        f"corpus: {b['passages']:,} passages; queries: {res['n_queries']} sample questions",
        "",
        "| index | build s | RSS growth MB | peak RSS MB | on disk MB | save s | mmap load s |",
        "|---|---|---|---|---|---|---|",
        f"| awarl BM25 (bm25s) | {b['build_s']:.1f} | {b['rss_growth_mb']:.0f} | {b['peak_rss_mb']:.0f} | {b['disk_mb']:.0f} "
        f"| {b['save_s']:.1f} | {b['mmap_load_s']:.2f} |",
        f"| rank_bm25 BM25Okapi (same tokens) | {res['rank_bm25']['build_s']:.1f} | | | | | |",
        "",
        "| global search, top-10 | batch | awarl MaxScore q/s | p50 ms | p95 ms | awarl exhaustive q/s | p50 ms "
        "| bm25s.retrieve q/s | p50 ms | p95 ms | MaxScore / bm25s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in res["global"]:
        a, e, s = row["awarl"], row["awarl_exhaustive"], row["bm25s_retrieve"]
        lines.append(f"| | {row['batch']} | {a['qps']:.0f} | {a['p50_ms']:.1f} | {a['p95_ms']:.1f} | {e['qps']:.0f} | {e['p50_ms']:.1f} "
                     f"| {s['qps']:.0f} | {s['p50_ms']:.1f} | {s['p95_ms']:.1f} | {a['qps'] / s['qps']:.1f}x |")
    rb = res["rank_bm25"]
    per_q_awarl = 1e3 / res["global"][0]["awarl"]["qps"]
    lines += [
        "",
        f"rank_bm25 BM25Okapi.get_scores + top-10, {rb['queries']} queries: {rb['per_query_ms']:.0f} ms/query "
        f"(p50 {rb['p50_ms']:.0f}, p95 {rb['p95_ms']:.0f}); awarl batch 1: {per_q_awarl:.1f} ms/query "
        f"-> awarl is {rb['per_query_ms'] / per_q_awarl:.0f}x faster",
        "",
        "| closed scope (10 passages per query), top-5 | ms/query |",
        "|---|---|",
        f"| awarl posting binary search | {res['closed']['awarl_binary_search_ms']:.3f} |",
        f"| awarl score whole corpus, then filter | {res['closed']['score_all_then_filter_ms']:.2f} |",
        f"| bm25s retrieve with weight_mask | {res['closed']['bm25s_weight_mask_ms']:.2f} |",
        "",
        "| server (1 query per request) | workers | max batch | clients | requests | errors | req/s | p50 ms | p95 ms | index calls |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in res["server"]:
        label = "micro-batching" if s["max_batch"] > 1 else "no batching (baseline)"
        lines.append(f"| {label} | {s['workers']} | {s['max_batch']} | {s['concurrency']} | {s['requests']} | {s['errors']} | {s['rps']:.0f} "
                     f"| {s['p50_ms']:.1f} | {s['p95_ms']:.1f} | {s['index_calls']} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--passages", type=int, default=100_000, help="corpus size")
    ap.add_argument("--rank-bm25-queries", type=int, default=10, help="queries timed on rank_bm25 (slow)")
    ap.add_argument("--server-requests", type=int, default=2000, help="requests per server run")
    ap.add_argument("--concurrency", type=int, default=32, help="concurrent HTTP clients")
    ap.add_argument("--json", type=Path, default=None, help="also write the raw numbers here")
    args = ap.parse_args()

    records, base = load_samples()
    passages = perturbed_corpus(base, args.passages)
    queries = [r.question for r in records]
    print(f"{len(base)} sample passages -> {len(passages):,}; {len(queries)} queries; cpus={os.cpu_count()}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        index, build = bench_build(passages, Path(tmp))
        print(f"built in {build['build_s']:.1f}s", flush=True)
        res = {"n_queries": len(queries), "build": build}
        res["global"] = bench_global(index, build["index_dir"], queries, args.rank_bm25_queries)
        print("global search done", flush=True)
        res["closed"] = bench_closed(index, build["index_dir"], records)
        res["server"] = [bench_server(build["index_dir"], queries, args.server_requests, args.concurrency, mb, w)
                         for mb, w in ((256, 1), (1, 1), (256, 2))]
        print("server done", flush=True)
        res["rank_bm25"] = bench_rank_bm25(passages, index, queries, args.rank_bm25_queries)
    print()
    print(report(res))
    if args.json:
        args.json.write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
