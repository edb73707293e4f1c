"""The one error tree of awarl: every error a user can cause or meet is an `AwarlError`.

Each kind carries the exit code the ``awarl`` command ends with (``awarl.cli`` catches them once):
1 for bad data or a run that failed, 2 for a recipe, config or command line that cannot work.
The message always names what to look at (the file, line, field or request) and, where there is
one, the fix. The kinds also derive from the builtin they refine (``ValueError`` for bad input,
``RuntimeError`` for a failed call), so library code that catches those keeps catching them.

This module imports nothing of awarl, so every layer may raise these.

    >>> err = ConfigError("recipe.yaml: reward.gamma must be in (0, 1], got 2")
    >>> err.exit_code, isinstance(err, ValueError)
    (2, True)
    >>> str(DataError("records.jsonl", "line 7", "missing required field", "question"))
    "records.jsonl, line 7, field 'question': missing required field"
"""

from __future__ import annotations

from pathlib import Path


class AwarlError(Exception):
    """Base of every awarl error; ``exit_code`` is what the ``awarl`` command exits with."""

    exit_code: int = 1


class ConfigError(AwarlError, ValueError):
    """A configuration (recipe, chat config, command-line value) that cannot work; the message names
    the file or section, the field, the problem and the fix."""

    exit_code = 2


class DataError(AwarlError, ValueError):
    """Bad input data; the message names the file, the line or index, and the field.

    ``where`` is the position in the file (``"line 7"``, ``"example 3 (index 3)"``); an empty
    ``where`` (or ``"-"``) means the problem is the file as a whole, and the message is then just
    ``file: problem``.
    """

    def __init__(self, path: str | Path, where: str, problem: str, field_name: str | None = None):
        self.path, self.where, self.problem, self.field = str(path), where, problem, field_name
        parts = [str(path)]
        if where and where != "-":
            parts.append(where)
        if field_name:
            parts.append(f"field '{field_name}'")
        super().__init__(f"{', '.join(parts)}: {problem}")


class SearchError(AwarlError, RuntimeError):
    """Retrieval failed: a bad request (unknown passage id, bad k) or an unreachable server."""


class BackendError(AwarlError, RuntimeError):
    """A generation backend could not be loaded or could not answer; the message says which model or request."""


class PolicyError(AwarlError, ValueError):
    """A bad policy or expression; the message names the source, the element and the problem
    (``where`` is "file" when the problem is the file as a whole)."""

    exit_code = 2

    def __init__(self, source: str, where: str, problem: str):
        self.source, self.where, self.problem = source, where, problem
        super().__init__(f"{source}: {problem}" if where == "file" else f"{source}, {where}: {problem}")


__all__ = ["AwarlError", "BackendError", "ConfigError", "DataError", "PolicyError", "SearchError"]
