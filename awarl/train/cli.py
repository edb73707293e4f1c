"""`awarl train …`, `awarl sweep`, `awarl export` (filled in by the training stage)."""

import typer

app = typer.Typer(no_args_is_help=True)


def sweep_command() -> None:
    """Run one training per courage factor gamma."""
    raise typer.Exit(2)


def export_command() -> None:
    """Export a trained checkpoint."""
    raise typer.Exit(2)
