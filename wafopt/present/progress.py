"""Progress of a long solve on stderr through rich: the elapsed time, then what the method last
reported (incumbent, bound and gap from the HiGHS and CP-SAT callbacks, or a heuristic's best).

On a terminal one status line is redrawn in place and left on screen when the run ends; elsewhere
(a pipe, a log file) every report is a plain line. Solver logs are not progress: they appear only
with --verbose, and nothing appears with --quiet (the options never call the reporter then).
"""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING

from wafopt.core.budget import PROGRESS_STREAM, SolveOptions

if TYPE_CHECKING:
    from rich.console import Console
    from rich.live import Live


class ConsoleProgress:
    """A Budget reporter: `reporter(text)` for each progress line."""

    def __init__(self, console: Console):
        self.console = console
        self.started = time.monotonic()
        self.live: Live | None = None

    def line(self, text: str) -> str:
        text = text.strip()
        if text.startswith(".."):
            text = text[2:].strip()
        return f"{time.monotonic() - self.started:7.1f} s  {text}"

    def __call__(self, text: str) -> None:
        line = self.line(text)
        if self.live is not None:
            # rich loads with the first progress report: ~19 ms of start-up otherwise
            from rich.text import Text

            self.live.update(Text(line, overflow="ellipsis", no_wrap=True))
        else:
            self.console.print(line, markup=False, highlight=False, soft_wrap=True)


@contextmanager
def console_progress(options: SolveOptions, console: Console | None = None):
    """Report the run's progress (options.budget_.lines) through rich while the block runs."""
    if options.quiet:
        yield None
        return
    # rich: ~19 ms of every command's start-up, paid only by a run that reports progress
    from rich.console import Console
    from rich.live import Live
    from rich.text import Text

    console = console or Console(file=PROGRESS_STREAM or sys.stderr, stderr=True)
    reporter = ConsoleProgress(console)
    lines = options.budget_.lines
    previous, lines.reporter = lines.reporter, reporter
    try:
        if console.is_terminal:
            with Live(Text(reporter.line("starting")), console=console, refresh_per_second=4,
                      transient=False) as live:
                reporter.live = live
                yield reporter
        else:
            yield reporter
    finally:
        reporter.live = None
        lines.reporter = previous


class LevelProgress:
    """Progress of a run in levels (an exploration's fidelity levels): on a terminal one rich bar
    per level (tasks done of total, then what the run says of it), redrawn in place and left on
    screen; elsewhere a plain line when a level starts or ends, and at most every `every_s` seconds."""

    def __init__(self, console: Console | None = None, every_s: float = 10.0):
        # rich's bars load with the first exploration (start-up time, as above)
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self.console = console or Console(file=PROGRESS_STREAM or sys.stderr, stderr=True)
        self.every_s = every_s
        self.tasks: dict = {}
        self.last: dict = {}     # level -> (time, text) of its last plain line
        self.bars = Progress(TextColumn("{task.description:>3}"), BarColumn(bar_width=24), MofNCompleteColumn(),
                             TimeElapsedColumn(), TextColumn("{task.fields[info]}"), console=self.console,
                             transient=False) if self.console.is_terminal else None

    def __enter__(self) -> "LevelProgress":
        return self   # the bars start with the first report: a bad input shows no empty display

    def __exit__(self, *exc) -> None:
        if self.bars is not None and self.bars.live.is_started:
            self.bars.stop()

    def _start(self) -> None:
        if self.bars is not None and not self.bars.live.is_started:
            self.bars.start()

    def note(self, text: str) -> None:
        """A line of its own (above the bars on a terminal)."""
        self._start()
        self.console.print(text, markup=False, highlight=False, soft_wrap=True)

    def update(self, level: str, done: int, total: int, info: str = "") -> None:
        self._start()
        if self.bars is not None:
            if level not in self.tasks:
                self.tasks[level] = self.bars.add_task(level, total=total, info=info)
            self.bars.update(self.tasks[level], completed=done, total=total, info=info)
            return
        text = f"{level}: {done}/{total} {info}".rstrip()
        now = time.monotonic()
        when, said = self.last.get(level, (None, None))
        if text != said and (when is None or done >= total or now - when >= self.every_s):
            self.last[level] = (now, text)
            self.note(text)


EXPLORE_LEVELS = {"F0": "F0 bounds", "F1": "F1 tightened bounds", "F2": "F2 plans", "F3": "F3 simulations"}


def explore_progress(bars: LevelProgress):
    """An exploration's progress reporter: per fidelity level (named by what it computes), tasks
    done, designs pruned and still in play, the best so far and the least bound of the designs that
    could still beat it, with that bound less the model error, which is what the best must beat
    for the rest to be pruned."""
    def report(level: str, info: dict) -> None:
        if level == "enumerate":
            bars.note("enumerated: " + ", ".join(f"{k} {v}" for k, v in info["counts"].items()))
            return
        text = f"pruned {info['pruned']}, remaining {info['remaining']}"
        if info.get("best"):
            text += f", best {info['best']} {info['best_value']:.4g}"
        if info.get("bound") is not None:
            text += f", least bound {info['bound']:.4g}"
            if info.get("epsilon"):
                text += f" ({(1 - info['epsilon']) * info['bound']:.4g} less the {100 * info['epsilon']:.2g}% model error)"
        bars.update(EXPLORE_LEVELS.get(level, level), info["done"], info["total"], text)
    return report
