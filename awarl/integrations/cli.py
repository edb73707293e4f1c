"""`awarl export-dataset`: a p_i table or an evaluation run as a hub-ready ``datasets`` dataset."""

from __future__ import annotations

from pathlib import Path

import typer


def export_dataset_command(
    source: Path = typer.Argument(..., help="A p_i table (`awarl capability estimate` JSONL) or an `awarl eval run` "
                                            "folder."),
    out: Path = typer.Option(..., "--out", help="Folder for README.md (dataset card), data/*.parquet and arrow/."),
    name: str = typer.Option(None, "--name", help="Dataset name in the card (default: the --out folder name)."),
) -> None:
    """Write SOURCE as a Hugging Face dataset: parquet in the hub's layout, save_to_disk output, and a dataset card
    with its provenance (checkpoint, K, temperature, rollout settings). Upload it with
    `hf upload --repo-type dataset you/name OUT` (awarl never uploads)."""
    from awarl.integrations.hub import convert, save_hub_dataset

    ds = convert(source)  # bad input is a DataError naming the file, line and field (exit 1, one error: line)
    folder = save_hub_dataset(ds, out, name)
    typer.echo(f"{len(ds.rows)} rows ({ds.kind}, split {ds.split}) -> {folder} "
               f"(load_dataset({str(folder)!r}) or load_from_disk({str(folder / 'arrow')!r}))")
