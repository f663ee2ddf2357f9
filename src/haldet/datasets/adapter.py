"""`DatasetAdapter`: maps one source's rows into `Instance`s.

An adapter declares where its data lives (hub id + config(s), packaged file, or local files) and how one row
maps into the unified schema. Loading, split fallback, seeded shuffling, `limit`, `--data-dir` files, adapter
options and the `--on-bad-row` policy live here once, so an adapter is a `row_to_instance` plus a few class
attributes (registered with `@register` from `haldet.datasets.base`).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from pydantic import ValidationError

from haldet.datasets.formats import (
    Format,
    RawFile,
    hub_format,
    needed_columns,
    read_raw,
    read_table,
    split_from_name,
)
from haldet.datasets.rows import BadRow, SkipRow, bad_row_message, json_safe, row_where
from haldet.errors import HaldetError, unknown_keys
from haldet.schema import Instance

SPLIT_ORDER = ("test", "validation", "dev", "train")
EXTENSIONS = ("jsonl", "json", "parquet", "csv", "tsv", "jsonl.gz", "json.gz")


@dataclass
class LoadReport:
    """What a load did: rows read, rows skipped as bad (first reasons), rows filtered by design, origin."""

    origin: str
    split: str = ""
    n_rows: int = 0
    n_skipped: int = 0
    skipped: list[str] = field(default_factory=list)
    n_filtered: int = 0
    filtered: list[str] = field(default_factory=list)

    def summary(self) -> str:
        text = f"{self.n_rows} rows read from {self.origin} (split {self.split})"
        if self.n_skipped:
            text += f"; {self.n_skipped} bad rows skipped (first: {'; '.join(self.skipped[:3])})"
        if self.n_filtered:
            text += f"; {self.n_filtered} rows left out by design ({self.filtered[0]})"
        return text


class Rows(Sequence[dict[str, Any]]):
    """Several row sequences (e.g. one per Belebele language) seen as one, without copying them."""

    def __init__(self, parts: list[Sequence[dict[str, Any]]]) -> None:
        self.parts = parts
        self.offsets = []
        total = 0
        for part in parts:
            self.offsets.append(total)
            total += len(part)
        self.total = total

    def __len__(self) -> int:
        return self.total

    def __getitem__(self, index: int) -> dict[str, Any]:  # type: ignore[override]
        if index < 0 or index >= self.total:
            raise IndexError(index)
        for part, offset in zip(reversed(self.parts), reversed(self.offsets), strict=True):
            if index >= offset:
                return dict(part[index - offset])
        raise IndexError(index)


@dataclass
class Source:
    """Where a load's rows came from."""

    origin: str
    split: str
    rows: Sequence[dict[str, Any]]


