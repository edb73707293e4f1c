"""Per-query capability p_i (docs/evaluation.md): the share of K sampled rollouts of the checkpoint GRPO
starts from that the protocol scorer judges correct, under the training rollout settings (the same
prompt, tool, retriever, budgets and notion of correct: `awarl.agent.settings.RolloutSettings`).

``awarl capability estimate`` writes each record back with ``p`` and a ``capability`` block of
per-query statistics, one line per query as soon as its K rollouts finish (flushed and synced), so
an interrupted run restarts where it stopped: ids already in the output are skipped. ``--shard
i/n`` takes every n-th record starting at i (one process per GPU) and writes
``OUT.shard{i}of{n}.jsonl``; ``awarl capability merge`` joins the shards.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from awarl.agent.options import BACKEND, RETRIEVAL, ROLLOUT, backend_options, retrieval_options, rollout_options
from awarl.agent.settings import RolloutSettings
from awarl.cli_errors import fail
from awarl.data.records import DataError, QARecord, append_rows, drop_torn_tail, iter_jsonl, load_records, write_jsonl

app = typer.Typer(no_args_is_help=True)
console = Console(stderr=True)


@dataclass
class CapabilityConfig:
    """One estimation run. The agent is ``rollout`` (the recipe's section: same prompt, tool, budgets,
    metric and refusal phrases as training); sampling (``k``, ``temperature``) is this stage's own."""

    model: str
    """Backend spec: PATH, hf:PATH, vllm:PATH or openai:URL#MODEL (the checkpoint GRPO starts from)."""
    data: Path
    """records.jsonl to estimate."""
    out: Path
    """Output JSONL: the records with ``p`` and ``capability`` (a shard's file when ``shard`` is set)."""
    rollout: RolloutSettings = field(default_factory=RolloutSettings)
    """The agent, exactly as training runs it; recorded in every output row."""
    k: int = 8
    """Rollouts per query."""
    temperature: float = 1.0
    """Sampling temperature of the rollouts (GRPO samples at 1.0)."""
    shard: tuple[int, int] | None = None
    """(i, n): estimate records i, i+n, i+2n, … only."""
    index: Path | None = None
    """Saved index folder to search."""
    corpus: Path | None = None
    """corpus.jsonl to index with BM25 (default: the one beside ``data``)."""
    retriever_url: str | None = None
    """A running `awarl search serve` to search instead."""
    max_concurrent: int = 64
    """Rollouts in flight at once (K of a query are adjacent, so about max_concurrent / K queries)."""
    seed: int = 0
    """Sampling seed."""
    trajectories: Path | None = None
    """Also write every rollout's trajectory here (JSONL)."""
    backend_options: dict[str, Any] = field(default_factory=dict)
    """Extra `awarl.llm.spec.BackendOptions` (device, dtype, batch_size, tensor_parallel_size …)."""

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ValueError(f"k must be >= 1, got {self.k}")
        if self.temperature <= 0 and self.k > 1:
            raise ValueError(f"k={self.k} rollouts at temperature {self.temperature} would all be the same; use temperature > 0")
        if self.shard is not None:
            i, n = self.shard
            if not 0 <= i < n:
                raise ValueError(f"shard must be i/n with 0 <= i < n, got {i}/{n}")


def parse_shard(text: str | None) -> tuple[int, int] | None:
    """``"1/4"`` → ``(1, 4)``.

    >>> parse_shard("1/4")
    (1, 4)
    """
    if not text:
        return None
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise ValueError(f"shard must look like i/n (e.g. 0/4), got {text!r}") from None
    if not 0 <= i < n:
        raise ValueError(f"shard must be i/n with 0 <= i < n, got {text!r}")
    return i, n


def shard_path(out: Path, i: int, n: int) -> Path:
    """Where shard i of n writes: ``p.jsonl`` → ``p.shard0of4.jsonl``."""
    return out.with_name(f"{out.stem}.shard{i}of{n}{out.suffix or '.jsonl'}")


def read_done(path: Path, config: CapabilityConfig | None = None) -> dict[str, dict[str, Any]]:
    """Rows already written to an output file, by id. A broken last line (a crash mid-write) is cut
    off; a broken line anywhere else, a repeated id, or rows estimated with another K, model,
    temperature or rollout settings are errors."""
    if not path.exists():
        return {}
    drop_torn_tail(path)
    done: dict[str, dict[str, Any]] = {}
    for lineno, row in iter_jsonl(path):
        if "id" not in row or "p" not in row:
            raise DataError(path, f"line {lineno}", "not a capability row (needs id and p)", "p")
        if row["id"] in done:
            raise DataError(path, f"line {lineno}", f"id {row['id']!r} appears twice; this file mixes two runs", "id")
        if config is not None:
            _check_row_settings(path, lineno, row.get("capability", {}), config)
        done[row["id"]] = row
    return done


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


