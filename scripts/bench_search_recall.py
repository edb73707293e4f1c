"""Recall@k of every BM25 scorer on the shipped benchmark samples: pruning must not change it.

For the samples' answerable questions (HotpotQA, 2WikiMultiHopQA, MuSiQue), the share whose top k
holds any / all of the question's supporting passages, for awarl's default scorer (MaxScore with
block-max pruning), the same without block bounds, the exhaustive scorer (the reference) and
bm25s's own ``retrieve`` on the same index, and whether their top-k ids are identical. Two corpora:
the samples' own passages, and the same grown to ``--passages`` by perturbed copies
(`bench_search.perturbed_corpus`; a copy of a supporting passage counts as that passage), large
enough that the pruned paths run.

    python scripts/bench_search_recall.py [--passages 100000] [--k 5]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_search import load_samples, perturbed_corpus  # noqa: E402

SCORERS = ("block-max (default)", "MaxScore, no blocks", "exhaustive", "bm25s")


def _base_id(pid: str, originals: set[str]) -> str:
    """The sample passage a perturbed copy (``<id>-<copy>``) was made from."""
    head = pid.rpartition("-")[0]
    return head if pid not in originals and head in originals else pid


def run(passages, records, k: int, work: Path, originals: set[str] | None = None) -> dict:
    """Recall and top-k agreement of every scorer; ``originals``: the ids of the sample passages
    (default: every passage's id)."""
    import bm25s

    from awarl.search.bm25 import BM25Index

    t0 = time.perf_counter()
    BM25Index.build_folder(passages, work)
    index = BM25Index.load(work)
    build_s = time.perf_counter() - t0
    model = bm25s.BM25.load(work / "bm25s", mmap=True, load_corpus=False, show_progress=False)
    blocks = index.postings.blocks
    originals = {p.id for p in passages} if originals is None else originals
    questions = [r.question for r in records]
    tops: dict[str, list[list[str]]] = {}
    for name in SCORERS:
        if name == "bm25s":
            ids, _ = model.retrieve([index.tokenizer.terms(q) or ["zzzz"] for q in questions], k=k, show_progress=False,
                                    n_threads=1)
            tops[name] = [[index.store.row(int(r)).id for r in row] for row in ids]
            continue
        index.scorer = "exhaustive" if name == "exhaustive" else "maxscore"
        index.postings.blocks = None if name == "MaxScore, no blocks" else blocks
        tops[name] = [[h.passage.id for h in hits] for hits in index.search(questions, k)]
    index.postings.blocks = blocks
    out = {"passages": len(passages), "questions": len(records), "build_s": build_s, "scorers": {}}
    for name, top in tops.items():
        found = [{_base_id(pid, originals) for pid in row} for row in top]
        any_hit = [bool(found_i & set(r.supporting)) for found_i, r in zip(found, records)]
        all_hit = [set(r.supporting) <= found_i for found_i, r in zip(found, records)]
        out["scorers"][name] = {"any": sum(any_hit) / len(records), "all": sum(all_hit) / len(records),
                                "same_ids_as_exhaustive": sum(a == b for a, b in zip(top, tops["exhaustive"])) / len(records)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passages", type=int, default=100_000, help="size of the perturbed corpus")
    parser.add_argument("--k", type=int, default=5)
    args = parser.parse_args()
    records, base = load_samples()
    records = [r for r in records if r.answerable and r.supporting]
    print(f"{len(records)} answerable sample questions with supporting passages; top {args.k}")
    print(f"| corpus | passages | scorer | recall@{args.k} any | recall@{args.k} all | top-{args.k} ids = exhaustive's |")
    print("|---|---|---|---|---|---|")
    for label, passages in (("samples", base), ("samples + perturbed copies", perturbed_corpus(base, args.passages))):
        with tempfile.TemporaryDirectory() as tmp:
            res = run(passages, records, args.k, Path(tmp) / "index", originals={p.id for p in base})
        for name, r in res["scorers"].items():
            print(f"| {label} | {res['passages']:,} | {name} | {r['any']:.3f} | {r['all']:.3f} | {r['same_ids_as_exhaustive']:.3f} |",
                  flush=True)


if __name__ == "__main__":
    main()
