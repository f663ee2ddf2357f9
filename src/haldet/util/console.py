"""What every command shares for output: the two consoles, error lines, progress displays, the failure summary and
the JSON/table printers. Below the suites so that a suite's own commands (`suites/<name>/commands.py`) print like
haldet's; command modules import this, never `haldet.cli` (which imports them)."""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from haldet.util.tables import print_tables

EXIT_FAILURES = 1  # the exit status of a command that finished with failures it did not accept
ALLOW_HINT = "rerun to retry only the failed items, or pass --allow-failures to accept a partial result"

console = Console(stderr=True, emoji=False)  # model specs like openai:m: must not turn into emoji
out_console = Console(emoji=False)


def print_error(message: str) -> None:
    """The one line a user error (`HaldetError`, a storage error) becomes, on stderr, without a traceback."""
    console.print(f"[bold red]error:[/bold red] {message}", highlight=False)


@contextmanager
def progress_bars() -> Iterator[Callable[[str, int], Callable[[int], None]]]:
    """A factory of progress displays for the stages, (description, total) -> advance(n): bars on a terminal,
    periodic log lines when stderr is redirected (haldet.util.progress)."""
    from haldet.util.progress import progress_factory  # lazy: start-up

    with progress_factory(console) as make:
        yield make


def exit_on_failures(failures: list[str], allow: bool) -> None:
    """The closing summary of what failed (e.g. `haldet.cli.outcome`'s); exit status 1 unless `--allow-failures`."""
    if not failures:
        return
    color = "yellow" if allow else "red"
    console.print(f"[{color}]finished with {len(failures)} failure(s):[/{color}]")
    for line in failures:
        console.print(f"  - {line}", highlight=False, markup=False, emoji=False)
    if not allow:
        console.print(f"  -> exit status 1: {ALLOW_HINT}", highlight=False)
        raise typer.Exit(EXIT_FAILURES)


def print_json(data: Any, **dumps: Any) -> None:
    """Indented JSON on stdout, plain (no colour), so `--json` output pipes into other tools."""
    print(json.dumps(data, indent=2, **dumps))


def print_table(title: str, columns: Sequence[str], rows: Iterable[Sequence[str]],
                no_wrap: Collection[str] = ()) -> None:
    """A titled table on stdout; nothing is ever cut (`haldet.util.tables`), and columns named in `no_wrap` (names a
    user copies) are not even wrapped."""
    table = Table(title=title)
    for col in columns:
        table.add_column(col, no_wrap=col in no_wrap)
    for row in rows:
        table.add_row(*row)
    print_tables(out_console, [table])


def origin_column(infos: list[dict[str, Any]]) -> tuple[str, ...]:
    """The `origin` column, shown only when a plugin package contributed something."""
    return ("origin",) if any(i["origin"] != "built-in" for i in infos) else ()