def estimate(config: CapabilityConfig, *, backend: Any = None, progress: bool = True) -> EstimateResult:
    """Run K rollouts per query not yet in the output and append one row per query."""
    from awarl.agent.runner import Rollout
    from awarl.agent.setup import build_runner, check_scope, resolve_retriever

    records = load_records(config.data)
    _check_unique(records, config.data)
    if config.shard is not None:
        i, n = config.shard
        records = records[i::n]
    out = shard_path(config.out, *config.shard) if config.shard else config.out
    done = read_done(out, config)
    todo = [r for r in records if r.id not in done]
    if config.trajectories is not None:
        _keep_trajectories_of(config.trajectories, set(done))
    if not todo:
        return EstimateResult(out, len(records), len(records), 0, 0, 0.0)
    check_scope(todo, config.rollout.scope, config.data)
    retriever = resolve_retriever(config.index, config.corpus, config.retriever_url, data=config.data)
    if backend is None:
        from awarl.llm.spec import load_backend

        backend = load_backend(config.model, seed=config.seed, **config.backend_options)
    runner = build_runner(backend, retriever, config.rollout, temperature=config.temperature, seed=config.seed,
                          max_concurrent=config.max_concurrent)
    by_id = {r.id: r for r in todo}
    pending: dict[str, list[Any]] = {}
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with out.open("a", encoding="utf-8") as sink, _Progress(len(todo), len(todo) * config.k, progress) as bar:
        traj_sink = config.trajectories.open("a", encoding="utf-8") if config.trajectories else None

        def on_done(traj: Any) -> None:
            group = pending.setdefault(traj.record_id, [])
            group.append(traj)
            bar.rollout_done()
            if len(group) < config.k:
                return
            group.sort(key=lambda t: t.sample)
            if traj_sink is not None:
                append_rows(traj_sink, [t.to_dict() for t in group])
            append_rows(sink, [query_stats(by_id[traj.record_id], group, config)])
            del pending[traj.record_id]
            bar.query_done()

        try:
            runner.run([Rollout(r, s) for r in todo for s in range(config.k)], on_done=on_done)
        finally:
            if traj_sink is not None:
                traj_sink.close()
    seconds = time.perf_counter() - t0
    return EstimateResult(out, len(records), len(records) - len(todo), len(todo), len(todo) * config.k, seconds)


def _keep_trajectories_of(path: Path, done: set[str]) -> None:
    """On resume, drop trajectories of queries that did not finish (they will be rerun)."""
    if not path.exists():
        return
    drop_torn_tail(path)
    rows = [row for _, row in iter_jsonl(path) if row.get("record_id") in done]
    write_jsonl(path, rows)


def _check_unique(records: Sequence[QARecord], path: Path) -> None:
    seen: dict[str, int] = {}
    for n, r in enumerate(records, start=1):
        if r.id in seen:
            raise DataError(path, f"record {n}", f"duplicate id {r.id!r} (first at record {seen[r.id]})", "id")
        seen[r.id] = n


def merge(shards: Sequence[Path], out: Path, data: Path | None = None) -> int:
    """Join shard outputs into one file (in the order of ``data`` when given, which must then be
    complete). Shards must be 0..n-1 of one n, and no id may appear twice."""
    if not shards:
        raise DataError(out, "-", "no shard files to merge")
    rows: dict[str, dict[str, Any]] = {}
    for path in shards:
        for lineno, row in iter_jsonl(path):
            if "id" not in row or "p" not in row:
                raise DataError(path, f"line {lineno}", "not a capability row (needs id and p)", "p")
            if row["id"] in rows:
                raise DataError(path, f"line {lineno}", f"id {row['id']!r} is already in another shard", "id")
            rows[row["id"]] = row
    _check_shard_set(shards)
    if data is not None:
        order = [r.id for r in load_records(data)]
        missing = [i for i in order if i not in rows]
        if missing:
            raise DataError(data, "-", f"{len(missing)} of {len(order)} ids have no estimate yet (first: {missing[:3]}); "
                            "finish the shards before merging")
        ordered = [rows[i] for i in order]
    else:
        ordered = list(rows.values())
    return write_jsonl(out, ordered)


def _check_shard_set(shards: Sequence[Path]) -> None:
    import re

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


