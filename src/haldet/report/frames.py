"""A stored run as pandas DataFrames (`haldet.load_run`): results, items, labels and scores, read, never recomputed.

- `results`: the tidy result rows (results.json), one per dataset, model, detector, level and metric.
- `items`: one row per answered item of each cell: the prompt as the model read it, the response (generated, or
  given and teacher-forced), its split part, its label and where the label came from; `source_id`: your own
  id of a responses run's item (its `id` column as given, else its row number), for a one-line merge.
- `labels`: the binary labels alone: the judges' (annotate.jsonl, with their reasoning) or the data's own (a
  suite's given labels, read back by loading the run's dataset with its recorded settings).
- `scores`: one row per detector, level, item and unit (unit 0 = the response at response level), with the reason
  of a NaN score; a suite's units come with their text and label (`unit_text`, `unit_label`). Scores are those the
  run recorded in its manifest (their score key), as the reports read them.
Every record is read through the run directory's one reader (`haldet.store.reader`): labels are those the run
evaluated, under its judge's keys, whatever other judges `haldet annotate --compare-with` added to the same log.

`RunFrames.table()` joins items with one column per detector: the view to sort and read a run's answers by.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from haldet.config import RunConfig
from haldet.errors import HaldetError
from haldet.report.rundata import RunData, load_run
from haldet.schema import Instance
from haldet.store import RunStore
from haldet.store.names import ScoreLog
from haldet.store.reader import CellReader, RunReader

if TYPE_CHECKING:
    import pandas

BINARY = {"hallucination": 1, "correct": 0}
ITEM_COLUMNS = ["dataset", "model", "id", "source_id", "split", "question", "context", "prompt", "response",
                "provided", "n_tokens", "finish_reason", "label", "label_source", "reasoning"]
SCORE_COLUMNS = ["dataset", "model", "detector", "level", "train_labels", "id", "unit", "unit_text", "unit_label",
                 "split", "score", "reason"]
LABEL_COLUMNS = ["dataset", "model", "id", "label", "category", "label_source", "reasoning"]


@dataclass
class RunFrames:
    """A run directory's results, items, labels and scores as DataFrames (see the module docstring); `notes` says
    what could not be read (e.g. a suite's data file moved away, so its given labels are unknown)."""

    root: Path
    manifest: dict[str, Any]
    results: pandas.DataFrame
    items: pandas.DataFrame
    labels: pandas.DataFrame
    scores: pandas.DataFrame
    notes: list[str] = field(default_factory=list)

    def table(self, level: str = "response", dataset: str | None = None, model: str | None = None) -> pandas.DataFrame:
        """Items with one column per detector (its score at `level`; unit levels: one row per unit): the table to
        sort by a detector and read the answers it flags."""
        scores = self.scores[self.scores["level"] == level]
        items = self.items
        if dataset is not None:
            scores, items = scores[scores["dataset"] == dataset], items[items["dataset"] == dataset]
        if model is not None:
            scores, items = scores[scores["model"] == model], items[items["model"] == model]
        if scores.empty:  # nothing scored (yet, or every detector failed): the items alone
            return items.reset_index(drop=True)
        keys = ["dataset", "model", "id", "unit"]
        name = scores["detector"] + scores["train_labels"].map(lambda t: f"@{t}" if t else "")
        wide = scores.assign(column=name).pivot_table(index=keys, columns="column", values="score", aggfunc="last",
                                                      dropna=False).reset_index()
        wide.columns.name = None
        if level != "response":  # each unit's text and label beside its scores
            wide = scores[[*keys, "unit_text", "unit_label"]].drop_duplicates(keys).merge(wide, on=keys)
        merged = items.merge(wide, on=["dataset", "model", "id"], how="inner")
        return merged.reset_index(drop=True)


def load_frames(root: Path | str) -> RunFrames:
    """Read a run directory (finished, or still running: what is stored so far)."""
    import pandas

    root = Path(root)
    store = RunStore(root)
    notes: list[str] = []
    if not (root / "results.json").exists() and store.read_manifest() is not None:  # no cell finished yet
        run = RunData(root, store.read_manifest() or {}, [])
        notes.append("no cell has finished yet: no results")
    else:
        run = load_run(root)
    items: list[dict[str, Any]] = []
    labels: list[dict[str, Any]] = []
    scores: list[dict[str, Any]] = []
    suite = (run.manifest.get("config") or {}).get("suite")
    reader = RunReader(root)
    for dataset, model in reader.running():
        notes.append(f"{dataset} | {model} is still running: its items so far, no scores yet")
    for cell in [*run.cells(), *({"dataset": d, "model": m} for d, m in reader.running())]:
        dataset, model = str(cell.get("dataset")), str(cell.get("model"))
        cell_reader = reader.cell(dataset, model, cell)
        part = cell_reader.parts()
        given = _given(run, dataset, notes) if suite else {}
        judged = cell_reader.labels()
        cell_labels = {}
        for item_id, rec in judged.items():
            cell_labels[item_id] = {"label": BINARY.get(str(rec.get("category"))), "category": rec.get("category"),
                                    "label_source": f"judge {rec.get('judge', '')}".strip(),
                                    "reasoning": rec.get("reasoning", "")}
        for item_id, inst in given.items():
            category = inst.units_of("response")[0].category.value
            if category in BINARY:
                cell_labels.setdefault(item_id, {"label": BINARY[category], "category": category,
                                                 "label_source": "data", "reasoning": ""})
        labels += [{"dataset": dataset, "model": model, "id": i, **lab} for i, lab in cell_labels.items()]
        for item_id, rec in cell_reader.records("generate").items():
            lab = cell_labels.get(item_id, {})
            inst = given.get(item_id)  # type: ignore[assignment]
            question, context = (inst.question, inst.context) if inst is not None else (None, None)
            source_id = None if inst is None else inst.meta.get("source_id")  # your own id (responses)
            items.append({"dataset": dataset, "model": model, "id": item_id, "source_id": source_id,
                          "split": part.get(item_id),
                          "question": question, "context": context, "prompt": rec.get("prompt"),
                          "response": rec.get("response"),
                          "provided": bool(rec.get("provided")), "n_tokens": rec.get("n_tokens"),
                          "finish_reason": rec.get("finish_reason"), "label": lab.get("label"),
                          "label_source": lab.get("label_source"), "reasoning": lab.get("reasoning")})
        for log, det in cell_reader.detector_logs():
            scores += _score_rows(cell_reader, log, dataset, model, det, part, given)
    frame = pandas.DataFrame
    return RunFrames(run.root, run.manifest, frame(run.rows), frame(items, columns=ITEM_COLUMNS),
                     frame(labels, columns=LABEL_COLUMNS), frame(scores, columns=SCORE_COLUMNS), notes)


def _score_rows(cell: CellReader, log: ScoreLog, dataset: str, model: str, det: Mapping[str, Any],
                part: dict[str, str], given: dict[str, Instance]) -> list[dict[str, Any]]:
    """One row per item and unit of a detector's score log, under the key the run recorded."""
    name, level, train = str(det.get("name")), str(det.get("level") or "response"), str(det.get("train_labels") or "")
    base = {"dataset": dataset, "model": model, "detector": name, "level": level, "train_labels": train}
    out = []
    for item_id, rec in cell.scores(log).by_id().items():
        values = rec["values"] if rec.get("values") is not None else [rec.get("value")]
        reasons = rec["reasons"] if rec.get("reasons") is not None else [rec.get("reason") or ""]
        units = given[item_id].units_of(level) if item_id in given and level != "response" else []
        for unit, (value, reason) in enumerate(zip(values, reasons, strict=True)):
            text, label = (units[unit].text, units[unit].binary) if unit < len(units) else (None, None)
            out.append({**base, "id": item_id, "unit": unit, "unit_text": text, "unit_label": label,
                        "split": part.get(item_id), "score": float("nan") if value is None else float(value),
                        "reason": reason or ""})
    return out


def _given(run: RunData, dataset: str, notes: list[str]) -> dict[str, Instance]:
    """A suite's items, whose labels (and units) ship with the data: the run's dataset loaded again with its
    recorded settings, as the run loads it."""
    from haldet.flow.cell import load_instances  # lazy: sklearn, scipy

    config = RunConfig.model_validate(run.manifest["config"])
    try:
        instances, _, _ = load_instances(config, dataset)
    except HaldetError as exc:
        notes.append(f"{dataset}: the labels that ship with its data are not shown: {exc.message}")
        return {}
    return {inst.id: inst for inst in instances}
