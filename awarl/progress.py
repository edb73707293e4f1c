"""The one progress display of awarl's long stages: a rich bar on stderr.

    >>> with ProgressBar("p_i", total=2, unit="queries", rate_unit="rollouts", enabled=False) as bar:
    ...     bar.count(8)
    ...     bar.advance(2)
    >>> bar.done, bar.counted
    (2, 8)

A stage advances the bar by the units it reports (queries, questions) and may count a finer event
(rollouts) whose rate per second is shown beside it. ``enabled=False`` (``--no-progress``, the demo's
own display) draws nothing but still counts.
"""

from __future__ import annotations

import time
from typing import Any


class ProgressBar:
    """``label [bar] done/total unit  rate rate_unit/s  elapsed  remaining`` on stderr.

    Args:
        label: bold name at the left (``p_i``, ``eval``).
        total: units to finish.
        unit: what ``advance`` counts (shown after done/total).
        rate_unit: what ``count`` counts; when given, its rate per second is shown.
        enabled: draw the bar (else only count).
        console: a ``rich.console.Console`` to draw on (default: a new one on stderr).
    """

    def __init__(self, label: str, total: int, unit: str, *, rate_unit: str | None = None, enabled: bool = True,
                 console: Any = None) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        columns: list[Any] = [TextColumn(f"[bold]{label}[/bold]"), BarColumn(), MofNCompleteColumn(), TextColumn(unit)]
        if rate_unit:
            columns.append(TextColumn(f"{{task.fields[rate]:.2f}} {rate_unit}/s"))
        columns += [TimeElapsedColumn(), TimeRemainingColumn()]
        self.progress = Progress(*columns, console=console or Console(stderr=True), disable=not enabled)
        self.task = self.progress.add_task(label, total=total, rate=0.0)
        self.done = self.counted = 0
        self.started = time.perf_counter()

    def __enter__(self) -> "ProgressBar":
        self.started = time.perf_counter()
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def advance(self, n: int = 1) -> None:
        """``n`` more units finished."""
        self.done += n
        self.progress.advance(self.task, n)

    def count(self, n: int = 1) -> None:
        """``n`` more of the finer events (the rate column)."""
        self.counted += n
        self.progress.update(self.task, rate=self.counted / max(time.perf_counter() - self.started, 1e-9))