class _Progress:
    """A rich progress bar over queries that also shows rollouts per second."""

    def __init__(self, queries: int, rollouts: int, enabled: bool) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        self.enabled = enabled
        self.rollouts, self.started = 0, time.perf_counter()
        self.progress = Progress(
            TextColumn("[bold]p_i[/bold]"), BarColumn(), MofNCompleteColumn(), TextColumn("queries"),
            TextColumn("{task.fields[rate]:.2f} rollouts/s"), TimeElapsedColumn(), TimeRemainingColumn(),
            console=console, disable=not enabled,
        )
        self.task = self.progress.add_task("estimate", total=queries, rate=0.0)
        self.total_rollouts = rollouts

    def __enter__(self) -> "_Progress":
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def rollout_done(self) -> None:
        self.rollouts += 1
        rate = self.rollouts / max(time.perf_counter() - self.started, 1e-9)
        self.progress.update(self.task, rate=rate)

    def query_done(self) -> None:
        self.progress.advance(self.task)


@app.command("estimate")
@rollout_options
@retrieval_options
@backend_options
def estimate_command(
    model: str = typer.Option(..., "--model", help="Backend spec: PATH, hf:PATH, vllm:PATH or openai:URL#MODEL."),
    data: Path = typer.Option(..., "--data", help="records.jsonl to estimate (from `awarl data prepare`)."),
    out: Path = typer.Option(..., "--out", help="Output JSONL (records + p + capability); resumed if it exists."),
    k: int = typer.Option(8, "--k", help="Rollouts per query."),
    temperature: float = typer.Option(1.0, "--temperature", help="Sampling temperature (GRPO samples at 1.0)."),
    shard: str = typer.Option(None, "--shard", help="i/n: estimate every n-th record from i; writes OUT.shard{i}of{n}.jsonl."),
    concurrency: int = typer.Option(64, "--concurrency", help="Rollouts in flight at once."),
    seed: int = typer.Option(0, "--seed", help="Sampling seed."),
    trajectories: Path = typer.Option(None, "--trajectories", help="Also write every rollout's trajectory (JSONL)."),
    no_progress: bool = typer.Option(False, "--no-progress", help="No progress bar."),
    rollout: RolloutSettings = ROLLOUT,
    retrieval: dict = RETRIEVAL,
    backend_options: dict = BACKEND,
) -> None:
    """Estimate p_i = share of K rollouts judged correct, for every query in --data.

    Run it on the checkpoint GRPO starts from, with --config the training recipe, so that p_i describes the agent training shapes (the rows record the settings; `awarl train grpo` refuses others).
    """
    from awarl.llm.base import BackendError
    from awarl.search.retriever import SearchError

    try:
        config = CapabilityConfig(
            model=model, data=data, out=out, rollout=rollout, k=k, temperature=temperature, shard=parse_shard(shard),
            max_concurrent=concurrency, seed=seed, trajectories=trajectories, backend_options=backend_options,
            **retrieval,
        )
        result = estimate(config, progress=not no_progress)
    except (DataError, BackendError, SearchError, ValueError) as exc:
        fail(exc)
    rate = result.rollouts / result.seconds if result.seconds else 0.0
    typer.echo(f"{result.estimated} queries estimated ({result.rollouts} rollouts, {rate:.2f} rollouts/s), "
               f"{result.skipped} already done, {result.total} in total -> {result.out}")
    summary = summarize(result.out)
    typer.echo(f"mean p {summary.mean_p:.3f}; p = 0 for {summary.zero_p:.0%} of queries; "
               f"{summary.unparsable:.0%} of rollouts unparsable, {summary.token_budget:.0%} stopped on the token budget")
    for warning in summary.warnings():
        console.print(f"[bold yellow]warning:[/bold yellow] {warning}", soft_wrap=True, highlight=False)


@app.command("merge")
def merge_command(
    shards: list[Path] = typer.Argument(None, help="Shard files; default: every OUT.shard*of*.jsonl beside --out."),
    out: Path = typer.Option(..., "--out", help="Merged output JSONL."),
    data: Path = typer.Option(None, "--data", help="records.jsonl: order the output like it and require every id."),
) -> None:
    """Join `estimate --shard i/n` outputs into one file."""
    files = list(shards or sorted(out.parent.glob(f"{out.stem}.shard*of*{out.suffix or '.jsonl'}")))
    try:
        n = merge(files, out, data)
    except DataError as exc:
        fail(exc)
    typer.echo(f"merged {len(files)} shard(s): {n} rows -> {out}")
