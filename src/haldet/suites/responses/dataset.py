"""The `responses` adapter: a file of responses you bring, one row per answer.

Columns (names are case-sensitive):
- `prompt` or `question`: what the response answers (required; one of the two);
- `response` or `answer`: the answer to score (required);
- `context`: a document or evidence the prompt comes with (optional);
- `label`: 1 / true / "hallucination" = hallucinated, 0 / false / "correct" = not; empty = unlabelled (optional);
- `units`: spans of the response with their own labels, a list of {"text" or "start"/"end", "label", "kind"}
  (kind: entity, sentence, claim, span, token; default span), or that list as a JSON string in a CSV (optional);
- `id`: the item's id (optional; default: the row number); haldet's id is `responses/data/<id>`, and your own id
  comes back beside it as `source_id` (`load_run(...).table()`, the explorer's items).
Other columns are kept in the item's `source`. Rows keep the file's order (no shuffle), so `--limit N` takes the
first N rows.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from haldet.datasets.adapter import DatasetAdapter, Source
from haldet.datasets.base import register
from haldet.datasets.formats import Format, RawFile
from haldet.datasets.rows import BadRow, require
from haldet.errors import HaldetError
from haldet.schema import UNIT_KINDS, Category, Instance, SpanLabel
from haldet.text.units import align_sequential

PROMPT_COLUMNS = ("prompt", "question")
RESPONSE_COLUMNS = ("response", "answer")
OPTIONAL_COLUMNS = ("context", "label", "units", "id")
_HALLUCINATED = {"1", "true", "t", "yes", "hallucination", "hallucinated"}
_CORRECT = {"0", "false", "f", "no", "correct", "not_hallucinated"}


def missing(value: Any) -> bool:
    """An empty cell: None, NaN (pandas' missing value) or an empty/blank string."""
    return value is None or (isinstance(value, float) and math.isnan(value)) or (
        isinstance(value, str) and not value.strip())


def parse_label(value: Any, field: str = "label") -> Category | None:
    """A label cell as a category; None when empty (the item is scored, not evaluated)."""
    if missing(value):
        return None
    text = str(int(value)) if isinstance(value, bool | int | float) and float(value) in (0.0, 1.0) else \
        str(value).strip().lower()
    if text in _HALLUCINATED:
        return Category.HALLUCINATION
    if text in _CORRECT:
        return Category.CORRECT
    raise BadRow(field, f"must be 1/true/hallucination or 0/false/correct (or empty: unlabelled), got {value!r}")


def first_present(row: dict[str, Any], names: Sequence[str]) -> str | None:
    """The first of `names` that the row holds a non-empty value for."""
    return next((n for n in names if n in row and not missing(row[n])), None)


def parse_units(value: Any, response: str) -> list[SpanLabel]:
    """The `units` cell: spans by offsets (`start`, `end`) or by text (found in order in the response)."""
    if missing(value):
        return []
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise BadRow("units", f"not valid JSON ({exc.msg})") from None
    if hasattr(value, "tolist"):
        value = value.tolist()
    if not isinstance(value, list) or not all(isinstance(u, dict) for u in value):
        raise BadRow("units", 'must be a list of {"text" or "start"/"end", "label", "kind"} objects')
    by_text = align_sequential(response, [str(u.get("text", "")) for u in value])
    out = []
    for k, unit in enumerate(value):
        kind = str(unit.get("kind") or "span")
        if kind not in UNIT_KINDS:
            raise BadRow(f"units[{k}].kind", f"must be one of {', '.join(UNIT_KINDS)}, got {kind!r}")
        if "start" in unit and "end" in unit:
            start, end = int(unit["start"]), int(unit["end"])
            if not 0 <= start <= end <= len(response):
                raise BadRow(f"units[{k}]", f"offsets [{start}, {end}) are outside the response "
                                            f"({len(response)} characters)")
        elif (found := by_text[k]) is not None:
            start, end = found
        else:
            raise BadRow(f"units[{k}]", f"text {unit.get('text')!r} not found in the response (after the units "
                                        "before it); give its start/end offsets instead")
        category = parse_label(unit.get("label"), f"units[{k}].label") or Category.INVALID
        out.append(SpanLabel(start=start, end=end, text=response[start:end], kind=kind, category=category))
    return out


# what each column may hold (a Parquet column has one type: every column of the wrong one is named at once)
_TEXT = (str,)
COLUMN_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    **{c: (_TEXT, "text") for c in (*PROMPT_COLUMNS, *RESPONSE_COLUMNS, "context")},
    "label": ((bool, int, float, str), "1/0, true/false or text"), "id": ((str, int), "text or an integer"),
    "units": ((list, str), "a list of objects, or that list as JSON text")}


