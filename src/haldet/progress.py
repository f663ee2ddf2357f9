"""Progress that stays visible when output is not a terminal.

On a terminal, the stages draw rich progress bars. Redirected to a log file, bars print nothing until the end,
so a long run looked dead: there, every stage prints a start line, a count line at least every `interval`
seconds while it runs, and a final line with its time and rate. Same factory signature either way:
`(description, total) -> advance(n)`; a total of 0 is a one-line note (a phase with no count).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

Advance = Callable[[int], None]
Factory = Callable[[str, int], Advance]


def _stamp() -> str:
    return time.strftime("%H:%M:%S")


def log_lines(write: Callable[[str], None], interval: float = 30.0,
              clock: Callable[[], float] = time.monotonic) -> Factory:
    """A progress factory that writes plain lines (for logs)."""

    def make(description: str, total: int) -> Advance:
        if total <= 0:
            write(f"[{_stamp()}] {description}")
            return lambda n: None
        start = last = clock()
        done = 0
        write(f"[{_stamp()}] {description}: started, {total} to do")

        def advance(n: int) -> None:
            nonlocal done, last
            done += n
            now = clock()
            if done >= total:
                took = now - start
                rate = f", {done / took:.2f}/s" if took > 0 else ""
                write(f"[{_stamp()}] {description}: done {done}/{total} in {took:.0f} s{rate}")
            elif now - last >= interval:
                last = now
                left = (now - start) / done * (total - done) if done else float("nan")
                write(f"[{_stamp()}] {description}: {done}/{total} ({done / total:.0%}), {now - start:.0f} s so far, "
                      f"about {left:.0f} s left")

        return advance

    return make


@contextmanager
def progress_factory(console: Console, interval: float = 30.0) -> Iterator[Factory]:
    """Rich bars on a terminal, log lines otherwise."""
    if not console.is_terminal:
        yield log_lines(lambda text: console.print(text, highlight=False, markup=False, soft_wrap=True), interval)
        return
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TimeRemainingColumn(), console=console, transient=False) as progress:

        def make(description: str, total: int) -> Advance:
            if total <= 0:
                progress.console.print(description, highlight=False, markup=False)
                return lambda n: None
            task = progress.add_task(description, total=total)
            return lambda n: progress.advance(task, n)

        yield make
