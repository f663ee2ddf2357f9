"""The one reader of a run directory: what the run recorded, read back the way the run used it.

Everything that shows a stored run (the reports, `haldet.load_run` / `load_scores`, `haldet compare`, the explorer)
reads through `RunReader`, so they agree with results.json and with each other:
- a cell's labels are the records under the keys the run recorded for the items it evaluated (`keys.json`), never
  the newest record per item: `haldet annotate --compare-with` appends a second judge's labels to the same log;
- a detector's scores are those under the score key its manifest entry recorded, in the log it names;
- every other stage's records (generate, sample, auxiliary, features, verdict, ...) likewise under the keys the run
  recorded (`keys.json`): a record from other settings appended later for the same item (another generation, a
  second verdict model) is never shown as the run's; their arrays (`CellReader.arrays`) are those records' arrays.
Older runs are read through fallbacks, each marked with the run format it serves (`names.RUN_FORMAT`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from haldet.store.names import KEYS, RESPONSE, RUN_FORMAT, SCORES, ScoreLog
from haldet.store.records import read_records, read_table
from haldet.store.run import CellStore, RunStore

SCORE_FIELDS = pa.schema([("id", pa.string()), ("key", pa.string()), ("value", pa.float64()), ("reason", pa.string()),
                          ("values", pa.list_(pa.float64())), ("reasons", pa.list_(pa.string()))])
LABEL_STAGE = "annotate"
PRIMARY = "generate"  # the stage every cell records first: a cell without its keys recorded no evidence keys


def run_format(manifest: Mapping[str, Any] | None) -> int:
    """The format a run directory was written in; 1 for runs written before the manifest recorded it."""
    return int((manifest or {}).get("run_format") or 1)


@dataclass
class ScoreRead:
    """A score log's records under one key, in file order (a repeated id: the later record is the newer)."""

    log: ScoreLog
    key: str | None
    table: pa.Table

    def by_id(self) -> dict[str, dict[str, Any]]:
        """The newest record of each item."""
        return {rec["id"]: rec for rec in self.table.to_pylist()}

    def values(self) -> dict[str, float]:
        """One value per item (NaN: invalid); a log with one value per unit gives its only unit's value, or NaN
        when the item has several units (a unit level: no single item score)."""
        out = {}
        for rec in self.table.select(["id", "value", "values"]).to_pylist():
            vals = rec["values"]
            v = rec["value"] if vals is None else (vals[0] if len(vals) == 1 else None)
            out[rec["id"]] = np.nan if v is None else float(v)
        return out


