"""Every reader of a run shows the labels the run evaluated, whatever else `annotate.jsonl` holds.

`haldet annotate RUN --compare-with KIND` appends a second judge's labels to the same `annotate.jsonl`, under that
judge's key. The labels a run evaluated are those under its own judge's key; a reader that takes the newest record per
item instead reports the second judge's labels next to the run's scores. Each test appends a disagreeing second judge
(every binary label flipped) and checks a reader against results.json: `load_scores`, `load_run`, `haldet report`,
`haldet compare`, the HTML ROC curves and the explorer's data layer, on a synthetic run and on a real one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

import haldet
from haldet.evaluation.metrics import auroc
from haldet.store import KEYS, RUN_FORMAT, RunStore, ScoreLog
from haldet.testing.synthetic_run import DATASET, MODEL, write_synthetic_run

FLIP = {"hallucination": "correct", "correct": "hallucination"}
SECOND_KEY = "second-judge"


def append_second_judge(root: Path, dataset: str, model: str) -> int:
    """Append a second judge's labels, each binary label flipped, under a key of its own (as `--compare-with`
    does); returns how many."""
    cell = RunStore(root).cell(dataset, model)
    path = cell.root / "annotate.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    flipped = [{**r, "key": f"{SECOND_KEY}-{r['id']}", "judge": "rule:second", "category": FLIP[r["category"]],
                "reasoning": "the second judge disagrees"} for r in records if r.get("category") in FLIP]
    return cell.log("annotate").append(flipped)


def auroc_rows(root: Path) -> dict[tuple[str, str, str], float]:
    rows = json.loads((root / "results.json").read_text())
    return {(r["dataset"], r["model"], r["detector"]): r["value"] for r in rows
            if r["metric"] == "auroc" and r.get("value") is not None}


def finite_auroc(labels: np.ndarray, scores: np.ndarray) -> float:
    ok = np.isfinite(scores) & (labels >= 0)
    return float(auroc(labels[ok], scores[ok]))


def check_every_reader(root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, float]:
    """Each reader's AUROC of each detector, asserted equal to results.json's; returns load_scores' by detector."""
    from haldet.cli import app
    from haldet.explorer.data import Explorer
    from haldet.report import html
    from haldet.report.build import report_runs
    from haldet.report.rundata import load_run

    expected = auroc_rows(root)
    assert expected
    seen: dict[str, float] = {}
    for (dataset, model, detector), value in expected.items():
        frame = haldet.load_scores(root, dataset, model)  # the Python API
        got = finite_auroc(frame["label"].to_numpy(), frame[detector].to_numpy())
        seen[detector] = got
        assert got == pytest.approx(value, abs=1e-12), f"load_scores {detector}: {got} vs results {value}"

        run = haldet.load_run(root)  # the Python API's DataFrames
        table = run.table(dataset=dataset, model=model)
        test = table[table["split"] == "test"]
        assert finite_auroc(test["label"].to_numpy(dtype=float).astype(int), test[detector].to_numpy(dtype=float)) \
            == pytest.approx(value, abs=1e-12), f"load_run {detector}"
        labels = run.labels.set_index("id")
        assert not (labels["reasoning"] == "the second judge disagrees").any()

        result = CliRunner().invoke(app, ["compare", str(root), detector, detector, "--json", "--n-boot", "20",
                                          "-d", dataset])
        assert result.exit_code == 0, result.output
        compared = next(r for r in json.loads(result.stdout) if r["model"] == model)
        assert compared["auroc_a"] == pytest.approx(value, abs=1e-12), f"compare {detector}"

        cell = Explorer([root]).cell(0, dataset, model)  # the explorer's data layer
        test_at = cell.split == "test"
        assert finite_auroc(cell.labels[test_at].astype(int), cell.columns[detector].values[test_at]) \
            == pytest.approx(value, abs=1e-12), f"explorer {detector}"
        assert "second" not in (cell.record("annotate", cell.ids[int(np.flatnonzero(test_at)[0])]) or {})["judge"]

    curves: list[Any] = []  # the HTML report's ROC curves, as handed to the drawing
    made = html.cell_curves

    def spy(labels: Any, scores: Any) -> Any:
        roc, pr = made(labels, scores)
        curves.extend(roc)
        return roc, pr

    monkeypatch.setattr(html, "cell_curves", spy)
    rows = [r for r in json.loads((root / "results.json").read_text())]
    html.roc_section([load_run(root)], rows, n_boot=20)
    assert {c.name: c.value for c in curves} == pytest.approx({d: v for (_, _, d), v in expected.items()}, abs=1e-12)

    out = tmp_path / "rebuilt"  # `haldet report`: the rebuilt results are the run's
    _, rebuilt = report_runs([root], out, n_boot=20)
    assert auroc_rows(out) == expected
    assert len(rebuilt) == len(json.loads((root / "results.json").read_text()))
    return seen


