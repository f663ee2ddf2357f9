"""Every reader of a run shows the evidence the run used, whatever else its evidence logs hold.

A stage log keeps the records of every setting it was computed under: a later run with other generation settings
appends another answer for the same item, a second verdict model appends its verdicts, another sampling config its
samples. The records a run used are those under the keys it recorded in `keys.json`; a reader that takes the newest
record per item shows the other setting's answer beside this run's scores. Each test appends, for every item, a
record under another key to each evidence log and checks that nothing the run's results, the Python API, `haldet
report` or the explorer show changes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

import haldet
from haldet.explorer.app import create_app
from haldet.explorer.data import Explorer
from haldet.report.build import report_runs
from haldet.store import KEYS, RunStore
from haldet.testing.synthetic_run import DATASET, MODEL, write_synthetic_run

OTHER = "other-settings"
EVIDENCE = ("generate", "sample", "auxiliary", "verdict")


def append_other_settings(root: Path, dataset: str, model: str) -> dict[str, int]:
    """Append to each evidence log, for every item it holds, a newer record under a key of other settings, with every
    text changed (a later generation, samples, confidence text, a second verdict model); returns how many per log."""
    cell = RunStore(root).cell(dataset, model)
    added = {}
    for stage in EVIDENCE:
        path = cell.root / f"{stage}.jsonl"
        if not path.exists():
            continue
        records = {r["id"]: r for r in map(json.loads, path.read_text().splitlines()) if r.get("id")}
        added[stage] = cell.log(stage).append([_changed(r) for r in records.values()])
    return added


def _changed(rec: dict[str, Any]) -> dict[str, Any]:
    out = {**rec, "key": f"{OTHER}-{rec['key']}"}
    for name, value in rec.items():
        if name in ("prompt", "response", "verbalized", "text", "raw", "reasoning", "self_eval_text"):
            out[name] = f"OTHER SETTINGS {value}"
        elif name == "samples":
            out[name] = [f"OTHER SETTINGS {s}" for s in value]
        elif name in ("verbalized_value", "p_true", "value") and isinstance(value, float):
            out[name] = 1.0 - value
        elif name == "label" and isinstance(value, str):
            out[name] = "OTHER"
    return out


def shown(root: Path, tmp_path: Path, *, report: bool = False) -> dict[str, Any]:
    """What the readers show of a run: results, the API's DataFrames and test scores, the explorer's item table,
    each item's evidence records and item page, and (`report`) what `haldet report` writes, its HTML page aside (its
    figures' SVG ids differ from one drawing to the next)."""
    out: dict[str, Any] = {"results": json.loads((root / "results.json").read_text())}
    if report:
        rebuilt = tmp_path / f"report{len(list(tmp_path.glob('report*')))}"
        written = report_runs([root], rebuilt, n_boot=20)[0]
        out["report"] = {name: Path(path).read_text() for name, path in written.items()
                         if Path(path).suffix in (".json", ".md", ".csv", ".tex")}
    run = haldet.load_run(root)
    for name in ("items", "labels", "scores"):
        out[name] = getattr(run, name).fillna("NaN").to_dict("records")
    out["table"] = run.table().fillna("NaN").to_dict("records")
    client = TestClient(create_app(Explorer([root])), base_url="http://127.0.0.1")
    for cell in RunStore(root).read_manifest()["cells"]:
        dataset, model = cell["dataset"], cell["model"]
        out[f"scores {dataset}"] = haldet.load_scores(root, dataset, model).fillna(-1.0).to_dict("records")
        view = Explorer([root]).cell(0, dataset, model)
        out[f"explorer {dataset}"] = {"ids": view.ids, "question": view.question, "answer": view.answer,
                                      "labels": view.labels.tolist(), "split": view.split.tolist(),
                                      "records": {i: {s: view.record(s, i) for s in (*EVIDENCE, "annotate")}
                                                  for i in view.ids}}
        pages = {}
        for item_id in view.ids[:3]:
            page = client.get(f"/item/{item_id}", params={"run": 0, "model": model})
            assert page.status_code == 200, page.text[:500]
            pages[item_id] = page.text
        out[f"pages {dataset}"] = pages
    return out


def assert_same(before: dict[str, Any], after: dict[str, Any]) -> None:
    for name in before:
        assert after[name] == before[name], f"{name} changed"
    assert "OTHER SETTINGS" not in json.dumps(after, default=str)


def add_verdicts(root: Path) -> None:
    """The synthetic run's cell with the verdicts of a prompted model (two asks per item) the run used."""
    cell = RunStore(root).cell(DATASET, MODEL)
    ids = [r["id"] for r in map(json.loads, (cell.root / "generate.jsonl").read_text().splitlines())]
    recs = [{"id": i, "key": f"v-{ask}-{n}", "ask": ask, "label": "supported" if n % 2 else "unsupported",
             "raw": f"the {ask} verdict of item {n}"} for n, i in enumerate(ids) for ask in ("zero_shot", "few_shot")]
    cell.log("verdict").append(recs)
    cell.record_keys("verdict", {i: [f"v-zero_shot-{n}", f"v-few_shot-{n}"] for n, i in enumerate(ids)})


