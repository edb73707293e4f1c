"""A resumed p_i against an uninterrupted one, and what whole-chunk resume costs in throughput.

On the test world's held-out questions with a warm-started world model (the newest one the test
fixtures built under .cache/awarl-tests, or --model): one uninterrupted estimate, one interrupted
after its first chunk and resumed, rows compared (timings left out); then rollouts/s with the
default chunk against one chunk holding every question (one rolling pool, no drain between chunks).

    python scripts/bench_resume.py --questions 48 --k 4 --concurrency 16
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parents[1]


class CrashAfter:
    """A backend that raises once ``out`` holds ``rows`` rows (a crash after a chunk)."""

    def __init__(self, inner, out: Path, rows: int):
        self.inner, self.out, self.rows = inner, out, rows
        for name in ("accepts", "tokenizer", "eos_token_ids", "max_model_len", "name"):
            setattr(self, name, getattr(inner, name))

    def generate(self, prompts, params):
        if self.out.exists() and self.out.read_text().count("\n") >= self.rows:
            raise KeyboardInterrupt
        return self.inner.generate(prompts, params)


def rows(path: Path) -> dict[str, dict]:
    out = {}
    for line in path.read_text().splitlines():
        row = json.loads(line)
        row["capability"].pop("seconds")
        out[row["id"]] = row
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("--questions", type=int, default=48)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--concurrency", type=int, default=16)
    args = ap.parse_args()

    from awarl.agent.settings import RolloutSettings
    from awarl.capability import CapabilityConfig, estimate
    from awarl.data.adapters import load_dataset_file
    from awarl.data.records import write_jsonl
    from awarl.data.world import WorldConfig, generate_world, write_world
    from awarl.llm.spec import load_backend

    model = args.model or max((ROOT / ".cache" / "awarl-tests").glob("tiny-world-sft-*"), key=lambda p: p.stat().st_mtime)
    work = Path(tempfile.mkdtemp(prefix="awarl-resume-"))
    world = generate_world(WorldConfig(persons=120, seed=0))
    files = write_world(world, work / "world")
    records, _ = load_dataset_file("musique", files["eval"])
    write_jsonl(work / "records.jsonl", (r.to_dict() for r in records[: args.questions]))
    write_jsonl(work / "corpus.jsonl", (p.to_dict() for p in world.passages))
    backend = load_backend(str(model), device="cpu", batch_size=args.concurrency)
    rollout = RolloutSettings(scope="closed", topk=3, passage_words=20, max_searches=2, max_completion_tokens=384)

    def config(name: str, chunk: int | None = None) -> CapabilityConfig:
        return CapabilityConfig(model=str(model), data=work / "records.jsonl", out=work / f"{name}.jsonl", rollout=rollout,
                                k=args.k, temperature=1.0, max_concurrent=args.concurrency, seed=0, chunk=chunk)

    estimate(config("whole"), backend=backend, progress=False)  # also warms the model up
    first_chunk = config("x").chunk_size(args.k)
    try:
        estimate(config("resumed"), backend=CrashAfter(backend, work / "resumed.jsonl", first_chunk), progress=False)
    except KeyboardInterrupt:
        pass
    kept = len((work / "resumed.jsonl").read_text().splitlines())
    estimate(config("resumed"), backend=backend, progress=False)
    a, b = rows(work / "whole.jsonl"), rows(work / "resumed.jsonl")
    same = sum(a[i] == b.get(i) for i in a)
    print(f"model {model.name}, {len(a)} questions, K={args.k}, concurrency {args.concurrency}, "
          f"chunk {first_chunk} questions; interrupted after {kept} rows, resumed: {same} of {len(a)} rows equal "
          f"(mean p {sum(r['p'] for r in a.values()) / len(a):.3f})")
    timed = {}
    for name, chunk in (("one pool", len(a)), ("chunks", None)):
        result = estimate(config(name.replace(" ", "-"), chunk=chunk), backend=backend, progress=False)
        timed[name] = result.rollouts / result.seconds
    print(f"rollouts/s: default chunks {timed['chunks']:.2f}, one chunk of every question {timed['one pool']:.2f} "
          f"({timed['chunks'] / timed['one pool']:.2f}x)")


if __name__ == "__main__":
    sys.exit(main())
