"""`awarl data …`: official benchmark files -> records.jsonl + corpus.jsonl."""

import typer

app = typer.Typer(no_args_is_help=True)
