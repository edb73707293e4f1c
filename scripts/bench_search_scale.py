"""How BM25 search cost grows with the corpus: awarl (block-max) vs MaxScore without blocks vs
the exhaustive scorer vs bm25s vs Pyserini (Lucene).

A synthetic corpus stands in for wiki-18 (21M passages of ~100 words): passages of 60-140 words
drawn from a Zipf-Mandelbrot vocabulary (p(rank) ~ (rank + 50)^-1.7 over 3M possible words:
about 110k distinct terms at 100k passages, 400k at 1M, 1.3M at 10M; the most common word is
1.4% of all words, like a frequent non-stop word). Queries are words taken from random
passages, so every query matches something. Two query sets: "question" queries take the
passage's 1-2 rarest words (as a question names its entities) plus 2-5 others; "uniform"
queries take 3-8 words uniformly, hence mostly frequent ones, the hard case for any pruning.
For each size: streaming build (time, peak memory of the build process, disk), memory of a
loaded index, and p50/p95 latency and queries/s at top-10 for batch 1 and 32, for awarl's
default scorer (MaxScore with block-max pruning), the same without block bounds (the previous
scorer), the exhaustive scorer and bm25s's own retrieve, all in this one run, taking turns
batch by batch; and awarl's default scorer alone first (its own loop over queries it has not
seen, as Pyserini is timed). Pyserini (Lucene BM25) is indexed and timed right after them in its own
process (`scripts/bench_search_pyserini.py`; its CPU time counts every JVM thread), on the same
queries. awarl and Pyserini are both warmed first with the same 2,000 queries of other passages,
so each starts timing with the index pages it reads in the page cache. A log-log fit of p50 against corpus size
extrapolates to 21M passages.

    python scripts/bench_search_scale.py --sizes 100k,1M --queries 300
    python scripts/bench_search_scale.py --sizes 100k,1M,3M,10M --time-cap-min 90   # big, run late

Corpora and indexes are cached under --work (default work/bench-scale); sizes that would start
after --time-cap-min are skipped and listed; an index reused from before block bounds existed
gets them added (timed). Pyserini runs only when it is installed with a Java 21 runtime
(skipped with the reason printed otherwise); docs/search.md says how to set it up.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


VOCAB_SIZE = 3_000_000
ZIPF_S = 1.7
ZIPF_Q = 50  # Zipf-Mandelbrot offset: flattens the head, as removing stop words does
TARGET_N = 21_000_000  # wiki-18


def parse_size(text: str) -> int:
    text = text.strip().lower()
    mult = {"k": 1_000, "m": 1_000_000}.get(text[-1], 1)
    return int(float(text[:-1] if text[-1] in "km" else text) * mult)


def word(i: int) -> str:
    """A pronounceable-enough pseudo-word per rank (letters only; stemming leaves most alone)."""
    letters = "bcdfghjklmnpqrstvwxz"
    vowels = "aeiou"
    out = []
    i += 1
    while i:
        i, r = divmod(i, 100)
        out.append(letters[r % 20] + vowels[r // 20])
    return "".join(out) + "n"


def write_corpus(path: Path, n: int, seed: int = 0) -> None:
    """Stream ``n`` passages to ``path`` (JSONL), 20k at a time."""
    rng = np.random.default_rng(seed)
    ranks = np.arange(1, VOCAB_SIZE + 1, dtype=np.float64)
    cdf = np.cumsum((ranks + ZIPF_Q) ** -ZIPF_S)
    cdf /= cdf[-1]
    names: dict[int, str] = {}
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        for start in range(0, n, 20_000):
            m = min(20_000, n - start)
            lengths = rng.integers(60, 141, size=m)
            ids = np.searchsorted(cdf, rng.random(int(lengths.sum())))
            for w in np.unique(ids):
                if int(w) not in names:
                    names[int(w)] = word(int(w))
            words = [names[int(w)] for w in ids]
            pos = 0
            lines = []
            for j, ln in enumerate(lengths):
                text = " ".join(words[pos : pos + ln])
                pos += ln
                lines.append(json.dumps({"id": f"p{start + j}", "title": words[pos - ln].title(), "text": text}))
            fh.write("\n".join(lines) + "\n")
    tmp.replace(path)


def rank(w: str) -> int:
    """The vocabulary rank `word` encoded (0 = most frequent)."""
    letters, vowels = "bcdfghjklmnpqrstvwxz", "aeiou"
    body = w.lower()[:-1]
    value = sum((letters.index(body[j]) + 20 * vowels.index(body[j + 1])) * 100 ** (j // 2) for j in range(0, len(body), 2))
    return value - 1


def sample_queries(corpus: Path, n_passages: int, count: int, kind: str = "question", seed: int = 1) -> list[str]:
    """Queries made from random passages. ``uniform``: 3-8 of the passage's words drawn
    uniformly (mostly frequent words: the hard case for pruning). ``question``: the passage's 1-2
    rarest words (as a question names its entities) plus 2-5 words drawn uniformly."""
    rng = np.random.default_rng(seed)
    wanted = set(rng.choice(n_passages, size=count, replace=False).tolist())
    out = []
    with corpus.open(encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            if i in wanted:
                words = json.loads(line)["text"].split()
                if kind == "uniform":
                    pick = sorted(rng.choice(len(words), size=int(rng.integers(3, 9)), replace=False).tolist())
                else:
                    by_rarity = sorted(range(len(words)), key=lambda j: -rank(words[j]))
                    rare = by_rarity[: int(rng.integers(1, 3))]
                    rest = [j for j in range(len(words)) if j not in rare]
                    pick = sorted(rare + rng.choice(rest, size=int(rng.integers(2, 6)), replace=False).tolist())
                out.append(" ".join(words[p] for p in pick))
    rng.shuffle(out)
    return out


# --- build in a child process, so its peak memory is its own ----------------------------------

def _anon_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1])
    return 0


def build_child(corpus: str, out: str) -> None:
    from awarl.data.records import Passage, iter_jsonl
    from awarl.search.bm25 import BM25Index

    peak = [0]
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], _anon_kb())
            time.sleep(0.05)

    threading.Thread(target=watch, daemon=True).start()
    t0 = time.perf_counter()
    n = BM25Index.build_folder((Passage.from_dict(row) for _, row in iter_jsonl(corpus)), out)
    seconds = time.perf_counter() - t0
    stop.set()
    peak[0] = max(peak[0], _anon_kb())
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"passages": n, "seconds": seconds, "peak_anon_mb": peak[0] / 1024, "peak_rss_mb": maxrss / 1024}))


def build(corpus: Path, out: Path) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--build-child", str(corpus), str(out)], capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    if proc.returncode:
        raise SystemExit(f"build of {corpus} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def disk_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20


def memory_mb() -> tuple[float, float]:
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(("RssAnon:", "RssFile:")):
            key, val = line.split(":")
            fields[key] = int(val.split()[0]) / 1024
    return fields.get("RssAnon", 0.0), fields.get("RssFile", 0.0)


WARMUP = 2000  # queries run before timing, by awarl and by Pyserini alike


def warm_queries(corpus: Path, n: int) -> list[str]:
    """Queries of other passages than the timed ones (another seed), 300 of each kind."""
    return sample_queries(corpus, n, 300, "question", seed=2) + sample_queries(corpus, n, 300, "uniform", seed=2)


# --- timing ------------------------------------------------------------------------------------

def time_systems(systems: dict, queries: list[str], batch: int, budget_s: float) -> dict:
    """Per-call latency of every system on the same batches, the systems taking turns batch by
    batch (each going first equally often), so a load spike on the shared machine hits them alike. Wall time and this process's
    CPU time are both kept: on a machine shared with other jobs the CPU time is the steadier."""
    wall: dict[str, list[float]] = {name: [] for name in systems}
    cpu: dict[str, list[float]] = {name: [] for name in systems}
    done, spent = 0, 0.0
    names = list(systems)
    for i in range(0, len(queries), batch):
        qs = queries[i : i + batch]
        turn = (i // batch) % len(names)  # rotate who goes first: the first to touch a query's postings warms the CPU caches for the rest
        for name in names[turn:] + names[:turn]:
            fn = systems[name]
            t0, c0 = time.perf_counter(), time.process_time()
            fn(qs)
            wall[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
            spent += wall[name][-1]
        done += len(qs)
        if spent > budget_s * len(systems) and len(wall[name]) >= 5:
            break
    out = {}
    for name in systems:
        w, c = np.asarray(wall[name]) * 1000, np.asarray(cpu[name]) * 1000
        out[name] = {"p50_ms": float(np.percentile(w, 50)), "p95_ms": float(np.percentile(w, 95)), "qps": done / (w.sum() / 1000),
                     "cpu_p50_ms": float(np.percentile(c, 50)), "cpu_p95_ms": float(np.percentile(c, 95)),
                     "cpu_qps": done / (c.sum() / 1000), "calls": len(w), "queries": done}
    return out


def bench_size(n: int, args: argparse.Namespace, rows: list[dict]) -> None:
    from awarl.search.bm25 import BM25Index

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    corpus = work / f"corpus-{n}.jsonl"
    if not corpus.exists():
        t0 = time.perf_counter()
        write_corpus(corpus, n)
        print(f"  corpus {n:,}: written in {time.perf_counter() - t0:.0f}s", flush=True)
    out = work / f"bm25-{n}"
    stats = work / f"build-{n}.json"
    if args.reuse and stats.exists() and (out / "awarl_index.json").exists():
        built = json.loads(stats.read_text())
        print(f"  reusing the index built earlier ({stats})", flush=True)
    else:
        built = build(corpus, out)
        stats.write_text(json.dumps(built))
    print(f"  build {n:,}: {built['seconds']:.1f}s, peak anon {built['peak_anon_mb']:.0f} MB, peak RSS {built['peak_rss_mb']:.0f} MB",
          flush=True)
    query_sets = {kind: sample_queries(corpus, n, args.queries, kind) for kind in ("question", "uniform")}
    queries = query_sets["question"]
    anon0, file0 = memory_mb()
    index = BM25Index.load(out)
    vocab = len(index.postings.vocab)
    index.search(queries[:20], 10)  # page in what the queries touch
    anon1, file1 = memory_mb()
    row = {"n": n, "vocab": vocab, "build_s": built["seconds"], "build_peak_anon_mb": built["peak_anon_mb"],
           "build_peak_rss_mb": built["peak_rss_mb"], "disk_mb": disk_mb(out), "load_anon_mb": anon1 - anon0,
           "load_file_mb": file1 - file0, "corpus_mb": corpus.stat().st_size / 2**20,
           "blocks_mb": sum(p.stat().st_size for p in (out / "bm25s").glob("blockmax*")) / 2**20}
    tokenizer = index.tokenizer
    blocks = index.postings.blocks

    def run(scorer: str, with_blocks: bool = True):
        def call(qs):
            index.scorer = scorer
            index.postings.blocks = blocks if with_blocks else None
            index.search(qs, 10)
        return call

    systems = {"blockmax": run("maxscore"), "maxscore": run("maxscore", with_blocks=False), "exhaustive": run("exhaustive")}
    if n <= args.bm25s_max:
        import bm25s

        model = bm25s.BM25.load(out / "bm25s", mmap=True, load_corpus=False, show_progress=False)
        systems["bm25s"] = lambda qs: model.retrieve([tokenizer.terms(q) or ["zzzz"] for q in qs], k=10, show_progress=False,
                                                     n_threads=1)
    # Warm-up, the same for awarl as for Pyserini: 2,000 queries cycled from other passages' queries
    # (300 of each kind), so the timed queries start from the same page-cache state for both (at
    # 10M passages, after a warm-up of only 50 queries awarl alone read postings from disk: 10.4 ms
    # CPU p50 on question-like queries, against 3.8 ms for the same scorer later in the run).
    warm_all = warm_queries(corpus, n)
    for i in range(0, WARMUP, 32):
        systems["blockmax"](warm_all[i % len(warm_all):][:32])
    for kind, qs in query_sets.items():
        warm = sample_queries(corpus, n, 50, kind, seed=2)
        for fn in systems.values():  # every system once: page in what it alone reads, settle the allocator
            fn(warm)
        # awarl alone first, as Pyserini is timed (its own loop, queries not seen before, no
        # other system between two queries to evict its data from the CPU caches)
        for batch in (1, 32):
            res = time_systems({"alone": systems["blockmax"]}, qs, batch, args.budget_s)["alone"]
            row[f"alone_b{batch}" + ("" if kind == "question" else "_uniform")] = res
            _print_result(n, kind, "alone", batch, res)
        for batch in (1, 32):
            results = time_systems(systems, qs, batch, args.budget_s)
            for name, res in results.items():
                row[f"{name}_b{batch}" + ("" if kind == "question" else "_uniform")] = res
                _print_result(n, kind, name, batch, res)
    index.postings.blocks = blocks
    if args.pyserini:
        bench_pyserini(n, corpus, work, query_sets, index, args, row)
    rows.append(row)
    del index


def _print_result(n: int, kind: str, name: str, batch: int, res: dict) -> None:
    print(f"  {n:>10,} {kind:<8} {name:<10} batch {batch:>2}: CPU p50 {res['cpu_p50_ms']:8.2f} ms  "
          f"p95 {res['cpu_p95_ms']:8.2f} ms  {res['cpu_qps']:7.1f} q/s | wall p50 {res['p50_ms']:8.2f} ms  "
          f"{res['qps']:7.1f} q/s", flush=True)


def bench_pyserini(n: int, corpus: Path, work: Path, query_sets: dict, index, args: argparse.Namespace, row: dict) -> None:
    """Lucene index of the same corpus (built once, timed, under the same load), then its
    top-10 timed in a child process on the same queries; the share of its top-10 ids that
    awarl's top-10 also holds is reported (the analyzers differ: Lucene's English stemmer and
    stop words are not bm25s's, so the lists are close, not equal)."""
    import bench_search_pyserini as pys

    lucene = work / f"lucene-{n}"
    stats = work / f"lucene-build-{n}.json"
    if args.reuse and stats.exists() and any(lucene.glob("segments_*")):
        built = json.loads(stats.read_text())
        print(f"  reusing the Lucene index built earlier ({stats})", flush=True)
    else:
        built = pys.index(corpus, lucene)
        stats.write_text(json.dumps(built))
    print(f"  Lucene build {n:,}: {built['seconds']:.1f}s wall, {built['cpu_s']:.1f}s CPU, {built['disk_mb']:.0f} MB", flush=True)
    row.update({"lucene_build_s": built["seconds"], "lucene_build_cpu_s": built["cpu_s"], "lucene_disk_mb": built["disk_mb"]})
    res = pys.run_search(lucene, query_sets, args.budget_s, warmup=WARMUP, warm_queries=warm_queries(corpus, n))
    row["pyserini_start_s"] = res["start_s"]
    for kind, qs in query_sets.items():
        suffix = "" if kind == "question" else "_uniform"
        for batch in (1, 32):
            row[f"pyserini_b{batch}{suffix}"] = res[f"pyserini_b{batch}_{kind}"]
            _print_result(n, kind, "pyserini", batch, res[f"pyserini_b{batch}_{kind}"])
        theirs = res[f"hits_{kind}"]
        ours = index.search(qs[: len(theirs)], 10)
        shared = [len({h[0] for h in t} & {h.passage.id for h in o}) / max(1, len(t)) for t, o in zip(theirs, ours) if t]
        row[f"pyserini_overlap{suffix}"] = float(np.mean(shared)) if shared else None
        print(f"  {n:>10,} {kind:<8} top-10 ids shared with Pyserini: {row[f'pyserini_overlap{suffix}']:.2f}", flush=True)


