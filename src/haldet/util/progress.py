"""Progress that stays visible when output is not a terminal.

On a terminal, the stages draw rich progress bars. Redirected to a log file, bars print nothing until the end,
so a long run looked dead: there, every stage prints a start line, a count line every `interval` seconds
while it runs (also in the middle of one long batch), and a final line with its time and rate. Same factory
signature either way: `(description, total) -> advance(n)`; a total of 0 is a one-line note (a phase with no
count).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

Advance = Callable[[int], None]
Factory = Callable[[str, int], Advance]


def _stamp() -> str:
    return time.strftime("%H:%M:%S")


@dataclass(eq=False)
class _Task:
    description: str
    total: int
    start: float
    last: float
    done: int = 0
    stored: int | None = None  # items kept on disk, for a task that stores in batches (None: it does not say)


def finish(advance: Advance) -> None:
    """End a task that counted fewer items than its total (items dropped, names exhausted): its done line now, and
    no more count lines for it. A no-op for displays that do not track tasks."""
    close = getattr(advance, "finish", None)
    if callable(close):
        close()


def stored(advance: Advance, n: int) -> None:
    """`n` more of the task's items are stored on disk (a stage appends whole batches): count lines then say how
    many of the items counted so far are kept, so an interrupted run's progress never overstates what is kept."""
    mark = getattr(advance, "stored", None)
    if callable(mark):
        mark(n)


class _LineAdvance:
    """The advance function of one `LogLines` task, with `finish` and `stored`."""

    def __init__(self, lines: LogLines, task: _Task) -> None:
        self.lines, self.task = lines, task

    def __call__(self, n: int) -> None:
        with self.lines.lock:
            self.task.done += n
            if self.task.done >= self.task.total:
                self.lines.close(self.task)
                return
        self.lines.tick()

    def finish(self) -> None:
        with self.lines.lock:
            self.lines.close(self.task)

    def stored(self, n: int) -> None:
        with self.lines.lock:
            self.task.stored = (self.task.stored or 0) + n


class LogLines:
    """A progress factory that writes plain lines (for logs). `tick()` writes a count line for every running
    stage whose last line is `interval` seconds old, so a stage stuck in one long batch still shows it is alive;
    `progress_factory` calls it from a heartbeat thread."""

    def __init__(self, write: Callable[[str], None], interval: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.write, self.interval, self.clock = write, interval, clock
        self.running: list[_Task] = []
        self.lock = threading.Lock()

    def __call__(self, description: str, total: int) -> Advance:
        if total <= 0:
            self.write(f"[{_stamp()}] {description}")
            return lambda n: None
        now = self.clock()
        task = _Task(description, total, now, now)
        with self.lock:
            self.running.append(task)
        self.write(f"[{_stamp()}] {description}: started, {total} to do")
        return _LineAdvance(self, task)

    def close(self, task: _Task) -> None:
        """The task's done line (once; the caller holds the lock)."""
        if task not in self.running:
            return
        self.running.remove(task)
        took = self.clock() - task.start
        rate = f", {task.done / took:.2f}/s" if took > 0 else ""
        self.write(f"[{_stamp()}] {task.description}: done {task.done}/{task.total} in {took:.0f} s{rate}")

    def tick(self) -> None:
        now = self.clock()
        with self.lock:
            for task in self.running:
                if now - task.last < self.interval:
                    continue
                task.last = now
                spent = now - task.start
                left = f", about {spent / task.done * (task.total - task.done):.0f} s left" if task.done else ""
                kept = "" if task.stored is None or task.stored >= task.done else \
                    f" computed, {task.stored} stored (the rest when their batch is)"
                self.write(f"[{_stamp()}] {task.description}: {task.done}/{task.total}{kept} "
                           f"({task.done / task.total:.0%}), {spent:.0f} s so far{left}")

    def heartbeat(self, stop: threading.Event) -> None:
        """Tick every second until `stop` is set (run in a daemon thread)."""
        while not stop.wait(1.0):
            self.tick()


@contextmanager
def progress_factory(console: Console, interval: float = 30.0) -> Iterator[Factory]:
    """Rich bars on a terminal, log lines otherwise."""
    if not console.is_terminal:
        lines = LogLines(lambda text: console.print(text, highlight=False, markup=False, soft_wrap=True), interval)
        stop = threading.Event()
        beat = threading.Thread(target=lines.heartbeat, args=(stop,), daemon=True, name="haldet-progress")
        beat.start()
        try:
            yield lines
        finally:
            stop.set()
            beat.join(timeout=2)
        return
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TimeRemainingColumn(), console=console, transient=False) as progress:

        def make(description: str, total: int) -> Advance:
            if total <= 0:
                progress.console.print(description, highlight=False, markup=False)
                return lambda n: None
            return _BarAdvance(progress, description, total)

        yield make


class _BarAdvance:
    """The advance function of one rich bar, with `finish` (the bar ends full at the count reached) and `stored`
    (the description says how many are kept while fewer are than the bar counts)."""

    def __init__(self, progress: Progress, description: str, total: int) -> None:
        self.progress, self.description = progress, description
        self.task = progress.add_task(description, total=total)
        self.kept: int | None = None

    def __call__(self, n: int) -> None:
        self.progress.advance(self.task, n)
        self._describe()

    def finish(self) -> None:
        self.progress.update(self.task, total=next((t.completed for t in self.progress.tasks if t.id == self.task), 0))

    def stored(self, n: int) -> None:
        self.kept = (self.kept or 0) + n
        self._describe()

    def _describe(self) -> None:
        if self.kept is None:
            return
        done = next((t.completed for t in self.progress.tasks if t.id == self.task), 0)
        suffix = f" ({self.kept} stored)" if self.kept < done else ""
        self.progress.update(self.task, description=self.description + suffix)