class CellReader:
    """One (dataset, model) cell of a run, read as the run recorded it (its manifest entry may be empty: a cell
    still running, whose scores have no recorded key yet)."""

    def __init__(self, store: CellStore, entry: Mapping[str, Any], fmt: int, *, suite: bool) -> None:
        self.store, self.entry, self.run_format, self.suite = store, entry, fmt, suite
        self.root = store.root
        self._keys: tuple[tuple[int, int], dict[str, Any]] | None = None  # keys.json, read once per version

    def split(self) -> dict[str, Any]:
        """`split.json`: the parts (train, val, test: item ids) and what the split recorded beside them."""
        return self.store.read_json("split.json") or {}

    def parts(self) -> dict[str, str]:
        """Item id -> its part of the split."""
        split = self.split()
        return {i: part for part in ("train", "val", "test") for i in split.get(part) or []}

    def used_keys(self, stage: str) -> dict[str, frozenset[str]] | None:
        """The key(s) of each item's record(s) of `stage` that the run used (None: not recorded)."""
        keys = self._recorded().get(stage)
        if keys is None:
            return None
        return {item_id: frozenset([k] if isinstance(k, str) else k) for item_id, k in keys.items()}

    def records(self, stage: str) -> dict[str, dict[str, Any]]:
        """Each item's record of a stage log under the keys the run recorded (a stage with several records per item,
        e.g. one verdict per ask: the newest of them); labels: `labels`."""
        keys = self.shown_keys(stage)
        return {rec["id"]: rec for rec in read_records(self.store.log(stage).path)
                if keys is None or rec.get("key") in keys.get(str(rec.get("id")), ())}

    def arrays(self, stage: str, name: str) -> dict[str, np.ndarray]:
        """Array `name` of each item whose record of `stage` (under the run's keys, `records`) holds it, read from
        the record's HDF5 shard (e.g. the features stage's `hidden_mean` [layers, D])."""
        refs = [(str(rec["shard"]), item_id) for item_id, rec in self.records(stage).items()
                if rec.get("shard") and name in (rec.get("arrays") or {})]
        return dict(zip((i for _, i in refs), self.store.arrays(stage).read_many(refs, name), strict=True))

    def labels(self) -> dict[str, dict[str, Any]]:
        """Each evaluated item's label record (category, judge, reasoning, ...) under the run's judge key."""
        return self.records(LABEL_STAGE)

    def record_table(self, stage: str, fields: pa.Schema) -> tuple[pa.Table, np.ndarray]:
        """`records` as Arrow columns (`fields`, with `id` first) and each record's byte offset in the log, in file
        order (a repeated id: the later record is the newer)."""
        keys = self.shown_keys(stage)
        wanted = fields if "key" in fields.names else fields.append(pa.field("key", pa.string()))
        table, offsets = read_table(self.store.log(stage).path, wanted)
        if keys is not None and table.num_rows:
            pairs = pc.binary_join_element_wise(table["id"], pc.fill_null(table["key"], ""), "\x1f")
            recorded = pa.array([f"{i}\x1f{k}" for i, ks in keys.items() for k in ks], type=pa.string())
            keep = pc.fill_null(pc.is_in(pairs, value_set=recorded), False)
            table, offsets = table.filter(keep), offsets[keep.to_numpy(zero_copy_only=False)]
        return table.select(fields.names), offsets

    def label_table(self, fields: pa.Schema) -> tuple[pa.Table, np.ndarray]:
        """`labels` as Arrow columns (`record_table` of the labels)."""
        return self.record_table(LABEL_STAGE, fields)

    def _recorded(self) -> dict[str, Any]:
        """`keys.json` as stored now (read again only when it changed)."""
        path = self.root / KEYS
        try:
            st = path.stat()
        except FileNotFoundError:
            return {}
        version = (st.st_size, st.st_mtime_ns)
        if self._keys is None or self._keys[0] != version:
            self._keys = (version, self.store.read_json(KEYS) or {})
        return self._keys[1]

    def shown_keys(self, stage: str) -> dict[str, frozenset[str]] | None:
        """The keys of the records of `stage` the run used, which readers show; None: every record counts, the
        newest per item winning (runs of older formats, a cell still running)."""
        keys = self.used_keys(stage)
        if keys is not None:
            return keys
        if stage == LABEL_STAGE:
            if self.run_format < 2:
                return format1_labels()
            return {}  # none recorded: not labelled by the judges (yet), or labels from data
        if self.run_format < 3 or PRIMARY not in self._recorded():
            return format2_evidence()  # (also a cell of an older format kept in a resumed run, or still generating)
        # a cell still running records its evidence keys as each stage finishes: what is stored so far; a finished
        # cell that recorded none for this stage did not use it
        return None if not self.entry else {}

    def detector_logs(self) -> list[tuple[ScoreLog, Mapping[str, Any]]]:
        """Each detector entry of the manifest with its score log."""
        out = []
        for det in self.entry.get("detectors") or []:
            log = ScoreLog.parse(str(det["log"])) if det.get("log") else format1_log(det, suite=self.suite)
            out.append((log, det))
        return out

    def score_logs(self) -> list[ScoreLog]:
        """The logs of the recorded detectors, then any other log in `scores/` (a cell still running, a detector of
        an earlier config), by name."""
        recorded = list(dict.fromkeys(log for log, _ in self.detector_logs()))
        folder = self.root / SCORES
        found = [ScoreLog.parse(p.stem) for p in folder.glob("*.jsonl")] if folder.is_dir() else []
        return recorded + sorted((log for log in found if log not in recorded), key=lambda log: log.stem)

    def log_of(self, detector: str, level: str = RESPONSE, train_labels: str = "") -> ScoreLog:
        """The score log of a detector at a level (the recorded one; else the name the protocol builds)."""
        for log, det in self.detector_logs():
            if det.get("name") == detector and (det.get("level") or RESPONSE) == level and \
                    (det.get("train_labels") or "") == train_labels:
                return log
        return ScoreLog.of(detector, level, train_labels, suite=self.suite)

    def recorded_key(self, log: ScoreLog) -> str | None:
        return next((str(det["key"]) for lg, det in self.detector_logs() if lg == log and det.get("key")), None)

    def scores(self, log: ScoreLog, ids: list[str] | None = None, fields: pa.Schema = SCORE_FIELDS) -> ScoreRead:
        """A log's records under the key the run recorded for it; with no recorded key (run_format 1 entries
        without keys, a cell still running) the key covering the most items (of `ids`, when given), ties to the
        newest. `ids`: only these items' records."""
        table, _ = read_table(self.root / log.path, fields)
        if ids is not None and table.num_rows:
            table = table.filter(pc.is_in(table["id"], value_set=pa.array(ids, type=pa.string())))
        key = self.recorded_key(log)
        if key is None:
            key = _most_covering(table)
        if key is None:
            return ScoreRead(log, None, fields.empty_table())
        return ScoreRead(log, key, table.filter(pc.fill_null(pc.equal(table["key"], key), False)))

    def calibrated(self, log: ScoreLog, key: str | None) -> dict[str, Any] | None:
        """The calibrated probabilities stored for the scores under `key` (None: none for those scores)."""
        stored = self.store.read_json(log.calibrated)
        if key is None or not isinstance(stored, dict) or stored.get("key") != key:
            return None
        return stored