def test_other_settings_records_change_nothing_a_reader_shows(tmp_path: Path) -> None:
    root = tmp_path / "run"
    write_synthetic_run(root, n_items=30, n_detectors=2)
    add_verdicts(root)
    before = shown(root, tmp_path, report=True)
    assert before["report"] and before["explorer synth_qa"]["records"][f"{DATASET}/test/4"]["verdict"]["ask"] == \
        "few_shot"
    assert append_other_settings(root, DATASET, MODEL) == dict.fromkeys(EVIDENCE, 30)
    assert_same(before, shown(root, tmp_path, report=True))


def test_the_check_fails_when_a_reader_takes_the_newest_evidence(tmp_path: Path) -> None:
    """Negative control: a run whose cell recorded only its labels' keys (run format 2, before evidence keys were
    recorded) is read as the newest record per item; the other settings' answers then show, and the check fails."""
    root = tmp_path / "run"
    write_synthetic_run(root, n_items=30, n_detectors=1)
    store = RunStore(root)
    manifest = store.read_manifest()
    store.write_manifest({**manifest, "run_format": 2})
    keys_path = store.cell(DATASET, MODEL).root / KEYS
    keys_path.write_text(json.dumps({"annotate": json.loads(keys_path.read_text())["annotate"]}))
    before = shown(root, tmp_path)
    append_other_settings(root, DATASET, MODEL)
    with pytest.raises(AssertionError, match="changed"):
        assert_same(before, shown(root, tmp_path))


def test_a_real_run_records_the_keys_of_every_record_it_used(tmp_path: Path, tiny_smol_llama: Path) -> None:
    """Your own labelled responses scored by a tiny real model with detectors that read the teacher-forced answer,
    samples and verbalized confidence: the cell's `keys.json` names the record of each stage the run used, and
    records of other settings appended to every log change nothing shown."""
    rows = [{"prompt": f"What is the capital of country {i}?", "response": f"The capital is city {i}.",
             "label": i % 2} for i in range(12)]
    root = tmp_path / "run"
    haldet.score_responses(rows, model=str(tiny_smol_llama), detectors=["perplexity", "lexical_similarity",
                                                                        "verbalized"],
                           out=root, progress=False, sample__k=2, sample__max_new_tokens=8,
                           auxiliary__max_new_tokens=8, evaluation__bootstrap=20)
    cell = RunStore(root).read_manifest()["cells"][0]
    assert {d["name"]: d["trains"] for d in cell["detectors"]} == dict.fromkeys(  # what `haldet report` reads
        ["perplexity", "lexical_similarity", "verbalized"], False)
    store = RunStore(root).cell(cell["dataset"], cell["model"])
    keys = json.loads((store.root / KEYS).read_text())
    ids = {json.loads(line)["id"] for line in (store.root / "generate.jsonl").read_text().splitlines()}
    assert {"generate", "sample", "auxiliary"} <= set(keys)
    for stage in ("generate", "sample", "auxiliary"):
        lines = (store.root / f"{stage}.jsonl").read_text().splitlines()
        logged = {(r["id"], r["key"]) for r in map(json.loads, lines)}
        assert set(keys[stage]) == ids and {(i, k) for i, k in keys[stage].items()} <= logged, stage
    before = shown(root, tmp_path)
    added = append_other_settings(root, cell["dataset"], cell["model"])
    assert added == {"generate": 12, "sample": 12, "auxiliary": 12}
    after = shown(root, tmp_path)
    assert_same(before, after)
    answers = [r["response"] for r in after["items"]]
    assert answers == [r["response"] for r in rows] and np.isfinite([r["perplexity"] for r in after["table"]]).all()


def test_the_run_records_every_record_of_a_stage_with_several_per_item(tmp_path: Path) -> None:
    """The verdict stage keeps one record per ask: all of them are recorded; a later training-label set adds its own
    (`add`), a new run of the cell replaces them."""
    from haldet.config import RunConfig
    from haldet.stages.base import CellContext
    from haldet.stages.loader import record_used
    from haldet.store import CellStore

    ctx = CellContext(config=RunConfig(), dataset="d", model="m", store=CellStore(tmp_path),
                      backend_factory=lambda: None)  # type: ignore[arg-type,return-value]
    verdicts = {"a": {"id": "a", "asks": {"zero": {"key": "k2"}, "few": {"key": "k1"}}}, "b": {"id": "b", "asks": {}}}
    record_used(ctx, {"verdict": verdicts, "generate": {"a": {"id": "a", "key": "g"}}})
    assert json.loads((tmp_path / KEYS).read_text()) == {"verdict": {"a": ["k1", "k2"]}, "generate": {"a": "g"}}
    record_used(ctx, {"verdict": {"a": {"id": "a", "asks": {"few": {"key": "k3"}}}}}, add=True)
    assert json.loads((tmp_path / KEYS).read_text())["verdict"] == {"a": ["k1", "k2", "k3"]}
    record_used(ctx, {"verdict": {"a": {"id": "a", "asks": {"few": {"key": "k4"}}}}})
    assert json.loads((tmp_path / KEYS).read_text()) == {"verdict": {"a": "k4"}, "generate": {"a": "g"}}
