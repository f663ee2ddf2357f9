"""What the explorer shows, read from run directories and never written: runs, their cells, each cell's item table
(split, label, judge, question excerpt, every detector's score and calibrated probability) and one item's stored
records.

Every record is read through the run directory's one reader (`haldet.store.reader`), as the reports read it: an
item's label is the judges' label the run evaluated (a suite's labels ship with its data and are read from the
dataset, reloaded as the run loads it); a detector's scores are the records under the score key the manifest
recorded for it, else (a run in progress, an old run) the key covering the most items; its calibrated
probabilities only when stored under that recorded key. Other evidence records (the answers, samples, auxiliary
texts, verdicts) are those under the keys the run recorded too (`keys.json`; the newest per item for older runs).
A cell is re-read when one of its files changes, so a run in progress shows what is stored so far.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from haldet.config import RunConfig
from haldet.errors import HaldetError
from haldet.evaluation.thresholds import best_f1_threshold
from haldet.store import KEYS, RunStore, ScoreLog, read_json
from haldet.store.names import SCORES
from haldet.store.reader import CellReader, run_format
from haldet.store.records import decode

BINARY = {"hallucination": 1, "correct": 0}
SPLITS = ("train", "val", "test")
# stage logs an item page reads; `units` is the log of the units a suite scored each answer with (the longform
# suite's claims, with their label sources and evidence)
EVIDENCE_STAGES = ("generate", "sample", "auxiliary", "verdict", "annotate", "units")
_SPECIAL = re.compile(r"<\|[^|>]*\|>|<s>|</s>|\[/?INST\]")
EXCERPT = 160
ID_FIELDS = pa.schema([("id", pa.string())])
GENERATE_FIELDS = pa.schema([("id", pa.string()), ("prompt", pa.string()), ("response", pa.string()),
                             ("provided", pa.bool_())])
ANNOTATE_FIELDS = pa.schema([("id", pa.string()), ("category", pa.string()), ("judge", pa.string())])


def question_excerpt(prompt: str, limit: int = EXCERPT) -> str:
    """The asked part of a rendered prompt: the text after its last `Question:` (else its last user text), chat
    markup removed, cut to `limit` characters."""
    text = _SPECIAL.sub("\n", prompt)
    for marker in ("Question:", "question:", "Q:"):
        if marker in text:
            text = text.rsplit(marker, 1)[1]
            break
    else:
        text = re.sub(r"\n(assistant|user|system)\n", "\n", text)
    text = " ".join(re.sub(r"\b(assistant|Answer:)\s*$", "", text.strip()).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass
class ScoreColumn:
    """One score log of a cell (`scores/<name>.jsonl`): one value per item in cell order (NaN: none or invalid).
    Unit-level logs hold one value per unit; the item's value here is the maximum over its finite units."""

    name: str           # the log's name: `perplexity`, `likelihood@sentence`, `x@sentence@noisy`
    detector: str
    level: str
    key: str | None
    values: np.ndarray
    reasons: dict[str, str] = field(default_factory=dict)          # item id -> why its score is NaN
    units: dict[str, tuple[list[float], list[str]]] = field(default_factory=dict)  # unit levels: id -> values, reasons
    # calibrated P(hallucination) in cell order (NaN: none) and the map that made it (platt, isotonic); None when
    # the run stored no probabilities for the scores under this column's key
    probabilities: np.ndarray | None = None
    calibration: str = ""

    @property
    def unit_level(self) -> bool:
        return self.level != "response"


@dataclass
class Threshold:
    value: float | None
    source: str  # what chose it: "best F1 on validation", or why none


