"""Data files as people have them: read any table file by its content, and recognise which of a dataset's
formats it is in (the hub schema, or one of the authors' original release formats).

A file is read into a `RawFile`: its top-level JSON value (a list of rows or a nested object), or its rows for
JSON lines / CSV / TSV / Parquet, whatever the extension says (HaluEval's `qa_data.json` is JSON lines). Rows
keep the 1-based file line they start on (`LINE`), the one row-number convention of every data message; rows
flattened out of a nested file carry the line of the record they come from. A `Format` says whether it
recognises a raw file and turns it into rows of the hub schema, so an adapter maps one schema only.
"""

from __future__ import annotations

import bisect
import csv
import gzip
import io
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from haldet.errors import HaldetError

LINE = "_line"  # key of a row's 1-based file line (removed before the adapter sees the row)
SPLIT_WORDS = {"test": "test", "dev": "validation", "validation": "validation", "val": "validation",
               "valid": "validation", "train": "train", "training": "train", "prompt": "prompt"}


@dataclass
class RawFile:
    """One file's content: `data` is a list of row dicts (JSON array, JSON lines, CSV, Parquet) or a JSON
    object; `lines[i]` is the 1-based file line where row i starts (None where unknown, e.g. Parquet)."""

    path: Path
    kind: str  # "json", "jsonl", "csv", "tsv", "parquet"
    data: Any
    lines: list[int | None]
    key_lines: dict[str, list[int | None]] = field(default_factory=dict)  # lines of a nested list, computed once
    _text: str | None = None
    _starts: list[int] = field(default_factory=list)  # offset of each line's first character

    def line_of(self, needle: str, after: int | None) -> int | None:
        """The 1-based line where `needle` first occurs at or after line `after` (a nested record's own line,
        e.g. a SQuAD question by its id inside its article); `after` when not found."""
        if after is None:
            return None
        if self._text is None:
            self._text = _text(self.path)
            self._starts = [0, *(m.end() for m in re.finditer("\n", self._text))]
        pos = self._text.find(needle, self._starts[min(after, len(self._starts)) - 1])
        return after if pos < 0 else bisect.bisect_right(self._starts, pos)

    def rows(self) -> list[dict[str, Any]] | None:
        """The file's rows, each with its line: a list of objects, or the list of objects a JSON object holds
        (`{"version": ..., "data": [...]}`); None otherwise."""
        found = records(self, _record_key(self.data) if isinstance(self.data, dict) else None)
        if found is None:
            return None
        return [{**r, LINE: line} if line is not None else dict(r) for r, line in found]

    def columns(self) -> list[str]:
        rows = self.data if isinstance(self.data, list) else self.data.get(_record_key(self.data) or "", [])
        seen: dict[str, None] = {}
        for row in rows[:50]:
            if isinstance(row, dict):
                seen.update(dict.fromkeys(str(k) for k in row))
        return [c for c in seen if c != LINE]

    def nested_fields(self) -> list[str]:
        """Columns of the first row holding a list of objects or lists (a nested release)."""
        rows = self.data if isinstance(self.data, list) else self.data.get(_record_key(self.data) or "", [])
        first = rows[0] if rows and isinstance(rows[0], dict) else {}
        return [k for k, v in first.items() if (isinstance(v, list) and v and isinstance(v[0], dict | list))]


@dataclass
class Format:
    """One accepted file format of a dataset. `convert` returns (split or None, hub-schema rows) pairs, None
    when the file is not in this format; split None = from the file name."""

    name: str
    describe: str
    convert: Callable[[RawFile], list[tuple[str | None, list[dict[str, Any]]]] | None]


def split_from_name(path: Path) -> str | None:
    """The split a file name states (`dev-v2.0.json` -> validation, `ARC-Challenge-Test.jsonl` -> test)."""
    words = re.split(r"[^a-z]+", path.name.lower())
    found = [SPLIT_WORDS[w] for w in words if w in SPLIT_WORDS]
    return found[-1] if found else None


def _text(path: Path) -> str:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:  # where: the line and byte offset of the first byte that is not UTF-8
        line = raw.count(b"\n", 0, exc.start) + 1
        raise HaldetError(f"data file is not UTF-8 text (byte 0x{raw[exc.start]:02x} at byte offset {exc.start}, "
                          f"line {line})", where=f"{path}, line {line}",
                          hint="use the release's own file (UTF-8 JSON, JSON lines, CSV or Parquet)") from None