def fit(rows: list[dict], key: str) -> tuple[float, float] | None:
    pts = [(r["n"], r[key]["cpu_p50_ms"]) for r in rows if key in r]
    if len(pts) < 2:
        return None
    x, y = np.log([p[0] for p in pts]), np.log([p[1] for p in pts])
    slope, intercept = np.polyfit(x, y, 1)
    return float(slope), float(np.exp(intercept + slope * np.log(TARGET_N)))


SYSTEMS = (("blockmax", "awarl (block-max)"), ("maxscore", "MaxScore, no blocks"), ("exhaustive", "exhaustive"),
           ("bm25s", "bm25s"), ("alone", "awarl alone"), ("pyserini", "Pyserini"))


def report(rows: list[dict]) -> None:
    """Markdown tables (CPU-time latency first: steadier on a shared machine) and the fits."""
    rows = sorted(rows, key=lambda r: r["n"])
    print()
    print("| passages | distinct terms | build s | build peak anon MB | disk MB | of which block bounds MB | loaded anon MB "
          "| Lucene build s (CPU s) | Lucene disk MB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        lucene = f"{r['lucene_build_s']:.0f} ({r['lucene_build_cpu_s']:.0f})" if "lucene_build_s" in r else "not run"
        print(f"| {r['n']:,} | {r['vocab']:,} | {r['build_s']:.0f} | {r['build_peak_anon_mb']:.0f} | {r['disk_mb']:.0f} | "
              f"{r.get('blocks_mb', 0):.0f} | {r['load_anon_mb']:.0f} | {lucene} | "
              + (f"{r['lucene_disk_mb']:.0f}" if "lucene_disk_mb" in r else "-") + " |")
    for suffix, title in (("", "question-like queries (1-2 rare words + 2-5 others)"),
                          ("_uniform", "uniform-word queries (3-8 words drawn uniformly: mostly frequent words)")):
        present = [(key, label) for key, label in SYSTEMS if any(f"{key}_b1{suffix}" in r for r in rows)]
        print()
        print(f"{title}, top-10; CPU ms per query at batch 1, p50 / p95")
        print("| passages | " + " | ".join(label for _, label in present) + " | block-max / exhaustive | block-max / Pyserini "
              "| alone / Pyserini |")
        print("|---|" + "---|" * (len(present) + 3))
        for r in rows:
            cells = []
            for key, _ in present:
                res = r.get(f"{key}_b1{suffix}")
                cells.append(f"{res['cpu_p50_ms']:.2f} / {res['cpu_p95_ms']:.2f}" if res else "not run")
            bm, ex, py, al = (r.get(f"{k}_b1{suffix}") for k in ("blockmax", "exhaustive", "pyserini", "alone"))
            ratio_ex = f"{bm['cpu_p50_ms'] / ex['cpu_p50_ms']:.2f}" if bm and ex else "-"
            ratio_py = f"{bm['cpu_p50_ms'] / py['cpu_p50_ms']:.2f}" if bm and py else "-"
            ratio_al = f"{al['cpu_p50_ms'] / py['cpu_p50_ms']:.2f}" if al and py else "-"
            print(f"| {r['n']:,} | " + " | ".join(cells) + f" | {ratio_ex} | {ratio_py} | {ratio_al} |")
        print()
        print(f"{title}: wall ms p50 at batch 1, and queries per CPU second at batch 1 / 32")
        print("| passages | " + " | ".join(f"{label} wall p50 | {label} q/s b1 / b32" for _, label in present) + " |")
        print("|---|" + "---|---|" * len(present))
        for r in rows:
            cells = []
            for key, _ in present:
                b1, b32 = r.get(f"{key}_b1{suffix}"), r.get(f"{key}_b32{suffix}")
                cells.append(f"{b1['p50_ms']:.2f} | {b1['cpu_qps']:.0f} / {b32['cpu_qps']:.0f}" if b1 and b32 else "not run | not run")
            print(f"| {r['n']:,} | " + " | ".join(cells) + " |")
        for key, label in present:
            f = fit(rows, f"{key}_b1{suffix}")
            if f:
                print(f"fit {label}: CPU p50 ~ N^{f[0]:.2f}; extrapolated to {TARGET_N:,} passages: {f[1]:.1f} ms")
        if len(rows) >= 2:
            a, z = rows[0], rows[-1]
            growth = [f"{label} {z[f'{key}_b1{suffix}']['cpu_p50_ms'] / a[f'{key}_b1{suffix}']['cpu_p50_ms']:.1f}x"
                      for key, label in present if f"{key}_b1{suffix}" in a and f"{key}_b1{suffix}" in z]
            print(f"CPU p50 growth {a['n']:,} -> {z['n']:,}: " + ", ".join(growth))
        overlaps = [f"{r['n']:,}: {r[f'pyserini_overlap{suffix}']:.2f}" for r in rows if r.get(f"pyserini_overlap{suffix}") is not None]
        if overlaps:
            print("top-10 ids shared by awarl and Pyserini (different analyzers): " + ", ".join(overlaps))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100k,1M", help="comma-separated corpus sizes (100k, 1M, 3M, 10M)")
    parser.add_argument("--queries", type=int, default=300, help="queries per size")
    parser.add_argument("--budget-s", type=float, default=20.0, help="most seconds timed per system, batch and size")
    parser.add_argument("--bm25s-max", type=parse_size, default=parse_size("3M"), help="largest size bm25s runs at")
    parser.add_argument("--time-cap-min", type=float, default=60.0, help="skip sizes that would start after this")
    parser.add_argument("--work", default=str(ROOT / "work" / "bench-scale"))
    parser.add_argument("--json", default=None, help="also write the results here")
    parser.add_argument("--reuse", action="store_true", help="reuse indexes (and their build figures) from an earlier run")
    parser.add_argument("--report", default=None, help="only print the tables of earlier --json files (comma-separated)")
    parser.add_argument("--no-pyserini", dest="pyserini", action="store_false", help="skip Pyserini even when installed")
    parser.add_argument("--build-child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.build_child:
        build_child(*args.build_child)
        return
    if args.report:
        report([row for f in args.report.split(",") for row in json.loads(Path(f).read_text())])
        return
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    print(f"machine: {os.cpu_count()} CPU cores; python {sys.version.split()[0]}; numpy {np.__version__}", flush=True)
    if args.pyserini:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import bench_search_pyserini

        why = bench_search_pyserini.available()
        if why:
            print(f"pyserini: skipped: {why}", flush=True)
            args.pyserini = False
        else:
            print("pyserini: installed; timed beside awarl (in its own process)", flush=True)
    rows: list[dict] = []
    t_start = time.perf_counter()
    skipped = []
    for n in sizes:
        if (time.perf_counter() - t_start) / 60 > args.time_cap_min:
            skipped.append(n)
            continue
        print(f"size {n:,}", flush=True)
        bench_size(n, args, rows)
    report(rows)
    if skipped:
        print(f"not run (time cap {args.time_cap_min:.0f} min): {', '.join(f'{n:,}' for n in skipped)}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
