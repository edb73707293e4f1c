"""``awarl capability estimate`` and ``awarl capability merge``."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from awarl.agent.options import BACKEND, RETRIEVAL, ROLLOUT, backend_options, retrieval_options, rollout_options
from awarl.agent.settings import RolloutSettings
from awarl.capability.estimate import CapabilityConfig, estimate
from awarl.capability.shards import merge, parse_shard
from awarl.capability.summary import summarize

app = typer.Typer(no_args_is_help=True)
console = Console(stderr=True)


@app.command("estimate")
@rollout_options(checkpoint_param="model")
@retrieval_options
@backend_options
def estimate_command(
    model: str = typer.Option(..., "--model", help="Backend spec: PATH, hf:PATH, vllm:PATH or openai:URL#MODEL."),
    data: Path = typer.Option(..., "--data", help="records.jsonl to estimate (from `awarl data prepare`)."),
    out: Path = typer.Option(..., "--out", help="Output JSONL (records + p + capability); resumed if it exists."),
    k: int = typer.Option(8, "--k", help="Rollouts per query."),
    temperature: float = typer.Option(1.0, "--temperature", help="Sampling temperature (the recipe's grpo.temperature: GRPO refuses p_i sampled at another)."),
    shard: str = typer.Option(None, "--shard", help="i/n: estimate every n-th record from i; writes OUT.shard{i}of{n}.jsonl."),
    concurrency: int = typer.Option(64, "--concurrency", help="Rollouts in flight at once."),
    chunk: int = typer.Option(None, "--chunk", help="Queries per chunk, the unit of resume (default: 4 x concurrency / k)."),
    seed: int = typer.Option(0, "--seed", help="Run seed: rollout k of query q samples from a stream seeded by (seed, q, k)."),
    trajectories: Path = typer.Option(None, "--trajectories", help="Also write every rollout's trajectory (JSONL)."),
    no_progress: bool = typer.Option(False, "--no-progress", help="No progress bar."),
    rollout: RolloutSettings = ROLLOUT,
    retrieval: dict = RETRIEVAL,
    backend_options: dict = BACKEND,
) -> None:
    """Estimate p_i = share of K rollouts judged correct, for every query in --data.

    Run it on the checkpoint GRPO starts from, with --config the training recipe, so that p_i describes the agent training shapes (the rows record the settings; `awarl train grpo` refuses others). Without --config, a checkpoint trained by awarl is measured under the rollout settings saved with it, else the defaults.
    """
    config = CapabilityConfig(
        model=model, data=data, out=out, rollout=rollout, k=k, temperature=temperature, shard=parse_shard(shard),
        max_concurrent=concurrency, chunk=chunk, seed=seed, trajectories=trajectories, backend_options=backend_options,
        **retrieval,
    )
    result = estimate(config, progress=not no_progress)
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
    n = merge(files, out, data)
    typer.echo(f"merged {len(files)} shard(s): {n} rows -> {out}")
