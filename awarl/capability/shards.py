"""Shards of one estimate: ``--shard i/n`` takes every n-th record from i and writes its own file;
`merge` joins the files."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from awarl.data.records import DataError, iter_jsonl, load_records, write_jsonl
from awarl.errors import ConfigError


def parse_shard(text: str | None) -> tuple[int, int] | None:
    """``"1/4"`` → ``(1, 4)``; anything else is a `ConfigError` (a bad command line: exit code 2).

    >>> parse_shard("1/4")
    (1, 4)
    """
    if not text:
        return None
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise ConfigError(f"--shard must look like i/n (e.g. 0/4), got {text!r}") from None
    if not 0 <= i < n:
        raise ConfigError(f"--shard must be i/n with 0 <= i < n, got {text!r}")
    return i, n


def shard_path(out: Path, i: int, n: int) -> Path:
    """Where shard i of n writes: ``p.jsonl`` → ``p.shard0of4.jsonl``."""
    return out.with_name(f"{out.stem}.shard{i}of{n}{out.suffix or '.jsonl'}")


def merge(shards: Sequence[Path], out: Path, data: Path | None = None) -> int:
    """Join shard outputs into one file (in the order of ``data`` when given: every id of ``data`` must have
    its row, and every row its id in ``data``). Shards must be 0..n-1 of one n, no id may appear twice, and
    every row must have been estimated as the first was (`SAME_ESTIMATE`: K, model, temperature, rollout
    settings), since `awarl train grpo` reads the file as one estimate."""
    if not shards:
        raise DataError(out, "-", "no shard files to merge")
    rows: dict[str, dict[str, Any]] = {}
    first: tuple[Path, dict[str, Any]] | None = None
    for path in shards:
        for lineno, row in iter_jsonl(path):
            if "id" not in row or "p" not in row:
                raise DataError(path, f"line {lineno}", "not a capability row (needs id and p)", "p")
            if row["id"] in rows:
                raise DataError(path, f"line {lineno}", f"id {row['id']!r} is already in another shard", "id")
            estimate = {k: (row.get("capability") or {}).get(k) for k in SAME_ESTIMATE}
            if first is None:
                first = (path, estimate)
            for key in SAME_ESTIMATE:
                if estimate[key] != first[1][key]:
                    raise DataError(path, f"line {lineno}", f"estimated with another {key} than {first[0]}'s rows "
                                    f"({_brief(estimate[key])} vs {_brief(first[1][key])}); merge shards of one "
                                    "estimate", f"capability.{key}")
            rows[row["id"]] = row
    _check_shard_set(shards)
    if data is not None:
        order = [r.id for r in load_records(data)]
        missing = [i for i in order if i not in rows]
        if missing:
            raise DataError(data, "-", f"{len(missing)} of {len(order)} ids have no estimate yet (first: {missing[:3]}); "
                            "finish the shards before merging")
        extra = sorted(set(rows) - set(order))
        if extra:
            raise DataError(data, "-", f"{len(extra)} of the shards' {len(rows)} rows have no record here (first: "
                            f"{extra[:3]}); --data must be the records the shards estimated")
        ordered = [rows[i] for i in order]
    else:
        ordered = list(rows.values())
    return write_jsonl(out, ordered)


SAME_ESTIMATE = ("k", "model", "temperature", "rollout")
"""The ``capability`` fields every row of one p_i file shares (`merge` checks them across shards)."""


def _brief(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= 80 else text[:77] + "..."


def _check_shard_set(shards: Sequence[Path]) -> None:
    found: dict[int, set[int]] = {}
    for path in shards:
        m = re.search(r"\.shard(\d+)of(\d+)\.", path.name)
        if m:
            found.setdefault(int(m.group(2)), set()).add(int(m.group(1)))
    if len(found) > 1:
        raise DataError(shards[0], "-", f"shards of different splits mixed: {sorted(found)} shards")
    for n, have in found.items():
        missing = sorted(set(range(n)) - have)
        if missing:
            raise DataError(shards[0], "-", f"missing shard(s) {missing} of {n}")
