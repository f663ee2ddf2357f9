"""A run directory and its cells, for writing: the manifest and results of a run, and per (dataset, model) cell its
stage logs, arrays, locks and JSON files, plus `record_keys`, what the run used of each stage log (`keys.json`).
Reading a run back for display goes through `haldet.store.reader`."""

from __future__ import annotations

import csv
import datetime as _dt
import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import numpy as np

from haldet.errors import HaldetError
from haldet.store.files import ArrayStore, StageLog, atomic_path, atomic_write_text, read_json
from haldet.store.names import KEYS
from haldet.util.locking import file_lock


class CellStore:
    """Evidence of one (dataset, model) pair: per-stage logs and arrays."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def log(self, stage: str) -> StageLog:
        return StageLog(self.root / f"{stage}.jsonl")

    def arrays(self, stage: str) -> ArrayStore:
        return ArrayStore(self.root / stage)

    def lock(self, name: str) -> Any:
        """The exclusive lock of one writer in this cell (a stage, `scores/<detector>`, ...): hold it around
        reading what is done and appending what was missing."""
        return file_lock(self.root / f"{name}.lock", what=f"{name} of {self.root}")

    def write_json(self, name: str, obj: Any) -> None:
        atomic_write_text(self.root / name, json.dumps(obj, indent=2, sort_keys=True))

    def read_json(self, name: str) -> Any | None:
        path = self.root / name
        return read_json(path) if path.exists() else None

    def record_keys(self, stage: str, records: Mapping[str, Any], *, add: bool = False) -> None:
        """Record which record(s) of `stage` the run used for each item (`keys.json`: item id -> key), replacing
        what an earlier run of this cell recorded for that stage (`add`: adding to what this run recorded before):
        readers then show exactly these records. `records`: item id -> a record (its `key`), a key or a list of
        keys (a stage with several records per item)."""
        self.record_stage_keys({stage: records}, add=add)

    def record_stage_keys(self, used: Mapping[str, Mapping[str, Any]], *, add: bool = False) -> None:
        """`record_keys` of several stages at once (one write of `keys.json`)."""
        recorded = self.read_json(KEYS) or {}
        for stage, records in used.items():
            keys = {item_id: _keys_of(value) for item_id, value in records.items()}
            if add:
                for item_id, before in (recorded.get(stage) or {}).items():
                    keys[item_id] = sorted(set(_keys_of(before)) | set(keys.get(item_id, ())))
            recorded[stage] = {item_id: ks[0] if len(ks) == 1 else ks for item_id, ks in keys.items() if ks}
        self.write_json(KEYS, recorded)


def _keys_of(value: Any) -> list[str]:
    """The key(s) a `record_keys` value names: a record's `key`, a key, or a list of keys."""
    if isinstance(value, Mapping):
        return [str(value["key"])]
    return [value] if isinstance(value, str) else sorted({str(k) for k in value})


def model_slug(model: str) -> str:
    """A model name usable as a folder name (hub ids and paths contain '/')."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in model.strip("/"))[-80:]


def _write_csv(path: Path, rows: list[dict[str, Any]]) -> list[str]:
    """Rows as CSV, atomically; the columns are every key in first-seen order (returned)."""
    columns: list[str] = []
    for row in rows:
        columns += [c for c in row if c not in columns]
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    return columns


class RunStore:
    """A run directory: the manifest, the results, and one `CellStore` per (dataset, model)."""

    MANIFEST = "manifest.json"

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def lock(self, *, wait: bool = True) -> Any:
        """The run's lock: held by every command that writes into this run, for its whole duration."""
        return file_lock(self.root / "run.lock", what=f"run directory {self.root}", wait=wait)

    def cell(self, dataset: str, model: str) -> CellStore:
        return CellStore(self.root / dataset / model_slug(model))

    @property
    def manifest_path(self) -> Path:
        return self.root / self.MANIFEST

    def read_manifest(self) -> dict[str, Any] | None:
        return read_json(self.manifest_path) if self.manifest_path.exists() else None

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        atomic_write_text(self.manifest_path, json.dumps(manifest, indent=2, sort_keys=True, default=str))

    @contextmanager
    def recording_failure(self, manifest: dict[str, Any]) -> Iterator[None]:
        """If the block raises, record status "failed" with the reason in the manifest (best effort: a full disk
        may refuse even that) and let the error propagate."""
        try:
            yield
        except BaseException as exc:
            reason = (exc.message if isinstance(exc, HaldetError) else
                      "interrupted (Ctrl-C or a termination signal)" if isinstance(exc, KeyboardInterrupt) else
                      f"{type(exc).__name__}: {exc}")
            manifest.update(status="failed", error=reason,
                            finished=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"))
            with suppress(OSError):
                self.write_manifest(manifest)
            raise

    def write_results(self, rows: list[dict[str, Any]]) -> None:
        """`results.json` (list of row objects), `results.csv` and `results.parquet` with the same columns."""
        atomic_write_text(self.root / "results.json", json.dumps(rows, indent=2, default=_json_default))
        columns = _write_csv(self.root / "results.csv", rows)
        write_parquet(self.root / "results.parquet", rows, columns)

    def write_unit_scores(self, rows: list[dict[str, Any]]) -> None:
        """`unit_scores.csv`: one row per scored unit of a suite run (empty cells = no label / invalid score); not
        written when no cell scored units."""
        if rows:
            _write_csv(self.root / "unit_scores.csv", rows)

    def read_results(self) -> list[dict[str, Any]]:
        path = self.root / "results.json"
        if not path.exists():
            raise HaldetError("no results in this run yet", where=str(self.root),
                              hint="run `haldet run --out DIR` (or `haldet score DIR`) first")
        rows = read_json(path)
        if not isinstance(rows, list):
            raise HaldetError("results.json must hold a list of rows", where=str(path))
        return rows


def write_parquet(path: Path, rows: list[dict[str, Any]], columns: list[str]) -> None:
    """Rows as a Parquet table (missing cells null; numbers float64/int64, text string), written atomically."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    data: dict[str, list[Any]] = {c: [_json_default(r[c]) if isinstance(r.get(c), np.generic) else r.get(c)
                                      for r in rows] for c in columns}
    arrays = {}
    for col, values in data.items():
        kinds = {"bool" if isinstance(v, bool) else "num" if isinstance(v, int | float) else
                 "str" if isinstance(v, str) else "other" for v in values if v is not None}
        if kinds == {"num"} and any(isinstance(v, float) for v in values):
            arrays[col] = pa.array([None if v is None else float(v) for v in values], type=pa.float64())
        elif len(kinds) <= 1 and "other" not in kinds:
            arrays[col] = pa.array(values)
        else:  # mixed or nested values: one JSON text per cell
            arrays[col] = pa.array([None if v is None else v if isinstance(v, str) else json.dumps(v, default=str)
                                    for v in values], type=pa.string())
    with atomic_path(path) as tmp:
        pq.write_table(pa.table(arrays), tmp)


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.floating | np.integer):
        return obj.item()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")