class Cell:
    """One (dataset, model) cell of a run, loaded on first use and re-read when its files change."""

    def __init__(self, run: RunSource, dataset: str, model: str, entry: dict[str, Any]) -> None:
        self.run, self.dataset, self.model, self.entry = run, dataset, model, entry
        self.reader = CellReader(RunStore(run.root).cell(dataset, model), entry, run_format(run.manifest),
                                 suite=bool((run.manifest.get("config") or {}).get("suite")))
        self.root = self.reader.root
        self._lock = threading.Lock()
        self._signature: tuple[Any, ...] | None = None
        self._offsets: dict[str, tuple[tuple[Any, ...], dict[str, int]]] = {}
        self.instances: dict[str, Any] = {}
        self.instances_note = ""

    # ---- loading ----------------------------------------------------------------------------------------------
    def _files(self) -> list[Path]:
        files = [self.root / "split.json", self.root / KEYS, *(self.root / f"{s}.jsonl" for s in EVIDENCE_STAGES)]
        scores = self.root / SCORES
        return files + (sorted([*scores.glob("*.jsonl"), *scores.glob("*.calibrated.json")]) if scores.is_dir()
                        else [])

    def signature(self) -> tuple[Any, ...]:
        out = []
        for path in self._files():
            try:
                st = path.stat()
                out.append((path.name, st.st_size, st.st_mtime_ns))
            except FileNotFoundError:
                continue
        return tuple(out)

    def ensure(self) -> Cell:
        """Load (or reload after a change) the item table."""
        with self._lock:
            sig = self.signature()
            if sig != self._signature:
                self._load()
                self._signature = sig
        return self

    def _load(self) -> None:
        split = read_json(self.root / "split.json") if (self.root / "split.json").exists() else {}
        part_of = {i: part for part in SPLITS for i in (split.get(part) or [])}
        generate = self.root / "generate.jsonl"
        table, offsets = self.reader.record_table("generate", GENERATE_FIELDS)
        gen_ids = table["id"].to_pylist()
        prompts = [p or "" for p in table["prompt"].to_pylist()]
        responses = [r or "" for r in table["response"].to_pylist()]
        # answers shipped with the data (a suite): its labels and units are in the data
        self.provided = bool(pc.any(table["provided"]).as_py()) if table.num_rows else False
        self._offsets["generate"] = (self._versions(generate), dict(zip(gen_ids, offsets.tolist(), strict=True)))
        gen = {i: n for n, i in enumerate(gen_ids)}  # newest record per id
        ids = list(gen) + [i for i in part_of if i not in gen]  # generation order, then split-only ids (trimmed)
        self.ids = ids
        self.position = {item_id: n for n, item_id in enumerate(ids)}
        self._id_array = pa.array(ids, type=pa.string())
        self.split = np.array([part_of.get(i, "") for i in ids], dtype=object)
        rows = [gen.get(i) for i in ids]
        self.question = [question_excerpt(prompts[r]) if r is not None else "" for r in rows]
        self.answer = [" ".join(responses[r][:4 * EXCERPT].split())[:EXCERPT] if r is not None else "" for r in rows]
        self._search = [f"{i}\n{prompts[r]}\n{responses[r]}".lower() if r is not None else i.lower()
                        for i, r in zip(ids, rows, strict=True)]
        self._load_labels()
        self.columns = {c.name: c for c in self._load_scores()}
        self._order: dict[str, np.ndarray] = {}
        self._sorted: dict[str, np.ndarray] = {}

    def _positions(self, table: pa.Table) -> np.ndarray:
        """Each record's item position in this cell (-1: an id the cell does not hold)."""
        if not table.num_rows:
            return np.zeros(0, dtype=np.int64)
        at = pc.index_in(table["id"], value_set=self._id_array)
        return pc.fill_null(at, -1).to_numpy().astype(np.int64)

    def _load_labels(self) -> None:
        annotate = self.root / "annotate.jsonl"
        category = ["" for _ in self.ids]
        judge = ["" for _ in self.ids]
        if annotate.exists():  # the labels the run evaluated
            table, _ = self.reader.label_table(ANNOTATE_FIELDS)
            for n, cat, by in zip(self._positions(table).tolist(), table["category"].to_pylist(),
                                  table["judge"].to_pylist(), strict=True):
                if n >= 0:  # a repeated id: the newest record wins (append-only log)
                    category[n], judge[n] = cat or "", by or ""
        elif self.provided:  # labels that ship with the data (suites): the instances the run read
            self.load_instances()
            for item_id, inst in self.instances.items():
                n = self.position.get(item_id)
                if n is not None:
                    category[n] = str(inst.units_of("response")[0].category)
                    judge[n] = "data"
        self.category = category
        self.judge = judge
        # your own ids (a responses run's `id` column) beside haldet's, where the data gives them
        self.source_id = [str(self.instances[i].meta.get("source_id", "")) if i in self.instances else ""
                          for i in self.ids]
        self.labels = np.array([BINARY.get(c, -1) for c in category], dtype=np.int8)

    def load_instances(self) -> None:
        """The cell's dataset items (units, their labels, references), loaded as the run loaded them, for cells whose
        answers came with the data (suites); a dataset that cannot be loaded here leaves a note instead (the explorer
        then shows what the run directory holds)."""
        if self.instances or self.instances_note or not self.provided:
            return
        try:
            self.instances = {inst.id: inst for inst in load_instances(self.run.manifest, self.dataset)}
        except Exception as exc:  # any failure to reload the data is shown, never fatal to the explorer
            message = exc.message if isinstance(exc, HaldetError) else f"{type(exc).__name__}: {exc}"
            self.instances_note = f"the dataset could not be reloaded here ({message.splitlines()[0][:300]})"

    def _load_scores(self) -> list[ScoreColumn]:
        out = []
        for log in self.reader.score_logs():
            read = self.reader.scores(log)
            column = self._column(log, read.key, read.table)
            calibrated = self.reader.calibrated(log, self.reader.recorded_key(log))
            if calibrated is not None and calibrated.get("key") == column.key:  # made from the scores shown
                probs = calibrated.get("probabilities") or {}
                column.probabilities = np.array([math.nan if probs.get(i) is None else float(probs[i])
                                                 for i in self.ids])
                column.calibration = str(calibrated.get("method") or "calibrated")
            out.append(column)
        return out

    def _column(self, log: ScoreLog, key: str | None, table: pa.Table) -> ScoreColumn:
        """One log's scores under the key read (`table`: its records under that key) in cell order."""
        values = np.full(len(self.ids), np.nan)
        column = ScoreColumn(log.stem, log.detector, log.level, key, values)
        if not table.num_rows:
            return column
        at = self._positions(table)
        rows = np.flatnonzero(at >= 0)
        unit_rows = table["values"].is_valid().to_numpy(zero_copy_only=False)
        if not unit_rows[rows].any():  # one value per item
            vals = pc.fill_null(table["value"], np.nan).to_numpy()
            values[at[rows]] = vals[rows]  # a repeated id: the newest record wins
            nan_rows = rows[~np.isfinite(vals[rows])]
            for item_id, reason in zip(table["id"].take(nan_rows).to_pylist(),
                                       table["reason"].take(nan_rows).to_pylist(), strict=True):
                column.reasons[item_id] = reason or ""
            return column
        for n, item_id, vals, reasons in zip(at[rows].tolist(), table["id"].take(rows).to_pylist(),
                                             table["values"].take(rows).to_pylist(),
                                             table["reasons"].take(rows).to_pylist(), strict=True):
            vals = [math.nan if v is None else float(v) for v in vals or []]  # unit level: one value per unit
            reasons = [str(x or "") for x in reasons or []]
            column.units[item_id] = (vals, reasons)
            finite = [v for v in vals if math.isfinite(v)]
            values[n] = max(finite) if finite else math.nan
            if not finite:
                column.reasons[item_id] = "; ".join(sorted({x for x in reasons if x})) or "no scored unit"
        return column

    def _versions(self, path: Path) -> tuple[Any, ...]:
        """The version of a stage log and of the keys that pick its records (`keys.json`)."""
        return (*self._stat(path), *self._stat(self.root / KEYS))

    @staticmethod
    def _stat(path: Path) -> tuple[Any, ...]:
        try:
            st = path.stat()
            return (st.st_size, st.st_mtime_ns)
        except FileNotFoundError:
            return ()

    # ---- reading ----------------------------------------------------------------------------------------------
    def _index(self, stage: str) -> tuple[Path, dict[str, int]]:
        """Byte offset of each item's record in one stage log (under the keys the run used; the newest of them),
        built once per version of the log and of `keys.json`."""
        if stage not in EVIDENCE_STAGES:
            raise KeyError(stage)
        path = self.root / f"{stage}.jsonl"
        stat = self._versions(path)
        cached = self._offsets.get(stage)
        if cached is None or cached[0] != stat:
            table, offsets = self.reader.record_table(stage, ID_FIELDS)
            cached = self._offsets[stage] = (stat, dict(zip(table["id"].to_pylist(), offsets.tolist(), strict=True)))
        return path, cached[1]

    def preload(self) -> Cell:
        """Everything a page reads, read now: the item table, every evidence log's index, every column's ranks."""
        self.ensure()
        for stage in EVIDENCE_STAGES:
            self._index(stage)
        for name in self.columns:
            self.order(name)
            self._finite_sorted(name)
        return self

    def record(self, stage: str, item_id: str) -> dict[str, Any] | None:
        """One item's record in one stage log, under the keys the run used (the label the run evaluated)."""
        path, index = self._index(stage)
        offset = index.get(item_id)
        if offset is None:
            return None
        with open(path, "rb") as fh:
            fh.seek(offset)
            return decode(fh.readline().rstrip(b"\n"), path, offset)

    def order(self, column: str) -> np.ndarray:
        """Each item's rank by this column's score (1 = highest, most suspected; NaN scores rank last)."""
        if column not in self._order:
            values = self.columns[column].values
            idx = np.argsort(np.where(np.isfinite(values), -values, np.inf), kind="stable")
            rank = np.empty(len(values), dtype=np.int64)
            rank[idx] = np.arange(1, len(values) + 1)
            self._order[column] = rank
        return self._order[column]

    def percentile(self, column: str, n: int) -> float | None:
        """Share of this cell's scored items with a score <= item n's (100 = the highest score)."""
        values = self.columns[column].values
        finite = self._finite_sorted(column)
        if not math.isfinite(values[n]) or not len(finite):
            return None
        return 100.0 * np.searchsorted(finite, values[n], side="right") / len(finite)

    def _finite_sorted(self, column: str) -> np.ndarray:
        if column not in self._sorted:
            values = self.columns[column].values
            self._sorted[column] = np.sort(values[np.isfinite(values)])
        return self._sorted[column]

    def threshold(self, column: str) -> Threshold:
        """The column's decision threshold: best F1 on the validation items (the protocol's rule). A run that scored
        no validation items (the default protocol scores test only) gets the best-F1 threshold on test, labelled
        as such in its `source`."""
        values = self.columns[column].values
        for part, what in (("val", "validation"), ("test", "test")):
            mask = (self.split == part) & (self.labels >= 0) & np.isfinite(values)
            t = best_f1_threshold(self.labels[mask], values[mask]) if mask.any() else None
            if t is not None:
                note = "" if part == "val" else " (this run scored no validation items: optimistic)"
                return Threshold(t, f"best F1 on {int(mask.sum())} {what} items{note}")
        return Threshold(None, "no labelled scores with a hallucinated item to choose a threshold on")

    def search(self, text: str) -> np.ndarray:
        needle = text.lower()
        return np.fromiter((needle in s for s in self._search), dtype=bool, count=len(self._search))


