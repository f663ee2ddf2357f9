"""Read a finished run back for reporting: manifest, tidy results, and each cell's test labels and scores.

Nothing is recomputed. Test scores are read from `scores/<detector>.jsonl` with the score key the run recorded
in the manifest (`cells[].detectors[].key`); a run written before keys were recorded falls back to the key that
covers the most test items (the newest such record per item). Labels are the newest `annotate.jsonl` record of
each test item (1 = hallucination, 0 = correct), restricted to the items of `split.json`'s test split.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from haldet.config import skipped_detectors
from haldet.errors import HaldetError
from haldet.store import RunStore

BINARY = {"hallucination": 1, "correct": 0}


@dataclass
class CellScores:
    """A cell's test items with labels, and each detector's test scores aligned to them (NaN = invalid/missing);
    `probabilities`: the calibrated P(hallucination) of the detectors a calibration ran for (same alignment)."""

    dataset: str
    model: str
    ids: list[str]
    labels: np.ndarray
    scores: dict[str, np.ndarray] = field(default_factory=dict)
    probabilities: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass
class RunData:
    root: Path
    manifest: dict[str, Any]
    rows: list[dict[str, Any]]

    @property
    def name(self) -> str:
        return self.root.name

    def cells(self) -> list[dict[str, Any]]:
        return list(self.manifest.get("cells") or [])

    def skipped_detectors(self) -> dict[str, str]:
        """Detectors this run left out on purpose (a run on the default list), with why."""
        return skipped_detectors((self.manifest.get("config") or {}).get("detectors") or [])

    def cell_scores(self, dataset: str, model: str, detectors: list[str] | None = None) -> CellScores | None:
        """Test labels and scores of one cell; None when the cell has no split (it failed before splitting)."""
        cell = RunStore(self.root).cell(dataset, model)
        split = cell.read_json("split.json")
        if not split or not split.get("test"):
            return None
        test_ids = list(split["test"])
        labels = _latest(cell.root / "annotate.jsonl", set(test_ids))
        ids = [i for i in test_ids if labels.get(i, {}).get("category") in BINARY]
        y = np.array([BINARY[labels[i]["category"]] for i in ids], dtype=int)
        out = CellScores(dataset, model, ids, y)
        entry = next((c for c in self.cells() if c.get("dataset") == dataset and c.get("model") == model), {})
        keys = {d.get("name"): d.get("key") for d in entry.get("detectors") or []}
        names = detectors if detectors is not None else _detector_files(cell.root / "scores")
        for name in names:
            path = cell.root / "scores" / f"{name}.jsonl"
            if not path.exists():
                continue
            values = _scores(path, set(ids), keys.get(name) or None)
            out.scores[name] = np.array([values.get(i, np.nan) for i in ids], dtype=np.float64)
            calibrated = cell.read_json(f"scores/{name}.calibrated.json")
            if calibrated and calibrated.get("key") == keys.get(name):  # the probabilities of the scores evaluated
                probs = calibrated.get("probabilities") or {}
                out.probabilities[name] = np.array([np.nan if probs.get(i) is None else probs[i] for i in ids],
                                                   dtype=np.float64)
        return out


def preset_lines(runs: Sequence[RunData]) -> list[str]:
    """'preset NAME (hash H)' of each run that ran under a packaged preset (the report headers name it)."""
    out = []
    for run in runs:
        preset = run.manifest.get("preset") or {}
        if preset.get("name"):
            where = f" (run {run.name})" if len(runs) > 1 else ""
            out.append(f"preset {preset['name']} (hash {preset.get('hash', '?')}){where}: the paper's settings under "
                       "the run's config file and flags; docs/replication.md lists what still differs")
    return out


def load_run(root: Path | str) -> RunData:
    """A run directory as written by `haldet run` (manifest.json and results.json must exist)."""
    root = Path(root)
    if not root.is_dir():
        raise HaldetError("run directory not found", where=str(root), hint="pass the --out DIR of a `haldet run`")
    store = RunStore(root)
    manifest = store.read_manifest()
    if manifest is None:
        raise HaldetError("not a run directory (no manifest.json)", where=str(root),
                          hint="pass the --out DIR of a `haldet run`")
    return RunData(root, manifest, store.read_results())


def _detector_files(folder: Path) -> list[str]:
    return sorted(p.stem for p in folder.glob("*.jsonl")) if folder.is_dir() else []


def read_records(path: Path) -> list[dict[str, Any]]:
    """Complete JSONL records (a cut last line is no record); a corrupt line is an error naming it. The lines are
    parsed as one JSON array (one parser call for the whole file: a third of the per-line cost on large logs);
    only when that fails is the file parsed line by line to name the bad line."""
    if not path.exists():
        return []
    lines = [raw for raw in path.read_bytes().split(b"\n")[:-1] if raw.strip()]
    try:
        records = list(json.loads(b"[" + b",".join(lines) + b"]"))
        if len(records) == len(lines):  # a line holding two values (`{...}, {...}`) is no record: read line by line
            return records
    except json.JSONDecodeError:
        pass
    out = []
    for lineno, raw in enumerate(path.read_bytes().split(b"\n")[:-1], start=1):
        if not raw.strip():
            continue
        try:
            out.append(json.loads(raw))
        except json.JSONDecodeError as exc:
            raise HaldetError(f"corrupt record at line {lineno}: {exc.msg}", where=str(path),
                              hint="delete that line (or the file) and rerun the run to recompute it") from None
    return out


def _latest(path: Path, ids: set[str]) -> dict[str, dict[str, Any]]:
    """Newest record per id (files are append-only, so later lines are newer)."""
    out: dict[str, dict[str, Any]] = {}
    for rec in read_records(path):
        if rec.get("id") in ids:
            out[rec["id"]] = rec
    return out


def _scores(path: Path, ids: set[str], key: str | None) -> dict[str, float]:
    records = [r for r in read_records(path) if r.get("id") in ids]
    if key is None:  # no recorded key: the key covering most test items, ties to the newest
        coverage: dict[str, set[str]] = {}
        last: dict[str, int] = {}
        for n, r in enumerate(records):
            coverage.setdefault(r.get("key", ""), set()).add(r["id"])
            last[r.get("key", "")] = n
        if not coverage:
            return {}
        key = max(coverage, key=lambda k: (len(coverage[k]), last[k]))
    out: dict[str, float] = {}
    for r in records:
        if r.get("key") == key:
            v = r.get("value")
            out[r["id"]] = np.nan if v is None else float(v)
    return out


def index_rows(rows: list[Mapping[str, Any]], metric: str = "auroc") -> dict[tuple[str, str, str], Mapping[str, Any]]:
    """(dataset, model, detector) -> that metric's row."""
    return {(str(r["dataset"]), str(r["model"]), str(r["detector"])): r for r in rows if r.get("metric") == metric}


def skipped_in_runs(runs: Sequence[RunData], rows: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Detector -> why it was not run, over the runs, leaving out any detector that has results."""
    present = {str(r.get("detector")) for r in rows}
    out: dict[str, str] = {}
    for run in runs:
        out.update({d: why for d, why in run.skipped_detectors().items() if d not in present})
    return out


def skipped_lines(skipped: Mapping[str, str]) -> list[str]:
    """One line per left-out detector: which, why, and how to run it anyway."""
    return [f"not run: {d}, {why} (add it with --detector {d})" for d, why in skipped.items()]


def merge_runs(runs: Sequence[RunData]) -> list[dict[str, Any]]:
    """Rows of several runs as one table; a (dataset, model, detector, metric) seen in more than one run keeps the
    row of the later run given (each row records the run it came from in `run`)."""
    merged: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    for run in runs:
        for row in run.rows:
            key = (str(row["dataset"]), str(row["model"]), str(row["detector"]), str(row["metric"]))
            merged[key] = {**row, "run": run.name}
    return list(merged.values())

