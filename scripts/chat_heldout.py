"""The default product on a world's held-out questions, through the chat server's API, by kind of question.

    python scripts/chat_heldout.py                                 # runs/demo: its agent, world and policy
    python scripts/chat_heldout.py --demo runs/demo --limit 40     # the first 40 held-out questions
    python scripts/chat_heldout.py --agent PATH --json out.json    # another checkpoint over the demo's world

It serves what `awarl chat serve --demo DEMO` serves (the demo's default settings, the world's
search noise off), in-process on a fresh database, asks each question as a user, answers the
loop's "which namesake?" questions as the user who means the question's person (from the world),
and prints the table (Markdown). Exit status 1 when a hard safety bound is missed (a wrong answer
served VALID, an unanswerable question served VALID, a right first answer replaced by a wrong one),
2 for a demo or world that cannot be read. What each row counts: awarl.chat.heldout; the recorded
table: docs/chat.md, "Held-out questions through the API".
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

from awarl.chat.heldout import HeldoutTable, load_demo, run_heldout
from awarl.errors import AwarlError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--demo", type=Path, default=Path("runs/demo"), help="folder of `awarl demo --out` (demo.json)")
    parser.add_argument("--agent", type=Path, default=None, help="serve this checkpoint instead of the demo's agent")
    parser.add_argument("--split", default="eval", choices=("sft", "rl", "eval"), help="split of the world to ask")
    parser.add_argument("--limit", type=int, default=None, help="ask only the split's first N questions")
    parser.add_argument("--workers", type=int, default=None, help="threads processed at once (default: the demo's)")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds to wait for every thread to finish")
    parser.add_argument("--json", type=Path, default=None, help="also write the table and every outcome as JSON here")
    parser.add_argument("--quiet", action="store_true", help="no line per finished thread on stderr")
    parser.add_argument("--db-dir", type=Path, default=None,
                        help="keep the chat database and audit log in this new folder (to read the threads after)")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    if args.db_dir is not None and args.db_dir.exists() and any(args.db_dir.iterdir()):
        print(f"error: --db-dir {args.db_dir}: not empty (the table needs a fresh database)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="awarl-heldout-") as tmp:
        db_dir = args.db_dir or Path(tmp)
        db_dir.mkdir(parents=True, exist_ok=True)
        try:
            demo = load_demo(args.demo, db_dir=db_dir, agent=args.agent, workers=args.workers)
            questions = demo.world.split(args.split)[: args.limit]
            table = HeldoutTable(run_heldout(demo.settings, demo.world, questions, timeout_s=args.timeout,
                                             progress=(lambda line: None) if args.quiet else
                                             (lambda line: print(line, file=sys.stderr, flush=True))))
        except AwarlError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return exc.exit_code
    wall = time.perf_counter() - t0
    cfg = demo.world.config
    table.meta = {"agent": demo.settings.generator, "world": str(demo.world_json), "world_version": cfg.version,
                  "persons": cfg.persons, "seed": cfg.seed, "split": args.split, "questions": len(questions),
                  "noise_named": demo.noise, "noise_served": None, "workers": demo.settings.workers,
                  "max_iterations": demo.settings.max_iterations, "wall_s": round(wall, 1),
                  "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores"}
    print(f"agent {demo.settings.generator}; world v{cfg.version} ({cfg.persons} persons, seed {cfg.seed}) from "
          f"{demo.world_json}; split {args.split}: {len(questions)} questions")
    print("search noise: off when serving " + (f"(the agent's rollout settings name {demo.noise}; the chat server serves "
                                              "without it)\n" if demo.noise else "(the agent's rollout settings name none)\n"))
    print(table.markdown())
    misses = table.misses()
    print("\n" + ("\n".join(f"MISSED: {m}" for m in misses) if misses else "every hard safety bound holds")
          + f" ({wall:.0f} s on {table.meta['machine']})")
    if args.json:
        args.json.write_text(json.dumps(table.to_dict(), indent=1) + "\n", encoding="utf-8")
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
