"""`awarl data …`: official benchmark files -> records.jsonl + corpus.jsonl.

Both commands write the output folder as a whole (`awarl.data.folders.replace_folder`): the new
files are built beside it and swapped in, so a failure (bad input, a full disk, a kill) leaves
the previous output untouched, never one data set's records beside another's corpus.
"""

from __future__ import annotations

from pathlib import Path

import typer

from awarl.cli_errors import warn
from awarl.data.adapters import format_names, get_format, load_dataset_file, load_hub
from awarl.data.folders import replace_folder
from awarl.data.records import DataError, Passage, QARecord, UniqueIds, load_corpus, load_records, write_jsonl

app = typer.Typer(no_args_is_help=True)

OUTPUT_FILES = ("records.jsonl", "corpus.jsonl")
"""What a prepared folder holds; ``--force`` replaces a folder holding only these."""

FORCE_HELP = "Replace an existing output folder (only one that holds nothing but records.jsonl and corpus.jsonl)."


def _write(out: Path, records: list[QARecord], passages: list[Passage], force: bool) -> tuple[int, int]:
    """Write both files into a staging folder and swap it in; a write failure (a full disk) is a
    `DataError` on ``out`` saying that its previous contents are unchanged."""
    try:
        with replace_folder(out, force=force, owned=OUTPUT_FILES) as staging:
            n_rec = write_jsonl(staging / "records.jsonl", (r.to_dict() for r in records))
            n_pas = write_jsonl(staging / "corpus.jsonl", (p.to_dict() for p in passages))
    except OSError as exc:
        before = "its previous contents are unchanged" if out.exists() else "nothing was written"
        raise DataError(out, "", f"could not write the output ({exc.strerror or exc}); {before}") from None
    return n_rec, n_pas


@app.command("prepare")
def prepare(
    dataset: str = typer.Option(..., "--dataset", help=f"Format of the input file: {format_names()}."),
    input: Path = typer.Option(None, "--input", help="Official data file (JSON list or JSONL)."),
    out: Path = typer.Option(..., "--out", help="Output folder for records.jsonl and corpus.jsonl (must be new or empty unless --force)."),
    hub_split: str = typer.Option(None, "--hub-split", help="Load from the Hugging Face hub instead of --input (needs a network)."),
    corpus: Path = typer.Option(None, "--corpus", help="Extra corpus.jsonl to merge (e.g. a wiki dump for FlashRAG questions)."),
    force: bool = typer.Option(False, "--force", help=FORCE_HELP),
) -> None:
    """Convert an official data file into DIR/records.jsonl and DIR/corpus.jsonl and print counts."""
    get_format(dataset)  # an unknown name stops here, before any file is read
    if (input is None) == (hub_split is None):
        raise typer.BadParameter("give exactly one of --input PATH or --hub-split SPLIT", param_hint="--input")
    records, passages = load_hub(dataset, hub_split) if hub_split else load_dataset_file(dataset, input)
    if corpus is not None:
        known = {p.id for p in passages}
        passages += [p for p in load_corpus(corpus) if p.id not in known]
    if not records:
        warn(f"{input or dataset}: 0 records; the output folder will hold an empty records.jsonl")
    n_rec, n_pas = _write(out, records, passages, force)
    unanswerable = sum(not r.answerable for r in records)
    typer.echo(
        f"{dataset}: {n_rec} records ({n_rec - unanswerable} answerable, {unanswerable} unanswerable), "
        f"{n_pas} passages -> {out}"
    )


@app.command("merge")
def merge(
    dirs: list[Path] = typer.Argument(..., help="Prepared folders (each with records.jsonl and corpus.jsonl)."),
    out: Path = typer.Option(..., "--out", help="Output folder for the merged records.jsonl and corpus.jsonl (must be new or empty unless --force)."),
    force: bool = typer.Option(False, "--force", help=FORCE_HELP),
) -> None:
    """Merge prepared data sets into one (e.g. HotpotQA + MuSiQue for training or a multi-data-set
    evaluation). Passages shared by several sets are kept once; a record id that appears twice is an error."""
    records: list[QARecord] = []
    passages: dict[str, Passage] = {}
    seen = UniqueIds(dirs[0] / "records.jsonl")  # a repeat names its own file (path=)
    origin: dict[str, str] = {}
    for folder in dirs:
        path = folder / "records.jsonl"
        for n, rec in enumerate(load_records(path), start=1):
            seen.add(rec.id, f"{path}, record {n}", problem=f"id {rec.id!r} is already in another data set", path=path)
            records.append(rec)
        corpus_path = folder / "corpus.jsonl"
        for n, p in enumerate(load_corpus(corpus_path), start=1):
            first = passages.setdefault(p.id, p)
            if first != p:  # same id, other text: keeping either would silently change citations
                raise DataError(corpus_path, f"passage {n}", f"id {p.id!r} names a different passage in "
                                f"{origin[p.id]}", "id")
            origin.setdefault(p.id, str(corpus_path))
    if not records:
        warn(f"the merged folders hold 0 records; {out} will hold an empty records.jsonl")
    _write(out, records, list(passages.values()), force)
    typer.echo(f"merged {len(dirs)} folders: {len(records)} records, {len(passages)} passages -> {out}")
