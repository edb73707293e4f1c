"""One way for every command to report bad input: a red ``error:`` line on stderr, then exit;
and a yellow ``warning:`` line for results that are valid but probably not what was meant."""

from __future__ import annotations

from typing import NoReturn

import typer


def _print(label: str, message: str) -> None:
    from rich.console import Console
    from rich.markup import escape

    Console(stderr=True).print(f"{label} {escape(message)}", soft_wrap=True, highlight=False)


def fail(problem: Exception | str, code: int = 1) -> NoReturn:
    """Print ``error: <problem>`` (the message names the file, line, field or request) and exit
    with ``code`` (1: bad data or a failed run; 2: a bad recipe or command line)."""
    _print("[red]error:[/red]", str(problem))
    raise typer.Exit(code)


def warn(message: str) -> None:
    """Print ``warning: <message>`` on stderr and carry on (e.g. an input with 0 records)."""
    _print("[yellow]warning:[/yellow]", message)


def print_error(message: str) -> None:
    """Print ``error: <message>`` without exiting (for the entry point's last-resort handler)."""
    _print("[red]error:[/red]", message)
