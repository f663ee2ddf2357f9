"""Reading a run's JSONL logs whole and fast: every complete record (a cut last line, still being written or left by
a kill, is no record), as dicts or as Arrow columns with each record's byte offset. A corrupt line is an error that
names it (its line number, or its byte offset where the reader shows records by offset)."""

from __future__ import annotations

import io
import json
from itertools import accumulate
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.json as pa_json

from haldet.errors import HaldetError


def read_lines(path: Path) -> list[tuple[bytes, int]]:
    """Complete, non-blank lines of a JSONL file with their byte offsets."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    lines = data.split(b"\n")[:-1]  # the last part is b"" or a line still being written
    offsets = accumulate((len(raw) + 1 for raw in lines), initial=0)
    return [(raw, offset) for raw, offset in zip(lines, offsets, strict=False) if raw.strip()]  # offsets: one more


def decode(raw: bytes, path: Path, offset: int) -> dict[str, Any]:
    """One record from its line; a line that is no JSON object is an error naming its byte offset."""
    try:
        rec = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise HaldetError(f"corrupt record at byte {offset}: {exc.msg}", where=str(path),
                          hint="delete that line (or the file) and rerun the run to recompute it") from None
    if not isinstance(rec, dict):
        raise HaldetError(f"record at byte {offset} is not a JSON object", where=str(path))
    return rec


def records_at(path: Path) -> list[tuple[dict[str, Any], int]]:
    """Every complete record with its byte offset, parsed in one call (the lines joined as one JSON array: a third
    of the per-line cost on large logs); only when that fails is each line parsed, to name the corrupt one."""
    lines = read_lines(path)
    if not lines:
        return []
    try:
        records = json.loads(b"[" + b",".join(raw for raw, _ in lines) + b"]")
    except (json.JSONDecodeError, UnicodeDecodeError):
        records = None
    # a line holding two values (`{...}, {...}`) parses inside the joined array: the count tells
    if records is None or len(records) != len(lines) or not all(isinstance(r, dict) for r in records):
        records = [decode(raw, path, offset) for raw, offset in lines]
    return [(rec, offset) for rec, (_, offset) in zip(records, lines, strict=True)]


def read_records(path: Path) -> list[dict[str, Any]]:
    """Every complete record of a JSONL log, in file order (older first: logs are append-only); a corrupt line is
    an error naming its line number."""
    try:
        return [rec for rec, _ in records_at(path)]
    except HaldetError:
        for lineno, raw in enumerate(path.read_bytes().split(b"\n")[:-1], start=1):
            try:
                if raw.strip() and isinstance(json.loads(raw), dict):
                    continue
            except json.JSONDecodeError as exc:
                raise HaldetError(f"corrupt record at line {lineno}: {exc.msg}", where=str(path),
                                  hint="delete that line (or the file) and rerun the run to recompute it") from None
            if raw.strip():
                raise HaldetError(f"record at line {lineno} is not a JSON object", where=str(path)) from None
        raise


def read_table(path: Path, fields: pa.Schema) -> tuple[pa.Table, np.ndarray]:
    """The named fields of every complete record as Arrow columns (missing fields null), and each record's byte
    offset. Parsed by Arrow's JSON reader; a log it cannot read (a corrupt line, a field of another type) is read
    line by line, which names a corrupt line."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return fields.empty_table(), np.zeros(0, dtype=np.int64)
    data = data[: data.rfind(b"\n") + 1]  # a line still being written is no record
    ends = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10)
    starts = np.r_[0, ends[:-1] + 1] if len(ends) else np.zeros(0, dtype=np.int64)
    offsets = starts[ends > starts]  # blank lines are no records
    if not len(offsets):
        return fields.empty_table(), offsets
    try:
        table = pa_json.read_json(io.BytesIO(data), read_options=pa_json.ReadOptions(block_size=1 << 26),
                                  parse_options=pa_json.ParseOptions(explicit_schema=fields,
                                                                     unexpected_field_behavior="ignore"))
        if table.num_rows == len(offsets):
            return table, offsets
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        pass
    records = records_at(path)
    try:
        table = pa.Table.from_pylist([{f: r.get(f) for f in fields.names} for r, _ in records], schema=fields)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise HaldetError(f"a record has a field of an unexpected type ({exc})", where=str(path),
                          hint="restore the file from the run that wrote it") from None
    return table, np.array([offset for _, offset in records], dtype=np.int64)
