"""Per-query capability p_i (docs/evaluation.md): the share of K sampled rollouts of the checkpoint GRPO
starts from that the protocol scorer judges correct, under the training rollout settings (the same
prompt, tool, retriever, budgets and notion of correct: `awarl.agent.settings.RolloutSettings`).

``awarl capability estimate`` writes each record back with ``p`` and a ``capability`` block of
per-query statistics, one line per query as soon as its K rollouts finish (flushed and synced), so
an interrupted run restarts where it stopped: ids already in the output are skipped, and because
rollout k of query q samples from a stream seeded by (seed, q, k) and resume is aligned to whole
chunks (`awarl.agent.stage`), the resumed file holds exactly the rows an uninterrupted run writes.
One run writes an output at a time (a second one stops, naming the first one's pid). ``--shard
i/n`` takes every n-th record starting at i (one process per GPU) and writes
``OUT.shard{i}of{n}.jsonl``; ``awarl capability merge`` joins the shards.

- `estimate`: the stage (`CapabilityConfig` → rows), `read_done`, `query_stats`;
- `summarize`: what an output says about the agent, and what looks degenerate in it;
- `merge`, `parse_shard`, `shard_path`: shards;
- `app`: the ``awarl capability`` commands.
"""

from awarl.capability.estimate import CapabilityConfig, EstimateResult, estimate, query_stats, read_done
from awarl.capability.shards import merge, parse_shard, shard_path
from awarl.capability.summary import CapabilitySummary, summarize
from awarl.capability.cli import app  # noqa: E402 (the commands use everything above)

__all__ = ["CapabilityConfig", "CapabilitySummary", "EstimateResult", "app", "estimate", "merge", "parse_shard",
           "query_stats", "read_done", "shard_path", "summarize"]