class RunSource:
    """One run directory given to `haldet view`: manifest, result rows (none yet while the first cell runs) and
    its cells."""

    def __init__(self, index: int, root: Path) -> None:
        root = Path(root)
        if not root.is_dir():
            raise HaldetError("run directory not found", where=str(root), hint="pass the --out DIR of a `haldet run`")
        store = RunStore(root)
        manifest = store.read_manifest()
        # a merged report (`haldet report A B --out DIR`) holds results only: its rows name their runs
        self.report_only = manifest is None and (root / "results.json").exists()
        if manifest is None and not self.report_only:
            raise HaldetError("not a run directory (no manifest.json or results.json)", where=str(root),
                              hint="pass the --out DIR of a `haldet run` or of a `haldet report`")
        self.index, self.root, self.manifest = index, root, manifest or {}
        self._cells: dict[tuple[str, str], Cell] = {}

    @property
    def name(self) -> str:
        return self.root.name

    @property
    def status(self) -> str:
        return "merged report" if self.report_only else str(self.manifest.get("status") or "unknown")

    def refresh(self) -> None:
        """Re-read the manifest (a run in progress adds cells and results as it goes)."""
        manifest = RunStore(self.root).read_manifest()
        if manifest is not None:
            self.manifest = manifest

    def rows(self) -> list[dict[str, Any]]:
        path = self.root / "results.json"
        if not path.exists():
            return []
        rows = read_json(path)
        if not isinstance(rows, list):
            raise HaldetError("results.json must hold a list of rows", where=str(path))
        # a merged report's rows keep the run they came from
        return [{**r, "run": r.get("run") if self.report_only and r.get("run") else self.name}
                for r in rows if isinstance(r, dict)]

    def cells(self) -> list[Cell]:
        """Finished cells from the manifest, then cells of the config that have stored records so far."""
        entries = {(str(c.get("dataset")), str(c.get("model"))): c for c in self.manifest.get("cells") or []}
        config = self.manifest.get("config") or {}
        wanted = list(entries) + [(d, m) for m in config.get("models") or [] for d in config.get("datasets") or []
                                  if (d, m) not in entries]
        out = []
        for key in wanted:
            if key not in self._cells or self._cells[key].entry != entries.get(key, {}):  # new, or just finished
                self._cells[key] = Cell(self, key[0], key[1], entries.get(key, {}))
            cell = self._cells[key]
            if key in entries or cell.root.is_dir():
                out.append(cell)
        return out


