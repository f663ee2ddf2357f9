"""Exclusive file locks for run directories: one writer at a time per run, per cell stage, per score log.

Every process that writes into a run directory takes `RUN/run.lock` for the whole command (`RunStore.lock`), and
every writer of one log or array folder takes that writer's own lock (`CellStore.lock(name)`) around its
read-then-append, so two processes never compute or append the same item twice. The locks are `flock` locks on
small files next to what they guard: the kernel releases them when the holder dies (kill -9 leaves nothing to
clean up). They are re-entrant within a thread (a command holding the run lock may call helpers that take it
again) and exclusive across threads and processes.

A process that finds a lock taken says who holds it (pid, command, since when, read from the lock file) and then
waits, or with `wait=False` raises `BusyError` at once.
"""

from __future__ import annotations

import datetime as _dt
import fcntl
import json
import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from haldet.errors import HaldetError

_held = threading.local()  # per thread: {lock path: depth}


class BusyError(HaldetError):
    """Another process holds the lock and the caller chose not to wait."""


def _notify_stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


notify: Callable[[str], None] = _notify_stderr  # where "waiting for ..." messages go (the CLI may replace it)


def holder(path: Path) -> str:
    """Who holds (or last held) a lock, as written by the holder: 'pid N (command) since T', or ''."""
    try:
        info = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        return ""
    if not isinstance(info, dict) or "pid" not in info:
        return ""
    return f"pid {info['pid']} ({info.get('command', '?')}) since {info.get('since', '?')}"


@contextmanager
def file_lock(path: Path, *, what: str, wait: bool = True) -> Iterator[None]:
    """Hold an exclusive lock on `path` (created if missing) for the duration of the block.

    `what` names the guarded thing in messages ("run directory runs/x"). Re-entrant within one thread.
    """
    key = str(Path(path).absolute())
    depth: dict[str, int] = _held.__dict__.setdefault("depth", {})
    if depth.get(key):
        depth[key] += 1
        try:
            yield
        finally:
            depth[key] -= 1
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            who = holder(path) or "another process"
            if not wait:
                raise BusyError(f"{what} is busy: {who} is working on it", where=str(path),
                                hint="wait for that command to finish (or stop it), then run again") from None
            notify(f"{what} is busy ({who}); waiting for it to finish. Ctrl-C stops waiting; nothing is lost.")
            fcntl.flock(fd, fcntl.LOCK_EX)
        _write_holder(fd)
        depth[key] = 1
        try:
            yield
        finally:
            depth.pop(key, None)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _write_holder(fd: int) -> None:
    """Record who holds the lock (best effort: a full disk must not stop the locked work)."""
    info = {"pid": os.getpid(), "command": " ".join(os.path.basename(a) if i == 0 else a
                                                   for i, a in enumerate(sys.argv))[:200],
            "since": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")}
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(info).encode(), 0)
    except OSError:
        pass
