"""Check a synthetic world's preconditions without training and print them as a table.

    python scripts/world_audit.py                                  # the demo recipe's world, seed 0
    python scripts/world_audit.py --seed 1 --set persons=300       # another seed, a smaller world
    python scripts/world_audit.py --set version=1                  # the regression control (fails, by design)
    python scripts/world_audit.py --json audit.json                # the table and the numbers as JSON

Exit status 1 when a check misses its bound, 2 for a knob that cannot make a world. What each
check measures: awarl.eval.world_audit; the recorded table: docs/fidelity.md, World v2.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from awarl.errors import AwarlError
from awarl.eval.world_audit import audit_recipe


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", type=Path, default=None, help="demo recipe (default: the shipped demo_world.yaml)")
    parser.add_argument("--seed", type=int, default=0, help="world seed (the demo's --seed)")
    parser.add_argument("--set", dest="sets", action="append", default=[], help="world knob=value (repeatable)")
    parser.add_argument("--split", default="eval", choices=("sft", "rl", "eval"), help="split to audit")
    parser.add_argument("--seeds", type=int, default=8, help="rollout seeds the shape rule averages over")
    parser.add_argument("--json", type=Path, default=None, help="also write the audit as JSON here")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    try:
        config, audit = audit_recipe(args.recipe, seed=args.seed, sets=args.sets, split=args.split, seeds=args.seeds)
    except AwarlError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    print(f"world: version {config.version}, {config.persons} persons, seed {config.seed}; split {audit.split}: "
          f"{audit.questions} questions ({audit.answerable} answerable)\n")
    print(audit.table())
    print("\nAn oracle that knows u_q, under AWA-RL's base refusal reward (p_clip 0.1, no citation term):\n")
    print(audit.oracle_table())
    print(f"\n{'all checks pass' if audit.ok else 'some checks miss their bound'} ({time.perf_counter() - t0:.0f} s)")
    if args.json:
        args.json.write_text(json.dumps({"config": config.to_dict(), **audit.to_dict()}, indent=1) + "\n", encoding="utf-8")
    return 0 if audit.ok else 1


if __name__ == "__main__":
    sys.exit(main())
