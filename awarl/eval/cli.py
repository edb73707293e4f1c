"""`awarl eval …`: score predictions, run the agent over a data set, build reports."""

import typer

app = typer.Typer(no_args_is_help=True)