# Compatibility: how a run of an older format is read. Each fallback names the format it serves; retire it with that
# format. (A score log without a recorded key, `_most_covering`, is no compatibility case: a cell still running has
# recorded no keys yet.)
def format1_labels() -> dict[str, frozenset[str]] | None:
    """run_format 1 recorded no label keys: every label record counts, the newest per item winning (a second
    judge's labels added later to the same log then show; runs of format 2 never read labels this way)."""
    return None


def format2_evidence() -> dict[str, frozenset[str]] | None:
    """run_formats 1 and 2 recorded no keys of evidence records (generate, sample, auxiliary, verdict, ...): every
    record counts, the newest per item winning (a record from other settings appended later then shows; runs of
    format 3 never read evidence this way)."""
    return None


def format1_log(det: Mapping[str, Any], *, suite: bool) -> ScoreLog:
    """run_format 1 named no score log per detector entry: the name the protocol built from the entry."""
    return ScoreLog.of(str(det.get("name")), str(det.get("level") or RESPONSE), str(det.get("train_labels") or ""),
                       suite=suite)


def _most_covering(table: pa.Table) -> str | None:
    """The key with records for the most distinct items, ties to the one written last."""
    if not table.num_rows:
        return None
    keys = pc.fill_null(table["key"], "").combine_chunks().dictionary_encode()
    ids = table["id"].combine_chunks().dictionary_encode()
    codes, id_codes = keys.indices.to_numpy(), ids.indices.to_numpy()
    names = keys.dictionary.to_pylist()
    pairs = np.unique(codes.astype(np.int64) * (len(ids.dictionary) + 1) + id_codes)
    coverage = np.bincount(pairs // (len(ids.dictionary) + 1), minlength=len(names))
    last = np.zeros(len(names), dtype=np.int64)
    last[codes] = np.arange(len(codes))
    return str(names[max(range(len(names)), key=lambda c: (coverage[c], last[c]))])


class RunReader:
    """A run directory read back: its manifest (None: a merged report's folder holds results only) and cells."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        self.store = RunStore(self.root)
        self.manifest: dict[str, Any] | None = self.store.read_manifest()

    @property
    def run_format(self) -> int:
        return run_format(self.manifest)

    @property
    def suite(self) -> bool:
        return bool(((self.manifest or {}).get("config") or {}).get("suite"))

    def entries(self) -> list[dict[str, Any]]:
        """The manifest's cell entries (cells that finished)."""
        return list((self.manifest or {}).get("cells") or [])

    def entry(self, dataset: str, model: str) -> dict[str, Any]:
        return next((c for c in self.entries() if c.get("dataset") == dataset and c.get("model") == model), {})

    def cell(self, dataset: str, model: str, entry: Mapping[str, Any] | None = None) -> CellReader:
        return CellReader(self.store.cell(dataset, model), self.entry(dataset, model) if entry is None else entry,
                          self.run_format, suite=self.suite)

    def running(self) -> Iterator[tuple[str, str]]:
        """(dataset, model) of the config's cells not in the manifest yet whose folder exists (a run in progress)."""
        config = (self.manifest or {}).get("config") or {}
        done = {(c.get("dataset"), c.get("model")) for c in self.entries()}
        for model in config.get("models") or []:
            for dataset in config.get("datasets") or []:
                if (dataset, model) not in done and self.store.cell(dataset, model).root.is_dir():
                    yield dataset, model


__all__ = ["RUN_FORMAT", "SCORE_FIELDS", "CellReader", "RunReader", "ScoreRead", "run_format"]
