"""The estimation stage: K sampled rollouts per query through the shared resumable rollout stage
(`awarl.agent.stage`), one output row per query with ``p`` and what its rollouts did."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from awarl.agent.stage import OutputLock, StageConfig, read_rows, run_stage
from awarl.data.records import DataError, QARecord, drop_torn_tail, iter_jsonl, load_records, write_jsonl
from awarl.capability.shards import shard_path
from awarl.errors import ConfigError


@dataclass
class CapabilityConfig(StageConfig):
    """One estimation run. The agent is ``rollout`` (the recipe's section: same prompt, tool, budgets,
    metric and refusal phrases as training); sampling (``k``, ``temperature``) is this stage's own.
    ``model`` is the checkpoint GRPO starts from; ``out`` gets the records with ``p`` and ``capability``
    (a shard's file when ``shard`` is set)."""

    temperature: float = 1.0
    """Sampling temperature of the rollouts (GRPO's ``grpo.temperature``: GRPO refuses p_i sampled at another)."""
    k: int = 8
    """Rollouts per query."""
    shard: tuple[int, int] | None = None
    """(i, n): estimate records i, i+n, i+2n, … only."""
    trajectories: Path | None = None
    """Also write every rollout's trajectory here (JSONL)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.k < 1:
            raise ConfigError(f"k must be >= 1, got {self.k}")
        if self.temperature <= 0 and self.k > 1:
            raise ConfigError(f"k={self.k} rollouts at temperature {self.temperature} would all be the same; use temperature > 0")
        if self.shard is not None:
            i, n = self.shard
            if not 0 <= i < n:
                raise ConfigError(f"shard must be i/n with 0 <= i < n, got {i}/{n}")


def read_done(path: Path, config: CapabilityConfig | None = None) -> dict[str, dict[str, Any]]:
    """Rows already written to an output file, by id. A broken last line (a crash mid-write) is cut
    off; a broken line anywhere else, a repeated id, or rows estimated with another K, model,
    temperature or rollout settings are errors."""

    def check(lineno: int, row: dict[str, Any]) -> None:
        if "p" not in row:
            raise DataError(path, f"line {lineno}", "not a capability row (needs id and p)", "p")
        if config is not None:
            _check_row_settings(path, lineno, row.get("capability", {}), config)

    return read_rows(path, "id", check)


def _check_row_settings(path: Path, lineno: int, cap: dict[str, Any], config: CapabilityConfig) -> None:
    for name, want in (("k", config.k), ("model", config.model), ("temperature", config.temperature)):
        if cap.get(name) != want:
            raise DataError(path, f"line {lineno}", f"estimated with {name}={cap.get(name)!r}, this run uses "
                            f"{name}={want!r}; use the same settings or a new --out", f"capability.{name}")
    diff = config.rollout.mismatch(cap.get("rollout"))
    if diff:
        raise DataError(path, f"line {lineno}", f"estimated under other rollout settings ({'; '.join(diff)}; "
                        "this run vs recorded); resume with the same settings (--config the same recipe) or "
                        "write to a new --out", "capability.rollout")


def query_stats(record: QARecord, trajectories: Sequence[Any], config: CapabilityConfig) -> dict[str, Any]:
    """The output row of one query: the record, ``p``, and what its K rollouts did."""
    k = len(trajectories)
    outcomes = [t.outcome for t in trajectories]
    stops: dict[str, int] = {}
    for t in trajectories:
        stops[t.stop_reason] = stops.get(t.stop_reason, 0) + 1
    correct = outcomes.count("correct")
    return {
        **record.to_dict(),
        "p": correct / k,
        "capability": {
            "k": k,
            "correct": correct,
            "wrong": outcomes.count("wrong"),
            "abstain": outcomes.count("abstain"),
            "unparsable": outcomes.count("unparsable"),
            "em": sum(t.em for t in trajectories) / k,
            "f1": sum(t.f1 for t in trajectories) / k,
            "searches": sum(t.searches for t in trajectories) / k,
            "completion_tokens": sum(t.completion_tokens for t in trajectories) / k,
            "stop_reasons": stops,
            "seconds": sum(t.seconds for t in trajectories),
            "model": config.model,
            "temperature": config.temperature,
            "rollout": config.rollout.resolved(),
        },
    }


@dataclass
class EstimateResult:
    out: Path
    total: int
    skipped: int
    estimated: int
    rollouts: int
    seconds: float


def estimate(config: CapabilityConfig, *, backend: Any = None, progress: bool = True) -> EstimateResult:
    """Run K rollouts per query not yet in the output and append one row per query."""
    from awarl.agent.setup import check_scope, resolve_retriever

    records = load_records(config.data)  # refuses a repeated id
    if config.shard is not None:
        i, n = config.shard
        records = records[i::n]
    out = shard_path(config.out, *config.shard) if config.shard else config.out
    with OutputLock(out):
        done = read_done(out, config)
        if config.trajectories is not None:
            _keep_trajectories_of(config.trajectories, set(done))
        todo = [r for r in records if r.id not in done]
        if not todo:
            return EstimateResult(out, len(records), len(records), 0, 0, 0.0)
        check_scope(todo, config.rollout.scope, config.data)
        retriever = resolve_retriever(config.index, config.corpus, config.retriever_url, data=config.data)
        run = run_stage(config, records, out, done=done, samples=config.k,
                        row_of=lambda record, group: query_stats(record, group, config), retriever=retriever,
                        backend=backend, trajectories=config.trajectories, label="p_i", unit="queries",
                        progress=progress)
    return EstimateResult(out, len(records), len(records) - run.written, run.written, run.rollouts, run.seconds)


def _keep_trajectories_of(path: Path, done: set[str]) -> None:
    """On resume, drop trajectories of queries that did not finish (they will be rerun)."""
    if not path.exists():
        return
    drop_torn_tail(path)
    rows = [row for _, row in iter_jsonl(path) if row.get("record_id") in done]
    write_jsonl(path, rows)
