"""The one progress display: live bars on a terminal, plain lines elsewhere, counting when disabled."""

from __future__ import annotations

import io

from rich.console import Console

from awarl.progress import Progress, progress_bar


def console(terminal: bool) -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=terminal, width=160), out


def test_off_a_terminal_a_bar_prints_a_line_at_start_at_finish_and_every_few_seconds():
    con, out = console(terminal=False)
    with Progress(console=con, every_s=3600) as progress:
        bar = progress.add("[bold]lint: consistency[/bold]", 3, unit="pairs", info="rules")
        bar.advance()
        bar.advance()  # within every_s of the last line: silent
        bar.advance()
        progress.print("a message")
    assert out.getvalue().splitlines() == ["lint: consistency 0/3 pairs rules", "lint: consistency 3/3 pairs rules",
                                           "a message"]
    con, out = console(terminal=False)
    with Progress(console=con, every_s=0) as progress:
        bar = progress.add("eval", None)
        bar.update(completed=1, info="greedy")
        bar.update(total=2)
    assert out.getvalue().splitlines() == ["eval 0/?", "eval 1/? greedy", "eval 1/2 greedy"]


def test_on_a_terminal_the_bar_is_live_with_its_unit_and_rate():
    con, out = console(terminal=True)
    with progress_bar("p_i", total=4, unit="queries", rate_unit="rollouts", console=con) as bar:
        bar.count(8)
        bar.advance(4)
    text = out.getvalue()
    assert "p_i" in text and "4/4" in text and "queries" in text and "rollouts/s" in text
    assert (bar.done, bar.counted) == (4, 8)


def test_disabled_it_draws_nothing_counts_and_still_prints_messages():
    con, out = console(terminal=False)
    with Progress(console=con, enabled=False) as progress:
        bar = progress.add("p_i", 2, rate_unit="rollouts")
        bar.count(3)
        bar.advance(2)
        progress.print("✓ done")
    assert out.getvalue() == "✓ done\n" and (bar.done, bar.counted) == (2, 3)
