"""What an estimate says about the estimated agent, and what looks degenerate in it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from awarl.data.records import iter_jsonl


@dataclass
class CapabilitySummary:
    """What an output file says about the estimated agent, and what looks degenerate in it."""

    queries: int
    mean_p: float
    zero_p: float
    """Share of queries with p = 0."""
    unparsable: float
    """Share of rollouts without a parsable ``<answer>``."""
    token_budget: float
    """Share of rollouts that stopped on the token budget."""

    def warnings(self) -> list[str]:
        out = []
        if self.queries and self.unparsable > 0.5:
            out.append(f"{self.unparsable:.0%} of the rollouts had no parsable <answer>: p_i is 0 for most queries and "
                       f"the AWA reward would treat them all as hopeless. The checkpoint does not follow the protocol "
                       f"yet: warm it up with `awarl train sft` (or estimate on a later checkpoint).")
        if self.queries and self.token_budget > 0.3:
            out.append(f"{self.token_budget:.0%} of the rollouts stopped on the token budget before answering: raise "
                       f"rollout.max_completion_tokens or lower passage_words / topk / max_searches (in the recipe, "
                       f"so training uses the same settings).")
        if self.queries and self.zero_p == 1.0 and self.unparsable <= 0.5:
            out.append("every query has p = 0: the model answered nothing correctly; the expected refusal rate is then "
                       "1 and the AWA reward pushes towards refusing everything.")
        return out


def summarize(path: Path) -> CapabilitySummary:
    """Read an estimate back and summarise it (mean p, share of p = 0, unparsable and budget-stopped rollouts)."""
    rows = [row for _, row in iter_jsonl(path)]
    caps = [row.get("capability") or {} for row in rows]
    rollouts = sum(c.get("k", 0) for c in caps) or 1
    return CapabilitySummary(
        queries=len(rows),
        mean_p=sum(row["p"] for row in rows) / len(rows) if rows else 0.0,
        zero_p=sum(row["p"] == 0 for row in rows) / len(rows) if rows else 0.0,
        unparsable=sum(c.get("unparsable", 0) for c in caps) / rollouts,
        token_budget=sum((c.get("stop_reasons") or {}).get("token_budget", 0) for c in caps) / rollouts,
    )
