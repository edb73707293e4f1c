"""Per-query capability p_i (filled in by the capability stage)."""

import typer

app = typer.Typer(no_args_is_help=True)