def _line_at(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _array_lines(text: str, start: int) -> list[int | None]:
    """1-based line of each element of the JSON array whose '[' is at `start` (lines counted incrementally:
    linear in the file size)."""
    decoder = json.JSONDecoder()
    out: list[int | None] = []
    pos = start + 1
    line, counted = _line_at(text, pos), pos
    ws = re.compile(r"[\s,]*")
    while True:
        gap = ws.match(text, pos)
        assert gap is not None  # the pattern matches the empty string
        pos = gap.end()
        if pos >= len(text) or text[pos] == "]":
            return out
        line += text.count("\n", counted, pos)
        counted = pos
        out.append(line)
        _, pos = decoder.raw_decode(text, pos)


def read_raw(path: Path) -> RawFile:
    """Read a data file by its content (the extension is only a tie-breaker)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
    except OSError as exc:
        raise HaldetError(f"cannot read data file: {exc.strerror}", where=str(path),
                          hint="check the path and its permissions") from None
    if head == b"PAR1":
        import pyarrow.parquet as pq

        rows = list(pq.read_table(path).to_pylist())
        return RawFile(path, "parquet", rows, [None] * len(rows))
    text = _text(path)
    if not text.strip():
        raise HaldetError("data file is empty", where=str(path),
                          hint="the download may have failed or been cut: fetch the file again, or remove it")
    stripped = text.lstrip()
    if stripped[:1] in "[{":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            if stripped[:1] == "{" and "Extra data" in exc.msg:
                return _json_lines(path, text)
            raise HaldetError(f"malformed JSON: {exc.msg}", where=f"{path}, line {exc.lineno}",
                              hint="fix the file near that line, or fetch it again") from None
        if isinstance(data, list):
            return RawFile(path, "json", data, _array_lines(text, text.index("[")))
        if ".jsonl" in [s.lower() for s in path.suffixes] or not _record_key(data):
            return RawFile(path, "jsonl", [data], [_line_at(text, text.index("{"))])  # one row
        return RawFile(path, "json", data, [])
    sample = text[:4096]
    delimiter = "\t" if sample.count("\t") > sample.count(",") else ","
    return _csv(path, text, delimiter)


def _json_lines(path: Path, text: str) -> RawFile:
    rows: list[Any] = []
    lines: list[int | None] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise HaldetError(f"malformed JSON line: {exc.msg}", where=f"{path}, line {lineno}",
                              hint="fix or remove that line") from None
        if not isinstance(row, dict):
            raise HaldetError("a JSON line must be an object (one row)", where=f"{path}, line {lineno}")
        rows.append(row)
        lines.append(lineno)
    return RawFile(path, "jsonl", rows, lines)


def _csv(path: Path, text: str, delimiter: str) -> RawFile:
    reader = csv.DictReader(io.StringIO(text, newline=""), delimiter=delimiter)
    rows: list[Any] = []
    lines: list[int | None] = []
    start = 2  # line 1 is the header
    try:
        for row in reader:
            rows.append({k: _csv_cell(v) for k, v in row.items() if k is not None})
            lines.append(start)
            start = reader.line_num + 1
    except csv.Error as exc:
        raise HaldetError(f"malformed CSV: {exc}", where=f"{path}, line {reader.line_num}") from None
    if not reader.fieldnames or len(reader.fieldnames) < 2:
        raise HaldetError("not a data file (neither JSON, JSON lines, CSV/TSV with a header, nor Parquet)",
                          where=str(path), hint="see `haldet datasets show NAME --formats` for accepted files")
    return RawFile(path, "tsv" if delimiter == "\t" else "csv", rows, lines)


def _csv_cell(value: str | None) -> Any:
    """CSV has no nesting: a cell holding a JSON list/object (e.g. ARC `choices`) is decoded."""
    if value and value[:1] in "[{":
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


# id columns the adapters fall back from (to the row number): a file without them still loads
OPTIONAL_ID_COLUMNS = frozenset({"id", "ID", "question_id"})


def needed_columns(required: Sequence[str]) -> list[str]:
    """The top-level columns a hub-schema file must have (nested `a.b` and per-file `f: x` entries are checked
    by the adapters; id columns are optional)."""
    return [c for c in required if ":" not in c and "." not in c and c not in OPTIONAL_ID_COLUMNS]


def hub_format(required: Sequence[str], describe: str) -> Format:
    """The hub schema as a flat file: rows carrying the required columns."""
    needed = needed_columns(required)

    def convert(raw: RawFile) -> list[tuple[str | None, list[dict[str, Any]]]] | None:
        rows = raw.rows()
        if rows is None or not rows or not needed:
            return None
        cols = set(raw.columns())
        return [(None, rows)] if all(c in cols for c in needed) else None

    return Format("hub schema", describe, convert)


def with_line(row: dict[str, Any], line: int | None, **fields: Any) -> dict[str, Any]:
    """A converted row that keeps the source record's file line."""
    return {**fields, LINE: line} if line is not None else fields


def records(raw: RawFile, key: str | None = None) -> list[tuple[dict[str, Any], int | None]] | None:
    """(record, line) of a list file, or of the list under `key` of a JSON object (SQuAD's `data`); None when
    the file has no such list of objects."""
    if key is None:
        data, lines = raw.data, raw.lines
    else:
        if not isinstance(raw.data, dict) or not isinstance(raw.data.get(key), list):
            return None
        data = raw.data[key]
        if key not in raw.key_lines:
            raw.key_lines[key] = _key_lines(raw.path, key, len(data))
        lines = raw.key_lines[key]
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        return None
    return list(zip(data, lines if len(lines) == len(data) else [None] * len(data), strict=True))


def _record_key(data: dict[str, Any]) -> str | None:
    """The key of a JSON object that holds the list of records (SQuAD/CoQA `data`, TriviaQA `Data`)."""
    return next((k for k, v in data.items() if isinstance(v, list) and v and isinstance(v[0], dict)), None)


def _key_lines(path: Path, key: str, n: int) -> list[int | None]:
    text = _text(path)
    match = re.search(rf'"{re.escape(key)}"\s*:\s*\[', text)
    if match is None:
        return [None] * n
    lines = _array_lines(text, match.end() - 1)
    return lines if len(lines) == n else [None] * n


def read_table(path: Path) -> list[dict[str, Any]]:
    """Rows of a flat data file, read by content (JSON lines, JSON list, CSV/TSV, Parquet, gzipped or not);
    each row carries its 1-based file line under `formats.LINE`."""
    raw = read_raw(path)
    rows = raw.rows()
    if rows is None:
        raise HaldetError("a data file must hold a list of row objects", where=str(path),
                          hint="use JSON lines, a JSON list of objects, CSV with a header, or Parquet")
    return rows
