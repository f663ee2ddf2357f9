"""What an adapter's `row_to_instance` uses on one source row: required fields (`require`, `require_json`),
the row errors the `--on-bad-row` policy handles (`BadRow`, `SkipRow`) and their messages (`row_where`,
`bad_row_message`), JSON-safe values, number strings and lettered multiple-choice options.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from haldet.datasets.formats import LINE

ABSTAIN_REFERENCE = "The context does not contain the answer."  # matched by judges.text.is_abstention
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


class BadRow(ValueError):
    """Raised by `row_to_instance` when a row lacks a required field or has an unusable value."""

    def __init__(self, field: str, problem: str = "missing or empty") -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"field {field!r}: {problem}")


class SkipRow(Exception):
    """Raised by `row_to_instance` for a well-formed row the adapter leaves out by design (e.g. TheoremQA
    questions that need a picture); counted as filtered, never as an error."""


def require(row: dict[str, Any], field: str) -> Any:
    """A required field of a source row, or `BadRow` naming it."""
    value = row.get(field)
    if value is None or (isinstance(value, str | list | dict) and len(value) == 0):
        raise BadRow(field)
    return value


def require_json(row: dict[str, Any], field: str) -> Any:
    """A required field that holds JSON (a string in the source, or already decoded)."""
    value = require(row, field)
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise BadRow(field, f"not valid JSON ({exc.msg})") from None


def json_safe(obj: Any) -> Any:
    """Original rows kept in `Instance.source`: non-JSON values (dates, bytes, arrays) become strings."""
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [json_safe(v) for v in obj]
    if obj is None or isinstance(obj, bool | int | str):
        return obj
    if isinstance(obj, float):
        return obj if obj == obj and obj not in (float("inf"), float("-inf")) else str(obj)
    if hasattr(obj, "tolist"):
        return json_safe(obj.tolist())
    return str(obj)


_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")


def number_string(value: Any) -> str:
    """A numeric answer as a plain string: '1,000' -> '1000', 8.0 -> '8', ' $3.50 ' -> '3.5'."""
    text = str(value).strip().replace("$", "").replace("%", "")
    match = _NUMBER.search(text)
    if match is None:
        raise ValueError(f"no number in {value!r}")
    num = float(match.group().replace(",", ""))
    if num == int(num) and abs(num) < 1e15:
        return str(int(num))
    return repr(num)


def bad_row_message(exc: Exception) -> str:
    """A row's validation error (the first field pydantic names) or its `BadRow` text, in one line."""
    if isinstance(exc, ValidationError):
        err = exc.errors()[0]
        return f"field {'.'.join(str(p) for p in err['loc']) or '(row)'}: {err['msg']}"
    return str(exc)


def row_where(row: dict[str, Any], index: int) -> str:
    """Where a row is, in the one convention of data messages: its 1-based file line (with the file when a
    split spans several), or its 1-based row number for hub rows. Removes the bookkeeping keys from `row`."""
    line, name = row.pop(LINE, None), row.pop("_file", None)
    where = f"line {line}" if line is not None else f"row {index + 1}"
    return f"{name}, {where}" if name else where


def mcq_options(labels: Sequence[Any], texts: Sequence[Any], field: str) -> tuple[dict[str, str], dict[str, str]]:
    """Options keyed by letter (numeric labels such as ARC's '1'..'4' become A..D) and a map from the
    source's label to the letter."""
    if len(labels) != len(texts) or not texts:
        raise BadRow(field, f"{len(labels)} labels for {len(texts)} option texts")
    letters = [str(lab).strip().upper() for lab in labels]
    if not all(len(lab) == 1 and lab in LETTERS for lab in letters):
        letters = list(LETTERS[: len(texts)])
    options = {letter: str(text) for letter, text in zip(letters, texts, strict=True)}
    return options, {str(lab).strip(): letter for lab, letter in zip(labels, letters, strict=True)}