def load_instances(manifest: dict[str, Any], dataset: str) -> list[Any]:
    """The instances a run's cell evaluated, loaded with the run's recorded data settings as the run loads them."""
    from haldet.flow.cell import load_instances as load  # lazy: sklearn, scipy

    return load(RunConfig.model_validate(manifest.get("config") or {}), dataset)[0]


class Explorer:
    """The runs given to `haldet view`, in order (a cell present in several keeps each run's own copy)."""

    def __init__(self, roots: Sequence[Path | str]) -> None:
        if not roots:
            raise HaldetError("no run directory given", where="haldet view", hint="haldet view RUN [RUN ...]")
        self.runs = [RunSource(i, Path(r)) for i, r in enumerate(roots)]

    def rows(self) -> list[dict[str, Any]]:
        return [row for run in self.runs for row in run.rows()]

    def run(self, index: int) -> RunSource:
        if not 0 <= index < len(self.runs):
            raise LookupError(f"no run number {index} (runs are numbered 0 to {len(self.runs) - 1})")
        return self.runs[index]

    def cell(self, run: int, dataset: str, model: str) -> Cell:
        for cell in self.run(run).cells():
            if cell.dataset == dataset and cell.model == model:
                return cell.ensure()
        raise LookupError(f"run {self.runs[run].name} has no cell {dataset} x {model}")

    def cells(self) -> Iterable[Cell]:
        for run in self.runs:
            yield from run.cells()

    def find_item(self, item_id: str, run: int | None, model: str | None) -> list[Cell]:
        """Cells holding `item_id` (its dataset is the id's first part), narrowed by run and model when given."""
        dataset = item_id.split("/", 1)[0]
        out = []
        for cell in self.cells():
            if cell.dataset != dataset or (run is not None and cell.run.index != run) or \
                    (model is not None and cell.model != model):
                continue
            if item_id in cell.ensure().position:
                out.append(cell)
        return out