def wrong_types(rows: list[dict[str, Any]]) -> list[str]:
    """Each column whose values are of a type it cannot hold: its name, the type found, the row, what it takes."""
    out = []
    for col, (types, takes) in COLUMN_TYPES.items():
        for n, row in enumerate(rows, start=1):
            value = row.get(col)
            if value is None or missing(value):
                continue
            if hasattr(value, "tolist") and not isinstance(value, str):
                value = value.tolist()
            if not isinstance(value, types):
                out.append(f"{col!r} holds {type(value).__name__} values (row {n}: {str(value)[:40]!r}); it takes "
                           f"{takes}")
            break  # a column's first value tells its type
    return out


def _convert(raw: RawFile) -> list[tuple[str | None, list[dict[str, Any]]]] | None:
    rows = raw.rows()
    cols = set(raw.columns())
    if not rows or not cols & set(PROMPT_COLUMNS) or not cols & set(RESPONSE_COLUMNS):
        return None
    if raw.kind == "parquet" and (wrong := wrong_types(rows)):
        raise HaldetError(f"{len(wrong)} column(s) of your responses file hold the wrong type: " + "; ".join(wrong),
                          where=str(raw.path),
                          hint="convert those columns (pandas: df[col] = df[col].astype(str) for text) and write "
                               "the file again")
    return [("data", rows)]


# messages of `read_raw` written for a dataset's release file, said for your own file
_OWN_FILE = {
    "data file is empty": ("your responses file is empty",
                           "write one row per answer (prompt or question, response or answer; docs/api.md) into it, "
                           "or give the path of the file that holds them"),
    "data file is not UTF-8 text": ("your responses file is not UTF-8 text",
                                    "save it as UTF-8 (pandas: df.to_json(path, orient='records', lines=True); or "
                                    "`iconv -f latin1 -t utf-8 FILE > NEW`), then run again on the new file"),
}


@register("responses")
class Responses(DatasetAdapter):
    scenario = "responses"
    task_type = "long_form"
    source = "your own responses (a file given with --responses / --data-file, or haldet.score_responses)"
    license = "yours"
    required_fields = ("prompt|question", "response|answer")
    file_split = "data"

    @classmethod
    def formats(cls) -> list[Format]:
        return [Format("responses", "rows with prompt (or question) and response (or answer), optional context, "
                                    "label, units, id; JSON lines, JSON, CSV or Parquet", _convert)]

    def hub_rows(self) -> Source:
        """There is no hub copy of your responses: say where they go."""
        raise HaldetError("dataset 'responses' scores your own file, and none was given", where="--dataset responses",
                          hint="pass it with `haldet run --responses FILE` (or --data-file FILE), or from Python "
                               "with haldet.score_responses(rows) (docs/api.md)")

    def ordered_units(self, rows: Sequence[dict[str, Any]], seed: int) -> list[tuple[int, int | None]]:
        """The file's own order: your first N rows are what --limit N keeps."""
        return self.units(rows)

    def local_rows(self) -> Source:
        """Your file's rows; its read errors say what to do with your file (not with a release's download)."""
        try:
            return super().local_rows()
        except HaldetError as exc:
            for prefix, (what, hint) in _OWN_FILE.items():
                if exc.what.startswith(prefix):
                    raise HaldetError(what + exc.what[len(prefix):], where=exc.where, hint=hint) from None
            if "fetch it again" in exc.hint:  # malformed JSON: fix your file, there is nothing to fetch
                raise HaldetError(exc.what, where=exc.where, hint="fix the file near that line") from None
            raise

    def _why_not(self, raw: RawFile) -> str:
        """Which required column is missing, the names accepted for it, and the columns the file has."""
        cols = raw.columns()
        found = ", ".join(cols[:20]) or "none"
        for what, names in (("the prompt", PROMPT_COLUMNS), ("the response", RESPONSE_COLUMNS)):
            if not set(names) & set(cols):
                return (f"missing column for {what} (accepted names: {', '.join(names)}; optional: "
                        f"{', '.join(OPTIONAL_COLUMNS)}); columns found: {found}")
        return f"no rows (columns found: {found})"

    def _unrecognised(self, rejected: list[tuple[Any, str]]) -> HaldetError:
        path, why = rejected[0]
        return HaldetError(f"responses: {why}", where=str(path),
                           hint="rename the column, or pass the data as a DataFrame with those columns "
                                "(docs/api.md)")

    def row_to_instance(self, row: dict[str, Any], index: int, split: str) -> Instance:
        prompt_col = first_present(row, PROMPT_COLUMNS)
        if prompt_col is None:
            raise BadRow("prompt", "missing or empty (also accepted: question)")
        response_col = first_present(row, RESPONSE_COLUMNS)
        if response_col is None:
            raise BadRow("response", "missing or empty (also accepted: answer)")
        response = str(require(row, response_col))
        context = "" if missing(row.get("context")) else str(row["context"])
        own = index if missing(row.get("id")) else row["id"]
        native = own if missing(row.get("id")) else str(own).strip().replace("/", "_")
        # meta.source_id: your own id as you gave it (the row number without one), for a one-line merge
        return self.instance(split, native, question=str(row[prompt_col]).strip(), context=context,
                             response=response, response_label=parse_label(row.get("label")),
                             units=parse_units(row.get("units"), response), meta={"source_id": own})
