"""Tables that never cut a name or a number.

rich shrinks a table that is wider than the console by cutting cells with an ellipsis (`hallulens_…`, `0.8…`), and
when output is redirected it assumes 80 columns. Here: on a terminal, every column keeps at least its longest word
(up to FOLD_AFTER characters; the whole cell for the columns a user copies: names) and the rest of the width goes to
the columns that have more to say, which wrap between words; when even those minimums do not fit, each row is printed
as a stack of `column: value` lines. Not on a terminal (a log file, a pipe), the table is printed at its full natural
width, one line per row.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.cells import cell_len
from rich.console import Console, RenderableType
from rich.table import Column, Table
from rich.text import Text

FOLD_AFTER = 16  # a word longer than this in a wrapping column (a path, a hub id) may be folded, never cut


def _plain(console: Console, cell: RenderableType) -> str:
    if isinstance(cell, Text):
        return cell.plain
    return console.render_str(cell).plain if isinstance(cell, str) else str(cell)


def _longest_word(text: str) -> int:
    return max((cell_len(word) for line in text.splitlines() for word in line.split()), default=0)


def _longest_line(text: str) -> int:
    return max((cell_len(line) for line in text.splitlines()), default=0)


def _column_bounds(console: Console, column: Column) -> tuple[int, int]:
    """(minimum, natural) content width: the longest unbreakable piece, and the longest line."""
    texts = [_plain(console, column.header), *(_plain(console, c) for c in column._cells)]
    natural = max(_longest_line(t) for t in texts)
    if column.no_wrap:  # a name: the whole cell stays on one line
        return natural, natural
    return min(max(_longest_word(t) for t in texts), FOLD_AFTER), natural


def _overhead(table: Table) -> int:
    """Width of the borders and the cell padding around the content of every column."""
    cols = len(table.columns)
    _, right, _, left = table.padding
    padding = (left + right) * cols - (0 if table.pad_edge else left + right)
    borders = 0 if table.box is None else cols - 1 + (2 if table.show_edge else 0)
    return padding + borders


def fit(table: Table, console: Console, width: int | None = None) -> list[RenderableType]:
    """What to print for `table` at `width` columns (default: the console's) so that nothing is cut: the table
    with column widths that keep every word whole, or a stack of `column: value` lines per row."""
    width = width or console.size.width
    for column in table.columns:
        column.overflow = "fold"  # a piece longer than its column is folded onto the next line, never cut
    bounds = [_column_bounds(console, c) for c in table.columns]
    room = width - _overhead(table)
    if sum(natural for _, natural in bounds) <= room:
        return [table]
    if sum(minimum for minimum, _ in bounds) > room:
        return stacked(table, console)
    widths = [minimum for minimum, _ in bounds]
    spare = room - sum(widths)
    want = [natural - minimum for minimum, natural in bounds]
    total_want = sum(want)
    for i, extra in enumerate(want):  # the spare width goes to the columns in proportion to what they lack
        widths[i] += spare * extra // total_want
    for column, w in zip(table.columns, widths, strict=True):
        column.width = w
    return [table]


def stacked(table: Table, console: Console) -> list[RenderableType]:
    """Each row as its first cell, then `header: value` lines for the others (for a narrow console)."""
    headers = [_plain(console, c.header) for c in table.columns]
    cells = [[_plain(console, c) for c in column._cells] for column in table.columns]
    lines: list[RenderableType] = []
    if table.title:
        lines.append(Text(_plain(console, table.title), style="bold"))
    for row in zip(*cells, strict=True):
        lines.append(Text(row[0], style="bold"))
        lines.extend(Text(f"  {h}: {v}") for h, v in zip(headers[1:], row[1:], strict=True))
    return lines


def natural_width(table: Table, console: Console) -> int:
    """The width at which no cell of `table` wraps."""
    return sum(natural for _, natural in (_column_bounds(console, c) for c in table.columns)) + _overhead(table)


def print_tables(console: Console, tables: Sequence[Table], after: Sequence[RenderableType] = ()) -> None:
    """Print `tables` (then the lines `after`) without cutting anything: fitted to a terminal's width, or at full
    width when the output is a file or a pipe (one line per row, so a log keeps whole values)."""
    if console.is_terminal:
        for table in tables:
            for part in fit(table, console):
                console.print(part)
        for line in after:
            console.print(line)
        return
    wide = max([console.size.width, *(natural_width(t, console) for t in tables)])
    plain = Console(file=console.file, width=wide, emoji=False, highlight=False, color_system=None,
                    force_terminal=False, soft_wrap=False)
    for table in tables:
        plain.print(table)
    for line in after:
        plain.print(line, soft_wrap=True)  # a note is one line in a log, however long
