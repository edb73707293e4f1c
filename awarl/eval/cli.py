"""`awarl eval …`: score predictions, run the agent over a data set, build reports."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from awarl.data.records import DataError

app = typer.Typer(no_args_is_help=True)
console = Console(stderr=True)


@app.command("score")
def score_command(
    data: Path = typer.Option(..., "--data", help="Official data file or a prepared records.jsonl."),
    predictions: Path = typer.Option(..., "--predictions", help="awarl JSONL, HotpotQA/2Wiki pred JSON or MuSiQue pred JSONL."),
    dataset: str = typer.Option(None, "--dataset", help="Format of --data when it is an official file (hotpotqa, 2wiki, musique, flashrag)."),
    metric: str = typer.Option("em", "--metric", help="What 'correct' means: em (default) or f1 (F1 >= 0.5)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of a table."),
) -> None:
    """Score a predictions file: precision, accuracy, RA-F1, refusal rate, EM, F1."""
    from awarl.eval.score import score_predictions

    if metric not in ("em", "f1"):
        raise typer.BadParameter("choose em or f1", param_hint="--metric")
    try:
        run = score_predictions(data, predictions, dataset, metric=metric)
    except DataError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from None
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
    Console(width=150).print(table)
    if run.metrics.abstain_recall is not None:
        typer.echo(f"abstain-recall on unanswerable: {run.metrics.abstain_recall:.4f}; "
                   f"over-refusal on answerable: {run.metrics.over_refusal if run.metrics.over_refusal is not None else 'n/a'}")
