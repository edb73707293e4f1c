"""`awarl eval …`: score predictions, run the agent over a data set, build reports."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from awarl.agent.options import BACKEND, RETRIEVAL, ROLLOUT, backend_options, retrieval_options, rollout_options
from awarl.agent.settings import RolloutSettings
from awarl.data.adapters import format_names

app = typer.Typer(no_args_is_help=True)


@app.command("score")
def score_command(
    data: Path = typer.Option(..., "--data", help="Official data file or a prepared records.jsonl."),
    predictions: Path = typer.Option(..., "--predictions", help="awarl JSONL, HotpotQA/2Wiki pred JSON, MuSiQue pred JSONL, a JSON list of rows or an {id: answer} object."),
    dataset: str = typer.Option(None, "--dataset", help=f"Format of --data when it is an official file: {format_names()}."),
    metric: str = typer.Option("em", "--metric", help="What 'correct' means: em (default) or f1 (F1 >= 0.5)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of a table."),
) -> None:
    """Score a predictions file: precision, accuracy, RA-F1, refusal rate, EM, F1."""
    from awarl.eval.score import score_predictions

    if metric not in ("em", "f1"):
        raise typer.BadParameter("choose em or f1", param_hint="--metric")
    run = score_predictions(data, predictions, dataset, metric=metric)
    result = run.metrics.to_dict()
    if len(run.per_dataset) > 1:
        result["per_dataset"] = {k: m.to_dict() for k, m in run.per_dataset.items()}
        result["macro"] = run.macro
    if as_json:
        typer.echo(json.dumps(result))
        return
    columns = ("n", "answered", "abstained", "correct", "precision", "accuracy", "ra_f1", "refusal_rate", "em", "f1")
    table = Table(title=f"{predictions.name} vs {data.name}")
    table.add_column("dataset")
    for col in columns:
        table.add_column(col, justify="right")
    rows = dict(run.per_dataset) if len(run.per_dataset) > 1 else {}
    rows["all"] = run.metrics
    for name, m in rows.items():
        d = m.to_dict()
        table.add_row(name, *[str(d[c]) if isinstance(d[c], int) else f"{d[c]:.4f}" for c in columns])
    if len(run.per_dataset) > 1:  # the number papers report: the mean over data sets ("all" pools their questions)
        table.add_row("macro avg", *[f"{run.macro[c]:.4f}" if isinstance(run.macro.get(c), float) else "–" for c in columns])
    Console(width=150).print(table)
    if run.metrics.abstain_recall is not None:
        typer.echo(f"abstain-recall on unanswerable: {run.metrics.abstain_recall:.4f}; "
                   f"over-refusal on answerable: {run.metrics.over_refusal if run.metrics.over_refusal is not None else 'n/a'}")


@app.command("run")
@rollout_options(checkpoint_param="model")
@retrieval_options
@backend_options
def run_command(
    model: str = typer.Option(..., "--model", help="Backend spec: PATH, hf:PATH, vllm:PATH or openai:URL#MODEL."),
    data: Path = typer.Option(..., "--data", help="A prepared records.jsonl, or an official data file with --dataset."),
    out: Path = typer.Option(..., "--out", help="Run folder (resumed if it exists)."),
    dataset: str = typer.Option(None, "--dataset", help=f"Format of --data when it is an official file: {format_names()}."),
    name: str = typer.Option(None, "--name", help="Run name in reports (default: the folder name)."),
    limit: int = typer.Option(None, "--limit", help="Only the first N questions of each data set."),
    temperature: float = typer.Option(0.0, "--temperature", help="0 = greedy (default)."),
    concurrency: int = typer.Option(64, "--concurrency", help="Questions in flight at once."),
    seed: int = typer.Option(0, "--seed", help="Run seed: question q samples (and draws a world's search noise) from "
                                               "a stream seeded by (seed, q); `awarl demo --seed S` evaluates with S."),
    no_progress: bool = typer.Option(False, "--no-progress", help="No progress bar."),
    rollout: RolloutSettings = ROLLOUT,
    retrieval: dict = RETRIEVAL,
    backend_options: dict = BACKEND,
) -> None:
    """Run the agent over evaluation data; write trajectories, official predictions and metrics.

    The agent's settings come from --config (the training recipe), else from the checkpoint's saved settings, else the defaults; options override them.
    """
    from awarl.eval.run import EvalConfig, run_eval

    config = EvalConfig(model=model, data=data, out=out, rollout=rollout, dataset=dataset, name=name, limit=limit,
                        temperature=temperature, max_concurrent=concurrency, seed=seed, backend_options=backend_options,
                        **retrieval)
    result = run_eval(config, progress=not no_progress)
    m = result.metrics["macro"]
    typer.echo(f"{result.evaluated} questions run, {result.skipped} already done -> {result.out}")
    typer.echo(f"macro avg: precision {m['precision']:.4f}  accuracy {m['accuracy']:.4f}  RA-F1 {m['ra_f1']:.4f}  "
               f"refusal {m['refusal_rate']:.4f}  EM {m['em']:.4f}  F1 {m['f1']:.4f}  "
               f"searches/q {m['searches_per_question']:.2f}")


@app.command("report")
def report_command(
    runs: list[Path] = typer.Argument(..., help="Run folders written by `awarl eval run`."),
    out: Path = typer.Option(Path("report"), "--out", help="Folder for report.md, report.json and the PNG plots."),
    bootstrap: int = typer.Option(1000, "--bootstrap", min=0,
                                  help="Bootstrap resamples for the 95% intervals and the paired differences (0: none)."),
) -> None:
    """Table (per data set + macro average) in Markdown and JSON, frontier and calibration plots, 95%
    bootstrap intervals, paired differences of each run against the first, and the passages' fingerprints."""
    from awarl.eval.report import build_report

    paths = build_report(runs, out, bootstrap=bootstrap)
    typer.echo(paths["markdown"].read_text(encoding="utf-8"))
    typer.echo("wrote " + ", ".join(str(p) for p in paths.values()))
    for warning in json.loads(paths["json"].read_text(encoding="utf-8"))["warnings"]:
        typer.echo(f"warning: {warning}", err=True)
