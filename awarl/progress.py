"""The one progress display of awarl's long stages: rich bars on stderr (or a given console).

    >>> with Progress(enabled=False) as progress:
    ...     bar = progress.add("p_i", total=2, unit="queries", rate_unit="rollouts")
    ...     bar.count(8)
    ...     bar.advance(2)
    >>> bar.done, bar.counted
    (2, 8)

Every bar reads ``label [bar] done/total unit  rate  elapsed  remaining  info``. A stage advances
its bar by the units it reports (queries, questions, steps) and may count a finer event
(rollouts) whose rate per second is shown beside it. On a terminal the bars are live; on anything
else (a log file, a pipe) a bar prints a line when it starts, when it finishes and at most every
``every_s`` seconds between, so a long stage in a log is never silent. ``enabled=False``
(``--no-progress``) draws nothing but still counts; messages (`Progress.print`) always print,
above the bars.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class Progress:
    """The display: `add` a bar per stage, `remove` it when the stage is over, `print` above."""

    def __init__(self, *, console: Any = None, enabled: bool = True, transient: bool = False, every_s: float = 5.0) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
        from rich.progress import Progress as Rich

        self.console = console or Console(stderr=True)
        self.enabled, self.live = enabled, enabled and self.console.is_terminal
        self.every_s, self.last_line = every_s, 0.0
        self.rich = Rich(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                         TextColumn("{task.fields[unit]}"), TextColumn("{task.fields[rate]}"), TimeElapsedColumn(),
                         TimeRemainingColumn(), TextColumn("{task.fields[info]}"),
                         console=self.console, disable=not self.live, transient=transient, refresh_per_second=2)

    def __enter__(self) -> "Progress":
        self.rich.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.rich.stop()

    def add(self, label: str, total: int | None, *, unit: str = "", rate_unit: str | None = None, info: str = "") -> "Bar":
        """A new bar (``label`` may hold rich markup); ``total`` None while it is not known."""
        return Bar(self, label, total, unit, rate_unit, info)

    def remove(self, bar: "Bar") -> None:
        self.rich.remove_task(bar.task)

    def print(self, message: str) -> None:
        """A message above the bars (rich markup)."""
        self.console.print(message)

    def task(self, bar: "Bar") -> Any:
        """The rich task of ``bar`` (its total and fields)."""
        return next(t for t in self.rich.tasks if t.id == bar.task)

    def line(self, bar: "Bar", force: bool) -> None:
        """Off a terminal: the bar as one plain line, when forced or ``every_s`` after the last."""
        if not self.enabled or self.live or not (force or time.monotonic() - self.last_line >= self.every_s):
            return
        from rich.text import Text

        task = self.task(bar)
        parts = [Text.from_markup(bar.label).plain, f"{bar.done}/{'?' if task.total is None else int(task.total)}",
                 task.fields["unit"], task.fields["rate"], task.fields["info"]]
        self.console.print(" ".join(p for p in parts if p), markup=False, highlight=False)
        self.last_line = time.monotonic()


class Bar:
    """One bar of a `Progress`: ``done`` units finished, ``counted`` finer events."""

    def __init__(self, progress: Progress, label: str, total: int | None, unit: str, rate_unit: str | None, info: str):
        self.progress, self.label, self.rate_unit = progress, label, rate_unit
        self.done = self.counted = 0
        self.started = time.perf_counter()
        self.task = progress.rich.add_task(label, total=total, unit=unit, rate=self._rate(), info=info)
        progress.line(self, force=True)

    def advance(self, n: int = 1) -> None:
        """``n`` more units finished."""
        self.update(completed=self.done + n)

    def count(self, n: int = 1) -> None:
        """``n`` more of the finer events (the rate column)."""
        self.counted += n
        self.progress.rich.update(self.task, rate=self._rate())

    def update(self, *, completed: int | None = None, total: int | None = None, info: str | None = None) -> None:
        """Move the bar to ``completed``, change its ``total`` or its ``info`` text."""
        fields: dict[str, Any] = {} if info is None else {"info": info}
        if total is not None:
            fields["total"] = total
        if completed is not None:
            self.done = completed
        self.progress.rich.update(self.task, completed=self.done, **fields)
        total = self.progress.task(self).total
        self.progress.line(self, force=total is not None and self.done >= total)

    def _rate(self) -> str:
        if not self.rate_unit:
            return ""
        return f"{self.counted / max(time.perf_counter() - self.started, 1e-9):.2f} {self.rate_unit}/s"


@contextmanager
def progress_bar(label: str, total: int, unit: str, *, rate_unit: str | None = None, enabled: bool = True,
                 console: Any = None) -> Iterator[Bar]:
    """A display with one bar: ``label`` in bold, ``total`` units of ``unit``, the rate of ``rate_unit``."""
    with Progress(console=console, enabled=enabled) as progress:
        yield progress.add(f"[bold]{label}[/bold]", total, unit=unit, rate_unit=rate_unit)
