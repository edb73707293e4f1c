"""`awarl data …`: official benchmark files -> records.jsonl + corpus.jsonl."""

from __future__ import annotations

from pathlib import Path

import typer

from awarl.cli_errors import fail
from awarl.data.adapters import DATASETS, load_dataset_file, load_hub
from awarl.data.records import DataError, load_corpus, write_jsonl

app = typer.Typer(no_args_is_help=True)


@app.command("prepare")
def prepare(
    dataset: str = typer.Option(..., "--dataset", help=f"Format of the input file: {', '.join(DATASETS)}."),
    input: Path = typer.Option(None, "--input", help="Official data file (JSON list or JSONL)."),
    out: Path = typer.Option(..., "--out", help="Output folder for records.jsonl and corpus.jsonl."),
    hub_split: str = typer.Option(None, "--hub-split", help="Load from the Hugging Face hub instead of --input (needs a network)."),
    corpus: Path = typer.Option(None, "--corpus", help="Extra corpus.jsonl to merge (e.g. a wiki dump for FlashRAG questions)."),
) -> None:
    """Convert an official data file into DIR/records.jsonl and DIR/corpus.jsonl and print counts."""
    if dataset not in DATASETS:
        raise typer.BadParameter(f"unknown dataset {dataset!r}; choose one of {', '.join(DATASETS)}", param_hint="--dataset")
    if (input is None) == (hub_split is None):
        raise typer.BadParameter("give exactly one of --input PATH or --hub-split SPLIT", param_hint="--input")
    try:
        records, passages = load_hub(dataset, hub_split) if hub_split else load_dataset_file(dataset, input)
        if corpus is not None:
            known = {p.id for p in passages}
            passages += [p for p in load_corpus(corpus) if p.id not in known]
    except DataError as exc:
        fail(exc)
    n_rec = write_jsonl(out / "records.jsonl", (r.to_dict() for r in records))
    n_pas = write_jsonl(out / "corpus.jsonl", (p.to_dict() for p in passages))
    unanswerable = sum(not r.answerable for r in records)
    typer.echo(
        f"{dataset}: {n_rec} records ({n_rec - unanswerable} answerable, {unanswerable} unanswerable), "
        f"{n_pas} passages -> {out}"
    )


@app.command("merge")
def merge(
    dirs: list[Path] = typer.Argument(..., help="Prepared folders (each with records.jsonl and corpus.jsonl)."),
    out: Path = typer.Option(..., "--out", help="Output folder for the merged records.jsonl and corpus.jsonl."),
) -> None:
    """Merge prepared data sets into one (e.g. HotpotQA + MuSiQue for training or a multi-data-set
    evaluation). Passages shared by several sets are kept once; a record id that appears twice is an error."""
    from awarl.data.records import load_records

    records, passages, seen = [], {}, {}
    try:
        for folder in dirs:
            for rec in load_records(folder / "records.jsonl"):
                if rec.id in seen:
                    raise DataError(folder / "records.jsonl", f"record {rec.id!r}", f"id already in {seen[rec.id]}", "id")
                seen[rec.id] = folder / "records.jsonl"
                records.append(rec)
            for p in load_corpus(folder / "corpus.jsonl"):
                passages.setdefault(p.id, p)
    except DataError as exc:
        fail(exc)
    write_jsonl(out / "records.jsonl", (r.to_dict() for r in records))
    write_jsonl(out / "corpus.jsonl", (p.to_dict() for p in passages.values()))
    typer.echo(f"merged {len(dirs)} folders: {len(records)} records, {len(passages)} passages -> {out}")
