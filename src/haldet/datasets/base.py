"""Dataset adapters: one registry, each adapter maps its source's rows into `Instance`s.

An adapter declares where its data lives (hub id + config, packaged file, or local files) and how one row
maps into the unified schema. Loading, split fallback, seeded shuffling, `limit`, `--data-dir` files and the
`--on-bad-row` policy live here once, so an adapter is a `row_to_instance` plus a few class attributes.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from pydantic import ValidationError

from haldet.errors import HaldetError
from haldet.registry import Registry
from haldet.schema import Instance

SPLIT_ORDER = ("test", "validation", "dev", "train")


class BadRow(ValueError):
    """Raised by `row_to_instance` when a row lacks a required field or has an unusable value."""

    def __init__(self, field: str, problem: str = "missing") -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"field {field!r}: {problem}")


def require(row: dict[str, Any], field: str) -> Any:
    """A required field of a source row, or `BadRow` naming it."""
    value = row.get(field)
    if value is None or (isinstance(value, str | list | dict) and len(value) == 0):
        raise BadRow(field)
    return value


def json_safe(obj: Any) -> Any:
    """Original rows kept in `Instance.source`: non-JSON values (dates, bytes, arrays) become strings."""
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [json_safe(v) for v in obj]
    if obj is None or isinstance(obj, bool | int | float | str):
        return obj
    if hasattr(obj, "tolist"):
        return json_safe(obj.tolist())
    return str(obj)


@dataclass
class LoadReport:
    """What a load did: rows read, rows skipped (with the first reasons), where the rows came from."""

    origin: str
    n_rows: int = 0
    n_skipped: int = 0
    skipped: list[str] | None = None


class DatasetAdapter:
    """Base adapter. Subclasses set the class attributes and implement `row_to_instance`."""

    name: ClassVar[str] = ""
    scenario: ClassVar[str] = ""
    task_type: ClassVar[str] = ""
    source: ClassVar[str] = ""          # hub id or package, for humans
    license: ClassVar[str] = ""
    hub_id: ClassVar[str | None] = None
    hub_config: ClassVar[str | None] = None
    local_names: ClassVar[tuple[str, ...]] = ()  # file stems looked for under --data-dir/<name>/
    required_fields: ClassVar[tuple[str, ...]] = ()

    def __init__(self, data_dir: str | Path | None = None, **options: Any) -> None:
        self.data_dir = Path(data_dir) if data_dir else None
        self.options = options

    # --- what subclasses implement -------------------------------------------------------------------
    def row_to_instance(self, row: dict[str, Any], index: int, split: str) -> Instance | list[Instance]:
        raise NotImplementedError

    def packaged_path(self) -> Path | None:
        """A data file shipped inside an installed package (offline use); None when not packaged."""
        return None

    def offline_available(self) -> bool:
        return self.packaged_path() is not None

    # --- shared machinery ----------------------------------------------------------------------------
    def make_id(self, split: str, native: Any) -> str:
        return f"{self.name}/{split}/{native}"

    def rows(self) -> tuple[str, str, list[dict[str, Any]]]:
        """(origin, split, rows): local files first, then packaged data, then the hub."""
        if self.data_dir is not None:
            return self._local_rows()
        packaged = self.packaged_path()
        if packaged is not None:
            return str(packaged), "data", read_table(packaged)
        return self._hub_rows()

    def _local_rows(self) -> tuple[str, str, list[dict[str, Any]]]:
        assert self.data_dir is not None
        base = self.data_dir / self.name if (self.data_dir / self.name).is_dir() else self.data_dir
        stems = self.local_names or (self.name,)
        for split in (*SPLIT_ORDER, "data", *stems):
            for ext in ("jsonl", "json", "parquet", "csv"):
                for stem in ({split} if split in stems else {split, f"{self.name}_{split}"}):
                    path = base / f"{stem}.{ext}"
                    if path.exists():
                        return str(path), split if split in SPLIT_ORDER else "data", read_table(path)
        raise HaldetError(
            f"no local data file for dataset {self.name!r}",
            where=str(base),
            hint=(f"put <split>.jsonl|json|parquet|csv (split one of {', '.join(SPLIT_ORDER)}) there, "
                  f"with fields {', '.join(self.required_fields) or '(see docs/datasets.md)'}"),
        )

    def _hub_rows(self) -> tuple[str, str, list[dict[str, Any]]]:
        if self.hub_id is None:
            raise HaldetError(f"dataset {self.name!r} has no hub source", hint="pass --data-dir with local files")
        import datasets  # heavy import, only when needed

        try:
            available = datasets.get_dataset_split_names(self.hub_id, self.hub_config)
        except Exception as exc:  # network, auth, missing: all user-fixable
            raise HaldetError(
                f"cannot reach dataset {self.hub_id!r} on the Hugging Face hub: {type(exc).__name__}",
                where=f"dataset {self.name}",
                hint="check the network, or download the files and pass --data-dir DIR",
            ) from None
        split = next((s for s in SPLIT_ORDER if s in available), available[0] if available else None)
        if split is None:
            raise HaldetError(f"dataset {self.hub_id!r} has no splits", where=f"dataset {self.name}")
        ds = datasets.load_dataset(self.hub_id, self.hub_config, split=split)
        return f"hub:{self.hub_id}", split, [dict(r) for r in ds]

    def load(self, *, limit: int | None = None, seed: int = 42, on_bad_row: str = "fail") -> tuple[
        list[Instance], LoadReport
    ]:
        """Seeded shuffle, then map rows until `limit` instances; bad rows skip or fail by policy."""
        origin, split, rows = self.rows()
        order = list(range(len(rows)))
        random.Random(seed).shuffle(order)
        report = LoadReport(origin=origin, skipped=[])
        out: list[Instance] = []
        for index in order:
            if limit is not None and len(out) >= limit:
                break
            report.n_rows += 1
            try:
                mapped = self.row_to_instance(rows[index], index, split)
            except (BadRow, ValidationError) as exc:
                msg = _bad_row_message(exc)
                if on_bad_row == "fail":
                    raise HaldetError(f"row {index} of dataset {self.name!r}: {msg}", where=origin,
                                      hint="fix the row, or pass --on-bad-row skip to skip such rows") from None
                report.n_skipped += 1
                if report.skipped is not None and len(report.skipped) < 10:
                    report.skipped.append(f"row {index}: {msg}")
                continue
            for inst in mapped if isinstance(mapped, list) else [mapped]:
                inst.source = json_safe(inst.source or rows[index])
                out.append(inst)
        if limit is not None:
            out = out[:limit]
        return out, report

    def iter_info(self) -> Iterator[tuple[str, Any]]:
        yield from (("name", self.name), ("scenario", self.scenario), ("task_type", self.task_type),
                    ("source", self.source), ("license", self.license),
                    ("offline", self.offline_available()))


def _bad_row_message(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        err = exc.errors()[0]
        return f"field {'.'.join(str(p) for p in err['loc']) or '(row)'}: {err['msg']}"
    return str(exc)


def read_table(path: Path) -> list[dict[str, Any]]:
    """Rows of a jsonl/json/parquet/csv file; a malformed line is named with its line number."""
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        rows = []
        with open(path) as fh:
            for lineno, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise HaldetError(f"malformed JSON line: {exc.msg}", where=f"{path}, line {lineno}",
                                      hint="fix or remove that line") from None
        return rows
    if suffix == ".json":
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise HaldetError(f"malformed JSON: {exc.msg}", where=f"{path}, line {exc.lineno}") from None
        if isinstance(data, dict):
            data = next((v for v in data.values() if isinstance(v, list)), [data])
        return list(data)
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    if suffix == ".csv":
        import csv

        with open(path, newline="") as fh:
            return list(csv.DictReader(fh))
    raise HaldetError(f"unsupported data file type {suffix!r}", where=str(path),
                      hint="use .jsonl, .json, .parquet or .csv")


DATASETS: Registry[type[DatasetAdapter]] = Registry("dataset", "haldet.datasets")


def register(name: str):  # type: ignore[no-untyped-def]
    """Class decorator: register an adapter under `name` (sets `cls.name`)."""

    def decorate(cls: type[DatasetAdapter]) -> type[DatasetAdapter]:
        cls.name = name
        return DATASETS.register(name)(cls)

    return decorate