def test_every_reader_keeps_the_runs_labels_on_a_synthetic_run(tmp_path, monkeypatch):
    root = tmp_path / "run"
    truth = write_synthetic_run(root, n_items=60, n_detectors=2)
    assert append_second_judge(root, DATASET, MODEL) == 60
    check_every_reader(root, tmp_path, monkeypatch)
    frame = haldet.load_scores(root, DATASET, MODEL)
    by_id = dict(zip(truth["ids"], truth["labels"].tolist(), strict=True))
    assert frame["label"].tolist() == [by_id[i] for i in frame["id"]]


def test_the_check_fails_when_a_reader_takes_the_newest_label(tmp_path, monkeypatch):
    """Negative control: a run whose records do not say which labels it evaluated (a run written before the run
    format recorded them) is read as the newest record per item; the second judge's labels then win, and the same
    check fails."""
    root = tmp_path / "run"
    write_synthetic_run(root, n_items=60, n_detectors=1)
    store = RunStore(root)
    manifest = store.read_manifest()
    manifest.pop("run_format", None)
    store.write_manifest(manifest)
    (store.cell(DATASET, MODEL).root / "keys.json").unlink()
    append_second_judge(root, DATASET, MODEL)
    with pytest.raises(AssertionError, match="load_scores"):
        check_every_reader(root, tmp_path, monkeypatch)


@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    """The issue's run: 60 items of the default dataset, perplexity, the embedded model."""
    root = tmp_path_factory.mktemp("reader") / "run"
    config = haldet.load_config(None, detectors=["perplexity"], limit=60)
    haldet.run(config, root)
    return root


@pytest.mark.slow
def test_every_reader_keeps_the_runs_labels_on_a_real_run(real_run, tmp_path, monkeypatch):
    manifest = RunStore(real_run).read_manifest()
    assert manifest["run_format"] == RUN_FORMAT
    cell = manifest["cells"][0]
    assert [d["log"] for d in cell["detectors"]] == ["scores/perplexity.jsonl"]
    keys = json.loads((RunStore(real_run).cell(cell["dataset"], cell["model"]).root / KEYS).read_text())["annotate"]
    split = json.loads((RunStore(real_run).cell(cell["dataset"], cell["model"]).root / "split.json").read_text())
    assert set(split["test"]) <= set(keys)  # every evaluated item's label key is recorded
    (dataset, model, _), value = next(iter(auroc_rows(real_run).items()))
    before = haldet.load_scores(real_run, dataset, model)
    assert finite_auroc(before["label"].to_numpy(), before["perplexity"].to_numpy()) == pytest.approx(value)
    assert append_second_judge(real_run, dataset, model) > 0
    seen = check_every_reader(real_run, tmp_path, monkeypatch)
    print(f"perplexity AUROC: results.json {value:.3f}, load_scores with a second judge {seen['perplexity']:.3f}")


@pytest.mark.parametrize(("log", "stem"), [(ScoreLog("perplexity"), "perplexity"),
                                           (ScoreLog.of("perplexity", "sentence", "x", suite=False), "perplexity"),
                                           (ScoreLog.of("ccp", "sentence", "", suite=True), "ccp@sentence"),
                                           (ScoreLog.of("saplma", "response", "noisy", suite=True),
                                            "saplma@response@noisy")])
def test_score_log_names_are_built_and_parsed_by_one_type(log, stem):
    """The names the protocols write are the names the readers parse back (the manifest records the path)."""
    from haldet.config import RunConfig
    from haldet.flow.protocol import Procedure

    assert log.stem == stem and log.name == f"scores/{stem}" and log.path == f"scores/{stem}.jsonl"
    assert ScoreLog.parse(log.path) == ScoreLog.parse(log.name) == ScoreLog.parse(stem) == \
        (log if log.spelled else ScoreLog(log.detector))
    assert log.calibrated == f"scores/{stem}.calibrated.json"
    if not log.spelled:
        assert Procedure(RunConfig()).score_log(log.detector, "response", "") == log.name