class DatasetAdapter:
    """Base adapter. Subclasses set the class attributes and implement `row_to_instance`."""

    name: ClassVar[str] = ""
    scenario: ClassVar[str] = ""
    task_type: ClassVar[str] = ""
    source: ClassVar[str] = ""          # where the data comes from, for humans
    license: ClassVar[str] = ""
    hub_id: ClassVar[str | None] = None
    hub_config: ClassVar[str | None] = None
    split_order: ClassVar[tuple[str, ...]] = SPLIT_ORDER  # first available split is used
    local_names: ClassVar[tuple[str, ...]] = ()  # extra file stems looked for under --data-dir
    required_fields: ClassVar[tuple[str, ...]] = ()
    packaged_split: ClassVar[str] = "data"  # split name of the packaged file's rows
    file_split: ClassVar[str] = "data"  # split of a local file whose name and content state none
    originals: ClassVar[tuple[Format, ...]] = ()  # the authors' release formats, besides the hub schema
    params: ClassVar[dict[str, Any]] = {}  # adapter options (RunConfig.dataset_params[name]) and defaults

    def __init__(self, data_dir: str | Path | None = None, **options: Any) -> None:
        self.data_dir = Path(data_dir) if data_dir else None
        known = {"split": None, **self.params}
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise HaldetError(
                f"{unknown_keys('option(s)', unknown, known)} for dataset {self.name!r}",
                where=f"dataset_params.{self.name}",
                hint=f"options of {self.name}: {', '.join(sorted(known))}",
            )
        self.options: dict[str, Any] = {**known, **options}

    # --- what subclasses implement -------------------------------------------------------------------
    def row_to_instance(self, row: dict[str, Any], index: int, split: str) -> Instance | list[Instance]:
        raise NotImplementedError

    def units(self, rows: Sequence[dict[str, Any]]) -> list[tuple[int, int | None]]:
        """The shuffled, limited units: (row index, sub-unit). One per row by default; CoQA has one per turn."""
        return [(i, None) for i in range(len(rows))]

    def ordered_units(self, rows: Sequence[dict[str, Any]], seed: int) -> list[tuple[int, int | None]]:
        """The units in the seeded order loads take them in (a prefix of it is what `limit` keeps)."""
        order = self.units(rows)
        random.Random(seed).shuffle(order)
        return order

    def map_unit(self, row: dict[str, Any], index: int, sub: int | None, split: str) -> Instance | list[Instance]:
        return self.row_to_instance(row, index, split)

    def packaged_path(self) -> Path | None:
        """A data file shipped inside an installed package (offline use); None when not packaged."""
        return None

    def hub_configs(self) -> list[str | None]:
        """Hub configs loaded and concatenated (several for per-language datasets)."""
        return [self.hub_config]

    # --- shared machinery ----------------------------------------------------------------------------
    def offline_available(self) -> bool:
        return self.packaged_path() is not None or (self.data_dir is not None and self.local_file() is not None)

    def instance(self, id_split: str, native: Any, /, **fields: Any) -> Instance:
        """An `Instance` of this dataset with a stable id `<name>/<id_split>/<native>` (`split=` in `fields` is the
        dataset's own train/val/test assignment, for suites that keep it)."""
        return Instance(id=self.make_id(id_split, native), dataset=self.name, scenario=self.scenario,
                        task_type=fields.pop("task_type", self.task_type), **fields)

    def make_id(self, split: str, native: Any) -> str:
        return f"{self.name}/{split}/{native}"

    def rows(self) -> Source:
        """Local files first (when --data-dir/--data-file is given), then packaged data, then the hub. A packaged
        dataset with no file of its own under --data-dir (a run mixing it with datasets that need one) reads its
        packaged copy."""
        check_data_dir(self.data_dir)
        if self.data_dir is not None and (self.packaged_path() is None or self.local_paths()):
            return self.local_rows()
        packaged = self.packaged_path()
        if packaged is not None:
            return Source(str(packaged), self.packaged_split, read_table(packaged))
        return self.hub_rows()

    @classmethod
    def formats(cls) -> list[Format]:
        """Every accepted file format: the original release formats (recognised by their stricter shapes first),
        then the hub schema."""
        hub = hub_format(cls.required_fields, f"rows with the fields {', '.join(cls.required_fields)} "
                                              f"({cls.hub_id or cls.source} schema; JSON lines, JSON, CSV or Parquet)")
        return [*cls.originals, hub]

    def local_paths(self) -> list[Path]:
        """The files a local load considers: `--data-file` itself; every file under `DIR/<name>/`; or, without
        that folder, `DIR/<name>_<split>.<ext>` and `DIR/<stem>.<ext>` files (adapter stems, `data`, `<name>`)."""
        assert self.data_dir is not None
        if self.data_dir.is_file():
            return [self.data_dir]
        sub = self.data_dir / self.name
        if sub.is_dir():
            return sorted(p for p in sub.rglob("*") if p.is_file() and not any(
                part.startswith(".") for part in p.relative_to(sub).parts))
        out: list[Path] = []
        for split in self._split_preference():
            out += [self.data_dir / f"{self.name}_{split}.{ext}" for ext in EXTENSIONS]
        for stem in (*self.local_names, "data", self.name):
            out += [self.data_dir / f"{stem}.{ext}" for ext in EXTENSIONS]
        return [p for p in out if p.is_file()]

    def local_file(self) -> tuple[Path, str] | None:
        paths = self.local_paths()
        return (paths[0], split_from_name(paths[0]) or self.file_split) if paths else None

    def missing_local(self, looked: str) -> HaldetError:
        return HaldetError(
            f"no local data file for dataset {self.name!r}",
            where=looked,
            hint=f"put the release's file(s) in {self._local_folder()}/ (any file name; accepted: "
                 f"{self._accepted()}), or pass --data-file PATH; `haldet datasets show {self.name} --formats` "
                 f"and docs/datasets.md list them",
        )

    def _local_folder(self) -> str:
        """Where local files are looked for: the --data-file itself, or DIR/<name>."""
        if self.data_dir is not None and self.data_dir.is_file():
            return str(self.data_dir)
        return str(self.data_dir / self.name) if self.data_dir else f"<data-dir>/{self.name}"

    def _accepted(self) -> str:
        return "; ".join(f"{f.name}: {f.describe}" for f in self.formats())

    def recognise(self, raw: RawFile) -> list[tuple[str, list[dict[str, Any]]]] | None:
        """(split, hub-schema rows) of a file in one of this dataset's formats; None when it is in none."""
        for fmt in self.formats():
            parts = fmt.convert(raw)
            if parts is not None:
                name_split = split_from_name(raw.path)
                return [(split or name_split or self.file_split, rows) for split, rows in parts]
        return None

    def local_rows(self) -> Source:
        paths = self.local_paths()
        if not paths:
            raise self.missing_local(f"{self._local_folder()} (and the other names listed in docs/datasets.md)")
        by_split: dict[str, list[tuple[Path, list[dict[str, Any]]]]] = {}
        rejected: list[tuple[Path, str]] = []
        for path in paths:
            try:
                raw = read_raw(path)
            except HaldetError as exc:
                if any(s.lower().lstrip(".") in EXTENSIONS for s in path.suffixes):
                    raise  # a data file that cannot be read is an error, never skipped
                rejected.append((path, exc.what))  # a README or licence next to the data
                continue
            parts = self.recognise(raw)
            if parts is None:
                rejected.append((path, self._why_not(raw)))
                continue
            for split, part in parts:
                by_split.setdefault(split, []).append((path, part))
        if not by_split:
            raise self._unrecognised(rejected)
        split = self.pick_split(list(by_split), self._local_folder())
        files = by_split[split]
        rows: list[dict[str, Any]] = [row for _, part in files for row in part]
        origin = ", ".join(str(p) for p, _ in files)
        if len(files) > 1:
            for (path, part) in files:  # rows of several files: the line names its file
                for row in part:
                    row["_file"] = path.name
        return Source(origin, split, rows)

    def _why_not(self, raw: RawFile) -> str:
        """Why a readable file is not in any accepted format: the missing columns (with those found) when it
        shares columns with the hub schema, a nested file read as flat rows, or simply not recognised."""
        cols = raw.columns()
        needed = needed_columns(self.required_fields)
        missing = [c for c in needed if c not in cols]
        found = ", ".join(cols[:20]) or "none"
        if missing and len(missing) < len(needed):
            return f"missing column(s) {', '.join(missing)} (columns found: {found})"
        nested = raw.nested_fields()
        if nested:
            return (f"not a known format: a nested file (field {nested[0]!r} holds a list of records) read as "
                    f"flat rows with columns {found}")
        return f"not a known format (columns found: {found})"

    def _unrecognised(self, rejected: list[tuple[Path, str]]) -> HaldetError:
        reasons = "; ".join(f"{path.name}: {why}" for path, why in rejected[:4])
        single = len(rejected) == 1 and rejected[0][1].startswith("missing column")
        return HaldetError(
            (f"data file of dataset {self.name!r}: {rejected[0][1]}" if single else
             f"no file in a format of dataset {self.name!r} ({reasons})"),
            where=str(rejected[0][0]) if len(rejected) == 1 else self._local_folder(),
            hint=f"accepted: {self._accepted()}",
        )

    def _split_preference(self) -> tuple[str, ...]:
        wanted = self.options.get("split")
        return (wanted,) if wanted else self.split_order

    def pick_split(self, available: Sequence[str], where: str) -> str:
        """The first split of the adapter's fixed order that exists; any split as a last resort."""
        order = self._split_preference()
        split = next((s for s in order if s in available), None)
        if split is None and not self.options.get("split") and available:
            split = available[0]
        if split is None:
            raise HaldetError(f"split {'/'.join(order)} not available (available: {', '.join(available) or 'none'})",
                              where=where, hint="choose one of the available splits with --split NAME (or "
                                                f"dataset_params: {{{self.name}: {{split: ...}}}})")
        return split

    def hub_rows(self) -> Source:
        if self.hub_id is None:
            raise HaldetError(f"dataset {self.name!r} has no hub source",
                              hint=f"download its files ({self.source}) and pass --data-dir DIR (files in "
                                   f"DIR/{self.name}/) or --data-file PATH")
        import datasets  # heavy import, only when needed

        parts: list[Sequence[dict[str, Any]]] = []
        split = ""
        for config in self.hub_configs():
            where = f"hub dataset {self.hub_id}" + (f", config {config}" if config else "")
            try:
                available = datasets.get_dataset_split_names(self.hub_id, config)
                split = self.pick_split(list(available), where)
                parts.append(datasets.load_dataset(self.hub_id, config, split=split))
            except HaldetError:
                raise
            except Exception as exc:  # network, auth, gated, missing: all user-fixable
                raise HaldetError(
                    f"cannot load dataset {self.hub_id!r} from the Hugging Face hub: {type(exc).__name__}: "
                    f"{str(exc)[:200]}",
                    where=where,
                    hint=f"check the network, the hub id and access for gated datasets; or download the release "
                         f"files (docs/datasets.md) and pass --data-dir DIR (files in DIR/{self.name}/) or "
                         f"--data-file PATH",
                ) from None
        return Source(f"hub:{self.hub_id}", split, parts[0] if len(parts) == 1 else Rows(parts))

    def load(self, *, limit: int | None = None, seed: int = 42, on_bad_row: str = "fail") -> tuple[
        list[Instance], LoadReport
    ]:
        """Seeded shuffle of the units, then map them in that order until `limit` instances.

        The order does not depend on `limit`, so a larger limit extends a smaller one (the rows past the
        evaluated limit are what the few-shot demo pool is drawn from). Bad rows skip or fail by policy.
        """
        if on_bad_row not in ("skip", "fail"):
            raise HaldetError(f"on_bad_row must be skip or fail, not {on_bad_row!r}", where="--on-bad-row")
        src = self.rows()
        order = self.ordered_units(src.rows, seed)
        report = LoadReport(origin=src.origin, split=src.split)
        out: list[Instance] = []
        seen: dict[str, str] = {}
        for index, sub in order:
            if limit is not None and len(out) >= limit:
                break
            report.n_rows += 1
            row = dict(src.rows[index])
            where = row_where(row, index) + (f", turn {sub + 1}" if sub is not None else "")
            try:
                mapped = self.map_unit(dict(row), index, sub, src.split)
            except SkipRow as exc:
                report.n_filtered += 1
                if len(report.filtered) < 10:
                    report.filtered.append(f"{where}: {exc}")
                continue
            except HaldetError as exc:  # a row the adapter refuses outright: named by its place like any other
                raise HaldetError(f"{where} of dataset {self.name!r}: {exc.what}", where=exc.where or src.origin,
                                  hint=exc.hint) from None
            except (BadRow, ValidationError) as exc:
                msg = bad_row_message(exc)
                if on_bad_row == "fail":
                    raise HaldetError(f"{where} of dataset {self.name!r}: {msg}", where=src.origin,
                                      hint=f"fix the row (fields: {', '.join(self.required_fields)}), or pass "
                                           f"--on-bad-row skip to skip such rows") from None
                report.n_skipped += 1
                if len(report.skipped) < 10:
                    report.skipped.append(f"{where}: {msg}")
                continue
            for inst in mapped if isinstance(mapped, list) else [mapped]:
                if inst.id in seen:
                    raise HaldetError(f"two rows of dataset {self.name!r} give the same id {inst.id!r}",
                                      where=f"{src.origin}, {seen[inst.id]} and {row_where(row, index)}",
                                      hint="ids come from the source's own id field; make them unique")
                seen[inst.id] = row_where(row, index)
                if not inst.source:
                    inst.source = json_safe(dict(row))
                out.append(inst)
        if limit is not None:
            out = out[:limit]
        if not out and report.n_skipped:
            raise HaldetError(f"every row of dataset {self.name!r} was skipped as bad ({report.n_skipped})",
                              where=src.origin, hint="reasons: " + "; ".join(report.skipped[:5]))
        return out, report

    @classmethod
    def info(cls, data_dir: str | Path | None = None) -> dict[str, Any]:
        adapter = cls(data_dir=data_dir)
        return {"name": cls.name, "scenario": cls.scenario, "task_type": cls.task_type,
                "source": cls.source, "hub_id": cls.hub_id, "hub_config": adapter.hub_source_configs(),
                "license": cls.license, "offline": adapter.offline_available(),
                "required_fields": list(cls.required_fields), "formats": [f.name for f in cls.formats()],
                "params": {k: v for k, v in adapter.options.items()}}

    def hub_source_configs(self) -> list[str] | str | None:
        configs = [c for c in self.hub_configs() if c]
        return configs[0] if len(configs) == 1 else (configs or None)


def check_data_dir(data_dir: str | Path | None) -> None:
    """A --data-dir (or --data-file) that does not exist is an error for every dataset: a packaged one would
    otherwise read its own copy, and a typo would run on other data than the user meant."""
    if data_dir is not None and not Path(data_dir).exists():
        raise HaldetError("no such data directory or file", where=str(data_dir),
                          hint="check the path given to --data-dir (or the config's data_dir); packaged datasets "
                               "(halueval_*, humaneval) need none")
