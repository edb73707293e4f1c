"""`awarl verify …` (filled in by the verification stage)."""

import typer

app = typer.Typer(no_args_is_help=True)
