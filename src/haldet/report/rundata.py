"""Read a finished run back for reporting: manifest, tidy results, and each cell's test labels and scores.

Nothing is recomputed, and every record is read through the run directory's one reader (`haldet.store.reader`):
the test labels are the judges' labels the run evaluated (1 = hallucination, 0 = correct; a suite's items without
one, e.g. your own responses, keep the label their data gives), restricted to
`split.json`'s test items; each detector's test scores are those under the score key the manifest recorded for it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from haldet.config import RunConfig
from haldet.defaults import skipped_detectors
from haldet.errors import HaldetError
from haldet.store import RunStore
from haldet.store.names import RESPONSE
from haldet.store.reader import RunReader

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

    def data_labels(self, dataset: str) -> dict[str, str]:
        """Item id -> the response-level category that ships with a suite's data (your own responses' `label`);
        {} for a benchmark run, whose labels are the judges', or when the data cannot be reloaded here (the data is
        reloaded as the run loaded it)."""
        config = self.manifest.get("config") or {}
        if not config.get("suite"):
            return {}
        from haldet.flow.cell import load_instances  # lazy: sklearn, scipy

        try:
            instances, _, _ = load_instances(RunConfig.model_validate(config), dataset)
        except HaldetError as exc:  # said, not hidden: the items that only the data labels are left out
            logging.getLogger("haldet").warning("%s: the labels that ship with its data cannot be read here, so its "
                                                "items without a judge's label are left out: %s", dataset, exc.message)
            return {}
        return {inst.id: inst.units_of("response")[0].category.value for inst in instances}

    def cell_scores(self, dataset: str, model: str, detectors: list[str] | None = None) -> CellScores | None:
        """Test labels and scores of one cell (each detector's response-level log; all of the cell's one-value
        logs when `detectors` is None, named by their log); None when the cell has no split (it failed before
        splitting)."""
        cell = RunReader(self.root).cell(dataset, model)
        test_ids = list(cell.split().get("test") or [])
        if not test_ids:
            return None
        labels = {i: str(rec.get("category")) for i, rec in cell.labels().items()}
        if any(i not in labels for i in test_ids):  # a suite's labels that ship with its data
            for item_id, category in self.data_labels(dataset).items():
                labels.setdefault(item_id, category)
        ids = [i for i in test_ids if labels.get(i) in BINARY]
        y = np.array([BINARY[labels[i]] for i in ids], dtype=int)
        out = CellScores(dataset, model, ids, y)
        logs = [(name, cell.log_of(name)) for name in detectors] if detectors is not None else \
            [(log.stem, log) for log in cell.score_logs() if log.level == RESPONSE]
        for name, log in logs:
            if not (cell.root / log.path).exists():
                continue
            read = cell.scores(log, ids)
            values = read.values()
            out.scores[name] = np.array([values.get(i, np.nan) for i in ids], dtype=np.float64)
            calibrated = cell.calibrated(log, cell.recorded_key(log))  # the probabilities of the scores evaluated
            if calibrated is not None:
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

