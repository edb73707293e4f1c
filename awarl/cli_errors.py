"""One way for every command to report bad input: a red ``error:`` line on stderr, then exit."""

from __future__ import annotations

from typing import NoReturn

import typer


def fail(problem: Exception | str, code: int = 1) -> NoReturn:
    """Print ``error: <problem>`` (the message names the file, line, field or request) and exit
    with ``code`` (1: bad data or a failed run; 2: a bad recipe or command line)."""
    from rich.console import Console
    from rich.markup import escape

    Console(stderr=True).print(f"[red]error:[/red] {escape(str(problem))}", soft_wrap=True, highlight=False)
    raise typer.Exit(code)
