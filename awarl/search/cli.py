"""`awarl index …` and `awarl search …` (filled in by the search stage)."""

import typer

index_app = typer.Typer(no_args_is_help=True)
search_app = typer.Typer(no_args_is_help=True)
